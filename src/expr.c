/*
 * expr.c - integer index expressions: constants, loop variables with known
 * ranges, +, * by a constant, floor division and modulo by a constant, and
 * min/max with a constant (the clamps of cat and pad).  A variable is a loop
 * index or a gathered index (a value loaded at run time and checked into a
 * range); the rules need only each variable's range, so both are alike here.
 *
 * Every constructor simplifies, so an Expr is always in canonical form: a sum
 * of terms coef*atom plus a constant, atoms ordered.  Views become index
 * arithmetic through this: reading a contiguous [N, C] value through a
 * reshape gives (i0*C + i1) / C and % C, which the rules below turn back into
 * i0 and i1 using the variables' ranges.  Exprs live in the caller's pool.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

static int64_t fdiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static int64_t fmodi(int64_t a, int64_t b) { return a - fdiv(a, b) * b; }

static Expr *mk(ExprCtx *x, int kind) {
  Expr *e = pool_alloc(x->pool, sizeof *e);
  if (!e) {  /* out of memory: a constant 0 keeps callers going; pool->oom reports it */
    static Expr zero = {E_CONST, 0, 0, NULL, NULL, 0, 0};
    return &zero;
  }
  e->kind = kind;
  return e;
}

Expr *ex_const(ExprCtx *x, int64_t c) {
  Expr *e = mk(x, E_CONST);
  if (x->pool->oom) return e;
  e->c = c, e->lo = e->hi = c;
  return e;
}

Expr *ex_var(ExprCtx *x, int v) {
  EM_ASSERT((v >= 0 && v < x->nvars) || (v >= EX_GATHERED && v < EX_GATHERED + x->ngathered));
  if (x->vhi[v] == 0) return ex_const(x, 0);
  Expr *e = mk(x, E_VAR);
  e->var = v, e->lo = 0, e->hi = x->vhi[v];
  return e;
}

int ex_push_var(ExprCtx *x, int64_t hi) {
  EM_ASSERT(x->nvars <= EX_GATHERED && hi >= 0);
  if (EX_GATHERED + x->ngathered >= EX_MAXVARS) return -1;
  int v = EX_GATHERED + x->ngathered++;
  x->vhi[v] = hi;
  return v;
}

void ex_pop_var(ExprCtx *x) {
  EM_ASSERT(x->ngathered > 0);
  x->ngathered--;
}

/* ---- the linear form: sum of coef*atom + constant ---- */
#define MAXT 32
typedef struct Lin {
  int n;
  Expr *atom[MAXT];
  int64_t coef[MAXT];
  int64_t k;
  int overflow;            /* too many terms: give up simplifying */
} Lin;

static int atom_cmp(const Expr *a, const Expr *b);

int ex_equal(const Expr *a, const Expr *b) {
  if (a == b) return 1;
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case E_CONST: return a->c == b->c;
  case E_VAR: return a->var == b->var;
  case E_ADD: return ex_equal(a->a, b->a) && ex_equal(a->b, b->b);
  default: return a->c == b->c && ex_equal(a->a, b->a);
  }
}

/* A total order on atoms, so sums print the same however they were built. */
static int atom_cmp(const Expr *a, const Expr *b) {
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  switch (a->kind) {
  case E_CONST: return a->c < b->c ? -1 : a->c > b->c;
  case E_VAR: return a->var < b->var ? -1 : a->var > b->var;
  case E_ADD: {
    int r = atom_cmp(a->a, b->a);
    return r ? r : atom_cmp(a->b, b->b);
  }
  default: {
    if (a->c != b->c) return a->c < b->c ? -1 : 1;
    return atom_cmp(a->a, b->a);
  }
  }
}

static void lin_add_term(Lin *l, Expr *atom, int64_t coef) {
  if (coef == 0) return;
  for (int i = 0; i < l->n; i++)
    if (ex_equal(l->atom[i], atom)) {
      l->coef[i] += coef;
      return;
    }
  if (l->n == MAXT) { l->overflow = 1; return; }
  l->atom[l->n] = atom, l->coef[l->n] = coef, l->n++;
}

static void lin_collect(Lin *l, Expr *e, int64_t scale) {
  switch (e->kind) {
  case E_CONST: l->k += scale * e->c; break;
  case E_ADD: lin_collect(l, e->a, scale); lin_collect(l, e->b, scale); break;
  case E_MUL: lin_collect(l, e->a, scale * e->c); break;
  default: lin_add_term(l, e, scale); break;
  }
}

static void lin_range(const Lin *l, int64_t *lo, int64_t *hi) {
  int64_t a = l->k, b = l->k;
  for (int i = 0; i < l->n; i++) {
    int64_t c = l->coef[i], x = l->atom[i]->lo * c, y = l->atom[i]->hi * c;
    a += x < y ? x : y;
    b += x < y ? y : x;
  }
  *lo = a, *hi = b;
}

/* Build the canonical expression of a linear form: terms in atom order. */
static Expr *lin_build(ExprCtx *x, Lin *l) {
  /* drop zero terms, sort */
  int n = 0;
  for (int i = 0; i < l->n; i++)
    if (l->coef[i] != 0) l->atom[n] = l->atom[i], l->coef[n] = l->coef[i], n++;
  l->n = n;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && atom_cmp(l->atom[j], l->atom[j - 1]) < 0; j--) {
      Expr *t = l->atom[j]; l->atom[j] = l->atom[j - 1]; l->atom[j - 1] = t;
      int64_t c = l->coef[j]; l->coef[j] = l->coef[j - 1]; l->coef[j - 1] = c;
    }
  Expr *acc = NULL;
  for (int i = 0; i < n; i++) {
    Expr *t = l->atom[i];
    if (l->coef[i] != 1) {
      Expr *m = mk(x, E_MUL);
      m->a = t, m->c = l->coef[i];
      int64_t p = t->lo * m->c, q = t->hi * m->c;
      m->lo = p < q ? p : q, m->hi = p < q ? q : p;
      t = m;
    }
    if (!acc) acc = t;
    else {
      Expr *s = mk(x, E_ADD);
      s->a = acc, s->b = t, s->lo = acc->lo + t->lo, s->hi = acc->hi + t->hi;
      acc = s;
    }
  }
  if (!acc) return ex_const(x, l->k);
  if (l->k != 0) {
    Expr *s = mk(x, E_ADD);
    Expr *k = ex_const(x, l->k);
    s->a = acc, s->b = k, s->lo = acc->lo + l->k, s->hi = acc->hi + l->k;
    acc = s;
  }
  return acc;
}

/* c*(a / c) + (a % c) == a: what merging two loops into one leaves behind */
static void lin_fold_divmod(Lin *l) {
  for (int again = 1; again;) {
    again = 0;
    for (int i = 0; i < l->n && !again; i++) {
      Expr *d = l->atom[i];
      if (d->kind != E_DIV || l->coef[i] == 0) continue;
      for (int j = 0; j < l->n; j++) {
        Expr *m = l->atom[j];
        if (m->kind != E_MOD || m->c != d->c || l->coef[j] == 0 || l->coef[i] != d->c * l->coef[j]) continue;
        if (!ex_equal(m->a, d->a)) continue;
        int64_t k = l->coef[j];
        l->coef[i] = l->coef[j] = 0;
        lin_collect(l, d->a, k);
        again = 1;
        break;
      }
    }
  }
}

Expr *ex_add(ExprCtx *x, Expr *a, Expr *b) {
  Lin l = {0};
  lin_collect(&l, a, 1);
  lin_collect(&l, b, 1);
  lin_fold_divmod(&l);
  if (l.overflow) {
    Expr *s = mk(x, E_ADD);
    s->a = a, s->b = b, s->lo = a->lo + b->lo, s->hi = a->hi + b->hi;
    return s;
  }
  return lin_build(x, &l);
}

Expr *ex_mul(ExprCtx *x, Expr *a, int64_t c) {
  if (c == 0) return ex_const(x, 0);
  if (c == 1) return a;
  Lin l = {0};
  lin_collect(&l, a, c);
  return lin_build(x, &l);
}

Expr *ex_div(ExprCtx *x, Expr *a, int64_t c) {
  EM_ASSERT(c > 0);
  if (c == 1) return a;
  Lin l = {0};
  lin_collect(&l, a, 1);
  if (l.overflow) goto opaque;
  /* pull out the terms (and the part of the constant) divisible by c */
  Lin q = {0}, r = {0};
  q.k = fdiv(l.k, c);
  r.k = fmodi(l.k, c);
  for (int i = 0; i < l.n; i++) {
    if (l.coef[i] % c == 0) lin_add_term(&q, l.atom[i], l.coef[i] / c);
    else lin_add_term(&r, l.atom[i], l.coef[i]);
  }
  int64_t lo, hi;
  lin_range(&r, &lo, &hi);
  Expr *rest;
  if (lo >= 0 && hi < c) rest = NULL;  /* 0 <= r < c: r / c == 0 */
  else if (r.n == 1 && r.k == 0 && r.coef[0] > 1 && c % r.coef[0] == 0) {
    /* (k*a) / c == a / (c/k) */
    rest = ex_div(x, r.atom[0], c / r.coef[0]);
  } else if (r.n == 1 && r.k == 0 && r.coef[0] == 1 && r.atom[0]->kind == E_DIV) {
    rest = ex_div(x, r.atom[0]->a, r.atom[0]->c * c);  /* (a / b) / c == a / (b*c) */
  } else {
    Expr *inner = lin_build(x, &r);
    Expr *d = mk(x, E_DIV);
    d->a = inner, d->c = c, d->lo = fdiv(inner->lo, c), d->hi = fdiv(inner->hi, c);
    rest = d;
  }
  Expr *qe = lin_build(x, &q);
  return rest ? ex_add(x, qe, rest) : qe;
opaque:;
  Expr *d = mk(x, E_DIV);
  d->a = a, d->c = c, d->lo = fdiv(a->lo, c), d->hi = fdiv(a->hi, c);
  return d;
}

Expr *ex_mod(ExprCtx *x, Expr *a, int64_t c) {
  EM_ASSERT(c > 0);
  if (c == 1) return ex_const(x, 0);
  Lin l = {0};
  lin_collect(&l, a, 1);
  if (l.overflow) goto opaque;
  Lin r = {0};
  r.k = fmodi(l.k, c);
  for (int i = 0; i < l.n; i++) {
    int64_t k = fmodi(l.coef[i], c);
    if (k) lin_add_term(&r, l.atom[i], k);
  }
  int64_t lo, hi;
  lin_range(&r, &lo, &hi);
  if (lo >= 0 && hi < c) return lin_build(x, &r);
  if (r.n == 1 && r.k == 0 && r.coef[0] > 1 && c % r.coef[0] == 0) {
    /* (k*a) % c == k * (a % (c/k)) */
    return ex_mul(x, ex_mod(x, r.atom[0], c / r.coef[0]), r.coef[0]);
  }
  if (r.n == 1 && r.k == 0 && r.coef[0] == 1 && r.atom[0]->kind == E_MOD && r.atom[0]->c % c == 0)
    return ex_mod(x, r.atom[0]->a, c);  /* (a % (m*c)) % c == a % c */
  Expr *inner = lin_build(x, &r);
  Expr *m = mk(x, E_MOD);
  m->a = inner, m->c = c;
  m->lo = 0, m->hi = c - 1;
  if (inner->lo >= 0 && inner->hi - inner->lo < c && fdiv(inner->lo, c) == fdiv(inner->hi, c))
    m->lo = fmodi(inner->lo, c), m->hi = fmodi(inner->hi, c);
  return m;
opaque:;
  Expr *o = mk(x, E_MOD);
  o->a = a, o->c = c, o->lo = 0, o->hi = c - 1;
  return o;
}

Expr *ex_min(ExprCtx *x, Expr *a, int64_t c) {
  if (a->hi <= c) return a;
  if (a->lo >= c) return ex_const(x, c);
  Expr *e = mk(x, E_MIN);
  e->a = a, e->c = c, e->lo = a->lo, e->hi = c;
  return e;
}

Expr *ex_max(ExprCtx *x, Expr *a, int64_t c) {
  if (a->lo >= c) return a;
  if (a->hi <= c) return ex_const(x, c);
  Expr *e = mk(x, E_MAX);
  e->a = a, e->c = c, e->lo = c, e->hi = a->hi;
  return e;
}

Expr *ex_subst(ExprCtx *x, Expr *e, int var, Expr *by) {
  switch (e->kind) {
  case E_CONST: return e;
  case E_VAR: return e->var == var ? by : e;
  case E_ADD: return ex_add(x, ex_subst(x, e->a, var, by), ex_subst(x, e->b, var, by));
  case E_MUL: return ex_mul(x, ex_subst(x, e->a, var, by), e->c);
  case E_DIV: return ex_div(x, ex_subst(x, e->a, var, by), e->c);
  case E_MOD: return ex_mod(x, ex_subst(x, e->a, var, by), e->c);
  case E_MIN: return ex_min(x, ex_subst(x, e->a, var, by), e->c);
  case E_MAX: return ex_max(x, ex_subst(x, e->a, var, by), e->c);
  }
  return e;
}

int ex_uses_var(const Expr *e, int var) {
  switch (e->kind) {
  case E_CONST: return 0;
  case E_VAR: return e->var == var;
  case E_ADD: return ex_uses_var(e->a, var) || ex_uses_var(e->b, var);
  default: return ex_uses_var(e->a, var);
  }
}

int ex_count_divmod(const Expr *e) {
  switch (e->kind) {
  case E_CONST: case E_VAR: return 0;
  case E_ADD: return ex_count_divmod(e->a) + ex_count_divmod(e->b);
  case E_DIV: case E_MOD: return 1 + ex_count_divmod(e->a);
  default: return ex_count_divmod(e->a);
  }
}

void ex_print(Str *b, const Expr *e, const char *const *names) {
  switch (e->kind) {
  case E_CONST: str_printf(b, "%lld", (long long)e->c); break;
  case E_VAR: str_puts(b, names[e->var]); break;
  case E_ADD:
    ex_print(b, e->a, names);
    if (e->b->kind == E_CONST && e->b->c < 0) str_printf(b, " - %lld", -(long long)e->b->c);
    else if (e->b->kind == E_MUL && e->b->c < 0) {
      str_puts(b, " - ");
      if (e->b->c != -1) str_printf(b, "%lld*", -(long long)e->b->c);
      ex_print(b, e->b->a, names);
    } else {
      str_puts(b, " + ");
      ex_print(b, e->b, names);
    }
    break;
  case E_MUL: {
    int paren = e->a->kind == E_ADD || e->a->kind == E_DIV || e->a->kind == E_MOD;
    str_printf(b, "%lld*%s", (long long)e->c, paren ? "(" : "");
    ex_print(b, e->a, names);
    if (paren) str_puts(b, ")");
    break;
  }
  case E_DIV: case E_MOD: {
    int nonneg = e->a->lo >= 0;
    if (!nonneg) str_puts(b, e->kind == E_DIV ? "em_ifloordiv(" : "em_ifloormod(");
    else str_puts(b, "(");
    ex_print(b, e->a, names);
    if (nonneg) str_printf(b, e->kind == E_DIV ? ") / %lld" : ") %% %lld", (long long)e->c);
    else str_printf(b, ", %lld)", (long long)e->c);
    break;
  }
  case E_MIN: case E_MAX:
    str_puts(b, e->kind == E_MIN ? "em_imin(" : "em_imax(");
    ex_print(b, e->a, names);
    str_printf(b, ", %lld)", (long long)e->c);
    break;
  }
}
