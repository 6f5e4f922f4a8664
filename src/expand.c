/*
 * expand.c - composite ATen ops that ember computes from its own primitives.
 *
 * BatchNorm reaches ember as one node per layer in each of its three forms
 * (training forward, its backward, inference), and LayerNorm in its two:
 * decompositions.py keeps them out of AOTAutograd's decompositions, so torch
 * traces, partitions and hands over one node where its decomposition made
 * ten or twenty.  DenseNet121's training step (121 BatchNorms) traced 7446
 * nodes that way and 3929 this way, and its first call took seconds less
 * (results notes in git history).
 *
 * Here, as the walker adds such a node, it becomes the ATen ops of its
 * formula (means and sums over all dims but the channels, rsqrt, pointwise
 * arithmetic, views of the per-channel values), each a node of the graph
 * that lower.c lowers as any other; fusion then joins them as it joined the
 * decomposition's.  The formulas, their order of operations and their
 * dtypes are those of the decompositions backend.py used before (float32
 * arithmetic for 16-bit inputs, as eager's kernels do), so results did not
 * change.  The parts are named after the node ("batch_norm_3.mean"), so
 * the dumps read as the formula.
 *
 * A node the formulas do not cover (an input that is not floating point or
 * has fewer than two dims, BatchNorm's forward outside training, a LayerNorm
 * over every dim, a tensor on another device) stays one node and falls back
 * to torch's own kernel, with the reason.  In a graph with symbolic sizes
 * only inference BatchNorm is expanded (its formula is pointwise over
 * per-channel values; its full-size values take the result's size
 * expressions); the training forms, whose counts would be expressions, stay
 * whole.  LayerNorm's forms never reach a symbolic graph whole:
 * decompositions.py gives AOTAutograd their decompositions there.  A part
 * is never a fallback: the checks here make that so, and lower() reports it
 * as an error if it were.
 *
 * The public ember_graph_node lives here: graph.c appends the node as it
 * is handed in (graph_node), and a composite one is expanded at once, so
 * graph.c never calls into this file.
 */
#include <stdio.h>
#include <string.h>

#include "ember_int.h"

/* x's shape, [C], [1, C, 1, ...]; LayerNorm's: a row statistic (x's outer
   dims, 1 for each normalized one), the normalized dims alone */
enum Shape { FULL, CHAN, KEEP, ROW, INNER };

typedef struct Ex {
  Graph *g;
  const Node *n;           /* the composite (removed from the graph; its arguments and results) */
  int first;               /* the id of the first part, or -1 */
  int ndim, dev, ct;       /* the input's rank and device, the compute dtype */
  int64_t size[MAXD];      /* the input's sizes */
  int64_t fstride[MAXD];   /* strides of full-size values: the reference result's layout */
  int64_t count;           /* elements per channel */
  int64_t dims[MAXD];      /* the reduced dims: all but 1 */
  int ndims;
  int like;                /* a symbolic graph's: the value whose sizes and strides full-size values
                              take (the result), or -1 */
  int axis;                /* LayerNorm: the first normalized dim */
} Ex;

static ember_arg tensor_arg(int v) { ember_arg a = {0}; a.kind = EMBER_ARG_TENSOR, a.i = v; return a; }
static ember_arg float_arg(double f) { ember_arg a = {0}; a.kind = EMBER_ARG_FLOAT, a.f = f; return a; }
static ember_arg int_arg(int64_t i) { ember_arg a = {0}; a.kind = EMBER_ARG_INT, a.i = i, a.f = (double)i; return a; }

static const Value *val(const Ex *x, int v) { return x->g->values[v]; }

/* A fresh value of a shape in dtype dt (full-size ones in the reference layout). */
static int fresh(Ex *x, enum Shape s, int dt) {
  int64_t size[MAXD], stride[MAXD];
  int nd = s == CHAN ? 1 : s == INNER ? x->ndim - x->axis : x->ndim;
  if (s == FULL && x->like >= 0) {  /* symbolic sizes: the result's, in dtype dt */
    int v = graph_value_like(x->g, val(x, x->like));
    if (v >= 0) x->g->values[v]->dtype = dt;
    return v;
  }
  if (s == FULL) {
    memcpy(size, x->size, sizeof size), memcpy(stride, x->fstride, sizeof stride);
  } else if (s == CHAN) {
    size[0] = x->size[1], stride[0] = 1;
  } else if (s == ROW || s == INNER) {
    for (int d = 0; d < nd; d++) size[d] = s == INNER ? x->size[x->axis + d] : d < x->axis ? x->size[d] : 1;
    for (int d = nd - 1, st = 1; d >= 0; d--) stride[d] = st, st *= size[d];
  } else {
    for (int d = 0; d < nd; d++) size[d] = d == 1 ? x->size[1] : 1;
    for (int d = nd - 1, st = 1; d >= 0; d--) stride[d] = st, st *= size[d];
  }
  return ember_graph_value((ember_graph *)x->g, dt, x->dev, nd, size, stride, 0);
}

/* Part `what` of the composite: op on args, its result into value out. */
static int part(Ex *x, const char *op, const char *what, int nargs, const ember_arg *args, int out) {
  if (out < 0) return out;
  for (int i = 0; i < nargs; i++)
    if (args[i].kind == EMBER_ARG_TENSOR && args[i].i < 0) return (int)args[i].i;  /* an earlier failure */
  char name[256];
  snprintf(name, sizeof name, "%s.%s", x->n->name, what);
  int id = ember_graph_node((ember_graph *)x->g, op, name, nargs, args, 1, &out);
  if (id < 0) return id;
  x->g->nodes[id]->part = x->first < 0 ? 1 : id - x->first + 1;
  if (x->first < 0) x->first = id;
  return out;
}

/* Part `what`: v converted into value dst (of v's shape, in dst's dtype) */
static int convert(Ex *x, int v, int dst, const char *what) {
  if (v < 0 || dst < 0) return v < 0 ? v : dst;
  ember_arg a[2] = {tensor_arg(v), {0}};
  a[1].kind = EMBER_ARG_DTYPE, a[1].i = val(x, dst)->dtype;
  return part(x, "prims.convert_element_type.default", what, 2, a, dst);
}

/* v converted into value dst, the part named `what`_out (a result's conversion) */
static int cast_into(Ex *x, int v, int dst, const char *what) {
  char w[64];
  snprintf(w, sizeof w, "%s_out", what);
  return convert(x, v, dst, w);
}

/* v in dtype dt: v itself, or a conversion (same shape, a fresh value) */
static int cast(Ex *x, int v, int dt, enum Shape s, const char *what) {
  if (v < 0 || val(x, v)->dtype == dt) return v;
  return convert(x, v, fresh(x, s, dt), what);
}

/* op(args) of shape s computed in dtype dt, returned; where dst >= 0 the
   result is also value dst (directly, or through a conversion where dst's
   dtype is not dt) */
static int emit(Ex *x, const char *op, const char *what, int nargs, const ember_arg *args, enum Shape s, int dt,
                int dst) {
  if (dst >= 0 && val(x, dst)->dtype == dt) return part(x, op, what, nargs, args, dst);
  int r = part(x, op, what, nargs, args, fresh(x, s, dt));
  if (dst >= 0 && r >= 0) {
    int c = cast_into(x, r, dst, what);
    if (c < 0) return c;
  }
  return r;  /* the value in dt: what later parts read */
}

static int binary(Ex *x, const char *op, const char *what, ember_arg a, ember_arg b, enum Shape s, int dt, int dst) {
  ember_arg args[2] = {a, b};
  return emit(x, op, what, 2, args, s, dt, dst);
}

/* the sum or mean (op) of v over dims[0..n-1], of shape s (the dims kept as 1 where keep) */
static int reduce_dims(Ex *x, const char *op, const char *what, int v, const int64_t *dims, int n, int keep,
                       enum Shape s, int dt, int dst) {
  ember_arg a[3] = {tensor_arg(v), {0}, {0}};
  a[1].kind = EMBER_ARG_INTS, a[1].list = dims, a[1].n = n;
  a[2].kind = EMBER_ARG_BOOL, a[2].i = keep;
  return emit(x, op, what, 3, a, s, dt, dst);
}

/* the sum or mean of v over all dims but the channels, [1, C, 1, ...] (keep) or [C] */
static int reduce(Ex *x, const char *op, const char *what, int v, int keep, int dt, int dst) {
  return reduce_dims(x, op, what, v, x->dims, x->ndims, keep, keep ? KEEP : CHAN, dt, dst);
}

/* Does g hold a CUDA tensor?  (A CPU BatchNorm or LayerNorm in such a graph is not expanded.) */
static int has_cuda_values(const Graph *g) {
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->device == EMBER_CUDA) return 1;
  return 0;
}

/* a [C] value seen as [1, C, 1, ...] (a view, for broadcasting over the input) */
static int keep_view(Ex *x, int v, const char *what) {
  if (v < 0) return v;
  const Value *c = val(x, v);
  int64_t size[MAXD], stride[MAXD], sizes[MAXD];
  for (int d = 0; d < x->ndim; d++) {
    size[d] = sizes[d] = d == 1 ? x->size[1] : 1;
    stride[d] = d == 0 ? c->stride[0] * x->size[1] : c->stride[0];
  }
  int out = ember_graph_value((ember_graph *)x->g, c->dtype, x->dev, x->ndim, size, stride, c->offset);
  ember_arg a[2] = {tensor_arg(v), {0}};
  a[1].kind = EMBER_ARG_INTS, a[1].list = sizes, a[1].n = x->ndim;
  return part(x, "aten.view.default", what, 2, a, out);
}

/* a [1, C, 1, ...] value made here, seen as [C]: into dst where dst >= 0 (a
   view where dst has its layout and dtype, else a conversion of the view) */
static int flat_view(Ex *x, int v, const char *what, int dst) {
  if (v < 0) return v;
  int64_t sizes[1] = {x->size[1]};
  ember_arg a[2] = {tensor_arg(v), {0}};
  a[1].kind = EMBER_ARG_INTS, a[1].list = sizes, a[1].n = 1;
  const Value *o = dst >= 0 ? val(x, dst) : NULL;
  if (o && o->dtype == val(x, v)->dtype && o->ndim == 1 && (o->stride[0] == 1 || o->size[0] <= 1) && o->offset == 0)
    return part(x, "aten.view.default", what, 2, a, dst);
  int f = part(x, "aten.view.default", what, 2, a, fresh(x, CHAN, val(x, v)->dtype));
  if (!o) return f;
  return cast_into(x, f, dst, what);
}

/* ---- checks ---- */
/* a tensor argument's value in *v, or -1 for none; 0 if it is something else */
static int tensor_or_none(const ember_arg *a, int *v) {
  *v = -1;
  if (a->kind == EMBER_ARG_NONE) return 1;
  if (a->kind != EMBER_ARG_TENSOR) return 0;
  *v = (int)a->i;
  return 1;
}

/* a per-channel tensor ([C], floating point, on the input's device), or none */
static int chan_ok(const Ex *x, int v) {
  if (v < 0) return 1;
  const Value *c = val(x, v);
  return c->ndim == 1 && c->size[0] == x->size[1] && dtype_is_float(c->dtype) && c->device == x->dev;
}

/* a result torch gave the composite: floating point, on the input's device */
static int result_ok(const Ex *x, int v) {
  return val(x, v)->device == x->dev && dtype_is_float(val(x, v)->dtype);
}

static int number(const ember_arg *a, double *f) {
  if (a->kind == EMBER_ARG_FLOAT) *f = a->f;
  else if (a->kind == EMBER_ARG_INT) *f = (double)a->i;
  else return 0;
  return 1;
}

/* Set up x for input value xv with reference layout from value ref; a
   reason not to expand, or NULL. */
static const char *setup(Ex *x, int xv, int ref) {
  Graph *g = x->g;
  const Value *in = g->values[xv];
  if (in->ndim < 2) return "BatchNorm of an input with fewer than 2 dims";
  if (!dtype_is_float(in->dtype)) return "BatchNorm of an input that is not floating point";
  if (in->device != EMBER_CUDA && in->device != EMBER_CPU) return "BatchNorm on a device ember has no kernels for";
  if (in->device == EMBER_CPU && has_cuda_values(g)) return "BatchNorm on the CPU in a graph with CUDA tensors";
  x->ndim = in->ndim, x->dev = in->device;
  x->ct = in->dtype == EMBER_F16 || in->dtype == EMBER_BF16 ? EMBER_F32 : in->dtype;
  memcpy(x->size, in->size, sizeof x->size);
  x->count = in->size[1] ? in->numel / in->size[1] : 0;
  if (in->numel == 0) return "BatchNorm of an empty input";
  x->like = -1;
  if (in->symbolic || (ref >= 0 && g->values[ref]->symbolic)) {
    /* symbolic sizes (inference only: ember_graph_node): the channels a constant, full-size values
       like the result, which is dense and of the input's sizes at every size */
    const Value *r = ref >= 0 ? g->values[ref] : in;
    ExprCtx ex;
    graph_size_ctx(g, &ex);
    int same = in->size[1] > 0 && r->ndim == in->ndim && value_dense_sym(g, r);
    for (int d = 0; same && d < in->ndim; d++) same = ex_cmp(&ex, r->ssize[d], in->ssize[d]) == EX_EQ;
    if (!same) return "BatchNorm of symbolic sizes with a symbolic channel count or a result that is not dense";
    x->like = r->id, x->count = -1;
    x->ndims = 0;
    for (int d = 0; d < in->ndim; d++)
      if (d != 1) x->dims[x->ndims++] = d;
    return NULL;
  }
  x->ndims = 0;
  for (int d = 0; d < in->ndim; d++)
    if (d != 1) x->dims[x->ndims++] = d;
  /* full-size values take the layout torch gave the result (channels-last stays so) */
  const Value *r = ref >= 0 ? g->values[ref] : in;
  int same = r->ndim == in->ndim && value_is_dense(r);
  for (int d = 0; same && d < in->ndim; d++) same = r->size[d] == in->size[d];
  if (!same) r = NULL;
  for (int d = in->ndim - 1, st = 1; d >= 0; d--) {
    x->fstride[d] = r ? r->stride[d] : st;
    st *= in->size[d];
  }
  return NULL;
}

/* ---- the three forms ---- */

/* _native_batch_norm_legit_functional(input, weight, bias, running_mean,
   running_var, training, momentum, eps) -> (out, save_mean, save_rstd,
   running_mean_out, running_var_out), in training */
static const char *bn_train(Ex *x) {
  const Node *n = x->n;
  int xv, w, b, rm, rv;
  double mom, eps;
  if (n->nouts != 5 || !tensor_or_none(node_arg(n, 0, "input"), &xv) || xv < 0 ||
      !tensor_or_none(node_arg(n, 1, "weight"), &w) || !tensor_or_none(node_arg(n, 2, "bias"), &b) ||
      !tensor_or_none(node_arg(n, 3, "running_mean"), &rm) ||
      !tensor_or_none(node_arg(n, 4, "running_var"), &rv) || rm < 0 || rv < 0 ||
      !number(node_arg(n, 6, "momentum"), &mom) || !number(node_arg(n, 7, "eps"), &eps))
    return "BatchNorm's arguments are not understood";
  const ember_arg *tr = node_arg(n, 5, "training");
  if (tr->kind != EMBER_ARG_BOOL || !tr->i) return "BatchNorm's functional form outside training";
  const char *why = setup(x, xv, n->outs[0]);
  if (why) return why;
  if (x->count < 2) return "BatchNorm in training with one value per channel";
  if (!chan_ok(x, w) || !chan_ok(x, b) || !chan_ok(x, rm) || !chan_ok(x, rv))
    return "BatchNorm's per-channel tensors are not [channels] floating point on the input's device";
  for (int i = 0; i < 5; i++)
    if (!result_ok(x, n->outs[i])) return "BatchNorm's results are not floating point on the input's device";
  int ct = x->ct, y = n->outs[0];
  int xc = cast(x, xv, ct, FULL, "input");
  /* var_mean with correction 0: mean, then the mean of squared deviations */
  int mean = reduce(x, "aten.mean.dim", "mean", xc, 1, ct, -1);
  int dev = binary(x, "aten.sub.Tensor", "centered", tensor_arg(xc), tensor_arg(mean), FULL, ct, -1);
  int sq = binary(x, "aten.mul.Tensor", "squared", tensor_arg(dev), tensor_arg(dev), FULL, ct, -1);
  int ssum = reduce(x, "aten.sum.dim_IntList", "sum_squares", sq, 1, ct, -1);
  int var = binary(x, "aten.div.Tensor", "var", tensor_arg(ssum), int_arg(x->count), KEEP, ct, -1);
  int ve = binary(x, "aten.add.Tensor", "var_eps", tensor_arg(var), float_arg(eps), KEEP, ct, -1);
  ember_arg ra[1] = {tensor_arg(ve)};
  int rstd = emit(x, "aten.rsqrt.default", "rstd", 1, ra, KEEP, ct, -1);
  int last = w < 0 && b < 0;
  int t = binary(x, "aten.mul.Tensor", "normalized", tensor_arg(dev), tensor_arg(rstd), FULL, ct, last ? y : -1);
  if (w >= 0) {
    int dt = promote_dtypes(ct, val(x, w)->dtype);
    t = binary(x, "aten.mul.Tensor", "scaled", tensor_arg(t), tensor_arg(keep_view(x, w, "weight")), FULL, dt,
               b < 0 ? y : -1);
  }
  if (b >= 0) {
    int dt = promote_dtypes(val(x, t)->dtype, val(x, b)->dtype);
    t = binary(x, "aten.add.Tensor", "shifted", tensor_arg(t), tensor_arg(keep_view(x, b, "bias")), FULL, dt, y);
  }
  int smean = flat_view(x, mean, "save_mean", n->outs[1]);
  flat_view(x, rstd, "save_rstd", n->outs[2]);
  /* the running statistics: momentum * batch + (1 - momentum) * running, the variance unbiased */
  int fm = val(x, smean)->dtype == ct ? smean : flat_view(x, mean, "mean_flat", -1);
  int a1 = binary(x, "aten.mul.Tensor", "mean_new", tensor_arg(fm), float_arg(mom), CHAN, ct, -1);
  int a2 = binary(x, "aten.mul.Tensor", "mean_old", tensor_arg(rm), float_arg(1 - mom), CHAN, val(x, rm)->dtype, -1);
  binary(x, "aten.add.Tensor", "running_mean", tensor_arg(a1), tensor_arg(a2), CHAN,
         promote_dtypes(ct, val(x, rm)->dtype), n->outs[3]);
  double nd = (double)x->count;
  int fv = flat_view(x, var, "var_flat", -1);
  int b1 = binary(x, "aten.mul.Tensor", "var_new", tensor_arg(fv), float_arg(mom * (nd / (nd - 1))), CHAN, ct, -1);
  int b2 = binary(x, "aten.mul.Tensor", "var_old", tensor_arg(rv), float_arg(1 - mom), CHAN, val(x, rv)->dtype, -1);
  binary(x, "aten.add.Tensor", "running_var", tensor_arg(b1), tensor_arg(b2), CHAN,
         promote_dtypes(ct, val(x, rv)->dtype), n->outs[4]);
  return NULL;
}

/* native_batch_norm_backward(grad_out, input, weight, running_mean,
   running_var, save_mean, save_invstd, train, eps, output_mask) ->
   (grad_input, grad_weight, grad_bias) where output_mask says, in training:
   two sums over all dims but the channels, then the input's gradient */
static const char *bn_backward(Ex *x) {
  const Node *n = x->n;
  int go, xv, w, sm, si;  /* in training the running statistics and eps are not read */
  if (!tensor_or_none(node_arg(n, 0, "grad_out"), &go) || go < 0 ||
      !tensor_or_none(node_arg(n, 1, "input"), &xv) || xv < 0 ||
      !tensor_or_none(node_arg(n, 2, "weight"), &w) ||
      !tensor_or_none(node_arg(n, 5, "save_mean"), &sm) ||
      !tensor_or_none(node_arg(n, 6, "save_invstd"), &si))
    return "BatchNorm's backward arguments are not understood";
  const ember_arg *tr = node_arg(n, 7, "train"), *mask = node_arg(n, 9, "output_mask");
  if (tr->kind != EMBER_ARG_BOOL || !tr->i) return "BatchNorm's backward outside training";
  if (sm < 0 || si < 0) return "BatchNorm's backward without saved statistics";
  if (mask->kind != EMBER_ARG_INTS || mask->n != 3) return "BatchNorm's backward output mask is not understood";
  int want[3], k = 0, outs[3] = {-1, -1, -1};
  for (int i = 0; i < 3; i++) {
    want[i] = mask->list[i] != 0;
    if (want[i]) outs[i] = k < n->nouts ? n->outs[k] : -1, k++;
  }
  if (k != n->nouts) return "BatchNorm's backward results do not match its output mask";
  const char *why = setup(x, xv, outs[0] >= 0 ? outs[0] : go);
  if (why) return why;
  const Value *gv = val(x, go);
  if (gv->ndim != x->ndim || gv->device != x->dev || !dtype_is_float(gv->dtype))
    return "BatchNorm's backward gradient is not like its input";
  for (int d = 0; d < x->ndim; d++)
    if (gv->size[d] != x->size[d]) return "BatchNorm's backward gradient is not like its input";
  if (!chan_ok(x, w) || !chan_ok(x, sm) || !chan_ok(x, si))
    return "BatchNorm's per-channel tensors are not [channels] floating point on the input's device";
  for (int i = 0; i < 3; i++)
    if (outs[i] >= 0 && !result_ok(x, outs[i]))
      return "BatchNorm's backward results are not floating point on the input's device";
  int ct = x->ct;
  double norm = 1.0 / (double)x->count;
  int g = cast(x, go, ct, FULL, "grad"), xc = cast(x, xv, ct, FULL, "input");
  int invstd = cast(x, si, ct, CHAN, "invstd"), mean = cast(x, sm, ct, CHAN, "mean");
  int xm = binary(x, "aten.sub.Tensor", "centered", tensor_arg(xc), tensor_arg(keep_view(x, mean, "mean_b")), FULL,
                  ct, -1);
  /* grad_bias is the gradient's sum; grad_weight its dot with the centered input, times invstd */
  int gsum = reduce(x, "aten.sum.dim_IntList", "grad_sum", g, 0, ct, want[2] ? outs[2] : -1);
  int gx = binary(x, "aten.mul.Tensor", "grad_centered", tensor_arg(g), tensor_arg(xm), FULL, ct, -1);
  int dot = reduce(x, "aten.sum.dim_IntList", "dot", gx, 0, ct, -1);
  if (want[0]) {
    int dn = binary(x, "aten.mul.Tensor", "dot_mean", tensor_arg(dot), float_arg(norm), CHAN, ct, -1);
    int i2 = binary(x, "aten.mul.Tensor", "invstd_sq", tensor_arg(invstd), tensor_arg(invstd), CHAN, ct, -1);
    int ps = binary(x, "aten.mul.Tensor", "proj_scale", tensor_arg(dn), tensor_arg(i2), CHAN, ct, -1);
    int gs = invstd;
    if (w >= 0)
      gs = binary(x, "aten.mul.Tensor", "grad_scale", tensor_arg(invstd), tensor_arg(cast(x, w, ct, CHAN, "weight")),
                  CHAN, ct, -1);
    int t1 = binary(x, "aten.mul.Tensor", "proj", tensor_arg(xm), tensor_arg(keep_view(x, ps, "proj_scale_b")), FULL,
                    ct, -1);
    int t2 = binary(x, "aten.sub.Tensor", "grad_less_proj", tensor_arg(g), tensor_arg(t1), FULL, ct, -1);
    int gn = binary(x, "aten.mul.Tensor", "grad_mean", tensor_arg(gsum), float_arg(norm), CHAN, ct, -1);
    int t3 = binary(x, "aten.sub.Tensor", "grad_centered_less_proj", tensor_arg(t2),
                    tensor_arg(keep_view(x, gn, "grad_mean_b")), FULL, ct, -1);
    binary(x, "aten.mul.Tensor", "grad_input", tensor_arg(t3), tensor_arg(keep_view(x, gs, "grad_scale_b")), FULL, ct,
           outs[0]);
  }
  if (want[1])
    binary(x, "aten.mul.Tensor", "grad_weight", tensor_arg(dot), tensor_arg(invstd), CHAN, ct, outs[1]);
  return NULL;
}

/* _native_batch_norm_legit_no_training(input, weight, bias, running_mean,
   running_var, momentum, eps) -> (out, save_mean, save_invstd): one scale
   and shift per channel; what eager returns as save_mean and save_invstd
   (empty on the CPU, the running mean and 1 / sqrt(var + eps) on CUDA) where
   something reads them */
static const char *bn_eval(Ex *x) {
  const Node *n = x->n;
  int xv, w, b, rm, rv;
  double eps;
  if (n->nouts != 3 || !tensor_or_none(node_arg(n, 0, "input"), &xv) || xv < 0 ||
      !tensor_or_none(node_arg(n, 1, "weight"), &w) || !tensor_or_none(node_arg(n, 2, "bias"), &b) ||
      !tensor_or_none(node_arg(n, 3, "running_mean"), &rm) || rm < 0 ||
      !tensor_or_none(node_arg(n, 4, "running_var"), &rv) || rv < 0 || !number(node_arg(n, 6, "eps"), &eps))
    return "BatchNorm's arguments are not understood";
  const char *why = setup(x, xv, n->outs[0]);
  if (why) return why;
  if (!chan_ok(x, w) || !chan_ok(x, b) || !chan_ok(x, rm) || !chan_ok(x, rv))
    return "BatchNorm's per-channel tensors are not [channels] floating point on the input's device";
  for (int i = 0; i < 3; i++) {
    const Value *o = val(x, n->outs[i]);
    if (!result_ok(x, n->outs[i])) return "BatchNorm's results are not floating point on the input's device";
    if (i && o->numel != 0 && !(o->ndim == 1 && o->size[0] == x->size[1]))
      return "BatchNorm's saved statistics are neither empty nor [channels]";
  }
  int ct = x->ct, y = n->outs[0];
  int xc = cast(x, xv, ct, FULL, "input"), rvc = cast(x, rv, ct, CHAN, "running_var"),
      rmc = cast(x, rm, ct, CHAN, "running_mean");
  int ve = binary(x, "aten.add.Tensor", "var_eps", tensor_arg(rvc), float_arg(eps), CHAN, ct, -1);
  ember_arg ra[1] = {tensor_arg(ve)};
  int scale = emit(x, "aten.rsqrt.default", "rstd", 1, ra, CHAN, ct, -1);
  if (w >= 0)
    scale = binary(x, "aten.mul.Tensor", "scale", tensor_arg(scale), tensor_arg(cast(x, w, ct, CHAN, "weight")), CHAN,
                   ct, -1);
  int cen = binary(x, "aten.sub.Tensor", "centered", tensor_arg(xc), tensor_arg(keep_view(x, rmc, "mean_b")), FULL, ct,
                   -1);
  int t = binary(x, "aten.mul.Tensor", "scaled", tensor_arg(cen), tensor_arg(keep_view(x, scale, "scale_b")), FULL, ct,
                 b < 0 ? y : -1);
  if (b >= 0)
    binary(x, "aten.add.Tensor", "shifted", tensor_arg(t),
           tensor_arg(keep_view(x, cast(x, b, ct, CHAN, "bias"), "bias_b")), FULL, ct, y);
  for (int i = 1; i < 3; i++) {
    int o = n->outs[i];
    if (val(x, o)->numel == 0) {  /* eager's empty tensor: a fill of nothing */
      int64_t zero[1] = {0};
      ember_arg a[2] = {{0}, float_arg(0)};
      a[0].kind = EMBER_ARG_INTS, a[0].list = zero, a[0].n = 1;
      part(x, "aten.full.default", i == 1 ? "save_mean" : "save_invstd", 2, a, o);
    } else if (i == 1) {
      convert(x, rmc, o, "save_mean");  /* a copy, as eager's */
    } else {
      ember_arg sa[1] = {tensor_arg(ve)};
      int sd = emit(x, "aten.sqrt.default", "std", 1, sa, CHAN, ct, -1);
      ember_arg ia[1] = {tensor_arg(sd)};
      emit(x, "aten.reciprocal.default", "save_invstd", 1, ia, CHAN, ct, o);
    }
  }
  return NULL;
}

/* the sum of v over dims[0..n-1] (a LayerNorm's normalized dims, kept as 1: ROW; or its outer
   dims, dropped: INNER) */
static int sum_dims(Ex *x, const char *what, int v, const int64_t *dims, int n, int keep, int dst) {
  return reduce_dims(x, "aten.sum.dim_IntList", what, v, dims, n, keep, keep ? ROW : INNER, x->ct, dst);
}

/* v of shape s, on the input's device, floating point: its sizes those of the shape */
static int shaped_ok(Ex *x, int v, enum Shape s) {
  if (v < 0) return 1;
  const Value *t = val(x, v);
  int nd = s == INNER ? x->ndim - x->axis : x->ndim;
  if (t->ndim != nd || t->device != x->dev || !dtype_is_float(t->dtype) || t->symbolic) return 0;
  for (int d = 0; d < nd; d++) {
    int64_t want = s == INNER ? x->size[x->axis + d] : s == ROW && d >= x->axis ? 1 : x->size[d];
    if (t->size[d] != want) return 0;
  }
  return 1;
}

/* Set up x for LayerNorm's input xv normalized over its last ns dims
   (normalized_shape ns); *cols: the elements of a row.  A reason not to
   expand, or NULL. */
static const char *ln_setup(Ex *x, int xv, const ember_arg *ns, int64_t *cols) {
  const Value *in = val(x, xv);
  if (in->symbolic) return "LayerNorm with symbolic sizes";
  if (!dtype_is_float(in->dtype)) return "LayerNorm of an input that is not floating point";
  if (in->device != EMBER_CUDA && in->device != EMBER_CPU) return "LayerNorm on a device ember has no kernels for";
  if (in->device == EMBER_CPU && has_cuda_values(x->g)) return "LayerNorm on the CPU in a graph with CUDA tensors";
  if (ns->kind != EMBER_ARG_INTS || ns->n < 1 || ns->n > in->ndim)
    return "LayerNorm's normalized shape is not understood";
  x->ndim = in->ndim, x->dev = in->device, x->axis = in->ndim - (int)ns->n;
  if (x->axis < 1) return "LayerNorm over every dim of its input (no rows)";
  x->ct = in->dtype == EMBER_F16 || in->dtype == EMBER_BF16 ? EMBER_F32 : in->dtype;
  memcpy(x->size, in->size, sizeof x->size);
  int64_t rows = 1;
  *cols = 1;
  for (int d = 0; d < in->ndim; d++) {
    if (d >= x->axis && in->size[d] != ns->list[d - x->axis]) return "LayerNorm's normalized shape is not its input's";
    *(d < x->axis ? &rows : cols) *= in->size[d];
  }
  if (rows == 0 || *cols == 0) return "LayerNorm of an empty input";
  /* full-size values contiguous, as the decomposition's .to(memory_format=contiguous_format) */
  for (int d = in->ndim - 1, st = 1; d >= 0; d--) x->fstride[d] = st, st *= in->size[d];
  return NULL;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean,
   rstd, weight, bias, output_mask) -> (grad_input, grad_weight,
   grad_bias) where output_mask says: torch's decomposition
   (torch/_decomp/decompositions.py), op for op and in its dtypes, so that
   results are as they were.  Taken whole, a transformer's backward traces
   one node per LayerNorm where the decomposition traced about twenty, on
   every first call. */
static const char *ln_backward(Ex *x) {
  const Node *n = x->n;
  int go, xv, mv, rv, w, b;
  const ember_arg *ns = node_arg(n, 2, "normalized_shape"), *mask = node_arg(n, 7, "output_mask");
  if (!tensor_or_none(node_arg(n, 0, "grad_out"), &go) || go < 0 ||
      !tensor_or_none(node_arg(n, 1, "input"), &xv) || xv < 0 ||
      !tensor_or_none(node_arg(n, 3, "mean"), &mv) || mv < 0 ||
      !tensor_or_none(node_arg(n, 4, "rstd"), &rv) || rv < 0 ||
      !tensor_or_none(node_arg(n, 5, "weight"), &w) || !tensor_or_none(node_arg(n, 6, "bias"), &b) ||
      mask->kind != EMBER_ARG_INTS || mask->n != 3)
    return "LayerNorm's backward arguments are not understood";
  int64_t cols;
  const char *why = ln_setup(x, xv, ns, &cols);
  if (why) return why;
  int want[3], k = 0, outs[3] = {-1, -1, -1};
  for (int i = 0; i < 3; i++) {
    want[i] = mask->list[i] != 0;
    if (want[i]) outs[i] = k < n->nouts ? n->outs[k] : -1, k++;
  }
  if (k != n->nouts) return "LayerNorm's backward results do not match its output mask";
  if (want[1] && w < 0) return "LayerNorm's backward asks for a weight gradient without a weight";
  if (want[2] && b < 0) return "LayerNorm's backward asks for a bias gradient without a bias";
  if (!shaped_ok(x, go, FULL) || !shaped_ok(x, mv, ROW) || !shaped_ok(x, rv, ROW) || !shaped_ok(x, w, INNER) ||
      !shaped_ok(x, b, INNER) || (outs[0] >= 0 && !shaped_ok(x, outs[0], FULL)) ||
      (outs[1] >= 0 && !shaped_ok(x, outs[1], INNER)) || (outs[2] >= 0 && !shaped_ok(x, outs[2], INNER)))
    return "LayerNorm's backward tensors are not of its input's and normalized shapes, floating point on its device";
  int64_t inner[MAXD], outer[MAXD];
  int ni = 0, no = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (d >= x->axis) inner[ni++] = d;
    else outer[no++] = d;
  }
  int ct = x->ct;
  double N = (double)cols;
  int gc = cast(x, go, ct, FULL, "grad"), xc = cast(x, xv, ct, FULL, "input");
  int mean = cast(x, mv, ct, ROW, "mean"), rstd = cast(x, rv, ct, ROW, "rstd");
  int xm = binary(x, "aten.sub.Tensor", "centered", tensor_arg(xc), tensor_arg(mean), FULL, ct, -1);
  int xh = binary(x, "aten.mul.Tensor", "x_hat", tensor_arg(xm), tensor_arg(rstd), FULL, ct, -1);
  if (want[0]) {
    int gx = gc;
    if (w >= 0)
      gx = binary(x, "aten.mul.Tensor", "grad_x_hat", tensor_arg(gc), tensor_arg(cast(x, w, ct, INNER, "weight")),
                  FULL, ct, -1);
    int a = binary(x, "aten.mul.Tensor", "a", tensor_arg(gx), float_arg(N), FULL, ct, -1);
    int bs = sum_dims(x, "b", gx, inner, ni, 1, -1);
    int c1 = binary(x, "aten.mul.Tensor", "c1", tensor_arg(gx), tensor_arg(xh), FULL, ct, -1);
    int c2 = sum_dims(x, "c2", c1, inner, ni, 1, -1);
    int c3 = binary(x, "aten.mul.Tensor", "c3", tensor_arg(xh), tensor_arg(c2), FULL, ct, -1);
    int ab = binary(x, "aten.sub.Tensor", "a_less_b", tensor_arg(a), tensor_arg(bs), FULL, ct, -1);
    int t = binary(x, "aten.sub.Tensor", "inner", tensor_arg(ab), tensor_arg(c3), FULL, ct, -1);
    /* in rstd's own dtype, as the decomposition's rstd / N (bfloat16 where the CPU's forward saved it so) */
    int rn = binary(x, "aten.div.Tensor", "rstd_n", tensor_arg(rv), float_arg(N), ROW, val(x, rv)->dtype, -1);
    binary(x, "aten.mul.Tensor", "grad_input", tensor_arg(rn), tensor_arg(t), FULL, ct, outs[0]);
  }
  if (want[1]) {
    int gw = binary(x, "aten.mul.Tensor", "grad_out_x_hat", tensor_arg(gc), tensor_arg(xh), FULL, ct, -1);
    sum_dims(x, "grad_weight", gw, outer, no, 0, outs[1]);
  }
  if (want[2]) sum_dims(x, "grad_bias", gc, outer, no, 0, outs[2]);
  return NULL;
}

/* native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out,
   mean, rstd), the row statistics kept as [outer..., 1, ...]: torch's
   decomposition with ember's var_mean (decompositions.py _var_mean) op for
   op, in the compute dtype; each result in torch's dtype (a conversion
   where it differs: the CPU's statistics in the input's) */
static const char *ln_forward(Ex *x) {
  const Node *n = x->n;
  int xv, w, b;
  double eps;
  if (n->nouts != 3 || !tensor_or_none(node_arg(n, 0, "input"), &xv) || xv < 0 ||
      !tensor_or_none(node_arg(n, 2, "weight"), &w) || !tensor_or_none(node_arg(n, 3, "bias"), &b) ||
      !number(node_arg(n, 4, "eps"), &eps))
    return "LayerNorm's arguments are not understood";
  int64_t cols;
  const char *why = ln_setup(x, xv, node_arg(n, 1, "normalized_shape"), &cols);
  if (why) return why;
  int out = n->outs[0], mo = n->outs[1], ro = n->outs[2];
  if (!shaped_ok(x, w, INNER) || !shaped_ok(x, b, INNER) || !shaped_ok(x, out, FULL) || !shaped_ok(x, mo, ROW) ||
      !shaped_ok(x, ro, ROW))
    return "LayerNorm's tensors are not of its input's and normalized shapes, floating point on its device";
  int64_t inner[MAXD];
  int ni = 0;
  for (int d = x->axis; d < x->ndim; d++) inner[ni++] = d;
  int ct = x->ct;
  int xa = cast(x, xv, ct, FULL, "input");
  /* the statistics into torch's results: directly, or converted where their dtype is not ct (the
     CPU's decomposition rounds them to the input's dtype) */
  int mean = reduce_dims(x, "aten.mean.dim", "mean", xa, inner, ni, 1, ROW, ct, mo);
  int diff = binary(x, "aten.sub.Tensor", "centered", tensor_arg(xa), tensor_arg(mean), FULL, ct, -1);
  int sq = binary(x, "aten.mul.Tensor", "squared", tensor_arg(diff), tensor_arg(diff), FULL, ct, -1);
  int ss = sum_dims(x, "sum_squares", sq, inner, ni, 1, -1);
  int var = binary(x, "aten.div.Tensor", "var", tensor_arg(ss), float_arg((double)cols), ROW, ct, -1);
  int ve = binary(x, "aten.add.Tensor", "var_eps", tensor_arg(var), float_arg(eps), ROW, ct, -1);
  ember_arg ra[1] = {tensor_arg(ve)};
  int rstd = emit(x, "aten.rsqrt.default", "rstd", 1, ra, ROW, ct, ro);
  int y = binary(x, "aten.mul.Tensor", "normalized", tensor_arg(diff), tensor_arg(rstd), FULL, ct,
                 w < 0 && b < 0 ? out : -1);
  if (w >= 0)
    y = binary(x, "aten.mul.Tensor", "scaled", tensor_arg(y), tensor_arg(cast(x, w, ct, INNER, "weight")), FULL, ct,
               b < 0 ? out : -1);
  if (b >= 0)
    binary(x, "aten.add.Tensor", "shifted", tensor_arg(y), tensor_arg(cast(x, b, ct, INNER, "bias")), FULL, ct, out);
  return NULL;
}

/* Node n, just added as the graph's last node: if ember computes its op
   from primitives, n leaves the graph and its parts take its place (their
   first id is returned); otherwise n stays, a fallback with the reason
   (its id is returned).  A status < 0 on an error. */
int expand_node(Graph *g, Node *n) {
  Ex x = {.g = g, .n = n, .first = -1, .like = -1};
  /* take n out: its results are defined by its parts from here on */
  int base = g->nnodes - 1, nvalues = g->nvalues;
  EM_ASSERT(g->nodes[base] == n);
  g->nnodes = base;
  for (int i = 0; i < n->nouts; i++) g->values[n->outs[i]]->def = NULL;
  const char *why = n->op == OP_BN_TRAIN ? bn_train(&x) : n->op == OP_BN_BACKWARD ? bn_backward(&x)
                  : n->op == OP_BN_EVAL ? bn_eval(&x) : n->op == OP_LN_BACKWARD ? ln_backward(&x)
                  : n->op == OP_LN ? ln_forward(&x)
                  : "no expansion for this op";
  if (g->failed) return EMBER_EINVAL;
  if (why) {  /* nothing was added (the checks come first): n goes back, to fall back */
    EM_ASSERT(g->nnodes == base && g->nvalues == nvalues);
    for (int i = 0; i < n->nouts; i++) g->values[n->outs[i]]->def = n;
    g->nodes[g->nnodes++] = n;
    n->reason = why;
    return n->id;
  }
  for (int i = 0; i < n->nouts; i++)
    if (!g->values[n->outs[i]]->def)
      return graph_error(g, n, "internal error: the expansion left result %d undefined", i);
  return x.first;
}

int ember_graph_node(ember_graph *eg, const char *op, const char *name, int nargs, const ember_arg *args, int nouts,
                     const int *outs) {
  Graph *g = &eg->g;
  int id = graph_node(g, op, name, nargs, args, nouts, outs);
  if (id < 0) return id;
  Node *n = g->nodes[id];
  /* a symbolic graph keeps its composites as they are (torch runs them), but for inference
     BatchNorm, whose formula is pointwise (setup: its full-size values like its result) */
  return n->op >= 0 && em_ops[n->op].form == F_COMPOSITE && (!g->symbolic || n->op == OP_BN_EVAL) ? expand_node(g, n)
                                                                                               : id;
}
