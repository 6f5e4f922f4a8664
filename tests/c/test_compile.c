/* test_compile.c - the passes on graphs built through the public API:
   fusion grouping (softmax is one kernel, a chain is one kernel, a matmul
   fallback splits, a transposed read of a reduction starts a new kernel), the
   memory planner (live values never share bytes; dead ones do), gathers
   (fused with their producer and consumer, never into the kernel that
   computes their source; lowering's error codes), malformed graphs,
   allocation failure at every point, graphs with symbolic sizes, and code generation in threads giving
   the text one thread gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "t.h"

static int val(ember_graph *g, int ndim, const int64_t *sz) {
  int64_t st[MAXD];
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) st[d] = s, s *= sz[d];
  return ember_graph_value(g, EMBER_F32, EMBER_CPU, ndim, sz, st, 0);
}

static ember_arg T(int v) { ember_arg a = {EMBER_ARG_TENSOR, v, 0, NULL, 0, NULL, NULL}; return a; }
static ember_arg B(int b) { ember_arg a = {EMBER_ARG_BOOL, b, 0, NULL, 0, NULL, NULL}; return a; }
static ember_arg L(const int64_t *l, int n) { ember_arg a = {EMBER_ARG_INTS, 0, 0, l, n, NULL, NULL}; return a; }

static int node1(ember_graph *g, const char *op, const char *name, int nargs, ember_arg *args, int out) {
  return ember_graph_node(g, op, name, nargs, args, 1, &out);
}

/* Run the passes that decide structure (no C compiler needed). */
/* Options for the passes on g, which read g->opt as ember_compile copies it:
   kv is name, value, name, value, ..., NULL; the others keep their defaults. */
static void set_options(ember_graph *g, const char *const *kv) {
  ember_options *o = ember_options_new();
  CHECK(o != NULL);
  for (int i = 0; o && kv[i]; i += 2) CHECK_MSG(ember_options_set(o, kv[i], kv[i + 1]) == EMBER_OK, "%s", kv[i]);
  CHECK(o && em_options_copy(&g->g.opt, em_options_of(o), &g->g.pool) == EMBER_OK);
  ember_options_free(o);
}

static void set_option(ember_graph *g, const char *name, const char *value) {
  const char *kv[] = {name, value, NULL};
  set_options(g, kv);
}

static int passes(ember_graph *g) {
  Graph *G = &g->g;
  int rc = G->failed ? EMBER_EINVAL : verify(G, "build");
  if (!rc) rc = lower(G);
  if (!rc) rc = verify(G, "lower");
  if (!rc) rc = plan_layouts(G);
  if (!rc) rc = split_reductions(G);
  if (!rc) rc = verify(G, "split");
  if (!rc) rc = fuse(G);
  if (!rc) rc = verify(G, "fuse");
  if (!rc) rc = plan(G);
  if (!rc) rc = verify(G, "plan");
  return rc;
}

static ember_graph *softmax_graph(void) {
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {64, 100}, s1[] = {64, 1};
  int64_t dim1[] = {1};
  int x = val(g, 2, s2), m = val(g, 2, s1), d = val(g, 2, s2), e = val(g, 2, s2), s = val(g, 2, s1), o = val(g, 2, s2);
  ember_graph_input(g, x);
  ember_arg a1[] = {T(x), L(dim1, 1), B(1)};
  node1(g, "aten.amax.default", "amax", 3, a1, m);
  ember_arg a2[] = {T(x), T(m)};
  node1(g, "aten.sub.Tensor", "sub", 2, a2, d);
  ember_arg a3[] = {T(d)};
  node1(g, "aten.exp.default", "exp", 1, a3, e);
  ember_arg a4[] = {T(e), L(dim1, 1), B(1)};
  node1(g, "aten.sum.dim_IntList", "sum", 3, a4, s);
  ember_arg a5[] = {T(e), T(s)};
  node1(g, "aten.div.Tensor", "div", 2, a5, o);
  ember_graph_outputs(g, 1, &o);
  return g;
}

static void test_softmax(void) {
  ember_graph *g = softmax_graph();
  CHECK(passes(g) == EMBER_OK);
  Graph *G = &g->g;
  CHECK_MSG(G->nkernels == 1, "softmax gave %d kernels", G->nkernels);
  CHECK(G->nsteps == 1);
  if (G->nkernels == 1) {
    Kernel *k = G->kernels[0];
    CHECK(k->rmask == 2);
    CHECK(k->nitems == 3);  /* amax, sum (reductions) and div (store) */
  }
  ember_graph_free(g);
}

static void test_chain_and_fallback(void) {
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {32, 48}, sw[] = {48, 48}, sb[] = {48};
  int x = val(g, 2, s2), w = val(g, 2, sw), b = val(g, 1, sb);
  ember_graph_input(g, x), ember_graph_input(g, w), ember_graph_input(g, b);
  int mm = val(g, 2, s2);
  ember_arg a0[] = {T(x), T(w)};
  node1(g, "aten.mm.default", "mm", 2, a0, mm);
  int cur = mm;
  const char *ops[] = {"aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor", "aten.add.Tensor", "aten.mul.Tensor"};
  for (int i = 0; i < 5; i++) {
    int nv = val(g, 2, s2);
    ember_arg a[] = {T(cur), T(b)};
    char name[16];
    snprintf(name, sizeof name, "op%d", i);
    node1(g, ops[i], name, 2, a, nv);
    cur = nv;
  }
  int ge = val(g, 2, s2);
  ember_arg a6[] = {T(cur)};
  node1(g, "aten.gelu.default", "gelu", 1, a6, ge);
  ember_graph_outputs(g, 1, &ge);
  CHECK(passes(g) == EMBER_OK);
  Graph *G = &g->g;
  CHECK_MSG(G->nkernels == 1, "chain gave %d kernels", G->nkernels);
  CHECK(G->nsteps == 2 && G->steps[0].kind == EMBER_STEP_FALLBACK && G->steps[1].kind == EMBER_STEP_KERNEL);
  CHECK(G->nodes[0]->form < 0 && G->nodes[0]->reason != NULL);
  /* a CPU float32 mm is a BLAS call (blas_cpu.c) where torch is loaded; not in this program */
  CHECK_MSG(strstr(G->nodes[0]->reason, "no BLAS") != NULL, "mm fell back for: %s", G->nodes[0]->reason);
  CHECK(G->values[mm]->storage == ST_FALLBACK);
  CHECK(G->values[ge]->storage == ST_HOST);
  for (int v = mm + 1; v < ge; v++) CHECK(G->values[v]->storage == ST_NONE);  /* fused away */
  ember_graph_free(g);
}

static void test_transposed_read_splits(void) {
  /* r = sum(x, 1) over [8, 8]; y = r.view(8, 1) expanded and read transposed: y[j] at i */
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {8, 8}, s1[] = {8, 1};
  int64_t dim1[] = {1};
  int x = val(g, 2, s2), r = val(g, 2, s1);
  ember_graph_input(g, x);
  ember_arg a1[] = {T(x), L(dim1, 1), B(1)};
  node1(g, "aten.sum.dim_IntList", "sum", 3, a1, r);
  int64_t tsz[] = {1, 8}, tst[] = {1, 1};
  int t = ember_graph_value(g, EMBER_F32, EMBER_CPU, 2, tsz, tst, 0);
  int64_t perm[] = {1, 0};
  ember_arg a2[] = {T(r), L(perm, 2)};
  node1(g, "aten.permute.default", "permute", 2, a2, t);
  int o = val(g, 2, s2);
  ember_arg a3[] = {T(x), T(t)};
  node1(g, "aten.add.Tensor", "add", 2, a3, o);
  ember_graph_outputs(g, 1, &o);
  CHECK(passes(g) == EMBER_OK);
  CHECK_MSG(g->g.nkernels == 2, "transposed read gave %d kernels", g->g.nkernels);
  ember_graph_free(g);
}

static int ival(ember_graph *g, int ndim, const int64_t *sz) {
  int64_t st[MAXD];
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) st[d] = s, s *= sz[d];
  return ember_graph_value(g, EMBER_I64, EMBER_CPU, ndim, sz, st, 0);
}

static void test_gathers(void) {
  /* y = exp(x) is returned; z = (x * 2).index_select(0, i) + y.index_select(0, i): the
     producer x * 2 is computed at the gathered index in z's kernel, but y is
     computed by a kernel of its own shape, which z (of that shape too) must not
     join: it reads y at rows the index tensor names, not at its own */
  ember_graph *g = ember_graph_new();
  int64_t s2[] = {6, 5}, s1[] = {6};
  int x = val(g, 2, s2), i = ival(g, 1, s1);
  ember_graph_input(g, x), ember_graph_input(g, i);
  int y = val(g, 2, s2), m = val(g, 2, s2), a = val(g, 2, s2), b = val(g, 2, s2), z = val(g, 2, s2);
  ember_arg ae[] = {T(x)};
  node1(g, "aten.exp.default", "exp", 1, ae, y);
  ember_arg two = {EMBER_ARG_INT, 2, 0, NULL, 0, NULL, NULL}, zero = {EMBER_ARG_INT, 0, 0, NULL, 0, NULL, NULL};
  ember_arg am[] = {T(x), two};
  node1(g, "aten.mul.Tensor", "mul", 2, am, m);
  ember_arg ai[] = {T(m), zero, T(i)};
  node1(g, "aten.index_select.default", "index_select", 3, ai, a);
  ember_arg aj[] = {T(y), zero, T(i)};
  node1(g, "aten.index_select.default", "index_select_1", 3, aj, b);
  ember_arg aa[] = {T(a), T(b)};
  node1(g, "aten.add.Tensor", "add", 2, aa, z);
  int outs[] = {y, z};
  ember_graph_outputs(g, 2, outs);
  CHECK(passes(g) == EMBER_OK);
  Graph *G = &g->g;
  CHECK_MSG(G->nkernels == 2, "gathers gave %d kernels", G->nkernels);
  CHECK(!G->values[m]->materialized && !G->values[a]->materialized && !G->values[b]->materialized);
  CHECK(G->values[y]->kernel == 0 && G->values[z]->kernel == 1);
  Node *n = G->values[a]->def;
  CHECK(n->form == F_GATHER && n->gmap[0] == -1 && n->gmap[1] == 1 && n->gsize[0] == 6 && !n->gwrap);
  int d = -1;
  CHECK(gather_error_node(G, gather_error_code(n, 1), &d) == n && d == 1);
  CHECK(gather_error_node(G, 0, &d) == NULL);
  CHECK(gather_error_node(G, gather_error_code(G->values[y]->def, 0), &d) == NULL);  /* not a gather */
  Str src = {0};
  CHECK(codegen(G, &src) == EMBER_OK);
  CHECK(src.s && strstr(src.s, "em_index(") && G->index_checks);
  str_free(&src);
  ember_graph_free(g);

  /* x[i, :, j] with index tensors [3, 1] and [4]: the dims are apart, so the
     broadcast index shape [3, 4] goes first: [3, 4, 5]; negative indices wrap */
  g = ember_graph_new();
  int64_t s3[] = {7, 5, 9}, si[] = {3, 1}, sj[] = {4}, so[] = {3, 4, 5};
  x = val(g, 3, s3), i = ival(g, 2, si);
  int j = ival(g, 1, sj);
  ember_graph_input(g, x), ember_graph_input(g, i), ember_graph_input(g, j);
  int o = val(g, 3, so);
  int64_t list[] = {i, -1, j};
  ember_arg tl = {EMBER_ARG_TENSORS, 0, 0, list, 3, NULL, NULL};
  ember_arg ax[] = {T(x), tl};
  node1(g, "aten.index.Tensor", "index", 2, ax, o);
  ember_graph_outputs(g, 1, &o);
  CHECK(passes(g) == EMBER_OK);
  G = &g->g;
  n = G->values[o]->def;
  CHECK(n->form == F_GATHER && n->gwrap && n->ngidx == 2);
  CHECK(n->gblk == 0 && n->gblklen == 2 && n->gmap[0] == -1 && n->gmap[1] == 2 && n->gmap[2] == -2);
  ember_graph_free(g);
}

/* BatchNorm's training forward (an F_COMPOSITE op) becomes its formula's
   nodes as it is added (expand.c), named after it and lowered like any
   other; one outside the formula (an input of one dim) stays one node and
   falls back with the reason. */
static void test_batch_norm_expands(void) {
  ember_graph *g = ember_graph_new();
  Graph *G = &g->g;
  int64_t xs[4] = {2, 3, 4, 5}, cs[1] = {3};
  int x = val(g, 4, xs), w = val(g, 1, cs), b = val(g, 1, cs), rm = val(g, 1, cs), rv = val(g, 1, cs);
  for (int v = x; v <= rv; v++) ember_graph_input(g, v);
  int outs[5] = {val(g, 4, xs), val(g, 1, cs), val(g, 1, cs), val(g, 1, cs), val(g, 1, cs)};
  ember_arg mom = {EMBER_ARG_FLOAT, 0, 0.1, NULL, 0, NULL, NULL}, eps = {EMBER_ARG_FLOAT, 0, 1e-5, NULL, 0, NULL, NULL};
  ember_arg a[8] = {T(x), T(w), T(b), T(rm), T(rv), B(1), mom, eps};
  int id = ember_graph_node(g, "aten._native_batch_norm_legit_functional.default", "bn", 8, a, 5, outs);
  CHECK(id >= 0 && G->nnodes > 10 && G->nodes[id]->part == 1);
  CHECK(!strcmp(G->nodes[id]->name, "bn.mean") && !strcmp(G->nodes[id]->opname, "aten.mean.dim"));
  for (int i = 0; i < 5; i++) CHECK(G->values[outs[i]]->def && G->values[outs[i]]->def->part > 0);
  /* an input of one dim: no formula, one node that falls back */
  int64_t ls[1] = {3};
  int y = val(g, 1, ls);
  ember_graph_input(g, y);
  int outs2[5] = {val(g, 1, ls), val(g, 1, cs), val(g, 1, cs), val(g, 1, cs), val(g, 1, cs)};
  ember_arg a2[8] = {T(y), T(w), T(b), T(rm), T(rv), B(1), mom, eps};
  int id2 = ember_graph_node(g, "aten._native_batch_norm_legit_functional.default", "bn1d", 8, a2, 5, outs2);
  CHECK(id2 == G->nnodes - 1 && G->nodes[id2]->part == 0);
  int all[10] = {outs[0], outs[1], outs[2], outs[3], outs[4], outs2[0], outs2[1], outs2[2], outs2[3], outs2[4]};
  ember_graph_outputs(g, 10, all);
  CHECK_MSG(passes(g) == EMBER_OK, "%s", G->err);
  CHECK(G->nodes[id2]->form < 0 && G->nodes[id2]->reason && strstr(G->nodes[id2]->reason, "fewer than 2 dims"));
  for (int i = 0; i < id2; i++) CHECK(G->nodes[i]->form >= 0);  /* every part lowered */
  ember_graph_free(g);
}

static void test_planner_reuse(void) {
  /* x[16,16,16,16] -> r1 -> r2 -> r3 -> r4 by successive sums: r3 may reuse r1's bytes */
  ember_graph *g = ember_graph_new();
  int64_t s[] = {16, 16, 16, 16};
  int x = val(g, 4, s);
  ember_graph_input(g, x);
  int prev = x, r[4];
  int64_t last[1];
  for (int i = 0; i < 4; i++) {
    r[i] = val(g, 3 - i, s);
    last[0] = 3 - i;
    ember_arg a[] = {T(prev), L(last, 1), B(0)};
    char name[16];
    snprintf(name, sizeof name, "sum%d", i);
    node1(g, "aten.sum.dim_IntList", name, 3, a, r[i]);
    prev = r[i];
  }
  ember_graph_outputs(g, 1, &r[3]);
  CHECK(passes(g) == EMBER_OK);
  Graph *G = &g->g;
  CHECK(G->nkernels == 4);
  Value *v1 = G->values[r[0]], *v2 = G->values[r[1]], *v3 = G->values[r[2]];
  CHECK(v1->storage == ST_ARENA && v2->storage == ST_ARENA && v3->storage == ST_ARENA);
  CHECK(G->values[r[3]]->storage == ST_HOST);
  CHECK(v1->nbytes == 16 * 16 * 16 * 4 && v2->nbytes == 16 * 16 * 4);
  CHECK_MSG(v3->arena_off == v1->arena_off, "r3 at %zu, r1 at %zu", v3->arena_off, v1->arena_off);
  CHECK(G->arena_bytes == v1->nbytes + v2->nbytes);
  /* the invariant: values alive at once never share bytes */
  for (int a = 0; a < G->nvalues; a++)
    for (int b = a + 1; b < G->nvalues; b++) {
      Value *p = G->values[a], *q = G->values[b];
      if (p->storage != ST_ARENA || q->storage != ST_ARENA) continue;
      int alive = !(p->last_step < q->first_step || q->last_step < p->first_step);
      int overlap = p->arena_off < q->arena_off + q->nbytes && q->arena_off < p->arena_off + p->nbytes;
      CHECK(!(alive && overlap));
    }
  ember_graph_free(g);
}

static void test_malformed(void) {
  ember_graph *g = ember_graph_new();
  int64_t s[] = {4, 4};
  int x = val(g, 2, s);
  ember_graph_input(g, x);
  int o = val(g, 2, s);
  ember_arg bad[] = {T(99)};
  CHECK(node1(g, "aten.neg.default", "neg_bad", 1, bad, o) < 0);
  CHECK(strstr(ember_graph_error(g), "neg_bad") && strstr(ember_graph_error(g), "aten.neg.default"));
  ember_graph_free(g);

  g = ember_graph_new();
  int64_t st[] = {1, 4};
  CHECK(ember_graph_value(g, EMBER_F32, EMBER_CPU, 9, s, st, 0) < 0);
  CHECK(ember_graph_value(g, 77, EMBER_CPU, 2, s, st, 0) < 0);
  int64_t neg[] = {-1, 4};
  CHECK(ember_graph_value(g, EMBER_F32, EMBER_CPU, 2, neg, st, 0) < 0);
  ember_graph_free(g);

  /* a view reading past its input's storage */
  g = ember_graph_new();
  x = val(g, 2, s);
  ember_graph_input(g, x);
  int64_t big[] = {8, 4}, bst[] = {4, 1};
  int v = ember_graph_value(g, EMBER_F32, EMBER_CPU, 2, big, bst, 0);
  int64_t shape[] = {8, 4};
  ember_arg a[] = {T(x), L(shape, 2)};
  node1(g, "aten.view.default", "view_bad", 2, a, v);
  ember_graph_outputs(g, 1, &v);
  char err[512];
  CHECK(ember_compile(g, NULL, err, sizeof err) == NULL);  /* compile frees g */
  CHECK(strstr(err, "view_bad") && strstr(err, "outside"));

  /* an argument of the wrong kind for a lowered op falls back, with the reason */
  g = ember_graph_new();
  x = val(g, 2, s);
  ember_graph_input(g, x);
  int r = val(g, 1, s);
  ember_arg str = {EMBER_ARG_STRING, 0, 0, NULL, 0, NULL, "nonsense"};
  ember_arg a2[] = {T(x), str, B(0)};
  node1(g, "aten.sum.dim_IntList", "sum_bad", 3, a2, r);
  ember_graph_outputs(g, 1, &r);
  CHECK(passes(g) == EMBER_OK);
  CHECK(g->g.nodes[0]->form < 0 && g->g.nodes[0]->reason);
  ember_graph_free(g);
}

/* CUDA kernels that differ only in their name and comments share a key
   (build_cuda compiles one of them): the code generator names parameters by
   position; a different size or op makes a different key. */
static void test_kernel_keys(void) {
  /* exp -> relu three times, separated by fallbacks (so three kernels), the
     last on 101 columns */
  ember_graph *g = ember_graph_new();
  int64_t s[] = {64, 100}, s2[] = {64, 101}, st[] = {100, 1}, st2[] = {101, 1};
  int v[9];
  for (int i = 0; i < 9; i++)
    v[i] = ember_graph_value(g, EMBER_F32, EMBER_CUDA, 2, i < 6 ? s : s2, i < 6 ? st : st2, 0);
  ember_graph_input(g, v[0]);
  for (int c = 0; c < 3; c++) {
    ember_arg a[] = {T(v[3 * c])}, b[] = {T(v[3 * c + 1])};
    node1(g, "aten.exp.default", c ? "exp_1" : "exp", 1, a, v[3 * c + 1]);
    node1(g, "aten.relu.default", c ? "relu_1" : "relu", 1, b, v[3 * c + 2]);
    if (c < 2) {
      ember_arg f[] = {T(v[3 * c + 2])};
      node1(g, "aten.not_lowered.default", c ? "opaque_1" : "opaque", 1, f, v[3 * c + 3]);
    }
  }
  ember_graph_outputs(g, 1, &v[8]);
  Graph *G = &g->g;
  CHECK(passes(g) == EMBER_OK);
  CHECK(G->target == EMBER_CUDA && G->nkernels == 3);
  Str src = {0};
  CHECK(codegen(G, &src) == EMBER_OK && src.s);
  char k[3][65];
  for (int i = 0; i < 3 && src.s; i++) {
    const Kernel *kk = G->kernels[i];
    CHECK(kk->src_off >= G->src_head && kk->src_off + kk->src_len <= src.len);
    CHECK(em_kernel_key(src.s + kk->src_off, kk->src_len, kk->id, k[i]) == 0);
  }
  /* parameters by position, the values they are in the kernel's comment */
  CHECK(src.s && strstr(src.s + G->kernels[1]->src_off, "p0 = b3, p1 = b5") &&
        strstr(src.s + G->kernels[1]->src_off, "ember_k1(const float *__restrict__ p0, float *__restrict__ p1)"));
  CHECK(strcmp(k[0], k[1]) == 0);  /* the same chain on other buffers */
  CHECK(strcmp(k[0], k[2]) != 0);  /* 101 columns */
  char a[65], b[65], c[65], d[65];
  const char *t1 = "/* kernel 1: x */ void ember_k1(float *p0, float *p1) { p1[0] = p0[0] + p0[1]; }";
  const char *t2 = "/* kernel 4: y */ void ember_k4(float *p0, float *p1) { p1[0] = p0[0] + p0[1]; /* z */ }";
  const char *t3 = "/* kernel 1: x */ void ember_k1(float *p0, float *p1) { p1[0] = p1[0] + p0[1]; }";
  const char *t4 = "void ember_k1(float *p0, float *p1) { p1[0] = p0[0] + p0[2]; }";
  CHECK(em_kernel_key(t1, strlen(t1), 1, a) == 0 && em_kernel_key(t2, strlen(t2), 4, b) == 0);
  CHECK(em_kernel_key(t3, strlen(t3), 1, c) == 0 && em_kernel_key(t4, strlen(t4), 1, d) == 0);
  CHECK(strcmp(a, b) == 0 && strcmp(a, c) != 0 && strcmp(a, d) != 0);
  /* no renaming: other names are part of the code, and only the kernel's own name is left out */
  const char *t5 = "void ember_k1(float *b7, float *b9) { b9[0] = b7[0] + b7[1]; }";
  const char *t6 = "void ember_k4(float *b2, float *b3) { b3[0] = b2[0] + b2[1]; }";
  const char *t7 = "void ember_k4(float *p0, float *p1) { p1[0] = p0[0] + ember_k1(p0[1]); }";
  const char *t8 = "void ember_k4(float *p0, float *p1) { p1[0] = p0[0] + ember_k2(p0[1]); }";
  CHECK(em_kernel_key(t5, strlen(t5), 1, c) == 0 && em_kernel_key(t6, strlen(t6), 4, d) == 0);
  CHECK(strcmp(c, d) != 0);
  CHECK(em_kernel_key(t7, strlen(t7), 4, c) == 0 && em_kernel_key(t8, strlen(t8), 4, d) == 0);
  CHECK(strcmp(c, d) != 0);
  /* an unaligned variant's key is not its kernel's */
  const char *u1 = "void ember_k1_u(float *p0, float *p1) { p1[0] = p0[0] + p0[1]; }";
  const char *u2 = "void ember_k4_u(float *p0, float *p1) { p1[0] = p0[0] + p0[1]; }";
  char e[65], f[65];
  CHECK(em_kernel_key(u1, strlen(u1), 1, e) == 0 && em_kernel_key(u2, strlen(u2), 4, f) == 0);
  CHECK(strcmp(e, f) == 0 && strcmp(e, a) != 0);
  str_free(&src);
  ember_graph_free(g);
}

/* a = exp(x), c = a @ w, y = relu(c), the graph's output. */
static void exp_mm_relu(ember_graph *g, int x, int a, int w, int c, int y) {
  ember_arg e[] = {T(x)};
  node1(g, "aten.exp.default", "exp", 1, e, a);
  ember_arg m[] = {T(a), T(w)};
  node1(g, "aten.mm.default", "mm", 2, m, c);
  ember_arg r[] = {T(c)};
  node1(g, "aten.relu.default", "relu", 1, r, y);
  ember_graph_outputs(g, 1, &y);
}

/* mm on a CUDA graph is a library step (cuBLASLt): a kernel with no code,
   its operands and result in memory, the pointwise producer and consumer in
   kernels of their own before and after it; a transposed operand is read
   in place.  On a CPU graph mm falls back to torch. */
static void test_matmul_library_step(void) {
  for (int dev = 0; dev < 2; dev++) {
    ember_graph *g = ember_graph_new();
    int64_t sa[] = {8, 16}, sb[] = {16, 4}, sbt[] = {4, 16}, sc[] = {8, 4};
    int64_t st_a[] = {16, 1}, st_bt[] = {16, 1}, st_b[] = {1, 16}, st_c[] = {4, 1};
    int device = dev ? EMBER_CUDA : EMBER_CPU;
    int x = ember_graph_value(g, EMBER_F32, device, 2, sa, st_a, 0);
    int wt = ember_graph_value(g, EMBER_F32, device, 2, sbt, st_bt, 0);  /* [4, 16]: w stored transposed */
    int a = ember_graph_value(g, EMBER_F32, device, 2, sa, st_a, 0);
    int w = ember_graph_value(g, EMBER_F32, device, 2, sb, st_b, 0);    /* wt.t(): a view, strides (1, 16) */
    int c = ember_graph_value(g, EMBER_F32, device, 2, sc, st_c, 0);
    int y = ember_graph_value(g, EMBER_F32, device, 2, sc, st_c, 0);
    ember_graph_input(g, x), ember_graph_input(g, wt);
    int64_t perm[] = {1, 0};
    ember_arg p[] = {T(wt), L(perm, 2)};
    node1(g, "aten.permute.default", "permute", 2, p, w);
    exp_mm_relu(g, x, a, w, c, y);
    Graph *G = &g->g;
    CHECK(passes(g) == EMBER_OK);
    const Node *mm = G->values[c]->def;
    if (!dev) {
      CHECK(mm->form < 0 && G->nkernels == 2);  /* torch runs it; exp and relu are kernels */
    } else {
      CHECK(mm->form == F_MATMUL && G->nkernels == 3);
      CHECK(!G->kernels[0]->lib && G->kernels[1]->lib && !G->kernels[2]->lib);
      CHECK(G->values[a]->storage == ST_ARENA && G->values[c]->storage == ST_ARENA);
      CHECK(G->values[w]->storage == ST_VIEW && G->values[wt]->storage == ST_INPUT);
      CHECK(mm->mm_ta == 0 && mm->mm_lda == 16 && mm->mm_tb == 1 && mm->mm_ldb == 16 && mm->mm_ldc == 4);
      CHECK(mm->mm_m == 8 && mm->mm_n == 4 && mm->mm_k == 16 && mm->mm_batch == 1);
      CHECK(G->values[a]->last_step == G->kernels[1]->step);  /* the library reads it */
      CHECK(G->ws_bytes == LIB_WORKSPACE && G->ws_off >= G->values[c]->arena_off + G->values[c]->nbytes);
      Str src = {0};
      CHECK(codegen(G, &src) == EMBER_OK && G->kernels[1]->src_len == 0);
      str_free(&src);
    }
    ember_graph_free(g);
  }
}

/* A bfloat16 matmul whose result has rows that are not a multiple of 16
   bytes (4097 elements) and is at least a megabyte is computed over 4104
   columns into a padded copy, from a padded copy of B, both in scratch of the
   call's step alone: bytes no value alive then uses.  Nothing in float32;
   the same with the test option gemm_pad=all. */
static void test_matmul_padded(void) {
  const char *modes[] = {"auto", "all"};
  for (int f32 = 0; f32 < 2; f32++)
    for (int mode = 0; mode < 2; mode++) {
      int dt = f32 ? EMBER_F32 : EMBER_BF16;
      ember_graph *g = ember_graph_new();
      int64_t sx[] = {128, 16}, sw[] = {16, 4097}, sc[] = {128, 4097};
      int64_t st_x[] = {16, 1}, st_w[] = {4097, 1}, st_c[] = {4097, 1};
      int x = ember_graph_value(g, dt, EMBER_CUDA, 2, sx, st_x, 0);
      int w = ember_graph_value(g, dt, EMBER_CUDA, 2, sw, st_w, 0);
      int a = ember_graph_value(g, dt, EMBER_CUDA, 2, sx, st_x, 0);
      int c = ember_graph_value(g, dt, EMBER_CUDA, 2, sc, st_c, 0);
      int y = ember_graph_value(g, dt, EMBER_CUDA, 2, sc, st_c, 0);
      ember_graph_input(g, x), ember_graph_input(g, w);
      exp_mm_relu(g, x, a, w, c, y);
      set_option(g, "gemm_pad", modes[mode]);
      Graph *G = &g->g;
      CHECK(passes(g) == EMBER_OK);
      const Node *mm = G->values[c]->def;
      CHECK(mm->form == F_MATMUL && G->nkernels == 3 && G->kernels[1]->lib);
      int64_t want = f32 ? 0 : 4104;
      CHECK(mm->mm_ncall == want);
      CHECK_MSG(mm->mm_pad[0] == 0 && mm->mm_pad[1] == want && mm->mm_pad[2] == want,
                "%s, mode %s: pads %lld %lld %lld", f32 ? "f32" : "bf16", modes[mode],
                (long long)mm->mm_pad[0], (long long)mm->mm_pad[1], (long long)mm->mm_pad[2]);
      MatStore ms[3];
      size_t bytes = matmul_store(mm, f32 ? 4 : 2, ms);
      CHECK(bytes == (want ? 1050624u + 131328u : 0u));
      if (bytes) {
        const Kernel *k = G->kernels[1];
        size_t lo = k->scratch_off, hi = lo + bytes;
        CHECK(hi <= G->arena_bytes && lo % 64 == 0);
        for (int i = 0; i < G->nvalues; i++) {  /* alive at the call's step: not in the scratch */
          const Value *v = G->values[i];
          if (v->storage != ST_ARENA || v->last_step < k->step || v->first_step > k->step) continue;
          CHECK_MSG(v->arena_off + v->nbytes <= lo || v->arena_off >= hi, "v%d at %zu overlaps the scratch", i,
                    v->arena_off);
        }
      }
      ember_graph_free(g);
    }
}

/* mm + bias, then relu or gelu(approximate='tanh'), on a CUDA graph: the
   nodes cuBLASLt's epilogue can do are folded into the library call
   (F_EPILOGUE), whose step writes the last one's result; the product and
   the sum are never stored.  Each case changes one thing that must keep a
   node out of the epilogue. */
typedef struct EpiCase {
  const char *what;
  int dtype;               /* the matrices' and the product's */
  int bias_dtype;
  int bias_rows;           /* 0: bias [n]; 1: [1, n]; 8: [m, n], not a per-column bias */
  int64_t bias_stride;     /* along n */
  const char *act;         /* NULL, "aten.relu.default" or "aten.gelu.default" */
  const char *approx;      /* gelu's approximate argument, or NULL */
  int alpha;               /* add(mm, b, alpha=alpha) when not 1 */
  int bias_first;          /* add(b, mm) */
  int keep_sum;            /* the sum is a graph output too (training saves it for gelu's backward) */
  int keep_mm;             /* the product is a graph output too */
  int bias_exp;            /* the bias is exp(input) computed by a node 1: before the mm, 2: after it */
  int fallback_between;    /* a node torch runs between the mm and the add */
  int folded;              /* expected: nodes folded (0, the add, or the add and the activation) */
  int epi;                 /* expected epilogue */
} EpiCase;

static int epilogue_on;  /* the test option cuda_epilogue for check_epilogue's graphs */

static void check_epilogue(const EpiCase *c) {
  ember_graph *g = ember_graph_new();
  int64_t sx[] = {8, 16}, stx[] = {16, 1}, sw[] = {16, 4}, stw[] = {4, 1}, sc[] = {8, 4}, stc[] = {4, 1};
  int64_t sb[] = {c->bias_rows ? c->bias_rows : 4, 4}, stb[] = {4 * c->bias_stride, c->bias_stride};
  int nb = c->bias_rows ? 2 : 1;
  int sum_dtype = c->dtype == c->bias_dtype ? c->dtype : EMBER_F32;  /* as torch promotes these */
  int x = ember_graph_value(g, c->dtype, EMBER_CUDA, 2, sx, stx, 0);
  int w = ember_graph_value(g, c->dtype, EMBER_CUDA, 2, sw, stw, 0);
  int b = ember_graph_value(g, c->bias_dtype, EMBER_CUDA, nb, sb + 2 - nb, stb + 2 - nb, 0);
  int m = ember_graph_value(g, c->dtype, EMBER_CUDA, 2, sc, stc, 0);
  int s = ember_graph_value(g, sum_dtype, EMBER_CUDA, 2, sc, stc, 0);
  int y = ember_graph_value(g, sum_dtype, EMBER_CUDA, 2, sc, stc, 0);
  int z = ember_graph_value(g, c->dtype, EMBER_CUDA, 2, sx, stx, 0);
  int eb = ember_graph_value(g, c->bias_dtype, EMBER_CUDA, nb, sb + 2 - nb, stb + 2 - nb, 0);
  ember_graph_input(g, x), ember_graph_input(g, w), ember_graph_input(g, b);
  ember_arg am[] = {T(x), T(w)}, ae[] = {T(b)};
  if (c->bias_exp == 1) node1(g, "aten.exp.default", "exp", 1, ae, eb);
  int mm = node1(g, "aten.mm.default", "mm", 2, am, m);
  if (c->fallback_between) {
    ember_arg af[] = {T(x)};
    node1(g, "aten.something_torch_runs.default", "fb", 1, af, z);
  }
  if (c->bias_exp == 2) node1(g, "aten.exp.default", "exp", 1, ae, eb);
  int bias = c->bias_exp ? eb : b;
  ember_arg aa[] = {T(c->bias_first ? bias : m), T(c->bias_first ? m : bias),
                    {EMBER_ARG_INT, c->alpha, 0, NULL, 0, "alpha", NULL}};
  node1(g, "aten.add.Tensor", "add", c->alpha != 1 ? 3 : 2, aa, s);
  if (c->act) {
    ember_arg ag[] = {T(s), {EMBER_ARG_STRING, 0, 0, NULL, 0, "approximate", c->approx}};
    node1(g, c->act, "act", c->approx ? 2 : 1, ag, y);
  }
  int outs[4], no = 0;
  outs[no++] = c->act ? y : s;
  if (c->keep_sum) outs[no++] = s;
  if (c->keep_mm) outs[no++] = m;
  if (c->fallback_between) outs[no++] = z;
  ember_graph_outputs(g, no, outs);
  set_option(g, "cuda_epilogue", epilogue_on ? "1" : "0");
  Graph *G = &g->g;
  CHECK_MSG(passes(g) == EMBER_OK, "%s: %s", c->what, G->err);
  const Node *n = G->nodes[mm];
  int folded = 0, written = c->folded == 2 ? y : c->folded == 1 ? s : m;
  for (int i = 0; i < G->nnodes; i++) folded += G->nodes[i]->form == F_EPILOGUE;
  CHECK_MSG(n->form == F_MATMUL && folded == c->folded && n->mm_epi == c->epi && n->mm_out == written,
            "%s: %d nodes folded (expected %d), epilogue %d (%d), writes v%d (v%d)", c->what, folded, c->folded,
            n->mm_epi, c->epi, n->mm_out, written);
  CHECK_MSG(n->mm_bias == (c->folded ? bias : -1), "%s: bias v%d", c->what, n->mm_bias);
  const Kernel *k = NULL;
  for (int i = 0; i < G->nkernels; i++)
    if (G->kernels[i]->lib) k = G->kernels[i];
  CHECK_MSG(k && k->call == n && k->nitems == 1 && k->items[0].v == written, "%s: the library step", c->what);
  if (c->folded && k) {
    CHECK_MSG(G->values[m]->storage == ST_NONE, "%s: the product is stored", c->what);
    CHECK_MSG(c->folded < 2 || G->values[s]->storage == ST_NONE, "%s: the sum is stored", c->what);
    int st = G->values[written]->storage;
    CHECK_MSG((st == ST_HOST || st == ST_ARENA) && G->values[written]->first_step == k->step,
              "%s: the result's storage %d from step %d", c->what, st, G->values[written]->first_step);
    CHECK_MSG(G->values[bias]->last_step >= k->step, "%s: the bias dies at step %d, before the call's %d", c->what,
              G->values[bias]->last_step, k->step);
    /* left to generate: the bias's exp, and an activation not folded */
    CHECK_MSG(G->nkernels == 1 + (c->bias_exp != 0) + (c->act && c->folded < 2), "%s: %d kernels", c->what,
              G->nkernels);
  }
  ember_graph_free(g);
}

static void test_matmul_epilogues(void) {
  epilogue_on = 1;  /* the fold is off by default until run on a GPU (lower.c) */
  static const EpiCase cases[] = {
    /* what                   dtype       bias dtype  rows st act                 approx  al bf ks km bx fb folded */
    {"bias",                  EMBER_F32,  EMBER_F32,  0, 1, NULL,                 NULL,   1, 0, 0, 0, 0, 0, 1, EPI_NONE},
    {"bias first",            EMBER_F32,  EMBER_F32,  0, 1, NULL,                 NULL,   1, 1, 0, 0, 0, 0, 1, EPI_NONE},
    {"bias [1, n] + relu",    EMBER_F32,  EMBER_F32,  1, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 0, 0, 2, EPI_RELU},
    {"bias + tanh gelu, bf16",EMBER_BF16, EMBER_BF16, 0, 1, "aten.gelu.default",  "tanh", 1, 0, 0, 0, 0, 0, 2, EPI_GELU},
    {"bias + tanh gelu, f16", EMBER_F16,  EMBER_F16,  0, 1, "aten.gelu.default",  "tanh", 1, 0, 0, 0, 0, 0, 2, EPI_GELU},
    {"bias + tanh gelu, f32", EMBER_F32,  EMBER_F32,  0, 1, "aten.gelu.default",  "tanh", 1, 0, 0, 0, 0, 0, 1, EPI_NONE},
    {"bias + erf gelu",       EMBER_BF16, EMBER_BF16, 0, 1, "aten.gelu.default",  "none", 1, 0, 0, 0, 0, 0, 1, EPI_NONE},
    {"bias + gelu (default)", EMBER_BF16, EMBER_BF16, 0, 1, "aten.gelu.default",  NULL,   1, 0, 0, 0, 0, 0, 1, EPI_NONE},
    {"sum kept (training)",   EMBER_BF16, EMBER_BF16, 0, 1, "aten.gelu.default",  "tanh", 1, 0, 1, 0, 0, 0, 1, EPI_NONE},
    {"bias computed before",  EMBER_F32,  EMBER_F32,  0, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 1, 0, 2, EPI_RELU},
    {"other activation",      EMBER_F32,  EMBER_F32,  0, 1, "aten.sigmoid.default", NULL, 1, 0, 0, 0, 0, 0, 1, EPI_NONE},
    {"bias of another dtype", EMBER_F32,  EMBER_BF16, 0, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 0, 0, 0, EPI_NONE},
    {"sum of another dtype",  EMBER_BF16, EMBER_F32,  0, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 0, 0, 0, EPI_NONE},
    {"bias [m, n]",           EMBER_F32,  EMBER_F32,  8, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 0, 0, 0, EPI_NONE},
    {"strided bias",          EMBER_F32,  EMBER_F32,  0, 2, "aten.relu.default",  NULL,   1, 0, 0, 0, 0, 0, 0, EPI_NONE},
    {"alpha 2",               EMBER_F32,  EMBER_F32,  0, 1, "aten.relu.default",  NULL,   2, 0, 0, 0, 0, 0, 0, EPI_NONE},
    {"product kept",          EMBER_F32,  EMBER_F32,  0, 1, "aten.relu.default",  NULL,   1, 0, 0, 1, 0, 0, 0, EPI_NONE},
    {"bias computed after",   EMBER_F32,  EMBER_F32,  0, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 2, 0, 0, EPI_NONE},
    {"fallback in between",   EMBER_F32,  EMBER_F32,  0, 1, "aten.relu.default",  NULL,   1, 0, 0, 0, 0, 1, 0, EPI_NONE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_epilogue(&cases[i]);
  /* off, nothing folds */
  epilogue_on = 0;
  EpiCase off = cases[2];
  off.what = "bias [1, n] + relu, cuda_epilogue off", off.folded = 0, off.epi = EPI_NONE;
  check_epilogue(&off);
}

/* A fallback's operand lives as long as the fallback's result (it may be a
   view of it) unless the node is marked noalias (the op's schema says its
   results are new tensors): then it dies at the fallback. */
static void test_fallback_operand_lifetime(void) {
  for (int noalias = 0; noalias < 2; noalias++) {
    ember_graph *g = ember_graph_new();
    int64_t s[] = {64, 64};
    int x = val(g, 2, s), a = val(g, 2, s), c = val(g, 2, s), y = val(g, 2, s), z = val(g, 2, s);
    ember_graph_input(g, x);
    ember_arg e[] = {T(x)};
    node1(g, "aten.exp.default", "exp", 1, e, a);
    ember_arg f[] = {T(a)};
    int conv = node1(g, "aten.convolution_like.default", "conv", 1, f, c);
    if (noalias) CHECK(ember_graph_node_noalias(g, conv) == EMBER_OK);
    CHECK(ember_graph_node_noalias(g, 99) == EMBER_EINVAL);
    g->g.failed = 0;  /* that error is not this graph's: build on */
    ember_arg r[] = {T(c)};
    node1(g, "aten.relu.default", "relu", 1, r, y);
    ember_arg t[] = {T(y)};
    node1(g, "aten.tanh.default", "tanh", 1, t, z);
    ember_graph_outputs(g, 1, &z);
    CHECK(passes(g) == EMBER_OK);
    Graph *G = &g->g;
    const Value *va = G->values[a], *vc = G->values[c];
    CHECK(va->storage == ST_ARENA && vc->storage == ST_FALLBACK);
    if (noalias) CHECK_MSG(va->last_step == 1, "exp's result lives to step %d", va->last_step);
    else CHECK_MSG(va->last_step >= vc->last_step, "exp's result dies at %d, conv's at %d", va->last_step, vc->last_step);
    ember_graph_free(g);
  }
}

/* The client's plan (plan.c): a fallback result is dropped before the first
   fallback step after its last read, never an output's root; a CPU host
   tensor of HOST_CACHE_MIN bytes or more comes from the block cache; on
   CUDA, outputs from a start on share one block at BLOCK_ALIGN offsets. */
static void test_client_plan(void) {
  ember_graph *g = ember_graph_new();
  int64_t s[] = {64, 64}, big[] = {1024, 1024};
  int x = val(g, 2, s), xb = val(g, 2, big), a = val(g, 2, s), c = val(g, 2, s), d = val(g, 2, s);
  int e = val(g, 2, s), y = val(g, 2, s), yb = val(g, 2, big);
  ember_graph_input(g, x), ember_graph_input(g, xb);
  ember_arg ax[] = {T(x)}, aa[] = {T(a)}, ac[] = {T(c)}, ad[] = {T(d)}, ae[] = {T(e)}, ab[] = {T(xb)};
  node1(g, "aten.exp.default", "exp", 1, ax, a);
  int fb[3] = {node1(g, "aten.convolution_like.default", "conv1", 1, aa, c),
               node1(g, "aten.convolution_like.default", "conv2", 1, ac, d),
               node1(g, "aten.convolution_like.default", "conv3", 1, ad, e)};
  for (int i = 0; i < 3; i++) CHECK(ember_graph_node_noalias(g, fb[i]) == EMBER_OK);
  node1(g, "aten.relu.default", "relu", 1, ae, y);
  node1(g, "aten.exp.default", "exp_big", 1, ab, yb);
  int outs[] = {y, yb};
  ember_graph_outputs(g, 2, outs);
  CHECK(passes(g) == EMBER_OK);
  Graph *G = &g->g;
  const Value *vc = G->values[c], *vd = G->values[d], *ve = G->values[e];
  CHECK(vc->storage == ST_FALLBACK && vd->storage == ST_FALLBACK && ve->storage == ST_FALLBACK);
  /* conv1's result is read by conv2 and dropped before conv3 runs */
  CHECK_MSG(vc->drop_step > vc->last_step && G->steps[vc->drop_step].kind == EMBER_STEP_FALLBACK &&
            G->steps[vc->drop_step].index == fb[2], "conv1's result dropped at step %d", vc->drop_step);
  CHECK_MSG(vd->drop_step == -1 && ve->drop_step == -1, "no fallback after conv3: drops %d, %d", vd->drop_step,
            ve->drop_step);
  const Value *vy = G->values[y], *vyb = G->values[yb];
  CHECK(vy->storage == ST_HOST && vyb->storage == ST_HOST);
  CHECK(vy->host_alloc == EMBER_HOST_TORCH && vy->host_bytes == 64 * 64 * 4);
  CHECK(vyb->host_alloc == EMBER_HOST_CACHE && vyb->host_bytes == (size_t)4 << 20);
  Program *P = program_make(G);
  CHECK(P);
  ember_program *ep = (ember_program *)P;
  /* on the CPU only what torch allocates is pooled: the large output keeps the block cache, and the
     small one alone is one allocation either way (no block) */
  CHECK(ember_program_pool_outputs(ep, 0) == EMBER_OK && ember_program_block_bytes(ep) == 0);
  CHECK(P->values[yb].host_alloc == EMBER_HOST_CACHE && P->values[y].host_alloc == EMBER_HOST_TORCH);
  CHECK(ember_program_pool_outputs(ep, 3) == EMBER_EINVAL && strstr(P->err, "pool_outputs"));
  program_free(P);
  ember_graph_free(g);

  /* CUDA: outputs exp, tanh, relu, and tanh again (a root seen before the start keeps its memory) */
  for (int again = 0; again < 2; again++) {
    g = ember_graph_new();
    int64_t st[] = {64, 1};
    int xc = ember_graph_value(g, EMBER_F32, EMBER_CUDA, 2, s, st, 0), o[3];
    ember_graph_input(g, xc);
    const char *ops[] = {"aten.exp.default", "aten.tanh.default", "aten.relu.default"};
    ember_arg ar[] = {T(xc)};
    for (int i = 0; i < 3; i++) {
      o[i] = ember_graph_value(g, EMBER_F32, EMBER_CUDA, 2, s, st, 0);
      node1(g, ops[i], ops[i], 1, ar, o[i]);
    }
    int co[] = {o[0], o[1], o[2], o[1]};
    ember_graph_outputs(g, again ? 4 : 3, co);
    CHECK(passes(g) == EMBER_OK);
    G = &g->g;
    for (int i = 0; i < 3; i++) CHECK(G->values[o[i]]->storage == ST_HOST && G->values[o[i]]->host_alloc == EMBER_HOST_TORCH);
    /* the pooling is the program's (the client asks once it knows which outputs it pools) */
    P = program_make(G);
    CHECK(P);
    ep = (ember_program *)P;
    PValue *pv = P->values;
    CHECK(ember_program_pool_outputs(ep, 1) == EMBER_OK);
    if (!again) {
      CHECK_MSG(P->block_bytes == 2 * 64 * 64 * 4, "block of %zu bytes", P->block_bytes);
      CHECK(pv[o[0]].host_alloc == EMBER_HOST_TORCH);
      CHECK(pv[o[1]].host_alloc == EMBER_HOST_BLOCK && pv[o[1]].block_off == 0);
      CHECK(pv[o[2]].host_alloc == EMBER_HOST_BLOCK && pv[o[2]].block_off == 64 * 64 * 4);
      CHECK(ember_program_pool_outputs(ep, 2) == EMBER_OK && P->block_bytes == 0);  /* one value: no block */
      CHECK(pv[o[1]].host_alloc == EMBER_HOST_TORCH && pv[o[2]].host_alloc == EMBER_HOST_TORCH);
    } else {
      /* tanh's result is output 1 and 3: returned before start 2, so only relu's is left, alone */
      CHECK(ember_program_pool_outputs(ep, 2) == EMBER_OK && P->block_bytes == 0);
      CHECK(pv[o[1]].host_alloc == EMBER_HOST_TORCH);
    }
    program_free(P);
    ember_graph_free(g);
  }
}

/* A chain of 48 kernels (exp -> sum over rows -> relu, then a fallback),
   each on other sizes, on target dev. */
static ember_graph *many_kernels_graph(int dev) {
  ember_graph *g = ember_graph_new();
  int64_t dim1[] = {1};
  int64_t s[] = {8, 40}, st[] = {40, 1};
  int cur = ember_graph_value(g, EMBER_F32, dev, 2, s, st, 0);
  ember_graph_input(g, cur);
  for (int c = 0; c < 48; c++) {
    int64_t s2[] = {8, 40 + c}, st2[] = {40 + c, 1}, s1[] = {8, 1}, st1[] = {1, 1};
    int e = ember_graph_value(g, EMBER_F32, dev, 2, s2, st2, 0);
    int r = ember_graph_value(g, EMBER_F32, dev, 2, s1, st1, 0);
    int y = ember_graph_value(g, EMBER_F32, dev, 2, s2, st2, 0);
    int nx = ember_graph_value(g, EMBER_F32, dev, 2, s2, st2, 0);
    int64_t pad[] = {0, 1};
    ember_arg a[] = {T(cur), L(pad, 2)};
    node1(g, "aten.constant_pad_nd.default", "pad", 2, a, e);
    ember_arg b[] = {T(e), L(dim1, 1), B(1)};
    node1(g, "aten.sum.dim_IntList", "sum", 3, b, r);
    ember_arg d[] = {T(e), T(r)};
    node1(g, "aten.sub.Tensor", "sub", 2, d, y);
    ember_arg f[] = {T(y)};
    node1(g, "aten.not_lowered.default", "opaque", 1, f, nx);
    cur = nx;
  }
  ember_graph_outputs(g, 1, &cur);
  return g;
}

static void test_parallel_codegen(void) {
  for (int dev = 0; dev < 2; dev++) {
    char *text[2] = {NULL, NULL};
    int nk[2] = {0, 0};
    for (int run = 0; run < 2; run++) {
      ember_graph *g = many_kernels_graph(dev ? EMBER_CUDA : EMBER_CPU);
      set_option(g, "compile_threads", run ? "4" : "1");
      CHECK(passes(g) == EMBER_OK);
      Graph *G = &g->g;
      nk[run] = G->nkernels;
      Str src = {0};
      CHECK(codegen(G, &src) == EMBER_OK && src.s);
      for (int i = 0; i < G->nkernels && src.s; i++) {
        const Kernel *k = G->kernels[i];
        CHECK(k->src_off >= G->src_head && k->src_off + k->src_len <= src.len);
        char name[32];
        snprintf(name, sizeof name, "ember_k%d(", i);
        CHECK_MSG(k->src_len && memmem(src.s + k->src_off, k->src_len, name, strlen(name)),
                  "kernel %d's text is not at its offset", i);
      }
      text[run] = src.s;
      ember_graph_free(g);
    }
    CHECK_MSG(nk[0] >= 48 && nk[0] == nk[1], "%d / %d kernels", nk[0], nk[1]);
    CHECK_MSG(text[0] && text[1] && !strcmp(text[0], text[1]), "%s: 4 threads generated other text than 1",
              dev ? "cuda" : "c");
    free(text[0]), free(text[1]);
  }
}

/* CUDA vector kernels: the text compiled with the graph has the aligned path
   alone, the launch checks the pointers, and the kernel with its unaligned
   path too is a variant after every kernel (ember_k<id>_u), compiled when
   first needed. */
static void test_unaligned_variants(void) {
  {
    ember_graph *g = ember_graph_new();
    int64_t s[] = {64, 100}, st[] = {100, 1};
    int v[5];
    for (int i = 0; i < 5; i++) v[i] = ember_graph_value(g, EMBER_F32, EMBER_CUDA, 2, s, st, 0);
    ember_graph_input(g, v[0]);
    ember_arg a[] = {T(v[0])}, b[] = {T(v[1])}, c[] = {T(v[2])}, d[] = {T(v[3])};
    node1(g, "aten.exp.default", "exp", 1, a, v[1]);
    node1(g, "aten.not_lowered.default", "opaque", 1, b, v[2]);
    node1(g, "aten.exp.default", "exp_1", 1, c, v[3]);
    node1(g, "aten.relu.default", "relu", 1, d, v[4]);
    ember_graph_outputs(g, 1, &v[4]);
    Graph *G = &g->g;
    CHECK(passes(g) == EMBER_OK);
    Str src = {0};
    CHECK(codegen(G, &src) == EMBER_OK && src.s && G->nkernels == 2);
    char keys[2][2][65];
    for (int i = 0; i < G->nkernels && src.s; i++) {
      const Kernel *k = G->kernels[i];
      char *text = strndup(src.s + k->src_off, k->src_len);
      CHECK(text && strstr(text, "em_vec4<float>"));  /* a vector kernel */
      {
        CHECK_MSG(k->nalign >= 1 && k->alt_len > 0, "kernel %d: %d checks, variant of %zu bytes", i, k->nalign,
                  k->alt_len);
        CHECK(text && !strstr(text, "} else {") && strstr(text, "checked by the launch"));
        for (int j = 0; j < G->nkernels; j++) CHECK(k->alt_off > G->kernels[j]->src_off);  /* after every kernel */
        char *alt = strndup(src.s + k->alt_off, k->alt_len), name[32];
        snprintf(name, sizeof name, "ember_k%d_u(", i);
        CHECK(alt && strstr(alt, name) && strstr(alt, "} else {") && strstr(alt, "% 16 == 0"));
        for (int j = 0; j < k->nalign; j++) CHECK(k->align[j].mod == 16 && k->align[j].off == 0);
        CHECK(em_kernel_key(text, strlen(text), k->id, keys[i][0]) == 0);
        CHECK(em_kernel_key(alt, strlen(alt), k->id, keys[i][1]) == 0);
        free(alt);
      }
      free(text);
    }
    CHECK(strcmp(keys[0][0], keys[0][1]) != 0);  /* a variant is never its kernel's twin */
    str_free(&src);
    ember_graph_free(g);
  }
}

/* The CUDA build's chunks compiled by NVRTC in child processes (3 chunks)
   and in this thread (compile_threads 1: one chunk): both build the 48
   distinct kernels of many_kernels_graph, and both report NVRTC's error for
   a kernel whose text is broken, naming it.  Needs NVRTC
   ($EMBER_CUDA_LIB_DIRS, which scripts/test.sh sets from the nvidia wheel). */
static void test_nvrtc_processes(void) {
  const char *libs = getenv("EMBER_CUDA_LIB_DIRS");
  char ident[512], err[512];
  cuda_set_search_path(libs, NULL);
  if (!libs || cuda_compile_identity(90, ident, sizeof ident, err, sizeof err)) {
    printf("test_compile: no NVRTC ($EMBER_CUDA_LIB_DIRS): skipped the NVRTC build checks\n");
    return;
  }
  for (int procs = 1; procs >= 0; procs--) {
    for (int broken = 0; broken < 2; broken++) {
      ember_graph *g = many_kernels_graph(EMBER_CUDA);
      const char *kv[] = {"compile_threads", procs ? "3" : "1", "cuda_sm", "90", "build_only", "1", "cache", "0", NULL};
      set_options(g, kv);
      CHECK(passes(g) == EMBER_OK);
      Graph *G = &g->g;
      Str src = {0};
      CHECK(codegen(G, &src) == EMBER_OK && src.s);
      if (!src.s) { ember_graph_free(g); continue; }
      if (broken) {  /* kernel 40's body: a statement NVRTC rejects */
        char *body = strstr(src.s + G->kernels[40]->src_off, ") {\n");
        CHECK(body != NULL);
        if (body) memcpy(body + 4, "@;", 2);
      }
      G->source = src.s;
      Program *P = program_make(G);
      CHECK(P != NULL);
      int rc = P ? build_cuda(G, P) : EMBER_ENOMEM;
      program_free(P);
      if (!broken) {
        CHECK_MSG(rc == EMBER_OK && G->report.distinct_kernels == 48, "%s: rc %d, %d distinct: %s",
                  procs ? "processes" : "one thread", rc, G->report.distinct_kernels, G->err);
      } else {
        CHECK_MSG(rc == EMBER_EBUILD && strstr(G->err, "NVRTC failed") && strstr(G->err, "ember.cu(") &&
                  strstr(G->err, "error"), "%s: rc %d: %s",
                  procs ? "processes" : "one thread", rc, G->err);
      }
      G->source = NULL;
      str_free(&src);
      ember_graph_free(g);
    }
  }
}

static void test_alloc_failures(void) {
  /* fail the Nth allocation for every N the softmax graph makes: never a crash or a leak */
  int failures = 0;
  for (long n = 1; n < 400; n++) {
    em_fail_alloc_after(n);
    ember_graph *g = ember_graph_new();
    if (!g) { em_fail_alloc_after(0); continue; }
    int64_t s2[] = {64, 100};
    int x = val(g, 2, s2), y = val(g, 2, s2);
    ember_graph_input(g, x);
    ember_arg a[] = {T(x)};
    node1(g, "aten.exp.default", "exp", 1, a, y);
    ember_graph_outputs(g, 1, &y);
    int rc = passes(g);
    Str src = {0};
    if (!rc) rc = codegen(&g->g, &src);
    str_free(&src);
    em_fail_alloc_after(0);
    if (rc) failures++;
    ember_graph_free(g);
  }
  CHECK(failures > 0);  /* some allocations did fail, and were survived */
}

/* The options table through the public calls: defaults, parsing, errors
   that name the option, the environment for user options only, and every
   entry's default parsing as its own type. */
static void test_options(void) {
  ember_options *o = ember_options_new();
  CHECK(o != NULL);
  if (!o) return;
  char buf[256];
  CHECK(ember_options_get(o, "partition", buf, sizeof buf) == EMBER_OK && !strcmp(buf, "min_cut"));
  CHECK(ember_options_get(o, "cache", buf, sizeof buf) == EMBER_OK && !strcmp(buf, "1"));
  CHECK(ember_options_set(o, "partition", "default") == EMBER_OK);
  CHECK(ember_options_get(o, "partition", buf, sizeof buf) == EMBER_OK && !strcmp(buf, "default"));
  CHECK(ember_options_set(o, "cache", "off") == EMBER_OK && em_options_of(o)->cache == 0);
  CHECK(ember_options_set(o, "cc", "ccache gcc") == EMBER_OK && !strcmp(em_options_of(o)->cc, "ccache gcc"));
  CHECK(ember_options_set(o, "no_such_option", "1") == EMBER_EINVAL);
  CHECK(strstr(ember_options_error(o), "unknown option 'no_such_option'") && strstr(ember_options_error(o), "cc"));
  CHECK(ember_options_set(o, "compile_threads", "2000") == EMBER_EINVAL);
  CHECK(strstr(ember_options_error(o), "compile_threads must be an integer from 0 to 1024"));
  CHECK(ember_options_set(o, "partition", "greedy") == EMBER_EINVAL);
  CHECK(strstr(ember_options_error(o), "min_cut|default"));
  setenv("EMBER_COMPILE_THREADS", "7", 1);
  setenv("EMBER_SPLIT_REDUCTIONS", "all", 1);  /* a test option: never from the environment */
  CHECK(ember_options_read_env(o) == EMBER_OK);
  CHECK(em_options_of(o)->compile_threads == 7 && em_options_of(o)->split_reductions == SPLIT_AUTO);
  setenv("EMBER_COMPILE_THREADS", "x", 1);
  CHECK(ember_options_read_env(o) == EMBER_EINVAL && strstr(ember_options_error(o), "EMBER_COMPILE_THREADS"));
  unsetenv("EMBER_COMPILE_THREADS"), unsetenv("EMBER_SPLIT_REDUCTIONS");
  int n = ember_option_count(), user = 0;
  for (int i = 0; i < n; i++) {
    ember_option_info in;
    CHECK(ember_option_describe(i, &in) == EMBER_OK && in.doc[0]);
    CHECK_MSG(ember_options_set(o, in.name, in.dflt) == EMBER_OK, "%s's default", in.name);
    user += !strcmp(in.who, "user");
  }
  CHECK_MSG(user >= 1 && user <= 12, "%d user options", user);
  ember_options_free(o);
}

/* ---- the allocation sweep: every graph below built and compiled with the
   Nth allocation failing, for N = 1, 2, ... until N passes the allocations
   the whole compile makes.  Each N gives a clear error (a status and a
   message) or, where the failure was one the compile can do without (a
   cache write), a program; never a crash, and (AddressSanitizer's leak
   check at exit) no leak.  Graphs go through ember_compile, the C
   compiler's object or NVRTC's cubins (CUDA graphs are built only: no GPU
   needed) coming from the disk cache, filled by a first compile without
   failures; without NVRTC, CUDA graphs go through the passes and code
   generation. */
static int dval(ember_graph *g, int dev, int dtype, int ndim, const int64_t *sz) {
  int64_t st[MAXD];
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) st[d] = s, s *= sz[d];
  return ember_graph_value(g, dtype, dev, ndim, sz, st, 0);
}

static ember_graph *sweep_softmax(int dev) {
  ember_graph *g = ember_graph_new();
  if (!g) return NULL;
  int64_t s2[] = {64, 100}, s1[] = {64, 1}, dim1[] = {1};
  int x = dval(g, dev, EMBER_F32, 2, s2), m = dval(g, dev, EMBER_F32, 2, s1), d = dval(g, dev, EMBER_F32, 2, s2);
  int e = dval(g, dev, EMBER_F32, 2, s2), s = dval(g, dev, EMBER_F32, 2, s1), o = dval(g, dev, EMBER_F32, 2, s2);
  ember_graph_input(g, x);
  ember_arg a1[] = {T(x), L(dim1, 1), B(1)}, a2[] = {T(x), T(m)}, a3[] = {T(d)}, a4[] = {T(e), L(dim1, 1), B(1)};
  ember_arg a5[] = {T(e), T(s)};
  node1(g, "aten.amax.default", "amax", 3, a1, m);
  node1(g, "aten.sub.Tensor", "sub", 2, a2, d);
  node1(g, "aten.exp.default", "exp", 1, a3, e);
  node1(g, "aten.sum.dim_IntList", "sum", 3, a4, s);
  node1(g, "aten.div.Tensor", "div", 2, a5, o);
  ember_graph_outputs(g, 1, &o);
  return g;
}

/* exp, mm (a fallback on the CPU, a cuBLASLt call on CUDA), relu */
static ember_graph *sweep_matmul(int dev) {
  ember_graph *g = ember_graph_new();
  if (!g) return NULL;
  int64_t sa[] = {8, 16}, sb[] = {16, 4}, sc[] = {8, 4};
  int x = dval(g, dev, EMBER_F32, 2, sa), w = dval(g, dev, EMBER_F32, 2, sb);
  int a = dval(g, dev, EMBER_F32, 2, sa), c = dval(g, dev, EMBER_F32, 2, sc), y = dval(g, dev, EMBER_F32, 2, sc);
  ember_graph_input(g, x), ember_graph_input(g, w);
  exp_mm_relu(g, x, a, w, c, y);
  return g;
}

/* exp(x) and (x * 2).index_select(0, i) + exp(x).index_select(0, i): gathers and their index checks */
static ember_graph *sweep_gather(int dev) {
  ember_graph *g = ember_graph_new();
  if (!g) return NULL;
  int64_t s2[] = {6, 5}, s1[] = {6};
  int x = dval(g, dev, EMBER_F32, 2, s2), i = dval(g, dev, EMBER_I64, 1, s1);
  ember_graph_input(g, x), ember_graph_input(g, i);
  int y = dval(g, dev, EMBER_F32, 2, s2), m = dval(g, dev, EMBER_F32, 2, s2), a = dval(g, dev, EMBER_F32, 2, s2);
  int b = dval(g, dev, EMBER_F32, 2, s2), z = dval(g, dev, EMBER_F32, 2, s2);
  ember_arg two = {EMBER_ARG_INT, 2, 0, NULL, 0, NULL, NULL}, zero = {EMBER_ARG_INT, 0, 0, NULL, 0, NULL, NULL};
  ember_arg ae[] = {T(x)}, am[] = {T(x), two}, ai[] = {T(m), zero, T(i)}, aj[] = {T(y), zero, T(i)};
  ember_arg aa[] = {T(a), T(b)};
  node1(g, "aten.exp.default", "exp", 1, ae, y);
  node1(g, "aten.mul.Tensor", "mul", 2, am, m);
  node1(g, "aten.index_select.default", "index_select", 3, ai, a);
  node1(g, "aten.index_select.default", "index_select_1", 3, aj, b);
  node1(g, "aten.add.Tensor", "add", 2, aa, z);
  int outs[] = {y, z};
  ember_graph_outputs(g, 2, outs);
  return g;
}

/* x.sum(0) (a reduction along the outer dim, in tiles), a cat and a transposed copy */
static ember_graph *sweep_cat(int dev) {
  ember_graph *g = ember_graph_new();
  if (!g) return NULL;
  int64_t sx[] = {40, 24}, sr[] = {24}, sc[] = {48}, st[] = {24, 40}, dim0[] = {0}, perm[] = {1, 0};
  int x = dval(g, dev, EMBER_F32, 2, sx), r = dval(g, dev, EMBER_F32, 1, sr), c = dval(g, dev, EMBER_F32, 1, sc);
  int64_t tstr[] = {1, 24};
  int t = ember_graph_value(g, EMBER_F32, dev, 2, st, tstr, 0), u = dval(g, dev, EMBER_F32, 2, st);
  ember_graph_input(g, x);
  ember_arg as[] = {T(x), L(dim0, 1), B(0)};
  node1(g, "aten.sum.dim_IntList", "sum", 3, as, r);
  int64_t rr[] = {r, r};
  ember_arg lst = {EMBER_ARG_TENSORS, 0, 0, rr, 2, NULL, NULL}, zero = {EMBER_ARG_INT, 0, 0, NULL, 0, NULL, NULL};
  ember_arg ac[] = {lst, zero};
  node1(g, "aten.cat.default", "cat", 2, ac, c);
  ember_arg ap[] = {T(x), L(perm, 2)};
  node1(g, "aten.permute.default", "permute", 2, ap, t);
  ember_arg ak[] = {T(t)};
  node1(g, "aten.clone.default", "clone", 1, ak, u);
  int outs[] = {c, u};
  ember_graph_outputs(g, 2, outs);
  return g;
}

/* A graph through ember_compile; a CUDA one built only (NVRTC, no GPU),
   or where there is no NVRTC through the passes and code generation.  The
   status, and the message in err. */
static int sweep_compile(ember_graph *g, int dev, int nvrtc, const char *cache, char *err, size_t errlen) {
  err[0] = 0;
  if (dev == EMBER_CPU || nvrtc) {
    ember_options *o = ember_options_new();
    if (!o) {  /* the sweep's failure hit the options: as clear an error as any */
      snprintf(err, errlen, "ember: out of memory creating the options");
      ember_graph_free(g);
      return EMBER_ENOMEM;
    }
    const char *libs = getenv("EMBER_CUDA_LIB_DIRS");
    int bad = ember_options_set(o, "cache_dir", cache);
    if (dev == EMBER_CUDA)
      bad |= ember_options_set(o, "cuda_sm", "90") | ember_options_set(o, "build_only", "1") |
             ember_options_set(o, "cuda_lib_dirs", libs ? libs : "");
    if (bad) {
      snprintf(err, errlen, "%s", ember_options_error(o));
      ember_options_free(o);
      ember_graph_free(g);
      return EMBER_ENOMEM;
    }
    ember_program *p = ember_compile(g, o, err, errlen);
    ember_options_free(o);
    ember_program_free(p);
    return p ? EMBER_OK : EMBER_EINVAL;
  }
  int rc = passes(g);
  Str src = {0};
  if (!rc) rc = codegen(&g->g, &src);
  if (!rc && src.oom) rc = graph_error(&g->g, NULL, "out of memory in code generation");
  str_free(&src);
  if (rc) snprintf(err, errlen, "%s", ember_graph_error(g));
  ember_graph_free(g);
  return rc;
}

static void test_alloc_sweep(void) {
  static ember_graph *(*const makers[])(int) = {sweep_softmax, sweep_matmul, sweep_gather, sweep_cat};
  static const char *const names[] = {"softmax", "matmul", "gather", "cat"};
  char cache[] = "/tmp/ember-test-sweep-XXXXXX", err[8192];
  if (!mkdtemp(cache)) {
    CHECK_MSG(0, "mkdtemp: %s", strerror(errno));
    return;
  }
  const char *libs = getenv("EMBER_CUDA_LIB_DIRS");
  char ident[512];
  cuda_set_search_path(libs, NULL);
  int nvrtc = libs && !cuda_compile_identity(90, ident, sizeof ident, err, sizeof err);
  if (!nvrtc) printf("test_compile: no NVRTC ($EMBER_CUDA_LIB_DIRS): the CUDA sweep stops at code generation\n");
  setenv("EMBER_COMPILE_THREADS", "1", 1);  /* the Nth allocation the same one at every run */
  for (int dev = EMBER_CPU; dev <= EMBER_CUDA; dev++) {
    for (size_t m = 0; m < sizeof makers / sizeof *makers; m++) {
      const char *what = dev == EMBER_CPU ? "cpu" : "cuda";
      /* without failures first: the program compiles (and the cache has its object) */
      int rc = sweep_compile(makers[m](dev), dev, nvrtc, cache, err, sizeof err);
      CHECK_MSG(rc == EMBER_OK, "%s %s: %s", what, names[m], err);
      if (rc) continue;
      long n = 1, failed = 0;
      for (;; n++) {
        em_fail_alloc_after(n);
        ember_graph *g = makers[m](dev);
        if (!g) continue;  /* ember_graph_new itself: NULL, nothing to free */
        rc = sweep_compile(g, dev, nvrtc, cache, err, sizeof err);
        int past = em_fail_armed();  /* the Nth allocation never came: N passed them all */
        em_fail_alloc_after(0);
        if (past) {
          CHECK_MSG(rc == EMBER_OK, "%s %s, no allocation failing: %s", what, names[m], err);
          break;
        }
        if (rc) failed++;
        CHECK_MSG(rc == EMBER_OK || (err[0] && strlen(err) < sizeof err - 1),
                  "%s %s, allocation %ld failing: status %d, no message", what, names[m], n, rc);
        if (n > 100000) {
          CHECK_MSG(0, "%s %s: more than 100000 allocations", what, names[m]);
          break;
        }
      }
      CHECK_MSG(failed > n / 2, "%s %s: %ld of %ld failing allocations gave an error", what, names[m], failed, n - 1);
    }
  }
  unsetenv("EMBER_COMPILE_THREADS");
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
  if (system(cmd)) fprintf(stderr, "test_compile: could not remove %s\n", cache);
}

/* Dynamic shapes (stage 2): a graph whose sizes are expressions over size
   variables.  x [s0, 16] and y = x.view(s0*16) + 1, x.t(); the meta's
   integers are -1 where symbolic, the expressions simplify, the verifier
   takes the graph, the dump prints the expressions, bad handles are errors;
   it compiles once and runs at two sizes; a cat is refused with its reason
   (the client then specializes). */
static void test_symbolic_graph(void) {
  ember_graph *g = ember_graph_new();
  int s0 = ember_graph_sym(g, "s7", 2, EMBER_SIZE_INF);
  int c16 = ember_graph_size_const(g, 16), c1 = ember_graph_size_const(g, 1), c0 = ember_graph_size_const(g, 0);
  CHECK(s0 >= 0 && c16 >= 0 && c1 >= 0 && c0 >= 0);
  int n = ember_graph_size_op(g, EMBER_SIZE_MUL, s0, c16);        /* s0*16 */
  int q = ember_graph_size_op(g, EMBER_SIZE_FLOORDIV, n, c16);    /* (s0*16)//16 = s0 */
  int r = ember_graph_size_op(g, EMBER_SIZE_MOD, n, s0);          /* (s0*16) % s0 = 0 */
  int mx = ember_graph_size_op(g, EMBER_SIZE_MAX, s0, c1);        /* max(s0, 1) = s0 */
  CHECK(n >= 0 && q >= 0 && r >= 0 && mx >= 0);
  Graph *G = &g->g;
  CHECK(ex_equal(graph_size_expr(G, q), graph_size_expr(G, s0)));
  CHECK(graph_size_expr(G, r)->kind == E_CONST && graph_size_expr(G, r)->c == 0);
  CHECK(ex_equal(graph_size_expr(G, mx), graph_size_expr(G, s0)));
  /* a divisor that may be 0, and handles that do not exist */
  CHECK(ember_graph_size_op(g, EMBER_SIZE_FLOORDIV, s0, c0) == EMBER_EINVAL);
  CHECK(strstr(ember_graph_error(g), "divisor") != NULL);
  ember_graph_free(g);

  g = ember_graph_new();
  G = &g->g;
  s0 = ember_graph_sym(g, "s7", 2, EMBER_SIZE_INF);
  c16 = ember_graph_size_const(g, 16), c1 = ember_graph_size_const(g, 1), c0 = ember_graph_size_const(g, 0);
  n = ember_graph_size_op(g, EMBER_SIZE_MUL, s0, c16);
  int xs[] = {s0, c16}, xst[] = {c16, c1};
  int x = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 2, xs, xst, c0);
  int fs[] = {n}, fst[] = {c1};
  int f = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, fs, fst, c0);
  int y = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, fs, fst, c0);
  int ts[] = {c16, s0}, tst[] = {c1, c16};
  int t = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 2, ts, tst, c0);
  CHECK(x >= 0 && f >= 0 && y >= 0 && t >= 0);
  CHECK(ember_graph_is_symbolic(g));
  const Value *vx = G->values[x];
  CHECK(vx->symbolic && vx->size[0] == -1 && vx->size[1] == 16 && vx->stride[0] == 16 && vx->numel == -1);
  CHECK(ex_equal(vx->snumel, graph_size_expr(G, n)));
  CHECK(ember_graph_input(g, x) == EMBER_OK);
  CHECK(ember_graph_sym_from_input(g, s0, 0, 0) == EMBER_OK);
  ember_arg shape = {EMBER_ARG_SIZES, 0, 0, (const int64_t[]){n}, 1, NULL, NULL};
  ember_arg va[] = {T(x), shape};
  CHECK(node1(g, "aten.view.default", "view", 2, va, f) >= 0);
  ember_arg one = {EMBER_ARG_INT, 1, 0, NULL, 0, NULL, NULL};
  ember_arg aa[] = {T(f), one};
  CHECK(node1(g, "aten.add.Tensor", "add", 2, aa, y) >= 0);
  ember_arg ta[] = {T(x)};
  CHECK(node1(g, "aten.t.default", "t", 1, ta, t) >= 0);
  int outs[] = {y, t};
  CHECK(ember_graph_outputs(g, 2, outs) == EMBER_OK);
  CHECK(verify(G, "build") == EMBER_OK);
  Str b = {0};
  dump_graph(G, &b);
  CHECK_MSG(b.s && strstr(b.s, "s0 = s7 in [2, inf], input 0 dim 0"), "%s", b.s);
  CHECK_MSG(b.s && strstr(b.s, "[s0, 16] strides (16, 1) +0"), "%s", b.s);
  CHECK_MSG(b.s && strstr(b.s, "[16*s0] strides (1) +0"), "%s", b.s);
  CHECK_MSG(b.s && strstr(b.s, "[16, s0] strides (1, 16) +0"), "%s", b.s);
  str_free(&b);
  /* a broken invariant the verifier catches: an integer that disagrees with its expression */
  G->values[t]->size[0] = 15;
  CHECK(verify(G, "build") == EMBER_EINVAL && strstr(ember_graph_error(g), "internal error"));
  G->values[t]->size[0] = 16;
  G->failed = 0, G->err[0] = 0;
  /* compiled once, run at two sizes: y = x.view(-1) + 1 sized per call, t a view of x */
  char err[512] = "";
  ember_program *p = ember_compile(g, NULL, err, sizeof err);
  CHECK_MSG(p != NULL, "%s", err);
  if (p) {
    CHECK(ember_program_num_syms(p) == 1);
    for (int64_t s = 2; s <= 5; s += 3) {
      float xs[5 * 16], ys[5 * 16];
      for (int i = 0; i < s * 16; i++) xs[i] = (float)i;
      int64_t sz[MAXD], st[MAXD], delta = -1;
      CHECK(ember_program_value_sizes(p, y, &s, sz, st, &delta) == EMBER_OK && sz[0] == 16 * s && st[0] == 1);
      CHECK(ember_program_value_sizes(p, t, &s, sz, st, &delta) == EMBER_OK && sz[0] == 16 && sz[1] == s &&
            st[0] == 1 && st[1] == 16 && delta == 0);
      void *ptrs[8] = {0};
      ptrs[x] = xs, ptrs[y] = ys;
      CHECK(ember_program_run(p, ptrs, NULL, NULL, NULL, NULL) == EMBER_EINVAL);  /* needs its sizes */
      CHECK(ember_program_run_sized(p, &s, ptrs, NULL, NULL, NULL, NULL) == EMBER_OK);
      int ok = 1;
      for (int i = 0; i < s * 16; i++) ok &= ys[i] == (float)i + 1;
      CHECK_MSG(ok, "s0 = %lld", (long long)s);
    }
    CHECK(strstr(ember_program_source(p), "i0 < s0") || strstr(ember_program_source(p), "< 16*s0"));
    ember_program_free(p);
  }

  /* a size that only an argument names (x * n, x of constant size): the graph is symbolic, and its
     kernel reads n from the call */
  g = ember_graph_new();
  s0 = ember_graph_sym(g, "n", 2, 1000);
  int64_t four[] = {4};
  x = val(g, 1, four);
  int xo = val(g, 1, four);
  ember_graph_input(g, x);
  ember_arg ma[] = {T(x), {EMBER_ARG_SIZE, s0, 0, NULL, 0, NULL, NULL}};
  CHECK(node1(g, "aten.mul.Tensor", "mul", 2, ma, xo) >= 0);
  ember_graph_outputs(g, 1, &xo);
  CHECK(ember_graph_is_symbolic(g));
  p = ember_compile(g, NULL, err, sizeof err);
  CHECK_MSG(p && ember_program_num_syms(p) == 1, "%s", err);
  if (p) {
    float xs[4] = {1, 2, 3, 4}, ys[4] = {0};
    void *ptrs[4] = {0};
    ptrs[x] = xs, ptrs[xo] = ys;
    int64_t n3 = 3;
    CHECK(ember_program_run_sized(p, &n3, ptrs, NULL, NULL, NULL, NULL) == EMBER_OK);
    CHECK(ys[0] == 3 && ys[3] == 12);
    ember_program_free(p);
  }

  /* a cat along a symbolic dim: compiled once, each input's start a size expression */
  g = ember_graph_new();
  s0 = ember_graph_sym(g, "s0", 2, EMBER_SIZE_INF);
  c1 = ember_graph_size_const(g, 1), c0 = ember_graph_size_const(g, 0);
  int s2 = ember_graph_size_op(g, EMBER_SIZE_MUL, s0, ember_graph_size_const(g, 2));
  int rs[] = {s0}, rst[] = {c1}, cs[] = {s2};
  x = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, rs, rst, c0);
  int r0 = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, cs, rst, c0);
  ember_graph_input(g, x);
  int64_t both[] = {x, x};
  ember_arg ca[] = {{EMBER_ARG_TENSORS, 0, 0, both, 2, NULL, NULL}};
  node1(g, "aten.cat.default", "cat", 1, ca, r0);
  ember_graph_outputs(g, 1, &r0);
  p = ember_compile(g, NULL, err, sizeof err);
  CHECK_MSG(p && ember_program_num_syms(p) == 1, "%s", err);
  if (p) {
    float xs[3] = {1, 2, 3}, ys[6] = {0};
    void *ptrs[4] = {0};
    ptrs[x] = xs, ptrs[r0] = ys;
    int64_t n3 = 3;
    CHECK(ember_program_run_sized(p, &n3, ptrs, NULL, NULL, NULL, NULL) == EMBER_OK);
    CHECK(ys[0] == 1 && ys[2] == 3 && ys[3] == 1 && ys[5] == 3);
    ember_program_free(p);
  }

  /* a size that may be 0 (s0 - 2 with s0 >= 2): compiled once, run at sizes 0, 1 and 3 */
  g = ember_graph_new();
  s0 = ember_graph_sym(g, "s0", 2, EMBER_SIZE_INF);
  c1 = ember_graph_size_const(g, 1), c0 = ember_graph_size_const(g, 0);
  int sm2 = ember_graph_size_op(g, EMBER_SIZE_ADD, s0, ember_graph_size_const(g, -2));
  int zs[] = {sm2};
  x = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, zs, rst, c0);
  r0 = ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, zs, rst, c0);
  ember_graph_input(g, x);
  ember_arg na[] = {T(x)};
  node1(g, "aten.neg.default", "neg", 1, na, r0);
  ember_graph_outputs(g, 1, &r0);
  p = ember_compile(g, NULL, err, sizeof err);
  CHECK_MSG(p != NULL, "%s", err);
  if (p) {
    for (int64_t n = 2; n <= 5; n++) {
      float xs[3] = {1, 2, 3}, ys[4] = {7, 7, 7, 7};
      void *ptrs[3] = {0};  /* the values and the size variables' slot */
      ptrs[x] = xs, ptrs[r0] = ys;
      if (n == 4) continue;
      CHECK(ember_program_run_sized(p, &n, ptrs, NULL, NULL, NULL, NULL) == EMBER_OK);
      for (int i = 0; i < 4; i++) CHECK(ys[i] == (i < n - 2 ? -xs[i] : 7));  /* n - 2 written, nothing more */
    }
    ember_program_free(p);
  }

  /* malformed: a size handle that does not exist, a size that may be negative, a bad source */
  g = ember_graph_new();
  s0 = ember_graph_sym(g, "s0", 2, 100);
  int m1 = ember_graph_size_const(g, -1), z = ember_graph_size_const(g, 0);
  int neg = ember_graph_size_op(g, EMBER_SIZE_ADD, s0, ember_graph_size_const(g, -5));  /* s0 - 5 >= -3 */
  int bad[] = {99}, ok1[] = {z};
  CHECK(ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, bad, ok1, z) == EMBER_EINVAL);
  ember_graph_free(g);
  g = ember_graph_new();
  s0 = ember_graph_sym(g, "s0", 2, 100);
  z = ember_graph_size_const(g, 0), m1 = ember_graph_size_const(g, -1);
  neg = ember_graph_size_op(g, EMBER_SIZE_ADD, s0, ember_graph_size_const(g, -5));
  int negs[] = {neg}, ones[] = {z};
  CHECK(ember_graph_value_sym(g, EMBER_F32, EMBER_CPU, 1, negs, ones, z) == EMBER_EINVAL);
  CHECK(strstr(ember_graph_error(g), "may be negative") != NULL);
  ember_graph_free(g);
  g = ember_graph_new();
  z = ember_graph_size_const(g, 0);
  CHECK(ember_graph_sym_from_input(g, z, 0, 0) == EMBER_EINVAL);  /* not a size variable */
  CHECK(ember_graph_sym(g, "s0", 5, 4) == EMBER_EINVAL);
  (void)m1;
  ember_graph_free(g);
}

int main(void) {
  test_options();
  test_symbolic_graph();
  test_kernel_keys();
  test_matmul_library_step();
  test_matmul_epilogues();
  test_matmul_padded();
  test_fallback_operand_lifetime();
  test_client_plan();
  test_softmax();
  test_chain_and_fallback();
  test_transposed_read_splits();
  test_gathers();
  test_planner_reuse();
  test_batch_norm_expands();
  test_malformed();
  test_alloc_failures();
  test_alloc_sweep();
  test_parallel_codegen();
  test_unaligned_variants();
  test_nvrtc_processes();
  return T_DONE("test_compile");
}
