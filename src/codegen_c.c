/*
 * codegen_c.c - C source for the kernels of a fused graph (CPU, OpenMP).
 *
 * One function per kernel, `void ember_kN(void *const *p)`, where p[v] is the
 * base pointer of value v's storage.  A kernel is a loop nest over its space:
 * outer dims (parallel across threads), then its items in stages; a stage is
 * a loop nest over the reduced dims that computes reductions (accumulators
 * declared in the outer body) and full-shape stores.  Every value is computed
 * by walking its definition down to materialized values (loads), with common
 * subexpressions named once per scope.  Lines carry the FX node names, so the
 * source reads like the graph it came from.
 *
 * What it does not do: decide anything about fusion or storage (fuse.c,
 * plan.c did), or compile (build.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "prelude_gen.h"   /* em_prelude: the text of src/prelude.h */

#define PAR_MIN 16384      /* elements below which a kernel runs on one thread */

typedef struct Cse { const char *key, *name; } Cse;

typedef struct Cg {
  Graph *g;
  Pool *pool;
  ExprCtx x;
  Kernel *k;
  Str *body;               /* statements of the current kernel */
  int indent;
  int ntemp;
  Cse *cse; int ncse, cap;
  unsigned char *used;     /* per value: 1 read, 2 written */
  const char *names[2 * MAXD];  /* vars 0..7: the space's dims; 8+d: a merged loop starting at dim d */
  Expr *sub[MAXD];         /* a merged dim's index in terms of its loop's var, or NULL */
  long divmods;            /* divisions and modulos in the printed indices: what merging must not add */
  int oom;
} Cg;

typedef struct Loop { int var; int64_t n; } Loop;  /* one loop of a kernel's nest */

static const char *var_names[MAXD] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};

/* ---- types ---- */
static const char *storage_ctype(int dt) {
  switch (dt) {
  case EMBER_BOOL: case EMBER_U8: return "uint8_t";
  case EMBER_I8: return "int8_t";
  case EMBER_I16: return "int16_t";
  case EMBER_I32: return "int32_t";
  case EMBER_I64: return "int64_t";
  case EMBER_F16: return "em_half";
  case EMBER_BF16: return "uint16_t";
  case EMBER_F32: return "float";
  case EMBER_F64: return "double";
  }
  return "void";
}

static const char *compute_ctype(int dt) {
  if (dt == EMBER_F64) return "double";
  if (dtype_is_float(dt)) return "float";
  return "int64_t";
}

static char *fmt(Cg *c, const char *f, ...) __attribute__((format(printf, 2, 3)));
static char *fmt(Cg *c, const char *f, ...) {
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

/* A value of logical dtype `from` (held in its compute type) as dtype `to`. */
static const char *conv(Cg *c, const char *e, int from, int to) {
  if (from == to) return e;
  switch (to) {
  case EMBER_BOOL: return from == EMBER_BOOL ? e : fmt(c, "((int64_t)((%s) != 0))", e);
  case EMBER_I64: return dtype_is_float(from) ? fmt(c, "((int64_t)(%s))", e) : e;
  case EMBER_I32: case EMBER_I16: case EMBER_I8: case EMBER_U8:
    if (from == EMBER_BOOL) return e;
    if (dtype_is_float(from)) return fmt(c, "((int64_t)(%s)(int64_t)(%s))", storage_ctype(to), e);
    return fmt(c, "((int64_t)(%s)(%s))", storage_ctype(to), e);
  case EMBER_F64: return fmt(c, "((double)(%s))", e);
  case EMBER_F32:
    if (from == EMBER_F16 || from == EMBER_BF16) return e;
    return fmt(c, "((float)(%s))", e);
  case EMBER_F16: return fmt(c, "((float)(em_half)(%s))", e);
  case EMBER_BF16: return fmt(c, "em_bf16_to_f32(em_f32_to_bf16((float)(%s)))", e);
  }
  return e;
}

static const char *load_conv(Cg *c, const char *e, int dt) {
  switch (dt) {
  case EMBER_BF16: return fmt(c, "em_bf16_to_f32(%s)", e);
  case EMBER_F16: return fmt(c, "(float)%s", e);
  case EMBER_F32: case EMBER_F64: return e;
  default: return fmt(c, "(int64_t)%s", e);
  }
}

static const char *store_conv(Cg *c, const char *e, int dt) {
  switch (dt) {
  case EMBER_BF16: return fmt(c, "em_f32_to_bf16(%s)", e);
  case EMBER_F16: return fmt(c, "(em_half)(%s)", e);
  case EMBER_BOOL: return fmt(c, "(uint8_t)((%s) != 0)", e);
  case EMBER_F32: case EMBER_F64: return e;
  default: return fmt(c, "(%s)(%s)", storage_ctype(dt), e);
  }
}

static const char *literal(Cg *c, double f, int64_t i, int is_float, int dt) {
  const char *ct = compute_ctype(dt);
  if (!dtype_is_float(dt)) {
    if (dt == EMBER_BOOL) return (is_float ? f != 0 : i != 0) ? "((int64_t)1)" : "((int64_t)0)";
    return fmt(c, "((int64_t)%lldLL)", (long long)(is_float ? (int64_t)f : i));
  }
  double v = is_float ? f : (double)i;
  if (isnan(v)) return fmt(c, "((%s)NAN)", ct);
  if (isinf(v)) return fmt(c, "((%s)%sINFINITY)", ct, v < 0 ? "-" : "");
  const char *s = fmt(c, "((%s)%.17g)", ct, v);
  return conv(c, s, EMBER_F64, dt == EMBER_F64 ? EMBER_F64 : dt);
}

/* ---- statements and names ---- */
static void line(Cg *c, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void line(Cg *c, const char *f, ...) {
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

static void cse_put(Cg *c, const char *key, const char *name) {
  if (c->ncse == c->cap) {
    int cap = c->cap ? c->cap * 2 : 64;
    Cse *n = em_realloc(c->cse, sizeof(Cse) * cap);
    if (!n) { c->oom = 1; return; }
    c->cse = n, c->cap = cap;
  }
  c->cse[c->ncse].key = key, c->cse[c->ncse].name = name;
  c->ncse++;
}

static const char *expr_str(Cg *c, Expr *e) {
  for (int d = 0; d < MAXD; d++)
    if (c->sub[d]) e = ex_subst(&c->x, e, d, c->sub[d]);
  c->divmods += ex_count_divmod(e);
  Str s = {0};
  ex_print(&s, e, c->names);
  const char *r = s.s ? pool_strdup(c->pool, s.s) : "0";
  if (s.oom) c->oom = 1;
  str_free(&s);
  return r;
}

static const char *idx_key(Cg *c, const char *pre, int v, Expr **idx, int n) {
  Str s = {0};
  str_printf(&s, "%s%d@", pre, v);
  for (int d = 0; d < n; d++) {
    ex_print(&s, idx[d], c->names);
    str_puts(&s, ",");
  }
  const char *r = s.s ? pool_strdup(c->pool, s.s) : "";
  if (s.oom) c->oom = 1;
  str_free(&s);
  return r;
}

static const char *temp(Cg *c, int dt, const char *e, const char *comment) {
  const char *name = fmt(c, "t%d", c->ntemp++);
  if (comment) line(c, "%s %s = %s;  /* %s */", compute_ctype(dt), name, e, comment);
  else line(c, "%s %s = %s;", compute_ctype(dt), name, e);
  return name;
}

/* ---- values ---- */
static const char *emit_value(Cg *c, int vid, Expr **idx);

static const char *emit_load(Cg *c, const Value *r, Expr *addr) {
  const char *a = expr_str(c, addr);
  const char *key = fmt(c, "L%d@%s", r->id, a);
  const char *t = cse_find(c, key);
  if (t) return t;
  c->used[r->id] |= 1;
  t = temp(c, r->dtype, load_conv(c, fmt(c, "b%d[%s]", r->id, a), r->dtype), NULL);
  cse_put(c, key, t);
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

/* The operand's compute dtype: where's and masked_fill's masks are bools. */
static int operand_cdtype(const Node *n, int i) {
  if ((n->form == F_WHERE && i == 0) || (n->form == F_MASKFILL && i == 1)) return EMBER_BOOL;
  return n->cdtype;
}

/* Compute value v (not a view) from its definition at logical index idx. */
static const char *emit_def(Cg *c, const Value *v, Expr **idx) {
  Graph *g = c->g;
  const Node *n = v->def;
  const char *key = idx_key(c, "v", v->id, idx, v->ndim);
  const char *t = cse_find(c, key);
  if (t) return t;
  const char *e = "0";
  Expr *sub[MAXD];
  switch (n->form) {
  case F_FULL: e = literal(c, n->opnd[0].f, n->opnd[0].i, n->opnd[0].is_float, v->dtype); break;
  case F_ARANGE: {
    const char *i0 = v->ndim ? expr_str(c, idx[0]) : "0";
    if (dtype_is_float(v->dtype))
      e = conv(c, fmt(c, "(%.17g + (double)(%s) * %.17g)", n->fill, i0, n->step), EMBER_F64, v->dtype);
    else
      e = conv(c, fmt(c, "((int64_t)%lldLL + (int64_t)(%s) * (int64_t)%lldLL)", (long long)n->fill, i0,
                      (long long)n->step), EMBER_I64, v->dtype);
    break;
  }
  case F_CAT: {
    int d = n->cat_dim;
    int64_t start = 0;
    const char *vals[64];
    int64_t ends[64];
    int m = 0;
    for (int i = 0; i < n->ncat && m < 64; i++) {
      const Value *in = g->values[n->cat_in[i]];
      for (int k = 0; k < v->ndim; k++) sub[k] = idx[k];
      sub[d] = ex_min(&c->x, ex_max(&c->x, ex_add(&c->x, idx[d], ex_const(&c->x, -start)), 0), in->size[d] - 1);
      vals[m] = conv(c, emit_value(c, in->id, sub), in->dtype, v->dtype);
      start += in->size[d];
      ends[m++] = start;
    }
    const char *id = expr_str(c, idx[d]);
    e = vals[m - 1];
    for (int i = m - 2; i >= 0; i--) e = fmt(c, "((%s) < %lld ? %s : %s)", id, (long long)ends[i], vals[i], e);
    break;
  }
  case F_PAD: {
    const Value *in = g->values[n->red_in];
    Str cond = {0};
    str_puts(&cond, "1");
    for (int k = 0; k < v->ndim; k++) sub[k] = idx[k];
    for (int i = 0; i < n->npad; i++) {
      int d = v->ndim - 1 - i;
      Expr *shifted = ex_add(&c->x, idx[d], ex_const(&c->x, -n->pad[2 * i]));
      sub[d] = ex_min(&c->x, ex_max(&c->x, shifted, 0), in->size[d] - 1);
      if (shifted->lo < 0 || shifted->hi > in->size[d] - 1) {
        const char *s = expr_str(c, shifted);
        str_printf(&cond, " && (%s) >= 0 && (%s) < %lld", s, s, (long long)in->size[d]);
      }
    }
    const char *x = conv(c, emit_value(c, in->id, sub), in->dtype, v->dtype);
    const char *fill = literal(c, n->fill, (int64_t)n->fill, !n->fill_is_int, v->dtype);
    e = fmt(c, "((%s) ? %s : %s)", cond.s ? cond.s : "1", x, fill);
    if (cond.oom) c->oom = 1;
    str_free(&cond);
    break;
  }
  default: {
    const char *ops[6];
    for (int i = 0; i < n->nopnd; i++) {
      const Operand *o = &n->opnd[i];
      int cd = operand_cdtype(n, i);
      if (o->v < 0) ops[i] = literal(c, o->f, o->i, o->is_float, cd);
      else {
        const Value *in = g->values[o->v];
        bcast_index(&c->x, in, v->ndim, idx, sub);
        ops[i] = conv(c, emit_value(c, in->id, sub), in->dtype, cd);
      }
    }
    int from = n->cdtype;
    /* predicates and comparisons yield bools whatever they compare */
    if (n->form == F_CMP || n->form == F_LOGIC || n->form == F_UPRED || n->form == F_ULOGIC) from = EMBER_BOOL;
    e = conv(c, spell(c, n->spell, ops, n->nopnd), from, v->dtype);
  }
  }
  t = temp(c, v->dtype, e, fmt(c, "%s = %s", n->name, n->opname));
  cse_put(c, key, t);
  return t;
}

static const char *emit_value(Cg *c, int vid, Expr **idx) {
  Graph *g = c->g;
  const Value *v = g->values[vid];
  if (v->root != vid) {
    const Value *r = g->values[v->root];
    Expr *addr = value_addr(g, &c->x, v, idx);
    if (r->materialized) return emit_load(c, r, addr);
    Expr *ridx[MAXD];
    for (int d = 0; d < r->ndim; d++)
      ridx[d] = r->size[d] <= 1 ? ex_const(&c->x, 0) : ex_mod(&c->x, ex_div(&c->x, addr, r->stride[d]), r->size[d]);
    return emit_value(c, r->id, ridx);
  }
  if (v->materialized) return emit_load(c, v, value_addr(g, &c->x, v, idx));
  return emit_def(c, v, idx);
}

static void emit_store(Cg *c, const Value *v, Expr **idx, const char *t) {
  const char *a = expr_str(c, value_addr(c->g, &c->x, v, idx));
  if (v->local) {  /* kept in a register: later stages read the temp */
    cse_put(c, fmt(c, "L%d@%s", v->id, a), t);
    return;
  }
  c->used[v->id] |= 2;
  line(c, "b%d[%s] = %s;", v->id, a, store_conv(c, t, v->dtype));
  cse_put(c, fmt(c, "L%d@%s", v->id, a), t);
}

/* ---- reductions ---- */
static int acc_dtype(const Node *n, const Value *in) {
  switch (n->red) {
  case R_SUM: case R_MEAN: case R_PROD:
    return dtype_is_float(in->dtype) || dtype_is_float(n->cdtype) ? EMBER_F64 : EMBER_I64;
  case R_ANY: case R_ALL: return EMBER_BOOL;
  default: return in->dtype;
  }
}

static const char *red_clause(const Node *n) {
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

static void red_init(Cg *c, const Value *v) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in];
  int ad = acc_dtype(n, in);
  const char *ct = compute_ctype(ad);
  int fl = dtype_is_float(ad);
  const char *init = "0";
  switch (n->red) {
  case R_SUM: case R_MEAN: case R_ANY: init = "0"; break;
  case R_PROD: case R_ALL: init = "1"; break;
  case R_MAX: case R_ARGMAX: init = fl ? "-INFINITY" : "INT64_MIN"; break;
  case R_MIN: case R_ARGMIN: init = fl ? "INFINITY" : "INT64_MAX"; break;
  }
  line(c, "%s a%d = %s;  /* %s = %s */", ct, v->id, init, n->name, n->opname);
  if ((n->red == R_MAX || n->red == R_MIN) && fl) line(c, "int64_t n%d = 0;", v->id);
  if (n->red == R_ARGMAX || n->red == R_ARGMIN) line(c, "int64_t j%d = 0;", v->id);
}

static void red_update(Cg *c, const Value *v) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in];
  int ad = acc_dtype(n, in);
  Expr *idx[MAXD];
  for (int d = 0; d < c->k->ndim; d++) idx[d] = ex_var(&c->x, d);
  const char *x = emit_value(c, in->id, idx);
  const char *xa = conv(c, x, in->dtype, ad);
  int fl = dtype_is_float(ad);
  switch (n->red) {
  case R_SUM: case R_MEAN: line(c, "a%d += %s;", v->id, xa); break;
  case R_PROD: line(c, "a%d *= %s;", v->id, xa); break;
  case R_ANY: line(c, "a%d |= (%s) != 0;", v->id, x); break;
  case R_ALL: line(c, "a%d &= (%s) != 0;", v->id, x); break;
  case R_MAX: case R_MIN:
    line(c, "a%d = %s %s a%d ? %s : a%d;", v->id, xa, n->red == R_MAX ? ">" : "<", v->id, xa, v->id);
    if (fl) line(c, "n%d |= %s != %s;", v->id, xa, xa);
    break;
  case R_ARGMAX: case R_ARGMIN: {
    /* the linear index over the reduced dims, in their order */
    Expr *lin = ex_const(&c->x, 0);
    for (int d = 0; d < c->k->ndim; d++)
      if (n->rmask >> d & 1) lin = ex_add(&c->x, ex_mul(&c->x, lin, c->k->size[d]), idx[d]);
    const char *cmp = n->red == R_ARGMAX ? ">" : "<";
    if (fl)
      line(c, "if (a%d == a%d && (%s != %s || %s %s a%d)) { a%d = %s; j%d = %s; }", v->id, v->id, xa, xa, xa, cmp,
           v->id, v->id, xa, v->id, expr_str(c, lin));
    else
      line(c, "if (%s %s a%d) { a%d = %s; j%d = %s; }", xa, cmp, v->id, v->id, xa, v->id, expr_str(c, lin));
    break;
  }
  }
}

static void red_finish(Cg *c, const Value *v) {
  const Node *n = v->def;
  const Value *in = c->g->values[n->red_in];
  int ad = acc_dtype(n, in);
  const char *r = fmt(c, "a%d", v->id);
  int from = ad;
  switch (n->red) {
  case R_MEAN: {
    int64_t cnt = 1;
    for (int d = 0; d < c->k->ndim; d++)
      if (n->rmask >> d & 1) cnt *= c->k->size[d];
    r = fmt(c, "(a%d / (double)%lld)", v->id, (long long)cnt);
    from = EMBER_F64;
    break;
  }
  case R_MAX: case R_MIN:
    if (dtype_is_float(ad)) r = fmt(c, "(n%d ? (%s)NAN : a%d)", v->id, compute_ctype(ad), v->id);
    break;
  case R_ARGMAX: case R_ARGMIN: r = fmt(c, "j%d", v->id); from = EMBER_I64; break;
  default: break;
  }
  const char *t = temp(c, v->dtype, conv(c, r, from, v->dtype), NULL);
  Expr *oidx[MAXD];
  item_index(&c->x, c->k, v, IT_REDUCE, oidx);
  emit_store(c, v, oidx, t);
}

/* ---- kernels ---- */
static int reads_stage_reduce(Cg *c, const Item *it, const int *stage_red, int nred);

typedef struct DepCk { Graph *g; const int *red; int nred; int hit; } DepCk;
static void dep_read(void *ud, int r, Expr *addr) {
  DepCk *d = ud;
  for (int i = 0; i < d->nred; i++)
    if (d->red[i] == r) d->hit = 1;
}

static int reads_stage_reduce(Cg *c, const Item *it, const int *stage_red, int nred) {
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
  Value *w = (Value *)v;
  int m = w->materialized;
  w->materialized = 0;
  walk_reads(c->g, &c->x, v->id, idx, dep_read, &d);
  w->materialized = m;
  return d.hit;
}

static void close_loops(Cg *c, int nd) {
  for (int i = 0; i < nd; i++) {
    c->indent--;
    line(c, "}");
  }
}

static void emit_stage(Cg *c, const Item *items, int n, const Loop *inner, int ni, int outer_parallel) {
  Kernel *k = c->k;
  int64_t extent = 1;
  for (int i = 0; i < ni; i++) extent *= inner[i].n;
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) red_init(c, c->g->values[items[i].v]);
  /* pragma: parallelize the stage itself when the outer loops are not */
  Str pr = {0};
  int all_clause = 1;
  for (int i = 0; i < n; i++) {
    if (items[i].kind != IT_REDUCE) continue;
    const Node *nd = c->g->values[items[i].v]->def;
    const char *cl = red_clause(nd);
    if (!cl) { all_clause = 0; continue; }
    str_printf(&pr, " reduction(%s:a%d)", cl, items[i].v);
    if ((nd->red == R_MAX || nd->red == R_MIN) && dtype_is_float(acc_dtype(nd, c->g->values[nd->red_in])))
      str_printf(&pr, " reduction(|:n%d)", items[i].v);
  }
  const char *clauses = pr.s ? pr.s : "";
  int scope = c->ncse;
  if (ni == 0) {
    line(c, "{");
    c->indent++;
  } else {
    int par = !outer_parallel && extent >= PAR_MIN && all_clause;
    for (int i = 0; i < ni; i++) {
      if (i == 0 && par)
        line(c, "#pragma omp parallel for%s%s", ni > 1 ? fmt(c, " collapse(%d)", ni) : " simd", clauses);
      else if (i == ni - 1 && !par && all_clause)
        line(c, "#pragma omp simd%s", clauses);
      const char *v = c->names[inner[i].var];
      line(c, "for (int64_t %s = 0; %s < %lld; %s++) {", v, v, (long long)inner[i].n, v);
      c->indent++;
    }
  }
  for (int i = 0; i < n; i++) {
    const Value *v = c->g->values[items[i].v];
    if (items[i].kind == IT_REDUCE) red_update(c, v);
    else {
      Expr *idx[MAXD];
      item_index(&c->x, k, v, IT_STORE, idx);
      emit_store(c, v, idx, emit_def(c, v, idx));
    }
  }
  close_loops(c, ni ? ni : 1);
  c->ncse = scope;
  str_free(&pr);
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) red_finish(c, c->g->values[items[i].v]);
}

/* The loops of one class of dims (outer or reduced), merging a dim into the
   next one of its class where bit d of `merge` is set. */
static int make_loops(Cg *c, const Kernel *k, int reduced, uint32_t merge, Loop *loops) {
  int dims[MAXD], nd = 0, nl = 0;
  for (int d = 0; d < k->ndim; d++)
    if (k->size[d] != 1 && !!(k->rmask >> d & 1) == reduced) dims[nd++] = d;
  for (int i = 0; i < nd;) {
    int j = i;
    while (j + 1 < nd && (merge >> dims[j] & 1)) j++;
    if (j == i) loops[nl].var = dims[i], loops[nl].n = k->size[dims[i]];
    else {
      int var = MAXD + dims[i];
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

static void emit_kernel(Cg *c, Kernel *k, Str *out, uint32_t merge) {
  Graph *g = c->g;
  Str body = {0};
  c->k = k;
  c->body = &body;
  c->ncse = 0;
  c->ntemp = 0;
  c->divmods = 0;
  memset(c->used, 0, g->nvalues);
  memset(c->sub, 0, sizeof c->sub);
  kernel_vars(&c->x, k);
  c->x.nvars = 2 * MAXD;
  Loop outer[MAXD], inner[MAXD];
  int no = make_loops(c, k, 0, merge, outer), ni = make_loops(c, k, 1, merge, inner);
  int64_t oext = 1, total = 1;
  for (int d = 0; d < k->ndim; d++) total *= k->size[d];
  for (int i = 0; i < no; i++) oext *= outer[i].n;
  c->indent = 1;
  int outer_par = 0;
  if (no > 0) {
    int pointwise = k->rmask == 0;
    /* parallel over the outer loops when there is enough work and enough rows */
    outer_par = total >= PAR_MIN && (pointwise || oext >= 4);
    for (int i = 0; i < no; i++) {
      const char *pragma = NULL;
      if (i == 0 && outer_par) {
        if (pointwise && no == 1) pragma = "#pragma omp parallel for simd";
        else if (pointwise) pragma = no - 1 > 1 ? fmt(c, "#pragma omp parallel for collapse(%d)", no - 1) : "#pragma omp parallel for";
        else pragma = no > 1 ? fmt(c, "#pragma omp parallel for collapse(%d)", no) : "#pragma omp parallel for";
      } else if (pointwise && i == no - 1 && (i > 0 || !outer_par)) pragma = "#pragma omp simd";
      if (pragma) line(c, "%s", pragma);
      const char *v = c->names[outer[i].var];
      line(c, "for (int64_t %s = 0; %s < %lld; %s++) {", v, v, (long long)outer[i].n, v);
      c->indent++;
    }
  }
  if (k->rmask == 0) {
    /* pointwise: every item is a store in the innermost body */
    for (int i = 0; i < k->nitems; i++) {
      const Value *v = g->values[k->items[i].v];
      Expr *idx[MAXD];
      item_index(&c->x, k, v, IT_STORE, idx);
      if (k->items[i].kind == IT_REDUCE) {  /* a reduction over no dims */
        emit_stage(c, &k->items[i], 1, inner, 0, 1);
        continue;
      }
      emit_store(c, v, idx, emit_def(c, v, idx));
    }
  } else {
    int i = 0;
    while (i < k->nitems) {
      if (k->items[i].kind == IT_OUTER) {
        const Value *v = g->values[k->items[i].v];
        Expr *idx[MAXD];
        item_index(&c->x, k, v, IT_OUTER, idx);
        emit_store(c, v, idx, emit_def(c, v, idx));
        i++;
        continue;
      }
      int red[64], nred = 0, j = i;
      while (j < k->nitems && k->items[j].kind != IT_OUTER && !reads_stage_reduce(c, &k->items[j], red, nred)) {
        if (k->items[j].kind == IT_REDUCE && nred < 64) red[nred++] = k->items[j].v;
        j++;
      }
      emit_stage(c, &k->items[i], j - i, inner, ni, outer_par);
      i = j;
    }
  }
  close_loops(c, no);
  /* the function: a comment naming what it computes, pointers, then the body */
  str_printf(out, "\n/* kernel %d: space [", k->id);
  for (int d = 0; d < k->ndim; d++) str_printf(out, "%s%lld", d ? ", " : "", (long long)k->size[d]);
  str_puts(out, "]");
  if (k->rmask) {
    str_puts(out, ", reducing dims");
    for (int d = 0; d < k->ndim; d++)
      if (k->rmask >> d & 1) str_printf(out, " %d", d);
  }
  str_puts(out, "; computes");
  for (int i = 0; i < k->nitems; i++) {
    const Value *v = g->values[k->items[i].v];
    str_printf(out, " %s", v->def->name);
  }
  if (merge) str_puts(out, "; loops merged where indices stay linear");
  str_printf(out, " */\nvoid ember_k%d(void *const *restrict p) {\n", k->id);
  for (int v = 0; v < g->nvalues; v++) {
    if (!c->used[v]) continue;
    const char *ct = storage_ctype(g->values[v]->dtype);
    if (c->used[v] & 2) str_printf(out, "  %s *restrict b%d = (%s *)p[%d];\n", ct, v, ct, v);
    else str_printf(out, "  const %s *restrict b%d = (const %s *)p[%d];\n", ct, v, ct, v);
  }
  str_puts(out, body.s ? body.s : "");
  str_puts(out, "}\n");
  if (body.oom) c->oom = 1;
  str_free(&body);
}

int codegen_c(Graph *g, Str *out) {
  Cg c = {0};
  c.g = g;
  c.pool = &g->pool;
  c.x.pool = &g->pool;
  for (int d = 0; d < MAXD; d++) c.names[d] = c.names[MAXD + d] = var_names[d];
  c.used = em_malloc(g->nvalues + 1);
  if (!c.used) return graph_error(g, NULL, "out of memory in code generation");
  str_puts(out, "/* Generated by ember: the kernels of one graph.  See the comments for\n"
                "   the FX nodes each line computes. */\n");
  str_puts(out, em_prelude);
  str_puts(out, "\nstatic inline int64_t em_ifloordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }\n"
                "static inline int64_t em_ifloormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }\n"
                "static inline int64_t em_imin(int64_t a, int64_t b) { return a < b ? a : b; }\n"
                "static inline int64_t em_imax(int64_t a, int64_t b) { return a > b ? a : b; }\n");
  for (int i = 0; i < g->nkernels; i++) {
    /* merge adjacent loops, innermost first, as long as no index gains a division */
    Kernel *k = g->kernels[i];
    Str trial = {0};
    emit_kernel(&c, k, &trial, 0);
    long best = c.divmods;
    uint32_t merge = 0;
    int empty = 0;
    for (int d = 0; d < k->ndim; d++) empty |= k->size[d] == 0;
    for (int d = k->ndim - 2; d >= 0 && !empty; d--) {
      if (k->size[d] == 1) continue;
      trial.len = 0;
      emit_kernel(&c, k, &trial, merge | 1u << d);
      if (c.divmods <= best && !c.oom) merge |= 1u << d, best = c.divmods;
    }
    str_free(&trial);
    emit_kernel(&c, k, out, merge);
  }
  free(c.used);
  free(c.cse);
  if (c.oom || out->oom || g->pool.oom) return graph_error(g, NULL, "out of memory in code generation");
  return EMBER_OK;
}
