/*
 * build_cuda.c - the CUDA build: a graph's generated CUDA C to loaded
 * kernels, in as little wall time as the machine allows.
 *
 *   1. Identical kernels are compiled once.  Repeated layers (a transformer's
 *      blocks, a ResNet's bottlenecks of one stage) give kernels that differ
 *      only in their name and their comments: the code generator names
 *      parameters, accumulators and temps by their position in the kernel
 *      (shapes, strides, constants and dtypes are in the text).  A kernel's
 *      key is the SHA-256 of its text without comments and its own name.
 *      Kernels with equal keys share the first one's function (they take
 *      parameters alike in the same order, so the launch of each passes its
 *      own pointers).
 *   2. The distinct kernels are split into chunks, one per thread (the
 *      online CPUs up to 16, or $EMBER_COMPILE_THREADS; at least 5 kernels
 *      in each), balanced by the length of their source; each chunk the
 *      prelude plus its kernels; the chunks are compiled by NVRTC at once, in
 *      child processes (threads where a process cannot start, or with
 *      EMBER_NVRTC_PROCESSES=0).  Every kernel that checks gathered indices goes into
 *      chunk 0, whose module's ember_index_error is the one run.c reads.
 *   3. Each chunk's cubin is kept in the disk cache (cache.c, the same
 *      checks as the CPU objects), keyed by its source and by what NVRTC
 *      makes of it (version, architecture, options), so a second process
 *      loads without compiling.
 *   4. Each chunk's image (the cubin, or PTX where NVRTC makes no cubin for
 *      the architecture) is kept with the program (p->images, copied into
 *      its pool: program_io.c saves them, so a loaded program needs no
 *      NVRTC).  Unless build_only, each is loaded as a module into torch's
 *      context and every kernel gets its function in the program (p->kfn;
 *      one per body where a kernel has several entry points, Kernel.nbodies),
 *      which owns the modules from then on (program.c's
 *      program_load_modules, which a loaded program calls too).
 *   5. A kernel with vector accesses is compiled with its aligned path
 *      alone; its variant with the unaligned path (codegen_cuda.c) is
 *      compiled, cached and loaded by the program (program.c) when a launch
 *      first meets a pointer that is not aligned (run.c), once for the
 *      kernels of one text (p->kernels[i].rep, set here).  build_only
 *      (checking the code without a GPU) compiles the variants with the
 *      kernels.
 *
 * Not here: generating the source (codegen_cuda.c), NVRTC and the driver
 * (cuda.c), launching and the lazily built variants (run.c, program.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember_int.h"

/* ---------------------------------------------------------------- keys */

/* ---------------------------------------------------------------- chunks */

typedef struct Chunk {
  int *kern; int nkern;    /* the distinct kernels it holds (ids), malloc */
  Str src;                 /* the prelude and those kernels */
  char key[65];            /* its cache key */
  void *cubin; size_t n;   /* compiled or read from the cache (malloc) */
  int hit;                 /* came from the cache */
  int rc;                  /* cuda_compile's status */
  int done;                /* compiled (rc and cubin or err set), here or in a child process */
  int forked;              /* ... in a child process */
  double ms;               /* NVRTC's time for it */
  char err[2048];
  int sm;
} Chunk;

static void *compile_chunk(void *arg) {
  Chunk *c = arg;
  double t = em_now_ms();
  c->rc = cuda_compile(c->src.s, c->sm, &c->cubin, &c->n, c->err, sizeof c->err);
  c->ms = em_now_ms() - t;
  c->done = 1;
  return NULL;
}

/* ---------------------------------------------------------------- processes */

/* What a child sends back: this header, then the cubin (rc 0) or NVRTC's log. */
typedef struct ChildMsg { uint32_t magic; int32_t rc; uint64_t n; double ms; } ChildMsg;
#define CHILD_MAGIC 0x656d6272u

/* The chunks in child processes, one each (fork; the child only runs NVRTC
   and writes its result into a pipe).  NVRTC's threads in one process slow
   each other down (together they take almost three times one thread's
   work; tools/gpu/nvrtc_scaling.py measures it), processes do not.  A chunk whose process did not start or
   report is left for the threads (c->done 0).  Each child leads a process
   group of its own; all of them together get timeout_s seconds, and past
   that, or when the client's interrupt check says stop, every child still
   running is killed and every chunk not done fails, naming the option. */
static void compile_forked(Chunk **todo, int n, double timeout_s) {
  pid_t pid[EM_MAX_THREADS];
  int fd[EM_MAX_THREADS];
  for (int i = 0; i < n; i++) {
    int p[2];
    pid[i] = -1;
    if (pipe(p)) continue;
    pid_t q = em_fork_group();
    if (q == 0) {  /* the child: NVRTC, the result into the pipe, and out without exit handlers */
      close(p[0]);
      Chunk *c = todo[i];
      compile_chunk(c);
      size_t len = c->rc ? strlen(c->err) : c->n;
      ChildMsg m = {CHILD_MAGIC, c->rc, len, c->ms};
      int bad = em_write_all(p[1], &m, sizeof m) || em_write_all(p[1], c->rc ? (void *)c->err : c->cubin, len);
      _exit(bad);
    }
    close(p[1]);
    if (q < 0) {
      close(p[0]);
      continue;
    }
    pid[i] = q, fd[i] = p[0];
  }
  double deadline = em_now_ms() + timeout_s * 1e3;
  int stop = 0;  /* EM_WAIT_TIMEOUT or EM_WAIT_INTERRUPTED once met: the rest are killed */
  for (int i = 0; i < n; i++) {
    if (pid[i] < 0) continue;
    Chunk *c = todo[i];
    ChildMsg m;
    int r = stop ? stop : em_read_until(fd[i], &m, sizeof m, deadline);
    if (r == 0 && m.magic == CHILD_MAGIC) {
      c->ms = m.ms, c->forked = 1;
      if (m.rc == 0 && m.n > 0 && (c->cubin = malloc(m.n)) && !(r = em_read_until(fd[i], c->cubin, m.n, deadline))) {
        c->rc = 0, c->n = m.n, c->done = 1;
      } else if (m.rc != 0 && m.n < sizeof c->err && !(r = em_read_until(fd[i], c->err, m.n, deadline))) {
        c->err[m.n] = 0, c->rc = m.rc, c->done = 1;
      } else {
        free(c->cubin), c->cubin = NULL;
      }
    }
    if (r == EM_WAIT_TIMEOUT || r == EM_WAIT_INTERRUPTED) stop = r;
    close(fd[i]);
    em_kill_group(pid[i]);  /* done with it (it has written all, or is stopped): reaped */
  }
  for (int i = 0; stop && i < n; i++) {
    Chunk *c = todo[i];
    if (c->done) continue;
    if (stop == EM_WAIT_TIMEOUT)
      snprintf(c->err, sizeof c->err, "the NVRTC child processes did not finish within %g s and were "
               "stopped; " EM_TIMEOUT_HINT, timeout_s);
    else
      snprintf(c->err, sizeof c->err, "interrupted; the NVRTC child processes were stopped");
    c->rc = -1, c->done = 1;
  }
}

/* Chunks (threads): em_compile_threads(), but at least MIN_PER_CHUNK
   distinct kernels in each: every chunk compiles the prelude again, which
   costs a graph of few kernels more than the parallelism gains, while a
   graph of hundreds gains from every chunk. */
#define MIN_PER_CHUNK 5

static void chunks_free(Chunk *ch, int n) {
  for (int i = 0; ch && i < n; i++) free(ch[i].kern), str_free(&ch[i].src), free(ch[i].cubin);
  free(ch);
}

/* Item it of a build: kernel it (it < nk) or kernel it - nk's variants. */
static const char *item_text(const Graph *g, int it, size_t *len) {
  int nk = g->nkernels;
  const Kernel *k = g->kernels[it < nk ? it : it - nk];
  *len = it < nk ? k->src_len : k->alt_len;
  return g->source + (it < nk ? k->src_off : k->alt_off);
}

int build_cuda(Graph *g, Program *p) {
  const EmOptions *o = &g->opt;
  char err[3900] = "";
  double t0 = em_now_ms();
  int nk = g->nkernels, rc = EMBER_OK, nch = 0;
  cuda_set_search_path(*o->cuda_lib_dirs ? o->cuda_lib_dirs : NULL, *o->cuda_include_dirs ? o->cuda_include_dirs : NULL);
  int sm = o->cuda_sm;
  if (!sm && (cuda_init(err, sizeof err) || cuda_arch(o->cuda_device, &sm, err, sizeof err))) {
    snprintf(g->err, sizeof g->err, "ember: CUDA is not usable: %s", err);
    g->failed = 1;
    return EMBER_EBUILD;
  }
  char ident[512];
  if (cuda_compile_identity(sm, ident, sizeof ident, err, sizeof err)) {
    snprintf(g->err, sizeof g->err, "ember: NVRTC is not usable: %s", err);
    g->failed = 1;
    return EMBER_EBUILD;
  }

  p->cuda_sm = sm;
  if (cuda_compile_facts(sm, &p->nvrtc_version, &p->image_ptx, err, sizeof err)) {
    snprintf(g->err, sizeof g->err, "ember: NVRTC is not usable: %s", err);
    g->failed = 1;
    return EMBER_EBUILD;
  }
  /* 1. distinct kernels: rep[i] is the first kernel with i's key (kept in
     the program's kernels: their unaligned variants are alike too) */
  char (*keys)[65] = em_malloc(sizeof *keys * (size_t)(2 * nk + 1));
  int *rep = em_malloc(sizeof(int) * (size_t)(nk + 1)), *uniq = em_malloc(sizeof(int) * (size_t)(2 * nk + 1));
  Chunk *ch = NULL;
  if (!keys || !rep || !uniq) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  int nu = 0;
  for (int i = 0; i < nk; i++) {
    Kernel *k = g->kernels[i];
    rep[i] = i;
    if (k->lib) continue;  /* a library call: nothing to compile */
    EM_ASSERT(k->id == i && k->src_off + k->src_len <= strlen(g->source));
    if (em_kernel_key(g->source + k->src_off, k->src_len, k->id, keys[i])) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    for (int j = 0; j < nu; j++)  /* ... and the same variants (its text: the rep's) */
      if (strcmp(keys[uniq[j]], keys[i]) == 0 && !g->kernels[uniq[j]]->swide == !k->swide) {
        rep[i] = uniq[j];
        break;
      }
    if (rep[i] == i) uniq[nu++] = i;
  }
  g->report.distinct_kernels = nu;
  /* checking the code (build_only, no GPU): the variants too, which
     otherwise are compiled only when a launch needs one */
  int nitems = nu;
  for (int i = 0; o->build_only && i < nk; i++) {
    const Kernel *k = g->kernels[i];
    if (!k->alt_len) continue;
    if (em_kernel_key(g->source + k->alt_off, k->alt_len, k->id, keys[nk + i])) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    int dup = 0;
    for (int j = nu; j < nitems && !dup; j++) dup = strcmp(keys[uniq[j]], keys[nk + i]) == 0;
    if (!dup) uniq[nitems++] = nk + i;
  }

  /* 2. chunks: index-checking kernels in chunk 0 */
  int nt = em_compile_threads(o);
  nch = (nitems + MIN_PER_CHUNK - 1) / MIN_PER_CHUNK;
  if (nch > nt) nch = nt;
  ch = calloc((size_t)nch + 1, sizeof *ch);
  if (!ch) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  for (int c = 0; c < nch; c++) {
    ch[c].kern = em_malloc(sizeof(int) * (size_t)nitems);
    ch[c].sm = sm;
    if (!ch[c].kern) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
  }
  /* the others longest first, each to the chunk with the least source so far
     (NVRTC's time for a kernel grows with its source: a BatchNorm kernel
     over a 32-input cat takes several times most kernels' time; dealt out
     by count, one chunk could draw several) */
  size_t *load = calloc((size_t)nch + 1, sizeof *load);
  if (!load) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  size_t *len = em_malloc(sizeof(size_t) * (size_t)(2 * nk + 1));
  if (!len) {
    free(load);
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  for (int j = 0; j < nitems; j++) item_text(g, uniq[j], &len[uniq[j]]);
  for (int j = 0; j < nitems; j++)
    if (uniq[j] < nk && g->kernels[uniq[j]]->index_checks) {
      ch[0].kern[ch[0].nkern++] = uniq[j];
      load[0] += len[uniq[j]];
    }
  for (int j = 1; j < nitems; j++)  /* insertion sort: longest first, then by id */
    for (int i = j; i > 0 && len[uniq[i]] > len[uniq[i - 1]]; i--) {
      int t = uniq[i];
      uniq[i] = uniq[i - 1], uniq[i - 1] = t;
    }
  for (int j = 0; j < nitems; j++) {
    if (uniq[j] < nk && g->kernels[uniq[j]]->index_checks) continue;
    int c = 0;
    for (int d = 1; d < nch; d++)
      if (load[d] < load[c]) c = d;
    ch[c].kern[ch[c].nkern++] = uniq[j];
    load[c] += len[uniq[j]];
  }
  free(len);
  free(load);
  for (int c = 0; c < nch; c++)  /* each chunk's kernels in id order */
    for (int j = 1; j < ch[c].nkern; j++)
      for (int i = j; i > 0 && ch[c].kern[i] < ch[c].kern[i - 1]; i--) {
        int t = ch[c].kern[i];
        ch[c].kern[i] = ch[c].kern[i - 1], ch[c].kern[i - 1] = t;
      }
  char cbuf[4096];
  const char *cdir = em_cache_dir(o, cbuf, sizeof cbuf);
  if (cdir && cache_open_dir(cdir, err, sizeof err)) cdir = NULL;  /* an unusable cache: compile */
  for (int c = 0; c < nch; c++) {
    Str *s = &ch[c].src;
    str_printf(s, "%.*s", (int)g->src_head, g->source);
    for (int j = 0; j < ch[c].nkern; j++) {
      size_t n;
      const char *t = item_text(g, ch[c].kern[j], &n);
      str_printf(s, "%.*s", (int)n, t);
    }
    if (s->oom) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    cache_cubin_key(ident, s->s, s->len, ch[c].key);
    if (cdir) {
      char path[4096], why[512];
      cache_entry_path(cdir, ch[c].key, path, sizeof path);
      if (cache_read_entry(path, &ch[c].cubin, &ch[c].n, why, sizeof why) == 0) ch[c].hit = 1;
    }
  }

  /* compile the chunks the cache did not have: in a process each (one
     chunk, or a fault test: here), then what is left in a thread each (this
     one runs the last) */
  Chunk *todo[EM_MAX_THREADS];
  int ntodo = 0;
  for (int c = 0; c < nch; c++)
    if (!ch[c].hit) todo[ntodo++] = &ch[c];
  double tcomp = em_now_ms();
  if (ntodo > 1 && !em_fail_armed()) compile_forked(todo, ntodo, (double)o->compile_timeout);
  pthread_t th[EM_MAX_THREADS];
  int started[EM_MAX_THREADS] = {0}, last = -1;
  for (int c = 0; c < nch; c++) {
    if (ch[c].hit || ch[c].done) continue;
    if (last >= 0) started[last] = pthread_create(&th[last], NULL, compile_chunk, &ch[last]) == 0;
    if (last >= 0 && !started[last]) compile_chunk(&ch[last]);
    last = c;
  }
  if (last >= 0) compile_chunk(&ch[last]);
  for (int c = 0; c < nch; c++)
    if (started[c]) pthread_join(th[c], NULL);
  for (int c = 0; c < nch; c++) {
    if (ch[c].hit) continue;
    if (ch[c].rc) {
      snprintf(g->err, sizeof g->err, "ember: NVRTC failed on the generated CUDA kernels: %s", ch[c].err);
      g->failed = 1;
      rc = EMBER_EBUILD;
      goto done;
    }
    char why[512];
    if (cdir) cache_store_bytes(cdir, ch[c].key, ch[c].cubin, ch[c].n, why, sizeof why);  /* best effort */
  }
  g->report.nvrtc_ms = ntodo ? em_now_ms() - tcomp : 0;
  g->report.nvrtc_chunks = ntodo;
  for (int i = 0; i < ntodo; i++) {
    g->report.nvrtc_processes += todo[i]->forked;
    g->report.nvrtc_chunk_sum_ms += todo[i]->ms;
    if (todo[i]->ms > g->report.nvrtc_chunk_max_ms) g->report.nvrtc_chunk_max_ms = todo[i]->ms;
  }
  g->report.cache_hit = nch > 0;
  for (int c = 0; c < nch; c++) g->report.cache_hit &= ch[c].hit;
  /* the images, kept with the program (program_io.c saves them): chunk 0 first */
  p->images = pool_alloc(&p->pool, sizeof *p->images * (size_t)(nch + 1));
  if (!p->images) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  for (int c = 0; c < nch; c++) {
    PImage *im = &p->images[c];
    void *d = pool_alloc(&p->pool, ch[c].n);
    im->kern = pool_alloc(&p->pool, sizeof(int) * (size_t)(ch[c].nkern + 1));
    if (!d || !im->kern) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    memcpy(d, ch[c].cubin, ch[c].n);
    memcpy(im->kern, ch[c].kern, sizeof(int) * (size_t)ch[c].nkern);
    im->data = d, im->n = ch[c].n, im->nkern = ch[c].nkern;
  }
  p->nimages = nch;
  p->index_nowait = g->index_nowait;
  for (int i = 0; i < nk && i < p->nkernels; i++) p->kernels[i].rep = rep[i];
  if (o->build_only) goto done;

  /* 4. load: a module per chunk, each kernel's function from its representative's */
  if (program_load_modules(p, err, sizeof err)) {
    snprintf(g->err, sizeof g->err, "ember: %s", err);
    g->failed = 1;
    rc = EMBER_EBUILD;
    goto done;
  }
  p->driver_version = cuda_driver_version();
  g->report.index_async = p->report.index_async;
  g->report.load_ms = p->report.load_ms;
done:
  chunks_free(ch, nch);
  free(keys), free(uniq);
  free(rep);
  g->report.build_ms = em_now_ms() - t0;
  return rc;
}
