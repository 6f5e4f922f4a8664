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
   never a crash. */
#define _GNU_SOURCE
#include <dirent.h>
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
  int rc = ember_program_run(p, ptrs, arena, NULL, with_client ? run_fallback : NULL, c);
  if (!rc) {
    memcpy(z, ptrs[ember_program_output(p, 0)], sizeof(float) * R * C);
    memcpy(s, ptrs[ember_program_output(p, 1)], sizeof(float) * NI * C);
  }
  for (int v = 0; v < nv; v++) free(host[v]);
  free(arena), free(ptrs);
  return rc;
}

static void test_cpu_program(void) {
  ember_options *o = ember_options_new();
  CHECK(o && ember_options_set(o, "cache", "0") == EMBER_OK);
  char err[4096] = "";
  ember_program *p = ember_compile(graph(EMBER_CPU), o, err, sizeof err);  /* frees the graph */
  ember_options_free(o);
  CHECK_MSG(p != NULL, "%s", err);
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

/* A CUDA graph built only (no GPU): the program keeps, per vector kernel,
   its launch checks and its unaligned variant's text (named ember_k<id>_u),
   and refuses to run. */
static void test_cuda_program(void) {
  const char *libs = getenv("EMBER_CUDA_LIB_DIRS");
  char ident[512], err[4096] = "";
  cuda_set_search_path(libs, NULL);
  if (!libs || cuda_compile_identity(90, ident, sizeof ident, err, sizeof err)) {
    printf("test_program: no NVRTC ($EMBER_CUDA_LIB_DIRS): skipped the CUDA program\n");
    return;
  }
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
  /* a CUDA program is not saved (its cubins are not kept): an error, no blob */
  void *blob = (void *)1;
  size_t nblob = 1;
  CHECK(ember_program_save(p, &blob, &nblob) == EMBER_EINVAL && blob == NULL && nblob == 0 &&
        strstr(ember_program_error(p), "saving a CUDA program is not supported"));
  /* the variant from the text the program keeps, the graph gone: NVRTC
     compiles it and its cubin goes into the cache; loading it needs a GPU */
  int before = count_cubins(cache);
  if (P->nkernels == 1 && P->kernels[0].alt) {
    void *fn = program_unaligned_fn(P, 0, NULL);
    int gpu = fn != NULL;
    CHECK_MSG(gpu || strstr(P->err, "loading kernel ember_k0's unaligned variant failed"), "%s", P->err);
    CHECK_MSG(count_cubins(cache) == before + 1, "%d cubins, %d before", count_cubins(cache), before);
    CHECK(!gpu || (P->report.unaligned_variants == 1 && program_unaligned_fn(P, 0, NULL) == fn));
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

static void test_saved_program(void) {
  ember_options *o = ember_options_new();
  CHECK(o && ember_options_set(o, "cache", "0") == EMBER_OK);
  char err[4096] = "";
  ember_program *p = ember_compile(graph(EMBER_CPU), o, err, sizeof err);
  ember_options_free(o);
  CHECK_MSG(p != NULL, "%s", err);
  if (!p) return;
  void *blob = NULL;
  size_t n = 0;
  CHECK_MSG(ember_program_save(p, &blob, &n) == EMBER_OK && n > PROGRAM_HEADER_BYTES, "%s", ember_program_error(p));
  if (!blob) return;

  /* loaded, it answers and runs as the compiled one did, with no compiler (cc is not looked at) */
  ember_program *q = NULL;
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
  /* saved again, the same bytes */
  void *blob2 = NULL;
  size_t n2 = 0;
  CHECK(ember_program_save(q, &blob2, &n2) == EMBER_OK && n2 == n && memcmp(blob, blob2, n) == 0);
  free(blob2);
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
  const char *src = ember_program_source(p);
  unsigned char *at = memmem(blob, n, src, 64);
  size_t tables = at ? (size_t)(at - (unsigned char *)blob) - 8 : n;
  CHECK(at != NULL);
  bad = 0;
  for (size_t k = PROGRAM_HEADER_BYTES; k < n; k += (n - PROGRAM_HEADER_BYTES) / 400 + 1) {
    memcpy(b, blob, n), b[k] ^= 0x5a;
    bad += !refused(b, n, "SHA-256");
  }
  CHECK_MSG(bad == 0, "%d flips not caught by the hash", bad);
  /* with the hash mended, each byte of the tables flipped (bit 0 or 7 by turns): refused by a field's check, or
     a program that passes every check (a size or a name changed), loaded and freed without harm */
  int loaded = 0, named = 0;
  bad = 0;
  for (size_t k = PROGRAM_HEADER_BYTES; k < tables; k++) {
    {
      memcpy(b, blob, n), b[k] ^= k % 2 ? 0x80 : 0x01;
      mend(b, n);
      ember_program *f = NULL;
      char e[1024] = "";
      rc = ember_program_load(b, n, &f, e, sizeof e);
      if (rc == EMBER_OK) loaded++, ember_program_free(f);
      else if (f == NULL && strstr(e, "cannot load the saved program: ") && strlen(e) > 32) named++;
      else bad++;
    }
  }
  CHECK_MSG(bad == 0 && named > 0, "%d refusals without a message (%d named, %d loaded)", bad, named, loaded);
  printf("test_program: %zu table bytes flipped, hash mended: %d refused naming why, %d loaded\n",
         tables - PROGRAM_HEADER_BYTES, named, loaded);
  /* the object itself changed, its hash mended: refused before it is loaded */
  memcpy(b, blob, n), b[n - 200] ^= 1;
  mend(b, n);
  CHECK(refused(b, n, "object does not match its SHA-256"));
  free(b);
  free(blob);
  ember_program_free(p);
}

int main(void) {
  test_cpu_program();
  test_saved_program();
  test_cuda_program();
  return T_DONE("test_program");
}
