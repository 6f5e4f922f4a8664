/* test_expr.c - the index-expression simplifier: the rules that turn view
   arithmetic back into plain indices, floor semantics, printing, gathered
   variables (indices loaded at run time), and allocation failure. */
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
  /* precedence: a product of a modulo keeps its parentheses */
  CHECK(prints(ex_mul(&x, ex_mod(&x, L, 16), 5), "5*((L) % 16)"));
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
  return T_DONE("test_expr");
}
