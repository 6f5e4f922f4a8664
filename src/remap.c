/*
 * remap.c - the index arithmetic of the forms that move elements without
 * computing on them: flip, and the scatters (slice_scatter, select_scatter,
 * diagonal_scatter, as_strided_scatter), which put a src tensor into a copy of
 * their input.
 *
 * A scatter's result element i comes from src[j] when i lies in src's place,
 * else from the input at i.  lower.c describes the place in one of two ways:
 *   an embedding: each result dim d either follows one src dim k,
 *     i_d = emb_base[d] + emb_mul[d] * j_k, or is fixed, i_d = emb_base[d]
 *     (slice: one dim with base start and mul step; select: one fixed dim;
 *     diagonal: two result dims following src's last dim);
 *   storage addresses (as_strided_scatter): src[j] sits at storage element
 *     voff + sum_k j_k * vstride[k] of the input's layout, which the result
 *     keeps; the view never overlaps itself (lower.c checks), so an address
 *     decodes to one j greedily, largest stride first.
 * Both give the src index as index expressions (clamped into src, so a read
 * is always in bounds even where the element is not taken) and a list of
 * conditions lo <= e <= hi for "in place".  fuse.c's walk_reads and
 * codegen.c's cg_def call these functions, so that what fusion believes a
 * kernel reads is what the kernel reads.  Nothing here allocates outside the
 * ExprCtx's pool.
 */
#include "ember_int.h"

void flip_index(ExprCtx *x, const Node *n, const Value *out, Expr **idx, Expr **in_idx) {
  for (int d = 0; d < out->ndim; d++) {
    in_idx[d] = (n->flip >> d & 1) ? ex_add(x, ex_add(x, out->ssize[d], ex_const(x, -1)), ex_mul(x, idx[d], -1))
                                   : idx[d];
    if (n->roll[d] && out->size[d] >= 0)  /* a roll: (i - shift) mod size, shift in [0, size) (lower_roll) */
      in_idx[d] = ex_mod(x, ex_add(x, in_idx[d], ex_const(x, out->size[d] - n->roll[d])), out->size[d]);
    else if (n->roll[d]) {  /* a symbolic size s >= lo >= 1: (i + k*s - shift) mod s, k*s >= shift */
      Expr *s = out->ssize[d];
      int64_t sh = n->roll[d], lo = s->lo > 0 ? s->lo : 1, k = sh > 0 ? (sh + lo - 1) / lo : 0;
      in_idx[d] = ex_mod_e(x, ex_add(x, in_idx[d], ex_add(x, ex_mul(x, s, k), ex_const(x, -sh))), s);
    }
  }
}

typedef struct Conds {     /* conditions being collected */
  Bound *b;
  int n;
  int never;               /* one of them can never hold */
} Conds;

/* Add lo <= e <= hi unless e's range proves it (or disproves it). */
static void need(Conds *c, Expr *e, int64_t lo, int64_t hi) {
  if (e->lo >= lo && e->hi <= hi) return;
  if (e->hi < lo || e->lo > hi) { c->never = 1; return; }
  EM_ASSERT(c->n < SCATTER_MAX_BOUNDS);
  c->b[c->n].e = e, c->b[c->n].lo = lo, c->b[c->n].hi = hi, c->b[c->n].hx = NULL;
  c->n++;
}

/* Add 0 <= e <= hx, hx a size expression, unless proved. */
static void need_sym(ExprCtx *x, Conds *c, Expr *e, Expr *hx) {
  int r = ex_cmp(x, e, hx);
  if (e->lo >= 0 && (r == EX_LT || r == EX_LE || r == EX_EQ)) return;
  if (r == EX_GT) { c->never = 1; return; }
  EM_ASSERT(c->n < SCATTER_MAX_BOUNDS);
  c->b[c->n].e = e, c->b[c->n].lo = 0, c->b[c->n].hi = 0, c->b[c->n].hx = hx;
  c->n++;
}

static Expr *clamp(ExprCtx *x, Expr *e, int64_t n) { return ex_min(x, ex_max(x, e, 0), n - 1); }

static void embedded(ExprCtx *x, const Node *n, const Value *out, const Value *src, Expr **idx, Expr **src_idx,
                     Conds *c) {
  Expr *j[MAXD] = {0};     /* src index k as decoded from its first result dim (unclamped) */
  for (int d = 0; d < out->ndim; d++) {
    int k = n->emb_dim[d];
    Expr *t = ex_add(x, idx[d], ex_const(x, -n->emb_base[d]));
    if (k < 0) { need(c, t, 0, 0); continue; }
    int64_t m = n->emb_mul[d];
    if (!j[k]) {
      if (src->size[k] < 0)  /* symbolic (lower.c: at least 1) */
        need_sym(x, c, t, ex_mul(x, ex_add(x, src->ssize[k], ex_const(x, -1)), m));
      else need(c, t, 0, m * (src->size[k] - 1));
      if (m > 1) need(c, ex_mod(x, t, m), 0, 0);
      j[k] = ex_div(x, t, m);
    } else {
      need(c, ex_add(x, t, ex_mul(x, j[k], -m)), 0, 0);  /* follows the same src dim */
    }
  }
  for (int k = 0; k < src->ndim; k++)
    src_idx[k] = !j[k]              ? ex_const(x, 0)
               : src->size[k] >= 0 ? clamp(x, j[k], src->size[k])
                                   : ex_min_e(x, ex_max(x, j[k], 0), ex_add(x, src->ssize[k], ex_const(x, -1)));
}

static void strided(Graph *g, ExprCtx *x, const Node *n, const Value *src, Expr **idx, Expr **src_idx, Conds *c) {
  const Value *in = g->values[n->red_in];
  /* the storage element of result index idx, relative to src's first */
  Expr *rel = ex_const(x, in->offset - n->voff);
  for (int d = 0; d < in->ndim; d++)
    if (in->size[d] > 1) rel = ex_add(x, rel, ex_mul(x, idx[d], in->stride[d]));
  /* src's dims of size > 1, largest stride first */
  int dims[MAXD], m = 0;
  int64_t reach = 0;
  for (int k = 0; k < src->ndim; k++) {
    src_idx[k] = ex_const(x, 0);
    if (src->size[k] <= 1) continue;
    reach += (src->size[k] - 1) * n->vstride[k];
    dims[m++] = k;
  }
  for (int a = 1; a < m; a++)
    for (int b = a; b > 0 && n->vstride[dims[b]] > n->vstride[dims[b - 1]]; b--) {
      int t = dims[b]; dims[b] = dims[b - 1]; dims[b - 1] = t;
    }
  need(c, rel, 0, reach);
  /* greedy: j_k = (rel mod the next larger stride) / stride_k; each stride
     exceeds what the smaller ones reach, so this is the only decoding */
  Expr *rest = rel;
  for (int a = 0; a < m; a++) {
    int k = dims[a];
    int64_t s = n->vstride[k];
    Expr *jk = ex_div(x, rest, s);
    if (a > 0) need(c, jk, 0, src->size[k] - 1);  /* the first is bounded by rel's range */
    src_idx[k] = clamp(x, jk, src->size[k]);
    rest = ex_mod(x, rest, s);
  }
  if (m) need(c, rest, 0, 0);  /* no remainder below the smallest stride */
}

int scatter_index(Graph *g, ExprCtx *x, const Node *n, Expr **idx, Expr **src_idx, Bound *cond) {
  const Value *out = g->values[n->outs[0]], *src = g->values[n->scat_src];
  Conds c = {cond, 0, 0};
  if (n->scat_strided) strided(g, x, n, src, idx, src_idx, &c);
  else embedded(x, n, out, src, idx, src_idx, &c);
  return c.never ? -1 : c.n;
}
