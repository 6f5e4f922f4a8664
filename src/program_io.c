/*
 * program_io.c - a compiled Program written to bytes and read back
 * (ember_program_save, ember_program_load), so that a process runs what
 * another compiled without ember's passes, a C compiler or the disk cache.
 *
 * The blob is a fixed header (io_header: magic, format version, byte order,
 * total length, ember's version, the target, CUDA's facts, the SHA-256 of
 * the payload),
 * then the payload: the program's fields in the order io_program lists
 * them (a CUDA program's images last), then the kernels' shared object
 * (CPU) with its own SHA-256.  io_program
 * is the one list of fields: the same walk writes them and reads them back,
 * so a new field of the Program is one line there (and a bump of
 * EMBER_PROGRAM_FORMAT).  Pointers become counts and ids: a table is its
 * count and its elements, a string its length and bytes, a symbolic
 * value's size expressions (PValue.sx, over the program's nsyms size
 * variables) trees in preorder, and the ids the Program holds (values,
 * nodes, kernels, calls) are written as they are.  A symbolic program's
 * arena is planned per call from its values' lifetimes and expressions
 * (program.c), so the blob holds no size for it.
 *
 * The kernels travel inside the blob as the compiled object, not as a name
 * for the disk cache: the cache's key covers the C compiler's identity
 * (`cc --version`, a process per lookup) and the machine, so a lookup needs
 * a compiler where the program is loaded, and an entry may have been
 * evicted or never written (cache off, another user's folder, a fresh
 * serving replica).  The object costs tens to hundreds of KiB, the size of
 * the source the program keeps anyway, and makes a load one read and one
 * dlopen.  Handles are rebuilt, never stored: the object is loaded from
 * memory (em_dl_load) and the kernels' entry points and flags looked up
 * again by name.
 *
 * Loading trusts nothing before it is checked: the header; the payload's
 * SHA-256; each count against the bytes left; every id against its table
 * and every arena place against the arena (program_validate); the object's
 * own SHA-256; only then is the object loaded.  Anything wrong is
 * EMBER_EINVAL with a message naming what, never a crash.  The checks keep
 * every id and place in range, so that the runtime's reads of the tables
 * stay inside them; that the tables agree with the object's code is what
 * the hashes guarantee (a blob changed on purpose with its hash mended
 * loads if its ids are in range, and running it is then the changer's
 * doing, as with any library one loads).
 *
 * CUDA programs carry their kernels as the images build_cuda.c compiled
 * (p->images: one per NVRTC chunk, a cubin, or PTX where NVRTC has no
 * cubin for the architecture), each with its own SHA-256 and the kernel
 * ids it holds; the header records the architecture, NVRTC's version, the
 * image kind and the driver that loaded them at compile time.  Loading
 * checks, before any image is loaded, that the current context's device
 * is of that architecture and its driver at least as new (check_device: a
 * mismatch is EMBER_EINVAL saying so; the client compiles again), then
 * each image's hash, then loads them as modules and looks the kernels up
 * by name (program_load_modules, as a compile does): no NVRTC, no disk cache.
 * Rebuilt rather than saved: the modules, functions and the index
 * record's host-mapped memory (handles of the process); the kernels'
 * unaligned variants, compiled by NVRTC from the text the program keeps
 * only when a launch first meets an unaligned pointer (program.c; without
 * the disk cache, which a loaded program has no folder for); cuBLASLt's
 * plans, made by blas.c at a library call's first run from the call's
 * saved fields (handles and the heuristic's pick are the process's and
 * the device's).  A program built only (build_only, no GPU) saves its
 * images, the variants' too, and loads without a device, to be checked.
 *
 * Not here: the loading process's options (a loaded program has no disk
 * cache folder).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

#define MAGIC "EMBERPRG"
#define BYTE_ORDER_MARK 0x01020304u  /* written natively: a blob of the other byte order reads 0x04030201 */
#define VERSION_BYTES 32             /* ember_version(), NUL-padded */
#define HASH_HEX PROGRAM_HASH_HEX    /* a SHA-256 in hex */
#define HEADER_BYTES PROGRAM_HEADER_BYTES
#define NO_TEXT UINT64_MAX           /* a string's length where the pointer is NULL */

typedef struct Io {
  int reading;
  unsigned char *buf;      /* writing: the bytes so far (malloc) */
  size_t n, cap;
  int oom;
  const unsigned char *in; /* reading: the payload, and where the walk is in it */
  size_t pos, len;
  Pool *pool;              /* reading: where tables and strings go (the program's) */
  char err[512];           /* the first problem met, or "" */
} Io;

static void fail(Io *io, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(Io *io, const char *fmt, ...) {
  if (io->err[0]) return;  /* the first problem is the one to name */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(io->err, sizeof io->err, fmt, ap);
  va_end(ap);
}

/* ---------------------------------------------------------------- the primitives */

/* n bytes at x written, or read into x (zeros once the walk has failed). */
static void io_raw(Io *io, void *x, size_t n, const char *what) {
  if (io->err[0] || io->oom) {
    if (io->reading) memset(x, 0, n);
    return;
  }
  if (io->reading) {
    if (io->len - io->pos < n) {
      fail(io, "it ends inside %s (offset %zu of a payload of %zu bytes)", what, io->pos, io->len);
      memset(x, 0, n);
      return;
    }
    memcpy(x, io->in + io->pos, n);
    io->pos += n;
    return;
  }
  if (io->n + n > io->cap) {
    size_t cap = io->cap ? io->cap : 4096;
    while (cap < io->n + n) cap *= 2;
    unsigned char *b = em_realloc(io->buf, cap);
    if (!b) {
      io->oom = 1;
      return;
    }
    io->buf = b, io->cap = cap;
  }
  memcpy(io->buf + io->n, x, n);
  io->n += n;
}

static void io_i32(Io *io, int *x, const char *what) {
  int32_t v = (int32_t)*x;
  io_raw(io, &v, sizeof v, what);
  *x = v;
}
static void io_i64(Io *io, int64_t *x, const char *what) { io_raw(io, x, sizeof *x, what); }
static void io_size(Io *io, size_t *x, const char *what) {
  uint64_t v = *x;
  io_raw(io, &v, sizeof v, what);
  *x = (size_t)v;
}
static void io_u32(Io *io, unsigned *x, const char *what) {
  uint32_t v = *x;
  io_raw(io, &v, sizeof v, what);
  *x = v;
}

/* A table's count: on reading, at most the elements the bytes left could
   hold (each takes at least min_bytes), so that no count allocates more
   than the blob justifies. */
static void io_count(Io *io, int *n, size_t min_bytes, const char *what) {
  io_i32(io, n, what);
  if (!io->reading || io->err[0]) return;
  if (*n < 0 || (size_t)*n > (io->len - io->pos) / (min_bytes ? min_bytes : 1)) {
    fail(io, "the count of %s (%d) is more than the blob holds", what, *n);
    *n = 0;
  }
}

/* A table of n elements of size el: allocated (zeroed, with one spare
   element, as program_make allocates) when reading. */
static void *io_alloc(Io *io, void *cur, int n, size_t el) {
  if (!io->reading) return cur;
  void *t = pool_alloc(io->pool, el * (size_t)(n + 1));
  if (!t && !io->err[0]) fail(io, "out of memory reading it");
  return t;
}

static void io_ints(Io *io, int **a, int n, const char *what) {
  *a = io_alloc(io, *a, n, sizeof **a);
  for (int i = 0; *a && i < n; i++) io_i32(io, &(*a)[i], what);
}

/* Text (any bytes) of length *len, or NULL; read back NUL-terminated. */
static void io_bytes(Io *io, const char **s, size_t *len, const char *what) {
  uint64_t n = *s ? *len : NO_TEXT;
  io_raw(io, &n, sizeof n, what);
  if (!io->reading) {
    if (*s) io_raw(io, (void *)*s, *len, what);
    return;
  }
  *s = NULL, *len = 0;
  if (io->err[0] || n == NO_TEXT) return;
  if (n > io->len - io->pos) {
    fail(io, "%s's length (%llu bytes) runs past the end", what, (unsigned long long)n);
    return;
  }
  char *t = pool_alloc(io->pool, (size_t)n + 1);
  if (!t) {
    fail(io, "out of memory reading it");
    return;
  }
  io_raw(io, t, (size_t)n, what);
  *s = t, *len = (size_t)n;
}

static void io_str(Io *io, const char **s, const char *what) {
  size_t n = *s ? strlen(*s) : 0;
  io_bytes(io, s, &n, what);
  if (io->reading && *s && strlen(*s) != n) fail(io, "%s holds a NUL byte", what);
}

/* ---------------------------------------------------------------- the fields, in one place */

#define EXPR_DEPTH_MAX 256  /* the deepest size expression a blob may hold: its walks recurse */

/* A size expression over the program's nsyms size variables, as a tree in
   preorder: kind, constant, variable, range, which operands follow.  Read
   back into the pool, checked: a known kind with the operands it takes, a
   size variable of the program, no loop variable (a value's meta has none). */
static Expr *io_expr(Io *io, Expr *e, int nsyms, int depth) {
  Expr r = {0};
  if (!io->reading) r = *e;
  int ops = !io->reading ? (e->a != NULL) | (e->b != NULL) << 1 : 0;
  io_i32(io, &r.kind, "a size expression");
  io_i64(io, &r.c, "a size expression");
  io_i32(io, &r.var, "a size expression");
  io_i64(io, &r.lo, "a size expression");
  io_i64(io, &r.hi, "a size expression");
  io_i32(io, &ops, "a size expression");
  if (!io->reading) {
    if (e->a) io_expr(io, e->a, nsyms, depth + 1);
    if (e->b) io_expr(io, e->b, nsyms, depth + 1);
    return e;
  }
  if (io->err[0]) return NULL;
  int want_a = r.kind != E_CONST && r.kind != E_SYM && r.kind != E_VAR;
  int may_b = r.kind == E_ADD || r.kind == E_PROD || r.kind == E_DIV || r.kind == E_MOD || r.kind == E_MIN ||
              r.kind == E_MAX;
  int must_b = r.kind == E_ADD || r.kind == E_PROD;
  if (depth > EXPR_DEPTH_MAX) fail(io, "a size expression is deeper than %d", EXPR_DEPTH_MAX);
  else if (r.kind < E_CONST || r.kind > E_PROD || r.kind == E_VAR) fail(io, "a size expression has kind %d", r.kind);
  else if (r.kind == E_SYM && (r.var < 0 || r.var >= nsyms))
    fail(io, "a size expression names size variable %d of %d", r.var, nsyms);
  else if (ops < 0 || ops > 3 || (ops & 1) != want_a || ((ops & 2) && !may_b) || (must_b && !(ops & 2)) ||
           ((r.kind == E_DIV || r.kind == E_MOD) && !(ops & 2) && r.c <= 0))
    fail(io, "a size expression of kind %d has the wrong operands", r.kind);
  if (io->err[0]) return NULL;
  Expr *x = pool_alloc(io->pool, sizeof *x);
  if (!x) {
    fail(io, "out of memory reading it");
    return NULL;
  }
  *x = r;
  x->a = x->b = NULL;
  if (ops & 1) x->a = io_expr(io, NULL, nsyms, depth + 1);
  if (ops & 2) x->b = io_expr(io, NULL, nsyms, depth + 1);
  return io->err[0] ? NULL : x;
}

/* A symbolic value's sizes, strides and offset (PValue.sx), after a flag. */
static void io_value_sx(Io *io, PValue *v, int nsyms) {
  int has = v->sx != NULL;
  io_i32(io, &has, "a value's size expressions");
  if (io->reading) v->sx = NULL;
  if (!has || io->err[0]) return;
  if (io->reading && !nsyms) {
    fail(io, "a value has size expressions in a program without size variables");
    return;
  }
  int n = 2 * v->ndim + 1;
  if (io->reading && !(v->sx = pool_alloc(io->pool, sizeof(Expr *) * (size_t)(n + 1)))) {
    fail(io, "out of memory reading it");
    return;
  }
  for (int i = 0; i < n && !io->err[0]; i++) v->sx[i] = io_expr(io, io->reading ? NULL : v->sx[i], nsyms, 0);
}

/* A table of n size expressions that may be absent (NULL), after a flag:
   a library call's sizes (PCall.sx). */
static void io_exprs(Io *io, Expr ***sx, int n, int nsyms, const char *what) {
  int has = *sx != NULL;
  io_i32(io, &has, what);
  if (io->reading) *sx = NULL;
  if (!has || io->err[0]) return;
  if (io->reading && !nsyms) {
    fail(io, "%s in a program without size variables", what);
    return;
  }
  if (io->reading && !(*sx = pool_alloc(io->pool, sizeof(Expr *) * (size_t)(n + 1)))) {
    fail(io, "out of memory reading it");
    return;
  }
  for (int i = 0; i < n && !io->err[0]; i++) (*sx)[i] = io_expr(io, io->reading ? NULL : (*sx)[i], nsyms, 0);
}

/* A size expression that may be absent, after a flag: a symbolic CUDA
   kernel's grid, block, vector size check and body (PKernel.sgrid, sblock,
   svec, sbody). */
static void io_opt_expr(Io *io, const Expr **e, int nsyms, const char *what) {
  int has = *e != NULL;
  io_i32(io, &has, what);
  if (!io->reading) {
    if (has) io_expr(io, (Expr *)*e, nsyms, 0);
    return;
  }
  *e = NULL;
  if (!has || io->err[0]) return;
  if (!nsyms) fail(io, "%s in a program without size variables", what);
  else *e = io_expr(io, NULL, nsyms, 0);
}

static void io_value(Io *io, PValue *v) {
  io_i32(io, &v->storage, "a value's storage");
  io_i32(io, &v->dtype, "a value's dtype");
  io_i32(io, &v->device, "a value's device");
  io_i32(io, &v->ndim, "a value's dims");
  if (io->reading && (v->ndim < 0 || v->ndim > MAXD)) {
    fail(io, "a value has %d dims (at most %d)", v->ndim, MAXD);
    v->ndim = 0;
  }
  io_i32(io, &v->elsize, "a value's element size");
  for (int d = 0; d < v->ndim; d++) io_i64(io, &v->size[d], "a value's sizes");
  for (int d = 0; d < v->ndim; d++) io_i64(io, &v->stride[d], "a value's strides");
  io_i64(io, &v->offset, "a value's offset");
  io_i32(io, &v->root, "a value's root");
  io_i64(io, &v->root_delta, "a value's root delta");
  io_i32(io, &v->into, "a value's input");
  io_size(io, &v->arena_off, "a value's arena offset");
  io_size(io, &v->nbytes, "a value's bytes");
  io_i32(io, &v->first_step, "a value's first step");
  io_i32(io, &v->last_step, "a value's last step");
  io_i32(io, &v->needs_tensor, "a value's tensor flag");
  io_i32(io, &v->drop_step, "a value's drop step");
  io_i32(io, &v->host_alloc, "a value's host allocation");
  io_size(io, &v->host_bytes, "a value's host bytes");
  io_size(io, &v->block_off, "a value's block offset");
}

static void io_node(Io *io, PNode *n) {
  io_str(io, &n->op, "a node's op");
  io_str(io, &n->name, "a node's name");
  io_str(io, &n->reason, "a node's fallback reason");
  io_count(io, &n->nargs, 4, "a node's arguments");
  io_ints(io, &n->arg_v, n->nargs, "a node's arguments");
  io_count(io, &n->nouts, 4, "a node's outputs");
  io_ints(io, &n->outs, n->nouts, "a node's outputs");
}

static void io_kernel(Io *io, PKernel *k, int nsyms) {
  io_str(io, &k->what, "a kernel's node name");
  io_i32(io, &k->lib, "a kernel's kind");
  io_i32(io, &k->call, "a kernel's call");
  io_size(io, &k->scratch_off, "a kernel's scratch offset");
  io_i32(io, &k->index_checks, "a kernel's index checks");
  for (int i = 0; i < 3; i++) io_u32(io, &k->grid[i], "a kernel's grid");
  for (int i = 0; i < 3; i++) io_u32(io, &k->block[i], "a kernel's block");
  io_opt_expr(io, &k->sgrid, nsyms, "a kernel's grid expression");
  io_opt_expr(io, &k->sblock, nsyms, "a kernel's block expression");
  io_opt_expr(io, &k->svec, nsyms, "a kernel's vector size check");
  io_i32(io, &k->nbodies, "a kernel's bodies");
  if (io->reading && (k->nbodies < 1 || k->nbodies > MAX_BODIES)) {
    fail(io, "a kernel has %d bodies (1 to %d)", k->nbodies, MAX_BODIES);
    k->nbodies = 1;
  }
  io_opt_expr(io, &k->sbody, nsyms, "a kernel's body expression");
  for (int i = 0; i < k->nbodies; i++) io_u32(io, &k->bblock[i], "a kernel's bodies' blocks");
  io_count(io, &k->nparams, 4, "a kernel's parameters");
  io_ints(io, &k->params, k->nparams, "a kernel's parameters");
  io_count(io, &k->nalign, 16, "a kernel's alignment checks");
  k->align = io_alloc(io, k->align, k->nalign, sizeof *k->align);
  for (int i = 0; k->align && i < k->nalign; i++) {
    io_i32(io, &k->align[i].v, "an alignment check");
    io_i32(io, &k->align[i].mod, "an alignment check");
    io_i64(io, &k->align[i].off, "an alignment check");
  }
  io_opt_expr(io, &k->swide, nsyms, "a kernel's index width check");
  io_bytes(io, &k->alt, &k->alt_len, "a kernel's variants");
  io_i32(io, &k->rep, "a kernel's representative");
}

static void io_call(Io *io, PCall *c, int nsyms) {
  io_i32(io, &c->node, "a library call's node");
  io_str(io, &c->what, "a library call's name");
  int *ints[] = {&c->dtype, &c->ta, &c->tb, &c->epi, &c->api, &c->a, &c->b, &c->out, &c->bias};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) io_i32(io, ints[i], "a library call's arguments");
  int64_t *dims[] = {&c->m, &c->n, &c->k, &c->batch};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) io_i64(io, dims[i], "a library call's sizes");
  for (int i = 0; i < 3; i++) {
    MatStore *m = &c->ms[i];
    int64_t *f[] = {&m->rows, &m->len, &m->ld, &m->nb, &m->bstride, &m->pad, &m->crows};
    for (size_t j = 0; j < sizeof f / sizeof f[0]; j++) io_i64(io, f[j], "a library call's matrices");
    io_size(io, &m->off, "a library call's matrices");
  }
  io_exprs(io, &c->sx, MM_NSX, nsyms, "a library call's size expressions");
}

/* The report's counts (its times are the compile's: a loaded program's are its load's). */
static void io_report(Io *io, ember_report *r) {
  int *f[] = {&r->nodes, &r->kernels, &r->distinct_kernels, &r->library_calls, &r->fused_ops,
              &r->epilogue_ops, &r->fallbacks, &r->index_async};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) io_i32(io, f[i], "the report");
}

/* Every field of the program that running and the client need, in blob
   order.  The handles (the object, its entry points and flags, CUDA
   modules), the cache folder, the errors and the report's times are the
   loading process's own. */
static void io_program(Io *io, Program *p) {
  io_i32(io, &p->target, "the target");
  io_i32(io, &p->build_only, "the build_only flag");
  io_i32(io, &p->cuda_sm, "the CUDA architecture");
  io_i32(io, &p->nvrtc_version, "the NVRTC version");
  io_i32(io, &p->image_ptx, "the CUDA images' kind");
  io_i32(io, &p->driver_version, "the CUDA driver's version");
  io_i32(io, &p->index_nowait, "the asynchronous index check flag");
  io_i32(io, &p->nsyms, "the size variables");
  if (io->reading && (p->nsyms < 0 || p->nsyms > EMBER_MAX_SYMS)) {
    fail(io, "it has %d size variables (at most %d)", p->nsyms, EMBER_MAX_SYMS);
    p->nsyms = 0;
  }
  io_count(io, &p->nvalues, 64, "values");
  p->values = io_alloc(io, p->values, p->nvalues, sizeof *p->values);
  for (int i = 0; p->values && i < p->nvalues; i++) {
    io_value(io, &p->values[i]);
    io_value_sx(io, &p->values[i], p->nsyms);
  }
  io_count(io, &p->nnodes, 32, "nodes");
  p->nodes = io_alloc(io, p->nodes, p->nnodes, sizeof *p->nodes);
  for (int i = 0; p->nodes && i < p->nnodes; i++) io_node(io, &p->nodes[i]);
  io_count(io, &p->ncalls, 64, "library calls");
  p->calls = io_alloc(io, p->calls, p->ncalls, sizeof *p->calls);
  for (int i = 0; p->calls && i < p->ncalls; i++) io_call(io, &p->calls[i], p->nsyms);
  io_count(io, &p->nkernels, 64, "kernels");
  p->kernels = io_alloc(io, p->kernels, p->nkernels, sizeof *p->kernels);
  for (int i = 0; p->kernels && i < p->nkernels; i++) io_kernel(io, &p->kernels[i], p->nsyms);
  io_count(io, &p->nsteps, 8, "steps");
  p->steps = io_alloc(io, p->steps, p->nsteps, sizeof *p->steps);
  for (int i = 0; p->steps && i < p->nsteps; i++) {
    io_i32(io, &p->steps[i].kind, "a step");
    io_i32(io, &p->steps[i].index, "a step");
  }
  io_count(io, &p->ninputs, 4, "inputs");
  io_ints(io, &p->inputs, p->ninputs, "the inputs");
  io_count(io, &p->noutputs, 4, "outputs");
  io_ints(io, &p->outputs, p->noutputs, "the outputs");
  io_size(io, &p->arena_bytes, "the arena's size");
  io_size(io, &p->ws_off, "the workspace's offset");
  io_size(io, &p->ws_bytes, "the workspace's size");
  io_size(io, &p->block_bytes, "the pooled block's size");
  io_count(io, &p->nicodes, 24, "index error codes");
  p->icodes = io_alloc(io, p->icodes, p->nicodes, sizeof *p->icodes);
  for (int i = 0; p->icodes && i < p->nicodes; i++) {
    PIndexCode *c = &p->icodes[i];
    io_i64(io, &c->code, "an index error code");
    io_i32(io, &c->node, "an index error code");
    io_i32(io, &c->dim, "an index error code");
    io_i64(io, &c->size, "an index error code");
  }
  io_i32(io, &p->index_checks, "the index checks flag");
  size_t srclen = p->source ? strlen(p->source) : 0;
  const char *src = p->source;
  io_bytes(io, &src, &srclen, "the source");
  p->source = (char *)src;
  io_size(io, &p->src_head, "the source's prelude length");
  io_report(io, &p->report);
  io_count(io, &p->nimages, 28, "CUDA images");
  p->images = io_alloc(io, p->images, p->nimages, sizeof *p->images);
  for (int i = 0; p->images && i < p->nimages; i++) {
    PImage *im = &p->images[i];
    io_count(io, &im->nkern, 4, "a CUDA image's kernels");
    io_ints(io, &im->kern, im->nkern, "a CUDA image's kernels");
    const char *d = im->data;
    io_bytes(io, &d, &im->n, "a CUDA image");
    im->data = d;
    io_str(io, &im->hash, "a CUDA image's hash");
  }
}

/* ---------------------------------------------------------------- checking what was read */

static int in(int i, int n) { return i >= 0 && i < n; }
static int fits(size_t off, size_t n, size_t total) { return off <= total && n <= total - off; }

/* Every id against its table, every place against the arena: "" if the
   program is one the runtime can run, else what is wrong (into why). */
static int program_validate(const Program *p, char *why, size_t n) {
#define BAD(...) return snprintf(why, n, __VA_ARGS__), -1
  if (p->target != EMBER_CPU && p->target != EMBER_CUDA) BAD("its target %d is unknown", p->target);
  for (int i = 0; i < p->nvalues; i++) {
    const PValue *v = &p->values[i];
    if (!in(v->storage, EMBER_STORE_INTO + 1)) BAD("value %d has an unknown storage %d", i, v->storage);
    if (!in(v->dtype, EMBER_NDTYPE)) BAD("value %d has an unknown dtype %d", i, v->dtype);
    if (v->elsize < 0 || v->elsize > 8 || (v->elsize & (v->elsize - 1)))
      BAD("value %d's element size %d is not one of a dtype", i, v->elsize);
    if (!in(v->root, p->nvalues) || p->values[v->root].root != v->root)
      BAD("value %d's root %d is not a value that is its own root", i, v->root);
    if (v->storage == ST_INTO && !in(v->into, p->nvalues)) BAD("value %d is written into value %d", i, v->into);
    if (v->storage == ST_ARENA && !fits(v->arena_off, v->nbytes, p->arena_bytes))
      BAD("value %d's arena place (%zu + %zu bytes) is outside the arena (%zu bytes)", i, v->arena_off,
          v->nbytes, p->arena_bytes);
    if (!in(v->host_alloc, EMBER_HOST_BLOCK + 1)) BAD("value %d has an unknown host allocation", i);
    if (v->drop_step < -1 || v->drop_step >= p->nsteps) BAD("value %d's drop step %d is not a step", i, v->drop_step);
  }
  for (int i = 0; i < p->nnodes; i++) {
    const PNode *nd = &p->nodes[i];
    if (!nd->op || !nd->name) BAD("node %d has no op or name", i);
    for (int a = 0; a < nd->nargs; a++)
      if (nd->arg_v[a] < -1 || nd->arg_v[a] >= p->nvalues) BAD("node %s's argument %d is not a value", nd->name, a);
    for (int o = 0; o < nd->nouts; o++)
      if (!in(nd->outs[o], p->nvalues)) BAD("node %s's output %d is not a value", nd->name, o);
  }
  for (int i = 0; i < p->ncalls; i++) {
    const PCall *c = &p->calls[i];
    if (!in(c->node, p->nnodes) || !in(c->a, p->nvalues) || !in(c->b, p->nvalues) || !in(c->out, p->nvalues) ||
        c->bias < -1 || c->bias >= p->nvalues || !c->what)
      BAD("library call %d names a node or value that does not exist", i);
  }
  for (int i = 0; i < p->nkernels; i++) {
    const PKernel *k = &p->kernels[i];
    if (!k->what) BAD("kernel %d has no name", i);
    if (k->lib ? !in(k->call, p->ncalls) || !fits(k->scratch_off, 0, p->arena_bytes) : k->call != -1)
      BAD("kernel %d's library call %d does not exist", i, k->call);
    for (int j = 0; j < k->nparams; j++)
      if (!in(k->params[j], p->nvalues)) BAD("kernel %d's parameter %d is not a value", i, j);
    for (int j = 0; j < k->nalign; j++)
      if (!in(k->align[j].v, p->nvalues) || k->align[j].mod <= 0) BAD("kernel %d's alignment check %d is bad", i, j);
    if (!in(k->rep, p->nkernels) || p->kernels[k->rep].rep != k->rep)
      BAD("kernel %d's representative %d is not a kernel that is its own", i, k->rep);
    if ((k->swide || k->nalign) && (p->target != EMBER_CUDA || k->lib || !p->kernels[k->rep].alt))
      BAD("kernel %d runs a variant it has no text for", i);
    /* its bodies: the launch picks one by sbody (several only in CUDA kernels with code), runs its
       representative's entry points and takes a block of at most the body's bblock */
    if ((k->nbodies > 1 && (p->target != EMBER_CUDA || k->lib)) || (k->sbody != NULL) != (k->nbodies > 1) ||
        p->kernels[k->rep].nbodies != k->nbodies)
      BAD("kernel %d's %d bodies do not fit it", i, k->nbodies);
    for (int b = 0; p->target == EMBER_CUDA && !k->lib && b < k->nbodies; b++)
      if (k->bblock[b] == 0 || k->bblock[b] > k->block[0]) BAD("kernel %d's body %d's block is out of range", i, b);
  }
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (st->kind == EMBER_STEP_KERNEL ? !in(st->index, p->nkernels)
                                      : st->kind != EMBER_STEP_FALLBACK || !in(st->index, p->nnodes))
      BAD("step %d (kind %d) names %d, which does not exist", s, st->kind, st->index);
  }
  for (int i = 0; i < p->ninputs; i++)
    if (!in(p->inputs[i], p->nvalues)) BAD("input %d is not a value", i);
  for (int i = 0; i < p->noutputs; i++)
    if (p->outputs[i] < -1 || p->outputs[i] >= p->nvalues) BAD("output %d is not a value", i);
  for (int i = 0; i < p->nicodes; i++)
    if (!in(p->icodes[i].node, p->nnodes)) BAD("index error code %d names no node", i);
  if (!fits(p->ws_off, p->ws_bytes, p->arena_bytes)) BAD("the workspace is outside the arena");
  if (!p->source || p->src_head > strlen(p->source)) BAD("the source's prelude is longer than the source");
  if (p->nimages && p->target != EMBER_CUDA) BAD("it is not a CUDA program and has CUDA images");
  for (int i = 0; i < p->nimages; i++) {
    const PImage *im = &p->images[i];
    if (!im->data || !im->n) BAD("CUDA image %d is empty", i);
    for (int j = 0; j < im->nkern; j++)  /* variants (nkernels + id) only where built to check them */
      if (!in(im->kern[j], p->build_only ? 2 * p->nkernels : p->nkernels) ||
          p->kernels[im->kern[j] % p->nkernels].lib)
        BAD("CUDA image %d's item %d (%d) is not a kernel with code", i, j, im->kern[j]);
  }
  return 0;
#undef BAD
}

/* ---------------------------------------------------------------- the header */

typedef struct Header {
  char magic[8];
  unsigned format, order;
  uint64_t total;          /* header and payload */
  char version[VERSION_BYTES];
  unsigned target;
  unsigned cuda_sm;        /* CUDA: the architecture the images are for, else 0 */
  unsigned nvrtc, ptx;     /* CUDA: the NVRTC that compiled them (12080: 12.8), PTX (1) or cubins (0) */
  unsigned driver;         /* CUDA: the driver they were loaded with at compile time (0: none) */
  unsigned reserved;
  char hash[HASH_HEX];     /* SHA-256 of the payload */
} Header;
_Static_assert(8 + 4 + 4 + 8 + VERSION_BYTES + 4 * 6 + HASH_HEX == HEADER_BYTES, "io_header's fields");

static void io_header(Io *io, Header *h) {
  io_raw(io, h->magic, sizeof h->magic, "the magic");
  io_u32(io, &h->format, "the format version");
  io_u32(io, &h->order, "the byte order");
  io_raw(io, &h->total, sizeof h->total, "the length");
  io_raw(io, h->version, sizeof h->version, "ember's version");
  io_u32(io, &h->target, "the target");
  io_u32(io, &h->cuda_sm, "the CUDA architecture");
  io_u32(io, &h->nvrtc, "the NVRTC version");
  io_u32(io, &h->ptx, "the CUDA images' kind");
  io_u32(io, &h->driver, "the CUDA driver's version");
  io_u32(io, &h->reserved, "the header");
  io_raw(io, h->hash, sizeof h->hash, "the payload's hash");
}

/* The number of kernels with code (library calls have none). */
static int code_kernels(const Program *p) {
  int n = 0;
  for (int i = 0; i < p->nkernels; i++) n += !p->kernels[i].lib;
  return n;
}

/* ---------------------------------------------------------------- saving */

int ember_program_save(ember_program *ep, void **buf, size_t *len) {
  Program *p = &ep->p;
  *buf = NULL, *len = 0;
  if (p->target == EMBER_CUDA && p->nimages == 0 && code_kernels(p) > 0) {
    snprintf(p->err, sizeof p->err, "ember: saving the program: its CUDA kernels' images are missing");
    return EMBER_EINVAL;
  }
  for (int i = 0; i < p->nimages; i++) {  /* each image's own hash, checked before it is loaded */
    char ih[HASH_HEX + 1];
    em_sha256_hex(p->images[i].data, p->images[i].n, ih);
    if (!p->images[i].hash && !(p->images[i].hash = pool_strdup(&p->pool, ih))) {
      snprintf(p->err, sizeof p->err, "ember: out of memory saving the program");
      return EMBER_ENOMEM;
    }
  }
  const char *obj = NULL;
  size_t nobj = 0;
  void *data = NULL;
  if (p->dl && em_dl_bytes(p->dl, &data, &nobj)) {
    snprintf(p->err, sizeof p->err, "ember: saving the program: cannot read back its kernels' object");
    return EMBER_EINVAL;
  }
  obj = data;
  char hex[HASH_HEX + 1] = "";
  if (obj) em_sha256_hex(obj, nobj, hex);
  Header h = {.magic = MAGIC, .format = EMBER_PROGRAM_FORMAT, .order = BYTE_ORDER_MARK,
              .target = (unsigned)p->target};
  if (p->target == EMBER_CUDA)
    h.cuda_sm = (unsigned)p->cuda_sm, h.nvrtc = (unsigned)p->nvrtc_version, h.ptx = (unsigned)p->image_ptx,
    h.driver = (unsigned)p->driver_version;
  snprintf(h.version, sizeof h.version, "%s", ember_version());
  Io io = {0};
  io_header(&io, &h);  /* its length and hash are filled in below */
  io_program(&io, p);
  io_bytes(&io, &obj, &nobj, "the kernels' object");
  const char *hp = obj ? hex : NULL;
  size_t nh = obj ? HASH_HEX : 0;
  io_bytes(&io, &hp, &nh, "the object's hash");
  free(data);
  if (io.oom) {
    free(io.buf);
    snprintf(p->err, sizeof p->err, "ember: out of memory saving the program");
    return EMBER_ENOMEM;
  }
  h.total = io.n;
  memcpy(io.buf + 16, &h.total, sizeof h.total);
  em_sha256_hex(io.buf + HEADER_BYTES, io.n - HEADER_BYTES, hex);
  memcpy(io.buf + HEADER_BYTES - HASH_HEX, hex, HASH_HEX);
  *buf = io.buf, *len = io.n;
  return EMBER_OK;
}

/* ---------------------------------------------------------------- loading */

/* The kernels' entry points and flags, looked up in the loaded object. */
static int bind_object(Program *p, char *why, size_t n) {
  p->zero_div = em_dl_sym(p->dl, "ember_zero_division");
  p->index_err = em_dl_sym(p->dl, "ember_index_error");
  p->fns = em_malloc(sizeof *p->fns * (size_t)(p->nkernels + 1));
  if (!p->fns) return snprintf(why, n, "out of memory"), EMBER_ENOMEM;
  for (int i = 0; i < p->nkernels; i++) {
    if (p->kernels[i].lib) continue;  /* a library call: no code (run.c calls blas_cpu.c) */
    char name[32];
    snprintf(name, sizeof name, "ember_k%d", i);
    void *f = em_dl_sym(p->dl, name);
    if (!f) return snprintf(why, n, "its object lacks the kernel %s", name), EMBER_EINVAL;
    memcpy(&p->fns[i], &f, sizeof f);
  }
  return EMBER_OK;
}

/* The header's facts against the program's own (the header is not hashed:
   it is what a reader checks first, so it must say what the payload says). */
static int header_disagrees(const Header *h, const Program *p, char *why, size_t n) {
  int cuda = p->target == EMBER_CUDA;
  if ((int)h->target != p->target) return snprintf(why, n, "its header and its program disagree on the target"), 1;
  if (h->cuda_sm != (cuda ? (unsigned)p->cuda_sm : 0u) || h->nvrtc != (cuda ? (unsigned)p->nvrtc_version : 0u) ||
      h->ptx != (cuda ? (unsigned)p->image_ptx : 0u) || h->driver != (cuda ? (unsigned)p->driver_version : 0u))
    return snprintf(why, n, "its header and its program disagree on the CUDA architecture or versions"), 1;
  return 0;
}

/* A CUDA program against the device its modules would load into (the
   current context's): the architecture its images were compiled for, and a
   driver at least as new as the one that loaded them at compile time (a
   cubin or PTX that driver took, one as new takes too).  EMBER_EINVAL on a
   mismatch, EMBER_EBUILD where CUDA is not usable, with why. */
static int check_device(const Program *p, char *why, size_t n) {
  int sm = 0, driver = 0;
  char e[512] = "";
  if (cuda_current_arch(&sm, &driver, e, sizeof e))
    return snprintf(why, n, "it is a CUDA program (sm_%d) and CUDA is not usable here: %s", p->cuda_sm, e),
           EMBER_EBUILD;
  if (sm != p->cuda_sm)
    return snprintf(why, n, "its kernels were compiled for sm_%d, the current device is sm_%d: compile it again",
                    p->cuda_sm, sm), EMBER_EINVAL;
  if (driver < p->driver_version)
    return snprintf(why, n, "its kernels (%s from NVRTC %d.%d) were loaded by a CUDA %d.%d driver, this driver is "
                    "CUDA %d.%d: compile it again", p->image_ptx ? "PTX" : "cubins", p->nvrtc_version / 1000,
                    p->nvrtc_version % 1000 / 10, p->driver_version / 1000, p->driver_version % 1000 / 10,
                    driver / 1000, driver % 1000 / 10), EMBER_EINVAL;
  return EMBER_OK;
}

int ember_program_load(const void *buf, size_t len, ember_program **out, char *err, size_t errlen) {
  char why[1024] = "";
  int rc = EMBER_OK;
  double t0 = em_now_ms();
  *out = NULL;
  Program *p = NULL;
  Header h;
  Io io = {.reading = 1, .in = buf, .len = buf ? len : 0};
  io_header(&io, &h);
  if (io.err[0]) {
    snprintf(why, sizeof why, "it is truncated: %zu bytes, shorter than the header (%d)", len, HEADER_BYTES);
  } else if (memcmp(h.magic, MAGIC, sizeof h.magic) != 0) {
    snprintf(why, sizeof why, "it is not a saved program (no %s magic)", MAGIC);
  } else if (h.order != BYTE_ORDER_MARK) {
    snprintf(why, sizeof why, "it was saved on a machine of the other byte order");
  } else if (h.format != EMBER_PROGRAM_FORMAT) {
    snprintf(why, sizeof why, "its format version is %u; this ember reads version %d", h.format,
             EMBER_PROGRAM_FORMAT);
  } else if (memchr(h.version, 0, sizeof h.version) == NULL || strcmp(h.version, ember_version()) != 0) {
    snprintf(why, sizeof why, "it was saved by ember %.*s, this is ember %s", VERSION_BYTES, h.version,
             ember_version());
  } else if (h.total != len) {
    snprintf(why, sizeof why, "it is %s: %zu bytes, its header says %llu", h.total > len ? "truncated" : "padded",
             len, (unsigned long long)h.total);
  } else if (h.target != EMBER_CPU && h.target != EMBER_CUDA) {
    snprintf(why, sizeof why, "its target %u is not one this ember loads (CPU, CUDA)", h.target);
  } else {
    char hex[HASH_HEX + 1];
    em_sha256_hex((const char *)buf + HEADER_BYTES, len - HEADER_BYTES, hex);
    if (memcmp(hex, h.hash, HASH_HEX) != 0) snprintf(why, sizeof why, "it is corrupted: its SHA-256 does not match");
  }
  if (!why[0] && !(p = program_new())) rc = EMBER_ENOMEM, snprintf(why, sizeof why, "out of memory");
  const char *obj = NULL, *ohash = NULL;
  size_t nobj = 0, nhash = 0;
  if (!why[0]) {
    io = (Io){.reading = 1, .in = (const unsigned char *)buf + HEADER_BYTES, .len = len - HEADER_BYTES,
              .pool = &p->pool};
    io_program(&io, p);
    io_bytes(&io, &obj, &nobj, "the kernels' object");
    io_bytes(&io, &ohash, &nhash, "the object's hash");
    if (!io.err[0] && io.pos != io.len) fail(&io, "%zu bytes follow its last field", io.len - io.pos);
    if (io.err[0]) snprintf(why, sizeof why, "%s", io.err);
    else if (header_disagrees(&h, p, why, sizeof why)) {
    } else if (p->target == EMBER_CUDA && !p->build_only && (rc = check_device(p, why, sizeof why))) {
    } else program_validate(p, why, sizeof why);
  }
  int need = !why[0] && !p->build_only && code_kernels(p) > 0;
  if (!why[0] && need && p->target == EMBER_CPU && !obj) snprintf(why, sizeof why, "its kernels' object is missing");
  if (!why[0] && need && p->target == EMBER_CUDA && !p->nimages) snprintf(why, sizeof why, "its CUDA images are missing");
  if (!why[0] && obj && p->target == EMBER_CUDA) snprintf(why, sizeof why, "a CUDA program with a kernels' object");
  for (int i = 0; !why[0] && i < p->nimages; i++) {  /* loaded only once its bytes are the ones saved */
    char hex[HASH_HEX + 1];
    em_sha256_hex(p->images[i].data, p->images[i].n, hex);
    if (!p->images[i].hash || strcmp(hex, p->images[i].hash) != 0)
      snprintf(why, sizeof why, "CUDA image %d does not match its SHA-256", i);
  }
  /* CUDA: the modules, and the functions' table a run reads, even with library calls alone */
  if (!why[0] && p->target == EMBER_CUDA && !p->build_only) rc = program_load_modules(p, why, sizeof why);
  if (!why[0] && obj) {  /* loaded only once its bytes are the ones saved */
    char hex[HASH_HEX + 1];
    em_sha256_hex(obj, nobj, hex);
    if (nhash != HASH_HEX || memcmp(hex, ohash, HASH_HEX) != 0)
      snprintf(why, sizeof why, "its kernels' object does not match its SHA-256");
  }
  if (!why[0] && obj && need) {
    char lerr[1024] = "";
    if (!(p->dl = em_dl_load(obj, nobj, lerr, sizeof lerr))) {
      snprintf(why, sizeof why, "%s", lerr[0] ? lerr : "its kernels' object does not load");
      rc = EMBER_EBUILD;
    } else {
      rc = bind_object(p, why, sizeof why);
    }
  }
  if (why[0]) {
    if (err && errlen) snprintf(err, errlen, "ember: cannot load the saved program: %s", why);
    program_free(p);
    return rc == EMBER_OK ? EMBER_EINVAL : rc;
  }
  /* the whole load is the report's load time (and build and compile time: nothing else ran) */
  p->report.compile_ms = p->report.build_ms = p->report.load_ms = em_now_ms() - t0;
  *out = (ember_program *)p;
  return EMBER_OK;
}
