/*
 * fuse.c - decide which values get storage, then group the values that are
 * computed into kernels, and order kernels and fallbacks into steps.
 *
 * Realization: inputs, fallback results, reductions, graph outputs and
 * whatever a fallback reads are materialized; a pointwise value is inlined
 * into its consumers (recomputed where it is read) unless recomputing it
 * would cost too much.  Views are never materialized: a read through a view
 * is index arithmetic on its root (value_addr), and when the root is itself
 * inlined, the address is turned back into the root's logical index.
 *
 * Grouping: a kernel is a loop nest over an iteration space whose dims split
 * into outer dims (parallel) and reduced dims (iterated inside each stage).
 * Pointwise values of the same shape fuse; a reduction joins the pointwise
 * kernel that feeds it; pointwise consumers of a reduction join its kernel,
 * at full shape (inner stage) or at the reduced shape (outer).  A value may
 * join a kernel only if every value it reads from that kernel is read at the
 * very address where the kernel writes it, so a loop iteration never needs
 * another iteration's result.  This is what makes softmax, log_softmax and
 * layer_norm single kernels.  A reduction's consumer whose shape is a
 * permutation of the kernel's space (a LayerNorm transposed for a matmul)
 * joins with its dims permuted (Value.item_perm) where its strides store it
 * in the kernel's own order (store_perm).
 *
 * Library calls (F_MATMUL: cuBLASLt) are kernels of their own with no code:
 * their operands (matrices and bias) and the value they write are
 * materialized (the library reads memory), and nothing joins them.  The
 * nodes folded into a call's epilogue (F_EPILOGUE, lower.c) are done by it:
 * the call's step, where the mm is, writes the last one's result.
 *
 * Gathers (index_select, gather, index, embedding) read their source at an
 * index loaded from an index tensor: a gathered variable (expr.c), so such a
 * read matches no write address, and a gather never joins the kernel that
 * computes its source.  Its source is inlined like any operand (recomputed
 * at the gathered index), which is what fuses (x * 2)[idx] into one kernel.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

#define INLINE_MAX 48      /* a value costing more ops than this is materialized */
#define REUSE_MAX 96       /* ... or if cost * uses exceeds this */
#define REUSE_READS 4      /* ... or if it is used more than once and recomputing it loads more
                              tensor elements than this: each use would load them again (a
                              transformer's residual stream, inlined, made every layer norm
                              re-add every earlier layer's output, three times) */
#define BCAST_FREE 64     /* on a GPU, a materialized tensor read at least this many times per
                              element by a value (a broadcast) is no load for REUSE_READS */
#define JOIN_LOOKBACK 8    /* kernels tried, newest first, for each value */
/* On the CPU a value whose recomputation evaluates an erf (gelu, its
   backward, erf, erfc) and that is read more than once is materialized: an
   erf costs more than storing and loading a float there, and each reader
   (each stage of a reduction kernel) would evaluate it again.  whisper's
   gelu(conv) + pos, read through a transpose by two LayerNorm kernels of
   three stages each, computed its erf six times per element. */

/* ---- index arithmetic ---- */
static int is_const(const Expr *e, int64_t c) { return e->kind == E_CONST && e->c == c; }

Expr *value_addr(Graph *g, ExprCtx *x, const Value *v, Expr **idx) {
  const Value *r = g->values[v->root];
  if (v->symbolic || r->symbolic) {  /* the same with its meta's expressions */
    Expr *a = ex_sub(x, v->soffset, r->soffset);
    for (int d = 0; d < v->ndim; d++)
      if (!(v->ssize[d]->kind == E_CONST && v->ssize[d]->c <= 1) && !is_const(v->sstride[d], 0))
        a = ex_add(x, a, ex_mul_e(x, idx[d], v->sstride[d]));
    return a;
  }
  Expr *a = ex_const(x, v->offset - r->offset);
  for (int d = 0; d < v->ndim; d++)
    if (v->size[d] > 1 && v->stride[d] != 0) a = ex_add(x, a, ex_mul(x, idx[d], v->stride[d]));
  return a;
}

/* The logical index of dense value r that holds storage element addr. */
static void invert_addr(ExprCtx *x, const Value *r, Expr *addr, Expr **idx) {
  if (r->symbolic) {  /* dense (value_dense_sym): every stride it divides by is at least 1 */
    for (int d = 0; d < r->ndim; d++) {
      if (r->ssize[d]->kind == E_CONST && r->ssize[d]->c <= 1) idx[d] = ex_const(x, 0);
      else idx[d] = ex_mod_e(x, ex_div_e(x, addr, r->sstride[d]), r->ssize[d]);
    }
    return;
  }
  for (int d = 0; d < r->ndim; d++) {
    if (r->size[d] <= 1 || r->stride[d] <= 0) idx[d] = ex_const(x, 0);
    else idx[d] = ex_mod(x, ex_div(x, addr, r->stride[d]), r->size[d]);
  }
}

void bcast_index(ExprCtx *x, const Value *in, int out_ndim, Expr **out_idx, Expr **in_idx) {
  for (int k = 0; k < in->ndim; k++) {
    int od = out_ndim - in->ndim + k;
    in_idx[k] = in->size[k] == 1 ? ex_const(x, 0) : out_idx[od];
  }
}

void gather_index(ExprCtx *x, const Node *n, const Value *in, Expr **out_idx, Expr **in_idx) {
  for (int k = 0; k < in->ndim; k++) {
    int od = n->gblk + n->gblklen - in->ndim + k;
    in_idx[k] = in->size[k] == 1 ? ex_const(x, 0) : out_idx[od];
  }
}

/* A cat input's index along the cat dim: the result's index i less the
   input's start, clamped into [0, len - 1] (start and len size expressions). */
Expr *cat_index(ExprCtx *x, Expr *i, Expr *start, Expr *len) {
  return ex_min_e(x, ex_max(x, ex_sub(x, i, start), 0), ex_add(x, len, ex_const(x, -1)));
}

/* A gather's reads: its index tensors at the output index, then its source
   at the gathered index, a gathered variable for each indexed dim.  The
   variables say nothing but their range: a read through one is never at
   the address where a kernel writes (so a gather joins no kernel that
   computes its source), and reads of the source's own operands inherit it. */
static void walk_gather(Graph *g, ExprCtx *x, const Node *n, Expr **idx, ReadFn fn, void *ud) {
  const Value *src = g->values[n->red_in];
  Expr *sub[MAXD];
  for (int k = 0; k < n->ngidx; k++) {
    const Value *in = g->values[n->gidx[k]];
    gather_index(x, n, in, idx, sub);
    walk_reads(g, x, in->id, sub, fn, ud);
  }
  int pushed = 0;
  for (int d = 0; d < n->gndim; d++) {
    if (n->gmap[d] >= 0) { sub[d] = idx[n->gmap[d]]; continue; }
    int gv = ex_push_var_size(x, n->sgsize[d]);
    EM_ASSERT(gv >= 0);  /* realize bounds the nesting (inline_gvars) */
    pushed++;
    sub[d] = ex_var(x, gv);
  }
  walk_reads(g, x, src->id, sub, fn, ud);
  while (pushed--) ex_pop_var(x);
}

static void walk_def(Graph *g, ExprCtx *x, Value *v, Expr **idx, ReadFn fn, void *ud);

void walk_reads(Graph *g, ExprCtx *x, int vid, Expr **idx, ReadFn fn, void *ud) {
  Value *v = g->values[vid];
  if (v->root != vid) {  /* a view */
    Value *r = g->values[v->root];
    Expr *addr = value_addr(g, x, v, idx);
    if (r->materialized) { fn(ud, r->id, addr); return; }
    Expr *ridx[MAXD];
    invert_addr(x, r, addr, ridx);
    walk_reads(g, x, r->id, ridx, fn, ud);
    return;
  }
  if (v->materialized) { fn(ud, vid, value_addr(g, x, v, idx)); return; }
  walk_def(g, x, v, idx, fn, ud);
}

void walk_def_reads(Graph *g, ExprCtx *x, int vid, Expr **idx, ReadFn fn, void *ud) {
  Value *v = g->values[vid];
  if (v->root != vid) walk_reads(g, x, vid, idx, fn, ud);  /* a view's own flag is never read */
  else walk_def(g, x, v, idx, fn, ud);
}

static void walk_def(Graph *g, ExprCtx *x, Value *v, Expr **idx, ReadFn fn, void *ud) {
  Node *n = v->def;
  EM_ASSERT(n && n->form >= 0);
  Expr *sub[MAXD];
  switch (n->form) {
  case F_FULL: case F_ARANGE: return;
  case F_CAT: {
    Expr *start = ex_const(x, 0);
    int d = n->cat_dim;
    for (int i = 0; i < n->ncat; i++) {
      const Value *in = g->values[n->cat_in[i]];
      for (int k = 0; k < v->ndim; k++) sub[k] = idx[k];
      sub[d] = cat_index(x, idx[d], start, in->ssize[d]);
      walk_reads(g, x, in->id, sub, fn, ud);
      start = ex_add(x, start, in->ssize[d]);
    }
    return;
  }
  case F_PAD: {
    const Value *in = g->values[n->red_in];
    for (int k = 0; k < v->ndim; k++) sub[k] = idx[k];
    for (int i = 0; i < n->npad; i++) {
      int d = v->ndim - 1 - i;
      sub[d] = cat_index(x, idx[d], ex_const(x, n->pad[2 * i]), in->ssize[d]);
    }
    walk_reads(g, x, in->id, sub, fn, ud);
    return;
  }
  case F_GATHER: walk_gather(g, x, n, idx, fn, ud); return;
  case F_FLIP:
    flip_index(x, n, v, idx, sub);
    walk_reads(g, x, n->red_in, sub, fn, ud);
    return;
  case F_SCATTER: {
    Bound cond[SCATTER_MAX_BOUNDS];
    int nc = scatter_index(g, x, n, idx, sub, cond);
    if (nc >= 0) walk_reads(g, x, n->scat_src, sub, fn, ud);
    if (nc != 0) walk_reads(g, x, n->red_in, idx, fn, ud);
    return;
  }
  /* always materialized, or (folded into a library call) never read */
  case F_REDUCE: case F_VIEW: case F_MATMUL: case F_EPILOGUE: EM_ASSERT(0); return;
  default:
    for (int i = 0; i < n->nopnd; i++) {
      if (n->opnd[i].v < 0) continue;
      const Value *in = g->values[n->opnd[i].v];
      bcast_index(x, in, v->ndim, idx, sub);
      walk_reads(g, x, in->id, sub, fn, ud);
    }
  }
}

/* ---- realization ---- */
static int operand_cost(Graph *g, int vid) {
  const Value *r = g->values[g->values[vid]->root];
  return r->materialized ? 0 : r->inline_cost;
}

/* Loads of materialized tensors that reading operand vid once costs, for a
   value of `numel` elements.  On a GPU a tensor broadcast over at least
   BCAST_FREE of them per element (BatchNorm's four per-channel vectors
   under a [N, C, H, W] activation) is served from cache and counts as no
   load: recomputing BatchNorm + SiLU where it is read again (the
   squeeze-and-excitation gate multiply) then loads the convolution's bf16
   result once more, instead of a float32 copy of the activation being
   stored and loaded, as Inductor does too. */
static int operand_reads(Graph *g, int vid, int64_t numel) {
  const Value *r = g->values[g->values[vid]->root];
  if (!r->materialized) return r->inline_reads;
  return g->target == EMBER_CUDA && !r->symbolic && r->numel > 0 && r->numel * BCAST_FREE <= numel ? 0 : 1;
}

/* Gathered variables live at once while reading operand vid (0 if loaded). */
static int operand_gvars(Graph *g, int vid) {
  const Value *r = g->values[g->values[vid]->root];
  return r->materialized ? 0 : r->inline_gvars;
}

#define GVARS_MAX (EX_MAXVARS - EX_GATHERED)

/* A gather's source is read with one gathered variable per indexed dim
   live; where its own nested gathers would need more than there are, it is
   materialized (a rare chain of gathers of gathers). */
static int gather_gvars(Graph *g, const Node *n) {
  int own = 0, need = 0;
  for (int d = 0; d < n->gndim; d++) own += n->gmap[d] < 0;
  if (own + operand_gvars(g, n->red_in) > GVARS_MAX) g->values[g->values[n->red_in]->root]->materialized = 1;
  need = own + operand_gvars(g, n->red_in);
  for (int k = 0; k < n->ngidx; k++)
    if (operand_gvars(g, n->gidx[k]) > need) need = operand_gvars(g, n->gidx[k]);
  return need;
}

/* A store into input dst (copy_) may read a copy_ destination only where it
   writes: dst itself at the same element, which the same thread reads first.
   Anything else (dst transposed, another destination) is read from src
   computed into memory of its own before the stores. */
typedef struct IntoCk { Graph *g; int dst; Expr *at; int ok; } IntoCk;

static void into_read(void *ud, int r, Expr *addr) {
  IntoCk *c = ud;
  if (!c->g->values[r]->is_dst) return;
  if (r != c->dst || !ex_equal(addr, c->at)) c->ok = 0;
}

static void into_reads(Graph *g, Value *v) {
  ExprCtx x = {&g->pool, v->ndim, {0}};
  Expr *idx[MAXD];
  for (int d = 0; d < v->ndim; d++) x.vhi[d] = v->size[d] - 1, idx[d] = ex_var(&x, d);
  IntoCk c = {g, v->into, value_addr(g, &x, g->values[v->into], idx), 1};
  v->materialized = 0;  /* walk its definition, not its storage */
  walk_reads(g, &x, v->id, idx, into_read, &c);
  v->materialized = 1;
  int src = v->def->opnd[0].v;
  if (!c.ok && src >= 0) g->values[g->values[src]->root]->materialized = 1;
}

/* Does node n itself evaluate an erf? */
static int erf_op(const Node *n) {
  return n->op == OP_GELU || n->op == OP_GELU_BW || n->op == OP_ERF || n->op == OP_ERFC;
}

/* Is value v (a root) read through an unfold view of it, or of a view of it? */
static int unfolded(Graph *g, const Value *v) {
  for (int i = v->id + 1; i < g->nvalues; i++) {
    const Value *u = g->values[i];
    if (u->root == v->id && u != v && u->def && u->def->op == OP_UNFOLD) return 1;
  }
  return 0;
}

static void realize(Graph *g) {
  /* per value: its recomputation evaluates an erf (CPU only; NULL if out of memory: not used) */
  unsigned char *erfs = g->target == EMBER_CUDA ? NULL : pool_alloc(&g->pool, (size_t)g->nvalues + 1);
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->is_input || (v->def && v->def->form < 0)) v->materialized = 1;
  }
  for (int i = 0; i < g->norder; i++) {
    Node *n = g->order[i];
    if (n->form < 0) continue;
    Value *v = g->values[n->outs[0]];
    int cost = 1, reads = 0, gvars = 0;
    int64_t vnumel = v->symbolic ? 0 : v->numel;
    switch (n->form) {
    case F_VIEW: {
      Value *r = g->values[v->root];
      if (!r->materialized && !(r->symbolic ? value_dense_sym(g, r) : value_is_dense(r))) r->materialized = 1;
      continue;
    }
    case F_REDUCE: v->materialized = 1; continue;
    case F_MATMUL:
      g->values[n->mm_out]->materialized = 1;
      g->values[g->values[n->mm_a]->root]->materialized = 1;
      g->values[g->values[n->mm_b]->root]->materialized = 1;
      if (n->mm_bias >= 0) g->values[g->values[n->mm_bias]->root]->materialized = 1;
      continue;
    case F_EPILOGUE: continue;  /* its call computes it (F_MATMUL above) */
    case F_CAT:
      for (int k = 0; k < n->ncat; k++) {
        cost += operand_cost(g, n->cat_in[k]), reads += operand_reads(g, n->cat_in[k], vnumel);
        if (operand_gvars(g, n->cat_in[k]) > gvars) gvars = operand_gvars(g, n->cat_in[k]);
      }
      break;
    case F_PAD:
      cost += operand_cost(g, n->red_in), reads += operand_reads(g, n->red_in, vnumel);
      gvars = operand_gvars(g, n->red_in);
      break;
    case F_GATHER:
      gvars = gather_gvars(g, n);
      cost += 1 + operand_cost(g, n->red_in), reads += operand_reads(g, n->red_in, vnumel);  /* + the bound check */
      for (int k = 0; k < n->ngidx; k++) cost += operand_cost(g, n->gidx[k]), reads += operand_reads(g, n->gidx[k], vnumel);
      break;
    case F_FLIP:
      cost += operand_cost(g, n->red_in), reads += operand_reads(g, n->red_in, vnumel);
      gvars = operand_gvars(g, n->red_in);
      break;
    case F_SCATTER:
      cost += operand_cost(g, n->red_in) + operand_cost(g, n->scat_src);
      reads += operand_reads(g, n->red_in, vnumel) + operand_reads(g, n->scat_src, vnumel);
      gvars = operand_gvars(g, n->red_in);
      if (operand_gvars(g, n->scat_src) > gvars) gvars = operand_gvars(g, n->scat_src);
      break;
    case F_FULL: case F_ARANGE: break;
    default:
      for (int k = 0; k < n->nopnd; k++)
        if (n->opnd[k].v >= 0) {
          cost += operand_cost(g, n->opnd[k].v), reads += operand_reads(g, n->opnd[k].v, vnumel);
          if (operand_gvars(g, n->opnd[k].v) > gvars) gvars = operand_gvars(g, n->opnd[k].v);
          const Value *r = g->values[g->values[n->opnd[k].v]->root];
          if (erfs && !r->materialized && erfs[r->id]) erfs[v->id] = 1;
        }
      if (erfs && erf_op(n)) erfs[v->id] = 1;
    }
    v->inline_cost = cost;
    v->inline_reads = reads;
    v->inline_gvars = gvars;
    /* its readers.  On a GPU a chain of views (a pooling window's pad,
       unfold, unfold) reads it once: a ResNet's BatchNorm and ReLU are then
       recomputed inside the max pool's kernel, as Inductor does.  On the
       CPU each view counts: there the recomputation (9 reads per window)
       cost more than it saved (BatchNorm, ReLU and a 3x3 max pool took
       more than twice as long in one kernel as in two) */
    int uses = v->nuses - (g->target == EMBER_CUDA ? v->vuses : 0);
    if (v->fb_use || cost > INLINE_MAX || (uses > 1 && (cost * uses > REUSE_MAX || reads > REUSE_READS)))
      v->materialized = 1;
    /* in a symbolic graph on a GPU, a value read through an unfold (a max pool's windows over a padded
       activation) is stored: its index through the windows would divide by the padded width,
       a sum of sizes the simplifier cannot divide by (64-bit divisions for each element of
       each window); stored, the windows read it by their strides */
    if (g->symbolic && g->target == EMBER_CUDA && unfolded(g, v)) v->materialized = 1;
    if (erfs && erfs[v->id] && uses > 1) v->materialized = 1;
    if (v->into >= 0) {
      v->materialized = 1;
      into_reads(g, v);
    }
  }
}

/* ---- grouping ---- */
void kernel_vars(ExprCtx *x, const Kernel *k) {
  x->nvars = k->ndim;
  for (int d = 0; d < k->ndim; d++) {
    if (k->symbolic) ex_set_size(x, d, k->ssize[d]);
    else x->vhi[d] = k->size[d] - 1, x->vsize[d] = NULL;
  }
}

int value_dense_sym(Graph *g, const Value *v) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  uint32_t left = 0;  /* the dims not yet placed: those that may be more than 1 */
  for (int d = 0; d < v->ndim; d++)
    if (!(v->ssize[d]->kind == E_CONST && v->ssize[d]->c <= 1)) left |= 1u << d;
  /* innermost first: the one dim whose stride is the product of the sizes inside it */
  Expr *expect = ex_const(&x, 1);
  while (left) {
    int found = -1;
    for (int d = 0; d < v->ndim && found < 0; d++)
      if ((left >> d & 1) && ex_cmp(&x, v->sstride[d], expect) == EX_EQ) found = d;
    if (found < 0) return 0;
    left &= ~(1u << found);
    expect = ex_mul_e(&x, expect, v->ssize[found]);
  }
  return !g->pool.oom;
}

/* Is v shaped like kernel k's space, for every size? */
static int same_shape(Graph *g, const Value *v, const Kernel *k) {
  if (v->ndim != k->ndim) return 0;
  if (v->symbolic || k->symbolic) {  /* equal for every size; unknown: not the same */
    ExprCtx x;
    graph_size_ctx(g, &x);
    for (int d = 0; d < k->ndim; d++)
      if (ex_cmp(&x, v->ssize[d], k->ssize[d]) != EX_EQ) return 0;
    return 1;
  }
  for (int d = 0; d < k->ndim; d++)
    if (v->size[d] != k->size[d]) return 0;
  return 1;
}

/* Is v shaped like the outer (kept) dims of k: keepdim form or reduced form? */
static int outer_shape(Graph *g, const Value *v, const Kernel *k) {
  if (v->symbolic || k->symbolic) {  /* the same by ex_cmp: equal for every size */
    ExprCtx x;
    graph_size_ctx(g, &x);
    int keep = v->ndim == k->ndim;
    if (!keep && v->ndim != k->ndim - __builtin_popcount(k->rmask)) return 0;
    for (int d = 0, j = 0; d < k->ndim; d++) {
      int red = k->rmask >> d & 1;
      if (red && !keep) continue;
      Expr *want = red ? ex_const(&x, 1) : k->ssize[d];
      if (ex_cmp(&x, v->ssize[j++], want) != EX_EQ) return 0;
    }
    return 1;
  }
  if (v->ndim == k->ndim) {
    for (int d = 0; d < k->ndim; d++)
      if (v->size[d] != ((k->rmask >> d & 1) ? 1 : k->size[d])) return 0;
    return 1;
  }
  if (v->ndim != k->ndim - __builtin_popcount(k->rmask)) return 0;
  for (int d = 0, j = 0; d < k->ndim; d++) {
    if (k->rmask >> d & 1) continue;
    if (v->size[j++] != k->size[d]) return 0;
  }
  return 1;
}

void item_index(ExprCtx *x, const Kernel *k, const Value *v, int kind, Expr **idx) {
  if (kind == IT_STORE) {
    for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(x, v->permuted ? v->item_perm[d] : d);
    return;
  }
  /* REDUCE (its result) and OUTER: v has the outer shape */
  if (v->ndim == k->ndim) {
    for (int d = 0; d < k->ndim; d++) idx[d] = (k->rmask >> d & 1) ? ex_const(x, 0) : ex_var(x, d);
    return;
  }
  for (int d = 0, j = 0; d < k->ndim; d++)
    if (!(k->rmask >> d & 1)) idx[j++] = ex_var(x, d);
}

/* The address where kernel k writes value v (an item of k). */
static Expr *write_addr(Graph *g, ExprCtx *x, const Kernel *k, const Value *v) {
  Expr *idx[MAXD];
  item_index(x, k, v, v->item_kind, idx);
  return value_addr(g, x, v, idx);
}

typedef struct JoinCk {
  Graph *g;
  ExprCtx *x;
  Kernel *k;
  int kind;                /* the kind v would have in k */
  int ok;
} JoinCk;

static void join_read(void *ud, int r, Expr *addr) {
  JoinCk *c = ud;
  Value *rv = c->g->values[r];
  if (!c->ok) return;
  if (rv->kernel == c->k->id) {
    if (c->kind == IT_OUTER && rv->item_kind == IT_STORE) { c->ok = 0; return; }
    if (!ex_equal(addr, write_addr(c->g, c->x, c->k, rv))) c->ok = 0;
    return;
  }
  if (rv->ready_step >= c->k->step) c->ok = 0;
}

/* Walk what value v reads when computed as an item of kind `kind` in k. */
static void walk_item(Graph *g, ExprCtx *x, const Kernel *k, const Value *v, int kind, ReadFn fn, void *ud) {
  Expr *idx[MAXD];
  if (kind == IT_REDUCE) {
    const Node *n = v->def;
    for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(x, d);
    walk_reads(g, x, n->red_in, idx, fn, ud);
    return;
  }
  item_index(x, k, v, kind, idx);
  /* compute v itself: walk its definition, not its storage */
  const Node *n = v->def;
  Expr *sub[MAXD];
  switch (n->form) {
  case F_FULL: case F_ARANGE: return;
  case F_FLIP: case F_SCATTER:
  case F_CAT: case F_PAD: case F_GATHER: {
    walk_def_reads(g, x, v->id, idx, fn, ud);
    return;
  }
  default:
    for (int i = 0; i < n->nopnd; i++) {
      if (n->opnd[i].v < 0) continue;
      const Value *in = g->values[n->opnd[i].v];
      bcast_index(x, in, v->ndim, idx, sub);
      walk_reads(g, x, in->id, sub, fn, ud);
    }
  }
}

/* Is v, stored in reduction kernel k's space, laid out as a row-major
   tensor of k's sizes with its dims permuted (a LayerNorm's result
   transposed for the matmul after it: [B, C, T] with strides (T*C, 1, C)
   over the rows [B, T, C])?  Then its dim d is k's dim perm[d], and its
   stores run in the kernel's order, as an unpermuted store's would: the
   kernel writes it where a second kernel would have read the rows again
   (and computed them again) to write it.  Static sizes only. */
static int store_perm(const Value *v, const Kernel *k, int8_t *perm) {
  if (!k->rmask || v->symbolic || k->symbolic || v->ndim != k->ndim) return 0;
  int used = 0, moved = 0;
  int64_t step = 1;
  for (int kd = k->ndim - 1; kd >= 0; kd--) {
    int pick = -1;
    for (int d = 0; d < v->ndim && pick < 0; d++)
      if (!(used >> d & 1) && v->size[d] == k->size[kd] && (v->size[d] == 1 || v->stride[d] == step)) pick = d;
    if (pick < 0) return 0;
    used |= 1 << pick, perm[pick] = (int8_t)kd, moved |= pick != kd;
    step *= k->size[kd];
  }
  return moved;
}

static int try_join(Graph *g, Kernel *k, Value *v, int *kind_out) {
  const Node *n = v->def;
  int kind;
  if (k->lib || n->form == F_MATMUL || n->form == F_EPILOGUE) return 0;
  /* stores into inputs go together, after everything else has read them */
  if (k->into != (v->into >= 0) || (k->into && k->step != g->nsteps - 1)) return 0;
  uint32_t new_rmask = k->rmask;
  if (n->form == F_REDUCE) {
    const Value *in = g->values[n->red_in];
    if (!same_shape(g, in, k)) return 0;
    if (k->rmask != n->rmask) {
      if (k->rmask != 0) return 0;
      for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind != IT_STORE) return 0;
      new_rmask = n->rmask;
    }
    kind = IT_REDUCE;
  } else if (same_shape(g, v, k)) kind = IT_STORE;
  else if (k->rmask && outer_shape(g, v, k)) kind = IT_OUTER;
  else if (store_perm(v, k, v->item_perm)) kind = IT_STORE, v->permuted = 1;
  else return 0;
  uint32_t old = k->rmask;
  k->rmask = new_rmask;
  ExprCtx x = {&g->pool, 0, {0}};
  x.syms = &g->syms;
  kernel_vars(&x, k);
  JoinCk c = {g, &x, k, kind, 1};
  walk_item(g, &x, k, v, kind, join_read, &c);
  if (!c.ok && kind == IT_STORE && !v->permuted && store_perm(v, k, v->item_perm)) {
    /* a shape that is its own permutation ([B, T, T] transposed) */
    v->permuted = 1, c.ok = 1;
    walk_item(g, &x, k, v, kind, join_read, &c);
  }
  if (!c.ok) k->rmask = old, v->permuted = 0;
  *kind_out = kind;
  return c.ok;
}

static int add_step(Graph *g, int kind, int index) {
  if (g->nsteps == g->cap_steps) {
    int c = g->cap_steps ? g->cap_steps * 2 : 16;
    Step *s = em_realloc(g->steps, sizeof(Step) * c);
    if (!s) return -1;
    g->steps = s, g->cap_steps = c;
  }
  g->steps[g->nsteps].kind = kind, g->steps[g->nsteps].index = index;
  return g->nsteps++;
}

/* A kernel computing value v of node n (for a library call, n's mm_out). */
static Kernel *new_kernel(Graph *g, Node *n, const Value *v) {
  if (g->nkernels == g->cap_kernels) {
    int c = g->cap_kernels ? g->cap_kernels * 2 : 16;
    Kernel **ks = em_realloc(g->kernels, sizeof(Kernel *) * c);
    if (!ks) return NULL;
    g->kernels = ks, g->cap_kernels = c;
  }
  Kernel *k = pool_alloc(&g->pool, sizeof *k);
  if (!k) return NULL;
  k->id = g->nkernels;
  const Value *space = n->form == F_REDUCE ? g->values[n->red_in] : v;
  k->ndim = space->ndim;
  for (int d = 0; d < k->ndim; d++) k->size[d] = space->size[d], k->ssize[d] = space->ssize[d];
  k->symbolic = 0;
  for (int d = 0; d < k->ndim; d++) k->symbolic |= space->ssize[d]->kind != E_CONST;
  k->rmask = n->form == F_REDUCE ? n->rmask : 0;
  k->lib = n->form == F_MATMUL;
  k->call = k->lib ? n : NULL;
  int s = add_step(g, EMBER_STEP_KERNEL, k->id);
  if (s < 0) return NULL;
  k->step = s;
  g->kernels[g->nkernels++] = k;
  return k;
}

static int add_item(Graph *g, Kernel *k, Value *v, int kind) {
  if (k->nitems == k->cap) {
    int c = k->cap ? k->cap * 2 : 8;
    Item *it = pool_alloc(&g->pool, sizeof(Item) * c);
    if (!it) return 0;
    if (k->nitems) memcpy(it, k->items, sizeof(Item) * k->nitems);
    k->items = it, k->cap = c;
  }
  k->items[k->nitems].kind = kind, k->items[k->nitems].v = v->id;
  k->nitems++;
  v->kernel = k->id, v->item_kind = kind, v->ready_step = k->step;
  return 1;
}

int fuse(Graph *g) {
  realize(g);
  for (int i = 0; i < g->nvalues; i++) g->values[i]->ready_step = -1;
  for (int i = 0; i < g->norder; i++) {
    Node *n = g->order[i];
    if (n->form < 0) {
      int s = add_step(g, EMBER_STEP_FALLBACK, n->id);
      if (s < 0) return graph_error(g, n, "out of memory");
      for (int k = 0; k < n->nouts; k++) g->values[n->outs[k]]->ready_step = s;
      continue;
    }
    /* a library call's step is at its mm; an F_EPILOGUE node's result was
       written there */
    Value *v = g->values[n->form == F_MATMUL ? n->mm_out : n->outs[0]];
    if (n->form == F_VIEW || n->form == F_EPILOGUE || !v->materialized) continue;
    Kernel *k = NULL;
    int kind = IT_STORE;
    for (int j = g->nkernels - 1; j >= 0 && j >= g->nkernels - JOIN_LOOKBACK && n->form != F_MATMUL; j--)
      if (try_join(g, g->kernels[j], v, &kind)) { k = g->kernels[j]; break; }
    if (!k) {
      k = new_kernel(g, n, v);
      if (!k) return graph_error(g, n, "out of memory");
      k->into = v->into >= 0;
      kind = n->form == F_REDUCE ? IT_REDUCE : IT_STORE;
    }
    if (!add_item(g, k, v, kind)) return graph_error(g, n, "out of memory");
  }
  if (g->pool.oom) return graph_error(g, NULL, "out of memory while fusing");
  return EMBER_OK;
}
