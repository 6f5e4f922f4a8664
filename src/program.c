/*
 * program.c - the compiled program apart from the graph: what the client
 * asks of it (the ember_program_* functions but run and check, which are
 * run.c's), its release, and the CUDA kernels' unaligned and wide variants,
 * built from the text it keeps when a launch first needs one.
 *
 * A CUDA kernel may have several entry points, one per body, which the
 * launch chooses by the call's sizes (PKernel.nbodies, sbody): p->kfn,
 * p->kfn_u and p->kfn_w hold MAX_BODIES functions per kernel, the names
 * em_entry_name's.
 *
 * A Program is made from the graph by the driver (program_make, ember.c)
 * after code generation; the kernels are built into it (build.c,
 * build_cuda.c) and the graph is freed.  From then on it is plain data in
 * its own pool (ids, offsets, strings) plus the handles of the loaded code
 * (a shared object, CUDA modules, host-mapped memory), which program_free
 * releases.  Nothing here reads the compiler's IR or calls a pass: the
 * variant's text, the architecture and the disk cache's folder were copied
 * in at compile time, and NVRTC (cuda.c) and the cache (cache.c) do the rest.
 *
 * A CUDA program's modules are loaded from the images it keeps
 * (program_load_modules), by the build (build_cuda.c) and by a load
 * (program_io.c) alike.
 *
 * Threads: the variants are built under one lock (any program's), which
 * also guards p->cmods, p->kfn_u, p->kfn_w and the report's counts of them; run.c
 * says what else runs share.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

Program *program_new(void) {
  Program *p = em_malloc(sizeof *p);
  if (p) memset(p, 0, sizeof *p);
  return p;
}

#define SYM_ARENA_ALIGN 64  /* each value's offset, as plan.c's ALIGN */
#define SYM_NBR_MAX (1 << 22)  /* pairs of arena values alive together kept at most (else each plan scans all) */

struct SymPlan {           /* the arena plan at the last sizes a run asked for */
  int valid;
  int64_t syms[EMBER_MAX_SYMS];
  size_t *off;             /* per value: its arena offset (arena values only) */
  size_t scratch_off;      /* the library calls' padded copies (program_sym_pad_bytes), after the values */
  size_t bytes;
  /* the same for every size: per arena value i, the earlier arena values whose steps overlap its
     own, nbr[nbr_at[i]] .. nbr[nbr_at[i + 1] - 1] in value order (NULL: too many, scan them all) */
  int *nbr, *nbr_at;
};
void program_free(Program *p) {
  if (!p) return;
  if (p->splan) free(p->splan->off), free(p->splan->nbr), free(p->splan->nbr_at), free(p->splan);
  if (p->dl) em_dl_close(p->dl);
  for (int i = 0; i < p->ncmods; i++) cuda_unload(p->cmods[i]);
  cuda_host_free(p->index_host);
  free(p->cmods), free(p->kfn), free(p->kfn_u), free(p->kfn_w), free(p->fns);
  pool_free(&p->pool);
  free(p);
}

int program_error(Program *p, int node, const char *fmt, ...) {
  int k = 0;
  if (node >= 0 && node < p->nnodes)
    k = snprintf(p->err, sizeof p->err, "ember: %s (node %s): ", p->nodes[node].op, p->nodes[node].name);
  else
    k = snprintf(p->err, sizeof p->err, "ember: ");
  if (k < 0 || k >= (int)sizeof p->err) k = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + k, sizeof p->err - k, fmt, ap);
  va_end(ap);
  return EMBER_EINVAL;
}

/* ---------------------------------------------------------------- the CUDA modules */
int program_load_modules(Program *p, char *err, size_t errlen) {
  double t0 = em_now_ms();
  int nk = p->nkernels;
  p->cmods = calloc((size_t)p->nimages + 1, sizeof *p->cmods);
  p->kfn = calloc((size_t)nk * MAX_BODIES + 1, sizeof *p->kfn);
  if (!p->cmods || !p->kfn) return snprintf(err, errlen, "loading the CUDA kernels: out of memory"), EMBER_ENOMEM;
  for (int c = 0; c < p->nimages; c++) {
    const PImage *im = &p->images[c];
    char **names = calloc((size_t)im->nkern * MAX_BODIES + 1, sizeof *names);
    int oom = !names, nfn = 0;  /* every body's entry point of each kernel, in order */
    for (int j = 0; !oom && j < im->nkern; j++) {
      EM_ASSERT(im->kern[j] >= 0 && im->kern[j] < nk);  /* variants are in images only to check them */
      for (int b = 0; !oom && b < p->kernels[im->kern[j]].nbodies; b++) {
        oom = !(names[nfn] = malloc(48));
        if (!oom) em_entry_name(names[nfn++], 48, im->kern[j], 0, b);
      }
    }
    char why[2048] = "";
    CudaMod *m = oom ? NULL : cuda_load(im->data, im->n, nfn, (const char *const *)names, why, sizeof why);
    for (int j = 0; j < nfn; j++) free(names[j]);
    free(names);
    if (!m) return snprintf(err, errlen, "loading the CUDA kernels failed: %s", why[0] ? why : "out of memory"), EMBER_EBUILD;
    p->cmods[p->ncmods++] = m;
    for (int j = 0, f = 0; j < im->nkern; j++)
      for (int b = 0; b < p->kernels[im->kern[j]].nbodies; b++)
        p->kfn[im->kern[j] * MAX_BODIES + b] = cuda_fn(m, f++);
  }
  for (int i = 0; i < nk; i++) {
    const PKernel *k = &p->kernels[i];
    if (k->lib) continue;
    int missing = 0;
    for (int b = 0; b < k->nbodies; b++)
      missing |= !(p->kfn[i * MAX_BODIES + b] = p->kfn[k->rep * MAX_BODIES + b]);
    if (missing || (k->index_checks && !p->kernels[k->rep].index_checks))
      return snprintf(err, errlen, "loading the CUDA kernels: kernel ember_k%d's code is in no image", k->rep),
             EMBER_EBUILD;
  }
  if (p->ncmods > 0) p->index_dev = cuda_global(p->cmods[0], "ember_index_error");
  p->report.index_async = 0;
  if (p->index_nowait && p->index_checks && p->index_dev) {
    /* the asynchronous check (run.c): the kernels write a host-mapped record
       and trap; where that cannot be set up, the record is read back per run */
    void *dev = NULL, *sym = cuda_global(p->cmods[0], "ember_index_host");
    char e2[256];
    p->index_host = sym ? cuda_host_mapped(2 * sizeof(int64_t), &dev, e2, sizeof e2) : NULL;
    if (p->index_host && cuda_write_sync(sym, &dev, sizeof dev, e2, sizeof e2)) {
      cuda_host_free(p->index_host);
      p->index_host = NULL;
    }
    p->report.index_async = p->index_host != NULL;
  }
  p->report.load_ms = em_now_ms() - t0;
  return EMBER_OK;
}

/* ---------------------------------------------------------------- variants */

static pthread_mutex_t variant_lock = PTHREAD_MUTEX_INITIALIZER;  /* the programs' variants and modules */

/* Kernel kid's rep's variants, its alt text: the unaligned one's entry points where it has one
   (nalign), the wide one's where it has one (swide), every body's, compiled into one module. */
static void *build_variant(Program *p, int kid, int body, int variant, void *stream) {
  void ***tab = variant == EM_WIDE ? &p->kfn_w : &p->kfn_u;
  const char *what = variant == EM_WIDE ? "wide" : "unaligned";
  int r = p->kernels[kid].rep, at = kid * MAX_BODIES + body, rat = r * MAX_BODIES + body;
  for (int v = 0; v < 2; v++) {
    void ***t = v ? &p->kfn_w : &p->kfn_u;
    if (!*t && !(*t = calloc((size_t)p->nkernels * MAX_BODIES + 1, sizeof **t))) {
      program_error(p, -1, "out of memory building a kernel's %s variant", what);
      return NULL;
    }
  }
  if ((*tab)[rat]) return (*tab)[at] = (*tab)[rat];
  const PKernel *rk = &p->kernels[r];
  int has[2] = {rk->nalign > 0, rk->swide != NULL};
  EM_ASSERT(rk->alt && rk->alt_len > 0 && has[variant == EM_WIDE]);
  double t0 = em_now_ms();
  char err[2048] = "", ident[512], key[65];
  if (cuda_compile_identity(p->cuda_sm, ident, sizeof ident, err, sizeof err)) {
    snprintf(p->err, sizeof p->err, "ember: NVRTC is not usable for kernel ember_k%d's %s variant: %s", kid,
             what, err);
    return NULL;
  }
  Str src = {0};
  str_printf(&src, "%.*s%.*s", (int)p->src_head, p->source, (int)rk->alt_len, rk->alt);
  if (src.oom) {
    str_free(&src);
    program_error(p, -1, "out of memory building a kernel's %s variant", what);
    return NULL;
  }
  cache_cubin_key(ident, src.s, src.len, key);
  char path[4096], why[512];
  const char *cdir = p->cache_dir;
  if (cdir && cache_open_dir(cdir, why, sizeof why)) cdir = NULL;
  void *cubin = NULL;
  size_t n = 0;
  if (cdir) cache_entry_path(cdir, key, path, sizeof path);
  if (!cdir || cache_read_entry(path, &cubin, &n, why, sizeof why)) {
    if (cuda_compile(src.s, p->cuda_sm, &cubin, &n, err, sizeof err)) {
      str_free(&src);
      snprintf(p->err, sizeof p->err, "ember: NVRTC failed on kernel ember_k%d's %s variant: %s", r, what, err);
      return NULL;
    }
    if (cdir) cache_store_bytes(cdir, key, cubin, n, why, sizeof why);  /* best effort */
  }
  str_free(&src);
  /* a module loads while the stream is captured only in relaxed mode (a
     pointer first unaligned inside a capture; ember's own captures run
     once first with the same pointers' alignment and sizes, so they never get here) */
  int capturing = 0, mode = CUDA_CAPTURE_RELAXED, relaxed = 0;
  if (cuda_capturing(stream, &capturing, NULL, 0) == 0 && capturing) relaxed = cuda_capture_mode(&mode) == 0;
  char name[2 * MAX_BODIES][48];  /* every variant's every body's entry point */
  const char *names[2 * MAX_BODIES];
  int nn = 0;
  for (int v = 0; v < 2; v++)
    for (int b = 0; has[v] && b < rk->nbodies; b++, nn++)
      em_entry_name(name[nn], sizeof name[nn], r, v ? EM_WIDE : EM_UNALIGNED, b), names[nn] = name[nn];
  CudaMod **mods = realloc(p->cmods, sizeof *mods * (size_t)(p->ncmods + 1));
  CudaMod *m = mods ? cuda_load(cubin, n, nn, names, err, sizeof err) : NULL;
  if (relaxed) cuda_capture_mode(&mode);
  free(cubin);
  if (mods) p->cmods = mods;
  if (!m) {
    snprintf(p->err, sizeof p->err, "ember: loading kernel ember_k%d's %s variant failed%s: %s", r, what,
             capturing ? " (first needed while a CUDA graph was being captured)" : "",
             err[0] ? err : "out of memory");
    return NULL;
  }
  p->cmods[p->ncmods++] = m;
  for (int v = 0, f = 0; v < 2; v++)
    for (int b = 0; has[v] && b < rk->nbodies; b++) (v ? p->kfn_w : p->kfn_u)[r * MAX_BODIES + b] = cuda_fn(m, f++);
  p->report.unaligned_variants++;
  p->report.variant_ms += em_now_ms() - t0;
  return (*tab)[at] = (*tab)[rat];
}

void *program_variant_fn(Program *p, int k, int body, int variant, void *stream) {
  pthread_mutex_lock(&variant_lock);
  int at = k * MAX_BODIES + body;
  void **tab = variant == EM_WIDE ? p->kfn_w : p->kfn_u;
  void *fn = tab && tab[at] ? tab[at] : build_variant(p, k, body, variant, stream);
  pthread_mutex_unlock(&variant_lock);
  return fn;
}

/* ---------------------------------------------------------------- the client's questions */

void ember_program_free(ember_program *ep) { program_free(ep ? &ep->p : NULL); }
const char *ember_program_error(const ember_program *ep) { return ep->p.err; }
const char *ember_program_warning(const ember_program *ep) { return ep->p.warn[0] ? ep->p.warn : NULL; }
int ember_program_num_values(const ember_program *ep) { return ep->p.nvalues; }
size_t ember_program_arena_bytes(const ember_program *ep) { return ep->p.arena_bytes; }
int ember_program_num_outputs(const ember_program *ep) { return ep->p.noutputs; }
int ember_program_output(const ember_program *ep, int i) {
  return i >= 0 && i < ep->p.noutputs ? ep->p.outputs[i] : -1;
}
int ember_program_num_inputs(const ember_program *ep) { return ep->p.ninputs; }
int ember_program_input(const ember_program *ep, int i) {
  return i >= 0 && i < ep->p.ninputs ? ep->p.inputs[i] : -1;
}

int ember_program_value(const ember_program *ep, int vid, ember_value_info *info) {
  const Program *p = &ep->p;
  if (vid < 0 || vid >= p->nvalues) return EMBER_EINVAL;
  const PValue *v = &p->values[vid];
  info->storage = v->storage;
  info->dtype = v->dtype, info->device = v->device, info->ndim = v->ndim;
  info->sizes = v->size, info->strides = v->stride;
  info->storage_offset = v->offset;
  info->root = v->root;
  info->root_delta = v->root_delta;
  info->arena_offset = v->arena_off;
  info->needs_tensor = v->needs_tensor;
  info->first_step = v->first_step, info->last_step = v->last_step;
  info->drop_step = v->drop_step;
  info->host_alloc = v->host_alloc, info->host_bytes = v->host_bytes, info->block_offset = v->block_off;
  return EMBER_OK;
}

int ember_program_num_syms(const ember_program *ep) { return ep->p.nsyms; }

/* ---------------------------------------------------------------- symbolic arena */

static pthread_mutex_t splan_lock = PTHREAD_MUTEX_INITIALIZER;

/* Value v's bytes at these sizes, rounded up to the alignment. */
static size_t sym_bytes(const PValue *v, const int64_t *syms) {
  int64_t span = 1;
  for (int d = 0; d < v->ndim; d++) {
    int64_t n = v->sx ? ex_eval(v->sx[d], NULL, syms) : v->size[d];
    int64_t st = v->sx ? ex_eval(v->sx[v->ndim + d], NULL, syms) : v->stride[d];
    if (n == 0) return 0;
    span += (n - 1) * st;
  }
  size_t b = (size_t)span * (size_t)v->elsize;
  return (b + SYM_ARENA_ALIGN - 1) / SYM_ARENA_ALIGN * SYM_ARENA_ALIGN;
}

/* First fit in value order: the lowest offset overlapping no arena value
   placed before it whose steps overlap its own (plan.c's rule; its order,
   largest first, is a choice of the compile's sizes, so here the values'
   order is kept: the same for every size).  The library calls' workspace,
   where there is one, is the arena's first bytes at every size (plan.c):
   the values go after it. */
static int alive_together(const PValue *u, const PValue *v) {
  return u->storage == ST_ARENA && v->storage == ST_ARENA && u->last_step >= v->first_step &&
         v->last_step >= u->first_step;
}

/* s->nbr and s->nbr_at (the pairs of arena values alive together), or
   neither where there are more than SYM_NBR_MAX pairs or no memory. */
static void sym_neighbours(const Program *p, struct SymPlan *s) {
  size_t n = 0;
  for (int i = 0; i < p->nvalues; i++)
    for (int j = 0; j < i && n <= SYM_NBR_MAX; j++) n += alive_together(&p->values[j], &p->values[i]);
  if (n > SYM_NBR_MAX) return;
  s->nbr_at = malloc(((size_t)p->nvalues + 1) * sizeof(int));
  s->nbr = malloc((n ? n : 1) * sizeof(int));
  if (!s->nbr_at || !s->nbr) {
    free(s->nbr_at), free(s->nbr);
    s->nbr_at = s->nbr = NULL;
    return;
  }
  int k = 0;
  for (int i = 0; i < p->nvalues; i++) {
    s->nbr_at[i] = k;
    for (int j = 0; j < i; j++)
      if (alive_together(&p->values[j], &p->values[i])) s->nbr[k++] = j;
  }
  s->nbr_at[p->nvalues] = k;
}

static void sym_plan(Program *p, const int64_t *syms, struct SymPlan *s) {
  size_t base = p->ws_bytes ? p->ws_off + p->ws_bytes : 0;
  size_t top = base;
  size_t *nb = s->off + p->nvalues;  /* scratch: bytes per value */
  for (int i = 0; i < p->nvalues; i++) {
    const PValue *v = &p->values[i];
    if (v->storage != ST_ARENA) continue;
    nb[i] = sym_bytes(v, syms);
    size_t off = base;
    for (int again = 1; again;) {
      again = 0;
      if (s->nbr) {  /* the values alive with it: the same overlaps as the scan below, in the same order */
        for (int k = s->nbr_at[i]; k < s->nbr_at[i + 1]; k++) {
          int j = s->nbr[k];
          if (off < s->off[j] + nb[j] && s->off[j] < off + nb[i]) off = s->off[j] + nb[j], again = 1;
        }
        continue;
      }
      for (int j = 0; j < i; j++) {
        if (!alive_together(&p->values[j], v)) continue;
        if (off < s->off[j] + nb[j] && s->off[j] < off + nb[i]) off = s->off[j] + nb[j], again = 1;
      }
    }
    s->off[i] = off;
    if (off + nb[i] > top) top = off + nb[i];
  }
  size_t scratch = 0;
  for (int i = 0; i < p->nkernels; i++)
    if (p->kernels[i].lib) {
      size_t b = program_sym_pad_bytes(p, &p->calls[p->kernels[i].call], syms);
      if (b > scratch) scratch = b;
    }
  s->scratch_off = (top + 255) / 256 * 256;
  s->bytes = scratch ? s->scratch_off + scratch : top;
}

size_t program_sym_pad_bytes(const Program *p, const PCall *c, const int64_t *syms) {
  const MatStore *r = &c->ms[2];
  if (!c->sx || !r->pad) return 0;
  int64_t m = ex_eval(c->sx[MM_M], NULL, syms), es = (int64_t)p->values[c->out].elsize;
  if (m <= 0 || m * r->len * es < PAD_MIN_BYTES) return 0;
  return r->off + ((size_t)(m * r->pad * es) + 255) / 256 * 256;
}

/* The debug option's record of a symbolic CUDA program's launches at these
   sizes, appended to launches.txt in its dump folder where a run meets
   them (the arena's plan is made for them): per kernel whose launch
   depends on the sizes, its grid and block, and which entry point runs
   where the pointers are aligned (the unaligned variant's wherever a size
   its vector paths need 4 to divide is not a multiple of 4, the wide
   variant's wherever an index passes 32 bits): of a kernel of
   several bodies (the row in registers or not), the body's, which its
   comment in kernels.cu describes.
   Best effort: nothing is reported where the file cannot be written. */
static void log_launches(const Program *p, const int64_t *syms) {
  Str b = {0};
  str_puts(&b, "sizes");
  for (int i = 0; i < p->nsyms; i++) str_printf(&b, " s%d=%lld", i, (long long)syms[i]);
  str_puts(&b, "\n");
  for (int i = 0; i < p->nkernels; i++) {
    const PKernel *k = &p->kernels[i];
    if (k->lib || !(k->sgrid || k->sblock || k->svec || k->sbody || k->swide)) continue;
    int64_t gx = k->sgrid ? ex_eval(k->sgrid, NULL, syms) : k->grid[0];
    int64_t bx = k->sblock ? ex_eval(k->sblock, NULL, syms) : k->block[0];
    if (gx <= 0 || k->grid[0] == 0) {
      str_printf(&b, "  ember_k%d: no launch (no output point)\n", i);
      continue;
    }
    str_printf(&b, "  ember_k%d: grid %lld, block %lldx%u", i, (long long)gx, (long long)bx, k->block[1]);
    int64_t body = k->sbody ? ex_eval(k->sbody, NULL, syms) : 0;
    char fn[48], fn_u[48];
    em_entry_name(fn, sizeof fn, i, 0, (int)body), em_entry_name(fn_u, sizeof fn_u, i, 1, (int)body);
    if (k->swide && ex_eval(k->swide, NULL, syms) >= EM_INDEX32_LIM)
      em_entry_name(fn, sizeof fn, i, EM_WIDE, (int)body), str_printf(&b, ", %s (an index passes 32 bits)", fn);
    else if (k->svec && k->nalign && ex_eval(k->svec, NULL, syms))
      str_printf(&b, ", %s (4 does not divide a size its vector paths need)", fn_u);
    else if (k->nalign)
      str_printf(&b, ", %s where the pointers are aligned, else %s", fn, fn_u);
    else if (k->sbody)
      str_printf(&b, ", %s", fn);
    str_puts(&b, "\n");
  }
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/launches.txt", p->dump_dir);
  FILE *f = !b.oom && n > 0 && (size_t)n < sizeof path ? fopen(path, "a") : NULL;
  if (f) {
    fputs(b.s, f);
    fclose(f);
  }
  str_free(&b);
}

/* The plan at these sizes, made or kept (splan_lock held): NULL when out of memory. */
static struct SymPlan *sym_plan_at(Program *p, const int64_t *syms) {
  struct SymPlan *s = p->splan;
  if (!s) {
    s = calloc(1, sizeof *s);
    if (s && !(s->off = calloc(2 * (size_t)p->nvalues + 1, sizeof(size_t)))) free(s), s = NULL;
    if (!s) return NULL;
    sym_neighbours(p, s);
    p->splan = s;
  }
  if (!s->valid || memcmp(s->syms, syms, sizeof(int64_t) * (size_t)p->nsyms)) {
    if (p->dump_dir && p->target == EMBER_CUDA) log_launches(p, syms);
    sym_plan(p, syms, s);
    memcpy(s->syms, syms, sizeof(int64_t) * (size_t)p->nsyms);
    s->valid = 1;
  }
  return s;
}

int program_sym_arena(Program *p, const int64_t *syms, void **ptrs, void *arena, size_t *bytes) {
  pthread_mutex_lock(&splan_lock);
  struct SymPlan *s = sym_plan_at(p, syms);
  if (s) {
    *bytes = s->bytes;
    for (int i = 0; ptrs && i < p->nvalues; i++)
      if (p->values[i].storage == ST_ARENA) ptrs[i] = (char *)arena + s->off[i];
  }
  pthread_mutex_unlock(&splan_lock);
  return s ? EMBER_OK : EMBER_ENOMEM;
}

size_t program_sym_scratch(Program *p, const int64_t *syms) {
  pthread_mutex_lock(&splan_lock);
  struct SymPlan *s = sym_plan_at(p, syms);
  size_t off = s ? s->scratch_off : 0;
  pthread_mutex_unlock(&splan_lock);
  return off;
}

int64_t ember_program_arena_offset(ember_program *ep, int v, const int64_t *syms) {
  Program *p = &ep->p;
  if (v < 0 || v >= p->nvalues || p->values[v].storage != ST_ARENA) return -1;
  if (!p->nsyms) return (int64_t)p->values[v].arena_off;
  if (!syms) return -1;
  pthread_mutex_lock(&splan_lock);
  struct SymPlan *s = sym_plan_at(p, syms);
  int64_t off = s ? (int64_t)s->off[v] : -1;
  pthread_mutex_unlock(&splan_lock);
  return off;
}

size_t ember_program_arena_bytes_for(ember_program *ep, const int64_t *syms) {
  Program *p = &ep->p;
  size_t bytes = 0;
  if (!p->nsyms) return p->arena_bytes;
  if (!syms || program_sym_arena(p, syms, NULL, NULL, &bytes)) return 0;
  return bytes;
}

int ember_program_value_sizes(const ember_program *ep, int vid, const int64_t *syms, int64_t *sizes,
                              int64_t *strides, int64_t *root_delta) {
  const Program *p = &ep->p;
  if (vid < 0 || vid >= p->nvalues || (p->nsyms && !syms)) return EMBER_EINVAL;
  const PValue *v = &p->values[vid];
  if (!v->sx) {
    memcpy(sizes, v->size, sizeof(int64_t) * (size_t)v->ndim);
    memcpy(strides, v->stride, sizeof(int64_t) * (size_t)v->ndim);
    *root_delta = v->root_delta;
    return EMBER_OK;
  }
  for (int d = 0; d < v->ndim; d++)
    sizes[d] = ex_eval(v->sx[d], NULL, syms), strides[d] = ex_eval(v->sx[v->ndim + d], NULL, syms);
  const PValue *r = &p->values[v->root];
  int64_t off = ex_eval(v->sx[2 * v->ndim], NULL, syms);
  *root_delta = off - (r->sx ? ex_eval(r->sx[2 * r->ndim], NULL, syms) : r->offset);
  return EMBER_OK;
}

/* 1 for each value that is the root of an output from position lo to hi - 1
   (into out, one char per value). */
static void output_roots(const Program *p, int lo, int hi, char *out) {
  for (int i = lo; i < hi; i++)
    if (p->outputs[i] >= 0) out[p->values[p->outputs[i]].root] = 1;
}

/* The plan's last decision, made when the client knows which outputs it
   pools: outputs from position start on that own their memory (roots no
   earlier output shares) come from one block per call (two or more such
   values), one allocation instead of one each.  On the CPU only those torch
   would allocate (HOST_TORCH): a large one keeps its pages in the block
   cache (hostmem.c).  A second call replaces the first's pooling. */
int ember_program_pool_outputs(ember_program *ep, int start) {
  Program *p = &ep->p;
  if (start < 0 || start > p->noutputs) {
    snprintf(p->err, sizeof p->err, "ember: pool_outputs: start %d is not an output position (0..%d)", start,
             p->noutputs);
    return EMBER_EINVAL;
  }
  char *mine = em_malloc(2 * (size_t)p->nvalues + 2);
  if (!mine) {
    snprintf(p->err, sizeof p->err, "ember: out of memory pooling the outputs");
    return EMBER_ENOMEM;
  }
  memset(mine, 0, 2 * (size_t)p->nvalues + 2);
  char *before = mine + p->nvalues + 1;
  output_roots(p, start, p->noutputs, mine);
  output_roots(p, 0, start, before);  /* seen before start: memory of its own */
  int n = 0;
  for (int i = 0; i < p->nvalues; i++) {
    PValue *v = &p->values[i];
    if (v->storage != ST_HOST) continue;
    if (v->host_alloc == EMBER_HOST_BLOCK) v->host_alloc = EMBER_HOST_TORCH;  /* a pooling asked before */
    n += mine[i] && !before[i] && v->host_alloc == EMBER_HOST_TORCH;
  }
  p->block_bytes = 0;
  if (n > 1) {  /* one value is one allocation either way */
    size_t off = 0;
    for (int i = 0; i < p->nvalues; i++) {
      PValue *v = &p->values[i];
      if (v->storage != ST_HOST || !mine[i] || before[i] || v->host_alloc != EMBER_HOST_TORCH) continue;
      v->host_alloc = EMBER_HOST_BLOCK;
      v->block_off = off;
      off += (v->host_bytes + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
    }
    p->block_bytes = off;
  }
  free(mine);
  return EMBER_OK;
}

size_t ember_program_block_bytes(const ember_program *ep) { return ep->p.block_bytes; }

int ember_program_num_steps(const ember_program *ep) { return ep->p.nsteps; }
int ember_program_step(const ember_program *ep, int i, int *kind, int *index) {
  if (i < 0 || i >= ep->p.nsteps) return EMBER_EINVAL;
  *kind = ep->p.steps[i].kind, *index = ep->p.steps[i].index;
  return EMBER_OK;
}

const char *ember_program_node_op(const ember_program *ep, int node) {
  return node >= 0 && node < ep->p.nnodes ? ep->p.nodes[node].op : NULL;
}
const char *ember_program_node_name(const ember_program *ep, int node) {
  return node >= 0 && node < ep->p.nnodes ? ep->p.nodes[node].name : NULL;
}
int ember_program_node_outputs(const ember_program *ep, int node, const int **outs) {
  if (node < 0 || node >= ep->p.nnodes) return EMBER_EINVAL;
  *outs = ep->p.nodes[node].outs;
  return ep->p.nodes[node].nouts;
}
int ember_program_node_arg(const ember_program *ep, int node, int arg) {
  if (node < 0 || node >= ep->p.nnodes || arg < 0 || arg >= ep->p.nodes[node].nargs) return -2;
  return ep->p.nodes[node].arg_v[arg];
}
const char *ember_program_fallback_reason(const ember_program *ep, int node) {
  return node >= 0 && node < ep->p.nnodes ? ep->p.nodes[node].reason : NULL;
}

int ember_program_is_cuda(const ember_program *ep) { return ep->p.target == EMBER_CUDA; }

int ember_program_report(const ember_program *ep, ember_report *r) {
  *r = ep->p.report;
  return EMBER_OK;
}

const char *ember_program_source(const ember_program *ep) { return ep->p.source; }
size_t ember_program_source_head(const ember_program *ep) { return ep->p.source ? ep->p.src_head : 0; }
