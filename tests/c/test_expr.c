/* test_expr.c - the index-expression simplifier: the rules that turn view
   arithmetic back into plain indices, floor semantics, printing, gathered
   variables (indices loaded at run time), and allocation failure; with size
   variables, the same rules proved for every size in the bounds, and a
   randomized check that simplifying never changes a value. */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "t.h"

static const char *names[] = {"i0", "i1", "i2", "L"};

static int prints(Expr *e, const char *want) {
  Str s = {0};
  ex_print(&s, e, names);
  int ok = s.s && !strcmp(s.s, want);
  if (!ok) fprintf(stderr, "  printed `%s`, wanted `%s`\n", s.s ? s.s : "(null)", want);
  str_free(&s);
  return ok;
}

/* ---- size variables ---- */

static void test_symbolic(void) {
  Pool pool = {0};
  ExSyms syms = {0};
  int S0 = ex_add_sym(&syms, 2, EX_INF), S1 = ex_add_sym(&syms, 2, EX_INF), S2 = ex_add_sym(&syms, 2, 64);
  CHECK(S0 == 0 && S1 == 1 && S2 == 2);
  ExprCtx x = {&pool, 4, {0}};
  x.syms = &syms;
  Expr *s0 = ex_sym(&x, S0), *s1 = ex_sym(&x, S1), *s2 = ex_sym(&x, S2);
  CHECK(s0->kind == E_SYM && s0->lo == 2 && s0->hi == EX_INF && s2->hi == 64);
  Expr *s01 = ex_mul_e(&x, s0, s1);
  ex_set_size(&x, 0, s0);    /* i0 in [0, s0-1] */
  ex_set_size(&x, 1, s1);    /* i1 in [0, s1-1] */
  ex_set_size(&x, 2, s2);    /* i2 in [0, s2-1], s2 <= 64 */
  ex_set_size(&x, 3, s01);   /* L  in [0, s0*s1-1] */
  CHECK(x.vsize[0] == s0 && x.vhi[0] == EX_INF && x.vhi[2] == 63);
  Expr *i0 = ex_var(&x, 0), *i1 = ex_var(&x, 1), *i2 = ex_var(&x, 2), *L = ex_var(&x, 3);
  Expr *one = ex_const(&x, 1), *zero = ex_const(&x, 0);

  /* reshape round trip: (i0*s1 + i1) / s1 == i0, % s1 == i1 */
  Expr *lin = ex_add(&x, ex_mul_e(&x, i0, s1), i1);
  CHECK(prints(lin, "i0*s1 + i1"));
  CHECK(ex_equal(ex_div_e(&x, lin, s1), i0));
  CHECK(ex_equal(ex_mod_e(&x, lin, s1), i1));
  CHECK(ex_equal(ex_mod_e(&x, i1, s1), i1));      /* i1 < s1 */
  CHECK(ex_equal(ex_div_e(&x, i1, s1), zero));
  /* three dims: (i0*s1*s2 + i1*s2 + i2) / s2 % s1 == i1 */
  Expr *lin3 = ex_add(&x, ex_mul_e(&x, lin, s2), i2);
  CHECK(prints(lin3, "i0*s1*s2 + i1*s2 + i2"));
  CHECK(ex_equal(ex_mod_e(&x, ex_div_e(&x, lin3, s2), s1), i1));
  CHECK(ex_equal(ex_div_e(&x, lin3, ex_mul_e(&x, s1, s2)), i0));
  CHECK(ex_equal(ex_mod_e(&x, lin3, ex_mul_e(&x, s2, s1)), ex_add(&x, ex_mul_e(&x, i1, s2), i2)));
  /* sizes alone */
  CHECK(ex_equal(ex_div_e(&x, s01, s1), s0));
  CHECK(ex_equal(ex_mod_e(&x, s01, s1), zero));
  CHECK(ex_equal(ex_div_e(&x, s1, s1), one));
  CHECK(ex_equal(ex_div_e(&x, ex_mul(&x, s01, 6), ex_mul(&x, s0, 3)), ex_mul(&x, s1, 2)));
  CHECK(prints(ex_div(&x, ex_add(&x, s0, one), 2), "(s0 + 1) / 2"));
  CHECK(prints(ex_mod(&x, s0, 4), "(s0) % 4"));
  CHECK(prints(ex_div(&x, ex_mul(&x, s0, 4), 2), "2*s0"));
  /* nested floor divisions: ((s0 + 1) / 2 + 1) / 2 == (s0 + 3) / 4 (a max pool's windows over a
     stride-2 convolution's result); ((s0 + 1) / 2 - 1) / 2 at each s0 */
  Expr *hs0 = ex_div(&x, ex_add(&x, s0, one), 2);
  CHECK(ex_cmp(&x, ex_div(&x, ex_add(&x, hs0, one), 2), ex_div(&x, ex_add(&x, s0, ex_const(&x, 3)), 4)) == EX_EQ);
  Expr *down = ex_div(&x, ex_add(&x, hs0, ex_const(&x, -1)), 2);
  for (int64_t v = 2; v < 40; v++) {
    int64_t sv[3] = {v, 2, 2};
    CHECK(ex_eval(down, NULL, sv) == ((v + 1) / 2 - 1) / 2);
  }
  /* merging loops: i0 := L / s1, i1 := L % s1 turns i0*s1 + i1 into L */
  Expr *q = ex_div_e(&x, L, s1), *r = ex_mod_e(&x, L, s1);
  CHECK(prints(q, "(L) / s1") && prints(r, "(L) % s1"));
  CHECK(ex_equal(ex_subst(&x, ex_subst(&x, lin, 0, q), 1, r), L));
  /* three loops merged (an NHWC activation's N, H, W): i0 := L / (s1*s2), i1 := (L / s2) % s1,
     i2 := L % s2 turn 256*(i0*s1*s2 + i1*s2 + i2) into 256*L, folded from the outside in with
     the stride s2 a factor of two terms */
  Expr *m3 = ex_mul(&x, lin3, 256);
  m3 = ex_subst(&x, m3, 0, ex_div_e(&x, L, ex_mul_e(&x, s1, s2)));
  m3 = ex_subst(&x, m3, 1, ex_mod_e(&x, ex_div_e(&x, L, s2), s1));
  m3 = ex_subst(&x, m3, 2, ex_mod_e(&x, L, s2));
  CHECK(prints(m3, "256*L"));
  /* and not where the coefficients do not line up: 3*s2 times the middle index */
  Expr *off = ex_add(&x, ex_mul_e(&x, ex_mod_e(&x, ex_div_e(&x, L, s2), s1), ex_mul(&x, s2, 3)),
                     ex_mul_e(&x, ex_div_e(&x, L, ex_mul_e(&x, s1, s2)), ex_mul_e(&x, s1, s2)));
  CHECK(!ex_equal(off, ex_mul_e(&x, ex_div_e(&x, L, s2), s2)));
  for (int64_t a = 2; a < 6; a++)
    for (int64_t b = 2; b < 6; b++)
      for (int64_t l = 0; l < 4 * a * b; l += 3) {
        int64_t sv[3] = {4, a, b}, iv[4] = {0, 0, 0, l};
        CHECK(ex_eval(off, iv, sv) == 3 * b * ((l / b) % a) + a * b * (l / (a * b)));
      }
  /* and the range of L / s1 is [0, s0-1]: % s0 does nothing, / s0 is 0 */
  CHECK(ex_equal(ex_mod_e(&x, q, s0), q));
  CHECK(ex_equal(ex_div_e(&x, q, s0), zero));
  CHECK(ex_equal(ex_div_e(&x, q, s2), ex_div_e(&x, L, ex_mul_e(&x, s1, s2))));  /* (L/s1)/s2 == L/(s1*s2) */
  /* not provable for every size: kept */
  CHECK(prints(ex_mod_e(&x, i0, s1), "(i0) % s1"));
  CHECK(prints(ex_div_e(&x, i1, s0), "(i1) / s0"));
  CHECK(prints(ex_mod_e(&x, ex_add(&x, i1, one), s1), "(i1 + 1) % s1"));
  CHECK(ex_equal(ex_mod_e(&x, i0, s01), i0));     /* i0 <= s0 - 1 <= s0*s1 - 1 */
  CHECK(prints(ex_mod_e(&x, L, ex_mul_e(&x, s0, s2)), "(L) % (s0*s2)"));
  CHECK(prints(ex_div_e(&x, ex_add(&x, i1, ex_const(&x, -3)), s0), "em_ifloordiv(i1 - 3, s0)"));
  CHECK(prints(ex_mul_e(&x, ex_mul(&x, i0, 3), s1), "3*i0*s1"));
  CHECK(prints(ex_sub(&x, s01, ex_mul_e(&x, i1, s0)), "-1*i1*s0 + s0*s1"));
  CHECK(prints(ex_sub(&x, i0, ex_mul(&x, ex_mul_e(&x, i1, s0), 2)), "i0 - 2*i1*s0"));
  /* a bounded size keeps the numeric rules: i2 <= 63 */
  CHECK(ex_equal(ex_mod(&x, i2, 64), i2));
  CHECK(ex_equal(ex_min(&x, i2, 100), i2));
  /* min and max with a size */
  Expr *s1m1 = ex_add(&x, s1, ex_const(&x, -1));
  CHECK(ex_equal(ex_min_e(&x, i1, s1m1), i1));
  CHECK(ex_equal(ex_max_e(&x, i1, zero), i1));
  CHECK(ex_equal(ex_min_e(&x, ex_add(&x, i1, one), s1), ex_add(&x, i1, one)));
  CHECK(prints(ex_min_e(&x, ex_add(&x, i1, one), s1m1), "em_imin(i1 + 1, s1 - 1)"));
  /* a pad's clamp: max(i1 - 2, 0) <= s1 - 1, proved case by case */
  Expr *clamp = ex_max(&x, ex_add(&x, i1, ex_const(&x, -2)), 0);
  CHECK(ex_equal(ex_min_e(&x, clamp, s1m1), clamp));
  CHECK(ex_cmp(&x, ex_min_e(&x, s0, s1), s0) == EX_LE);
  CHECK(ex_cmp(&x, ex_max_e(&x, s0, s1), ex_add(&x, s0, s1)) == EX_LT);
  CHECK(ex_equal(ex_min_e(&x, s0, s1), ex_min_e(&x, s1, s0)));     /* canonical order */
  CHECK(ex_equal(ex_min(&x, ex_add(&x, i1, ex_const(&x, -5)), -2), ex_add(&x, i1, ex_const(&x, -5))) == 0);
  CHECK(ex_equal(ex_max(&x, ex_add(&x, i1, one), 1), ex_add(&x, i1, one)));
  /* comparing size expressions */
  CHECK(ex_cmp(&x, s01, s1) == EX_GT);
  CHECK(ex_cmp(&x, s0, s1) == EX_UNKNOWN);
  CHECK(ex_cmp(&x, ex_add(&x, s0, one), s0) == EX_GT);
  CHECK(ex_cmp(&x, ex_mul_e(&x, s1, s0), s01) == EX_EQ);
  CHECK(ex_cmp(&x, i1, s1) == EX_LT);
  CHECK(ex_cmp(&x, L, s01) == EX_LT);
  CHECK(ex_cmp(&x, lin, s01) == EX_LT);
  CHECK(ex_cmp(&x, s0, ex_const(&x, 2)) == EX_GE);
  CHECK(ex_cmp(&x, ex_mul(&x, s0, 2), ex_add(&x, s0, ex_const(&x, 2))) == EX_GE);
  CHECK(ex_cmp(&x, ex_div(&x, s0, 2), zero) == EX_GT);
  CHECK(ex_cmp(&x, ex_div(&x, s0, 2), s0) == EX_LT);           /* a slice [:s0//2] fits in s0 */
  CHECK(ex_cmp(&x, ex_div(&x, ex_add(&x, s0, one), 2), s0) == EX_LE);
  CHECK(ex_cmp(&x, ex_mod(&x, s0, 4), ex_const(&x, 3)) == EX_LE);
  CHECK(ex_cmp(&x, ex_mod_e(&x, s0, s1), s1) == EX_LT);
  CHECK(ex_cmp(&x, ex_mod_e(&x, s0, s1), s0) == EX_LE);
  CHECK(ex_cmp(&x, ex_div_e(&x, s0, s1), s0) == EX_LT);
  CHECK(ex_is_size(s01) && ex_is_size(ex_div(&x, s0, 2)) && !ex_is_size(lin));
  /* sizes that may be 0: (s0 - 2)*s1 expands to s0*s1 - 2*s1, whose termwise range is not
     its own: its lower bound is proved; a slice [:s0//4] of [s0, s1] rows, s1//2 halves */
  Expr *m2 = ex_add(&x, s0, ex_const(&x, -2)), *tail = ex_mul_e(&x, m2, s1);
  CHECK(m2->lo == 0 && tail->lo == 0 && ex_mul_e(&x, ex_add(&x, s0, ex_const(&x, -1)), s1)->lo == 1);
  CHECK(ex_cmp(&x, ex_mul_e(&x, ex_div(&x, s0, 4), s1), s01) == EX_LT);
  int half = ex_cmp(&x, ex_mul(&x, ex_div(&x, s1, 2), 2), s1);
  CHECK(half == EX_LE || half == EX_LT);
  /* evaluation at call time */
  int64_t sv[3] = {5, 7, 3}, vv[4] = {4, 6, 2, 34};
  CHECK(ex_eval(lin, vv, sv) == 4 * 7 + 6);
  CHECK(ex_eval(lin3, vv, sv) == (4 * 7 + 6) * 3 + 2);
  CHECK(ex_eval(q, vv, sv) == 4 && ex_eval(r, vv, sv) == 6);
  CHECK(ex_eval(ex_div(&x, ex_add(&x, s0, one), 2), NULL, sv) == 3);
  CHECK(ex_eval(ex_div_e(&x, ex_add(&x, i1, ex_const(&x, -8)), s0), vv, sv) == -1);
  CHECK(ex_eval(ex_mod_e(&x, ex_add(&x, i1, ex_const(&x, -8)), s0), vv, sv) == 3);
  /* a gathered index into a dim of size s0 */
  int g = ex_push_var_size(&x, s0);
  CHECK(g == EX_GATHERED && x.vsize[g] == s0);
  Expr *gv = ex_var(&x, g), *row = ex_add(&x, ex_mul_e(&x, gv, s1), i1);
  CHECK(ex_equal(ex_div_e(&x, row, s1), gv) && ex_equal(ex_mod_e(&x, row, s1), i1));
  CHECK(ex_cmp(&x, row, s01) == EX_LT);
  ex_pop_var(&x);
  CHECK(ex_push_var(&x, 9) == g && x.vsize[g] == NULL);  /* reused with a constant range */
  ex_pop_var(&x);
  /* a size known by a guard to be one value is that constant */
  ExSyms fixed = {0};
  ex_add_sym(&fixed, 8, 8);
  ExprCtx y = {&pool, 0, {0}};
  y.syms = &fixed;
  CHECK(ex_sym(&y, 0)->kind == E_CONST && ex_sym(&y, 0)->c == 8);
  ex_set_size(&y, 0, ex_const(&y, 8));
  CHECK(y.vhi[0] == 7 && y.vsize[0] == NULL);
  pool_free(&pool);
}

/* ---- randomized: simplifying keeps every value ---- */
enum { Q_CONST, Q_VAR, Q_SYM, Q_ADD, Q_SUB, Q_MULC, Q_MUL, Q_DIVC, Q_MODC, Q_DIV, Q_MOD, Q_MIN, Q_MAX,
       Q_MINC, Q_MAXC, Q_RESHAPE, Q_NOPS };
typedef struct Rec { int op; int64_t c; int v; struct Rec *a, *b; } Rec;
#define NSYM 4
#define NVAR 3
#define MAXREC 512
static Rec recs[MAXREC];
static int nrec;
static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static Rec *rec(int op, int64_t c, int v, Rec *a, Rec *b) {
  Rec *r = &recs[nrec++];
  r->op = op, r->c = c, r->v = v, r->a = a, r->b = b;
  return r;
}

/* a size expression, at least 1 for sizes at least 2 */
static Rec *gen_size(void) {
  Rec *s = rec(Q_SYM, 0, (int)pick(0, NSYM - 1), NULL, NULL);
  switch (pick(0, 6)) {
  case 0: return rec(Q_CONST, pick(1, 6), 0, NULL, NULL);
  case 1: return rec(Q_MUL, 0, 0, s, rec(Q_SYM, 0, (int)pick(0, NSYM - 1), NULL, NULL));
  case 2: return rec(Q_DIVC, 2, 0, rec(Q_ADD, 0, 0, s, rec(Q_CONST, 1, 0, NULL, NULL)), NULL);
  case 3: return rec(Q_SUB, 0, 0, s, rec(Q_CONST, 1, 0, NULL, NULL));
  case 4: return rec(Q_MULC, pick(2, 3), 0, s, NULL);
  default: return s;
  }
}

static Rec *vext[NVAR];    /* the loop variables' extents */

static Rec *gen(int depth) {
  if (nrec > MAXREC - 16) return rec(Q_CONST, 1, 0, NULL, NULL);
  int op = depth <= 0 ? (int)pick(Q_CONST, Q_SYM) : (int)pick(Q_CONST, Q_NOPS - 1);
  switch (op) {
  case Q_CONST: return rec(Q_CONST, pick(-4, 6), 0, NULL, NULL);
  case Q_VAR: return rec(Q_VAR, 0, (int)pick(0, NVAR - 1), NULL, NULL);
  case Q_SYM: return rec(Q_SYM, 0, (int)pick(0, NSYM - 1), NULL, NULL);
  case Q_MULC: case Q_DIVC: case Q_MODC: case Q_MINC: case Q_MAXC:
    return rec(op, op == Q_MULC ? pick(-3, 4) : op >= Q_MINC ? pick(-2, 8) : pick(1, 8), 0, gen(depth - 1), NULL);
  case Q_DIV: case Q_MOD: return rec(op, 0, 0, gen(depth - 1), gen_size());
  case Q_RESHAPE: {  /* a*ext(v) + v: the index arithmetic of a reshape */
    int v = (int)pick(0, NVAR - 1);
    Rec *t = rec(Q_ADD, 0, 0, rec(Q_MUL, 0, 0, gen(depth - 1), vext[v]), rec(Q_VAR, 0, v, NULL, NULL));
    return pick(0, 1) ? rec(pick(0, 1) ? Q_DIV : Q_MOD, 0, 0, t, vext[v]) : t;
  }
  default: return rec(op, 0, 0, gen(depth - 1), gen(depth - 1));
  }
}

static int64_t fl_div(int64_t a, int64_t b) { int64_t q = a / b; return (a % b && (a < 0) != (b < 0)) ? q - 1 : q; }

static int64_t rec_eval(const Rec *r, const int64_t *vars, const int64_t *syms) {
  int64_t a = r->a ? rec_eval(r->a, vars, syms) : 0, b = r->b ? rec_eval(r->b, vars, syms) : 0;
  switch (r->op) {
  case Q_CONST: return r->c;
  case Q_VAR: return vars[r->v];
  case Q_SYM: return syms[r->v];
  case Q_ADD: return a + b;
  case Q_SUB: return a - b;
  case Q_MULC: return a * r->c;
  case Q_MUL: return a * b;
  case Q_DIVC: return fl_div(a, r->c);
  case Q_MODC: return a - fl_div(a, r->c) * r->c;
  case Q_DIV: return fl_div(a, b);
  case Q_MOD: return a - fl_div(a, b) * b;
  case Q_MIN: return a < b ? a : b;
  case Q_MAX: return a > b ? a : b;
  case Q_MINC: return a < r->c ? a : r->c;
  case Q_MAXC: return a > r->c ? a : r->c;
  }
  return 0;
}

static Expr *rec_build(ExprCtx *x, const Rec *r) {
  Expr *a = r->a ? rec_build(x, r->a) : NULL, *b = r->b ? rec_build(x, r->b) : NULL;
  switch (r->op) {
  case Q_CONST: return ex_const(x, r->c);
  case Q_VAR: return ex_var(x, r->v);
  case Q_SYM: return ex_sym(x, r->v);
  case Q_ADD: return ex_add(x, a, b);
  case Q_SUB: return ex_sub(x, a, b);
  case Q_MULC: return ex_mul(x, a, r->c);
  case Q_MUL: return ex_mul_e(x, a, b);
  case Q_DIVC: return ex_div(x, a, r->c);
  case Q_MODC: return ex_mod(x, a, r->c);
  case Q_DIV: return ex_div_e(x, a, b);
  case Q_MOD: return ex_mod_e(x, a, b);
  case Q_MIN: return ex_min_e(x, a, b);
  case Q_MAX: return ex_max_e(x, a, b);
  case Q_MINC: return ex_min(x, a, r->c);
  case Q_MAXC: return ex_max(x, a, r->c);
  }
  return NULL;
}

static int rec_divmods(const Rec *r) {
  if (!r) return 0;
  return (r->op == Q_DIV || r->op == Q_MOD || r->op == Q_DIVC || r->op == Q_MODC) + rec_divmods(r->a) + rec_divmods(r->b);
}

/* The printed C read back with C's rules (truncating / and %, precedence),
   to check that the text means the expression: vars i0.., sizes s0.. */
typedef struct Cread { const char *p; const int64_t *vars, *syms; int bad; } Cread;
static int64_t c_sum(Cread *r);
static void c_space(Cread *r) { while (*r->p == ' ') r->p++; }
static int64_t c_unary(Cread *r) {
  c_space(r);
  if (*r->p == '-') { r->p++; return -c_unary(r); }
  if (*r->p == '(') {
    r->p++;
    int64_t v = c_sum(r);
    c_space(r);
    if (*r->p++ != ')') r->bad = 1;
    return v;
  }
  if (*r->p >= '0' && *r->p <= '9') return strtoll(r->p, (char **)&r->p, 10);
  const char *fns[4] = {"em_imin(", "em_imax(", "em_ifloordiv(", "em_ifloormod("};
  for (int f = 0; f < 4; f++)
    if (!strncmp(r->p, fns[f], strlen(fns[f]))) {
      r->p += strlen(fns[f]);
      int64_t a = c_sum(r);
      c_space(r);
      if (*r->p++ != ',') r->bad = 1;
      int64_t b = c_sum(r);
      c_space(r);
      if (*r->p++ != ')' || (f >= 2 && b == 0)) { r->bad = 1; return 0; }
      int64_t q = f >= 2 ? fl_div(a, b) : 0;
      return f == 0 ? (a < b ? a : b) : f == 1 ? (a > b ? a : b) : f == 2 ? q : a - q * b;
    }
  if ((*r->p == 'i' || *r->p == 's') && r->p[1] >= '0' && r->p[1] <= '9') {
    char kind = *r->p++;
    long n = strtol(r->p, (char **)&r->p, 10);
    return kind == 'i' ? r->vars[n] : r->syms[n];
  }
  r->bad = 1;
  return 0;
}
static int64_t c_product(Cread *r) {
  int64_t v = c_unary(r);
  for (;;) {
    c_space(r);
    char op = *r->p;
    if (op != '*' && op != '/' && op != '%') return v;
    r->p++;
    int64_t b = c_unary(r);
    if (op != '*' && b == 0) { r->bad = 1; return 0; }
    v = op == '*' ? v * b : op == '/' ? v / b : v % b;  /* C's truncating division */
  }
}
static int64_t c_sum(Cread *r) {
  int64_t v = c_product(r);
  for (;;) {
    c_space(r);
    char op = *r->p;
    if (op != '+' && op != '-') return v;
    r->p++;
    int64_t b = c_product(r);
    v = op == '+' ? v + b : v - b;
  }
}
static int c_reads(const char *text, const int64_t *vars, const int64_t *syms, int64_t want) {
  Cread r = {text, vars, syms, 0};
  int64_t v = c_sum(&r);
  return !r.bad && *r.p == 0 && v == want;
}

/* every node's value within its range */
static int in_range(const Expr *e, const int64_t *vars, const int64_t *syms) {
  int64_t v = ex_eval(e, vars, syms);
  if (v < e->lo || v > e->hi) return 0;
  if (e->kind == E_CONST || e->kind == E_VAR || e->kind == E_SYM) return 1;
  return in_range(e->a, vars, syms) && (!e->b || in_range(e->b, vars, syms));
}

static void test_random(void) {
  ExSyms syms = {0};
  ex_add_sym(&syms, 2, EX_INF);
  ex_add_sym(&syms, 2, EX_INF);
  ex_add_sym(&syms, 3, 16);      /* a guard: 3 <= s2 <= 16 */
  ex_add_sym(&syms, 2, 5);
  int wrong = 0, out_of_range = 0, cmp_wrong = 0, fewer = 0, proved = 0, checked = 0, misprinted = 0;
  for (int trial = 0; trial < 3000; trial++) {
    Pool pool = {0};
    ExprCtx x = {&pool, NVAR, {0}};
    x.syms = &syms;
    nrec = 0;
    for (int v = 0; v < NVAR; v++) ex_set_size(&x, v, rec_build(&x, vext[v] = gen_size()));
    Rec *r = gen((int)pick(1, 4)), *r2 = gen((int)pick(0, 2));
    Expr *e = rec_build(&x, r), *e2 = rec_build(&x, r2);
    int rel = ex_cmp(&x, e, e2);
    proved += rel != EX_UNKNOWN;
    fewer += ex_count_divmod(e) < rec_divmods(r);
    Str text = {0};
    ex_print(&text, e, names);
    for (int k = 0; k < 40; k++) {
      int64_t sv[NSYM], vv[NVAR];
      for (int s = 0; s < NSYM; s++) sv[s] = pick(syms.lo[s], syms.hi[s] < syms.lo[s] + 9 ? syms.hi[s] : syms.lo[s] + 9);
      for (int v = 0; v < NVAR; v++) vv[v] = pick(0, rec_eval(vext[v], vv, sv) - 1);
      int64_t want = rec_eval(r, vv, sv), got = ex_eval(e, vv, sv);
      checked++;
      if (want != got) {
        if (wrong++ < 5) {
          Str s = {0};
          ex_print(&s, e, names);
          fprintf(stderr, "  trial %d: %s = %lld, wanted %lld (s = %lld %lld %lld %lld, i = %lld %lld %lld)\n", trial,
                  s.s, (long long)got, (long long)want, (long long)sv[0], (long long)sv[1], (long long)sv[2],
                  (long long)sv[3], (long long)vv[0], (long long)vv[1], (long long)vv[2]);
          str_free(&s);
        }
      }
      if (!in_range(e, vv, sv)) out_of_range++;
      if (text.s && !c_reads(text.s, vv, sv, got) && misprinted++ < 5) fprintf(stderr, "  C reads `%s` otherwise\n", text.s);
      int64_t a = got, b = ex_eval(e2, vv, sv);
      int ok = rel == EX_UNKNOWN || (rel == EX_EQ && a == b) || (rel == EX_LT && a < b) || (rel == EX_LE && a <= b) ||
               (rel == EX_GT && a > b) || (rel == EX_GE && a >= b);
      cmp_wrong += !ok;
    }
    str_free(&text);
    pool_free(&pool);
  }
  printf("test_expr: random: %d evaluations, %d expressions lost a division or modulo, %d comparisons proved\n",
         checked, fewer, proved);
  CHECK_MSG(wrong == 0, "%d values changed by simplifying", wrong);
  CHECK_MSG(out_of_range == 0, "%d values outside their node's range", out_of_range);
  CHECK_MSG(cmp_wrong == 0, "%d comparisons wrong", cmp_wrong);
  CHECK_MSG(misprinted == 0, "%d printed expressions C reads otherwise", misprinted);
  CHECK(fewer > 100 && proved > 100);  /* the rules were exercised, not only kept */
}

int main(void) {
  Pool pool = {0};
  ExprCtx x = {&pool, 4, {7, 15, 0, 127}};  /* i0 in [0,7], i1 in [0,15], i2 size 1, L in [0,127] */
  Expr *i0 = ex_var(&x, 0), *i1 = ex_var(&x, 1), *L = ex_var(&x, 3);
  CHECK(ex_var(&x, 2)->kind == E_CONST);  /* a size-1 dim is the constant 0 */

  /* reshape round trip: (16*i0 + i1) / 16 == i0, % 16 == i1 */
  Expr *lin = ex_add(&x, ex_mul(&x, i0, 16), i1);
  CHECK(ex_equal(ex_div(&x, lin, 16), i0));
  CHECK(ex_equal(ex_mod(&x, lin, 16), i1));
  CHECK(prints(lin, "16*i0 + i1"));
  /* pulling out divisible terms and constants */
  CHECK(prints(ex_div(&x, ex_add(&x, ex_mul(&x, i0, 8), ex_const(&x, 4)), 4), "2*i0 + 1"));
  CHECK(prints(ex_mod(&x, ex_add(&x, ex_mul(&x, i0, 8), ex_const(&x, 5)), 4), "1"));
  /* (k*a) / c == a / (c/k) and (k*a) % c == k * (a % (c/k)) */
  CHECK(prints(ex_div(&x, ex_mul(&x, L, 4), 16), "(L) / 4"));
  CHECK(prints(ex_mod(&x, ex_mul(&x, L, 5), 16), "(5*L) % 16"));
  CHECK(prints(ex_mod(&x, ex_mul(&x, L, 4), 16), "4*((L) % 4)"));
  /* nested: (L / 4) / 8 == L / 32; (L % 32) % 8 == L % 8 */
  CHECK(prints(ex_div(&x, ex_div(&x, L, 4), 8), "(L) / 32"));
  CHECK(prints(ex_mod(&x, ex_mod(&x, L, 32), 8), "(L) % 8"));
  /* three loops merged with constant sizes: 64*(L / 64) + 16*((L / 16) % 4) + (L % 16) == L */
  Expr *f3 = ex_add(&x, ex_mul(&x, ex_div(&x, L, 64), 64),
                    ex_add(&x, ex_mul(&x, ex_mod(&x, ex_div(&x, L, 16), 4), 16), ex_mod(&x, L, 16)));
  CHECK(ex_equal(f3, L));
  /* merged dims split again (a window partition): (16*i0 + i1) / 32 == i0 / 2 with i1 in [0, 15],
     and % 32 == 16*(i0 % 2) + i1; with i1 + 1 (up to 16) it stays a division */
  Expr *win = ex_add(&x, ex_mul(&x, i0, 16), i1);
  CHECK(prints(ex_div(&x, win, 32), "(i0) / 2"));
  CHECK(prints(ex_mod(&x, win, 32), "i1 + 16*((i0) % 2)"));
  CHECK(prints(ex_div(&x, ex_add(&x, ex_mul(&x, i0, 48), ex_mul(&x, i1, 3)), 96), "(i0) / 2"));
  CHECK(prints(ex_div(&x, ex_add(&x, win, ex_const(&x, 1)), 32), "(16*i0 + i1 + 1) / 32"));
  /* ranges drop what cannot matter */
  CHECK(ex_equal(ex_div(&x, i1, 16), ex_const(&x, 0)));
  CHECK(ex_equal(ex_mod(&x, i1, 16), i1));
  CHECK(ex_equal(ex_min(&x, i1, 100), i1));
  CHECK(ex_equal(ex_max(&x, i1, 0), i1));
  CHECK(prints(ex_min(&x, ex_max(&x, ex_add(&x, i1, ex_const(&x, -4)), 0), 9), "em_imin(em_imax(i1 - 4, 0), 9)"));
  /* floor semantics on negative constants */
  CHECK(ex_div(&x, ex_const(&x, -7), 2)->c == -4);
  CHECK(ex_mod(&x, ex_const(&x, -7), 2)->c == 1);
  /* a negative operand prints through the floor helpers, not C's truncating / and % */
  CHECK(prints(ex_div(&x, ex_add(&x, i1, ex_const(&x, -3)), 5), "(i1 + 2) / 5 - 1"));
  CHECK(prints(ex_mod(&x, ex_mul(&x, i1, -1), 5), "(4*i1) % 5"));
  CHECK(prints(ex_div(&x, ex_mul(&x, i1, -1), 5), "em_ifloordiv(-1*i1, 5)"));
  /* canonical order: a + b and b + a are the same expression */
  CHECK(ex_equal(ex_add(&x, i0, ex_mul(&x, i1, 3)), ex_add(&x, ex_mul(&x, i1, 3), i0)));
  CHECK(!ex_equal(ex_add(&x, i0, i1), ex_add(&x, i0, ex_mul(&x, i1, 2))));
  /* precedence: a product of a modulo keeps its parentheses, subtracted too */
  CHECK(prints(ex_mul(&x, ex_mod(&x, L, 16), 5), "5*((L) % 16)"));
  CHECK(prints(ex_add(&x, i0, ex_mul(&x, ex_div(&x, L, 4), -2)), "i0 - 2*((L) / 4)"));
  CHECK(prints(ex_add(&x, i0, ex_mul(&x, ex_mod(&x, L, 4), -3)), "i0 - 3*((L) % 4)"));
  CHECK(prints(ex_add(&x, i0, ex_mul(&x, ex_div(&x, L, 4), -1)), "i0 - (L) / 4"));
  /* merging loops: i0 := L / 16, i1 := L % 16 turns 16*i0 + i1 into L */
  Expr *m = ex_subst(&x, ex_subst(&x, lin, 0, ex_div(&x, L, 16)), 1, ex_mod(&x, L, 16));
  CHECK(ex_equal(m, L));
  CHECK(ex_count_divmod(m) == 0);
  CHECK(ex_uses_var(lin, 0) && !ex_uses_var(lin, 2));
  /* ranges */
  CHECK(lin->lo == 0 && lin->hi == 127);
  Expr *md = ex_mod(&x, ex_mul(&x, L, 3), 7);
  CHECK(md->lo == 0 && md->hi == 6);
  pool_free(&pool);

  /* gathered variables: pushed over a range, simplified like loop vars, popped */
  {
    Pool gp = {0};
    ExprCtx y = {&gp, 2, {7, 15}};
    const char *gnames[EX_MAXVARS] = {"i0", "i1"};
    int g = ex_push_var(&y, 99);  /* an index into a dim of size 100 */
    CHECK(g == EX_GATHERED && y.ngathered == 1);
    gnames[g] = "t3";
    Expr *gv = ex_var(&y, g), *j1 = ex_var(&y, 1);
    CHECK(gv->kind == E_VAR && gv->lo == 0 && gv->hi == 99);
    /* reading row g of a [100, 16] tensor through a reshape: (16*g + i1) / 16 == g, % 16 == i1 */
    Expr *a = ex_add(&y, ex_mul(&y, gv, 16), j1);
    CHECK(ex_equal(ex_div(&y, a, 16), gv));
    CHECK(ex_equal(ex_mod(&y, a, 16), j1));
    CHECK(a->lo == 0 && a->hi == 99 * 16 + 15);
    Str s = {0};
    ex_print(&s, a, gnames);
    CHECK(s.s && !strcmp(s.s, "i1 + 16*t3"));
    str_free(&s);
    /* substituting a loop var leaves the gathered one alone */
    CHECK(ex_uses_var(ex_subst(&y, a, 1, ex_const(&y, 0)), g));
    CHECK(!ex_equal(gv, ex_var(&y, 0)));
    /* nested: a second one while the first is live */
    int h = ex_push_var(&y, 0);  /* a dim of size 1: always index 0 */
    CHECK(h == g + 1);
    CHECK(ex_var(&y, h)->kind == E_CONST && ex_var(&y, h)->c == 0);
    ex_pop_var(&y);
    ex_pop_var(&y);
    CHECK(y.ngathered == 0);
    /* all taken: -1, never a number past the table */
    int n = 0;
    while (ex_push_var(&y, 5) >= 0) n++;
    CHECK(n == EX_MAXVARS - EX_GATHERED);
    CHECK(y.ngathered == n);
    pool_free(&gp);
  }

  /* allocation failure: every constructor survives and the pool says so */
  for (long n = 1; n <= 8; n++) {
    Pool p2 = {0};
    ExprCtx y = {&p2, 2, {7, 15}};
    em_fail_alloc_after(n);
    Expr *e = ex_div(&y, ex_add(&y, ex_mul(&y, ex_var(&y, 0), 16), ex_var(&y, 1)), 16);
    em_fail_alloc_after(0);
    CHECK(e != NULL);
    pool_free(&p2);
  }
  /* ... the symbolic ones too */
  for (long n = 1; n <= 40; n++) {
    Pool p2 = {0};
    ExSyms sy = {0};
    ex_add_sym(&sy, 2, EX_INF);
    ex_add_sym(&sy, 2, EX_INF);
    ExprCtx y = {&p2, 2, {0}};
    y.syms = &sy;
    em_fail_alloc_after(n);
    Expr *s0 = ex_sym(&y, 0), *s1 = ex_sym(&y, 1);
    ex_set_size(&y, 0, s0);
    ex_set_size(&y, 1, s1);
    Expr *a = ex_add(&y, ex_mul_e(&y, ex_var(&y, 0), s1), ex_var(&y, 1));
    Expr *e = ex_min_e(&y, ex_mod_e(&y, ex_div_e(&y, a, s1), s0), ex_max_e(&y, s0, s1));
    em_fail_alloc_after(0);
    CHECK(e != NULL && (p2.oom || ex_equal(e, ex_var(&y, 0))));
    pool_free(&p2);
  }
  test_symbolic();
  test_random();
  return T_DONE("test_expr");
}
