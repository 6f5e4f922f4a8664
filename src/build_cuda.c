/*
 * build_cuda.c - the CUDA build: a graph's generated CUDA C to loaded
 * kernels, in as little wall time as the machine allows.
 *
 *   1. Identical kernels are compiled once.  Repeated layers (a transformer's
 *      blocks, a ResNet's bottlenecks of one stage) give kernels that differ
 *      only in their name, their comments and the names made of value ids
 *      (parameters b<id>, accumulators a<id>, NaN flags n<id>, indices
 *      j<id>).  A kernel's key is the SHA-256 of its text with comments
 *      dropped, white space as one space, the name made generic and those
 *      names renumbered in order of appearance.  Kernels with equal keys
 *      share the first one's function (they take the same parameters in the
 *      same order, so the launch of each passes its own pointers).
 *   2. The distinct kernels are split into chunks, one per thread (the
 *      online CPUs up to 16, or $EMBER_COMPILE_THREADS; at least 5 kernels
 *      in each), balanced by the length of their source; each chunk the
 *      prelude plus its kernels; the chunks are compiled by NVRTC at once in
 *      parallel threads.  Every kernel that checks gathered indices goes into
 *      chunk 0, whose module's ember_index_error is the one run.c reads.
 *   3. Each chunk's cubin is kept in the disk cache (cache.c, the same
 *      checks as the CPU objects), keyed by its source and by what NVRTC
 *      makes of it (version, architecture, options), so a second process
 *      loads without compiling.
 *   4. Unless build_only, each chunk is loaded as a module into torch's
 *      context and every kernel gets its function in g->kfn.
 *
 * Not here: generating the source (codegen_cuda.c), NVRTC and the driver
 * (cuda.c), launching (run.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember_int.h"

/* ---------------------------------------------------------------- keys */

static int is_ident(int ch) { return isalnum(ch) || ch == '_'; }

/* Names the code generator derives from value ids: parameters b<id>,
   accumulators a<id>, NaN flags n<id>, arg-reduction indices j<id>. */
static const char id_prefixes[] = "banj";
#define MAX_RENAMED 512

int cuda_kernel_key(const char *s, size_t n, char hex[65]) {
  Str b = {0};
  int names[4][MAX_RENAMED], nnames[4] = {0};  /* per prefix, the ids seen, by first appearance */
  size_t i = 0;
  while (i < n) {
    if (isspace((unsigned char)s[i]) || (s[i] == '/' && i + 1 < n && s[i + 1] == '*')) {
      /* a run of white space and comments: one space */
      while (i < n) {
        if (isspace((unsigned char)s[i])) {
          i++;
        } else if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {
          const char *end = strstr(s + i + 2, "*/");
          i = end && (size_t)(end - s) + 2 <= n ? (size_t)(end - s) + 2 : n;
        } else {
          break;
        }
      }
      str_puts(&b, " ");
      continue;
    }
    if (is_ident((unsigned char)s[i]) && (i == 0 || !is_ident((unsigned char)s[i - 1]))) {
      size_t j = i;
      while (j < n && is_ident((unsigned char)s[j])) j++;
      size_t len = j - i;
      const char *pre = len >= 2 ? strchr(id_prefixes, s[i]) : NULL;
      int digits = pre != NULL && s[i] != 0;
      for (size_t k = i + 1; digits && k < j; k++) digits &= isdigit((unsigned char)s[k]) != 0;
      if (digits) {
        int c = (int)(pre - id_prefixes), v = atoi(s + i + 1), k = 0;
        while (k < nnames[c] && names[c][k] != v) k++;
        if (k == nnames[c]) {
          if (nnames[c] == MAX_RENAMED) {  /* too many to rename: its own key */
            str_free(&b);
            em_sha256_hex(s, n, hex);
            return 0;
          }
          names[c][nnames[c]++] = v;
        }
        str_printf(&b, "%c%d", s[i], k);
        i = j;
        continue;
      }
      digits = len > 7 && strncmp(s + i, "ember_k", 7) == 0;
      for (size_t k = i + 7; digits && k < j; k++) digits &= isdigit((unsigned char)s[k]) != 0;
      if (digits) str_puts(&b, "ember_k");
      else str_printf(&b, "%.*s", (int)len, s + i);
      i = j;
      continue;
    }
    str_printf(&b, "%c", s[i]);
    i++;
  }
  if (b.oom) { str_free(&b); return -1; }
  em_sha256_hex(b.s ? b.s : "", b.len, hex);
  str_free(&b);
  return 0;
}

/* ---------------------------------------------------------------- chunks */

typedef struct Chunk {
  int *kern; int nkern;    /* the distinct kernels it holds (ids), malloc */
  Str src;                 /* the prelude and those kernels */
  char key[65];            /* its cache key */
  void *cubin; size_t n;   /* compiled or read from the cache (malloc) */
  int hit;                 /* came from the cache */
  int rc;                  /* cuda_compile's status */
  char err[2048];
  int sm;
} Chunk;

static void *compile_chunk(void *arg) {
  Chunk *c = arg;
  c->rc = cuda_compile(c->src.s, c->sm, &c->cubin, &c->n, c->err, sizeof c->err);
  return NULL;
}

/* Chunks (threads): em_compile_threads(), but at least MIN_PER_CHUNK
   distinct kernels in each: every chunk compiles the prelude again.  On the
   16-CPU H100 machine (cold cache, ember bench; bench/results/gpu-h100-ab/README.md):
   resnet50 inference (20 distinct kernels) built in 858 ms with 16
   chunks, 709 with 8, 580 with 4; densenet121 training (hundreds) in 4274
   ms with 16, 8126 with 4. */
#define MIN_PER_CHUNK 5

static void chunks_free(Chunk *ch, int n) {
  for (int i = 0; ch && i < n; i++) free(ch[i].kern), str_free(&ch[i].src), free(ch[i].cubin);
  free(ch);
}

int build_cuda(Graph *g, const ember_options *o) {
  char err[3900] = "";
  double t0 = em_now_ms();
  int nk = g->nkernels, rc = EMBER_OK, nch = 0;
  cuda_set_search_path(o->cuda_lib_dirs, o->cuda_include_dirs);
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

  /* 1. distinct kernels: rep[i] is the first kernel with i's key */
  char (*keys)[65] = em_malloc(sizeof *keys * (size_t)(nk + 1));
  int *rep = em_malloc(sizeof(int) * (size_t)(nk + 1)), *uniq = em_malloc(sizeof(int) * (size_t)(nk + 1));
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
    if (cuda_kernel_key(g->source + k->src_off, k->src_len, keys[i])) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    for (int j = 0; j < nu; j++)
      if (strcmp(keys[uniq[j]], keys[i]) == 0) { rep[i] = uniq[j]; break; }
    if (rep[i] == i) uniq[nu++] = i;
  }
  g->report.distinct_kernels = nu;

  /* 2. chunks: index-checking kernels in chunk 0 */
  int nt = em_compile_threads();
  nch = (nu + MIN_PER_CHUNK - 1) / MIN_PER_CHUNK;
  if (nch > nt) nch = nt;
  ch = calloc((size_t)nch + 1, sizeof *ch);
  if (!ch) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  for (int c = 0; c < nch; c++) {
    ch[c].kern = em_malloc(sizeof(int) * (size_t)nu);
    ch[c].sm = sm;
    if (!ch[c].kern) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
  }
  /* the others longest first, each to the chunk with the least source so far
     (NVRTC's time for a kernel grows with its source: densenet121's
     BatchNorm kernels over a 32-input cat, 30 KB each, take 250 ms against
     20-50 ms for most; dealt out by count, one chunk could draw several) */
  size_t *load = calloc((size_t)nch + 1, sizeof *load);
  if (!load) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  for (int j = 0; j < nu; j++)
    if (g->kernels[uniq[j]]->index_checks) {
      ch[0].kern[ch[0].nkern++] = uniq[j];
      load[0] += g->kernels[uniq[j]]->src_len;
    }
  for (int j = 1; j < nu; j++)  /* insertion sort: longest first, then by id */
    for (int i = j; i > 0 && g->kernels[uniq[i]]->src_len > g->kernels[uniq[i - 1]]->src_len; i--) {
      int t = uniq[i];
      uniq[i] = uniq[i - 1], uniq[i - 1] = t;
    }
  for (int j = 0; j < nu; j++) {
    const Kernel *k = g->kernels[uniq[j]];
    if (k->index_checks) continue;
    int c = 0;
    for (int d = 1; d < nch; d++)
      if (load[d] < load[c]) c = d;
    ch[c].kern[ch[c].nkern++] = uniq[j];
    load[c] += k->src_len;
  }
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
      const Kernel *k = g->kernels[ch[c].kern[j]];
      str_printf(s, "%.*s", (int)k->src_len, g->source + k->src_off);
    }
    Str kb = {0};  /* the key: what NVRTC makes of the source, then the source */
    str_printf(&kb, "ember-cubin-1 %s %s\n", ember_version(), ident);
    str_puts(&kb, s->s ? s->s : "");
    if (s->oom || kb.oom) {
      str_free(&kb);
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    em_sha256_hex(kb.s, kb.len, ch[c].key);
    str_free(&kb);
    memcpy(ch[c].key, "cu", 2);  /* cubin entries stand apart from objects in the cache */
    if (cdir) {
      char path[4096], why[512];
      cache_entry_path(cdir, ch[c].key, path, sizeof path);
      if (cache_read_entry(path, &ch[c].cubin, &ch[c].n, why, sizeof why) == 0) ch[c].hit = 1;
    }
  }

  /* compile the chunks the cache did not have, one thread each (this one runs the last) */
  pthread_t th[EM_MAX_THREADS];
  int started[EM_MAX_THREADS] = {0}, last = -1;
  for (int c = 0; c < nch; c++) {
    if (ch[c].hit) continue;
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
  g->report.cache_hit = nch > 0;
  for (int c = 0; c < nch; c++) g->report.cache_hit &= ch[c].hit;
  if (o->build_only) goto done;

  /* 4. load: a module per chunk, each kernel's function from its representative's */
  double tload = em_now_ms();
  g->cmods = calloc((size_t)nch + 1, sizeof *g->cmods);
  g->kfn = calloc((size_t)nk + 1, sizeof *g->kfn);
  if (!g->cmods || !g->kfn) {
    rc = graph_error(g, NULL, "out of memory in the CUDA build");
    goto done;
  }
  for (int c = 0; c < nch; c++) {
    const char **names = pool_alloc(&g->pool, sizeof(char *) * (size_t)(ch[c].nkern + 1));
    for (int j = 0; names && j < ch[c].nkern; j++) names[j] = pool_printf(&g->pool, "ember_k%d", ch[c].kern[j]);
    if (!names || g->pool.oom) {
      rc = graph_error(g, NULL, "out of memory in the CUDA build");
      goto done;
    }
    CudaMod *m = cuda_load(ch[c].cubin, ch[c].n, ch[c].nkern, names, err, sizeof err);
    if (!m) {
      snprintf(g->err, sizeof g->err, "ember: loading the CUDA kernels failed: %s", err[0] ? err : "out of memory");
      g->failed = 1;
      rc = EMBER_EBUILD;
      goto done;
    }
    g->cmods[g->ncmods++] = m;
    for (int j = 0; j < ch[c].nkern; j++) g->kfn[ch[c].kern[j]] = cuda_fn(m, j);
  }
  for (int i = 0; i < nk; i++) {
    if (g->kernels[i]->lib) continue;
    g->kfn[i] = g->kfn[rep[i]];
    EM_ASSERT(g->kfn[i] && (!g->kernels[i]->index_checks || g->kernels[rep[i]]->index_checks));
  }
  if (nch > 0) g->index_dev = cuda_global(g->cmods[0], "ember_index_error");
  if (g->index_nowait && g->index_checks && g->index_dev) {
    /* the asynchronous check (run.c): the kernels write a host-mapped record
       and trap; where that cannot be set up, the record is read back per run */
    void *dev = NULL, *sym = cuda_global(g->cmods[0], "ember_index_host");
    char e2[256];
    g->index_host = sym ? cuda_host_mapped(2 * sizeof(int64_t), &dev, e2, sizeof e2) : NULL;
    if (g->index_host && cuda_write_sync(sym, &dev, sizeof dev, e2, sizeof e2)) {
      cuda_host_free(g->index_host);
      g->index_host = NULL;
    }
    g->report.index_async = g->index_host != NULL;
  }
  g->report.load_ms = em_now_ms() - tload;
done:
  chunks_free(ch, nch);
  free(keys), free(rep), free(uniq);
  g->report.build_ms = em_now_ms() - t0;
  return rc;
}
