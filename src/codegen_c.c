/*
 * codegen_c.c - the C target: a kernel is `void ember_kN(void *const *p)`,
 * which hands its tensors (p[id] is value id's) to its body function, a nest
 * of for loops; kernels of the same code share one body (c_share).  OpenMP
 * runs the outer loops (or, when there are too few rows, a stage's reduced
 * loops) across threads, and `omp simd` the innermost.  A graph with
 * symbolic sizes hands on the call's size variables s0, s1, ... (from
 * p[nvalues]); its loop bounds are expressions over them, and its threads
 * start where the call is large enough (no column schedule yet).
 * Everything else is the shared walker in codegen.c.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "prelude_gen.h"   /* em_prelude: the text of src/prelude_c.h (with src/prelude.h) */

#define PAR_MIN 16384      /* elements below which a kernel runs on one thread */
#define CAT_MAX_SPLIT 64   /* the most ranges a loop is split into at a cat's boundaries */

/* The C target's state (Cg.ts): the boundaries of cats along a pointwise
   kernel's innermost loop, noted while its body is generated (cat_split). */
typedef struct CCg {
  int has_cat;             /* the graph has a cat at all */
  int catvar;              /* the innermost loop's dim, whose cat boundaries are noted; -1: none */
  int64_t catb[CAT_MAX_SPLIT]; int ncatb;  /* the boundaries noted (each input's start) */
} CCg;

static CCg *cs(Cg *c) { return c->ts; }

static void *c_state_new(Cg *c) {
  CCg *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->catvar = -1;
  for (int i = 0; i < c->g->nnodes; i++) s->has_cat |= c->g->nodes[i]->form == F_CAT;
  return s;
}

static void c_state_free(void *ts) { free(ts); }

/* The walker met a cat read at `at`: while cat_split notes boundaries, a cat
   along its loop's dim adds its inputs' starts. */
static void c_cat_seen(Cg *c, const Node *n, Expr *at) {
  CCg *s = cs(c);
  if (s->catvar < 0 || at->kind != E_VAR || at->var != s->catvar) return;
  for (int i = 0; i < n->ncat; i++)
    if (c->g->values[n->cat_in[i]]->ssize[n->cat_dim]->kind != E_CONST) {
      s->ncatb = CAT_MAX_SPLIT + 1;  /* boundaries that are sizes: no split */
      return;
    }
  int64_t start = 0;
  for (int i = 0; i < n->ncat && s->ncatb <= CAT_MAX_SPLIT; i++) {
    int dup = 0;
    for (int j = 0; j < s->ncatb; j++) dup |= s->catb[j] == start;
    if (!dup) {
      if (s->ncatb == CAT_MAX_SPLIT) s->ncatb++;  /* too many: no split (and nothing more noted) */
      else s->catb[s->ncatb++] = start;
    }
    start += c->g->values[n->cat_in[i]]->size[n->cat_dim];
  }
}

static void close_loops(Cg *c, int nd) {
  for (int i = 0; i < nd; i++) {
    c->indent--;
    cg_line(c, "}");
  }
}

static void emit_stage(Cg *c, const Item *items, int n, const Loop *inner, int ni, int outer_parallel) {
  Kernel *k = c->k;
  int64_t extent = 1;
  for (int i = 0; i < ni; i++) extent *= inner[i].n;
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) cg_red_init(c, c->g->values[items[i].v]);
  /* pragma: parallelize the stage itself when the outer loops are not */
  Str pr = {0};
  int all_clause = 1;
  for (int i = 0; i < n; i++) {
    if (items[i].kind != IT_REDUCE) continue;
    const Node *nd = c->g->values[items[i].v]->def;
    const char *cl = cg_red_clause(nd);
    if (!cl) { all_clause = 0; continue; }
    str_printf(&pr, " reduction(%s:a%d)", cl, cg_acc(c, items[i].v));
    if ((nd->red == R_MAX || nd->red == R_MIN) && dtype_is_float(cg_acc_dtype(c, nd, c->g->values[nd->red_in])))
      str_printf(&pr, " reduction(|:n%d)", cg_acc(c, items[i].v));
  }
  const char *clauses = pr.s ? pr.s : "";
  int scope = c->ncse;
  if (ni == 0) {
    cg_line(c, "{");
    c->indent++;
  } else {
    int par = !outer_parallel && extent >= PAR_MIN && all_clause;
    for (int i = 0; i < ni; i++) {
      if (i == 0 && par)
        cg_line(c, "#pragma omp parallel for%s%s", ni > 1 ? cg_fmt(c, " collapse(%d)", ni) : " simd", clauses);
      else if (i == ni - 1 && !par && all_clause)
        cg_line(c, "#pragma omp simd%s", clauses);
      const char *v = c->names[inner[i].var];
      cg_line(c, "for (int64_t %s = 0; %s < %s; %s++) {", v, v, cg_extent(c, &inner[i]), v);
      c->indent++;
    }
  }
  for (int i = 0; i < n; i++) {
    const Value *v = c->g->values[items[i].v];
    if (items[i].kind == IT_REDUCE) cg_red_update(c, v);
    else {
      Expr *idx[MAXD];
      item_index(&c->x, k, v, IT_STORE, idx);
      cg_store(c, v, idx, cg_def(c, v, idx));
    }
  }
  close_loops(c, ni ? ni : 1);
  c->ncse = scope;
  str_free(&pr);
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) cg_red_finish(c, c->g->values[items[i].v]);
}

/* ---- the column schedule ----
   A reduction whose input is contiguous along the innermost outer loop and
   not along the reduced loops (a sum over dim 0 of a row-major matrix): one
   output point at a time would stride through memory.  Instead a tile of
   output points is reduced together, the accumulators in arrays, the
   tile's loop innermost (vectorized) inside the reduced loops, so each pass
   reads a tile's consecutive elements of a row.  Element-wise stores of the
   reductions' stage go in the same vectorized loop: LayerNorm's backward
   sums its weight and bias gradients over the rows in the kernel that
   stores the next op's input gradient, and that kernel strided down the
   columns, some 30 times the column kernel's time. */
/* The tile: wide, so that each row's part is a long contiguous run (the
   prefetcher's case: a wide tile ran a large sum over dim 0 in about half
   a narrow one's time), narrower when that would leave too few tiles for
   the threads. */
static int col_width(int64_t nj) { return nj >= 2048 ? 1024 : nj >= 512 ? 256 : 64; }

typedef struct ColCk { Cg *c; int ovar, ivar, along_o, along_i; } ColCk;

/* How far e moves when var does: 1, 0 (e does not depend on it), or -1 (any other step, or unknown). */
static int step_along(Cg *c, Expr *e, int var) {
  Expr *n = ex_subst(&c->x, e, var, ex_add(&c->x, ex_var(&c->x, var), ex_const(&c->x, 1)));
  Expr *d = ex_add(&c->x, n, ex_mul(&c->x, e, -1));
  return d->kind == E_CONST && (d->c == 1 || d->c == 0) ? (int)d->c : -1;
}

/* A read that moves with the output point (ovar) must be consecutive along
   it and not along the reduced loop (ivar).  A read that does not move with
   it (a row's mean or rstd in LayerNorm's backward) is one scalar per row for
   the whole tile, whatever its stride along the reduced loop. */
static void col_read(void *ud, int r, Expr *addr) {
  ColCk *t = ud;
  (void)r;
  addr = cg_subst(t->c, addr);
  int so = step_along(t->c, addr, t->ovar);
  if (so == 0) return;
  t->along_o |= so == 1;
  t->along_i |= step_along(t->c, addr, t->ivar) == 1;
}

/* The end of the run of outer items (computed at the reduced shape) from i. */
static int outer_run_end(const Kernel *k, int i) {
  while (i < k->nitems && k->items[i].kind == IT_OUTER) i++;
  return i;
}

/* Stages of reductions and element-wise stores (LayerNorm backward's input
   gradient beside its weight's), each followed by outer items, read as
   columns?  Each stage is a pass over the tile; a later stage reads what an
   earlier one computed at the reduced shape (reductions, outer items) from
   memory, where its finish stored them, so those must have memory (not kept
   in a register: plan.c) and hold what the rows' temp would (float32 or
   float64: no rounding on the way).  Weight normalization (wav2vec2's
   positional convolution) is a norm over dims 0 and 1, then the weight
   scaled by it. */
static int col_eligible(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni) {
  if (no < 1 || ni < 1 || outer[no - 1].n < 8) return 0;
  if (k->nitems == 0 || k->items[0].kind == IT_OUTER) return 0;
  int nred = 0, reg[64], nreg = 0;  /* reg: results of earlier stages without memory of their own */
  for (int a = 0; a < k->nitems;) {
    int b = cg_stage_end(c, k, a);
    if (b == a) return 0;
    int e = outer_run_end(k, b);
    for (int i = a; i < e; i++)
      if (cg_reads_stage_reduce(c, &k->items[i], reg, nreg)) return 0;
    for (int i = a; i < e; i++) {
      const Value *v = c->g->values[k->items[i].v];
      nred += k->items[i].kind == IT_REDUCE;
      if (k->items[i].kind != IT_STORE && (v->local || !(v->dtype == EMBER_F32 || v->dtype == EMBER_F64))) {
        if (nreg == 64) return 0;
        reg[nreg++] = v->id;
      }
    }
    a = e;
  }
  if (nred == 0) return 0;
  ColCk t = {c, outer[no - 1].var, inner[ni - 1].var, 0, 0};
  Expr *idx[MAXD];
  for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(&c->x, d);
  for (int i = 0; i < k->nitems; i++) {
    const Value *v = c->g->values[k->items[i].v];
    if (k->items[i].kind == IT_REDUCE) walk_reads(c->g, &c->x, v->def->red_in, idx, col_read, &t);
    else if (k->items[i].kind == IT_STORE) walk_def_reads(c->g, &c->x, v->id, idx, col_read, &t);
  }
  return t.along_o && !t.along_i;
}

/* Copy a reduction's accumulators between the tile's arrays and scalars. */
static void col_acc(Cg *c, const Value *v, int to_array) {
  const Node *n = v->def;
  int ad = cg_acc_dtype(c, n, c->g->values[n->red_in]);
  int id = cg_acc(c, v->id);
  if (to_array) cg_line(c, "Aa%d[jj] = a%d;", id, id);
  else cg_line(c, "%s a%d = Aa%d[jj];", cg_compute_ctype(ad), id, id);
  if ((n->red == R_MAX || n->red == R_MIN) && dtype_is_float(ad)) {
    if (to_array) cg_line(c, "An%d[jj] = n%d;", id, id);
    else cg_line(c, "int64_t n%d = An%d[jj];", id, id);
  }
  if (n->red == R_ARGMAX || n->red == R_ARGMIN) {
    if (to_array) cg_line(c, "Aj%d[jj] = j%d;", id, id);
    else cg_line(c, "int64_t j%d = Aj%d[jj];", id, id);
  }
}

/* Items [a, b) of kernel k, computed at the reduced shape. */
static void col_outer_items(Cg *c, Kernel *k, int a, int b) {
  for (int i = a; i < b; i++) {
    const Value *v = c->g->values[k->items[i].v];
    Expr *idx[MAXD];
    item_index(&c->x, k, v, IT_OUTER, idx);
    cg_store(c, v, idx, cg_def(c, v, idx));
  }
}

/* One stage [a, b) of the column schedule and the outer items [b, e) after
   it: a pass over the tile, the reductions' accumulators in arrays, then a
   loop over the tile's points that finishes them and computes the outer
   items (reading the results from registers) and stores both. */
static void col_stage(Cg *c, Kernel *k, int a, int b, int e, const char *jv, int w, const Loop *inner, int ni) {
  int nred = 0;
  for (int i = a; i < b; i++) {
    if (k->items[i].kind != IT_REDUCE) continue;
    const Value *v = c->g->values[k->items[i].v];
    const Node *n = v->def;
    int ad = cg_acc_dtype(c, n, c->g->values[n->red_in]);
    int id = cg_acc(c, v->id);
    cg_line(c, "%s Aa%d[%d];", cg_compute_ctype(ad), id, w);
    if ((n->red == R_MAX || n->red == R_MIN) && dtype_is_float(ad)) cg_line(c, "int64_t An%d[%d];", id, w);
    if (n->red == R_ARGMAX || n->red == R_ARGMIN) cg_line(c, "int64_t Aj%d[%d];", id, w);
    nred++;
  }
  int scope = c->ncse;
  if (nred) {
    cg_line(c, "for (int64_t jj = 0; jj < jn; jj++) {");
    c->indent++;
    for (int i = a; i < b; i++) {
      if (k->items[i].kind != IT_REDUCE) continue;
      const Value *v = c->g->values[k->items[i].v];
      cg_red_init(c, v);
      col_acc(c, v, 1);
    }
    close_loops(c, 1);
  }
  for (int i = 0; i < ni; i++) {
    const char *v = c->names[inner[i].var];
    cg_line(c, "for (int64_t %s = 0; %s < %lld; %s++) {", v, v, (long long)inner[i].n, v);
    c->indent++;
  }
  cg_line(c, "#pragma omp simd");
  cg_line(c, "for (int64_t jj = 0; jj < jn; jj++) {");
  c->indent++;
  cg_line(c, "const int64_t %s = jt + jj;", jv);
  for (int i = a; i < b; i++) {
    const Value *v = c->g->values[k->items[i].v];
    if (k->items[i].kind == IT_REDUCE) {
      col_acc(c, v, 0);
      cg_red_update(c, v);
      col_acc(c, v, 1);
    } else {  /* a store at the element */
      Expr *idx[MAXD];
      item_index(&c->x, k, v, IT_STORE, idx);
      cg_store(c, v, idx, cg_def(c, v, idx));
    }
  }
  close_loops(c, ni + 1);
  c->ncse = scope;
  if (!nred && b == e) return;
  cg_line(c, "for (int64_t jj = 0; jj < jn; jj++) {");
  c->indent++;
  cg_line(c, "const int64_t %s = jt + jj;", jv);
  for (int i = a; i < b; i++) {
    if (k->items[i].kind != IT_REDUCE) continue;
    const Value *v = c->g->values[k->items[i].v];
    col_acc(c, v, 0);
    cg_red_finish(c, v);
  }
  col_outer_items(c, k, b, e);
  close_loops(c, 1);
  c->ncse = scope;  /* a later stage loads the results */
}

/* The column schedule: its stages (col_eligible), each a pass over a tile
   of output points. */
static void col_body(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni, int64_t total) {
  int64_t nj = outer[no - 1].n;
  const char *jv = c->names[outer[no - 1].var];
  if (total >= PAR_MIN)
    cg_line(c, "#pragma omp parallel for%s", no > 1 ? cg_fmt(c, " collapse(%d)", no) : "");
  for (int i = 0; i < no - 1; i++) {
    const char *v = c->names[outer[i].var];
    cg_line(c, "for (int64_t %s = 0; %s < %lld; %s++) {", v, v, (long long)outer[i].n, v);
    c->indent++;
  }
  int w = col_width(nj);
  cg_line(c, "for (int64_t jt = 0; jt < %lld; jt += %d) {", (long long)nj, w);
  c->indent++;
  cg_line(c, "const int64_t jn = %lld - jt < %d ? %lld - jt : %d;", (long long)nj, w, (long long)nj, w);
  for (int a = 0; a < k->nitems;) {
    int b = cg_stage_end(c, k, a), e = outer_run_end(k, b);
    col_stage(c, k, a, b, e, jv, w, inner, ni);
    a = e;
  }
  close_loops(c, no);  /* the tile loop and the other outer loops */
}

/* Pointwise: every item is a store in the innermost body. */
static void pointwise_body(Cg *c, Kernel *k, const Loop *inner) {
  for (int i = 0; i < k->nitems; i++) {
    const Value *v = c->g->values[k->items[i].v];
    Expr *idx[MAXD];
    item_index(&c->x, k, v, IT_STORE, idx);
    if (k->items[i].kind == IT_REDUCE) {  /* a reduction over no dims */
      emit_stage(c, &k->items[i], 1, inner, 0, 1);
      continue;
    }
    cg_store(c, v, idx, cg_def(c, v, idx));
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* A pointwise kernel's innermost loop L (the last of the nest, over an
   unmerged dim).  Its body is generated once noting the boundaries of any
   cat along L's dim (codegen.c, cat_one); if there are some, that text is
   dropped and L becomes one loop per range between them, each body with the
   dim's index known to lie in one input, which it reads alone: no branch or
   select per element, consecutive reads, vectorizable.  densenet's cat +
   BatchNorm + ReLU kernels over channels-last activations (the cat dim
   innermost) were an if / else-if chain per element.  Returns the number of
   loops L became (0: one, unsplit). */
static int cat_split(Cg *c, Kernel *k, const Loop *L, const Loop *inner, Str *body) {
  int D = L->var, V = MAXD + D;
  size_t mark = body->len;
  int scope = c->ncse;
  long divmods = c->divmods;
  const char *name = c->names[D];
  CCg *s = cs(c);
  s->catvar = D, s->ncatb = 0;
  cg_line(c, "#pragma omp simd");
  cg_line(c, "for (int64_t %s = 0; %s < %lld; %s++) {", name, name, (long long)L->n, name);
  c->indent++;
  pointwise_body(c, k, inner);
  close_loops(c, 1);
  c->ncse = scope;
  s->catvar = -1;
  int nb = s->ncatb;
  if (nb < 2 || nb > CAT_MAX_SPLIT || c->oom || body->oom) return 0;
  int64_t b[CAT_MAX_SPLIT + 1];
  memcpy(b, s->catb, sizeof(int64_t) * (size_t)nb);
  qsort(b, (size_t)nb, sizeof b[0], cmp_i64);
  while (nb > 0 && b[nb - 1] >= L->n) nb--;  /* a boundary at or past the end: none */
  b[nb] = L->n;  /* b[0] is 0: every cat's first input starts there */
  if (nb < 2) return 0;
  body->len = mark;
  if (body->s) body->s[mark] = 0;
  c->divmods = divmods;
  int64_t vhi = c->x.vhi[V];
  for (int r = 0; r < nb; r++) {
    int64_t lo = b[r], n = b[r + 1] - b[r];
    c->x.vhi[V] = n - 1;
    Expr *j = ex_var(&c->x, V);
    c->sub[D] = lo ? ex_add(&c->x, j, ex_const(&c->x, lo)) : j;
    cg_line(c, "#pragma omp simd");
    cg_line(c, "for (int64_t %s = 0; %s < %lld; %s++) {  /* [%lld, %lld) */", name, name, (long long)n, name,
            (long long)lo, (long long)(lo + n));
    c->indent++;
    pointwise_body(c, k, inner);
    close_loops(c, 1);
    c->ncse = scope;
  }
  c->sub[D] = NULL;
  c->x.vhi[V] = vhi;
  return nb;
}

static void c_kernel(Cg *c, Kernel *k, Str *out, Str *alt, uint32_t merge) {
  Graph *g = c->g;
  Str body = {0};
  cg_begin(c, k, &body);
  Loop outer[MAXD], inner[MAXD];
  int no = cg_loops(c, k, 0, merge, outer), ni = cg_loops(c, k, 1, merge, inner);
  cg_order_loops(c, k, outer, no, 0);
  int64_t oext = 1, total = 1;
  for (int d = 0; d < k->ndim; d++) total *= k->size[d];
  for (int i = 0; i < no; i++) oext *= outer[i].n;
  /* a symbolic space (pointwise: lower.c takes no other): parallel where the call's size is large enough.
     The clause names the parallel construct: an unqualified if of `parallel for simd` applies to its simd
     part too (OpenMP 5.0), and GCC then runs the loop unvectorized wherever the call is small */
  const char *par_if = "";
  if (k->symbolic) {  /* what the static path decides from the sizes, decided at the call */
    Expr *t = ex_const(&c->x, 1), *o = ex_const(&c->x, 1);
    for (int d = 0; d < k->ndim; d++) {
      t = ex_mul_e(&c->x, t, k->ssize[d]);
      if (!(k->rmask >> d & 1)) o = ex_mul_e(&c->x, o, k->ssize[d]);
    }
    par_if = k->rmask ? cg_fmt(c, " if(parallel: %s >= %d && %s >= 4)", cg_size(c, t), PAR_MIN, cg_size(c, o))
                      : cg_fmt(c, " if(parallel: %s >= %d)", cg_size(c, t), PAR_MIN);
    total = PAR_MIN, oext = 4;  /* the outer loops run in parallel where par_if holds */
  }
  c->indent = 1;
  int outer_par = 0, split = 0, nsplit = 0;
  int col = k->rmask && !k->symbolic && col_eligible(c, k, outer, no, inner, ni);
  int64_t colnj = no ? outer[no - 1].n : 0;
  if (col) {
    col_body(c, k, outer, no, inner, ni, total);
    no = 0;  /* closed already */
  } else if (no > 0) {
    int pointwise = k->rmask == 0;
    /* parallel over the outer loops when there is enough work and enough rows */
    outer_par = total >= PAR_MIN && (pointwise || oext >= 4);
    /* a pointwise kernel's innermost loop may be split (cat_split below): emitted there */
    split = pointwise && no >= 2 && cs(c)->has_cat && outer[no - 1].var < MAXD && !outer[no - 1].sn;
    for (int i = 0; i < no; i++) {
      if (split && i == no - 1) break;
      const char *pragma = NULL;
      if (i == 0 && outer_par) {
        if (pointwise && no == 1) pragma = "#pragma omp parallel for simd";
        else if (pointwise) pragma = no - 1 > 1 ? cg_fmt(c, "#pragma omp parallel for collapse(%d)", no - 1) : "#pragma omp parallel for";
        else pragma = no > 1 ? cg_fmt(c, "#pragma omp parallel for collapse(%d)", no) : "#pragma omp parallel for";
        if (*par_if) pragma = cg_fmt(c, "%s%s", pragma, par_if);
      } else if (pointwise && i == no - 1 && (i > 0 || !outer_par)) pragma = "#pragma omp simd";
      if (pragma) cg_line(c, "%s", pragma);
      const char *v = c->names[outer[i].var];
      cg_line(c, "for (int64_t %s = 0; %s < %s; %s++) {", v, v, cg_extent(c, &outer[i]), v);
      c->indent++;
    }
  }
  if (col) {
  } else if (split) {
    nsplit = cat_split(c, k, &outer[no - 1], inner, &body);
    no--;  /* closed already */
  } else if (k->rmask == 0) {
    pointwise_body(c, k, inner);
  } else {
    int i = 0;
    while (i < k->nitems) {
      if (k->items[i].kind == IT_OUTER) {
        const Value *v = g->values[k->items[i].v];
        Expr *idx[MAXD];
        item_index(&c->x, k, v, IT_OUTER, idx);
        cg_store(c, v, idx, cg_def(c, v, idx));
        i++;
        continue;
      }
      int j = cg_stage_end(c, k, i);
      emit_stage(c, &k->items[i], j - i, inner, ni, outer_par);
      i = j;
    }
  }
  close_loops(c, no);
  /* the function: a comment naming what it computes, pointers, then the body */
  str_printf(out, "\n/* kernel %d: space [", k->id);
  for (int d = 0; d < k->ndim; d++) {
    str_puts(out, d ? ", " : "");
    if (k->symbolic) ex_print(out, k->ssize[d], NULL);
    else str_printf(out, "%lld", (long long)k->size[d]);
  }
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
  if (col) str_printf(out, "; columns, %d output points at a time", col_width(colnj));
  if (nsplit) str_printf(out, "; the innermost loop split in %d at a cat's inputs", nsplit);
  str_puts(out, " */\n");
  /* stores into inputs (copy_) write memory the kernel also reads: no restrict */
  const char *rs = k->into ? "" : "restrict ";
  /* the parameters in the order the body first uses them: p<n> is value p[id] */
  int *vids = pool_alloc(c->pool, sizeof(int) * (size_t)(c->nslot + 1));
  int np = vids ? cg_params(c, vids) : 0;
  if (!vids) c->oom = 1;
  /* the body function takes the kernel's own table (its parameters, then the size variables'
     table), so that kernels of the same code (a model's repeated layers) share one (c_share) */
  k->body_off = out->len;
  str_printf(out, "EM_BODY void ember_k%d_body(void *const *restrict p) {\n", k->id);
  if (g->symbolic) {  /* the call's size variables: the table after the values' pointers (run.c) */
    str_printf(out, "  const int64_t *sv = (const int64_t *)p[%d];\n", np);
    for (int i = 0; i < g->syms.n; i++) str_printf(out, "  const int64_t s%d = sv[%d]; (void)s%d;\n", i, i, i);
  }
  for (int i = 0; i < np; i++) {
    const char *ct = cg_storage_ctype(g->values[vids[i]]->dtype);
    if (c->used[vids[i]] & 2) str_printf(out, "  %s *%sp%d = (%s *)p[%d];\n", ct, rs, i, ct, i);
    else str_printf(out, "  const %s *%sp%d = (const %s *)p[%d];\n", ct, rs, i, ct, i);
  }
  str_puts(out, body.s ? body.s : "");
  str_puts(out, "}\n");
  k->body_len = out->len - k->body_off;
  /* the entry point: the graph's table (p[id] is value id) to the kernel's */
  str_printf(out, "void ember_k%d(void *const *restrict p) {\n  void *const q[] = {", k->id);
  for (int i = 0; i < np; i++) str_printf(out, "p[%d], ", vids[i]);
  str_printf(out, g->symbolic ? "p[%d]};\n" : "0};\n", g->nvalues);
  str_printf(out, "  ember_k%d_body(q);\n}\n", k->id);
  if (body.oom) c->oom = 1;
  str_free(&body);
}

/* Kernels of the same code (equal keys of their body functions: a model's
   repeated layers give most of a graph's kernels twice or more) keep one
   body: a later one's text becomes its entry point calling the first one's
   body, which may be in another part of the build (build.c), so bodies are
   global, hidden from the library's symbols. */
static int c_share(Graph *g, Str *text) {
  int nk = g->nkernels, rc = 0;
  char (*keys)[65] = em_malloc(sizeof *keys * (size_t)(nk + 1));
  if (!keys) return -1;
  for (int i = 0; i < nk && !rc; i++) {
    Kernel *k = g->kernels[i];
    keys[i][0] = 0;  /* no body: matches none */
    if (k->lib || !text[i].s) continue;
    EM_ASSERT(k->body_off + k->body_len <= text[i].len);
    if (em_kernel_key(text[i].s + k->body_off, k->body_len, i, keys[i])) {
      rc = -1;
      break;
    }
    for (int j = 0; j < i; j++) {
      const Kernel *kj = g->kernels[j];
      if (!keys[j][0] || kj->same_as != j || strcmp(keys[i], keys[j])) continue;
      /* the head comment, a note, the first one's body declared, and the entry point calling it */
      Str s = {0};
      const char *t = text[i].s, *entry = t + k->body_off + k->body_len;
      char call[48];
      snprintf(call, sizeof call, "ember_k%d_body(q);", i);
      const char *at = strstr(entry, call);
      EM_ASSERT(at != NULL);
      str_printf(&s, "%.*s/* the code of kernel %d */\nEM_BODY void ember_k%d_body(void *const *restrict p);\n",
                 (int)k->body_off, t, j, j);
      str_printf(&s, "%.*sember_k%d_body(q);%s", (int)(at - entry), entry, j, at + strlen(call));
      if (s.oom) {
        str_free(&s);
        rc = -1;
        break;
      }
      str_free(&text[i]);
      text[i] = s;
      k->same_as = j;
      break;
    }
  }
  free(keys);
  return rc;
}


static const char *c_prelude_text(void) { return em_prelude; }

const Target target_c = {
  .name = "c",
  .prelude = c_prelude_text,
  .state_new = c_state_new,
  .state_free = c_state_free,
  .kernel = c_kernel,
  .cat_seen = c_cat_seen,
  .share = c_share,
};
