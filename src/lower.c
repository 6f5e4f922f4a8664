/*
 * lower.c - each ATen node becomes a loop expression: a pointwise body over
 * operands (tensors or constants) in a compute dtype, a reduction over a set
 * of dims, a view (nothing to compute: the output's meta is the index
 * arithmetic), a cat, a constant pad, a flip, a scatter (a src put into a
 * copy of the input: slice, select, diagonal, as_strided), a gather (reads
 * at indices loaded from index tensors), or a factory.
 *
 * Torch has already inferred shapes and dtypes (the output values' meta), so
 * lowering reads arguments and decides compute types; it never re-derives a
 * shape.  An op it cannot lower (not in ops.def, an opaque dtype, another
 * device, an argument it does not understand) becomes a fallback with the
 * reason recorded: a fallback is always correct, only slower.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

/* ---- reading arguments ---- */
static const ember_arg none_arg = {EMBER_ARG_NONE, 0, 0, NULL, 0, NULL, NULL};

/* Positional argument pos, or the keyword `kw`; none_arg if absent. */
static const ember_arg *arg(const Node *n, int pos, const char *kw) {
  int npos = 0;
  for (int i = 0; i < n->nargs; i++) {
    const ember_arg *a = &n->args[i];
    if (a->name) {
      if (kw && !strcmp(a->name, kw)) return a;
    } else if (npos++ == pos) return a;
  }
  return &none_arg;
}

const ember_arg *node_arg(const Node *n, int pos, const char *kw) { return arg(n, pos, kw); }

static int is_num(const ember_arg *a) {
  return a->kind == EMBER_ARG_INT || a->kind == EMBER_ARG_FLOAT || a->kind == EMBER_ARG_BOOL;
}
static double num(const ember_arg *a) { return a->kind == EMBER_ARG_FLOAT ? a->f : (double)a->i; }

typedef struct Lw {        /* lowering one node */
  Graph *g;
  Node *n;
  const char *why;         /* set: fall back with this reason */
} Lw;

static void fallback(Lw *w, const char *why) { if (!w->why) w->why = why; }

/* Append operand a (tensor or number); cdt is its compute dtype override (-1: node's). */
static void operand(Lw *w, const ember_arg *a) {
  Node *n = w->n;
  if (n->nopnd >= 6) { fallback(w, "too many operands"); return; }
  Operand *o = &n->opnd[n->nopnd++];
  o->v = -1;
  o->sz = NULL;
  if (a->kind == EMBER_ARG_TENSOR) o->v = (int)a->i;
  else if (a->kind == EMBER_ARG_SIZE) o->sz = graph_size_expr(w->g, a->i);  /* an integer, the call's */
  else if (a->kind == EMBER_ARG_FLOAT) o->is_float = 1, o->f = a->f;
  else if (a->kind == EMBER_ARG_INT || a->kind == EMBER_ARG_BOOL) o->i = a->i, o->f = (double)a->i;
  else fallback(w, "an operand is neither a tensor nor a number");
}

static void operand_num(Lw *w, double f, int is_float) {
  ember_arg a = none_arg;
  a.kind = is_float ? EMBER_ARG_FLOAT : EMBER_ARG_INT;
  a.f = f, a.i = (int64_t)f;
  operand(w, &a);
}

static void operand_or(Lw *w, const ember_arg *a, double dflt) {
  if (a->kind == EMBER_ARG_NONE) operand_num(w, dflt, 1);
  else operand(w, a);
}

/* copy_(dst, src) where dst is a graph input (AOTAutograd's write-back of a
   mutated input kept in the graph, as BatchNorm's running statistics): src,
   converted and broadcast, stored into dst's memory by a kernel.  The result
   is dst itself; lower() checks that nothing reads it or dst afterwards. */
static void lower_copy_into(Lw *w) {
  Graph *g = w->g;
  Node *n = w->n;
  const ember_arg *d = arg(n, 0, "self");
  if (d->kind != EMBER_ARG_TENSOR) { fallback(w, "copy_ into something that is not a tensor"); return; }
  Value *dst = g->values[d->i], *out = g->values[n->outs[0]];
  if (!dst->is_input || dst->root != dst->id) { fallback(w, "copy_ into a tensor that is not a graph input"); return; }
  if (dst->is_dst) { fallback(w, "a second copy_ into the same input"); return; }
  int same = out->dtype == dst->dtype && out->ndim == dst->ndim && out->offset == dst->offset;
  for (int k = 0; same && k < dst->ndim; k++) same = out->size[k] == dst->size[k] && out->stride[k] == dst->stride[k];
  if (!same) { fallback(w, "copy_ whose result's layout is not its destination's"); return; }
  if (!value_is_dense(dst)) { fallback(w, "copy_ into an input whose elements overlap"); return; }
  const ember_arg *s = arg(n, 1, "src");
  if (s->kind == EMBER_ARG_TENSOR && g->values[g->values[s->i]->root]->is_input) {
    fallback(w, "copy_ from a graph input (its elements could move within the input)");
    return;
  }
  out->into = dst->id;
  dst->is_dst = 1;
}

/* ---- type promotion, as torch does for operands of pointwise ops ---- */
static int category(int dt) { return dt == EMBER_BOOL ? 0 : dtype_is_float(dt) ? 2 : 1; }

static int promote2(int a, int b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == EMBER_F64 || b == EMBER_F64) return EMBER_F64;
    if (a == EMBER_F32 || b == EMBER_F32) return EMBER_F32;
    return EMBER_F32;  /* float16 with bfloat16 */
  }
  /* integers: uint8 with a signed type needs the next wider signed one */
  if (a == EMBER_U8 || b == EMBER_U8) {
    int o = a == EMBER_U8 ? b : a;
    return o == EMBER_I8 ? EMBER_I16 : o;
  }
  return a > b ? a : b;
}

int promote_dtypes(int a, int b) { return promote2(a, b); }

static int promote(Graph *g, const Node *n) {
  int res[3] = {-1, -1, -1};  /* dim tensors, zero-dim tensors, numbers */
  for (int i = 0; i < n->nopnd; i++) {
    const Operand *o = &n->opnd[i];
    int lvl, dt;
    if (o->v >= 0) {
      const Value *v = g->values[o->v];
      lvl = v->ndim > 0 ? 0 : 1, dt = v->dtype;
    } else lvl = 2, dt = o->is_float ? EMBER_F32 : EMBER_I64;
    res[lvl] = res[lvl] < 0 ? dt : promote2(res[lvl], dt);
  }
  int r = res[0];
  for (int l = 1; l < 3; l++) {
    if (res[l] < 0) continue;
    if (r < 0) r = res[l];
    else if (category(res[l]) > category(r)) r = l == 2 && res[l] == EMBER_F32 ? EMBER_F32 : res[l];
  }
  return r < 0 ? EMBER_F32 : r;
}

/* ---- numbers that must fit the tensor's dtype ----
   A fill value, a clamp bound, a threshold, masked_fill's value, alpha and
   an integer tensor's exponent are cast with c10's checked conversion
   (Scalar::to<T>): eager raises "value cannot be converted to type ...
   without overflow" where one does not fit the dtype (int8 clamped at 1000,
   a float16 filled with 1e5).  Such a node falls back, so that torch raises
   what it raises.  The rule is c10's overflows(): a float is out of range
   beyond the largest finite value (inf and NaN fit a float dtype, nothing
   else does); a negative integer fits an unsigned dtype down to -max (it
   wraps) unless the op is strict about it (constant_pad_nd; hardtanh raises
   an error of its own); a float fits an integer dtype within [lowest, max];
   anything fits bool (c10 casts to bool by != 0). */
static int number_fits(double f, int64_t i, int is_float, int dt, int strict_unsigned) {
  double lo, hi;
  switch (dt) {
  case EMBER_BOOL: return 1;
  case EMBER_U8: lo = 0, hi = 255; break;
  case EMBER_I8: lo = -128, hi = 127; break;
  case EMBER_I16: lo = -32768, hi = 32767; break;
  case EMBER_I32: lo = -2147483648.0, hi = 2147483647.0; break;
  case EMBER_I64: lo = -0x1p63, hi = 0x1p63; break;
  case EMBER_F16: lo = -65504.0, hi = 65504.0; break;
  case EMBER_BF16: lo = -3.3895313892515355e38, hi = 3.3895313892515355e38; break;
  case EMBER_F32: lo = -3.4028234663852886e38, hi = 3.4028234663852886e38; break;
  default: return 1;
  }
  if (is_float) {
    if (isnan(f) || isinf(f)) return dtype_is_float(dt);
    return f >= lo && f <= hi;
  }
  if (dt == EMBER_I64) return 1;
  if (dt == EMBER_U8 && i < 0) return !strict_unsigned && (double)-(uint64_t)i <= hi;
  return (double)i >= lo && (double)i <= hi;
}

/* Operand i, where it is a number, must fit the node's compute dtype. */
static void check_number(Lw *w, int i) {
  const Operand *o = &w->n->opnd[i];
  int strict = w->n->op == OP_HARDTANH;
  if (i < w->n->nopnd && o->v < 0 && !number_fits(o->f, o->i, o->is_float, w->n->cdtype, strict))
    fallback(w, "a number does not fit the tensor's dtype (eager raises)");
}

/* ---- forms ---- */
static void lower_round_decimals(Lw *w);
static void lower_nextafter(Lw *w);
static void lower_polygamma(Lw *w);

static void lower_pointwise(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const Value *out = g->values[n->outs[0]];
  const ember_arg *a0 = arg(n, 0, "self"), *a1 = arg(n, 1, "other");
  n->cdtype = out->dtype;
  switch (n->form) {
  case F_UNARY: case F_UFLOAT:
    operand(w, a0);
    if (n->op == OP_BNOT && out->dtype == EMBER_BOOL) n->spell = "em_lnot(%0)";  /* ~ on bools is not */
    /* eager's float64 J0, J1, Y0, Y1 (above x = 5) and Airy Ai (just below
       x = -2.09), where its asymptotic forms leave out the leading term of a
       denominator, are off by up to 9e-7 and 3e-6, beyond float64's
       tolerance; ember's are the true values, so float64 stays with torch.
       Other dtypes compute in float, where that is noise. */
    if (out->dtype == EMBER_F64 && (n->op == OP_BESSEL_J0 || n->op == OP_BESSEL_J1 ||
                                    n->op == OP_BESSEL_Y0 || n->op == OP_BESSEL_Y1))
      fallback(w, "eager's float64 Bessel J/Y differ from the true values by up to 9e-7");
    if (out->dtype == EMBER_F64 && n->op == OP_AIRY_AI)
      fallback(w, "eager's float64 Airy Ai differs from the true values by up to 3e-6");
    break;
  case F_ULOGIC: case F_UPRED:
    operand(w, a0);
    if (n->opnd[0].v >= 0) n->cdtype = g->values[n->opnd[0].v]->dtype;
    break;
  case F_CAST: operand(w, a0); break;
  case F_COPY:
    operand(w, arg(n, 1, "src"));
    n->spell = "%0";
    if (n->op == OP_COPY_INTO) lower_copy_into(w);
    break;
  case F_GELU: {
    operand(w, a0);
    const ember_arg *ap = arg(n, 1, "approximate");
    if (ap->kind == EMBER_ARG_STRING && !strcmp(ap->s, "tanh")) n->spell = "em_gelu_tanh(%0)";
    else if (ap->kind == EMBER_ARG_STRING && strcmp(ap->s, "none")) fallback(w, "unknown gelu approximation");
    break;
  }
  case F_GELU_BW: {
    operand(w, arg(n, 0, "grad_output"));
    operand(w, arg(n, 1, "self"));
    const ember_arg *ap = arg(n, 2, "approximate");
    if (ap->kind == EMBER_ARG_STRING && !strcmp(ap->s, "tanh")) n->spell = "em_gelu_tanh_bw(%0,%1)";
    else if (ap->kind == EMBER_ARG_STRING && strcmp(ap->s, "none")) fallback(w, "unknown gelu approximation");
    break;
  }
  case F_UFLOAT1: operand(w, a0); operand_or(w, arg(n, 1, "negative_slope"), 0.01); break;
  case F_UFLOAT2:
    operand(w, a0);
    if (n->op == OP_HARDTANH) {
      operand_or(w, arg(n, 1, "min_val"), -1.0);
      operand_or(w, arg(n, 2, "max_val"), 1.0);
    } else {
      operand_or(w, arg(n, 1, "beta"), 1.0);
      operand_or(w, arg(n, 2, "threshold"), 20.0);
    }
    break;
  case F_UFLOAT3:
    operand(w, a0);
    operand_or(w, arg(n, 1, "alpha"), 1.0);
    operand_or(w, arg(n, 2, "scale"), 1.0);
    operand_or(w, arg(n, 3, "input_scale"), 1.0);
    break;
  case F_UNARY2: operand(w, a0); operand(w, arg(n, 1, "threshold")); operand(w, arg(n, 2, "value")); break;
  case F_NAN_TO_NUM: {
    double big = out->dtype == EMBER_F64 ? 1.7976931348623157e308
               : out->dtype == EMBER_F16 ? 65504.0
               : out->dtype == EMBER_BF16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
    operand(w, a0);
    operand_or(w, arg(n, 1, "nan"), 0.0);
    operand_or(w, arg(n, 2, "posinf"), big);
    operand_or(w, arg(n, 3, "neginf"), -big);
    if (!dtype_is_float(out->dtype)) n->spell = "%0";
    break;
  }
  case F_CLAMP: {
    const ember_arg *lo = arg(n, 1, "min"), *hi = arg(n, 2, "max");
    operand(w, a0);
    if (lo->kind != EMBER_ARG_NONE && hi->kind != EMBER_ARG_NONE) operand(w, lo), operand(w, hi);
    else if (lo->kind != EMBER_ARG_NONE) operand(w, lo), n->spell = "em_max(%0,%1)";
    else if (hi->kind != EMBER_ARG_NONE) operand(w, hi), n->spell = "em_min(%0,%1)";
    else fallback(w, "clamp without bounds");
    break;
  }
  case F_ADDSUB: {
    operand(w, a0);
    operand(w, a1);
    const ember_arg *al = arg(n, 2, "alpha");
    if (al->kind != EMBER_ARG_NONE && !(is_num(al) && num(al) == 1.0)) {
      operand(w, al);
      if (n->op == OP_ADD || n->op == OP_ADD_S) n->spell = "em_add(%0,em_mul(%1,%2))";
      else if (n->op == OP_SUB || n->op == OP_SUB_S) n->spell = "em_sub(%0,em_mul(%1,%2))";
      else n->spell = "em_sub(%1,em_mul(%0,%2))";
    }
    break;
  }
  case F_BINARY: case F_BFLOAT: case F_TRUEDIV: case F_BITWISE:
    operand(w, a0), operand(w, a1);
    break;
  case F_BINARY1: /* threshold_backward(grad, self, threshold) */
    operand(w, arg(n, 0, "grad_output")), operand(w, arg(n, 1, "self")), operand(w, arg(n, 2, "threshold"));
    break;
  case F_DIVMODE: {
    operand(w, a0), operand(w, a1);
    const ember_arg *m = arg(n, 2, "rounding_mode");
    if (m->kind == EMBER_ARG_STRING && !strcmp(m->s, "trunc")) n->spell = "em_trunc_div(%0,%1)";
    else if (m->kind == EMBER_ARG_STRING && !strcmp(m->s, "floor")) n->spell = "em_floordiv(%0,%1)";
    else if (m->kind != EMBER_ARG_NONE) fallback(w, "unknown rounding mode");
    break;
  }
  case F_CMP: operand(w, a0), operand(w, a1); n->cdtype = promote(g, n); break;
  case F_LOGIC: operand(w, a0), operand(w, a1); n->cdtype = EMBER_BOOL; break;
  case F_WHERE:
    operand(w, arg(n, 0, "condition")), operand(w, arg(n, 1, "self")), operand(w, arg(n, 2, "other"));
    break;
  case F_MASKFILL:
    operand(w, a0), operand(w, arg(n, 1, "mask")), operand(w, arg(n, 2, "value"));
    break;
  case F_TERNARY:
    operand(w, a0), operand(w, arg(n, 1, "end")), operand(w, arg(n, 2, "weight"));
    break;
  case F_TERNARY1:
    operand(w, a0), operand(w, arg(n, 1, "tensor1")), operand(w, arg(n, 2, "tensor2"));
    operand_or(w, arg(n, 3, "value"), 1.0);
    break;
  case F_ROUND_DEC: lower_round_decimals(w); break;
  case F_NEXTAFTER: lower_nextafter(w); break;
  case F_POLYGAMMA: lower_polygamma(w); break;
  default: fallback(w, "unknown pointwise form");
  }
  switch (n->op) {
  case OP_CLAMP: case OP_CLAMP_MIN: case OP_CLAMP_MAX: case OP_HARDTANH: case OP_THRESHOLD:
    for (int i = 1; i < n->nopnd; i++) check_number(w, i);
    break;
  case OP_MASKED_FILL: check_number(w, 2); break;
  case OP_ADD: case OP_ADD_S: case OP_SUB: case OP_SUB_S: case OP_RSUB: case OP_RSUB_T: check_number(w, 2); break;  /* alpha */
  case OP_POW_TS:
    if (dtype_is_float(n->cdtype) || n->nopnd < 2 || n->opnd[1].v >= 0) break;
    check_number(w, 1);
    /* integers to a negative integer power: eager raises */
    if (!n->opnd[1].is_float && n->opnd[1].i < 0) fallback(w, "an integer tensor to a negative integer power (eager raises)");
    break;
  }
  /* a size as a scalar: add, sub, mul and true division's operands, computed in a float or int64
     (a narrower integer would wrap it as the call's value says: not done) */
  for (int i = 0; i < n->nopnd && !w->why; i++) {
    if (!n->opnd[i].sz) continue;
    int ok = i < 2 && (n->form == F_ADDSUB || n->op == OP_MUL || n->op == OP_MUL_S || n->form == F_TRUEDIV) &&
             (dtype_is_float(n->cdtype) || n->cdtype == EMBER_I64);
    if (!ok) fallback(w, "a size operand of this op or dtype");
  }
  /* every tensor operand must broadcast to the output */
  for (int i = 0; i < n->nopnd && !w->why; i++) {
    const Operand *o = &n->opnd[i];
    if (o->v < 0) continue;
    const Value *v = g->values[o->v];
    if (v->ndim > out->ndim) { fallback(w, "an operand has more dims than the result"); break; }
    if (g->symbolic) {  /* a dim of 1 broadcasts; any other equals the result's for every size */
      ExprCtx x;
      graph_size_ctx(g, &x);
      for (int d = 0; d < v->ndim; d++) {
        Expr *s = v->ssize[d], *t = out->ssize[out->ndim - v->ndim + d];
        if (!(s->kind == E_CONST && s->c == 1) && ex_cmp(&x, s, t) != EX_EQ) {
          fallback(w, "an operand's size is not proved to broadcast to the result's for every size");
          break;
        }
      }
      continue;
    }
    for (int d = 0; d < v->ndim; d++) {
      int64_t s = v->size[d], t = out->size[out->ndim - v->ndim + d];
      if (s != 1 && s != t) { fallback(w, "operand shapes do not broadcast to the result"); break; }
    }
  }
}

static void lower_factory(Lw *w) {
  Node *n = w->n;
  const Value *out = w->g->values[n->outs[0]];
  n->cdtype = out->dtype;
  double f = 0;
  int is_float = 0;
  switch (n->op) {
  case OP_FULL: case OP_FULL_LIKE: {
    const ember_arg *a = arg(w->n, 1, "fill_value");
    if (!is_num(a)) { fallback(w, "fill value is not a number"); return; }
    f = num(a), is_float = a->kind == EMBER_ARG_FLOAT;
    break;
  }
  case OP_SCALAR_T: {
    const ember_arg *a = arg(w->n, 0, "s");
    if (!is_num(a)) { fallback(w, "scalar is not a number"); return; }
    f = num(a), is_float = a->kind == EMBER_ARG_FLOAT;
    break;
  }
  case OP_ONES: case OP_ONES_LIKE: f = 1; break;
  default: f = 0; break;  /* zeros, and empty (any value will do) */
  }
  operand_num(w, f, is_float);
  if (!is_float) n->opnd[0].i = (int64_t)f;
  check_number(w, 0);
}

static void lower_arange(Lw *w) {
  Node *n = w->n;
  const Value *out = w->g->values[n->outs[0]];
  n->cdtype = out->dtype;
  const ember_arg *s = &none_arg, *st = &none_arg;
  if (n->op == OP_ARANGE || n->op == OP_ARANGE_S) s = arg(n, 0, "start");
  if (n->op == OP_ARANGE) st = arg(n, 2, "step");
  if (n->op == OP_IOTA) s = arg(n, 1, "start"), st = arg(n, 2, "step");
  if ((s->kind != EMBER_ARG_NONE && !is_num(s)) || (st->kind != EMBER_ARG_NONE && !is_num(st))) {
    fallback(w, "arange bounds are not numbers");
    return;
  }
  n->fill = s->kind == EMBER_ARG_NONE ? 0.0 : num(s);
  n->step = st->kind == EMBER_ARG_NONE ? 1.0 : num(st);
  if (out->ndim != 1) fallback(w, "arange result is not 1-d");
}

static int norm_dim(int64_t d, int ndim, int *ok) {
  int n = ndim > 0 ? ndim : 1;
  if (d < -n || d >= n) { *ok = 0; return 0; }
  return (int)(d < 0 ? d + n : d);
}

/* lower_reduce's shape checks in a symbolic graph, by ex_cmp: the result is
   the input's shape without the reduced dims, or with a constant 1 in them
   (every size is at least 1: lower() checked). */
static void reduce_shape_sym(Lw *w, const Value *in, const Value *out) {
  Node *n = w->n;
  ExprCtx x;
  graph_size_ctx(w->g, &x);
  if (n->red == R_ARGMAX || n->red == R_ARGMIN) {  /* its index over symbolic dims: torch's, for now */
    fallback(w, "argmax/argmin with symbolic sizes");
    return;
  }
  int nr = __builtin_popcount(n->rmask), keep = out->ndim == in->ndim;
  if (!keep && out->ndim != in->ndim - nr) { fallback(w, "reduction result has an unexpected rank"); return; }
  for (int d = 0, j = 0; d < in->ndim; d++) {
    if (n->rmask >> d & 1) {
      if (keep && !(out->ssize[j]->kind == E_CONST && out->ssize[j]->c == 1)) break;
      j += keep;
      continue;
    }
    if (ex_cmp(&x, out->ssize[j], in->ssize[d]) != EX_EQ) {
      fallback(w, "reduction result's shape is not proved to be its input's for every size");
      return;
    }
    j++;
  }
  if (keep && nr)
    for (int d = 0; d < in->ndim; d++)
      if ((n->rmask >> d & 1) && !(out->ssize[d]->kind == E_CONST && out->ssize[d]->c == 1))
        fallback(w, "reduction result has an unexpected shape");
}

static void lower_reduce(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const char *k = em_ops[n->op].spell;
  n->red = !strcmp(k, "sum") ? R_SUM : !strcmp(k, "mean") ? R_MEAN : !strcmp(k, "prod") ? R_PROD
         : !strcmp(k, "max") ? R_MAX : !strcmp(k, "min") ? R_MIN : !strcmp(k, "any") ? R_ANY
         : !strcmp(k, "all") ? R_ALL : !strcmp(k, "argmax") ? R_ARGMAX : R_ARGMIN;
  const ember_arg *x = arg(n, 0, "self");
  if (x->kind != EMBER_ARG_TENSOR) { fallback(w, "reduction input is not a tensor"); return; }
  const Value *in = g->values[x->i];
  n->red_in = (int)x->i;
  const Value *out = g->values[n->outs[0]];
  n->cdtype = out->dtype;
  const ember_arg *dims = arg(n, 1, "dim");
  uint32_t all = in->ndim ? (1u << in->ndim) - 1 : 0;
  int ok = 1;
  switch (n->op) {
  case OP_SUM_ALL: case OP_MEAN_ALL: case OP_PROD_ALL: case OP_MAX_ALL: case OP_MIN_ALL:
  case OP_ANY: case OP_ALL:
    n->rmask = all;
    break;
  default:
    if (dims->kind == EMBER_ARG_NONE) n->rmask = all;
    else if (dims->kind == EMBER_ARG_INT) n->rmask = in->ndim ? 1u << norm_dim(dims->i, in->ndim, &ok) : 0;
    else if (dims->kind == EMBER_ARG_INTS) {
      if (dims->n == 0) n->rmask = all;
      for (int i = 0; i < dims->n; i++) n->rmask |= in->ndim ? 1u << norm_dim(dims->list[i], in->ndim, &ok) : 0;
    } else ok = 0;
  }
  if (!ok) { fallback(w, "reduction dims are not understood"); return; }
  if (g->symbolic) {
    reduce_shape_sym(w, in, out);
    return;
  }
  /* the result must be the input's shape without (or with size 1 in) the reduced dims */
  int keep = out->ndim == in->ndim && in->ndim > 0;
  int64_t expect = 1;
  for (int d = 0; d < in->ndim; d++)
    if (!(n->rmask >> d & 1)) expect *= in->size[d];
  if (out->numel != expect) fallback(w, "reduction result has an unexpected shape");
  if (keep)
    for (int d = 0; d < in->ndim; d++)
      if ((n->rmask >> d & 1) ? out->size[d] != 1 : out->size[d] != in->size[d])
        keep = -1;
  if (!keep && out->ndim != in->ndim - __builtin_popcount(n->rmask)) fallback(w, "reduction result has an unexpected rank");
  if (keep < 0) {
    /* same rank but not keepdim: only possible when every reduced dim had size 1 */
    for (int d = 0; d < in->ndim; d++)
      if ((n->rmask >> d & 1) && in->size[d] != 1) fallback(w, "reduction result has an unexpected shape");
  }
  /* max/min over an empty dim has no identity (torch raises); an empty result is nothing to compute */
  if (in->numel == 0 && out->numel > 0 && (n->red == R_MAX || n->red == R_MIN || n->red == R_ARGMAX || n->red == R_ARGMIN))
    fallback(w, "max/min of an empty tensor");
}

/* The span of value v (elements from its offset to its last one, +1) as an
   expression, true where every size of v is at least 1.  A view proved
   inside its root with it for every size reads inside its root wherever it
   has elements, and where a size of it is 0 it reads nothing. */
static Expr *span_expr(ExprCtx *x, const Value *v) {
  Expr *e = ex_const(x, 1);
  for (int d = 0; d < v->ndim; d++)
    e = ex_add(x, e, ex_mul_e(x, ex_add(x, v->ssize[d], ex_const(x, -1)), v->sstride[d]));
  return e;
}

/* A view in a symbolic graph: it must lie inside its root's elements for
   every size where it has elements (see span_expr). */
static int view_inside(Graph *g, const Value *out, const Value *root) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  Expr *rel = ex_sub(&x, out->soffset, root->soffset);
  int lo = ex_cmp(&x, rel, ex_const(&x, 0));
  int hi = ex_cmp(&x, ex_add(&x, rel, span_expr(&x, out)), span_expr(&x, root));
  return (lo == EX_EQ || lo == EX_GE || lo == EX_GT) && (hi == EX_EQ || hi == EX_LE || hi == EX_LT);
}

/* Does view out of in lie inside in at every size, by its op: an alias
   (in's meta), or an unfold whose meta is torch's unfold of in (along dim
   d of L elements, (L - size) / step + 1 windows of size elements, step
   apart, L at least size; every other dim as in's)?  span_expr's products
   of divisions defeat view_inside there (a max pool's windows over a
   padded activation of (s1 + 1) / 2 + 2 rows). */
static int inside_by_op(Graph *g, const Node *n, const Value *in, const Value *out) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  if (out->ndim == in->ndim && ex_cmp(&x, out->soffset, in->soffset) == EX_EQ) {
    int same = 1;
    for (int k = 0; k < in->ndim && same; k++)
      same = ex_cmp(&x, out->ssize[k], in->ssize[k]) == EX_EQ && ex_cmp(&x, out->sstride[k], in->sstride[k]) == EX_EQ;
    if (same) return 1;
  }
  if (n->op != OP_UNFOLD || n->nargs < 4 || n->args[1].kind != EMBER_ARG_INT || n->args[2].kind != EMBER_ARG_INT ||
      n->args[3].kind != EMBER_ARG_INT || out->ndim != in->ndim + 1)
    return 0;
  int64_t d = n->args[1].i < 0 ? n->args[1].i + in->ndim : n->args[1].i, size = n->args[2].i, step = n->args[3].i;
  if (d < 0 || d >= in->ndim || size < 1 || step < 1) return 0;
  int fits = ex_cmp(&x, in->ssize[d], ex_const(&x, size));
  if (fits != EX_GE && fits != EX_GT && fits != EX_EQ) return 0;
  Expr *nw = ex_add(&x, ex_div(&x, ex_add(&x, in->ssize[d], ex_const(&x, -size)), step), ex_const(&x, 1));
  int ok = ex_cmp(&x, out->soffset, in->soffset) == EX_EQ && ex_cmp(&x, out->ssize[d], nw) == EX_EQ &&
           ex_cmp(&x, out->sstride[d], ex_mul(&x, in->sstride[d], step)) == EX_EQ &&
           ex_cmp(&x, out->ssize[in->ndim], ex_const(&x, size)) == EX_EQ &&
           ex_cmp(&x, out->sstride[in->ndim], in->sstride[d]) == EX_EQ;
  for (int k = 0; k < in->ndim && ok; k++)
    if (k != d)
      ok = ex_cmp(&x, out->ssize[k], in->ssize[k]) == EX_EQ && ex_cmp(&x, out->sstride[k], in->sstride[k]) == EX_EQ;
  return ok && !g->pool.oom;
}

static void lower_view(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const ember_arg *x = arg(n, 0, "self");
  if (x->kind != EMBER_ARG_TENSOR || n->nouts < 1) { fallback(w, "view input is not a tensor"); return; }
  Value *in = g->values[x->i];
  Value *root = g->values[in->root];
  for (int k = 0; k < n->nouts; k++) {  /* split and unbind give several views */
    Value *out = g->values[n->outs[k]];
    if (in->dtype != out->dtype) { fallback(w, "view changes the dtype"); return; }
    if (g->symbolic) {
      /* in lies inside root: it is root, or a view lowered before (a fallback's result is a root) */
      if (!view_inside(g, out, root) && !inside_by_op(g, n, in, out)) {
        fallback(w, "the view is not proved to lie inside its input for every size");
        return;
      }
      continue;
    }
    int64_t rel = out->offset - root->offset;
    if (out->numel > 0 && (rel < 0 || rel + value_span(out) > value_span(root))) {
      if (root->is_input && n->op == OP_AS_STRIDED) {  /* torch allows any element of the input's storage */
        fallback(w, "the view reads input storage outside the input's elements");
        return;
      }
      graph_error(g, n, "the view reads outside its input's storage (offset %lld, span %lld, input span %lld)",
                  (long long)rel, (long long)value_span(out), (long long)value_span(root));
      return;
    }
  }
  for (int k = 0; k < n->nouts; k++) g->values[n->outs[k]]->root = root->id;
}

static void lower_cat(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const ember_arg *l = arg(n, 0, "tensors");
  const Value *out = g->values[n->outs[0]];
  if (l->kind != EMBER_ARG_TENSORS) { fallback(w, "cat inputs are not a tensor list"); return; }
  int ok = 1;
  const ember_arg *d = arg(n, 1, "dim");
  n->cat_dim = d->kind == EMBER_ARG_INT ? norm_dim(d->i, out->ndim, &ok) : 0;
  if (!ok || out->ndim == 0) { fallback(w, "cat dim out of range"); return; }
  n->cat_in = pool_alloc(&g->pool, sizeof(int) * (l->n + 1));
  if (!n->cat_in) return;
  int64_t total = 0;
  for (int i = 0; i < l->n; i++)
    if (l->list[i] < 0) { fallback(w, "a cat input is None"); return; }
  if (g->symbolic) {  /* every size is at least 1 (lower() checked): no empty input */
    ExprCtx x;
    graph_size_ctx(g, &x);
    Expr *stotal = ex_const(&x, 0);
    for (int i = 0; i < l->n; i++) {
      const Value *v = g->values[l->list[i]];
      if (v->ndim != out->ndim) { fallback(w, "cat input rank differs"); return; }
      for (int k = 0; k < v->ndim; k++)
        if (k != n->cat_dim && ex_cmp(&x, v->ssize[k], out->ssize[k]) != EX_EQ) {
          fallback(w, "a cat input's shape is not proved to be the result's for every size");
          return;
        }
      n->cat_in[n->ncat++] = (int)l->list[i];
      stotal = ex_add(&x, stotal, v->ssize[n->cat_dim]);
    }
    n->cdtype = out->dtype;
    if (ex_cmp(&x, stotal, out->ssize[n->cat_dim]) != EX_EQ)
      fallback(w, "cat sizes are not proved to add up for every size");
    return;
  }
  for (int i = 0; i < l->n; i++) {
    const Value *v = g->values[l->list[i]];
    if (v->numel == 0) continue;  /* empty inputs (legacy 1-d ones too) add nothing */
    if (v->ndim != out->ndim) { fallback(w, "cat input rank differs"); return; }
    for (int k = 0; k < v->ndim; k++)
      if (k != n->cat_dim && v->size[k] != out->size[k]) { fallback(w, "cat input shape differs"); return; }
    n->cat_in[n->ncat++] = (int)l->list[i];
    total += v->size[n->cat_dim];
  }
  n->cdtype = out->dtype;
  if (out->numel == 0) {  /* an empty result: nothing to read */
    n->form = F_FULL;
    operand_num(w, 0, 0);
    return;
  }
  if (total != out->size[n->cat_dim]) fallback(w, "cat sizes do not add up");
}

static void lower_pad(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const ember_arg *x = arg(n, 0, "self"), *p = arg(n, 1, "pad"), *v = arg(n, 2, "value");
  if (x->kind != EMBER_ARG_TENSOR || p->kind != EMBER_ARG_INTS || p->n % 2 || p->n / 2 > MAXD) {
    fallback(w, "pad arguments are not understood");
    return;
  }
  const Value *in = g->values[x->i], *out = g->values[n->outs[0]];
  if (p->n / 2 > in->ndim || in->ndim != out->ndim) { fallback(w, "pad has more pairs than dims"); return; }
  n->npad = p->n / 2;
  for (int i = 0; i < p->n; i++) n->pad[i] = p->list[i];
  ExprCtx sx;
  graph_size_ctx(g, &sx);
  for (int i = 0; i < n->npad; i++) {
    int d = in->ndim - 1 - i;
    if (g->symbolic) {  /* constant amounts around a size expression: the sum proved for every size */
      Expr *sum = ex_add(&sx, in->ssize[d], ex_const(&sx, n->pad[2 * i] + n->pad[2 * i + 1]));
      if (ex_cmp(&sx, sum, out->ssize[d]) != EX_EQ) {
        fallback(w, "pad sizes are not proved to add up for every size");
        return;
      }
      continue;
    }
    if (in->size[d] + n->pad[2 * i] + n->pad[2 * i + 1] != out->size[d]) { fallback(w, "pad sizes do not add up"); return; }
  }
  n->fill = v->kind == EMBER_ARG_NONE ? 0.0 : num(v);
  n->fill_is_int = v->kind == EMBER_ARG_INT || v->kind == EMBER_ARG_BOOL;
  n->red_in = (int)x->i;
  n->cdtype = out->dtype;
  if (!number_fits(n->fill, v->kind == EMBER_ARG_INT ? v->i : (int64_t)n->fill, !n->fill_is_int, out->dtype, 1))
    fallback(w, "the pad value does not fit the tensor's dtype (eager raises)");
}

/* ---- gathers ---- */
/* index_select, gather, index and embedding: out[o] =
   src[s], each source dim either an output dim or an index tensor's value
   (Node.gmap).  Shapes are torch's; this only checks they are the ones the
   form assumes, and anything else falls back (torch then raises what it
   raises).  Bounds are checked in the kernel, where the indices are. */
/* lower_gather in a symbolic graph (lower() has checked every size is at least 1):
   embedding and index_select, their shapes proved by ex_cmp for every size; the
   index bound is the source's size expression, checked in the kernel at the
   call's value.  Other gathers (gather, index) are left to torch at each call. */
static void lower_gather_sym(Lw *w, const Value *src, const Value *out, ExprCtx *x) {
  Node *n = w->n;
  Graph *g = w->g;
  const Value *iv;
  if (n->op == OP_EMBEDDING) {
    const ember_arg *ix = arg(n, 1, "indices");
    if (ix->kind != EMBER_ARG_TENSOR) { fallback(w, "embedding's indices are not a tensor"); return; }
    iv = g->values[ix->i];
    if (src->ndim != 2 || out->ndim != iv->ndim + 1) { fallback(w, "embedding's weight is not a matrix"); return; }
    n->gmap[0] = -1, n->gmap[1] = out->ndim - 1;
    n->gblk = 0, n->gblklen = iv->ndim;
  } else if (n->op == OP_INDEX_SELECT) {
    const ember_arg *d = arg(n, 1, "dim"), *ix = arg(n, 2, "index");
    int ok = 1;
    if (d->kind != EMBER_ARG_INT || ix->kind != EMBER_ARG_TENSOR) { fallback(w, "dim or index not understood"); return; }
    int dim = norm_dim(d->i, src->ndim, &ok);
    iv = g->values[ix->i];
    if (!ok || !src->ndim || out->ndim != src->ndim || iv->ndim != 1) {
      fallback(w, "index_select of this rank with symbolic sizes");
      return;
    }
    for (int k = 0; k < n->gndim; k++) n->gmap[k] = k;
    n->gmap[dim] = -1;
    n->gblk = dim, n->gblklen = 1;
  } else {
    fallback(w, "gather or index with symbolic sizes");
    return;
  }
  n->ngidx = 1, n->gidx[0] = iv->id;
  /* the index tensor's dims are the result's gblk .. gblk + gblklen - 1; the rest follow the source */
  for (int k = 0; k < n->gblklen; k++)
    if (ex_cmp(x, iv->ssize[k], out->ssize[n->gblk + k]) != EX_EQ) {
      fallback(w, "the index's shape is not proved to be the result's for every size");
      return;
    }
  for (int d = 0; d < n->gndim; d++)
    if (n->gmap[d] >= 0 && ex_cmp(x, out->ssize[n->gmap[d]], n->sgsize[d]) != EX_EQ) {
      fallback(w, "the result's shape is not proved to fit the source for every size");
      return;
    }
  int dt = iv->dtype;
  if (dt != EMBER_I64 && dt != EMBER_I32) fallback(w, "an index tensor is neither int64 nor int32");
}

static void lower_gather(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const Value *out = g->values[n->outs[0]];
  const ember_arg *s = arg(n, 0, n->op == OP_EMBEDDING ? "weight" : "self");
  if (s->kind != EMBER_ARG_TENSOR) { fallback(w, "the indexed operand is not a tensor"); return; }
  const Value *src = g->values[s->i];
  n->red_in = (int)s->i;
  n->cdtype = out->dtype;
  if (src->dtype != out->dtype) { fallback(w, "the result's dtype is not the source's"); return; }
  if (out->numel == 0) {  /* nothing to read, nothing to check */
    n->form = F_FULL;
    operand_num(w, 0, 0);
    return;
  }
  n->gndim = src->ndim ? src->ndim : 1;
  ExprCtx x;
  graph_size_ctx(g, &x);
  for (int d = 0; d < n->gndim; d++) {
    n->gsize[d] = src->ndim ? src->size[d] : 1;
    n->sgsize[d] = src->ndim ? src->ssize[d] : ex_const(&x, 1);
  }
  if (g->symbolic) {
    lower_gather_sym(w, src, out, &x);
    return;
  }
  int ok = 1;
  switch (n->op) {
  case OP_INDEX_SELECT: case OP_GATHER: {
    const ember_arg *d = arg(n, 1, "dim"), *ix = arg(n, 2, "index");
    if (d->kind != EMBER_ARG_INT || ix->kind != EMBER_ARG_TENSOR) { fallback(w, "dim or index not understood"); return; }
    int dim = norm_dim(d->i, src->ndim, &ok);
    const Value *iv = g->values[ix->i];
    if (!ok || out->ndim != (src->ndim ? src->ndim : n->op == OP_GATHER ? iv->ndim : 0)) {
      fallback(w, "dim out of range");
      return;
    }
    n->ngidx = 1, n->gidx[0] = (int)ix->i;
    for (int k = 0; k < n->gndim; k++) n->gmap[k] = k;
    n->gmap[dim] = -1;
    if (n->op == OP_INDEX_SELECT) {
      if (iv->ndim > 1 || (src->ndim && out->size[dim] != iv->numel) || (!src->ndim && iv->numel != 1)) {
        fallback(w, "index_select's index is not a vector");
        return;
      }
      n->gblk = dim, n->gblklen = out->ndim ? 1 : 0;
    } else {
      if (iv->ndim != out->ndim || (!src->ndim && iv->ndim > 1)) {
        fallback(w, "gather's index has another rank than the source");
        return;
      }
      n->gblk = 0, n->gblklen = out->ndim;
      for (int k = 0; k < out->ndim; k++)
        if (out->size[k] != iv->size[k] || (k != dim && iv->size[k] > n->gsize[k])) {
          fallback(w, "gather's index does not fit the source");
          return;
        }
    }
    break;
  }
  case OP_EMBEDDING: {
    const ember_arg *ix = arg(n, 1, "indices");
    if (ix->kind != EMBER_ARG_TENSOR) { fallback(w, "embedding's indices are not a tensor"); return; }
    const Value *iv = g->values[ix->i];
    if (src->ndim != 2 || out->ndim != iv->ndim + 1) { fallback(w, "embedding's weight is not a matrix"); return; }
    n->ngidx = 1, n->gidx[0] = (int)ix->i;
    n->gmap[0] = -1, n->gmap[1] = out->ndim - 1;
    n->gblk = 0, n->gblklen = iv->ndim;
    break;
  }
  default: {  /* index: a list of optional index tensors */
    const ember_arg *l = arg(n, 1, "indices");
    if (l->kind != EMBER_ARG_TENSORS || l->n > src->ndim) { fallback(w, "the indices are not a tensor list"); return; }
    int first = -1, last = -1, nidx = 0;
    for (int i = 0; i < l->n; i++)
      if (l->list[i] >= 0) {
        if (first < 0) first = i;
        last = i, nidx++;
      }
    /* the broadcast index shape replaces the indexed dims where they are,
       or goes first when they are not adjacent (numpy's rule) */
    int adjacent = last - first + 1 == nidx;
    int blen = out->ndim - (src->ndim - nidx);
    if (nidx == 0 || blen < 0) { fallback(w, "the result's rank does not fit the indices"); return; }
    n->gblk = adjacent ? first : 0, n->gblklen = blen;
    n->gwrap = 1;
    for (int d = 0, kept = 0; d < src->ndim; d++) {
      if (d < l->n && l->list[d] >= 0) {
        const Value *iv = g->values[l->list[d]];
        if (iv->ndim > blen) { fallback(w, "an index has more dims than the result's index shape"); return; }
        for (int j = 0; j < iv->ndim; j++) {
          int64_t sz = iv->size[j], t = out->size[n->gblk + blen - iv->ndim + j];
          if (sz != 1 && sz != t) { fallback(w, "the indices do not broadcast to the result"); return; }
        }
        n->gmap[d] = -1 - n->ngidx;
        n->gidx[n->ngidx++] = (int)l->list[d];
      } else {
        n->gmap[d] = adjacent ? (d < first ? d : d - nidx + blen) : blen + kept;
        kept++;
      }
    }
  }
  }
  for (int d = 0; d < n->gndim; d++) {
    if (n->gmap[d] >= 0) {
      int64_t o = out->size[n->gmap[d]];
      if (n->op == OP_GATHER ? o > n->gsize[d] : o != n->gsize[d]) {
        fallback(w, "the result's shape does not fit the source");
        return;
      }
    } else if (n->gsize[d] == 0) {
      fallback(w, "indexing into an empty dim");  /* every index is out of range: torch says so */
      return;
    }
  }
  for (int k = 0; k < n->ngidx; k++) {
    int dt = g->values[n->gidx[k]]->dtype;
    if (dt == EMBER_BOOL || dt == EMBER_U8) { fallback(w, "a mask index (its result's shape depends on the data)"); return; }
    if (dt != EMBER_I64 && dt != EMBER_I32) { fallback(w, "an index tensor is neither int64 nor int32"); return; }
  }
}

int64_t gather_error_code(const Node *n, int d) { return (int64_t)n->id * MAXD + d + 1; }

Node *gather_error_node(Graph *g, int64_t code, int *d) {
  if (code <= 0 || (code - 1) / MAXD >= g->nnodes) return NULL;
  Node *n = g->nodes[(code - 1) / MAXD];
  *d = (int)((code - 1) % MAXD);
  return n->form == F_GATHER ? n : NULL;
}

/* ---- structural ops that move elements (remap.c computes their indices) ---- */
static int same_sizes(Graph *g, const Value *a, const Value *b) {
  if (a->ndim != b->ndim) return 0;
  ExprCtx x;
  graph_size_ctx(g, &x);
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d] || (a->size[d] < 0 && ex_cmp(&x, a->ssize[d], b->ssize[d]) != EX_EQ)) return 0;
  return 1;
}

static int64_t int_or(const ember_arg *a, int64_t dflt, int *ok) {
  if (a->kind == EMBER_ARG_NONE) return dflt;
  if (a->kind != EMBER_ARG_INT) *ok = 0;
  return a->i;
}

static void lower_flip(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const ember_arg *x = arg(n, 0, "self"), *dims = arg(n, 1, "dims");
  if (x->kind != EMBER_ARG_TENSOR || dims->kind != EMBER_ARG_INTS) { fallback(w, "flip arguments are not understood"); return; }
  const Value *in = g->values[x->i], *out = g->values[n->outs[0]];
  if (!same_sizes(g, in, out)) { fallback(w, "flip result shape differs from its input's"); return; }
  int ok = 1;
  for (int i = 0; i < dims->n; i++) {
    int d = norm_dim(dims->list[i], in->ndim, &ok);
    if (in->ndim) n->flip |= 1u << d;
  }
  if (!ok) fallback(w, "flip dims out of range");
  n->red_in = (int)x->i;
  n->cdtype = out->dtype;
}

/* roll(self, shifts, dims): out[i] = self[(i - shift) mod size] along each
   rolled dim, index arithmetic that its readers fuse (torch's decomposition
   builds the indices with arange and fmod and gathers them with index_select,
   which hides from the vector loads that the row is contiguous).  No dims:
   the flattened tensor is rolled, done here for one dim only.  A constant
   size keeps the shift reduced into [0, size); a symbolic one (at least 1)
   keeps the shift as given (flip_index adds a multiple of the size). */
static void lower_roll(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const ember_arg *x = arg(n, 0, "self"), *shifts = arg(n, 1, "shifts"), *dims = arg(n, 2, "dims");
  if (x->kind != EMBER_ARG_TENSOR || shifts->kind != EMBER_ARG_INTS ||
      (dims->kind != EMBER_ARG_INTS && dims->kind != EMBER_ARG_NONE)) {
    fallback(w, "roll arguments are not understood");
    return;
  }
  const Value *in = g->values[x->i], *out = g->values[n->outs[0]];
  if (!same_sizes(g, in, out)) { fallback(w, "roll result shape differs from its input's"); return; }
  int ndims = dims->kind == EMBER_ARG_INTS ? dims->n : 0, ok = 1;
  if (ndims == 0 && (in->ndim != 1 || shifts->n != 1)) { fallback(w, "roll of a flattened tensor of rank > 1"); return; }
  if (ndims && ndims != shifts->n) { fallback(w, "roll shifts and dims differ in number"); return; }
  for (int i = 0; i < (ndims ? ndims : 1) && ok; i++) {
    int d = ndims ? norm_dim(dims->list[i], in->ndim, &ok) : 0;
    if (!ok) break;
    int64_t size = out->size[d];
    if (size < 0 && out->ssize[d]->lo < 1) { fallback(w, "roll of a dim whose symbolic size may be 0"); return; }
    if (size < 0) n->roll[d] += shifts->list[i];
    else if (size > 0) n->roll[d] = ((n->roll[d] + shifts->list[i]) % size + size) % size;
  }
  if (!ok) { fallback(w, "roll dims out of range"); return; }
  n->red_in = (int)x->i;
  n->cdtype = out->dtype;
}

/* In a symbolic graph: does src have the sizes of input in with dim d's size
   len (NULL: src has no dim d, the dims after it shift down)? */
static int embed_shape_sym(Graph *g, const Value *in, const Value *src, int d, Expr *len) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  if (src->ndim != in->ndim - !len) return 0;
  for (int k = 0, j = 0; k < in->ndim; k++) {
    if (k == d && !len) continue;
    if (ex_cmp(&x, src->ssize[j++], k == d ? len : in->ssize[k]) != EX_EQ) return 0;
  }
  return 1;
}

/* slice_scatter over a symbolic dim d of size s: a constant start, up to
   the end (s - start elements, or (s - start - 1) / step + 1). */
static void embed_slice_sym(Lw *w, const Value *in, const Value *src, int d, int64_t start, int64_t end,
                            int64_t step) {
  Node *n = w->n;
  ExprCtx x;
  graph_size_ctx(w->g, &x);
  Expr *size = in->ssize[d], *s0 = ex_const(&x, start);
  int le = ex_cmp(&x, s0, size);
  if (start < 0 || end != INT64_MAX || !(le == EX_LT || le == EX_LE || le == EX_EQ)) {
    fallback(w, "slice_scatter over a symbolic dim: only a constant start up to the end");
    return;
  }
  for (int k = 0; k < in->ndim; k++) n->emb_dim[k] = k, n->emb_mul[k] = 1, n->emb_base[k] = 0;
  n->emb_mul[d] = step, n->emb_base[d] = start;
  Expr *len = ex_add(&x, ex_div(&x, ex_add(&x, size, ex_const(&x, -start - 1)), step), ex_const(&x, 1));
  if (!embed_shape_sym(w->g, in, src, d, len)) fallback(w, "slice_scatter's src does not have the slice's shape");
}

/* slice_scatter(input, src, dim, start, end, step): start and end as torch
   normalizes them (negative counts from the end, then clamped). */
static void embed_slice(Lw *w, const Value *in, const Value *src) {
  Node *n = w->n;
  int ok = 1;
  int d = norm_dim(int_or(arg(n, 2, "dim"), 0, &ok), in->ndim, &ok);
  int64_t start = int_or(arg(n, 3, "start"), 0, &ok), end = int_or(arg(n, 4, "end"), INT64_MAX, &ok);
  int64_t step = int_or(arg(n, 5, "step"), 1, &ok);
  if (!ok || in->ndim == 0 || step <= 0) { fallback(w, "slice_scatter arguments are not understood"); return; }
  if (w->g->symbolic) {
    embed_slice_sym(w, in, src, d, start, end, step);
    return;
  }
  int64_t size = in->size[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : start > size ? size : start;
  end = end < start ? start : end > size ? size : end;
  for (int k = 0; k < in->ndim; k++) n->emb_dim[k] = k, n->emb_mul[k] = 1, n->emb_base[k] = 0;
  n->emb_mul[d] = step, n->emb_base[d] = start;
  int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
  int ok_shape = src->ndim == in->ndim;
  for (int k = 0; k < in->ndim && ok_shape; k++)
    ok_shape = src->size[k] == (k == d ? len : in->size[k]);
  if (!ok_shape) fallback(w, "slice_scatter's src does not have the slice's shape");
}

/* select_scatter(input, src, dim, index) */
static void embed_select(Lw *w, const Value *in, const Value *src) {
  Node *n = w->n;
  int ok = 1;
  int d = norm_dim(int_or(arg(n, 2, "dim"), 0, &ok), in->ndim, &ok);
  int64_t index = int_or(arg(n, 3, "index"), 0, &ok);
  if (!ok || in->ndim == 0) { fallback(w, "select_scatter arguments are not understood"); return; }
  if (w->g->symbolic) {  /* a constant index inside the dim for every size */
    ExprCtx x;
    graph_size_ctx(w->g, &x);
    if (index < 0 || ex_cmp(&x, ex_const(&x, index), in->ssize[d]) != EX_LT) {
      fallback(w, "select_scatter's index is not proved inside a symbolic dim");
      return;
    }
    for (int k = 0, j = 0; k < in->ndim; k++) {
      n->emb_mul[k] = 1, n->emb_base[k] = 0, n->emb_dim[k] = -1;
      if (k == d) n->emb_base[k] = index;
      else n->emb_dim[k] = j++;
    }
    if (!embed_shape_sym(w->g, in, src, d, NULL)) fallback(w, "select_scatter's src does not have the selection's shape");
    return;
  }
  if (index < 0) index += in->size[d];
  if (index < 0 || index >= in->size[d]) { fallback(w, "select_scatter index out of range"); return; }
  int ok_shape = src->ndim == in->ndim - 1;
  for (int k = 0, j = 0; k < in->ndim; k++) {
    n->emb_mul[k] = 1, n->emb_base[k] = 0, n->emb_dim[k] = -1;
    if (k == d) { n->emb_base[k] = index; continue; }
    if (ok_shape && src->size[j] != in->size[k]) ok_shape = 0;
    n->emb_dim[k] = j++;
  }
  if (!ok_shape) fallback(w, "select_scatter's src does not have the selection's shape");
}

/* diagonal_scatter(input, src, offset, dim1, dim2): src's last dim runs
   along the diagonal, (i, i + offset) in (dim1, dim2). */
static void embed_diagonal(Lw *w, const Value *in, const Value *src) {
  Node *n = w->n;
  int ok = 1;
  int64_t off = int_or(arg(n, 2, "offset"), 0, &ok);
  int d1 = norm_dim(int_or(arg(n, 3, "dim1"), 0, &ok), in->ndim, &ok);
  int d2 = norm_dim(int_or(arg(n, 4, "dim2"), 1, &ok), in->ndim, &ok);
  if (!ok || in->ndim < 2 || d1 == d2) { fallback(w, "diagonal_scatter arguments are not understood"); return; }
  if (off < -in->size[d1]) off = -in->size[d1];  /* beyond them the diagonal is as empty */
  if (off > in->size[d2]) off = in->size[d2];
  int64_t s1 = in->size[d1] - (off < 0 ? -off : 0), s2 = in->size[d2] - (off > 0 ? off : 0);
  int64_t len = s1 < s2 ? s1 : s2;
  if (len < 0) len = 0;
  int ok_shape = src->ndim == in->ndim - 1 && src->size[src->ndim - 1] == len;
  for (int k = 0, j = 0; k < in->ndim; k++) {
    n->emb_mul[k] = 1, n->emb_base[k] = 0;
    if (k == d1 || k == d2) {
      n->emb_dim[k] = in->ndim - 2;
      n->emb_base[k] = k == d1 ? (off < 0 ? -off : 0) : (off > 0 ? off : 0);
      continue;
    }
    if (ok_shape && src->size[j] != in->size[k]) ok_shape = 0;
    n->emb_dim[k] = j++;
  }
  if (!ok_shape) fallback(w, "diagonal_scatter's src does not have the diagonal's shape");
}

/* as_strided_scatter(input, src, size, stride, storage_offset): src goes to
   the storage elements of input.as_strided(size, stride, storage_offset) in
   a clone of the input that keeps its layout; the offset defaults to the
   input's.  A view that overlaps itself (which copy wins is torch's
   business) falls back. */
static void embed_strided(Lw *w, const Value *in, const Value *src) {
  Node *n = w->n;
  const ember_arg *sz = arg(n, 2, "size"), *st = arg(n, 3, "stride");
  int ok = 1;
  n->voff = int_or(arg(n, 4, "storage_offset"), in->offset, &ok);
  if (!ok || sz->kind != EMBER_ARG_INTS || st->kind != EMBER_ARG_INTS || sz->n != st->n || sz->n != src->ndim) {
    fallback(w, "as_strided_scatter arguments are not understood");
    return;
  }
  for (int k = 0; k < src->ndim; k++)
    if (sz->list[k] != src->size[k]) { fallback(w, "as_strided_scatter's src does not have the view's shape"); return; }
  for (int d = 0; d < in->ndim; d++)
    if (in->size[d] > 1 && in->stride[d] == 0) { fallback(w, "as_strided_scatter of an input that overlaps itself"); return; }
  /* non-overlapping: by increasing stride, each exceeds what the smaller ones reach */
  int dims[MAXD], m = 0;
  for (int k = 0; k < src->ndim; k++) {
    n->vstride[k] = st->list[k];
    if (src->size[k] > 1) dims[m++] = k;
  }
  for (int a = 1; a < m; a++)
    for (int b = a; b > 0 && st->list[dims[b]] < st->list[dims[b - 1]]; b--) {
      int t = dims[b]; dims[b] = dims[b - 1]; dims[b - 1] = t;
    }
  int64_t reach = 0;
  for (int a = 0; a < m; a++) {
    int64_t s = st->list[dims[a]];
    if (s <= reach) { fallback(w, "as_strided_scatter's view overlaps itself"); return; }
    reach += (src->size[dims[a]] - 1) * s;
  }
  if (n->voff < 0) fallback(w, "as_strided_scatter's storage offset is negative");
  n->scat_strided = 1;
}

static void lower_scatter(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  const ember_arg *x = arg(n, 0, "self"), *s = arg(n, 1, "src");
  if (x->kind != EMBER_ARG_TENSOR || s->kind != EMBER_ARG_TENSOR) { fallback(w, "scatter operands are not tensors"); return; }
  const Value *in = g->values[x->i], *src = g->values[s->i], *out = g->values[n->outs[0]];
  if (!same_sizes(g, in, out)) { fallback(w, "scatter result shape differs from its input's"); return; }
  if (in->ndim > MAXD || src->ndim > MAXD) { fallback(w, "too many dims"); return; }
  n->red_in = (int)x->i;
  n->scat_src = (int)s->i;
  n->cdtype = out->dtype;
  if (g->symbolic) {  /* src read at a clamped index: it must have an element */
    if (n->op != OP_SLICE_SCATTER && n->op != OP_SELECT_SCATTER) {
      fallback(w, "only slice_scatter and select_scatter take symbolic sizes");
      return;
    }
    for (int k = 0; k < src->ndim; k++)
      if (src->ssize[k]->lo < 1) { fallback(w, "the scatter's src may be empty"); return; }
  }
  switch (n->op) {
  case OP_SLICE_SCATTER: embed_slice(w, in, src); break;
  case OP_SELECT_SCATTER: embed_select(w, in, src); break;
  case OP_DIAG_SCATTER: embed_diagonal(w, in, src); break;
  case OP_STRIDED_SCATTER: embed_strided(w, in, src); break;
  default: fallback(w, "unknown scatter");
  }
  if (w->why) return;
  if (out->numel == 0) {  /* nothing to compute */
    n->form = F_FULL;
    operand_num(w, 0, 0);
  } else if (src->numel == 0) {  /* nothing to put in: a copy of the input */
    n->form = F_UNARY;
    n->spell = "%0";
    operand(w, x);
  }
}

/* round(x, decimals): 10^|decimals| as ATen computes it (pow in double),
   written into the spelling as a literal that the compute type converts. */
static void lower_round_decimals(Lw *w) {
  Node *n = w->n;
  const Value *out = w->g->values[n->outs[0]];
  int ok = 1;
  int64_t dec = int_or(arg(n, 1, "decimals"), 0, &ok);
  if (!ok || !dtype_is_float(out->dtype)) { fallback(w, "round(decimals) arguments are not understood"); return; }
  if (w->g->target == EMBER_CUDA && (out->dtype == EMBER_BF16 || out->dtype == EMBER_F16)) {
    /* torch's CUDA kernel rounds x * 10^d to the storage type before nearbyint
       (large values differ by whole units from the float computation) */
    fallback(w, "round(decimals) of bfloat16/float16 on CUDA rounds in the storage type");
    return;
  }
  operand(w, arg(n, 0, "self"));
  double p = pow(10.0, dec < -400 || dec > 400 ? 400.0 : (double)(dec < 0 ? -dec : dec));
  const char *lit = isinf(p) ? "INFINITY" : pool_printf(&w->g->pool, "%.17g", p);
  n->spell = pool_printf(&w->g->pool, "em_round_decimals%s(%%0,%s)", dec < 0 ? "_neg" : "", lit ? lit : "1");
  if (!n->spell) n->spell = "%0";  /* out of memory: the pool says so */
}

/* nextafter: a step in the storage format, so bfloat16 and float16 (computed
   in float) have functions of their own. */
static void lower_nextafter(Lw *w) {
  Node *n = w->n;
  int dt = w->g->values[n->outs[0]]->dtype;
  operand(w, arg(n, 0, "self"));
  operand(w, arg(n, 1, "other"));
  if (dt == EMBER_BF16) n->spell = "em_nextafter_bf16(%0,%1)";
  else if (dt == EMBER_F16) n->spell = "em_nextafter_f16(%0,%1)";
  else if (!dtype_is_float(dt)) fallback(w, "nextafter of integers");
}

/* A matrix operand of a library matmul: the last two dims of v with a unit
   stride along one of them (*t = 0: row-major, leading dim the row stride;
   1: stored transposed, leading dim the column stride).  0 if neither. */
static int matrix_layout(const Value *v, int *t, int64_t *ld) {
  int r = v->ndim - 2, c = v->ndim - 1;
  int64_t rows = v->size[r], cols = v->size[c], sr = v->stride[r], sc = v->stride[c];
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
    *t = 0, *ld = rows == 1 ? cols : sr;
    return 1;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {
    *t = 1, *ld = cols == 1 ? rows : sc;
    return 1;
  }
  return 0;
}

static int const_is(const Expr *e, int64_t c) { return e->kind == E_CONST && e->c == c; }
static int proved_ge(ExprCtx *x, Expr *a, Expr *b) {
  int r = ex_cmp(x, a, b);
  return r == EX_EQ || r == EX_GE || r == EX_GT;
}

/* matrix_layout in a symbolic graph: the unit stride a constant 1, the
   leading dim a size expression proved at least the other dim's size for
   every size (so it is a valid leading dim at each call's sizes). */
static int matrix_layout_sym(ExprCtx *x, const Value *v, int *t, Expr **ld) {
  int r = v->ndim - 2, c = v->ndim - 1;
  Expr *rows = v->ssize[r], *cols = v->ssize[c], *sr = v->sstride[r], *sc = v->sstride[c];
  if ((const_is(cols, 1) || const_is(sc, 1)) && (const_is(rows, 1) || proved_ge(x, sr, cols))) {
    *t = 0, *ld = const_is(rows, 1) ? cols : sr;
    return 1;
  }
  if ((const_is(rows, 1) || const_is(sr, 1)) && (const_is(cols, 1) || proved_ge(x, sc, rows))) {
    *t = 1, *ld = const_is(cols, 1) ? rows : sc;
    return 1;
  }
  return 0;
}

/* lower_matmul in a symbolic graph: the call's m, n, k, batch, leading dims
   and batch strides are size expressions (Node.mm_sx) that run.c evaluates
   at each call's sizes, blas.c keeping a plan per problem.  The shapes are
   proved to agree for every size (ex_cmp); an m, n or batch of 0 at a call
   is a call that does nothing (blas_matmul), a k that may be 0 (the result
   would be zeros) is left to torch.  Nothing padded, nothing folded into the
   epilogue (lower). */
static void lower_matmul_sym(Lw *w, const Value *A, const Value *B, const Value *C, int nd) {
  Node *n = w->n;
  ExprCtx x;
  graph_size_ctx(w->g, &x);
  Expr *one = ex_const(&x, 1), *zero = ex_const(&x, 0);
  Expr *m = A->ssize[nd - 2], *k = A->ssize[nd - 1], *nn = B->ssize[nd - 1], *batch = nd == 3 ? C->ssize[0] : one;
  if (ex_cmp(&x, B->ssize[nd - 2], k) != EX_EQ || ex_cmp(&x, C->ssize[nd - 2], m) != EX_EQ ||
      ex_cmp(&x, C->ssize[nd - 1], nn) != EX_EQ ||
      (nd == 3 && (ex_cmp(&x, A->ssize[0], batch) != EX_EQ || ex_cmp(&x, B->ssize[0], batch) != EX_EQ))) {
    fallback(w, "matmul shapes not proved to agree for every size");
    return;
  }
  if (!proved_ge(&x, k, one)) { fallback(w, "a matmul whose inner size may be 0 (an empty product)"); return; }
  int tc;
  Expr *lda, *ldb, *ldc;
  if (!matrix_layout_sym(&x, A, &n->mm_ta, &lda) || !matrix_layout_sym(&x, B, &n->mm_tb, &ldb) ||
      !matrix_layout_sym(&x, C, &tc, &ldc) || tc) {
    fallback(w, "a matmul operand or result has no unit stride in its matrix dims, or a leading dim not "
                "proved large enough for every size");
    return;
  }
  int batched = nd == 3 && !const_is(batch, 1);
  Expr *sa = batched ? A->sstride[0] : zero, *sb = batched ? B->sstride[0] : zero, *sc = batched ? C->sstride[0] : zero;
  if (!proved_ge(&x, sa, zero) || !proved_ge(&x, sb, zero) || !proved_ge(&x, sc, zero)) {
    fallback(w, "a batch stride not proved nonnegative");
    return;
  }
  Expr *sx[MM_NSX] = {m, nn, k, batch, lda, ldb, ldc, sa, sb, sc};
  int64_t *val[MM_NSX] = {&n->mm_m, &n->mm_n, &n->mm_k, &n->mm_batch, &n->mm_lda, &n->mm_ldb,
                          &n->mm_ldc, &n->mm_sa, &n->mm_sb, &n->mm_sc};
  for (int i = 0; i < MM_NSX; i++) n->mm_sx[i] = sx[i], *val[i] = sx[i]->kind == E_CONST ? sx[i]->c : -1;
  n->mm_a = A->id, n->mm_b = B->id;
  n->mm_bias = -1, n->mm_epi = EPI_NONE, n->mm_out = C->id;
}

/* The call's fields for C = A @ B (nd dims; static sizes) from the three
   values' strides as they are: C with a unit stride in its rows (stored
   transposed: layout.c, transpose_results) is computed as C^T = B^T A^T,
   the operands swapped and their flags flipped, so that the library writes
   it in place.  0, or 1 where a matrix has no unit stride in its matrix
   dims (n unchanged). */
static int matmul_fields(Node *n, const Value *A, const Value *B, const Value *C, int nd) {
  int ta, tb, tc;
  int64_t lda, ldb, ldc;
  if (!matrix_layout(A, &ta, &lda) || !matrix_layout(B, &tb, &ldb) || !matrix_layout(C, &tc, &ldc)) return 1;
  int64_t m = A->size[nd - 2], k = A->size[nd - 1], nn = B->size[nd - 1], batch = nd == 3 ? C->size[0] : 1;
  int64_t sa = nd == 3 && batch > 1 ? A->stride[0] : 0, sb = nd == 3 && batch > 1 ? B->stride[0] : 0;
  n->mm_bias = -1, n->mm_epi = EPI_NONE, n->mm_out = C->id;  /* fold_epilogues may add to the call */
  n->mm_k = k, n->mm_batch = batch, n->mm_ldc = ldc;
  n->mm_sc = nd == 3 && batch > 1 ? C->stride[0] : 0;
  if (!tc) {
    n->mm_a = A->id, n->mm_ta = ta, n->mm_lda = lda, n->mm_sa = sa;
    n->mm_b = B->id, n->mm_tb = tb, n->mm_ldb = ldb, n->mm_sb = sb;
    n->mm_m = m, n->mm_n = nn;
  } else {
    n->mm_a = B->id, n->mm_ta = !tb, n->mm_lda = ldb, n->mm_sa = sb;
    n->mm_b = A->id, n->mm_tb = !ta, n->mm_ldb = lda, n->mm_sb = sa;
    n->mm_m = nn, n->mm_n = m;
  }
  return 0;
}

/* mm and bmm on a CUDA graph become a cuBLASLt call (run.c), with sizes that
   are expressions in a symbolic graph (lower_matmul_sym); for layouts or
   dtypes cuBLASLt is not given, torch runs them.  On the CPU, float32 and
   float64 ones become a call of the BLAS torch loaded (blas_cpu.c), the same
   step with the same fields (nothing padded or folded: matmul_pad and
   fold_epilogues are CUDA's); where the process has no such BLAS (a C
   program without torch) torch runs them, as it does other dtypes. */
static void lower_matmul(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  int cpu = g->target != EMBER_CUDA;
  const ember_arg *a = arg(n, 0, "self"), *b = arg(n, 1, "mat2");
  if (a->kind != EMBER_ARG_TENSOR || b->kind != EMBER_ARG_TENSOR) { fallback(w, "matmul operands are not tensors"); return; }
  const Value *A = g->values[a->i], *B = g->values[b->i], *C = g->values[n->outs[0]];
  int nd = n->op == OP_BMM ? 3 : 2;
  if (A->ndim != nd || B->ndim != nd || C->ndim != nd) { fallback(w, "matmul operands of unexpected rank"); return; }
  int dt = C->dtype;
  if (cpu && (A->dtype != dt || B->dtype != dt || !(dt == EMBER_F32 || dt == EMBER_F64))) {
    fallback(w, "matmul dtype not given to the CPU BLAS (float32 and float64 are)");
    return;
  }
  if (cpu && !blas_cpu_available(dt)) {
    fallback(w, "no BLAS (sgemm_/dgemm_) loaded in the process: torch runs the matmul");
    return;
  }
  if (!cpu && (A->dtype != dt || B->dtype != dt || !(dt == EMBER_F32 || dt == EMBER_BF16 || dt == EMBER_F16))) {
    fallback(w, "matmul dtype not given to cuBLASLt (float32, bfloat16 and float16 are)");
    return;
  }
  if (g->symbolic) {
    lower_matmul_sym(w, A, B, C, nd);
    return;
  }
  int64_t m = A->size[nd - 2], k = A->size[nd - 1], nn = B->size[nd - 1], batch = nd == 3 ? C->size[0] : 1;
  if (B->size[nd - 2] != k || C->size[nd - 2] != m || C->size[nd - 1] != nn ||
      (nd == 3 && (A->size[0] != batch || B->size[0] != batch))) {
    fallback(w, "matmul shapes do not agree");
    return;
  }
  if (!m || !nn || !k || !batch) { fallback(w, "an empty matmul"); return; }
  if (matmul_fields(n, A, B, C, nd)) {
    fallback(w, "a matmul operand or result has no unit stride in its matrix dims");
    return;
  }
  if (cpu && !blas_cpu_fits(n->mm_m, n->mm_n, k, n->mm_lda, n->mm_ldb, n->mm_ldc)) {
    fallback(w, "a matmul size or leading dim beyond the CPU BLAS's 32-bit integers");
    return;
  }
  if (n->mm_sc < 0 || n->mm_sa < 0 || n->mm_sb < 0) fallback(w, "a negative batch stride");
}

size_t matmul_store(const Node *n, int64_t es, MatStore s[3]) {
  const int t[3] = {n->mm_ta, n->mm_tb, 0};
  const int64_t rows[3] = {n->mm_m, n->mm_k, n->mm_m}, cols[3] = {n->mm_k, n->mm_n, n->mm_n};
  const int64_t ld[3] = {n->mm_lda, n->mm_ldb, n->mm_ldc}, bs[3] = {n->mm_sa, n->mm_sb, n->mm_sc};
  size_t off = 0;
  for (int i = 0; i < 3; i++) {
    s[i].rows = t[i] ? cols[i] : rows[i];
    s[i].len = t[i] ? rows[i] : cols[i];
    s[i].ld = ld[i];
    s[i].nb = n->mm_batch > 1 && bs[i] ? n->mm_batch : 1;
    s[i].bstride = bs[i];
    s[i].pad = n->mm_pad[i];
    /* B stored transposed, for a call over mm_ncall columns: that many rows */
    s[i].crows = i == 1 && t[i] && n->mm_ncall ? n->mm_ncall : s[i].rows;
    s[i].off = off;
    if (s[i].pad && s[i].crows >= 0) off += ((size_t)(s[i].nb * s[i].crows * s[i].pad * es) + 255) / 256 * 256;
  }
  return off;
}

/* cuBLASLt's fast kernels move 16 bytes at a time, which a result whose
   rows are not a multiple of 16 bytes rules out: gpt2's LM head (a [2048,
   50257] bf16 result) ran in a cutlass align1 kernel, eager's too, several
   times slower than Inductor's (whose pad_mm pads the weight to 50264 rows
   and slices the result).  Padding only the result's leading dim did not
   help (tools/gpu/gemm_probe.py); padding its column count did.
   So such a result whose matrix (one batch of it) takes at least
   PAD_MIN_BYTES is computed over mm_ncall
   columns (n rounded up to 16 bytes) into a copy in the call's scratch
   (arena bytes of its step alone, plan.c), whose n columns are then copied
   out (run.c); B is copied into the scratch too, with mm_ncall columns (its
   extra ones hold whatever the scratch held: they only reach the result's
   extra columns, which are dropped) and its leading dim rounded up alike.
   Not with a bias in the epilogue (it has n elements); the batches of a bmm's
   B and result must follow one another (or B be one broadcast matrix).
   Operands with a misaligned leading dim are left as they are (unmeasured).
   16-bit only: float32 (no TF32, as torch's default) runs SIMT kernels, and
   bert-base's float32 LM head was slower padded.
   A batch of small matrices is not padded however large the batch: Swin's
   window attention (49 x 49 products, thousands of them) spent more in the
   driver's copies with odd pitches than the library's align-1 kernels take
   (bench/results/gpu-sweep-h100-2026-11-26/DIAGNOSIS.md, cause B).
   The test option gemm_pad=all pads whatever the size.
   A symbolic graph's call (gpt2's LM head over a symbolic batch and
   sequence) pads where n, k, B's and the result's leading dims are
   constants and it is one matrix, whatever m: the call pads where the
   result takes at least PAD_MIN_BYTES at the call's m (run.c,
   run_matmul_sym), and runs in place otherwise. */
static void matmul_pad(const Graph *g, Node *n, int64_t es) {
  int64_t q = 16 / es;  /* elements in 16 bytes */
  if (es != 2 || n->mm_bias >= 0 || n->mm_n <= 0 || n->mm_n % q == 0) return;
  if (g->symbolic && (n->mm_k <= 0 || n->mm_batch != 1 || n->mm_ldb <= 0 || n->mm_ldc <= 0)) return;
  MatStore s[3];
  matmul_store(n, es, s);
  for (int i = 1; i < 3; i++)
    if (s[i].nb > 1 && s[i].bstride != s[i].rows * s[i].ld) return;
  if (g->opt.gemm_pad != GEMM_PAD_ALL && s[2].rows >= 0 && s[2].rows * s[2].len * es < PAD_MIN_BYTES) return;
  n->mm_ncall = (n->mm_n + q - 1) / q * q;
  n->mm_pad[2] = n->mm_ncall;
  n->mm_pad[1] = n->mm_tb ? (n->mm_k + q - 1) / q * q : n->mm_ncall;  /* B stored [n, k] or [k, n] */
}

/* polygamma(n, x): digamma for n = 0, trigamma for n = 1, else the zeta
   form with n as a constant operand.  A negative n (torch raises) or one
   that is not an integer falls back. */
static void lower_polygamma(Lw *w) {
  Node *n = w->n;
  const ember_arg *k = arg(n, 0, "n");
  if (k->kind != EMBER_ARG_INT || k->i < 0) { fallback(w, "polygamma's order is not a non-negative integer"); return; }
  operand(w, arg(n, 1, "self"));
  if (k->i == 0) n->spell = "em_digamma(%0)";
  else if (k->i == 1) n->spell = "em_trigamma(%0)";
  else {
    operand_num(w, (double)k->i, 0);
    n->spell = "em_polygamma(%0,%1)";
  }
}

void count_use(Graph *g, int v, int by) {
  Value *x = g->values[v];
  x->nuses += by;
  if (x->root != v) g->values[x->root]->nuses += by;
}

static int check_types(Lw *w) {
  Node *n = w->n;
  Graph *g = w->g;
  for (int i = 0; i < n->nouts; i++) {
    const Value *v = g->values[n->outs[i]];
    if (v->dtype == EMBER_OPAQUE) { fallback(w, "a result has a dtype ember does not compute on"); return 0; }
    if (v->device != g->target) { fallback(w, "a result is on another device than the graph's kernels"); return 0; }
  }
  for (int i = 0; i < n->nargs; i++) {
    const ember_arg *a = &n->args[i];
    int cnt = a->kind == EMBER_ARG_TENSOR ? 1 : a->kind == EMBER_ARG_TENSORS ? a->n : 0;
    for (int k = 0; k < cnt; k++) {
      if (a->kind == EMBER_ARG_TENSORS && a->list[k] < 0) continue;  /* None */
      const Value *v = g->values[a->kind == EMBER_ARG_TENSOR ? a->i : a->list[k]];
      if (v->dtype == EMBER_OPAQUE) { fallback(w, "an input has a dtype ember does not compute on"); return 0; }
      if (v->device != g->target) { fallback(w, "an input is on another device than the graph's kernels"); return 0; }
    }
  }
  return 1;
}

/* Node n becomes a fallback (torch runs it): its tensor arguments are used
   by torch, and its results have storage of their own. */
static void make_fallback(Graph *g, Node *n, const char *why) {
  n->form = -1;
  n->reason = why;
  n->nopnd = 0;
  /* a fallback view's output has its own storage */
  for (int k = 0; k < n->nouts; k++) g->values[n->outs[k]]->root = n->outs[k];
  for (int k = 0; k < n->nargs; k++) {
    const ember_arg *a = &n->args[k];
    if (a->kind == EMBER_ARG_TENSOR) count_use(g, (int)a->i, 1), g->values[g->values[a->i]->root]->fb_use = 1;
    if (a->kind == EMBER_ARG_TENSORS)
      for (int j = 0; j < a->n; j++)
        if (a->list[j] >= 0)
          count_use(g, (int)a->list[j], 1), g->values[g->values[a->list[j]]->root]->fb_use = 1;
  }
}

/* Does node n take value id v (or a view of it) as a tensor argument? */
static int reads_value(const Graph *g, const Node *n, int v) {
  for (int a = 0; a < n->nargs; a++) {
    const ember_arg *x = &n->args[a];
    int cnt = x->kind == EMBER_ARG_TENSOR ? 1 : x->kind == EMBER_ARG_TENSORS ? x->n : 0;
    for (int j = 0; j < cnt; j++) {
      int u = x->kind == EMBER_ARG_TENSOR ? (int)x->i : x->list[j];
      if (u >= 0 && (u == v || g->values[u]->root == v)) return 1;
    }
  }
  return 0;
}

/* A copy_ into an input is stored in place by a kernel only if nothing but
   other such copies follows it (AOTAutograd's graphs end so) and nothing
   reads its result; else it stays torch's copy_, whose order with the other
   steps is kept (a node after it could read the input, or a value fused from
   the input's old contents, after the store). */
static void check_copies_into(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->form != F_COPY || n->op != OP_COPY_INTO) continue;
    Value *out = g->values[n->outs[0]];
    if (out->into < 0) continue;
    int later = out->is_output;
    for (int j = i + 1; j < g->nnodes && !later; j++)
      later = g->nodes[j]->op != OP_COPY_INTO || reads_value(g, g->nodes[j], out->id) ||
              reads_value(g, g->nodes[j], out->into);
    if (!later) continue;
    g->values[out->into]->is_dst = 0;
    out->into = -1;
    make_fallback(g, n, "a copy_ into an input that other nodes follow, or whose result or input is read after it");
  }
}

/* ---- library epilogues ----
   cuBLASLt adds a bias (one per output column) to the fp32 product and
   applies relu or the tanh GELU before it rounds and stores (blas.c), so
   mm(a, b) + bias, and a relu or gelu(approximate='tanh') of that sum, are
   done by the library call itself: the last folded node's result is what
   the call writes, and neither the product nor the sum is stored.

   This is lowering's last step, not fusion's, because it decides what nodes
   compute (an add becomes "done by that matmul": F_EPILOGUE) from what only
   lowering has at hand: the use counts, outputs and fallback reads it has
   just counted, and the nodes' arguments (gelu's approximation).  fuse.c
   then treats the call as before, with the bias as one more operand in
   memory.  The call's step stays where the mm is, so the bias must be ready
   there: a graph input, or computed by a node before the mm.

   cuBLASLt's GELU is the tanh form, never the exact (erf) one, and only for
   bfloat16 and float16 results: its tanh is likely the hardware's
   approximation (CUTLASS's GELU_taylor epilogue uses tanh.approx.f32,
   relative error up to 2^-11, so gelu(-3) is off by about 7e-4), which is
   of the order of a 16-bit result's rounding but far outside float32's
   tolerance against eager; a float32 gelu stays a kernel.  (PyTorch's own
   fused addmm + gelu path, _addmm_activation, uses the same epilogue.) */

/* The one node that reads value v, when v has exactly one use and nothing
   else needs it (not an output, no fallback, no view of it); else NULL.
   Uses come after the node at index `after` that defines v. */
static Node *only_reader(Graph *g, int after, const Value *v) {
  if (v->nuses != 1 || v->is_output || v->fb_use || v->out_use || v->into >= 0 || v->is_dst || v->root != v->id)
    return NULL;
  for (int j = after + 1; j < g->nnodes; j++)
    if (reads_value(g, g->nodes[j], v->id)) return g->nodes[j];
  return NULL;
}

/* y can take x's place as the call's output: same dtype, sizes and strides. */
static int same_layout(const Value *x, const Value *y) {
  if (x->dtype != y->dtype || x->ndim != y->ndim || x->root != x->id || y->root != y->id) return 0;
  for (int d = 0; d < x->ndim; d++)
    if (x->size[d] != y->size[d] || (x->size[d] > 1 && x->stride[d] != y->stride[d])) return 0;
  return 1;
}

/* Is b a bias cuBLASLt can add to mm's result c: one element per column,
   broadcast along the rows (and batches): shape [n], [1, n] (or [1, 1, n]),
   unit stride, c's dtype, and in memory before the mm's step (an input, or
   the result of an earlier node)? */
static int bias_fits(Graph *g, const Node *mm, const Value *c, const Value *b) {
  if (b->dtype != c->dtype || b->ndim < 1 || b->ndim > c->ndim) return 0;
  for (int d = 0; d < b->ndim - 1; d++)
    if (b->size[d] != 1) return 0;
  if (b->size[b->ndim - 1] != mm->mm_n || (mm->mm_n > 1 && b->stride[b->ndim - 1] != 1)) return 0;
  const Value *r = g->values[b->root];
  return r->is_input || (r->def && r->def->id < mm->id);
}

static void fold_into(Graph *g, Node *mm, Node *n, Value *replaced) {
  n->form = F_EPILOGUE;
  n->epi_of = mm->id;
  mm->mm_out = n->outs[0];
  replaced->nuses = 0;  /* nothing reads it now: it is never computed */
}

/* Fold the bias add after F_MATMUL node mm, then a relu or tanh GELU of the sum. */
static void fold_epilogue(Graph *g, Node *mm) {
  Value *c = g->values[mm->outs[0]];
  Node *add = only_reader(g, mm->id, c);
  if (!add || add->op != OP_ADD || add->form != F_ADDSUB || add->nopnd != 2) return;  /* alpha 1 */
  int k = add->opnd[0].v == c->id ? 0 : 1;
  int bias = add->opnd[1 - k].v;
  Value *sum = g->values[add->outs[0]];
  if (add->opnd[k].v != c->id || bias < 0 || bias == c->id || !same_layout(c, sum) ||
      !bias_fits(g, mm, c, g->values[bias]))
    return;
  /* the bias is read at the mm's step, no longer at the add's: no fallback
     in between may write it (a copy_ torch runs) */
  for (int j = mm->id + 1; j < add->id; j++)
    if (g->nodes[j]->form < 0) return;
  mm->mm_bias = bias;
  fold_into(g, mm, add, c);
  /* training keeps the sum too (gelu's backward reads it): then it has more
     uses and the activation stays a kernel of its own */
  Node *act = only_reader(g, add->id, sum);
  if (!act || act->nopnd != 1 || act->opnd[0].v != sum->id || !same_layout(sum, g->values[act->outs[0]])) return;
  const ember_arg *ap = arg(act, 1, "approximate");
  if (act->op == OP_RELU && act->form == F_UNARY) mm->mm_epi = EPI_RELU;
  else if (act->op == OP_GELU && act->form == F_GELU && ap->kind == EMBER_ARG_STRING && !strcmp(ap->s, "tanh") &&
           (sum->dtype == EMBER_BF16 || sum->dtype == EMBER_F16))  /* 16-bit results only (above) */
    mm->mm_epi = EPI_GELU;
  else return;
  fold_into(g, mm, act, sum);
}

/* Which library runs the call (blas.c's header says why): cuBLAS's classic
   cublasSgemm for a float32 product of one matrix with nothing in its
   epilogue and no padded copies, cuBLASLt for the rest. */
static void matmul_api(const Graph *g, Node *n, int dtype) {
  if (g->target != EMBER_CUDA) {
    n->mm_api = BLAS_CPU;
    return;
  }
  n->mm_api = dtype == EMBER_F32 && n->mm_batch == 1 && n->mm_bias < 0 && n->mm_epi == EPI_NONE &&
                      !n->mm_ncall && !n->mm_pad[0] && !n->mm_pad[1] && !n->mm_pad[2]
                  ? BLAS_CUBLAS
                  : BLAS_LT;
}

const char *matmul_api_name(const Node *n) {
  if (n->mm_api == BLAS_CPU) return "CPU BLAS gemm";
  return n->mm_api == BLAS_CUBLAS ? "cuBLAS sgemm" : "cuBLASLt matmul";
}

const char *matmul_epilogue_name(const Node *n) {
  static const char *const names[2][3] = {{"", " + relu", " + gelu(tanh)"},
                                          {" + bias", " + bias + relu", " + bias + gelu(tanh)"}};
  if (n->form != F_MATMUL || n->mm_epi < EPI_NONE || n->mm_epi > EPI_GELU) return "";
  return names[n->mm_bias >= 0][n->mm_epi];
}

/* F_MATMUL node n's call again, from its operands' and result's strides as
   layout.c left them (transpose_results): 0 and n updated (padding and
   library included), or 1 where they do not make a library call (n
   unchanged; so too with check set, which only asks).  A static graph's
   plain call only: no bias or activation folded into it. */
int matmul_relayout(Graph *g, Node *n, int check) {
  if (g->symbolic || n->form != F_MATMUL || n->mm_bias >= 0 || n->mm_epi != EPI_NONE || n->mm_out != n->outs[0])
    return 1;
  const ember_arg *a = arg(n, 0, "self"), *b = arg(n, 1, "mat2");
  const Value *A = g->values[a->i], *B = g->values[b->i], *C = g->values[n->outs[0]];
  Node t = *n;
  if (matmul_fields(&t, A, B, C, C->ndim)) return 1;
  if (g->target != EMBER_CUDA && !blas_cpu_fits(t.mm_m, t.mm_n, t.mm_k, t.mm_lda, t.mm_ldb, t.mm_ldc)) return 1;
  if (check) return 0;
  t.mm_ncall = 0;
  memset(t.mm_pad, 0, sizeof t.mm_pad);
  if (g->target == EMBER_CUDA) matmul_pad(g, &t, dtype_size(C->dtype));
  matmul_api(g, &t, C->dtype);
  *n = t;
  return 0;
}

/* Off unless the test option cuda_epilogue is on: written in a session without a GPU, the
   fold's plans are tested (tests/c/test_compile.c, tests/test_epilogue.py)
   but the calls have not yet run against eager on one (tools/gpu/suites.sh,
   EMBER_TEST_DEVICE=cuda); among the open questions, whether cuBLASLt's relu keeps a
   NaN as torch.relu does. */
static void fold_epilogues(Graph *g) {
  if (!g->opt.cuda_epilogue || g->symbolic || g->target != EMBER_CUDA) return;  /* symbolic: not yet (its checks compare constant sizes) */
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->form == F_MATMUL) fold_epilogue(g, g->nodes[i]);
}

/* What a graph with symbolic sizes may hold (docs/DYNAMIC_SHAPES.md): pointwise ops, views,
   reductions, cat, pad, gathers, factories, flips, scatters, matmuls (library calls with
   per-call sizes, lower_matmul_sym) and fallbacks, on either target; a size may
   be 0 or 1 for some sizes.  EMBER_OK, or the refusal (the client then compiles per shape). */
static int symbolic_ok(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    int f = n->op >= 0 ? em_ops[n->op].form : -1;
    /* ops without a lowering and composites (not expanded in a symbolic graph) are fallbacks:
       torch runs them at each call's sizes; matmuls are lower_matmul's to decide */
    if (f < 0 || f == F_COMPOSITE || f == F_MATMUL) continue;
    if (n->op == OP_COPY_INTO || f == F_EPILOGUE)
      return graph_refuse_symbolic(g, "lower", "%s (node %s): only pointwise ops, views, reductions, cat, pad, "
                                   "flip and scatters, embedding/index_select, full/arange and fallbacks "
                                   "take symbolic sizes", n->opname, n->name);
  }
  return EMBER_OK;
}

int lower(Graph *g) {
  g->index_nowait = !g->opt.cuda_index_wait;  /* asynchronous unless the cuda_index_wait option is on */
  /* the kernels run where the graph's tensors are: on a CUDA device if any is there */
  g->target = EMBER_CPU;
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->device == EMBER_CUDA) g->target = EMBER_CUDA;
  if (g->symbolic && symbolic_ok(g)) return EMBER_EINVAL;
  for (int i = 0; i < g->nnodes && !g->failed; i++) {
    Node *n = g->nodes[i];
    Lw w = {g, n, NULL};
    if (n->op == OP_FALLBACK) w.why = "no lowering for this op";
    else if (em_ops[n->op].form == F_COMPOSITE) w.why = n->reason ? n->reason : "not expanded";
    else if (n->nouts != 1 && em_ops[n->op].form != F_VIEW) w.why = "the op has several results";
    else if (check_types(&w)) {
      n->form = em_ops[n->op].form;
      n->spell = em_ops[n->op].spell;
      switch (n->form) {
      case F_FULL: lower_factory(&w); break;
      case F_ARANGE: lower_arange(&w); break;
      case F_REDUCE: lower_reduce(&w); break;
      case F_VIEW: lower_view(&w); break;
      case F_CAT: lower_cat(&w); break;
      case F_PAD: lower_pad(&w); break;
      case F_GATHER: lower_gather(&w); break;
      case F_FLIP: n->op == OP_ROLL ? lower_roll(&w) : lower_flip(&w); break;
      case F_SCATTER: lower_scatter(&w); break;
      case F_MATMUL: lower_matmul(&w); break;
      default: lower_pointwise(&w); break;
      }
    }
    if (g->failed) return EMBER_EINVAL;
    if (w.why && n->part)  /* expand.c's checks should have kept the composite whole */
      return graph_error(g, n, "internal error: a part of an expanded op cannot be lowered: %s", w.why);
    if (w.why) {
      make_fallback(g, n, w.why);
      continue;
    }
    switch (n->form) {
    case F_REDUCE: count_use(g, n->red_in >= 0 ? n->red_in : (int)arg(n, 0, "self")->i, 1); break;
    case F_VIEW: {
      int v = n->red_in >= 0 ? n->red_in : (int)arg(n, 0, "self")->i;
      count_use(g, v, 1);
      g->values[v]->vuses++;
      if (g->values[v]->root != v) g->values[g->values[v]->root]->vuses++;
      break;
    }
    case F_PAD: count_use(g, n->red_in, 1); break;
    case F_GATHER:
      count_use(g, n->red_in, 1);
      for (int k = 0; k < n->ngidx; k++) count_use(g, n->gidx[k], 1);
      break;
    case F_FLIP: count_use(g, n->red_in, 1); break;
    case F_SCATTER: count_use(g, n->red_in, 1); count_use(g, n->scat_src, 1); break;
    case F_CAT: for (int k = 0; k < n->ncat; k++) count_use(g, n->cat_in[k], 1); break;
    case F_MATMUL: count_use(g, n->mm_a, 1); count_use(g, n->mm_b, 1); break;
    default:
      for (int k = 0; k < n->nopnd; k++)
        if (n->opnd[k].v >= 0) count_use(g, n->opnd[k].v, 1);
    }
  }
  for (int i = 0; i < g->noutputs; i++) {
    if (g->outputs[i] < 0) continue;
    Value *v = g->values[g->outputs[i]];
    v->is_output = 1;
    g->values[v->root]->fb_use = 1;
    g->values[v->root]->out_use = 1;
    count_use(g, v->id, 1);
  }
  check_copies_into(g);
  fold_epilogues(g);
  for (int i = 0; i < g->nnodes; i++) {  /* after the fold: a bias in the epilogue changes the padding */
    Node *n = g->nodes[i];
    if (n->form != F_MATMUL) continue;
    int dt = g->values[n->mm_out]->dtype;
    if (g->target == EMBER_CUDA) matmul_pad(g, n, dtype_size(dt));
    matmul_api(g, n, dt);
  }
  return g->failed ? EMBER_EINVAL : EMBER_OK;
}
