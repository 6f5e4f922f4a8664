/* test_program.c - the compiled program apart from the graph: a CPU graph
   (a kernel, a fallback the client runs, a gather) goes through
   ember_compile, which frees the graph, and the program then answers the
   client's questions and runs, only from what it keeps (AddressSanitizer
   would catch a read of the freed graph): results against plain C, an index
   out of range raised naming the op and node, a fallback step without a
   client refused naming the node.  A CUDA graph built only (NVRTC, no GPU)
   keeps each vector kernel's unaligned variant's text and its launch
   checks, and compiles the variant from that text alone.  A saved CPU
   program (ember_program_save) loads back and runs with the same results;
   a blob truncated at every length, with a byte flipped (its hash then
   caught or mended) or with its object changed is refused with a message,
   never a crash.  A CUDA program saves its images (NVRTC's cubins) with
   their hashes and the architecture in the header: built only for sm_90
   (no GPU) it loads back, refuses to run, and is refused truncated, with
   an image changed or for a device of another sm (cuda_test_device); with
   a GPU, compiled, saved, loaded and run with the compiled one's results.
   A CPU mm is a library step (blas_cpu.c, with a plain C sgemm_ standing in
   for torch's) that saves, loads and runs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "t.h"

static ember_arg T(int v) { ember_arg a = {EMBER_ARG_TENSOR, v, 0, NULL, 0, NULL, NULL}; return a; }
static ember_arg I(int64_t i) { ember_arg a = {EMBER_ARG_INT, i, 0, NULL, 0, NULL, NULL}; return a; }

static int val(ember_graph *g, int dev, int dtype, int ndim, const int64_t *sz) {
  int64_t st[MAXD], s = 1;
  for (int d = ndim - 1; d >= 0; d--) st[d] = s, s *= sz[d];
  return ember_graph_value(g, dtype, dev, ndim, sz, st, 0);
}

static int node1(ember_graph *g, const char *op, const char *name, int nargs, ember_arg *args, int out) {
  return ember_graph_node(g, op, name, nargs, args, 1, &out);
}

enum { R = 4, C = 5, NI = 3 };
static int vx, vi, vy, vf, vz, vs;  /* the value ids of the graph below */

/* y = exp(x); f = opaque(y) (a fallback: 2 * y); z = f + x; s = x.index_select(0, i) */
static ember_graph *graph(int dev) {
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {R, C}, si[] = {NI}, ss[] = {NI, C};
  vx = val(g, dev, EMBER_F32, 2, s2), vi = val(g, dev, EMBER_I64, 1, si);
  ember_graph_input(g, vx), ember_graph_input(g, vi);
  vy = val(g, dev, EMBER_F32, 2, s2), vf = val(g, dev, EMBER_F32, 2, s2), vz = val(g, dev, EMBER_F32, 2, s2);
  vs = val(g, dev, EMBER_F32, 2, ss);
  ember_arg ae[] = {T(vx)}, ao[] = {T(vy)}, aa[] = {T(vf), T(vx)}, ai[] = {T(vx), I(0), T(vi)};
  node1(g, "aten.exp.default", "exp", 1, ae, vy);
  node1(g, "aten.not_lowered.default", "opaque", 1, ao, vf);
  node1(g, "aten.add.Tensor", "add", 2, aa, vz);
  node1(g, "aten.index_select.default", "index_select", 3, ai, vs);
  int outs[] = {vz, vs};
  ember_graph_outputs(g, 2, outs);
  return g;
}

typedef struct Client {    /* what a client keeps for a run */
  ember_program *p;
  float fbuf[R * C];       /* the fallback's result */
  int calls;
} Client;

/* The fallback: its output is 2 * its one tensor argument. */
static int run_fallback(void *ctx, int node, void **ptrs) {
  Client *c = ctx;
  const int *outs = NULL;
  c->calls++;
  CHECK(strcmp(ember_program_node_op(c->p, node), "aten.not_lowered.default") == 0);
  CHECK(strcmp(ember_program_node_name(c->p, node), "opaque") == 0);
  CHECK(ember_program_fallback_reason(c->p, node) != NULL);
  int in = ember_program_node_arg(c->p, node, 0);
  CHECK(ember_program_node_arg(c->p, node, 1) == -2);
  if (ember_program_node_outputs(c->p, node, &outs) != 1 || outs[0] != vf || in != vy || !ptrs[in]) return 1;
  const float *y = ptrs[in];
  for (int i = 0; i < R * C; i++) c->fbuf[i] = 2 * y[i];
  ptrs[vf] = c->fbuf;
  return 0;
}

/* One run with the client's buffers: the status; z and s filled. */
static int run(Client *c, const float *x, const int64_t *idx, float *z, float *s, int with_client) {
  ember_program *p = c->p;
  int nv = ember_program_num_values(p);
  void **ptrs = calloc((size_t)nv, sizeof *ptrs);
  void *host[64] = {0};
  void *arena = ember_program_arena_bytes(p) ? malloc(ember_program_arena_bytes(p)) : NULL;
  CHECK(ptrs && nv < 64);
  if (!ptrs || nv >= 64) return -100;
  ptrs[ember_program_input(p, 0)] = (void *)x, ptrs[ember_program_input(p, 1)] = (void *)idx;
  for (int v = 0; v < nv; v++) {
    ember_value_info in;
    CHECK(ember_program_value(p, v, &in) == EMBER_OK);
    if (in.storage != EMBER_STORE_HOST) continue;
    int64_t n = 1;
    for (int d = 0; d < in.ndim; d++) n *= in.sizes[d];
    ptrs[v] = host[v] = malloc((size_t)n * sizeof(float));
  }
  if (arena)  /* a run without the arena its values live in is refused, not run into NULL + offset */
    CHECK(ember_program_run(p, ptrs, NULL, NULL, with_client ? run_fallback : NULL, c) == EMBER_EINVAL &&
          strstr(ember_program_error(p), "needs an arena of"));
  int rc = ember_program_run(p, ptrs, arena, NULL, with_client ? run_fallback : NULL, c);
  if (!rc) {
    memcpy(z, ptrs[ember_program_output(p, 0)], sizeof(float) * R * C);
    memcpy(s, ptrs[ember_program_output(p, 1)], sizeof(float) * NI * C);
  }
  for (int v = 0; v < nv; v++) free(host[v]);
  free(arena), free(ptrs);
  return rc;
}

/* g compiled without the disk cache (ember_compile frees the graph); NULL,
   a failed check, if it did not compile. */
static ember_program *compile_uncached(ember_graph *g) {
  ember_options *o = ember_options_new();
  CHECK(o && ember_options_set(o, "cache", "0") == EMBER_OK);
  char err[4096] = "";
  ember_program *p = ember_compile(g, o, err, sizeof err);
  ember_options_free(o);
  CHECK_MSG(p != NULL, "%s", err);
  return p;
}

static void test_cpu_program(void) {
  ember_program *p = compile_uncached(graph(EMBER_CPU));
  if (!p) return;
  /* what the client asks before a run */
  CHECK(ember_program_num_inputs(p) == 2 && ember_program_input(p, 0) == vx && ember_program_input(p, 1) == vi);
  CHECK(ember_program_num_outputs(p) == 2 && ember_program_output(p, 0) == vz && ember_program_output(p, 1) == vs);
  CHECK(ember_program_output(p, 2) == -1 && !ember_program_is_cuda(p));
  ember_value_info in;
  CHECK(ember_program_value(p, vx, &in) == EMBER_OK && in.storage == EMBER_STORE_INPUT && in.ndim == 2 &&
        in.sizes[0] == R && in.sizes[1] == C && in.strides[0] == C && in.root == vx && in.root_delta == 0);
  CHECK(ember_program_value(p, vf, &in) == EMBER_OK && in.storage == EMBER_STORE_FALLBACK);
  CHECK(ember_program_value(p, vy, &in) == EMBER_OK && in.needs_tensor);  /* the fallback reads it */
  CHECK(ember_program_value(p, -1, &in) == EMBER_EINVAL && ember_program_value(p, 1000, &in) == EMBER_EINVAL);
  int nfb = 0, kind, index;
  for (int i = 0; i < ember_program_num_steps(p); i++) {
    CHECK(ember_program_step(p, i, &kind, &index) == EMBER_OK);
    nfb += kind == EMBER_STEP_FALLBACK;
  }
  CHECK(nfb == 1 && ember_program_step(p, ember_program_num_steps(p), &kind, &index) == EMBER_EINVAL);
  ember_report r;
  CHECK(ember_program_report(p, &r) == EMBER_OK && r.fallbacks == 1 && r.kernels >= 1 && r.nodes == 4);
  const char *src = ember_program_source(p);
  CHECK(src && strstr(src, "ember_k0") && ember_program_source_head(p) < strlen(src));
  CHECK(ember_program_node_op(p, -1) == NULL && ember_program_node_name(p, 99) == NULL);

  /* runs, twice: the results against plain C */
  Client c = {p, {0}, 0};
  float x[R * C], z[R * C], s[NI * C];
  int64_t idx[NI] = {3, 0, 3};
  for (int i = 0; i < R * C; i++) x[i] = (float)(i % 7) * 0.25f - 0.5f;
  for (int rep = 0; rep < 2; rep++) {
    memset(z, 0, sizeof z), memset(s, 0, sizeof s);
    int rc = run(&c, x, idx, z, s, 1);
    CHECK_MSG(rc == EMBER_OK, "run %d: %d %s", rep, rc, ember_program_error(p));
    int bad = 0;
    for (int i = 0; i < R * C; i++) bad += fabsf(z[i] - (2 * expf(x[i]) + x[i])) > 1e-5f * (1 + fabsf(z[i]));
    for (int i = 0; i < NI; i++)
      for (int j = 0; j < C; j++) bad += s[i * C + j] != x[idx[i] * C + j];
    CHECK_MSG(bad == 0, "run %d: %d wrong elements", rep, bad);
  }
  CHECK(c.calls == 2);

  /* an index out of range: torch's IndexError, naming the op and node */
  int64_t far[NI] = {0, 7, 1};
  int rc = run(&c, x, far, z, s, 1);
  CHECK_MSG(rc == EMBER_EINDEX && strstr(ember_program_error(p), "index 7 is out of bounds for dimension 0 with size 4") &&
            strstr(ember_program_error(p), "aten.index_select.default, node index_select"),
            "%d %s", rc, ember_program_error(p));
  /* a fallback step with no client to run it */
  rc = run(&c, x, idx, z, s, 0);
  CHECK_MSG(rc == EMBER_EINVAL && strstr(ember_program_error(p), "node opaque") &&
            strstr(ember_program_error(p), "no client"), "%d %s", rc, ember_program_error(p));
  /* and it still runs */
  CHECK(run(&c, x, idx, z, s, 1) == EMBER_OK);
  ember_program_free(p);
}

/* The cubins in cache folder dir (entries cu<hash>.so). */
static int count_cubins(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *dot = strrchr(e->d_name, '.');
    n += strncmp(e->d_name, "cu", 2) == 0 && dot && strcmp(dot, ".so") == 0;
  }
  if (d) closedir(d);
  return n;
}

/* $EMBER_CUDA_LIB_DIRS where NVRTC there compiles for sm_90 (the search path set to it), else
   NULL with the test's skip printed: "skipped <what>". */
static const char *nvrtc_libs(const char *what) {
  const char *libs = getenv("EMBER_CUDA_LIB_DIRS");
  char ident[512], err[4096] = "";
  cuda_set_search_path(libs, NULL);
  if (!libs || cuda_compile_identity(90, ident, sizeof ident, err, sizeof err)) {
    printf("test_program: no NVRTC ($EMBER_CUDA_LIB_DIRS): skipped %s\n", what);
    return NULL;
  }
  return libs;
}

/* A CUDA graph built only (no GPU): the program keeps, per vector kernel,
   its launch checks and its unaligned variant's text (named ember_k<id>_u),
   and refuses to run. */
static void test_cuda_program(void) {
  const char *libs = nvrtc_libs("the CUDA program");
  if (!libs) return;
  char err[4096] = "";
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {64, 100};
  int x = val(g, EMBER_CUDA, EMBER_F32, 2, s2), y = val(g, EMBER_CUDA, EMBER_F32, 2, s2);
  ember_graph_input(g, x);
  ember_arg a[] = {T(x)};
  node1(g, "aten.exp.default", "exp", 1, a, y);
  ember_graph_outputs(g, 1, &y);
  char cache[] = "/tmp/ember-test-program-XXXXXX";
  CHECK(mkdtemp(cache) != NULL);
  ember_options *o = ember_options_new();
  CHECK(o && !ember_options_set(o, "cache_dir", cache) && !ember_options_set(o, "cuda_sm", "90") &&
        !ember_options_set(o, "build_only", "1") && !ember_options_set(o, "cuda_lib_dirs", libs));
  ember_program *p = ember_compile(g, o, err, sizeof err);
  ember_options_free(o);
  CHECK_MSG(p != NULL, "%s", err);
  if (!p) return;
  Program *P = &p->p;
  CHECK(P->nkernels == 1 && P->target == EMBER_CUDA && P->cuda_sm == 90);
  if (P->nkernels == 1) {
    const PKernel *k = &P->kernels[0];
    CHECK(k->nalign >= 1 && k->alt && k->alt_len == strlen(k->alt) && strstr(k->alt, "ember_k0_u(") && k->rep == 0);
    CHECK(k->nparams == 2 && k->grid[0] > 0 && k->block[0] > 0);
  }
  void *ptrs[2] = {NULL, NULL};
  CHECK(ember_program_run(p, ptrs, NULL, NULL, NULL, NULL) == EMBER_ERUN &&
        strstr(ember_program_error(p), "build_only"));
  /* its images are kept (chunk 0 first), the variant's with the kernel's: it is built to be checked */
  CHECK(P->nimages >= 1 && P->images[0].n > 0 && P->images[0].nkern >= 1 && P->nvrtc_version > 0 &&
        P->driver_version == 0);
  /* the variant from the text the program keeps, the graph gone: NVRTC
     compiles it and its cubin goes into the cache; loading it needs a GPU */
  int before = count_cubins(cache);
  if (P->nkernels == 1 && P->kernels[0].alt) {
    void *fn = program_variant_fn(P, 0, 0, EM_UNALIGNED, NULL);
    int gpu = fn != NULL;
    CHECK_MSG(gpu || strstr(P->err, "loading kernel ember_k0's unaligned variant failed"), "%s", P->err);
    CHECK_MSG(count_cubins(cache) == before + 1, "%d cubins, %d before", count_cubins(cache), before);
    CHECK(!gpu || (P->report.unaligned_variants == 1 && program_variant_fn(P, 0, 0, EM_UNALIGNED, NULL) == fn));
  }
  ember_program_free(p);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
  if (system(cmd)) fprintf(stderr, "test_program: could not remove %s\n", cache);
}

/* ---------------------------------------------------------------- saved programs */

/* Load must refuse blob[0..n) with a message; never crash (ASan watches). */
static int refused(const void *blob, size_t n, const char *want) {
  ember_program *q = (ember_program *)1;
  char err[1024] = "";
  int rc = ember_program_load(blob, n, &q, err, sizeof err);
  if (rc == EMBER_OK) {
    ember_program_free(q);
    return 0;
  }
  return q == NULL && strstr(err, "cannot load the saved program") && (!want || strstr(err, want));
}

/* The payload's hash mended after a change, so that the fields' own checks are reached. */
static void mend(unsigned char *b, size_t n) {
  char hex[65];
  em_sha256_hex(b + PROGRAM_HEADER_BYTES, n - PROGRAM_HEADER_BYTES, hex);
  memcpy(b + PROGRAM_HEADER_BYTES - PROGRAM_HASH_HEX, hex, PROGRAM_HASH_HEX);
}

/* p saved into *blob, *n (the caller frees *blob) and loaded back: the loaded program, or NULL (a check failed). */
static ember_program *save_load(ember_program *p, void **blob, size_t *n) {
  char err[4096] = "";
  ember_program *q = NULL;
  *blob = NULL, *n = 0;
  CHECK_MSG(ember_program_save(p, blob, n) == EMBER_OK && *n > PROGRAM_HEADER_BYTES, "%s", ember_program_error(p));
  CHECK_MSG(*blob && ember_program_load(*blob, *n, &q, err, sizeof err) == EMBER_OK && q, "%s", err);
  return q;
}

/* q saved again gives blob[0..n) to the byte. */
static int saves_same(ember_program *q, const void *blob, size_t n) {
  void *blob2 = NULL;
  size_t n2 = 0;
  int same = ember_program_save(q, &blob2, &n2) == EMBER_OK && n2 == n && memcmp(blob, blob2, n) == 0;
  free(blob2);
  return same;
}

typedef struct Flips {  /* what loading blobs with a byte flipped gave */
  int named;            /* refused with a message that names why */
  int loaded;           /* passed every check (a size or a name changed): loaded and freed */
  int bad;              /* refused without such a message */
} Flips;

/* blob[0..n) copied to b with byte k flipped (bit 0 or 7 by turns), the hash mended so that the fields' own
   checks are reached, and loaded: counted in f.  Never a crash (ASan watches). */
static void flip_mended(Flips *f, unsigned char *b, const void *blob, size_t n, size_t k) {
  memcpy(b, blob, n), b[k] ^= k % 2 ? 0x80 : 0x01;
  mend(b, n);
  ember_program *q = NULL;
  char e[1024] = "";
  if (ember_program_load(b, n, &q, e, sizeof e) == EMBER_OK) f->loaded++, ember_program_free(q);
  else if (!q && strstr(e, "cannot load the saved program: ") && strlen(e) > 32) f->named++;
  else f->bad++;
}

/* Every step-th byte of the tables of p's saved blob[0..n) (after the header, up to the source) flipped by
   flip_mended: none refused without a message, some with one.  The counts, and in *tables the tables' end. */
static Flips flip_tables(ember_program *p, const void *blob, size_t n, size_t step, size_t *tables) {
  Flips f = {0, 0, 0};
  unsigned char *at = memmem(blob, n, ember_program_source(p), 64);  /* the source's length (8 bytes) is before it */
  unsigned char *b = malloc(n);
  CHECK(at != NULL && b != NULL);
  *tables = at ? (size_t)(at - (const unsigned char *)blob) - 8 : PROGRAM_HEADER_BYTES;
  for (size_t k = PROGRAM_HEADER_BYTES; b && k < *tables; k += step) flip_mended(&f, b, blob, n, k);
  CHECK_MSG(f.bad == 0 && f.named > 0, "%d refusals without a message (%d named, %d loaded)", f.bad, f.named,
            f.loaded);
  free(b);
  return f;
}

static void test_saved_program(void) {
  ember_program *p = compile_uncached(graph(EMBER_CPU));
  if (!p) return;
  void *blob = NULL;
  size_t n = 0;
  CHECK_MSG(ember_program_save(p, &blob, &n) == EMBER_OK && n > PROGRAM_HEADER_BYTES, "%s", ember_program_error(p));
  if (!blob) return;

  /* loaded, it answers and runs as the compiled one did, with no compiler (cc is not looked at) */
  ember_program *q = NULL;
  char err[4096] = "";
  CHECK_MSG(ember_program_load(blob, n, &q, err, sizeof err) == EMBER_OK && q, "%s", err);
  if (!q) return;
  CHECK(ember_program_num_values(q) == ember_program_num_values(p) &&
        ember_program_num_steps(q) == ember_program_num_steps(p) &&
        ember_program_arena_bytes(q) == ember_program_arena_bytes(p) &&
        ember_program_input(q, 1) == vi && ember_program_output(q, 1) == vs);
  CHECK(strcmp(ember_program_source(q), ember_program_source(p)) == 0 &&
        ember_program_source_head(q) == ember_program_source_head(p));
  ember_report r;
  CHECK(ember_program_report(q, &r) == EMBER_OK && r.fallbacks == 1 && r.nodes == 4 && r.lower_ms == 0);
  for (int v = 0; v < ember_program_num_values(p); v++) {
    ember_value_info a, b;
    ember_program_value(p, v, &a), ember_program_value(q, v, &b);
    CHECK(a.storage == b.storage && a.ndim == b.ndim && a.arena_offset == b.arena_offset &&
          a.drop_step == b.drop_step && a.root == b.root && a.host_alloc == b.host_alloc &&
          memcmp(a.sizes, b.sizes, sizeof(int64_t) * (size_t)a.ndim) == 0 &&
          memcmp(a.strides, b.strides, sizeof(int64_t) * (size_t)a.ndim) == 0);
  }
  Client cp = {p, {0}, 0}, cq = {q, {0}, 0};
  float x[R * C], z1[R * C], s1[NI * C], z2[R * C], s2[NI * C];
  int64_t idx[NI] = {2, 1, 3}, far[NI] = {0, 9, 1};
  for (int i = 0; i < R * C; i++) x[i] = (float)(i % 5) * 0.3f - 0.7f;
  CHECK(run(&cp, x, idx, z1, s1, 1) == EMBER_OK);
  CHECK_MSG(run(&cq, x, idx, z2, s2, 1) == EMBER_OK, "%s", ember_program_error(q));
  CHECK(memcmp(z1, z2, sizeof z1) == 0 && memcmp(s1, s2, sizeof s1) == 0 && cq.calls == 1);
  int rc = run(&cq, x, far, z2, s2, 1);  /* the gathers' codes came along */
  CHECK_MSG(rc == EMBER_EINDEX && strstr(ember_program_error(q), "index 9 is out of bounds") &&
            strstr(ember_program_error(q), "node index_select"), "%d %s", rc, ember_program_error(q));
  CHECK(saves_same(q, blob, n));  /* saved again, the same bytes */
  ember_program_free(q);

  /* truncated at every length */
  unsigned char *b = malloc(n);
  int bad = 0;
  for (size_t k = 0; k < n; k++) bad += !refused(blob, k, "truncated");
  CHECK_MSG(bad == 0, "%d truncations not refused as such", bad);
  CHECK(refused(NULL, 0, "truncated"));
  /* padded */
  unsigned char *pad = malloc(n + 1);
  memcpy(pad, blob, n), pad[n] = 0;
  CHECK(refused(pad, n + 1, "padded"));
  free(pad);
  /* the header's checks, each named */
  memcpy(b, blob, n), b[0] ^= 1;
  CHECK(refused(b, n, "magic"));
  memcpy(b, blob, n), b[8] ^= 1;
  CHECK(refused(b, n, "format version"));
  memcpy(b, blob, n), b[12] ^= 0xff;
  CHECK(refused(b, n, "byte order"));
  memcpy(b, blob, n), b[24] = '9';
  CHECK(refused(b, n, "saved by ember 9"));
  /* a flipped byte anywhere in the payload: its hash (at 400 places, each a hash of the whole) */
  bad = 0;
  for (size_t k = PROGRAM_HEADER_BYTES; k < n; k += (n - PROGRAM_HEADER_BYTES) / 400 + 1) {
    memcpy(b, blob, n), b[k] ^= 0x5a;
    bad += !refused(b, n, "SHA-256");
  }
  CHECK_MSG(bad == 0, "%d flips not caught by the hash", bad);
  /* with the hash mended, each byte of the tables flipped: refused by a field's check, or a program that
     passes every check, loaded and freed without harm */
  size_t tables;
  Flips fl = flip_tables(p, blob, n, 1, &tables);
  printf("test_program: %zu table bytes flipped, hash mended: %d refused naming why, %d loaded\n",
         tables - PROGRAM_HEADER_BYTES, fl.named, fl.loaded);
  /* the object itself changed, its hash mended: refused before it is loaded */
  memcpy(b, blob, n), b[n - 200] ^= 1;
  mend(b, n);
  CHECK(refused(b, n, "object does not match its SHA-256"));
  free(b);
  free(blob);
  ember_program_free(p);
}

/* ---------------------------------------------------------------- a saved symbolic program */

/* y = exp(x[2:]) * 2 over [s0, s1]: a view whose size s0 - 2 may be 0, an intermediate in the arena
   planned per call; saved, loaded, run at 3 sizes as the compiled one; its expressions' checks */
static void test_saved_symbolic_program(void) {
  ember_graph *g = ember_graph_new();
  int s0 = ember_graph_sym(g, "s0", 2, EMBER_SIZE_INF), s1 = ember_graph_sym(g, "s1", 2, EMBER_SIZE_INF);
  int c0 = ember_graph_size_const(g, 0), c1 = ember_graph_size_const(g, 1), c2 = ember_graph_size_const(g, 2);
  int tail = ember_graph_size_op(g, EMBER_SIZE_ADD, s0, ember_graph_size_const(g, -2));
  int off = ember_graph_size_op(g, EMBER_SIZE_MUL, s1, c2);
  int xs[] = {s0, s1}, ts[] = {tail, s1}, st[] = {s1, c1};
  int x = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 2, xs, st, c0);
  int v = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 2, ts, st, off);
  int e = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 2, ts, st, c0);
  int y = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 2, ts, st, c0);
  CHECK(ember_graph_sym_from_input(g, s0, 0, 0) == EMBER_OK && ember_graph_sym_from_input(g, s1, 0, 1) == EMBER_OK);
  ember_graph_input(g, x);
  ember_arg sa[] = {T(x), I(0), I(2), I(INT64_MAX), I(1)};
  node1(g, "aten.slice.Tensor", "slice_1", 5, sa, v);
  ember_arg ea[] = {T(v)};
  node1(g, "aten.exp.default", "exp", 1, ea, e);
  ember_arg ma[] = {T(e), {EMBER_ARG_FLOAT, 0, 2.0, NULL, 0, NULL, NULL}};
  node1(g, "aten.mul.Tensor", "mul", 2, ma, y);
  ember_graph_outputs(g, 1, &y);
  ember_program *p = compile_uncached(g);
  if (!p) return;
  CHECK(ember_program_num_syms(p) == 2);
  void *blob;
  size_t n;
  ember_program *q = save_load(p, &blob, &n);
  if (!q) return;
  CHECK(ember_program_num_syms(q) == 2);
  for (int64_t r = 2; r <= 9; r += 3) {  /* 0, 3 and 6 rows of the result */
    int64_t syms[2] = {r, 5}, a[2], b[2], sa2[2], sb[2], da, db;
    CHECK(ember_program_value_sizes(p, y, syms, a, sa2, &da) == EMBER_OK &&
          ember_program_value_sizes(q, y, syms, b, sb, &db) == EMBER_OK);
    CHECK(a[0] == r - 2 && a[1] == 5 && b[0] == a[0] && b[1] == a[1] && sb[0] == sa2[0] && sb[1] == sa2[1]);
    CHECK(ember_program_arena_bytes_for(p, syms) == ember_program_arena_bytes_for(q, syms));
    float xv[45], y1[35], y2[35];
    for (int i = 0; i < 45; i++) xv[i] = (float)(i % 7) * 0.25f - 0.5f;
    size_t ab = ember_program_arena_bytes_for(q, syms);
    void *arena = ab ? malloc(ab + 64) : NULL;
    void *pp[5] = {0}, *pq[5] = {0};
    pp[x] = pq[x] = xv, pp[y] = y1, pq[y] = y2;
    CHECK(ember_program_run_sized(p, syms, pp, arena, NULL, NULL, NULL) == EMBER_OK);
    CHECK_MSG(ember_program_run_sized(q, syms, pq, arena, NULL, NULL, NULL) == EMBER_OK, "%s", ember_program_error(q));
    CHECK(memcmp(y1, y2, sizeof(float) * (size_t)((r - 2) * 5)) == 0);
    for (int i = 0; i < (r - 2) * 5; i++) CHECK(fabsf(y2[i] - 2 * expf(xv[10 + i])) < 1e-5f);
    free(arena);
  }
  CHECK(saves_same(q, blob, n));  /* saved again, the same bytes */
  ember_program_free(q);
  /* every third byte of the tables flipped (each load is a dlopen), the hash mended: refused naming why, or
     loaded; never a crash */
  size_t tables;
  flip_tables(p, blob, n, 3, &tables);
  free(blob);
  ember_program_free(p);
}

/* ---------------------------------------------------------------- saved CUDA programs */

static int vcx, vci, vcy, vcs;  /* the CUDA graph's value ids */

/* y = exp(x); s = x.index_select(0, i) on the device: a vector kernel (an unaligned variant) and a gather
   (the index record in chunk 0) */
static ember_program *cuda_program(const char *libs, int build_only, char *err, size_t errlen) {
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {64, 100}, si[] = {NI}, ss[] = {NI, 100};
  vcx = val(g, EMBER_CUDA, EMBER_F32, 2, s2), vci = val(g, EMBER_CUDA, EMBER_I64, 1, si);
  ember_graph_input(g, vcx), ember_graph_input(g, vci);
  vcy = val(g, EMBER_CUDA, EMBER_F32, 2, s2), vcs = val(g, EMBER_CUDA, EMBER_F32, 2, ss);
  ember_arg a[] = {T(vcx)}, ai[] = {T(vcx), I(0), T(vci)};
  node1(g, "aten.exp.default", "exp", 1, a, vcy);
  node1(g, "aten.index_select.default", "index_select", 3, ai, vcs);
  int outs[] = {vcy, vcs};
  ember_graph_outputs(g, 2, outs);
  ember_options *o = ember_options_new();
  CHECK(o && !ember_options_set(o, "cache", "0") && !ember_options_set(o, "cuda_lib_dirs", libs));
  if (build_only) CHECK(!ember_options_set(o, "cuda_sm", "90") && !ember_options_set(o, "build_only", "1"));
  ember_program *p = ember_compile(g, o, err, errlen);
  ember_options_free(o);
  return p;
}

static unsigned header_u32(const void *blob, size_t at) {
  unsigned v;
  memcpy(&v, (const char *)blob + at, sizeof v);
  return v;
}
enum { H_TARGET = 56, H_SM = 60, H_NVRTC = 64, H_PTX = 68, H_DRIVER = 72 };  /* io_header's places */

/* The device part: the helpers from libcuda (ember allocates through torch, a test itself). */
typedef int (*MemAllocFn)(unsigned long long *, size_t);
typedef int (*MemcpyFn)(unsigned long long, const void *, size_t);
typedef int (*MemcpyDtoHFn)(void *, unsigned long long, size_t);
typedef int (*MemFreeFn)(unsigned long long);

/* Run p on the device: x, idx in; y and s back.  The status. */
static int run_cuda(ember_program *p, const float *x, const int64_t *idx, float *y, float *s) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  MemAllocFn alloc = h ? (MemAllocFn)dlsym(h, "cuMemAlloc_v2") : NULL;
  MemcpyFn up = h ? (MemcpyFn)dlsym(h, "cuMemcpyHtoD_v2") : NULL;
  MemcpyDtoHFn down = h ? (MemcpyDtoHFn)dlsym(h, "cuMemcpyDtoH_v2") : NULL;
  MemFreeFn dfree = h ? (MemFreeFn)dlsym(h, "cuMemFree_v2") : NULL;
  CHECK(alloc && up && down && dfree);
  if (!alloc || !up || !down || !dfree) return -100;
  int nv = ember_program_num_values(p), rc = -100;
  unsigned long long mem[64] = {0}, arena = 0;
  void *ptrs[64] = {0};
  CHECK(nv < 64);
  if (nv >= 64) return -100;
  for (int v = 0; v < nv; v++) {
    ember_value_info in;
    ember_program_value(p, v, &in);
    if (in.storage != EMBER_STORE_HOST && in.storage != EMBER_STORE_INPUT) continue;
    int64_t n = 1;
    for (int d = 0; d < in.ndim; d++) n *= in.sizes[d];
    if (alloc(&mem[v], (size_t)n * 8)) goto out;
    ptrs[v] = (void *)(uintptr_t)mem[v];
  }
  if (ember_program_arena_bytes(p) && alloc(&arena, ember_program_arena_bytes(p))) goto out;
  if (up(mem[vcx], x, sizeof(float) * 64 * 100) || up(mem[vci], idx, sizeof(int64_t) * NI)) goto out;
  rc = ember_program_run(p, ptrs, (void *)(uintptr_t)arena, NULL, NULL, NULL);
  if (!rc && (down(y, (uintptr_t)ptrs[ember_program_output(p, 0)], sizeof(float) * 64 * 100) ||
              down(s, (uintptr_t)ptrs[ember_program_output(p, 1)], sizeof(float) * NI * 100)))
    rc = -101;
out:
  for (int v = 0; v < nv; v++)
    if (mem[v]) dfree(mem[v]);
  if (arena) dfree(arena);
  return rc;
}

/* A CUDA program saved: its images (each with its SHA-256) and the CUDA facts in the header.  Without
   a GPU (NVRTC only): a program built only for sm_90 saves, loads back with its images and refuses to
   run; truncated, its images changed (hash mended) or for another device (the test's device) it is
   refused with a message.  With a GPU: compiled for the device, saved, loaded (no NVRTC: the images
   are loaded as they are), run with the same results; a device of another sm or an older driver
   refused. */
static void test_saved_cuda_program(void) {
  const char *libs = nvrtc_libs("the saved CUDA program");
  if (!libs) return;
  char err[4096] = "";
  ember_program *p = cuda_program(libs, 1, err, sizeof err);
  CHECK_MSG(p != NULL, "%s", err);
  if (!p) return;
  Program *P = &p->p;
  void *blob = NULL;
  size_t n = 0;
  CHECK_MSG(ember_program_save(p, &blob, &n) == EMBER_OK && n > PROGRAM_HEADER_BYTES, "%s", ember_program_error(p));
  if (!blob) return;
  /* the header: CUDA, sm_90, NVRTC's version, cubins, no driver (built only) */
  CHECK(header_u32(blob, H_TARGET) == EMBER_CUDA && header_u32(blob, H_SM) == 90 &&
        header_u32(blob, H_NVRTC) == (unsigned)P->nvrtc_version && header_u32(blob, H_PTX) == (unsigned)P->image_ptx &&
        header_u32(blob, H_DRIVER) == 0);
  /* each image in the blob as compiled, followed by its SHA-256 */
  CHECK(P->nimages >= 1);
  for (int i = 0; i < P->nimages; i++) {
    char hex[65];
    em_sha256_hex(P->images[i].data, P->images[i].n, hex);
    unsigned char *at = memmem(blob, n, P->images[i].data, P->images[i].n);
    CHECK_MSG(at && memcmp(at + P->images[i].n + 8, hex, 64) == 0, "image %d", i);
  }
  ember_program *q = NULL;
  CHECK_MSG(ember_program_load(blob, n, &q, err, sizeof err) == EMBER_OK && q, "%s", err);
  if (q) {
    Program *Q = &q->p;
    CHECK(Q->nimages == P->nimages && Q->cuda_sm == 90 && Q->build_only && Q->index_nowait == P->index_nowait);
    for (int i = 0; i < P->nimages && i < Q->nimages; i++)
      CHECK(Q->images[i].n == P->images[i].n && !memcmp(Q->images[i].data, P->images[i].data, P->images[i].n) &&
            Q->images[i].nkern == P->images[i].nkern);
    void *ptrs[8] = {0};
    CHECK(ember_program_run(q, ptrs, NULL, NULL, NULL, NULL) == EMBER_ERUN && strstr(ember_program_error(q), "build_only"));
    CHECK(saves_same(q, blob, n));
    ember_program_free(q);
  }
  /* truncated at every length */
  int bad = 0;
  for (size_t k = 0; k < n; k += 1 + (k > PROGRAM_HEADER_BYTES) * 7) bad += !refused(blob, k, "truncated");
  CHECK_MSG(bad == 0, "%d truncations not refused as such", bad);
  unsigned char *b = malloc(n);
  /* an image's byte flipped: the payload's hash; mended, the image's own */
  unsigned char *img = memmem(blob, n, P->images[0].data, P->images[0].n);
  size_t at = img ? (size_t)(img - (unsigned char *)blob) + P->images[0].n / 2 : 0;
  CHECK(img != NULL);
  memcpy(b, blob, n), b[at] ^= 0x10;
  CHECK(refused(b, n, "SHA-256 does not match"));
  mend(b, n);
  CHECK(refused(b, n, "CUDA image 0 does not match its SHA-256"));
  /* with the hash mended, bytes outside the source and the images flipped (every one of the program's
     first fields, every fifth after): refused naming why, or
     loaded and freed without harm (ASan watches; build_only flipped off meets the device check) */
  const char *src = ember_program_source(p);
  unsigned char *srcat = memmem(blob, n, src, strlen(src));
  Flips fl = {0, 0, 0};
  CHECK(srcat != NULL);
  for (size_t k = PROGRAM_HEADER_BYTES; srcat && k < n; k += k < PROGRAM_HEADER_BYTES + 256 ? 1 : 5) {
    int skip = k >= (size_t)(srcat - (unsigned char *)blob) && k < (size_t)(srcat - (unsigned char *)blob) + strlen(src);
    for (int i = 0; i < P->nimages && !skip; i++) {
      unsigned char *d = memmem(blob, n, P->images[i].data, P->images[i].n);
      skip = d && k >= (size_t)(d - (unsigned char *)blob) && k < (size_t)(d - (unsigned char *)blob) + P->images[i].n;
    }
    if (!skip) flip_mended(&fl, b, blob, n, k);
  }
  CHECK_MSG(fl.bad == 0 && fl.named > 0, "%d refusals without a message (%d named, %d loaded)", fl.bad, fl.named,
            fl.loaded);
  printf("test_program: CUDA blob's fields flipped, hash mended: %d refused naming why, %d loaded\n", fl.named,
         fl.loaded);
  /* the header's sm (not hashed) changed: it disagrees with the program */
  memcpy(b, blob, n), b[H_SM] = 80;
  CHECK(refused(b, n, "disagree on the CUDA architecture"));
  /* the program made runnable (build_only 0, hash mended): checked against the device, here the test's */
  memcpy(b, blob, n), memset(b + PROGRAM_HEADER_BYTES + 4, 0, 4);
  mend(b, n);
  cuda_test_device(80, 13000);
  CHECK_MSG(refused(b, n, "compiled for sm_90, the current device is sm_80"), "wrong sm");
  cuda_test_device(90, 13000);  /* the device matches; its checking images (variants) cannot be loaded */
  CHECK(refused(b, n, "is not a kernel with code"));
  cuda_test_device(0, 0);
  free(b);
  free(blob);
  ember_program_free(p);

  if (cuda_init(err, sizeof err)) {
    printf("test_program: no GPU (%s): skipped the saved CUDA program's run\n", err);
    return;
  }
  int sm = 0, driver = 0;
  CHECK_MSG(cuda_current_arch(&sm, &driver, err, sizeof err) == 0 && sm > 0, "%s", err);
  p = cuda_program(libs, 0, err, sizeof err);
  CHECK_MSG(p != NULL, "%s", err);
  if (!p) return;
  CHECK(p->p.driver_version == driver && p->p.cuda_sm == sm);
  q = save_load(p, &blob, &n);
  if (q) {
    static float x[64 * 100], y1[64 * 100], y2[64 * 100], s1[NI * 100], s2[NI * 100];
    int64_t idx[NI] = {5, 63, 0};
    for (int i = 0; i < 64 * 100; i++) x[i] = (float)(i % 13) * 0.1f - 0.6f;
    int r1 = run_cuda(p, x, idx, y1, s1), r2 = run_cuda(q, x, idx, y2, s2);
    CHECK_MSG(r1 == EMBER_OK && r2 == EMBER_OK, "%d %d %s", r1, r2, ember_program_error(q));
    CHECK(!memcmp(y1, y2, sizeof y1) && !memcmp(s1, s2, sizeof s1) && s2[0] == x[5 * 100] && s2[100] == x[63 * 100]);
    CHECK(fabsf(y2[7] - expf(x[7])) < 1e-5f);
    ember_report r;
    CHECK(ember_program_report(q, &r) == EMBER_OK && r.nvrtc_chunks == 0 && r.lower_ms == 0);
    /* the index record came along: chunk 0's (an index out of range traps the asynchronous check's
       context, so it is not run here; tests/test_cuda_* raise one) */
    CHECK(q->p.index_dev != NULL && r.index_async == p->p.report.index_async);
    ember_program_free(q);
  }
  cuda_test_device(sm + 1, driver);
  CHECK(refused(blob, n, "the current device is sm_"));
  cuda_test_device(sm, driver - 10);
  CHECK(refused(blob, n, "this driver is CUDA"));
  cuda_test_device(0, 0);
  free(blob);
  ember_program_free(p);
}

/* ---------------------------------------------------------------- a symbolic CUDA program's library calls */

static int vmx, vmw, vmy, vmz, vba, vbb, vbc;  /* the matmul graph's value ids */

/* y = x @ wt.t() (x [s0, 16], wt [8, 16] stored as the weight); z = exp(y); c = bmm(a, b) with a
   [s0, s1, 4], b [s0, 4, s1] stored as [s0, s1, 4] and transposed: on CUDA, built only for sm_90.
   sym: s0, s1 size variables; else the same graph at sizes n0, n1 (constants). */
static ember_program *matmul_program(const char *libs, int sym, int64_t n0, int64_t n1, char *err, size_t errlen) {
  ember_graph *g = ember_graph_new();
  int s0 = sym ? ember_graph_sym(g, "s0", 2, EMBER_SIZE_INF) : ember_graph_size_const(g, n0);
  int s1 = sym ? ember_graph_sym(g, "s1", 2, EMBER_SIZE_INF) : ember_graph_size_const(g, n1);
  int c0 = ember_graph_size_const(g, 0), c1 = ember_graph_size_const(g, 1), c4 = ember_graph_size_const(g, 4);
  int c8 = ember_graph_size_const(g, 8), c16 = ember_graph_size_const(g, 16);
  int s4 = ember_graph_size_op(g, EMBER_SIZE_MUL, s1, c4);
  int s11 = ember_graph_size_op(g, EMBER_SIZE_MUL, s1, s1);
  int xs[] = {s0, c16}, xst[] = {c16, c1}, ws[] = {c8, c16}, wst[] = {c16, c1}, wts[] = {c16, c8}, wtst[] = {c1, c16};
  int ys[] = {s0, c8}, yst[] = {c8, c1};
  int as[] = {s0, s1, c4}, ast[] = {s4, c4, c1}, bs[] = {s0, c4, s1}, bst[] = {s4, c1, c4};
  int cs[] = {s0, s1, s1}, cst[] = {s11, s1, c1};
  vmx = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, xs, xst, c0);
  int wt = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, ws, wst, c0);
  vba = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 3, as, ast, c0);
  int braw = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 3, as, ast, c0);
  vmw = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, wts, wtst, c0);
  vbb = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 3, bs, bst, c0);
  vmy = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, ys, yst, c0);
  vmz = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, ys, yst, c0);
  vbc = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 3, cs, cst, c0);
  if (sym)
    CHECK(ember_graph_sym_from_input(g, s0, 0, 0) == EMBER_OK && ember_graph_sym_from_input(g, s1, 2, 1) == EMBER_OK);
  ember_graph_input(g, vmx), ember_graph_input(g, wt), ember_graph_input(g, vba), ember_graph_input(g, braw);
  int64_t perm[] = {1, 0}, perm3[] = {0, 2, 1};
  ember_arg pw[] = {T(wt), {EMBER_ARG_INTS, 0, 0, perm, 2, NULL, NULL}};
  ember_arg pb[] = {T(braw), {EMBER_ARG_INTS, 0, 0, perm3, 3, NULL, NULL}};
  node1(g, "aten.permute.default", "permute", 2, pw, vmw);
  node1(g, "aten.permute.default", "permute_1", 2, pb, vbb);
  ember_arg am[] = {T(vmx), T(vmw)}, ae[] = {T(vmy)}, ab[] = {T(vba), T(vbb)};
  node1(g, "aten.mm.default", "mm", 2, am, vmy);
  node1(g, "aten.exp.default", "exp", 1, ae, vmz);
  node1(g, "aten.bmm.default", "bmm", 2, ab, vbc);
  int outs[] = {vmz, vbc};
  ember_graph_outputs(g, 2, outs);
  CHECK(ember_graph_is_symbolic(g) == sym);
  ember_options *o = ember_options_new();
  CHECK(o && !ember_options_set(o, "cache", "0") && !ember_options_set(o, "cuda_lib_dirs", libs) &&
        !ember_options_set(o, "cuda_sm", "90") && !ember_options_set(o, "build_only", "1"));
  ember_program *p = ember_compile(g, o, err, errlen);
  ember_options_free(o);
  return p;
}

/* Call c of p at sizes syms: m, n, k, batch, the leading dims and batch strides (enum MatmulSize). */
static void call_sizes(const Program *p, const PCall *c, const int64_t *syms, int64_t *x) {
  if (c->sx) {
    for (int i = 0; i < MM_NSX; i++) x[i] = ex_eval(c->sx[i], NULL, syms);
    return;
  }
  int64_t f[MM_NSX] = {c->m, c->n, c->k, c->batch, c->ms[0].ld, c->ms[1].ld, c->ms[2].ld,
                       c->ms[0].bstride, c->ms[1].bstride, c->ms[2].bstride};
  memcpy(x, f, sizeof f);
}

/* A symbolic CUDA graph's mm and bmm are library calls whose sizes, leading dims and batch
   strides are expressions (PCall.sx, stage 6 of docs/DYNAMIC_SHAPES.md): at several sizes they
   are what the same graph compiled for those sizes has; the workspace is the arena's first
   LIB_WORKSPACE bytes at every size, the values after it; saved and loaded (the calls'
   expressions and the kernels' grid expressions with them), the same at every size, saved again
   to the same bytes; every fifth table byte flipped with the hash mended refused with a reason
   or loaded.  NVRTC only: built for sm_90, not run. */
static void test_symbolic_cuda_matmuls(void) {
  const char *libs = nvrtc_libs("the symbolic CUDA matmuls");
  if (!libs) return;
  char err[4096] = "";
  ember_program *p = matmul_program(libs, 1, 0, 0, err, sizeof err);
  CHECK_MSG(p && ember_program_num_syms(p) == 2, "%s", err);
  if (!p) return;
  Program *P = &p->p;
  CHECK(P->ncalls == 2 && P->calls[0].sx && P->calls[1].sx);
  CHECK(P->ws_off == 0 && P->ws_bytes == LIB_WORKSPACE && P->arena_bytes == LIB_WORKSPACE);
  int sgrids = 0;
  for (int i = 0; i < P->nkernels; i++) sgrids += P->kernels[i].sgrid != NULL;
  CHECK(sgrids >= 1);
  for (int i = 0; i < P->nsteps; i++)  /* no torch step: every node a kernel or a library call */
    CHECK(P->steps[i].kind == EMBER_STEP_KERNEL);
  int64_t sizes[][2] = {{5, 3}, {2, 2}, {37, 130}};
  for (int t = 0; t < 3; t++) {
    int64_t *syms = sizes[t];
    CHECK(ember_program_arena_bytes_for(p, syms) > LIB_WORKSPACE);
    CHECK(ember_program_arena_offset(p, vmy, syms) >= (int64_t)LIB_WORKSPACE);  /* mm's result, exp's input */
    ember_program *q = matmul_program(libs, 0, syms[0], syms[1], err, sizeof err);
    CHECK_MSG(q && !ember_program_num_syms(q), "%s", err);
    if (!q) continue;
    const Program *Q = &q->p;
    CHECK(Q->ncalls == 2);
    for (int i = 0; i < 2 && Q->ncalls == 2; i++) {
      const PCall *a = &P->calls[i], *b = &Q->calls[i];
      int64_t x[MM_NSX], y[MM_NSX];
      call_sizes(P, a, syms, x), call_sizes(Q, b, syms, y);
      if (y[MM_BATCH] == 1) y[MM_SA] = y[MM_SB] = y[MM_SC] = 0;  /* static: none for one matrix */
      for (int j = 0; j < MM_NSX; j++)
        CHECK_MSG(x[j] == y[j], "call %d field %d at (%lld, %lld): %lld, static %lld", i, j, (long long)syms[0],
                  (long long)syms[1], (long long)x[j], (long long)y[j]);
      CHECK(a->ta == b->ta && a->tb == b->tb && a->dtype == b->dtype && a->api == b->api && a->a == b->a &&
            a->b == b->b && a->out == b->out && a->bias == -1 && !a->ms[0].pad && !a->ms[1].pad && !a->ms[2].pad);
    }
    ember_program_free(q);
  }
  CHECK(P->calls[1].tb == 1);  /* bmm's B a transposed view */
  void *blob;
  size_t n;
  ember_program *r = save_load(p, &blob, &n);
  if (r) {
    const Program *L = &r->p;
    CHECK(L->ncalls == 2 && L->nkernels == P->nkernels && L->ws_bytes == P->ws_bytes);
    for (int t = 0; t < 3; t++) {
      for (int i = 0; i < 2 && L->ncalls == 2; i++) {
        int64_t x[MM_NSX], y[MM_NSX];
        CHECK(L->calls[i].sx != NULL);
        call_sizes(P, &P->calls[i], sizes[t], x), call_sizes(L, &L->calls[i], sizes[t], y);
        CHECK(!memcmp(x, y, sizeof x));
      }
      for (int i = 0; i < P->nkernels && L->nkernels == P->nkernels; i++)
        CHECK(!P->kernels[i].sgrid ? !L->kernels[i].sgrid
                                   : L->kernels[i].sgrid && ex_eval(L->kernels[i].sgrid, NULL, sizes[t]) ==
                                                                ex_eval(P->kernels[i].sgrid, NULL, sizes[t]));
      CHECK(ember_program_arena_bytes_for(r, sizes[t]) == ember_program_arena_bytes_for(p, sizes[t]));
    }
    CHECK(saves_same(r, blob, n));
    ember_program_free(r);
  }
  /* every fifth byte of the tables flipped, the hash mended: refused naming why, or loaded; never a crash */
  size_t tables;
  Flips fl = blob ? flip_tables(p, blob, n, 5, &tables) : (Flips){0, 0, 0};
  printf("test_program: symbolic CUDA matmuls' blob flipped, hash mended: %d refused naming why, %d loaded\n",
         fl.named, fl.loaded);
  free(blob);
  ember_program_free(p);
}

/* ---------------------------------------------------------------- a symbolic CUDA kernel's bodies */

/* A softmax over rows of symbolic length s1: one kernel whose three bodies (a warp per row, the row
   in registers, read again) are entry points the launch chooses by s1 (Kernel.sbody), each with
   the most threads its bound allows (bblock); the source has each entry point, the unaligned
   variant's too; saved and loaded with the same choices, saved again to the same bytes; a body's
   block past the kernel's refused on load.  NVRTC only: built for sm_90, not run. */
static void test_symbolic_cuda_row_bodies(void) {
  const char *libs = nvrtc_libs("the symbolic CUDA row bodies");
  if (!libs) return;
  char err[4096] = "";
  ember_graph *g = ember_graph_new();
  int s0 = ember_graph_sym(g, "s0", 2, EMBER_SIZE_INF), s1 = ember_graph_sym(g, "s1", 2, EMBER_SIZE_INF);
  int c0 = ember_graph_size_const(g, 0), c1 = ember_graph_size_const(g, 1);
  int xs[] = {s0, s1}, st[] = {s1, c1}, ms[] = {s0, c1}, mst[] = {c1, c1};
  int x = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, xs, st, c0);
  int m = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, ms, mst, c0);
  int d = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, xs, st, c0);
  int e = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, xs, st, c0);
  int z = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, ms, mst, c0);
  int y = ember_graph_value_sym(g, EMBER_F32, EMBER_CUDA, 2, xs, st, c0);
  CHECK(ember_graph_sym_from_input(g, s0, 0, 0) == EMBER_OK && ember_graph_sym_from_input(g, s1, 0, 1) == EMBER_OK);
  ember_graph_input(g, x);
  int64_t last[] = {-1};
  ember_arg keep = {EMBER_ARG_BOOL, 1, 0, NULL, 0, NULL, NULL}, dims = {EMBER_ARG_INTS, 0, 0, last, 1, NULL, NULL};
  ember_arg am[] = {T(x), dims, keep}, as[] = {T(x), T(m)}, ae[] = {T(d)}, az[] = {T(e), dims, keep};
  ember_arg ay[] = {T(e), T(z)};
  node1(g, "aten.amax.default", "amax", 3, am, m);  /* softmax(x, -1), as Dynamo decomposes it */
  node1(g, "aten.sub.Tensor", "sub", 2, as, d);
  node1(g, "aten.exp.default", "exp", 1, ae, e);
  node1(g, "aten.sum.dim_IntList", "sum", 3, az, z);
  node1(g, "aten.div.Tensor", "div", 2, ay, y);
  ember_graph_outputs(g, 1, &y);
  ember_options *o = ember_options_new();
  CHECK(o && !ember_options_set(o, "cache", "0") && !ember_options_set(o, "cuda_lib_dirs", libs) &&
        !ember_options_set(o, "cuda_sm", "90") && !ember_options_set(o, "build_only", "1"));
  ember_program *p = ember_compile(g, o, err, sizeof err);
  ember_options_free(o);
  CHECK_MSG(p != NULL, "%s", err);
  if (!p) return;
  const Program *P = &p->p;
  int kid = -1;
  for (int i = 0; i < P->nkernels; i++)
    if (P->kernels[i].nbodies > 1) kid = i;
  CHECK_MSG(kid >= 0, "%s", P->source + P->src_head);
  if (kid < 0) {
    ember_program_free(p);
    return;
  }
  const PKernel *k = &P->kernels[kid];
  int64_t lens[] = {2, 256, 257, 2048, 2049, 100000}, want[] = {0, 0, 1, 1, 2, 2};
  CHECK(k->nbodies == 3 && k->sbody && k->sblock && k->nalign > 0 && k->alt && k->block[0] == 1024);
  CHECK(k->bblock[0] == 256 && k->bblock[1] == 256 && k->bblock[2] == 1024);
  for (int i = 0; i < 6 && k->sbody; i++) {
    int64_t syms[2] = {7, lens[i]};
    int64_t b = ex_eval(k->sbody, NULL, syms), bx = ex_eval(k->sblock, NULL, syms);
    CHECK_MSG(b == want[i] && bx <= (int64_t)k->bblock[b], "s1 = %lld: body %lld, block %lld", (long long)lens[i],
              (long long)b, (long long)bx);
  }
  for (int b = 0; b < 3; b++) {  /* each entry point in the source and in the unaligned and wide variants' */
    char name[48], call[64];
    em_entry_name(name, sizeof name, kid, EM_MAIN, b), snprintf(call, sizeof call, " %s(", name);
    CHECK_MSG(strstr(P->source, call), "%s", call);
    em_entry_name(name, sizeof name, kid, EM_UNALIGNED, b), snprintf(call, sizeof call, " %s(", name);
    CHECK_MSG(k->alt && strstr(k->alt, call), "%s", call);
    em_entry_name(name, sizeof name, kid, EM_WIDE, b), snprintf(call, sizeof call, " %s(", name);
    CHECK_MSG(k->alt && strstr(k->alt, call), "%s", call);
  }
  /* 32-bit indices where the largest index the call's sizes make is small enough, else the wide variant */
  int64_t small[2] = {7, 100000}, big[2] = {(int64_t)1 << 20, 4096};
  CHECK(k->swide && ex_eval(k->swide, NULL, small) < EM_INDEX32_LIM && ex_eval(k->swide, NULL, big) >= EM_INDEX32_LIM);
  void *blob;
  size_t n;
  ember_program *r = save_load(p, &blob, &n);
  if (r) {
    const PKernel *l = &r->p.kernels[kid];
    CHECK(l->nbodies == 3 && l->sbody && !memcmp(l->bblock, k->bblock, sizeof k->bblock));
    CHECK(l->swide && ex_eval(l->swide, NULL, big) == ex_eval(k->swide, NULL, big));
    for (int i = 0; i < 6 && l->sbody; i++) {
      int64_t syms[2] = {7, lens[i]};
      CHECK(ex_eval(l->sbody, NULL, syms) == want[i]);
    }
    CHECK(saves_same(r, blob, n));
    ember_program_free(r);
  }
  /* the last body's block past the kernel's (bblock {256, 256, 1024} -> {256, 256, 2048}), the hash mended */
  uint32_t bb[3] = {256, 256, 1024};
  unsigned char *at = blob ? memmem(blob, n, bb, sizeof bb) : NULL, *b = malloc(n);
  CHECK(at != NULL && b != NULL);
  if (at && b) {
    memcpy(b, blob, n);
    uint32_t big = 2048;
    memcpy(b + (at - (unsigned char *)blob) + 8, &big, sizeof big);
    mend(b, n);
    CHECK(refused(b, n, "body 2's block is out of range"));
  }
  free(b);
  free(blob);
  ember_program_free(p);
}

/* ---------------------------------------------------------------- a CPU library step */

/* The Fortran sgemm_ blas_cpu.c looks up (this binary is linked with
   -rdynamic, so dlsym finds it), as plain C: column-major
   C = alpha op(A) op(B) + beta C, beta 0 reading nothing of C.  Stands in for
   torch's MKL, which a C program without torch does not have. */
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
            const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
            const int *ldc, size_t lta, size_t ltb);
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
            const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
            const int *ldc, size_t lta, size_t ltb) {
  for (int j = 0; j < *n; j++)
    for (int i = 0; i < *m; i++) {
      float acc = 0;
      for (int p = 0; p < *k; p++) {
        float x = *ta == 'N' ? a[i + p * *lda] : a[p + i * *lda];
        float y = *tb == 'N' ? b[p + j * *ldb] : b[j + p * *ldb];
        acc += x * y;
      }
      c[i + j * *ldc] = *alpha * acc + (*beta != 0 ? *beta * c[i + j * *ldc] : 0);
    }
}

/* y = relu(a @ t(bt)): the mm a library step (blas_cpu.c, B read through its transpose flag), the
   relu a kernel; compiled, saved and loaded, both run against plain C. */
static void test_cpu_matmul_program(void) {
  enum { M = 3, K = 4, N = 5 };
  ember_graph *g = ember_graph_new();
  int64_t sa[] = {M, K}, sbt[] = {N, K}, sb[] = {K, N}, stb[] = {1, K}, sy[] = {M, N};
  int va = val(g, EMBER_CPU, EMBER_F32, 2, sa), vbt = val(g, EMBER_CPU, EMBER_F32, 2, sbt);
  ember_graph_input(g, va), ember_graph_input(g, vbt);
  int vb = ember_graph_value(g, EMBER_F32, EMBER_CPU, 2, sb, stb, 0);
  int vm = val(g, EMBER_CPU, EMBER_F32, 2, sy), vy = val(g, EMBER_CPU, EMBER_F32, 2, sy);
  ember_arg at[] = {T(vbt)}, am[] = {T(va), T(vb)}, ar[] = {T(vm)};
  node1(g, "aten.t.default", "t", 1, at, vb);
  node1(g, "aten.mm.default", "mm", 2, am, vm);
  node1(g, "aten.relu.default", "relu", 1, ar, vy);
  ember_graph_outputs(g, 1, &vy);
  ember_program *p = compile_uncached(g);
  if (!p) return;
  ember_report r;
  CHECK_MSG(ember_program_report(p, &r) == EMBER_OK && r.library_calls == 1 && r.fallbacks == 0,
            "library calls %d, fallbacks %d", r.library_calls, r.fallbacks);
  void *blob = NULL;
  size_t n = 0;
  ember_program *q = NULL;
  char err[4096] = "";
  CHECK_MSG(ember_program_save(p, &blob, &n) == EMBER_OK, "%s", ember_program_error(p));
  CHECK_MSG(blob && ember_program_load(blob, n, &q, err, sizeof err) == EMBER_OK && q, "%s", err);
  float a[M * K], bt[N * K], want[M * N];
  for (int i = 0; i < M * K; i++) a[i] = (float)(i % 5) * 0.5f - 1;
  for (int i = 0; i < N * K; i++) bt[i] = (float)(i % 7) * 0.25f - 0.75f;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float acc = 0;
      for (int k = 0; k < K; k++) acc += a[i * K + k] * bt[j * K + k];
      want[i * N + j] = acc > 0 ? acc : 0;
    }
  ember_program *progs[2] = {p, q};
  for (int w = 0; w < 2 && q; w++) {
    ember_program *x = progs[w];
    int nv = ember_program_num_values(x);
    void **ptrs = calloc((size_t)nv, sizeof *ptrs);
    size_t ab = ember_program_arena_bytes(x);
    void *arena = ab ? malloc(ab) : NULL;
    float y[M * N];
    CHECK(ptrs != NULL && ab < LIB_WORKSPACE);  /* the CPU call needs no workspace */
    if (!ptrs) return;
    ptrs[ember_program_input(x, 0)] = a, ptrs[ember_program_input(x, 1)] = bt;
    ptrs[ember_program_output(x, 0)] = y;  /* the output's memory: the client's */
    int rc = ember_program_run(x, ptrs, arena, NULL, NULL, NULL);
    CHECK_MSG(rc == EMBER_OK, "%s program: %d %s", w ? "loaded" : "compiled", rc, ember_program_error(x));
    int bad = 0;
    for (int i = 0; i < M * N; i++) bad += fabsf(y[i] - want[i]) > 1e-5f;
    CHECK_MSG(rc || bad == 0, "%s program: %d wrong elements", w ? "loaded" : "compiled", bad);
    free(arena), free(ptrs);
  }
  free(blob);
  ember_program_free(q);
  ember_program_free(p);
}

int main(void) {
  test_cpu_program();
  test_cpu_matmul_program();
  test_saved_program();
  test_saved_symbolic_program();
  test_cuda_program();
  test_saved_cuda_program();
  test_symbolic_cuda_matmuls();
  test_symbolic_cuda_row_bodies();
  return T_DONE("test_program");
}
