/*
 * codegen.c - the walker shared by the C and CUDA code generators: types and
 * conversions, named temporaries with common subexpressions shared per scope,
 * computing a value from its definition down to loads of materialized values,
 * stores, the per-element parts of reductions, loop nests with merged dims,
 * and the driver that picks a target, searches loop merges and generates
 * the kernels in parallel threads.
 *
 * A gather's checked index is a temp, and the source is read at an index
 * holding a gathered variable (expr.c) that prints as that temp's name, so
 * keys of common subexpressions, which print indices, stay exact.
 *
 * A target (codegen_c.c, codegen_cuda.c) decides the shape of a kernel (its
 * signature, loops or thread mapping) and keeps its own state (Cg.ts); the
 * walker asks it through the Target's hooks how a load, a store and the
 * combine of partial reductions look where they differ from plain C.
 * Lines carry the FX node names, so the source reads like the graph.
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"


static const char *var_names[MAXD] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};

/* ---- types ---- */
const char *cg_storage_ctype(int dt) {
  switch (dt) {
  case EMBER_BOOL: case EMBER_U8: return "uint8_t";
  case EMBER_I8: return "int8_t";
  case EMBER_I16: return "int16_t";
  case EMBER_I32: return "int32_t";
  case EMBER_I64: return "int64_t";
  case EMBER_F16: return "uint16_t";
  case EMBER_BF16: return "uint16_t";
  case EMBER_F32: return "float";
  case EMBER_F64: return "double";
  }
  return "void";
}

const char *cg_compute_ctype(int dt) {
  if (dt == EMBER_F64) return "double";
  if (dtype_is_float(dt)) return "float";
  return "int64_t";
}

char *cg_fmt(Cg *c, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(NULL, 0, f, ap);
  va_end(ap);
  char *r = pool_alloc(c->pool, (size_t)n + 1);
  if (!r) { c->oom = 1; return "0"; }
  va_start(ap, f);
  vsnprintf(r, (size_t)n + 1, f, ap);
  va_end(ap);
  return r;
}

/* Every value the walker names holds one of its dtype's values, in the
   dtype's compute type: what eager would have stored.  An op's result is
   computed in the compute type (int64_t for every integer, float for the
   16-bit floats), so narrow() makes it the dtype's value: integers wrap at
   their width, bools are 0/1, float16 and bfloat16 round to their format.
   Without it an int8 a * 3 read by a cast or a sum kept 381 where eager
   has 125. */
static const char *narrow(Cg *c, const char *e, int dt) {
  switch (dt) {
  case EMBER_BOOL: return cg_fmt(c, "((int64_t)((%s) != 0))", e);
  case EMBER_I32: case EMBER_I16: case EMBER_I8: case EMBER_U8:
    return cg_fmt(c, "((int64_t)(%s)(%s))", cg_storage_ctype(dt), e);
  case EMBER_F16: return cg_fmt(c, "em_round_f16(%s)", e);
  case EMBER_BF16: return cg_fmt(c, "em_round_bf16(%s)", e);
  }
  return e;
}

/* A value of logical dtype `from` (held in its compute type, narrowed) as dtype `to`. */
static const char *conv(Cg *c, const char *e, int from, int to) {
  if (from == to) return e;
  switch (to) {
  case EMBER_BOOL: return from == EMBER_BOOL ? e : narrow(c, e, to);
  case EMBER_I64: return dtype_is_float(from) ? cg_fmt(c, "em_to_int(%s)", e) : e;
  case EMBER_I32: case EMBER_I16: case EMBER_I8: case EMBER_U8:
    if (from == EMBER_BOOL) return e;
    /* torch narrows floats through int32 */
    if (dtype_is_float(from)) return cg_fmt(c, "((int64_t)(%s)em_to_int32(%s))", cg_storage_ctype(to), e);
    return narrow(c, e, to);
  case EMBER_F64: return cg_fmt(c, "((double)(%s))", e);
  case EMBER_F32:
    if (from == EMBER_F16 || from == EMBER_BF16) return e;
    return cg_fmt(c, "((float)(%s))", e);
  case EMBER_F16: case EMBER_BF16: return narrow(c, cg_fmt(c, "(float)(%s)", e), to);
  }
  return e;
}

/* Integer i as dtype dt stores it: wrapped at dt's width (Python scalars in
   integer ops are cast to the tensor's dtype, so uint8 % -1 is % 255). */
static int64_t wrap_int(int64_t i, int dt) {
  switch (dt) {
  case EMBER_BOOL: return i != 0;
  case EMBER_U8: return (uint8_t)i;
  case EMBER_I8: return (int8_t)i;
  case EMBER_I16: return (int16_t)i;
  case EMBER_I32: return (int32_t)i;
  }
  return i;
}

const char *cg_load_conv(Cg *c, const char *e, int dt) {
  switch (dt) {
  case EMBER_BF16: return cg_fmt(c, "em_bf16_to_f32(%s)", e);
  case EMBER_F16: return cg_fmt(c, "em_f16_to_f32(%s)", e);
  case EMBER_F32: case EMBER_F64: return e;
  default: return cg_fmt(c, "(int64_t)%s", e);
  }
}

const char *cg_store_conv(Cg *c, const char *e, int dt) {
  switch (dt) {
  case EMBER_BF16: return cg_fmt(c, "em_f32_to_bf16(%s)", e);
  case EMBER_F16: return cg_fmt(c, "em_f32_to_f16(%s)", e);
  case EMBER_BOOL: return cg_fmt(c, "(uint8_t)((%s) != 0)", e);
  case EMBER_F32: case EMBER_F64: return e;
  default: return cg_fmt(c, "(%s)(%s)", cg_storage_ctype(dt), e);
  }
}

/* A number as a value of dtype dt, cast as torch casts a Scalar: integers
   wrap, floats truncate (through int32 below int64, as conv) then wrap. */
static const char *literal(Cg *c, double f, int64_t i, int is_float, int dt) {
  const char *ct = cg_compute_ctype(dt);
  if (!dtype_is_float(dt)) {
    if (dt == EMBER_BOOL) return (is_float ? f != 0 : i != 0) ? "((int64_t)1)" : "((int64_t)0)";
    if (is_float) {
      int wide = dt == EMBER_I64;
      double lim = wide ? 0x1p63 : 0x1p31;
      i = f >= -lim && f < lim ? (int64_t)f : wide ? INT64_MIN : INT32_MIN;
    }
    i = wrap_int(i, dt);
    return i == INT64_MIN ? "INT64_MIN" : cg_fmt(c, "((int64_t)%lldLL)", (long long)i);
  }
  double v = is_float ? f : (double)i;
  if (isnan(v)) return cg_fmt(c, "((%s)NAN)", ct);
  if (isinf(v)) return cg_fmt(c, "((%s)%sINFINITY)", ct, v < 0 ? "-" : "");
  /* %g prints -0.0 as "-0", which C reads as the integer 0 */
  const char *s = v == 0 && signbit(v) ? cg_fmt(c, "((%s)-0.0)", ct) : cg_fmt(c, "((%s)%.17g)", ct, v);
  return conv(c, s, EMBER_F64, dt == EMBER_F64 ? EMBER_F64 : dt);
}

/* ---- statements and names ---- */
void cg_line(Cg *c, const char *f, ...) {
  for (int i = 0; i < c->indent; i++) str_puts(c->body, "  ");
  va_list ap;
  va_start(ap, f);
  str_vprintf(c->body, f, ap);
  va_end(ap);
  str_puts(c->body, "\n");
}

static const char *cse_find(Cg *c, const char *key) {
  for (int i = c->ncse - 1; i >= 0; i--)
    if (!strcmp(c->cse[i].key, key)) return c->cse[i].name;
  return NULL;
}

/* arr (n used of *cap elements, elem bytes each) with room for one more,
   doubling from first: the array (perhaps moved), or NULL with c->oom set
   (arr itself then stays as it was). */
void *cg_room(Cg *c, void *arr, int n, int *cap, int first, size_t elem) {
  if (n < *cap) return arr;
  int ncap = *cap ? 2 * *cap : first;
  void *p = em_realloc(arr, elem * (size_t)ncap);
  if (!p) {
    c->oom = 1;
    return NULL;
  }
  *cap = ncap;
  return p;
}

void cg_cse_put(Cg *c, const char *key, const char *name) {
  Cse *n = cg_room(c, c->cse, c->ncse, &c->cap, 64, sizeof *c->cse);
  if (!n) return;
  c->cse = n;
  c->cse[c->ncse].key = key, c->cse[c->ncse].name = name;
  c->ncse++;
}

Expr *cg_subst(Cg *c, Expr *e) {
  for (int d = 0; d < MAXD; d++)
    if (c->sub[d]) e = ex_subst(&c->x, e, d, c->sub[d]);
  return e;
}

const char *cg_expr(Cg *c, Expr *e) {
  e = cg_subst(c, e);
  c->divmods += ex_count_divmod(e);
  return cg_size(c, e);
}

const char *cg_size(Cg *c, const Expr *e) {
  Str s = {0};
  ex_print(&s, e, c->names);
  const char *r = s.s ? pool_strdup(c->pool, s.s) : "0";
  if (s.oom) c->oom = 1;
  str_free(&s);
  return r;
}

const char *cg_extent(Cg *c, const Loop *l) {
  return l->sn ? cg_size(c, l->sn) : cg_fmt(c, "%lld", (long long)l->n);
}

/* The current lane of a target that emits several elements' code at once (CUDA's lanes), or -1. */
static int cur_lane(Cg *c, Expr **idx, int n) { return c->t->lane ? c->t->lane(c, idx, n) : -1; }

static const char *idx_key(Cg *c, const char *pre, int v, Expr **idx, int n, int lane) {
  Str s = {0};
  str_printf(&s, "%s%d@", pre, v);
  if (lane >= 0) str_printf(&s, "lane%d:", lane);  /* the same idx is another element in each lane */
  for (int d = 0; d < n; d++) {
    ex_print(&s, idx[d], c->names);
    str_puts(&s, ",");
  }
  const char *r = s.s ? pool_strdup(c->pool, s.s) : "";
  if (s.oom) c->oom = 1;
  str_free(&s);
  return r;
}

const char *cg_temp(Cg *c, int dt, const char *e, const char *comment) {
  const char *name = cg_fmt(c, "t%d", c->ntemp++);
  if (comment) cg_line(c, "%s %s = %s;  /* %s */", cg_compute_ctype(dt), name, e, comment);
  else cg_line(c, "%s %s = %s;", cg_compute_ctype(dt), name, e);
  return name;
}

/* ---- values ---- */

static const char *cg_load(Cg *c, const Value *r, Expr *addr) {
  const char *a = cg_expr(c, addr);
  const char *key = cg_fmt(c, "L%d@%s", r->id, a);
  const char *t = cse_find(c, key);
  if (t) return t;
  if (r->local && !c->stray) c->stray = 1 + r->id;  /* a register has no memory to load from */
  c->used[r->id] |= 1;
  const char *p = cg_param(c, r->id);
  t = c->t->load ? c->t->load(c, r, addr, a) : NULL;
  if (!t) t = cg_temp(c, r->dtype, cg_load_conv(c, cg_fmt(c, "%s[%s]", p, a), r->dtype), NULL);
  cg_cse_put(c, key, t);
  return t;
}

/* Substitute %0.. in a spelling with operand expressions. */
static const char *spell(Cg *c, const char *tpl, const char **ops, int nops) {
  Str s = {0};
  for (const char *p = tpl; *p; p++) {
    if (*p == '%' && p[1] >= '0' && p[1] <= '9' && p[1] - '0' < nops) {
      str_puts(&s, ops[p[1] - '0']);
      p++;
    } else {
      char ch[2] = {*p, 0};
      str_puts(&s, ch);
    }
  }
  const char *r = s.s ? pool_strdup(c->pool, s.s) : "0";
  if (s.oom) c->oom = 1;
  str_free(&s);
  return r;
}

/* The operand's compute dtype: where's and masked_fill's masks are bools.
   Eager's CPU kernels for float16 and bfloat16 take some scalars in float
   (their opmath type) without rounding them to the tensor's dtype: mul's
   and div's (all rounding modes) second operand where it is a number or a
   0-dim tensor, and the number parameters of lerp, addcmul, addcdiv,
   leaky_relu, elu and softplus.  So x * 2**31 is 0 for x = 0 in float16, not
   0 * inf.  add, sub, remainder, fmod, pow and the comparisons round theirs
   on the CPU; on CUDA, add and sub take theirs in float too. */
static int operand_cdtype(const Target *t, const Graph *g, const Node *n, int i) {
  if ((n->form == F_WHERE && i == 0) || (n->form == F_MASKFILL && i == 1)) return EMBER_BOOL;
  if (n->cdtype != EMBER_F16 && n->cdtype != EMBER_BF16) return n->cdtype;
  const Operand *o = &n->opnd[i];
  int scalar = o->v < 0 || g->values[o->v]->ndim == 0;  /* a number or a 0-dim tensor */
  switch (n->op) {
  case OP_MUL: case OP_MUL_S: case OP_DIV: case OP_DIV_S: case OP_TRUEDIV: case OP_TRUEDIV_S: case OP_DIV_MODE:
  case OP_DIV_SMODE: case OP_FLOORDIV:
    return i == 1 && scalar ? EMBER_F32 : n->cdtype;
  /* CUDA's add and sub take such a scalar in float as well (their opmath kernels); the CPU's round it */
  case OP_ADD: case OP_ADD_S: case OP_SUB: case OP_SUB_S: case OP_RSUB: case OP_RSUB_T:
    return t->eager_gpu && i == 1 && scalar ? EMBER_F32 : n->cdtype;
  case OP_LERP_S: case OP_ADDCMUL: case OP_ADDCDIV: case OP_LEAKY_RELU: case OP_ELU: case OP_SOFTPLUS:
    return o->v < 0 ? EMBER_F32 : n->cdtype;
  }
  return n->cdtype;
}

/* Is node n's result, computed in its compute type, always a value of
   dtype dt already (one of its operands, each a value of dt, or 0/1), so
   that it needs no narrow()? */
static int result_in_dtype(const Node *n, int dt) {
  switch (n->form) {
  case F_CMP: case F_LOGIC: case F_UPRED: case F_ULOGIC: case F_CAST: case F_COPY: case F_WHERE: case F_MASKFILL:
  case F_CLAMP: case F_NAN_TO_NUM:
    return 1;
  }
  switch (n->op) {
  case OP_CLONE: case OP_ALIAS_COPY: case OP_LIFT: case OP_MAXIMUM: case OP_MINIMUM: case OP_FMAX: case OP_FMIN:
  case OP_CLAMP_MIN: case OP_CLAMP_MAX: case OP_CLAMP_MIN_T: case OP_CLAMP_MAX_T: case OP_RELU: case OP_THRESHOLD:
  case OP_HARDTANH:
    return 1;
  case OP_ABS: case OP_NEG: case OP_SIGN: case OP_SGN: case OP_FLOOR: case OP_CEIL: case OP_ROUND: case OP_TRUNC:
    return dtype_is_float(dt);  /* abs and neg of an integer's minimum wrap */
  }
  return 0;
}

/* A gather's checked index for source dim d: the index tensor's value,
   counted from the end where negative (index.Tensor), and 0 with
   ember_index_error set where it is out of range, so the read that follows
   stays inside the source whatever the data. */
/* A gather's bound for source dim d as C: the constant as before, or the
   size expression (the call's value) in a symbolic graph. */
static const char *gather_bound(Cg *c, const Node *n, int d) {
  const Expr *e = n->sgsize[d];
  if (e->kind == E_CONST) return cg_fmt(c, "%lldLL", (long long)e->c);
  return cg_fmt(c, "((int64_t)(%s))", cg_size(c, e));
}

static const char *gather_check(Cg *c, const Node *n, int d, Expr **idx) {
  const Value *in = c->g->values[n->gidx[-1 - n->gmap[d]]];
  Expr *sub[MAXD];
  gather_index(&c->x, n, in, idx, sub);
  const char *i = cg_value(c, in->id, sub);
  const char *key = cg_fmt(c, "G%d.%d@%s", n->id, d, i);
  const char *t = cse_find(c, key);
  if (t) return t;
  c->g->index_checks = 1;
  c->k->index_checks = 1;
  t = cg_temp(c, EMBER_I64, cg_fmt(c, "em_index%s(%s, %s, %lldLL)", n->gwrap ? "_wrap" : "", i,
                                gather_bound(c, n, d), (long long)gather_error_code(n, d)),
           cg_fmt(c, "%s: index into dim %d", n->name, d));
  cg_cse_put(c, key, t);
  return t;
}

/* A cat reads each of its inputs at the element's index clamped into that
   input and keeps the one whose range holds it: no branch, but as many reads
   per element as inputs.  Past CAT_BRANCHES inputs (densenet's cats have up
   to 32) the CPU code branches instead: an if / else-if chain over the cat
   dim's index, each branch reading its own input only (densenet121's
   kernels take a third less time).  On CUDA too, where it also pays: the
   branch is
   uniform over a block in a row kernel (one row, one cat index, densenet's
   BatchNorm statistics over a cat) and over most warps in a pointwise one;
   a vector load hoisted before the lanes stays unconditional, and a
   row-cache register filled in a branch is read back in the same branch
   (the same element takes the same branch in every stage). */
enum { CAT_BRANCHES = 4 };

static int cat_branchy(const Cg *c, const Node *n) {
  int m = 0;
  for (int i = 0; i < n->ncat; i++) m += c->g->values[n->cat_in[i]]->ssize[n->cat_dim]->hi > 0;
  return m > CAT_BRANCHES;
}

/* Cat n's input i (starting at start along the cat dim, a size expression)
   at the element idx, its index clamped into the input, in v's dtype. */
static const char *cat_read(Cg *c, const Node *n, const Value *v, Expr **idx, int i, Expr *start) {
  const Value *in = c->g->values[n->cat_in[i]];
  int d = n->cat_dim;
  Expr *sub[MAXD];
  for (int k = 0; k < v->ndim; k++) sub[k] = idx[k];
  sub[d] = cat_index(&c->x, idx[d], start, in->ssize[d]);
  return conv(c, cg_value(c, in->id, sub), in->dtype, v->dtype);
}

/* An input's end along the cat dim as C: the number, or the size expression. */
static const char *cat_end(Cg *c, const Expr *end) {
  return end->kind == E_CONST ? cg_fmt(c, "%lld", (long long)end->c) : cg_size(c, end);
}

/* The chain of branches.  Where the target emits several lanes' code at
   once and the cat dim's index is the same in all of them (CUDA's lanes:
   densenet's BatchNorm over a cat along channels, the lanes stepping along
   a row of one channel), lane 0's chain reads the element of every lane
   and names the other lanes' values for their turn: one chain per group
   instead of one per lane, which halves NVRTC's time for such kernels
   (most of densenet121 training's compile). */
static const char *cat_branches(Cg *c, const Node *n, const Value *v, Expr **idx) {
  Graph *g = c->g;
  int d = n->cat_dim, last = -1;
  for (int i = 0; i < n->ncat; i++)
    if (g->values[n->cat_in[i]]->ssize[d]->hi > 0) last = i;
  const char *id = cg_expr(c, idx[d]);
  int lanes = 1;
  if (c->t->cat_lanes) {
    lanes = c->t->cat_lanes(c, cg_subst(c, idx[d]));
  }
  const char *r[CG_MAX_LANES];
  for (int u = 0; u < lanes; u++) {
    r[u] = cg_fmt(c, "t%d", c->ntemp++);
    cg_line(c, "%s %s;", cg_compute_ctype(v->dtype), r[u]);
  }
  int scope = c->ncse;
  Expr *start = ex_const(&c->x, 0);
  int first = 1;
  for (int i = 0; i <= last; i++) {
    const Expr *len = g->values[n->cat_in[i]]->ssize[d];
    if (len->hi == 0) continue;  /* an empty input */
    Expr *end = ex_add(&c->x, start, g->values[n->cat_in[i]]->ssize[d]);
    if (first) cg_line(c, "if ((%s) < %s) {", id, cat_end(c, end));
    else if (i < last) cg_line(c, "} else if ((%s) < %s) {", id, cat_end(c, end));
    else cg_line(c, "} else {");
    first = 0;
    c->indent++;
    for (int u = 0; u < lanes; u++) {
      if (lanes > 1) c->t->set_lane(c, u);
      cg_line(c, "%s = %s;", r[u], cat_read(c, n, v, idx, i, start));
    }
    if (lanes > 1) c->t->set_lane(c, 0);
    c->indent--;
    c->ncse = scope;  /* what a branch named is out of scope after it */
    start = end;
  }
  cg_line(c, "}");
  if (lanes > 1) {  /* lane u's walk finds its value under its own key; lane 0's goes on */
    for (int u = 1; u < lanes; u++) cg_cse_put(c, idx_key(c, "v", v->id, idx, v->ndim, u), r[u]);
  }
  return r[0];
}

/* Where the cat dim's index (its loop's substitution applied) lies within
   one input's range, that input alone: *e its read, 1.  This is the case in
   each range of a loop split at the cat's boundaries (codegen_c.c); else
   the target is told of the cat (cat_seen: the C target notes the
   boundaries of a cat along the loop it may split). */
static int cat_one(Cg *c, const Node *n, const Value *v, Expr **idx, const char **e) {
  int d = n->cat_dim;
  Expr *at = cg_subst(c, idx[d]);
  Expr *start = ex_const(&c->x, 0);
  for (int i = 0; i < n->ncat; i++) {
    Expr *len = c->g->values[n->cat_in[i]]->ssize[d], *end = ex_add(&c->x, start, len);
    int inside;
    if (start->kind == E_CONST && len->kind == E_CONST)
      inside = len->c > 0 && at->lo >= start->c && at->hi < end->c;
    else {  /* proved for every size */
      int lo = ex_cmp(&c->x, at, start);
      inside = (lo == EX_EQ || lo == EX_GE || lo == EX_GT) && ex_cmp(&c->x, at, end) == EX_LT;
    }
    if (inside) {
      *e = cat_read(c, n, v, idx, i, start);
      return 1;
    }
    start = end;
  }
  if (c->t->cat_seen) c->t->cat_seen(c, n, at);
  return 0;
}

/* A scatter's element: src's where idx lies in src's place, else the input's
   (both are read, as cat reads all its inputs, so the code has no branch). */
static const char *cg_scatter(Cg *c, const Value *v, Expr **idx) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in], *src = c->g->values[n->scat_src];
  Expr *sidx[MAXD];
  Bound cond[SCATTER_MAX_BOUNDS];
  int nc = scatter_index(c->g, &c->x, n, idx, sidx, cond);
  const char *a = nc >= 0 ? conv(c, cg_value(c, src->id, sidx), src->dtype, v->dtype) : NULL;
  const char *b = nc != 0 ? conv(c, cg_value(c, in->id, idx), in->dtype, v->dtype) : NULL;
  if (nc <= 0) return nc == 0 ? a : b;
  Str s = {0};
  for (int i = 0; i < nc; i++) {
    const char *e = cg_expr(c, cond[i].e);
    if (i) str_puts(&s, " && ");
    if (cond[i].hx) {  /* 0 <= e <= a size expression */
      const char *h = cg_expr(c, cond[i].hx);
      if (cond[i].e->lo >= 0) str_printf(&s, "(%s) <= (%s)", e, h);
      else str_printf(&s, "(%s) >= 0 && (%s) <= (%s)", e, e, h);
    } else if (cond[i].lo == cond[i].hi) str_printf(&s, "(%s) == %lld", e, (long long)cond[i].lo);
    else if (cond[i].e->lo >= cond[i].lo) str_printf(&s, "(%s) <= %lld", e, (long long)cond[i].hi);
    else if (cond[i].e->hi <= cond[i].hi) str_printf(&s, "(%s) >= %lld", e, (long long)cond[i].lo);
    else str_printf(&s, "(%s) >= %lld && (%s) <= %lld", e, (long long)cond[i].lo, e, (long long)cond[i].hi);
  }
  const char *r = cg_fmt(c, "((%s) ? %s : %s)", s.s ? s.s : "1", a, b);
  if (s.oom) c->oom = 1;
  str_free(&s);
  return r;
}

int cg_along_row(const Kernel *k, const Expr *e) {
  for (int d = 0; d < k->ndim; d++)
    if ((k->rmask >> d & 1) && (k->size[d] > 1 || k->symbolic) && ex_uses_var(e, d)) return 1;
  return 0;
}

/* Compute value v (not a view) from its definition at logical index idx. */
const char *cg_def(Cg *c, const Value *v, Expr **idx) {
  Graph *g = c->g;
  const Node *n = v->def;
  const char *key = idx_key(c, "v", v->id, idx, v->ndim, cur_lane(c, idx, v->ndim));
  const char *t = cse_find(c, key);
  if (t) return t;
  if (c->t->def_find && (t = c->t->def_find(c, v, key))) {
    t = cg_temp(c, v->dtype, t, cg_fmt(c, "%s, kept", n->name));
    cg_cse_put(c, key, t);
    return t;
  }
  const char *e = "0";
  Expr *sub[MAXD];
  switch (n->form) {
  case F_FULL: e = literal(c, n->opnd[0].f, n->opnd[0].i, n->opnd[0].is_float, v->dtype); break;
  case F_ARANGE: {
    const char *i0 = v->ndim ? cg_expr(c, idx[0]) : "0";
    if (dtype_is_float(v->dtype))
      e = conv(c, cg_fmt(c, "(%.17g + (double)(%s) * %.17g)", n->fill, i0, n->step), EMBER_F64, v->dtype);
    else
      e = conv(c, cg_fmt(c, "((int64_t)%lldLL + (int64_t)(%s) * (int64_t)%lldLL)", (long long)n->fill, i0,
                      (long long)n->step), EMBER_I64, v->dtype);
    break;
  }
  case F_CAT: {
    if (cat_one(c, n, v, idx, &e)) break;
    if (cat_branchy(c, n)) {
      e = cat_branches(c, n, v, idx);
      break;
    }
    /* every input (a fixed 64 here once dropped the inputs past the 64th) */
    int d = n->cat_dim;
    Expr *start = ex_const(&c->x, 0);
    const char **vals = pool_alloc(c->pool, sizeof(char *) * (size_t)n->ncat);
    const char **ends = pool_alloc(c->pool, sizeof(char *) * (size_t)n->ncat);
    if (!vals || !ends) {
      c->oom = 1;
      break;
    }
    int m = 0;
    for (int i = 0; i < n->ncat; i++) {
      vals[m] = cat_read(c, n, v, idx, i, start);
      start = ex_add(&c->x, start, g->values[n->cat_in[i]]->ssize[d]);
      ends[m++] = cat_end(c, start);
    }
    const char *id = cg_expr(c, idx[d]);
    e = vals[m - 1];
    for (int i = m - 2; i >= 0; i--) e = cg_fmt(c, "((%s) < %s ? %s : %s)", id, ends[i], vals[i], e);
    break;
  }
  case F_PAD: {
    const Value *in = g->values[n->red_in];
    Str cond = {0};
    str_puts(&cond, "1");
    for (int k = 0; k < v->ndim; k++) sub[k] = idx[k];
    for (int i = 0; i < n->npad; i++) {
      int d = v->ndim - 1 - i;
      Expr *len = in->ssize[d], *shifted = ex_add(&c->x, idx[d], ex_const(&c->x, -n->pad[2 * i]));
      sub[d] = cat_index(&c->x, idx[d], ex_const(&c->x, n->pad[2 * i]), len);
      int inside = len->kind == E_CONST ? shifted->hi <= len->c - 1 : ex_cmp(&c->x, shifted, len) == EX_LT;
      if (shifted->lo < 0 || !inside) {
        const char *s = cg_expr(c, shifted);
        str_printf(&cond, " && (%s) >= 0 && (%s) < %s", s, s, cat_end(c, len));
      }
    }
    const char *x = conv(c, cg_value(c, in->id, sub), in->dtype, v->dtype);
    const char *fill = literal(c, n->fill, (int64_t)n->fill, !n->fill_is_int, v->dtype);
    e = cg_fmt(c, "((%s) ? %s : %s)", cond.s ? cond.s : "1", x, fill);
    if (cond.oom) c->oom = 1;
    str_free(&cond);
    break;
  }
  case F_GATHER: {
    /* the source at the checked indices, each a gathered variable named by its temp */
    const Value *src = g->values[n->red_in];
    int pushed = 0;
    for (int d = 0; d < n->gndim; d++) {
      if (n->gmap[d] >= 0) { sub[d] = idx[n->gmap[d]]; continue; }
      const char *t = gather_check(c, n, d, idx);
      int gv = ex_push_var_size(&c->x, n->sgsize[d]);
      EM_ASSERT(gv >= 0);  /* realize bounds the nesting */
      pushed++;
      c->names[gv] = t;
      sub[d] = ex_var(&c->x, gv);
    }
    e = cg_value(c, src->id, sub);
    while (pushed--) ex_pop_var(&c->x);
    break;
  }
  case F_FLIP: {
    const Value *in = g->values[n->red_in];
    flip_index(&c->x, n, v, idx, sub);
    e = conv(c, cg_value(c, in->id, sub), in->dtype, v->dtype);
    break;
  }
  case F_SCATTER: e = cg_scatter(c, v, idx); break;
  default: {
    const char *ops[6];
    for (int i = 0; i < n->nopnd; i++) {
      const Operand *o = &n->opnd[i];
      int cd = operand_cdtype(c->t, g, n, i);
      if (o->sz) {  /* a size: an integer as the call gives it, converted as a number literal is */
        Expr *m = ex_max_e(&c->x, o->sz, ex_mul(&c->x, o->sz, -1));
        c->numbers = c->numbers ? ex_max_e(&c->x, c->numbers, m) : m;
        ops[i] = dtype_is_float(cd) ? conv(c, cg_fmt(c, "((double)(%s))", cg_size(c, o->sz)), EMBER_F64, cd)
                                    : cg_fmt(c, "((int64_t)(%s))", cg_size(c, o->sz));
      } else if (o->v < 0) ops[i] = literal(c, o->f, o->i, o->is_float, cd);
      else {
        const Value *in = g->values[o->v];
        bcast_index(&c->x, in, v->ndim, idx, sub);
        ops[i] = conv(c, cg_value(c, in->id, sub), in->dtype, cd);
      }
    }
    int from = n->cdtype;
    /* predicates and comparisons yield bools whatever they compare */
    if (n->form == F_CMP || n->form == F_LOGIC || n->form == F_UPRED || n->form == F_ULOGIC) from = EMBER_BOOL;
    e = spell(c, n->spell, ops, n->nopnd);
    if (!result_in_dtype(n, from)) e = narrow(c, e, from);
    e = conv(c, e, from, v->dtype);
  }
  }
  if (n->form != F_FULL && n->form != F_ARANGE) c->nops++;
  t = cg_temp(c, v->dtype, e, cg_fmt(c, "%s = %s", n->name, n->opname));
  cg_cse_put(c, key, t);
  if (c->t->def_keep) c->t->def_keep(c, v, key, t);
  return t;
}

/* Names by position in the kernel, not by value id, so that two kernels
   that compute the same thing on alike data have the same text (build_cuda.c
   compiles it once): a parameter is p<n>, the n-th value the kernel reads or
   writes; an accumulator (and its NaN flag, its index) a<n> (n<n>, j<n>),
   the n-th reduction it starts. */
const char *cg_param(Cg *c, int vid) {
  if (!c->slot[vid]) c->slot[vid] = ++c->nslot;
  return cg_fmt(c, "p%d", c->slot[vid] - 1);
}

int cg_acc(Cg *c, int vid) {
  if (!c->acc[vid]) c->acc[vid] = ++c->nacc;
  return c->acc[vid] - 1;
}

int cg_params(Cg *c, int *vids) {
  int n = 0;
  for (int v = 0; v < c->g->nvalues; v++)
    if (c->slot[v]) vids[c->slot[v] - 1] = v, n++;
  return n;
}

void cg_begin(Cg *c, Kernel *k, Str *body) {
  c->k = k;
  c->body = body;
  c->ncse = 0;
  c->ntemp = 0;
  c->divmods = 0;
  c->numbers = NULL;
  c->nslot = c->nacc = 0;
  memset(c->used, 0, c->g->nvalues);
  memset(c->slot, 0, sizeof(int) * (size_t)c->g->nvalues);
  memset(c->acc, 0, sizeof(int) * (size_t)c->g->nvalues);
  memset(c->sub, 0, sizeof c->sub);
  kernel_vars(&c->x, k);
  c->x.nvars = 2 * MAXD;
}

const char *cg_value(Cg *c, int vid, Expr **idx) {
  Graph *g = c->g;
  const Value *v = g->values[vid];
  if (v->root != vid) {
    const Value *r = g->values[v->root];
    Expr *addr = value_addr(g, &c->x, v, idx);
    if (r->materialized) return cg_load(c, r, addr);
    Expr *ridx[MAXD];
    for (int d = 0; d < r->ndim; d++) {
      if (r->symbolic)  /* dense (fuse.c, value_dense_sym): its strides are at least 1 */
        ridx[d] = r->ssize[d]->kind == E_CONST && r->ssize[d]->c <= 1 ? ex_const(&c->x, 0)
                : ex_mod_e(&c->x, ex_div_e(&c->x, addr, r->sstride[d]), r->ssize[d]);
      else
        ridx[d] = r->size[d] <= 1 || r->stride[d] <= 0 ? ex_const(&c->x, 0)
                : ex_mod(&c->x, ex_div(&c->x, addr, r->stride[d]), r->size[d]);
    }
    return cg_value(c, r->id, ridx);
  }
  if (v->materialized) return cg_load(c, v, value_addr(g, &c->x, v, idx));
  return cg_def(c, v, idx);
}

void cg_store(Cg *c, const Value *v, Expr **idx, const char *t) {
  Expr *addr = value_addr(c->g, &c->x, v, idx);
  const char *a = cg_expr(c, addr);
  if (v->local) {  /* kept in a register: later stages read the temp */
    cg_cse_put(c, cg_fmt(c, "L%d@%s", v->id, a), t);
    return;
  }
  c->used[v->id] |= 2;
  const char *p = cg_param(c, v->id);
  if (!c->t->store || !c->t->store(c, v, addr, a, t))
    cg_line(c, "%s[%s] = %s;", p, a, cg_store_conv(c, t, v->dtype));
  cg_cse_put(c, cg_fmt(c, "L%d@%s", v->id, a), t);
}

/* ---- reductions ---- */
int cg_acc_dtype(Cg *c, const Node *n, const Value *in) {
  switch (n->red) {
  case R_SUM: case R_MEAN: case R_PROD:
    /* sum(x, dtype=int64) is x.to(int64).sum(): each element truncated first */
    if (!dtype_is_float(n->cdtype)) return EMBER_I64;
    if (c->t->eager_gpu && (dtype_is_float(in->dtype) || dtype_is_float(n->cdtype)))
      return in->dtype == EMBER_F64 || n->cdtype == EMBER_F64 ? EMBER_F64 : EMBER_F32;  /* as eager on GPUs */
    return dtype_is_float(in->dtype) || dtype_is_float(n->cdtype) ? EMBER_F64 : EMBER_I64;
  case R_ANY: case R_ALL: return EMBER_BOOL;
  default: return in->dtype;
  }
}

const char *cg_red_clause(const Node *n) {
  switch (n->red) {
  case R_SUM: case R_MEAN: return "+";
  case R_PROD: return "*";
  case R_ANY: return "|";
  case R_ALL: return "&";
  case R_MAX: return "max";
  case R_MIN: return "min";
  default: return NULL;
  }
}

void cg_red_init(Cg *c, const Value *v) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in];
  int ad = cg_acc_dtype(c, n, in);
  const char *ct = cg_compute_ctype(ad);
  int fl = dtype_is_float(ad);
  const char *init = "0";
  switch (n->red) {
  case R_SUM: case R_MEAN: case R_ANY: init = "0"; break;
  case R_PROD: case R_ALL: init = "1"; break;
  case R_MAX: case R_ARGMAX: init = fl ? "-INFINITY" : "INT64_MIN"; break;
  case R_MIN: case R_ARGMIN: init = fl ? "INFINITY" : "INT64_MAX"; break;
  }
  int id = cg_acc(c, v->id);
  cg_line(c, "%s a%d = %s;  /* %s = %s */", ct, id, init, n->name, n->opname);
  if ((n->red == R_MAX || n->red == R_MIN) && fl) cg_line(c, "int64_t n%d = 0;", id);
  if (n->red == R_ARGMAX || n->red == R_ARGMIN) cg_line(c, "int64_t j%d = 0;", id);
}

void cg_red_update(Cg *c, const Value *v) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in];
  int ad = cg_acc_dtype(c, n, in);
  Expr *idx[MAXD];
  for (int d = 0; d < c->k->ndim; d++) idx[d] = ex_var(&c->x, d);
  const char *x = cg_value(c, in->id, idx);
  /* an integer sum or product of floats: each element converted as torch
     casts it to the result's dtype (through int32 for the narrow ones) */
  if ((n->red == R_SUM || n->red == R_PROD) && dtype_is_float(in->dtype) && !dtype_is_float(n->cdtype))
    x = conv(c, x, in->dtype, n->cdtype);
  const char *xa = conv(c, x, dtype_is_float(in->dtype) && !dtype_is_float(n->cdtype) ? n->cdtype : in->dtype, ad);
  int fl = dtype_is_float(ad), id = cg_acc(c, v->id);
  switch (n->red) {
  case R_SUM: case R_MEAN: cg_line(c, "a%d += %s;", id, xa); break;
  case R_PROD: cg_line(c, "a%d *= %s;", id, xa); break;
  case R_ANY: cg_line(c, "a%d |= (%s) != 0;", id, x); break;
  case R_ALL: cg_line(c, "a%d &= (%s) != 0;", id, x); break;
  case R_MAX: case R_MIN:
    cg_line(c, "a%d = %s %s a%d ? %s : a%d;", id, xa, n->red == R_MAX ? ">" : "<", id, xa, id);
    if (fl) cg_line(c, "n%d |= %s != %s;", id, xa, xa);
    break;
  case R_ARGMAX: case R_ARGMIN: {
    /* the linear index over the reduced dims, in their order */
    Expr *lin = ex_const(&c->x, 0);
    for (int d = 0; d < c->k->ndim; d++)
      if (n->rmask >> d & 1) lin = ex_add(&c->x, ex_mul(&c->x, lin, c->k->size[d]), idx[d]);  /* static: lower.c */
    const char *cmp = n->red == R_ARGMAX ? ">" : "<";
    if (fl)
      cg_line(c, "if (a%d == a%d && (%s != %s || %s %s a%d)) { a%d = %s; j%d = %s; }", id, id, xa, xa, xa, cmp,
           id, id, xa, id, cg_expr(c, lin));
    else
      cg_line(c, "if (%s %s a%d) { a%d = %s; j%d = %s; }", xa, cmp, id, id, xa, id, cg_expr(c, lin));
    break;
  }
  }
}

void cg_red_finish(Cg *c, const Value *v) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in];
  int ad = cg_acc_dtype(c, n, in);
  if (c->t->red_combine) c->t->red_combine(c, v, ad);
  int id = cg_acc(c, v->id);
  const char *r = cg_fmt(c, "a%d", id);
  int from = ad;
  switch (n->red) {
  case R_MEAN: {
    if (c->k->symbolic) {  /* the count at the call's sizes */
      Expr *cnt = ex_const(&c->x, 1);
      for (int d = 0; d < c->k->ndim; d++)
        if (n->rmask >> d & 1) cnt = ex_mul_e(&c->x, cnt, c->k->ssize[d]);
      r = cg_fmt(c, "(a%d / (double)(%s))", id, cg_size(c, cnt));
      from = EMBER_F64;
      break;
    }
    int64_t cnt = 1;
    for (int d = 0; d < c->k->ndim; d++)
      if (n->rmask >> d & 1) cnt *= c->k->size[d];
    r = cg_fmt(c, "(a%d / (double)%lld)", id, (long long)cnt);
    from = EMBER_F64;
    break;
  }
  case R_MAX: case R_MIN:
    if (dtype_is_float(ad)) r = cg_fmt(c, "(n%d ? (%s)NAN : a%d)", id, cg_compute_ctype(ad), id);
    break;
  case R_ARGMAX: case R_ARGMIN: r = cg_fmt(c, "j%d", id); from = EMBER_I64; break;
  default: break;
  }
  const char *t = cg_temp(c, v->dtype, conv(c, r, from, v->dtype), NULL);
  Expr *oidx[MAXD];
  item_index(&c->x, c->k, v, IT_REDUCE, oidx);
  cg_store(c, v, oidx, t);
}

/* ---- kernels ---- */
typedef struct DepCk { Graph *g; const int *red; int nred; int hit; } DepCk;
static void dep_read(void *ud, int r, Expr *addr) {
  DepCk *d = ud;
  for (int i = 0; i < d->nred; i++)
    if (d->red[i] == r) d->hit = 1;
}

int cg_stage_end(Cg *c, const Kernel *k, int i) {
  int red[64], nred = 0, j = i;
  /* a stage ends at 64 reductions: the next item may read any of them */
  while (j < k->nitems && k->items[j].kind != IT_OUTER && nred < 64 &&
         !cg_reads_stage_reduce(c, &k->items[j], red, nred)) {
    if (k->items[j].kind == IT_REDUCE) red[nred++] = k->items[j].v;
    j++;
  }
  return j;
}

int cg_reads_stage_reduce(Cg *c, const Item *it, const int *stage_red, int nred) {
  if (!nred) return 0;
  DepCk d = {c->g, stage_red, nred, 0};
  const Value *v = c->g->values[it->v];
  const Node *n = v->def;
  Expr *idx[MAXD];
  for (int k = 0; k < c->k->ndim; k++) idx[k] = ex_var(&c->x, k);
  if (it->kind == IT_REDUCE) {
    walk_reads(c->g, &c->x, n->red_in, idx, dep_read, &d);
    return d.hit;
  }
  /* a store: walk its operands */
  walk_def_reads(c->g, &c->x, v->id, idx, dep_read, &d);
  return d.hit;
}

/* Sorts n items (each `size` bytes, at most a Loop) by st[], largest first,
   stable, permuting st with them: the loop orders below put the dim of
   largest stride outermost.  An unknown stride is INT64_MAX (outermost). */
static void sort_by_stride(int64_t *st, void *items, size_t size, int n) {
  char *it = items, t[sizeof(Loop) > sizeof(int) ? sizeof(Loop) : sizeof(int)];
  EM_ASSERT(size <= sizeof t);
  for (int i = 1; i < n; i++)  /* insertion sort */
    for (int j = i; j > 0 && st[j - 1] < st[j]; j--) {
      memcpy(t, it + (size_t)j * size, size);
      memcpy(it + (size_t)j * size, it + (size_t)(j - 1) * size, size);
      memcpy(it + (size_t)(j - 1) * size, t, size);
      int64_t u = st[j];
      st[j] = st[j - 1], st[j - 1] = u;
    }
}

/* |d| where d is a constant step, else INT64_MAX. */
static int64_t step_of(const Expr *d) { return d->kind == E_CONST ? (d->c < 0 ? -d->c : d->c) : INT64_MAX; }

/* The largest tensor a kernel's first reduction reads, and where (a ReadFn). */
typedef struct BigRead { Graph *g; int64_t bytes; Expr *addr; } BigRead;
static void big_read(void *ud, int r, Expr *addr) {
  BigRead *t = ud;
  const Value *v = t->g->values[r];
  int64_t b = v->numel * (int64_t)dtype_size(v->dtype);
  if (b > t->bytes) t->bytes = b, t->addr = addr;
}

/* dims sorted by their steps in addr (over the kernel's dims), largest
   first (stable).  Each dim's step at the origin: an address read through a
   view of an inlined value, with divisions the simplifier keeps, has no
   constant step; its step at 0 still tells the order. */
static void sort_dims_by_steps(Cg *c, const Kernel *k, Expr *addr, int *dims, int nd) {
  Expr *at0 = addr;
  for (int d = 0; d < k->ndim; d++) at0 = ex_subst(&c->x, at0, d, ex_const(&c->x, 0));
  int64_t st[MAXD];
  for (int i = 0; i < nd; i++) {
    Expr *a = addr;
    for (int d = 0; d < k->ndim; d++) a = ex_subst(&c->x, a, d, ex_const(&c->x, d == dims[i]));
    st[i] = step_of(ex_add(&c->x, a, ex_mul(&c->x, at0, -1)));
  }
  sort_by_stride(st, dims, sizeof *dims, nd);
}

/* On a GPU, a reduction's reduced dims in the order of its largest input's
   strides, largest first (stable), so that its rows are read along
   consecutive addresses: GroupNorm's statistics over [C, H*W] of an NHWC
   activation (layout.c) read C innermost, not H*W, where consecutive
   elements were C apart.  A sum's order of terms changes, not its terms. */
static void order_reduced(Cg *c, const Kernel *k, int *dims, int nd) {
  if (nd < 2 || k->symbolic || c->g->target != EMBER_CUDA) return;
  const Value *red = NULL;
  for (int i = 0; i < k->nitems && !red; i++)
    if (k->items[i].kind == IT_REDUCE) red = c->g->values[k->items[i].v];
  if (!red) return;
  Expr *idx[MAXD];
  for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(&c->x, d);
  BigRead t = {c->g, 0, NULL};
  walk_reads(c->g, &c->x, red->def->red_in, idx, big_read, &t);
  if (t.addr) sort_dims_by_steps(c, k, t.addr, dims, nd);
}

/* The address, over the kernel's dims, of the value whose layout orders
   its outer loops (cg_order_loops), or NULL. */
static Expr *order_addr(Cg *c, const Kernel *k, int rows) {
  /* a pointwise kernel's first store; a reduction's first result where each
     thread computes whole rows (CUDA's short rows: ordered as a pointwise
     kernel over the results, so that a thread's neighbours write, and
     mostly read, next to it) */
  int kind = k->rmask ? IT_REDUCE : IT_STORE;
  if (k->rmask && !rows) return NULL;
  const Value *v = NULL, *any = NULL;
  for (int i = 0; i < k->nitems && !v; i++) {
    const Value *w = c->g->values[k->items[i].v];
    if (k->items[i].kind != kind) continue;
    if (!any) any = w;
    if (!w->local) v = w;
  }
  /* short rows whose results live in registers (a 2x2 average pool's sum,
     divided and cast before its store): ordered by the first value stored
     after them, whose layout (NHWC) the local result's contiguous strides
     do not tell */
  for (int i = 0; i < k->nitems && !v && k->rmask; i++) {
    const Value *w = c->g->values[k->items[i].v];
    if ((k->items[i].kind == IT_OUTER || k->items[i].kind == IT_STORE) && !w->local) kind = k->items[i].kind, v = w;
  }
  if (!v) v = any;
  if (!v) return NULL;
  Expr *idx[MAXD];
  item_index(&c->x, k, v, kind, idx);
  return value_addr(c->g, &c->x, v, idx);
}

/* On a GPU, a pointwise kernel's dims in the order of its first store's
   strides, largest first (stable), before loops are merged: dims next to
   each other in memory merge, whatever their order in the shape.  An NHWC
   activation's N and H*W merge into one loop, C innermost; in a symbolic
   kernel the merged index needs no 64-bit division by a size per element.
   cg_order_loops then finds them in order. */
static void order_outer(Cg *c, const Kernel *k, int *dims, int nd) {
  if (nd < 2 || k->rmask || c->g->target != EMBER_CUDA) return;
  Expr *addr = order_addr(c, k, 0);
  if (addr) sort_dims_by_steps(c, k, addr, dims, nd);
}

/* The loops of one class of dims (outer or reduced), merging a dim into the
   next one of its class where bit d of `merge` is set. */
int cg_loops(Cg *c, const Kernel *k, int reduced, uint32_t merge, Loop *loops) {
  int dims[MAXD], nd = 0, nl = 0;
  for (int d = 0; d < k->ndim; d++)
    if (k->size[d] != 1 && !!(k->rmask >> d & 1) == reduced) dims[nd++] = d;
  if (reduced) order_reduced(c, k, dims, nd);
  else order_outer(c, k, dims, nd);
  for (int i = 0; i < nd;) {
    int j = i;
    while (j + 1 < nd && (merge >> dims[j] & 1)) j++;
    loops[nl].sn = NULL;
    if (j == i) {
      loops[nl].var = dims[i], loops[nl].n = k->size[dims[i]];
      if (k->symbolic && k->ssize[dims[i]]->kind != E_CONST) loops[nl].sn = k->ssize[dims[i]];
    } else if (k->symbolic) {  /* the same with size expressions: the simplifier folds the indices back */
      int var = MAXD + dims[i];
      Expr *n = ex_const(&c->x, 1);
      for (int t = i; t <= j; t++) n = ex_mul_e(&c->x, n, k->ssize[dims[t]]);
      ex_set_size(&c->x, var, n);
      Expr *L = ex_var(&c->x, var);
      for (int t = i; t <= j; t++) {
        Expr *inner = ex_const(&c->x, 1);  /* the sizes of the dims inside dim t */
        for (int u = t + 1; u <= j; u++) inner = ex_mul_e(&c->x, inner, k->ssize[dims[u]]);
        Expr *e = ex_div_e(&c->x, L, inner);
        c->sub[dims[t]] = t == i ? e : ex_mod_e(&c->x, e, k->ssize[dims[t]]);
      }
      loops[nl].var = var;
      loops[nl].n = n->kind == E_CONST ? n->c : -1;
      loops[nl].sn = n->kind == E_CONST ? NULL : n;
    } else {
      int var = MAXD + dims[i];
      c->x.vsize[var] = NULL;  /* a symbolic kernel's merge before may have set it */
      int64_t n = 1;
      for (int t = i; t <= j; t++) n *= k->size[dims[t]];
      c->x.vhi[var] = n - 1;
      Expr *L = ex_var(&c->x, var);
      int64_t inner = n;
      for (int t = i; t <= j; t++) {
        inner /= k->size[dims[t]];
        Expr *e = ex_div(&c->x, L, inner);
        c->sub[dims[t]] = t == i ? e : ex_mod(&c->x, e, k->size[dims[t]]);
      }
      loops[nl].var = var, loops[nl].n = n;
    }
    nl++;
    i = j + 1;
  }
  return nl;
}


/* A pointwise kernel's loops, outermost to innermost in the order of its
   first stored value's strides (largest first), so that a value laid out
   other than row-major (channels-last activations, layout.c) is still
   written, and its like read, along consecutive addresses.  A value kept in
   a register (local: plan.c) has no memory and does not count.  A row-major
   value keeps the loops as they are: the sort is stable and only moves a
   loop past a larger stride. */
void cg_order_loops(Cg *c, const Kernel *k, Loop *loops, int n, int rows) {
  if (n < 2) return;
  Expr *addr = order_addr(c, k, rows);
  if (!addr) return;
  addr = cg_subst(c, addr);
  int64_t st[EX_MAXVARS];
  for (int i = 0; i < n; i++) {
    int var = loops[i].var;
    Expr *next = ex_subst(&c->x, addr, var, ex_add(&c->x, ex_var(&c->x, var), ex_const(&c->x, 1)));
    st[i] = step_of(ex_add(&c->x, next, ex_mul(&c->x, addr, -1)));
  }
  sort_by_stride(st, loops, sizeof *loops, n);
}

/* One kernel's source: its loops merged, innermost first, as long as no
   index gains a division (each merge tried by generating the kernel again;
   such a trial has no alt, and a target may generate less for it). */
static void gen_kernel(Cg *c, Kernel *k, Str *out, Str *alt) {
  const Target *t = c->t;
  Str trial = {0};
  t->kernel(c, k, &trial, NULL, 0);
  long best = c->divmods;
  uint32_t merge = 0;
  int empty = 0;
  for (int d = 0; d < k->ndim; d++) empty |= k->size[d] == 0;
  /* the last dim too: ordered by strides (order_outer) it may not be the innermost loop */
  for (int d = k->ndim - 1; d >= 0 && !empty; d--) {
    if (k->size[d] == 1) continue;
    trial.len = 0;
    t->kernel(c, k, &trial, NULL, merge | 1u << d);
    if (c->divmods <= best && !c->oom) merge |= 1u << d, best = c->divmods;
  }
  str_free(&trial);
  t->kernel(c, k, out, alt, merge);
}

/* Kernel `id`'s text (or a CUDA kernel's unaligned variant's, or a C
   kernel's body function) without its comments
   (which name graph nodes and values; with the spaces before them) and
   without its own name (its entry points' names keep only what follows it,
   "_u", "_b1"): the code
   generator names everything else by position in the kernel (codegen.c,
   cg_param), so equal keys are equal code. */
int em_kernel_key(const char *s, size_t n, int id, char hex[65]) {
  Str b = {0};
  char name[32];
  int nl = snprintf(name, sizeof name, "ember_k%d", id);
  size_t i = 0, from = 0;
  while (i < n) {
    int comment = s[i] == '/' && i + 1 < n && s[i + 1] == '*';
    int own = !comment && (size_t)nl <= n - i && !strncmp(s + i, name, (size_t)nl) &&
              (i + nl == n || !isalnum((unsigned char)s[i + nl])) && (i == 0 || !isalnum((unsigned char)s[i - 1]));
    if (!comment && !own) {
      i++;
      continue;
    }
    str_printf(&b, "%.*s", (int)(i - from), s + from);
    if (own) {
      i += (size_t)nl;
    } else {  /* the comment and the spaces before it */
      while (b.len && b.s[b.len - 1] == ' ') b.s[--b.len] = 0;
      const char *end = strstr(s + i + 2, "*/");
      i = end && (size_t)(end - s) + 2 <= n ? (size_t)(end - s) + 2 : n;
    }
    from = i;
  }
  str_printf(&b, "%.*s", (int)(n - from), s + from);
  if (b.oom) { str_free(&b); return -1; }
  em_sha256_hex(b.s ? b.s : "", b.len, hex);
  str_free(&b);
  return 0;
}

/* The kernels are generated by threads, each taking the next kernel not yet
   taken, each with its own Cg and Pool: a kernel's source depends on the
   graph and the kernel alone (no state carries over from one kernel to the
   next, and the graph is only read), so the text is the same for any
   number of threads.  What a thread allocates (names, kernel parameters)
   joins the graph's pool at the end. */
typedef struct CgShare {
  Graph *g;
  const Target *t;
  Str *text;               /* per kernel */
  Str *alt;                /* per kernel: its unaligned and wide variants (CUDA), if any */
  int next;                /* the next kernel to take (__atomic) */
} CgShare;

typedef struct CgThread {
  CgShare *sh;
  Pool pool;
  int oom, stray;
} CgThread;

static void *cg_thread(void *arg) {
  CgThread *w = arg;
  CgShare *sh = w->sh;
  Graph *g = sh->g;
  Cg c = {0};
  c.g = g;
  c.t = sh->t;
  c.pool = &w->pool;
  c.x.pool = &w->pool;
  c.x.syms = &g->syms;
  for (int d = 0; d < MAXD; d++) c.names[d] = c.names[MAXD + d] = var_names[d];
  c.used = em_malloc(g->nvalues + 1);
  c.slot = em_malloc(sizeof(int) * (size_t)(g->nvalues + 1));
  c.acc = em_malloc(sizeof(int) * (size_t)(g->nvalues + 1));
  c.ts = c.t->state_new(&c);
  if (!c.used || !c.slot || !c.acc || !c.ts) c.oom = 1;
  for (;;) {
    int i = c.oom ? g->nkernels : __atomic_fetch_add(&sh->next, 1, __ATOMIC_RELAXED);
    if (i >= g->nkernels) break;
    if (!g->kernels[i]->lib) gen_kernel(&c, g->kernels[i], &sh->text[i], &sh->alt[i]);  /* a library call: no code */
  }
  free(c.used);
  free(c.slot);
  free(c.acc);
  free(c.cse);
  c.t->state_free(c.ts);
  w->oom = c.oom, w->stray = c.stray;
  return NULL;
}

int codegen(Graph *g, Str *out) {
  const Target *t = g->target == EMBER_CUDA ? &target_cuda : &target_c;
  str_puts(out, "/* Generated by ember: the kernels of one graph.  See the comments for\n"
                "   the FX nodes each line computes. */\n");
  str_puts(out, t->prelude());
  g->src_head = out->len;
  CgShare sh = {g, t, calloc((size_t)g->nkernels + 1, sizeof(Str)), calloc((size_t)g->nkernels + 1, sizeof(Str)), 0};
  /* threads: about 8 kernels each at least (a thread costs more than a small kernel) */
  int nt = em_fail_armed() ? 1 : em_compile_threads(&g->opt);
  if (nt > g->nkernels / 8) nt = g->nkernels / 8;
  if (nt < 1) nt = 1;
  CgThread *w = calloc((size_t)nt, sizeof *w);
  if (!sh.text || !sh.alt || !w) {
    free(sh.text), free(sh.alt), free(w);
    return graph_error(g, NULL, "out of memory in code generation");
  }
  pthread_t th[EM_MAX_THREADS];
  int started[EM_MAX_THREADS] = {0};
  for (int i = 0; i < nt; i++) w[i].sh = &sh;
  for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, cg_thread, &w[i]) == 0;
  cg_thread(&w[0]);  /* where a thread did not start, the others take its kernels */
  int oom = 0, stray = 0;
  for (int i = 0; i < nt; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    oom |= w[i].oom;
    if (!stray) stray = w[i].stray;
    pool_adopt(&g->pool, &w[i].pool);
  }
  free(w);
  for (int i = 0; i < g->nkernels; i++) g->kernels[i]->same_as = i;
  if (!oom && t->share && t->share(g, sh.text)) oom = 1;
  for (int i = 0; i < g->nkernels; i++) {
    Kernel *k = g->kernels[i];
    k->src_off = out->len;
    str_puts(out, sh.text[i].s ? sh.text[i].s : "");
    k->src_len = out->len - k->src_off;
    oom |= sh.text[i].oom;
    str_free(&sh.text[i]);
  }
  /* the variants after every kernel: compiled when a launch needs one (program.c) */
  int nalt = 0;
  for (int i = 0; i < g->nkernels; i++) {
    Kernel *k = g->kernels[i];
    k->alt_off = k->alt_len = 0;
    if (!sh.alt[i].len) continue;
    if (!nalt++)
      str_puts(out, "\n/* ---- The kernels' variants: each the kernel above with its unaligned path, or with\n"
                    "   64-bit indices, compiled when a launch first needs one ---- */\n");
    k->alt_off = out->len;
    str_puts(out, sh.alt[i].s);
    k->alt_len = out->len - k->alt_off;
    oom |= sh.alt[i].oom;
    str_free(&sh.alt[i]);
  }
  free(sh.text), free(sh.alt);
  if (oom || out->oom || g->pool.oom) return graph_error(g, NULL, "out of memory in code generation");
  if (stray) {
    const Value *v = g->values[stray - 1];
    return graph_error(g, v->def, "internal error in ember's code generator: %s (value v%d) is kept in a register "
                       "but read outside the loop that computes it", v->def ? v->def->name : "?", v->id);
  }
  return EMBER_OK;
}
