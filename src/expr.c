/*
 * expr.c - integer index expressions: constants, loop variables with known
 * ranges, size variables (the symbolic sizes of a dynamic-shape graph), +,
 * products, floor division and modulo, and min/max (the clamps of cat and
 * pad).  A variable is a loop index or a gathered index (a value loaded at
 * run time and checked into a range); the rules need only each variable's
 * range, so both are alike here.  A size variable is fixed for a call and
 * known only by its bounds (at least 2 unless a guard says otherwise).
 *
 * Every constructor simplifies, so an Expr is always in canonical form: a sum
 * of terms coef*monomial plus a constant, a monomial a product of atoms
 * (variables, size variables, and the divisions, modulos, min and max the
 * rules could not remove), terms and factors ordered.  Views become index
 * arithmetic through this: reading a contiguous [N, C] value through a
 * reshape gives (i0*C + i1) / C and % C, which the rules below turn back into
 * i0 and i1 using the variables' ranges, whether C is a constant or a size
 * expression such as s1.
 *
 * With constant sizes every range is a pair of integers and the rules use
 * them alone (the static path, unchanged by the symbolic one).  A symbolic
 * range is proved from bounds that are polynomials over size expressions:
 * i1 over [0, s1-1] gives s1 - 1 - i1 >= s1 - 1 - (s1 - 1) = 0.  Such a
 * polynomial is shown nonnegative by writing each size atom as its lower
 * bound plus a nonnegative unknown and finding no negative coefficient
 * (sufficient, not necessary): a rule applies only when it holds for every
 * value of the size variables in their bounds, never for the current ones.
 * Exprs live in the caller's pool.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

#define MAXT 32            /* terms of a linear form */
#define MAXF 4             /* factors of a monomial */
#define BOUND_DEPTH 12     /* nesting past which a symbolic bound falls back to the numeric range */
#define SPLIT_COST 4       /* depth a proof by cases on a min or max uses up: at most 3 nested splits */

static int64_t fdiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static int64_t fmodi(int64_t a, int64_t b) { return a - fdiv(a, b) * b; }

/* ---- saturating range arithmetic: +-EX_INF is unbounded ---- */
static int is_inf(int64_t v) { return v >= EX_INF || v <= -EX_INF; }
static int64_t sat(int64_t v) { return v >= EX_INF ? EX_INF : v <= -EX_INF ? -EX_INF : v; }

static int64_t sat_add(int64_t a, int64_t b) {
  if (is_inf(a)) return sat(a);
  if (is_inf(b)) return sat(b);
  return sat(a + b);  /* both below 2^62 in magnitude: no overflow */
}

static int64_t sat_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  int neg = (a < 0) != (b < 0);
  int64_t r;
  if (is_inf(a) || is_inf(b) || __builtin_mul_overflow(a, b, &r) || is_inf(r)) return neg ? -EX_INF : EX_INF;
  return r;
}

static int64_t sat_fdiv(int64_t a, int64_t b) {  /* b >= 1 */
  if (is_inf(a)) return sat(a);
  if (is_inf(b)) return a >= 0 ? 0 : -1;
  return fdiv(a, b);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

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
  x->vsize[v] = NULL;
  return v;
}

int ex_push_var_size(ExprCtx *x, Expr *n) {
  int v = ex_push_var(x, 0);
  if (v >= 0) ex_set_size(x, v, n);
  return v;
}

void ex_pop_var(ExprCtx *x) {
  EM_ASSERT(x->ngathered > 0);
  x->ngathered--;
}

void ex_set_size(ExprCtx *x, int v, Expr *n) {
  EM_ASSERT(v >= 0 && v < EX_MAXVARS);
  if (x->pool->oom) { x->vhi[v] = 0, x->vsize[v] = NULL; return; }
  if (n->kind == E_CONST) {  /* a constant extent is the static case (0: an empty dim, as before) */
    EM_ASSERT(n->c >= 0);
    x->vhi[v] = n->c - 1, x->vsize[v] = NULL;
    return;
  }
  x->vhi[v] = max64(sat_add(n->hi, -1), 0);
  x->vsize[v] = n;
}

int ex_add_sym(ExSyms *s, int64_t lo, int64_t hi) {
  EM_ASSERT(lo <= hi);
  if (s->n == EX_MAXSYMS) return -1;
  s->lo[s->n] = sat(lo), s->hi[s->n] = sat(hi);
  return s->n++;
}

Expr *ex_sym(ExprCtx *x, int s) {
  EM_ASSERT(x->syms && s >= 0 && s < x->syms->n);
  if (x->syms->lo[s] == x->syms->hi[s]) return ex_const(x, x->syms->lo[s]);
  Expr *e = mk(x, E_SYM);
  e->var = s, e->lo = x->syms->lo[s], e->hi = x->syms->hi[s];
  return e;
}

/* ---- monomials and the linear form: sum of coef*monomial + constant ---- */
typedef struct Mono {
  int n;
  Expr *f[MAXF];           /* factors, ordered by atom_cmp; none: the monomial 1 */
} Mono;

typedef struct Lin {
  int n;
  Mono m[MAXT];
  int64_t coef[MAXT];
  int64_t k;
  int overflow;            /* too many terms or factors: give up simplifying */
} Lin;

int ex_equal(const Expr *a, const Expr *b) {
  if (a == b) return 1;
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case E_CONST: return a->c == b->c;
  case E_VAR: case E_SYM: return a->var == b->var;
  case E_ADD: case E_PROD: return ex_equal(a->a, b->a) && ex_equal(a->b, b->b);
  default:
    if (a->c != b->c || !ex_equal(a->a, b->a)) return 0;
    return a->b == b->b || (a->b && b->b && ex_equal(a->b, b->b));
  }
}

/* A total order on atoms, so sums print the same however they were built. */
static int atom_cmp(const Expr *a, const Expr *b) {
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  switch (a->kind) {
  case E_CONST: return a->c < b->c ? -1 : a->c > b->c;
  case E_VAR: case E_SYM: return a->var < b->var ? -1 : a->var > b->var;
  case E_ADD: case E_PROD: {
    int r = atom_cmp(a->a, b->a);
    return r ? r : atom_cmp(a->b, b->b);
  }
  default: {
    if (a->c != b->c) return a->c < b->c ? -1 : 1;
    int r = atom_cmp(a->a, b->a);
    if (r || a->b == b->b) return r;
    if (!a->b || !b->b) return a->b ? 1 : -1;
    return atom_cmp(a->b, b->b);
  }
  }
}

static int mono_equal(const Mono *a, const Mono *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (!ex_equal(a->f[i], b->f[i])) return 0;
  return 1;
}

static int mono_cmp(const Mono *a, const Mono *b) {
  for (int i = 0; i < a->n && i < b->n; i++) {
    int r = atom_cmp(a->f[i], b->f[i]);
    if (r) return r;
  }
  return a->n < b->n ? -1 : a->n > b->n;
}

/* out = a * b, factors merged in order; 0 when it would have too many */
static int mono_mul(Mono *out, const Mono *a, const Mono *b) {
  if (a->n + b->n > MAXF) return 0;
  int i = 0, j = 0, n = 0;
  Mono r;
  while (i < a->n || j < b->n)
    r.f[n++] = (j == b->n || (i < a->n && atom_cmp(a->f[i], b->f[j]) <= 0)) ? a->f[i++] : b->f[j++];
  r.n = n;
  *out = r;
  return 1;
}

/* Whether d's factors are among m's; rest = the others. */
static int mono_divides(const Mono *d, const Mono *m, Mono *rest) {
  int j = 0;
  rest->n = 0;
  for (int i = 0; i < m->n; i++) {
    int r = j < d->n ? atom_cmp(m->f[i], d->f[j]) : -1;
    if (r > 0) return 0;
    if (r == 0) j++;
    else rest->f[rest->n++] = m->f[i];
  }
  return j == d->n;
}

static void mono_range(const Mono *m, int64_t *lo, int64_t *hi) {
  int64_t a = 1, b = 1;
  for (int i = 0; i < m->n; i++) {
    int64_t p[4] = {sat_mul(a, m->f[i]->lo), sat_mul(a, m->f[i]->hi), sat_mul(b, m->f[i]->lo), sat_mul(b, m->f[i]->hi)};
    a = b = p[0];
    for (int j = 1; j < 4; j++) a = min64(a, p[j]), b = max64(b, p[j]);
  }
  *lo = a, *hi = b;
}

/* The monomial as an expression: its atom, or a chain of PROD nodes. */
static Expr *mono_expr(ExprCtx *x, const Mono *m) {
  if (m->n == 0) return ex_const(x, 1);
  Expr *acc = m->f[m->n - 1];
  for (int i = m->n - 2; i >= 0; i--) {
    Expr *p = mk(x, E_PROD);
    Mono tail = {m->n - i, {0}};
    memcpy(tail.f, m->f + i, (size_t)tail.n * sizeof *tail.f);
    p->a = m->f[i], p->b = acc;
    mono_range(&tail, &p->lo, &p->hi);
    acc = p;
  }
  return acc;
}

static void lin_add_term(Lin *l, const Mono *m, int64_t coef) {
  if (coef == 0) return;
  if (m->n == 0) { l->k += coef; return; }
  for (int i = 0; i < l->n; i++)
    if (mono_equal(&l->m[i], m)) {
      l->coef[i] += coef;
      return;
    }
  if (l->n == MAXT) { l->overflow = 1; return; }
  l->m[l->n] = *m, l->coef[l->n] = coef, l->n++;
}

static void lin_add_atom(Lin *l, Expr *atom, int64_t coef) {
  Mono m = {1, {atom}};
  lin_add_term(l, &m, coef);
}

static void lin_collect(Lin *l, Expr *e, int64_t scale) {
  switch (e->kind) {
  case E_CONST: l->k += scale * e->c; break;
  case E_ADD: lin_collect(l, e->a, scale); lin_collect(l, e->b, scale); break;
  case E_MUL: lin_collect(l, e->a, scale * e->c); break;
  case E_PROD: {
    Mono m = {0, {0}};
    Expr *p = e;
    for (; p->kind == E_PROD && m.n < MAXF - 1; p = p->b) m.f[m.n++] = p->a;
    if (p->kind == E_PROD) { lin_add_atom(l, e, scale); break; }  /* not one of ours: opaque */
    m.f[m.n++] = p;
    lin_add_term(l, &m, scale);
    break;
  }
  default: lin_add_atom(l, e, scale); break;
  }
}

static void lin_of(Lin *l, Expr *e, int64_t scale) {
  memset(l, 0, sizeof *l);
  lin_collect(l, e, scale);
}

static void lin_const(Lin *l, int64_t k) {
  memset(l, 0, sizeof *l);
  l->k = k;
}

static void lin_add_lin(Lin *l, const Lin *b, int64_t scale) {
  for (int i = 0; i < b->n; i++) {
    int64_t c;
    if (__builtin_mul_overflow(b->coef[i], scale, &c)) l->overflow = 1;
    lin_add_term(l, &b->m[i], c);
  }
  int64_t c;
  if (__builtin_mul_overflow(b->k, scale, &c) || __builtin_add_overflow(l->k, c, &l->k)) l->overflow = 1;
  l->overflow |= b->overflow;
}

static int lin_is_zero(const Lin *l) {
  if (l->k) return 0;
  for (int i = 0; i < l->n; i++)
    if (l->coef[i]) return 0;
  return 1;
}

/* out = a * b, every term by every term */
static void lin_mul(Lin *out, const Lin *a, const Lin *b) {
  lin_const(out, 0);
  out->overflow = a->overflow || b->overflow;
  for (int i = 0; i <= a->n; i++)
    for (int j = 0; j <= b->n; j++) {
      static const Mono one = {0, {0}};
      const Mono *ma = i < a->n ? &a->m[i] : &one, *mb = j < b->n ? &b->m[j] : &one;
      int64_t ca = i < a->n ? a->coef[i] : a->k, cb = j < b->n ? b->coef[j] : b->k, c;
      Mono m;
      if (!ca || !cb) continue;
      if (!mono_mul(&m, ma, mb) || __builtin_mul_overflow(ca, cb, &c)) { out->overflow = 1; continue; }
      lin_add_term(out, &m, c);
    }
}

static void lin_range(const Lin *l, int64_t *lo, int64_t *hi) {
  int64_t a = l->k, b = l->k;
  for (int i = 0; i < l->n; i++) {
    int64_t c = l->coef[i], mlo, mhi;
    mono_range(&l->m[i], &mlo, &mhi);
    int64_t x = sat_mul(mlo, c), y = sat_mul(mhi, c);
    a = sat_add(a, x < y ? x : y);
    b = sat_add(b, x < y ? y : x);
  }
  *lo = a, *hi = b;
}

static int lin_symbolic(const ExprCtx *x, const Lin *l);
static int prove_nonneg(ExprCtx *x, const Lin *p, int depth);

/* A sum of terms over sizes takes the termwise range, which loses what the
   terms share: s0*s1 - 2*s1 (the size (s0 - 2)*s1) has lo -inf though it is
   never negative.  Raise acc->lo to 0 or 1 where the prover shows it. */
static void size_lo(ExprCtx *x, const Lin *l, Expr *acc) {
  Lin m1 = *l;
  m1.k -= 1;
  if (prove_nonneg(x, &m1, 0)) acc->lo = 1;
  else if (acc->lo < 0 && prove_nonneg(x, l, 0)) acc->lo = 0;
}

/* Build the canonical expression of a linear form: terms in monomial order. */
static Expr *lin_build(ExprCtx *x, Lin *l) {
  /* drop zero terms, sort */
  int n = 0;
  for (int i = 0; i < l->n; i++)
    if (l->coef[i] != 0) l->m[n] = l->m[i], l->coef[n] = l->coef[i], n++;
  l->n = n;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && mono_cmp(&l->m[j], &l->m[j - 1]) < 0; j--) {
      Mono t = l->m[j]; l->m[j] = l->m[j - 1]; l->m[j - 1] = t;
      int64_t c = l->coef[j]; l->coef[j] = l->coef[j - 1]; l->coef[j - 1] = c;
    }
  Expr *acc = NULL;
  for (int i = 0; i < n; i++) {
    Expr *t = mono_expr(x, &l->m[i]);
    if (l->coef[i] != 1) {
      Expr *m = mk(x, E_MUL);
      m->a = t, m->c = l->coef[i];
      int64_t p = sat_mul(t->lo, m->c), q = sat_mul(t->hi, m->c);
      m->lo = p < q ? p : q, m->hi = p < q ? q : p;
      t = m;
    }
    if (!acc) acc = t;
    else {
      Expr *s = mk(x, E_ADD);
      s->a = acc, s->b = t, s->lo = sat_add(acc->lo, t->lo), s->hi = sat_add(acc->hi, t->hi);
      acc = s;
    }
  }
  if (!acc) return ex_const(x, l->k);
  if (l->k != 0) {
    Expr *s = mk(x, E_ADD);
    Expr *k = ex_const(x, l->k);
    s->a = acc, s->b = k, s->lo = sat_add(acc->lo, l->k), s->hi = sat_add(acc->hi, l->k);
    acc = s;
  }
  if (acc->lo < 1 && ex_is_size(acc) && lin_symbolic(x, l)) size_lo(x, l, acc);
  return acc;
}

/* ---- what is known of size expressions ---- */
int ex_is_size(const Expr *e) {
  switch (e->kind) {
  case E_CONST: case E_SYM: return 1;
  case E_VAR: return 0;
  case E_ADD: case E_PROD: return ex_is_size(e->a) && ex_is_size(e->b);
  default: return ex_is_size(e->a) && (!e->b || ex_is_size(e->b));
  }
}

/* Whether e involves a size variable or a variable of symbolic extent: the
   static path never does, and keeps its numeric rules alone. */
static int symbolic(const ExprCtx *x, const Expr *e) {
  switch (e->kind) {
  case E_CONST: return 0;
  case E_SYM: return 1;
  case E_VAR: return x->vsize[e->var] != NULL;
  case E_ADD: case E_PROD: return symbolic(x, e->a) || symbolic(x, e->b);
  default: return symbolic(x, e->a) || (e->b && symbolic(x, e->b));
  }
}

static int lin_symbolic(const ExprCtx *x, const Lin *l) {
  for (int i = 0; i < l->n; i++)
    for (int j = 0; j < l->m[i].n; j++)
      if (symbolic(x, l->m[i].f[j])) return 1;
  return 0;
}

/* The divisor of a DIV or MOD node as an expression. */
static Expr *divisor(ExprCtx *x, const Expr *e) { return e->b ? e->b : ex_const(x, e->c); }

/* A divisor as cd * md: a positive coefficient times one monomial (md empty
   for a constant).  0 for a sum such as s0 + 1. */
static int divisor_mono(const Expr *e, int64_t *cd, Mono *md) {
  if (!e->b) { *cd = e->c, md->n = 0; return 1; }
  Lin l;
  lin_of(&l, e->b, 1);
  if (l.overflow || l.n != 1 || l.k != 0 || l.coef[0] < 1) return 0;
  *cd = l.coef[0], *md = l.m[0];
  return 1;
}

/* Symbolic bounds.  bound_*(.., upper, out): out is a polynomial over size
   atoms with e <= out (upper) or e >= out for every value of the variables;
   0 when none is known.  Size atoms bound themselves. */
static int bound_lin(ExprCtx *x, const Lin *l, int upper, Lin *out, int depth);
static int prove_nonneg(ExprCtx *x, const Lin *p, int depth);

static int bound_expr(ExprCtx *x, Expr *e, int upper, Lin *out, int depth) {
  Lin l;
  lin_of(&l, e, 1);
  return !l.overflow && bound_lin(x, &l, upper, out, depth);
}

static int bound_numeric(const Expr *e, int upper, Lin *out) {
  int64_t v = upper ? e->hi : e->lo;
  if (is_inf(v)) return 0;
  lin_const(out, v);
  return 1;
}

/* upper bound of a / d from an upper bound ua of a (the node's divisor d):
   ua = q*d + k gives q + floor(k / d) <= q + (k < 0 ? -1 : k / dlo) */
static int bound_div_upper(ExprCtx *x, const Expr *e, const Lin *ua, Lin *out) {
  int64_t cd;
  Mono md;
  if (!divisor_mono(e, &cd, &md)) return 0;
  lin_const(out, 0);
  for (int i = 0; i < ua->n; i++) {
    Mono rest;
    if (!ua->coef[i]) continue;
    if (!mono_divides(&md, &ua->m[i], &rest) || ua->coef[i] % cd) return 0;
    lin_add_term(out, &rest, ua->coef[i] / cd);
  }
  if (md.n == 0) out->k += fdiv(ua->k, cd);
  else {
    int64_t dlo = max64(e->b->lo, 1);
    out->k += ua->k < 0 ? -1 : sat_fdiv(ua->k, dlo);
  }
  return !out->overflow;
}

/* The larger (upper) or smaller of two bounds when they compare, else 0. */
static int bound_pick(ExprCtx *x, const Lin *a, const Lin *b, int upper, Lin *out, int depth) {
  Lin d = *a;
  lin_add_lin(&d, b, -1);  /* a - b */
  Lin nd;
  lin_const(&nd, 0);
  lin_add_lin(&nd, &d, -1);
  if (prove_nonneg(x, &d, depth + 1)) { *out = upper ? *a : *b; return 1; }   /* a >= b */
  if (prove_nonneg(x, &nd, depth + 1)) { *out = upper ? *b : *a; return 1; }  /* a <= b */
  return 0;
}

static int bound_atom(ExprCtx *x, Expr *e, int upper, Lin *out, int depth) {
  if (ex_is_size(e)) {
    lin_const(out, 0);
    lin_add_atom(out, e, 1);
    return 1;
  }
  if (depth > BOUND_DEPTH) return bound_numeric(e, upper, out);
  Lin a, b;
  switch (e->kind) {
  case E_VAR:
    if (!upper || !x->vsize[e->var]) break;
    if (!bound_expr(x, x->vsize[e->var], 1, out, depth + 1)) break;
    out->k -= 1;
    return 1;
  case E_MOD:
    if (!upper || !e->b) break;
    if (!bound_expr(x, e->b, 1, out, depth + 1)) break;
    out->k -= 1;  /* a % d <= d - 1 */
    return 1;
  case E_DIV:
    if (!upper) break;
    if (bound_expr(x, e->a, 1, &a, depth + 1) && bound_div_upper(x, e, &a, out)) return 1;
    break;
  case E_MIN: case E_MAX: {
    int near = (e->kind == E_MIN) == upper;  /* min <= either operand; max >= either */
    if (near) {
      if (e->b ? bound_expr(x, e->b, upper, out, depth + 1) : (lin_const(out, e->c), 1)) return 1;
      if (bound_expr(x, e->a, upper, out, depth + 1)) return 1;
      break;
    }
    if (!is_inf(upper ? e->hi : e->lo)) break;
    if (!bound_expr(x, e->a, upper, &a, depth + 1)) break;
    if (e->b) {
      if (!bound_expr(x, e->b, upper, &b, depth + 1)) break;
    } else lin_const(&b, e->c);
    if (bound_pick(x, &a, &b, upper, out, depth)) return 1;
    break;
  }
  default: break;
  }
  return bound_numeric(e, upper, out);
}

static int bound_mono(ExprCtx *x, const Mono *m, int upper, Lin *out, int depth) {
  if (m->n == 1) return bound_atom(x, m->f[0], upper, out, depth);
  int size = 1, nonneg = 1;
  for (int i = 0; i < m->n; i++) size &= ex_is_size(m->f[i]), nonneg &= m->f[i]->lo >= 0;
  if (size) {
    lin_const(out, 0);
    lin_add_term(out, m, 1);
    return 1;
  }
  int64_t lo, hi;
  mono_range(m, &lo, &hi);
  if (upper && nonneg) {  /* 0 <= f_i <= u_i: the product is at most the product of the u_i */
    Lin acc, u, t;
    lin_const(&acc, 1);
    int ok = 1;
    for (int i = 0; i < m->n && ok; i++) {
      ok = bound_atom(x, m->f[i], 1, &u, depth + 1);
      if (ok) lin_mul(&t, &acc, &u), acc = t, ok = !acc.overflow;
    }
    if (ok) { *out = acc; return 1; }
  }
  int64_t v = upper ? hi : lo;
  if (is_inf(v)) return 0;
  lin_const(out, v);
  return 1;
}

static int bound_lin(ExprCtx *x, const Lin *l, int upper, Lin *out, int depth) {
  lin_const(out, l->k);
  for (int i = 0; i < l->n; i++) {
    Lin b;
    if (!l->coef[i]) continue;
    if (!bound_mono(x, &l->m[i], upper == (l->coef[i] > 0), &b, depth)) return 0;
    lin_add_lin(out, &b, l->coef[i]);
  }
  return !out->overflow;
}

/* p >= 0 for every value of the size atoms at or above their lower bounds:
   each atom a is lo_a + t_a with t_a >= 0; no coefficient of the expanded
   polynomial in the t's is negative. */
static int shift_nonneg(const Lin *p) {
  Lin t;
  lin_const(&t, p->k);
  for (int i = 0; i < p->n; i++) {
    const Mono *m = &p->m[i];
    for (int mask = 0; mask < 1 << m->n; mask++) {
      int64_t c = p->coef[i];
      Mono kept = {0, {0}};
      for (int j = 0; j < m->n; j++) {
        if (mask >> j & 1) kept.f[kept.n++] = m->f[j];
        else if (is_inf(m->f[j]->lo) || __builtin_mul_overflow(c, m->f[j]->lo, &c)) return 0;
      }
      if (kept.n == 0 && __builtin_add_overflow(t.k, c, &t.k)) return 0;
      if (kept.n) lin_add_term(&t, &kept, c);
    }
  }
  if (t.overflow || t.k < 0) return 0;
  for (int i = 0; i < t.n; i++)
    if (t.coef[i] < 0) return 0;
  return 1;
}

/* m as q * rest: q a quotient or remainder of sizes (q->a >= 0), rest the
   product of m's other atoms, sizes that are not negative */
static int quotient_factor(const Mono *m, Expr **q, Lin *rest) {
  int at = -1;
  for (int j = 0; j < m->n; j++) {
    const Expr *f = m->f[j];
    if (!ex_is_size(f) || f->lo < 0) return 0;
    if (at < 0 && (f->kind == E_DIV || f->kind == E_MOD) && f->a->lo >= 0) at = j;
  }
  if (at < 0) return 0;
  Mono r = {0, {0}};
  for (int j = 0; j < m->n; j++)
    if (j != at) r.f[r.n++] = m->f[j];
  *q = m->f[at];
  lin_const(rest, 0);
  lin_add_term(rest, &r, 1);
  return 1;
}

static int prove_nonneg(ExprCtx *x, const Lin *p, int depth) {
  if (p->overflow) return 0;
  int64_t lo, hi;
  lin_range(p, &lo, &hi);
  if (lo >= 0) return 1;
  Lin low;
  if (depth > BOUND_DEPTH) return 0;
  if (bound_lin(x, p, 0, &low, depth) && shift_nonneg(&low)) return 1;
  /* a size's quotient or remainder subtracted, alone or times sizes that
     are not negative: any upper bound will do, a/d <= a - 1 (a >= 1,
     d >= 2) or a (a >= 0); a % d <= d - 1 or a */
  for (int i = 0; i < p->n; i++) {
    Expr *q = NULL;
    Lin rest;
    if (p->coef[i] >= 0 || !quotient_factor(&p->m[i], &q, &rest)) continue;
    int64_t dlo = q->b ? q->b->lo : q->c, scale = p->coef[i];
    for (int cand = -1; cand < 2; cand++) {
      Lin up, t = *p;
      if (cand == -1) {  /* c*(a/c) <= a: a coefficient that is a multiple of c */
        if (q->kind != E_DIV || q->b || p->coef[i] % q->c) continue;
        lin_of(&up, q->a, 1);
        scale = p->coef[i] / q->c;
      } else if (cand == 0 && q->kind == E_DIV) {
        lin_of(&up, q->a, 1);
        if (q->a->lo >= 1 && dlo >= 2) up.k -= 1;
      } else if (cand == 0) {
        if (q->b) lin_of(&up, q->b, 1);
        else lin_const(&up, q->c);
        up.k -= 1;
      } else if (q->kind == E_MOD) lin_of(&up, q->a, 1);
      else break;
      Lin upr;
      lin_mul(&upr, &up, &rest);
      t.coef[i] = 0;
      lin_add_lin(&t, &upr, cand == -1 ? scale : p->coef[i]);
      if (prove_nonneg(x, &t, depth + SPLIT_COST)) return 1;
    }
    break;
  }
  /* with m = min(a, b) or max(a, b) in p, p is p[a] or p[b]: both >= 0
     suffices.  Where p grows as m shrinks (min with a negative coefficient,
     max with a positive one, m a term of its own), p >= p[a] and p >= p[b]:
     either suffices. */
  for (int i = 0; i < p->n; i++)
    for (int f = 0; f < p->m[i].n; f++) {
      Expr *mm = p->m[i].f[f];
      if ((mm->kind != E_MIN && mm->kind != E_MAX) || !p->coef[i]) continue;
      Mono one = {1, {mm}}, rest;
      mono_divides(&one, &p->m[i], &rest);
      Lin base = *p, r;
      base.coef[i] = 0;
      lin_const(&r, 0);
      lin_add_term(&r, &rest, p->coef[i]);
      int either = rest.n == 0 && (mm->kind == E_MIN) == (p->coef[i] < 0);
      for (int side = 0; side < 2; side++) {
        Lin op, t, q = base;
        if (side == 0) lin_of(&op, mm->a, 1);
        else if (mm->b) lin_of(&op, mm->b, 1);
        else lin_const(&op, mm->c);
        lin_mul(&t, &r, &op);
        lin_add_lin(&q, &t, 1);
        int ok = prove_nonneg(x, &q, depth + SPLIT_COST);
        if (ok && either) return 1;
        if (!ok && !either) return 0;
      }
      return !either;
    }
  return 0;
}

/* 0 <= r <= d - 1 */
static int in_divisor_range(ExprCtx *x, const Lin *r, Expr *d) {
  Lin top;
  lin_of(&top, d, 1);
  top.k -= 1;
  lin_add_lin(&top, r, -1);
  return prove_nonneg(x, r, 0) && prove_nonneg(x, &top, 0);
}

int ex_cmp(ExprCtx *x, Expr *a, Expr *b) {
  Lin d, nd;
  lin_of(&d, a, 1);
  lin_collect(&d, b, -1);       /* a - b */
  if (d.overflow) return EX_UNKNOWN;
  if (lin_is_zero(&d)) return EX_EQ;
  lin_const(&nd, 0);
  lin_add_lin(&nd, &d, -1);     /* b - a */
  nd.k -= 1;
  if (prove_nonneg(x, &nd, 0)) return EX_LT;
  d.k -= 1;
  if (prove_nonneg(x, &d, 0)) return EX_GT;
  nd.k += 1, d.k += 1;
  if (prove_nonneg(x, &nd, 0)) return EX_LE;
  if (prove_nonneg(x, &d, 0)) return EX_GE;
  return EX_UNKNOWN;
}

/* ---- constructors ---- */

/* q*f*(x / (e*q)) + f*((x / e) % q) == f*(x / e), scaled alike: what
   merging loops into one leaves behind.  e = 1 is d*(a / d) + (a % d) ==
   a (two loops); e > 1 the outer two of three or more merged loops, folded
   from the outside in (an NHWC activation's N, H and W); f a factor both
   terms share (a symbolic stride: 256*W*((L / W) % H) + 256*H*W*(L / (H*W))
   == 256*W*(L / W)). */
static int fold_one(Lin *l, int j, Expr *m) {
  int64_t cq, cj = l->coef[j];
  Mono mq, f, one = {1, {m}};
  if (!divisor_mono(m, &cq, &mq) || !mono_divides(&one, &l->m[j], &f)) return 0;
  Expr *y = m->a;
  for (int split = 0; split < 2; split++) {  /* x = y (e = 1), or y = x / e */
    Expr *xx = y;
    int64_t ce = 1, cd, ci;
    Mono me = {0}, md, fq, dm;
    if (split) {
      if (y->kind != E_DIV || !divisor_mono(y, &ce, &me)) return 0;
      xx = y->a;
    }
    if (__builtin_mul_overflow(ce, cq, &cd) || __builtin_mul_overflow(cq, cj, &ci) || !mono_mul(&md, &me, &mq) ||
        !mono_mul(&fq, &f, &mq))
      continue;
    for (int i = 0; i < l->n; i++) {
      if (i == j || l->coef[i] != ci) continue;
      for (int h = 0; h < l->m[i].n; h++) {
        Expr *d = l->m[i].f[h];
        int64_t dc;
        Mono dmono, rest;
        if (d->kind != E_DIV || !ex_equal(d->a, xx) || !divisor_mono(d, &dc, &dmono) || dc != cd ||
            !mono_equal(&dmono, &md))
          continue;
        dm = (Mono){1, {d}};
        if (!mono_divides(&dm, &l->m[i], &rest) || !mono_equal(&rest, &fq)) continue;
        Lin ly, lf, t;
        lin_of(&ly, y, 1);
        lin_const(&lf, 0);
        lin_add_term(&lf, &f, 1);
        lin_mul(&t, &ly, &lf);
        if (t.overflow) return 0;
        l->coef[i] = l->coef[j] = 0;
        lin_add_lin(l, &t, cj);
        return 1;
      }
    }
  }
  return 0;
}

static void lin_fold_divmod(Lin *l) {
  for (int again = 1; again;) {
    again = 0;
    for (int j = 0; j < l->n && !again; j++)
      for (int g = 0; g < l->m[j].n && !again && l->coef[j]; g++)
        if (l->m[j].f[g]->kind == E_MOD) again = fold_one(l, j, l->m[j].f[g]);
  }
}

Expr *ex_add(ExprCtx *x, Expr *a, Expr *b) {
  Lin l = {0};
  lin_collect(&l, a, 1);
  lin_collect(&l, b, 1);
  lin_fold_divmod(&l);
  if (l.overflow) {
    Expr *s = mk(x, E_ADD);
    s->a = a, s->b = b, s->lo = sat_add(a->lo, b->lo), s->hi = sat_add(a->hi, b->hi);
    return s;
  }
  return lin_build(x, &l);
}

Expr *ex_sub(ExprCtx *x, Expr *a, Expr *b) { return ex_add(x, a, ex_mul(x, b, -1)); }

Expr *ex_mul(ExprCtx *x, Expr *a, int64_t c) {
  if (c == 0) return ex_const(x, 0);
  if (c == 1) return a;
  Lin l = {0};
  lin_collect(&l, a, c);
  return lin_build(x, &l);
}

Expr *ex_mul_e(ExprCtx *x, Expr *a, Expr *b) {
  if (b->kind == E_CONST) return ex_mul(x, a, b->c);
  if (a->kind == E_CONST) return ex_mul(x, b, a->c);
  Lin la, lb, p;
  lin_of(&la, a, 1);
  lin_of(&lb, b, 1);
  lin_mul(&p, &la, &lb);
  if (!p.overflow) return lin_build(x, &p);
  Expr *e = mk(x, E_PROD);  /* too big to expand: kept as it is */
  Mono m = {2, {a, b}};
  e->a = a, e->b = b;
  mono_range(&m, &e->lo, &e->hi);
  return e;
}

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* l = g*B + S with 0 <= S < g, for the largest g with 1 < g < c that divides
   c and some coefficient of l: B the terms g divides (over g) and the
   constant's quotient, S the other terms and the constant's remainder.
   Returns g, or 0 where no such g bounds S.  Then l / c == B / (c/g) and
   l % c == g*(B % (c/g)) + S: an index through a view whose inner dims are
   merged and split again (a window partition: (384*i1 + i2) / 5376 with i2
   in [0, 383] is i1 / 14) becomes the plain index it is. */
static int64_t common_split(const Lin *l, int64_t c, Lin *B, Lin *S) {
  int64_t best = 0;
  for (int i = 0; i < l->n; i++) {
    int64_t g = gcd64(c, l->coef[i] < 0 ? -l->coef[i] : l->coef[i]);
    if (g <= 1 || g >= c || g <= best) continue;
    Lin b = {0}, r = {0};
    b.k = fdiv(l->k, g), r.k = fmodi(l->k, g);
    for (int j = 0; j < l->n; j++) {
      if (l->coef[j] % g == 0) lin_add_term(&b, &l->m[j], l->coef[j] / g);
      else lin_add_term(&r, &l->m[j], l->coef[j]);
    }
    int64_t lo, hi;
    lin_range(&r, &lo, &hi);
    if (lo >= 0 && hi < g) best = g, *B = b, *S = r;
  }
  return best;
}

static Expr *div_node(ExprCtx *x, Expr *a, int64_t c, Expr *d) {
  Expr *e = mk(x, E_DIV);
  e->a = a, e->c = c, e->b = d;
  int64_t dlo = d ? max64(d->lo, 1) : c, dhi = d ? max64(d->hi, 1) : c;
  e->lo = a->lo >= 0 ? sat_fdiv(a->lo, dhi) : sat_fdiv(a->lo, dlo);
  e->hi = a->hi >= 0 ? sat_fdiv(a->hi, dlo) : sat_fdiv(a->hi, dhi);
  return e;
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
    if (l.coef[i] % c == 0) lin_add_term(&q, &l.m[i], l.coef[i] / c);
    else lin_add_term(&r, &l.m[i], l.coef[i]);
  }
  int64_t lo, hi;
  lin_range(&r, &lo, &hi);
  Expr *rest;
  Lin big, small;
  int64_t g;
  if (lo >= 0 && hi < c) rest = NULL;  /* 0 <= r < c: r / c == 0 */
  else if (lin_symbolic(x, &r) && in_divisor_range(x, &r, ex_const(x, c))) rest = NULL;
  else if ((g = common_split(&r, c, &big, &small)) > 0) rest = ex_div(x, lin_build(x, &big), c / g);
  else if (r.n == 1 && r.k == 0 && r.coef[0] > 1 && c % r.coef[0] == 0) {
    /* (k*a) / c == a / (c/k) */
    rest = ex_div(x, mono_expr(x, &r.m[0]), c / r.coef[0]);
  } else if (r.n == 1 && r.coef[0] == 1 && r.m[0].n == 1 && r.m[0].f[0]->kind == E_DIV &&
             (r.k == 0 || !r.m[0].f[0]->b)) {
    Expr *in = r.m[0].f[0];  /* (a / b + k) / c == (a + k*b) / (b*c), b a constant where k is not 0 */
    rest = in->b ? ex_div_e(x, in->a, ex_mul(x, in->b, c))
                 : ex_div(x, ex_add(x, in->a, ex_const(x, r.k * in->c)), in->c * c);
  } else rest = div_node(x, lin_build(x, &r), c, NULL);
  Expr *qe = lin_build(x, &q);
  return rest ? ex_add(x, qe, rest) : qe;
opaque:
  return div_node(x, a, c, NULL);
}

static Expr *mod_node(ExprCtx *x, Expr *a, int64_t c, Expr *d) {
  Expr *m = mk(x, E_MOD);
  m->a = a, m->c = c, m->b = d;
  m->lo = 0, m->hi = d ? max64(sat_add(d->hi, -1), 0) : c - 1;
  if (d && a->lo >= 0) m->hi = min64(m->hi, a->hi);
  return m;
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
    if (k) lin_add_term(&r, &l.m[i], k);
  }
  int64_t lo, hi;
  lin_range(&r, &lo, &hi);
  if (lo >= 0 && hi < c) return lin_build(x, &r);
  if (lin_symbolic(x, &r) && in_divisor_range(x, &r, ex_const(x, c))) return lin_build(x, &r);
  Lin big, small;
  int64_t g = common_split(&r, c, &big, &small);
  if (g > 0) return ex_add(x, ex_mul(x, ex_mod(x, lin_build(x, &big), c / g), g), lin_build(x, &small));
  if (r.n == 1 && r.k == 0 && r.coef[0] > 1 && c % r.coef[0] == 0) {
    /* (k*a) % c == k * (a % (c/k)) */
    return ex_mul(x, ex_mod(x, mono_expr(x, &r.m[0]), c / r.coef[0]), r.coef[0]);
  }
  if (r.n == 1 && r.k == 0 && r.coef[0] == 1 && r.m[0].n == 1 && r.m[0].f[0]->kind == E_MOD &&
      !r.m[0].f[0]->b && r.m[0].f[0]->c % c == 0)
    return ex_mod(x, r.m[0].f[0]->a, c);  /* (a % (m*c)) % c == a % c */
  Expr *inner = lin_build(x, &r);
  Expr *m = mod_node(x, inner, c, NULL);
  if (inner->lo >= 0 && inner->hi - inner->lo < c && fdiv(inner->lo, c) == fdiv(inner->hi, c))
    m->lo = fmodi(inner->lo, c), m->hi = fmodi(inner->hi, c);
  return m;
opaque:
  return mod_node(x, a, c, NULL);
}

/* a = q*d + r, q the terms that d divides (d one monomial): 0 when d is a
   sum, and then q = 0, r = a. */
static void split_by(const Lin *l, Expr *d, Lin *q, Lin *r) {
  Lin dl;
  lin_of(&dl, d, 1);
  lin_const(q, 0);
  lin_const(r, l->k);
  int mono = !dl.overflow && dl.n == 1 && dl.k == 0 && dl.coef[0] >= 1;
  for (int i = 0; i < l->n; i++) {
    Mono rest;
    if (mono && l->coef[i] % dl.coef[0] == 0 && mono_divides(&dl.m[0], &l->m[i], &rest))
      lin_add_term(q, &rest, l->coef[i] / dl.coef[0]);
    else lin_add_term(r, &l->m[i], l->coef[i]);
  }
}

static int lin_equals_expr(const Lin *l, Expr *e) {
  Lin d = *l;
  lin_collect(&d, e, -1);
  return !d.overflow && lin_is_zero(&d);
}

Expr *ex_div_e(ExprCtx *x, Expr *a, Expr *d) {
  if (x->pool->oom) return ex_const(x, 0);  /* d may be the placeholder 0 */
  if (d->kind == E_CONST) return ex_div(x, a, d->c);
  Lin l, q, r;
  lin_of(&l, a, 1);
  if (l.overflow) return div_node(x, a, 0, d);
  split_by(&l, d, &q, &r);
  if (q.overflow || r.overflow) return div_node(x, a, 0, d);
  Expr *rest;
  if (lin_is_zero(&r) || in_divisor_range(x, &r, d)) rest = NULL;          /* 0 <= r < d */
  else if (lin_equals_expr(&r, d)) rest = ex_const(x, 1);
  else if (r.n == 1 && r.k == 0 && r.coef[0] == 1 && r.m[0].n == 1 && r.m[0].f[0]->kind == E_DIV) {
    Expr *in = r.m[0].f[0];  /* (a / b) / d == a / (b*d), b and d positive */
    rest = ex_div_e(x, in->a, ex_mul_e(x, divisor(x, in), d));
  } else rest = div_node(x, lin_build(x, &r), 0, d);
  Expr *qe = lin_build(x, &q);
  return rest ? ex_add(x, qe, rest) : qe;
}

Expr *ex_mod_e(ExprCtx *x, Expr *a, Expr *d) {
  if (x->pool->oom) return ex_const(x, 0);
  if (d->kind == E_CONST) return ex_mod(x, a, d->c);
  Lin l, q, r;
  lin_of(&l, a, 1);
  if (l.overflow) return mod_node(x, a, 0, d);
  split_by(&l, d, &q, &r);
  if (r.overflow) return mod_node(x, a, 0, d);
  if (lin_is_zero(&r) || lin_equals_expr(&r, d)) return ex_const(x, 0);
  if (in_divisor_range(x, &r, d)) return lin_build(x, &r);
  if (r.n == 1 && r.k == 0 && r.coef[0] == 1 && r.m[0].n == 1 && r.m[0].f[0]->kind == E_MOD) {
    Expr *in = r.m[0].f[0];  /* (a % (m*d)) % d == a % d */
    Lin il, iq, ir;
    lin_of(&il, divisor(x, in), 1);
    split_by(&il, d, &iq, &ir);
    if (!iq.overflow && !ir.overflow && lin_is_zero(&ir)) return ex_mod_e(x, in->a, d);
  }
  return mod_node(x, lin_build(x, &r), 0, d);
}

Expr *ex_min(ExprCtx *x, Expr *a, int64_t c) {
  if (a->hi <= c) return a;
  if (a->lo >= c) return ex_const(x, c);
  if (symbolic(x, a)) {
    int r = ex_cmp(x, a, ex_const(x, c));
    if (r == EX_LT || r == EX_LE || r == EX_EQ) return a;
    if (r == EX_GT || r == EX_GE) return ex_const(x, c);
  }
  Expr *e = mk(x, E_MIN);
  e->a = a, e->c = c, e->lo = a->lo, e->hi = c;
  return e;
}

Expr *ex_max(ExprCtx *x, Expr *a, int64_t c) {
  if (a->lo >= c) return a;
  if (a->hi <= c) return ex_const(x, c);
  if (symbolic(x, a)) {
    int r = ex_cmp(x, a, ex_const(x, c));
    if (r == EX_GT || r == EX_GE || r == EX_EQ) return a;
    if (r == EX_LT || r == EX_LE) return ex_const(x, c);
  }
  Expr *e = mk(x, E_MAX);
  e->a = a, e->c = c, e->lo = c, e->hi = a->hi;
  return e;
}

static Expr *minmax_e(ExprCtx *x, int kind, Expr *a, Expr *b) {
  if (b->kind == E_CONST) return kind == E_MIN ? ex_min(x, a, b->c) : ex_max(x, a, b->c);
  if (a->kind == E_CONST) return kind == E_MIN ? ex_min(x, b, a->c) : ex_max(x, b, a->c);
  int r = ex_cmp(x, a, b);
  if (r == EX_EQ || r == EX_LT || r == EX_LE) return kind == E_MIN ? a : b;
  if (r == EX_GT || r == EX_GE) return kind == E_MIN ? b : a;
  if (atom_cmp(b, a) < 0) { Expr *t = a; a = b; b = t; }  /* min(a, b) == min(b, a) */
  Expr *e = mk(x, kind);
  e->a = a, e->b = b;
  e->lo = kind == E_MIN ? min64(a->lo, b->lo) : max64(a->lo, b->lo);
  e->hi = kind == E_MIN ? min64(a->hi, b->hi) : max64(a->hi, b->hi);
  return e;
}

Expr *ex_min_e(ExprCtx *x, Expr *a, Expr *b) { return minmax_e(x, E_MIN, a, b); }
Expr *ex_max_e(ExprCtx *x, Expr *a, Expr *b) { return minmax_e(x, E_MAX, a, b); }

Expr *ex_subst(ExprCtx *x, Expr *e, int var, Expr *by) {
  switch (e->kind) {
  case E_CONST: case E_SYM: return e;
  case E_VAR: return e->var == var ? by : e;
  case E_ADD: return ex_add(x, ex_subst(x, e->a, var, by), ex_subst(x, e->b, var, by));
  case E_PROD: return ex_mul_e(x, ex_subst(x, e->a, var, by), ex_subst(x, e->b, var, by));
  case E_MUL: return ex_mul(x, ex_subst(x, e->a, var, by), e->c);
  }
  Expr *a = ex_subst(x, e->a, var, by);
  if (e->b) {
    Expr *b = ex_subst(x, e->b, var, by);
    switch (e->kind) {
    case E_DIV: return ex_div_e(x, a, b);
    case E_MOD: return ex_mod_e(x, a, b);
    case E_MIN: return ex_min_e(x, a, b);
    case E_MAX: return ex_max_e(x, a, b);
    }
  }
  switch (e->kind) {
  case E_DIV: return ex_div(x, a, e->c);
  case E_MOD: return ex_mod(x, a, e->c);
  case E_MIN: return ex_min(x, a, e->c);
  case E_MAX: return ex_max(x, a, e->c);
  }
  return e;
}

int ex_terms_multiple(const Expr *e, int64_t m, int64_t *k) {
  Lin l;
  lin_of(&l, (Expr *)e, 1);
  if (l.overflow) return 0;
  for (int i = 0; i < l.n; i++)
    if (l.coef[i] % m) return 0;
  *k = l.k;
  return 1;
}

int ex_uses_var(const Expr *e, int var) {
  switch (e->kind) {
  case E_CONST: case E_SYM: return 0;
  case E_VAR: return e->var == var;
  case E_ADD: case E_PROD: return ex_uses_var(e->a, var) || ex_uses_var(e->b, var);
  default: return ex_uses_var(e->a, var) || (e->b && ex_uses_var(e->b, var));
  }
}

/* Does e use a loop or gathered variable (not only sizes and constants)? */
static int uses_vars(const Expr *e) {
  switch (e->kind) {
  case E_VAR: return 1;
  case E_CONST: case E_SYM: return 0;
  case E_MUL: return uses_vars(e->a);
  default: return uses_vars(e->a) || (e->b && uses_vars(e->b));
  }
}

int ex_count_divmod(const Expr *e) {
  switch (e->kind) {
  case E_CONST: case E_VAR: case E_SYM: return 0;
  case E_ADD: case E_PROD: return ex_count_divmod(e->a) + ex_count_divmod(e->b);
  case E_DIV: case E_MOD:  /* a size's ((s0 + 1) / 2) is the same at every point: not counted */
    return uses_vars(e->a) + ex_count_divmod(e->a) + (e->b ? ex_count_divmod(e->b) : 0);
  default: return ex_count_divmod(e->a) + (e->b ? ex_count_divmod(e->b) : 0);
  }
}

int64_t ex_eval(const Expr *e, const int64_t *vars, const int64_t *syms) {
  switch (e->kind) {
  case E_CONST: return e->c;
  case E_VAR: return vars[e->var];
  case E_SYM: return syms[e->var];
  case E_ADD: return ex_eval(e->a, vars, syms) + ex_eval(e->b, vars, syms);
  case E_PROD: return ex_eval(e->a, vars, syms) * ex_eval(e->b, vars, syms);
  case E_MUL: return ex_eval(e->a, vars, syms) * e->c;
  }
  int64_t a = ex_eval(e->a, vars, syms), b = e->b ? ex_eval(e->b, vars, syms) : e->c;
  switch (e->kind) {
  case E_DIV: return b ? fdiv(a, b) : 0;
  case E_MOD: return b ? fmodi(a, b) : 0;
  case E_MIN: return min64(a, b);
  case E_MAX: return max64(a, b);
  }
  return 0;
}

/* an operand of * or a divisor, parenthesized unless it is one token or a call */
static void print_factor(Str *b, const Expr *e, const char *const *names) {
  int paren = e->kind == E_ADD || e->kind == E_DIV || e->kind == E_MOD || e->kind == E_MUL || e->kind == E_PROD;
  if (paren) str_puts(b, "(");
  ex_print(b, e, names);
  if (paren) str_puts(b, ")");
}

void ex_print(Str *b, const Expr *e, const char *const *names) {
  switch (e->kind) {
  case E_CONST: str_printf(b, "%lld", (long long)e->c); break;
  case E_VAR: str_puts(b, names[e->var]); break;
  case E_SYM: str_printf(b, "s%d", e->var); break;
  case E_ADD:
    ex_print(b, e->a, names);
    if (e->b->kind == E_CONST && e->b->c < 0) str_printf(b, " - %lld", -(long long)e->b->c);
    else if (e->b->kind == E_MUL && e->b->c < 0) {
      str_puts(b, " - ");
      if (e->b->c == -1) ex_print(b, e->b->a, names);  /* - binds looser than / and % */
      else {
        const Expr *f = e->b->a;
        int paren = f->kind == E_ADD || f->kind == E_DIV || f->kind == E_MOD;
        str_printf(b, "%lld*%s", -(long long)e->b->c, paren ? "(" : "");
        ex_print(b, f, names);
        if (paren) str_puts(b, ")");
      }
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
  case E_PROD:  /* a chain of atoms: a*b*c, each atom that is an operation in parentheses */
    print_factor(b, e->a, names);
    str_puts(b, "*");
    if (e->b->kind == E_PROD) ex_print(b, e->b, names);
    else print_factor(b, e->b, names);
    break;
  case E_DIV: case E_MOD: {
    int nonneg = e->a->lo >= 0;
    if (!nonneg) str_puts(b, e->kind == E_DIV ? "em_ifloordiv(" : "em_ifloormod(");
    else str_puts(b, "(");
    ex_print(b, e->a, names);
    if (e->b && nonneg) {
      str_puts(b, e->kind == E_DIV ? ") / " : ") % ");
      print_factor(b, e->b, names);
    } else if (e->b) {
      str_puts(b, ", ");
      ex_print(b, e->b, names);
      str_puts(b, ")");
    } else if (nonneg) str_printf(b, e->kind == E_DIV ? ") / %lld" : ") %% %lld", (long long)e->c);
    else str_printf(b, ", %lld)", (long long)e->c);
    break;
  }
  case E_MIN: case E_MAX:
    str_puts(b, e->kind == E_MIN ? "em_imin(" : "em_imax(");
    ex_print(b, e->a, names);
    if (e->b) {
      str_puts(b, ", ");
      ex_print(b, e->b, names);
      str_puts(b, ")");
    } else str_printf(b, ", %lld)", (long long)e->c);
    break;
  }
}
