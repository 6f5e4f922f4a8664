/*
 * layout.c - the layouts of the values ember writes: channels-last around
 * convolutions torch runs, and matmul results transposed for their readers.
 *
 * A convolution is a fallback (torch's oneDNN or cuDNN kernel), and on the
 * CPU oneDNN is much faster on channels-last (NHWC) inputs: a small ResNet's
 * inference spent 81% of its step in NCHW convolutions, and eager with
 * channels-last tensors ran 1.45x faster.  ember owns the layout of the
 * values its kernels write, so the 4-d value a kernel writes for a
 * convolution's input is given NHWC strides, and the convolution's result,
 * which torch then makes channels-last too (its memory format follows the
 * input's), is declared so, so that the runner takes it as it comes.  The
 * kernels between convolutions (BatchNorm, ReLU, residual adds) read and
 * write through the strides like any others; the code generators order a
 * pointwise kernel's loops by its output's strides, so they still stream.
 *
 * A value keeps the layout torch's meta gave it when something relies on
 * it: a graph input or output (the caller's, and AOTAutograd's saved
 * activations), a view's root (views were described with the old strides),
 * a copy_ into an input.  A convolution whose result is returned keeps it
 * too (the runner would copy it back).  Training graphs therefore change
 * little: most activations there are saved for the backward.
 *
 * On a GPU, graph inputs a convolution reads are copied to NHWC by ember
 * kernels: the image (nhwc_copy), and the weights torch would otherwise
 * convert at every call (copy_weights).
 *
 * On the CPU and CUDA alike (cuDNN's NHWC convolutions are faster too).
 *
 * A symbolic graph (dynamic shapes) takes the same path: sizes and strides
 * are read as size expressions (constants in a static graph), NHWC strides
 * are [H*W*C, 1, W*C, C] as expressions, and every comparison is what holds
 * at every size (ex_cmp).  Where that is unknown the value keeps torch's
 * layout, and graph.txt says why after it (Value.layout_kept).
 *
 * A matmul's result is stored transposed (computed as C^T = B^T A^T) where
 * the kernels reading it would otherwise read across their stream
 * (transpose_results, static graphs).
 *
 * The first pass after lower.c, it also makes the run order, g->order (the
 * nodes in creation order, its copies inserted), which split.c extends with
 * partial reductions decided on the layouts chosen here.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

static int is_conv(const Node *n) {
  return n->form < 0 && n->opname && !strcmp(n->opname, "aten.convolution.default");
}

/* A convolution with one input and one result: torch makes its result in
   its input's memory format, so an NHWC result is taken as it comes. */
static int follows_input(const Node *n) {
  return is_conv(n) && n->nargs >= 1 && n->args[0].kind == EMBER_ARG_TENSOR && n->nouts == 1;
}

/* Sizes and strides are read as size expressions (Value.ssize, sstride:
   constants in a static graph, so both kinds of graph take one path), and
   compared by what holds for every size (ex_cmp): where that is unknown,
   the value keeps torch's layout. */

/* May a size be more than 1 (is it not a constant 0 or 1)? */
static int may_gt1(const Expr *e) { return !(e->kind == E_CONST && e->c <= 1); }

/* Are a and b equal at every size? */
static int same(Graph *g, Expr *a, Expr *b) {
  if (a->kind == E_CONST && b->kind == E_CONST) return a->c == b->c;
  ExprCtx x;
  graph_size_ctx(g, &x);
  return ex_cmp(&x, a, b) == EX_EQ;
}

static int same_sizes(Graph *g, const Value *a, const Value *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (!same(g, a->ssize[d], b->ssize[d])) return 0;
  return 1;
}

/* Do strides st give v's elements the places v's own strides give them
   (equal where a size may be more than 1)? */
static int same_strides(Graph *g, const Value *v, Expr *const *st) {
  for (int d = 0; d < v->ndim; d++)
    if (may_gt1(v->ssize[d]) && !same(g, st[d], v->sstride[d])) return 0;
  return 1;
}

/* NHWC strides for a 4-d value of v's sizes: [H*W*C, 1, W*C, C], each size
   taken as at least 1 (torch's rule for a dim of size 0). */
static void nhwc(Graph *g, const Value *v, Expr **st) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  Expr *c = ex_max(&x, v->ssize[1], 1), *h = ex_max(&x, v->ssize[2], 1), *w = ex_max(&x, v->ssize[3], 1);
  st[1] = ex_const(&x, 1);
  st[3] = c;
  st[2] = ex_mul_e(&x, w, c);
  st[0] = ex_mul_e(&x, st[2], h);
}

/* v given strides st (size expressions in g's pool), its integers too (-1
   where symbolic). */
static int set_strides(Graph *g, Value *v, Expr *const *st) {
  if (g->pool.oom) return graph_error(g, NULL, "out of memory planning layouts");
  int symbolic = v->soffset->kind != E_CONST || v->snumel->kind != E_CONST;
  for (int d = 0; d < v->ndim; d++) {
    v->sstride[d] = st[d];
    v->stride[d] = st[d]->kind == E_CONST ? st[d]->c : -1;
    symbolic |= v->ssize[d]->kind != E_CONST || st[d]->kind != E_CONST;
  }
  v->symbolic = symbolic;
  return EMBER_OK;
}

/* v given NHWC strides. */
static int set_nhwc(Graph *g, Value *v) {
  Expr *st[4];
  nhwc(g, v, st);
  return set_strides(g, v, st);
}

static int is_nhwc(Graph *g, const Value *v) {
  if (v->ndim != 4) return 0;
  Expr *st[4];
  nhwc(g, v, st);
  return same_strides(g, v, st);
}

/* Does v start its storage and fill it without holes? */
static int whole(Graph *g, const Value *v) {
  if (!v->symbolic) return value_span(v) == v->numel && v->offset == 0;
  return v->soffset->kind == E_CONST && v->soffset->c == 0 && value_dense_sym(g, v);
}

/* Why a symbolic value NHWC was considered for keeps torch's layout (a
   reason that may hold at some sizes only): said after the value in the
   debug dump (graph.txt). */
static void keep_note(Graph *g, Value *v, const char *why) {
  if (v->symbolic && !v->layout_kept) v->layout_kept = why;
}

/* Does anything rely on v's strides as torch's meta gave them? */
static int pinned_own(Graph *g, const Value *v) {  /* ... other than as a view's root */
  return v->ndim != 4 || v->is_input || v->is_output || v->out_use || v->into >= 0 || v->is_dst ||
         v->root != v->id || !whole(g, v);
}

static int pinned(Graph *g, const Value *v, const char *views) { return pinned_own(g, v) || views[v->id]; }

/* On the CPU, torch's convolution (oneDNN) with an NHWC input and the
   parameter's NCHW weight reorders the weight at every call; where the
   weight has over 1000 elements per output position (N * Ho * Wo), that
   costs more than NHWC saves (a 3x3 convolution of 512 channels at 7x7 is
   slower NHWC, one of 256 channels at 14x14 faster; resnet50 at a small
   image size took almost twice as long with every convolution NHWC).  With
   symbolic sizes, where that holds at the least N * Ho * Wo. */
static int nhwc_pays(Graph *g, const Node *n, Value *out) {
  if (g->target != EMBER_CPU || n->nargs < 2 || n->args[1].kind != EMBER_ARG_TENSOR) return 1;
  const Value *w = g->values[n->args[1].i];
  if (!out->symbolic) return out->size[0] * out->size[2] * out->size[3] * 1000 >= w->numel;
  ExprCtx x;
  graph_size_ctx(g, &x);
  Expr *pos = ex_mul_e(&x, ex_mul_e(&x, out->ssize[0], out->ssize[2]), out->ssize[3]);
  if (!w->symbolic && !g->pool.oom && pos->lo >= 0 && pos->lo * 1000 >= w->numel) return 1;
  keep_note(g, out, "torch's layout: NHWC may not pay at some sizes (CPU, nhwc_pays)");
  return 0;
}

/* A graph input that a convolution on a GPU reads (the images: torch's
   meta gives them NCHW), copied into NHWC by an ember kernel before it, as
   Inductor does: cuDNN then runs the convolution NHWC instead of
   transposing its input and result (2 + 1 kernels for resnet50's stem),
   and its result, NHWC too, is read along the channels by what follows (the
   max pool after the stem: a window's elements were 8 bytes apart in NCHW,
   every read half wasted).  Returns the copy's value, or a status.  The
   copy is an ordinary pointwise node (clone) of argument argi, placed at
   position at of g->order (plan_layouts makes room), and the convolution
   reads it instead; the runtime asks the program which value each
   fallback argument is (ember_program_node_arg). */
static int nhwc_copy(Graph *g, Node *conv, int argi, int at, const char *what) {
  Value *in = g->values[conv->args[argi].i];
  int vid = graph_value_like(g, in);
  if (vid < 0) return vid;
  int rc = set_nhwc(g, g->values[vid]);
  if (rc) return rc;
  const char *name = pool_printf(&g->pool, "%s_%s_nhwc", conv->name, what);
  Node *c = name ? graph_add_node(g, "aten.clone.default", name, in->id, vid) : NULL;
  if (!c) return graph_error(g, conv, "out of memory copying a convolution's %s to NHWC", what);
  c->form = F_UNARY, c->spell = "%0", c->cdtype = in->dtype;
  c->nopnd = 1, c->opnd[0] = (Operand){.v = in->id};
  conv->args[argi].i = vid;  /* the use moves to the copy */
  count_use(g, vid, 1);
  g->values[vid]->fb_use = 1;
  memmove(&g->order[at + 1], &g->order[at], sizeof(Node *) * (size_t)(g->norder - at));
  g->order[at] = c;
  g->norder++;
  return vid;
}

/* Is it worth it?  On a GPU, for a 4-d floating-point graph input of more
   than one channel (a constant) that is not NHWC already. */
static int copy_pays(Graph *g, const Value *in) {
  return g->target == EMBER_CUDA && in->is_input && in->ndim == 4 && in->root == in->id && !is_nhwc(g, in) &&
         (in->dtype == EMBER_F32 || in->dtype == EMBER_F16 || in->dtype == EMBER_BF16) && in->size[1] > 1;
}

/* A convolution on a GPU whose input is NHWC, with a weight that is a
   graph input (a parameter: NCHW by torch's meta) of more than 1x1: torch
   copies the weight to channels-last at every call, a kernel of its own per
   convolution (59 in densenet121 inference, 17 in resnet50's).  Inductor copies them in kernels
   of its own too.  Here ember does, and copies of one shape placed together
   fuse into one kernel (the 58 [32, 128, 3, 3] weights of densenet121).
   The weight's sizes are constants (a symbolic graph's batch and image
   sizes are no weight's). */
static int weight_copy_pays(Graph *g, const Node *conv) {
  if (g->target != EMBER_CUDA || !is_conv(conv) || conv->nargs < 2 || conv->args[0].kind != EMBER_ARG_TENSOR ||
      conv->args[1].kind != EMBER_ARG_TENSOR)
    return 0;
  const Value *in = g->values[conv->args[0].i], *w = g->values[conv->args[1].i];
  return in->ndim == 4 && is_nhwc(g, in) && w->is_input && !w->is_dst && w->ndim == 4 && w->root == w->id &&
         !w->symbolic && !is_nhwc(g, w) && w->dtype == in->dtype &&
         (w->dtype == EMBER_F32 || w->dtype == EMBER_F16 || w->dtype == EMBER_BF16);
}

/* The weight copies at the start of the program while they take at most
   this many bytes together (they live from there to their convolutions),
   else each just before its convolution (one kernel each). */
#define WCOPY_FRONT_BYTES ((int64_t)32 << 20)

static int copy_weights(Graph *g) {
  int64_t bytes = 0;
  int nw = 0;
  for (int i = 0; i < g->norder; i++)
    if (weight_copy_pays(g, g->order[i])) {
      const Value *w = g->values[g->order[i]->args[1].i];
      bytes += w->numel * (int64_t)dtype_size(w->dtype), nw++;
    }
  if (!nw) return EMBER_OK;
  int front = bytes <= WCOPY_FRONT_BYTES, placed = 0;
  /* a weight's copy (a weight may serve twice); weights are graph inputs, older than any copy */
  int *copy_of = malloc(sizeof(int) * (size_t)g->nvalues);
  if (!copy_of) return graph_error(g, NULL, "out of memory planning layouts");
  for (int i = 0; i < g->nvalues; i++) copy_of[i] = -1;
  int rc = EMBER_OK;
  for (int i = 0; i < g->norder && rc == EMBER_OK; i++) {
    Node *n = g->order[i];
    if (!weight_copy_pays(g, n)) continue;
    int w = (int)n->args[1].i;
    if (copy_of[w] >= 0) {
      n->args[1].i = copy_of[w];
      count_use(g, copy_of[w], 1);
      count_use(g, w, -1);
      continue;
    }
    int vid = nhwc_copy(g, n, 1, front ? placed : i, "weight");
    if (vid < 0) rc = vid;
    else placed++, i++, copy_of[w] = vid;  /* the convolution moved one place on */
  }
  free(copy_of);
  return rc;
}

/* Is v an activation whose layout matters: 4-d, more than one channel and
   more than one spatial element (else NCHW and NHWC strides agree), where
   any size may be? */
static int spatial(const Value *v) {
  if (v->ndim != 4 || !may_gt1(v->ssize[1])) return 0;
  const Expr *h = v->ssize[2], *w = v->ssize[3];
  if (h->kind == E_CONST && w->kind == E_CONST) return h->c * w->c > 1;
  return !(h->kind == E_CONST && h->c == 0) && !(w->kind == E_CONST && w->c == 0);
}

/* The strides of a view of sizes `to` (nt dims) that reshapes a tensor of
   sizes `from` and strides `st` (nf dims) without copying, as torch's view
   finds them, at every size: 1, or 0 where no strides can (the reshape
   merges dims that are not contiguous with each other) or where that
   depends on the sizes.  A chunk of contiguous dims takes view dims while
   their product is not its own (a size that may be more than 1 ends a
   chunk unless its stride continues it at every size). */
static int reshape_strides(Graph *g, Expr *const *from, Expr *const *st, int nf, Expr *const *to, int nt,
                           Expr **out) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  int vd = nt - 1;
  Expr *one = ex_const(&x, 1), *base = st[nf - 1], *tn = one, *vn = one;
  for (int td = nf - 1; td >= 0; td--) {
    tn = ex_mul_e(&x, tn, from[td]);
    if (td == 0 || (may_gt1(from[td - 1]) && !same(g, st[td - 1], ex_mul_e(&x, tn, base)))) {  /* a chunk ends */
      while (vd >= 0 && (!may_gt1(to[vd]) || !same(g, vn, tn))) {
        if (to[vd]->kind == E_CONST && to[vd]->c == 0) return 0;
        out[vd] = ex_mul_e(&x, vn, base);
        vn = ex_mul_e(&x, vn, to[vd--]);
      }
      if (!same(g, vn, tn)) return 0;
      if (td > 0) base = st[td - 1], tn = one, vn = one;
    }
  }
  return vd == -1 && !g->pool.oom;
}

/* In a symbolic graph, view v of root r an unfold (a pooling window) of r
   or of a view of r made before it (lower.c's inside_by_op proved it
   torch's unfold), or an alias of such a view: its input, and for an
   unfold the dim and step (else d = -1).  The strides it takes over its
   input's (window_strides): the input's, dim d's times step, and d's again
   for the window's dim; an alias's, the input's. */
static const Value *window_of(Graph *g, const Value *r, const Value *v, int *d, int64_t *step) {
  const Node *n = v->def;
  if (!g->symbolic || !n || n->nargs < 1 || n->args[0].kind != EMBER_ARG_TENSOR) return NULL;
  const Value *in = g->values[n->args[0].i];
  if (in->root != r->id || in->id >= v->id || !same(g, v->soffset, in->soffset)) return NULL;
  if (n->op == OP_ALIAS && in != r && v->ndim == in->ndim) {
    *d = -1;
    return in;
  }
  if (n->op != OP_UNFOLD || n->nargs < 4 || n->args[1].kind != EMBER_ARG_INT || n->args[3].kind != EMBER_ARG_INT ||
      v->ndim != in->ndim + 1)
    return NULL;
  *d = (int)(n->args[1].i < 0 ? n->args[1].i + in->ndim : n->args[1].i), *step = n->args[3].i;
  return *d >= 0 && *d < in->ndim && *step >= 1 ? in : NULL;
}

static void window_strides(Graph *g, Expr *const *in_st, int ndim, int d, int64_t step, Expr **st) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  for (int k = 0; k < ndim; k++) st[k] = k == d ? ex_mul(&x, in_st[k], step) : in_st[k];
  if (d >= 0) st[ndim] = in_st[d];
}

/* Is view v root r with its dims permuted (a permute or transpose of r:
   v's dim d is r's dim p[d], same size, same stride where the size may be
   more than 1, same offset)? */
static int permuted(Graph *g, const Value *r, const Value *v, int8_t *p) {
  if (v->ndim != r->ndim || !same(g, v->soffset, r->soffset)) return 0;
  int used = 0;
  for (int d = 0; d < v->ndim; d++) {
    int pick = -1;
    for (int e = 0; e < r->ndim && pick < 0; e++)
      if (!(used >> e & 1) && same(g, v->ssize[d], r->ssize[e]) &&
          (!may_gt1(v->ssize[d]) || same(g, v->sstride[d], r->sstride[e])))
        pick = e;
    if (pick < 0) return 0;
    used |= 1 << pick, p[d] = (int8_t)pick;
  }
  return 1;
}

/* Root r is about to take NHWC strides (or others: transpose_results), and
   views of it exist: can each be described over them?  Each must reshape
   r's whole storage (a GroupNorm's [N, G, C/G, H*W]), and then gets the
   strides torch's view would give it over an NHWC r, or permute r's dims
   (convnext's stem, [N, H, W, C] of an NCHW result), and takes the new
   strides permuted alike; or, in a symbolic graph, unfold it (a max pool's windows
   over a padded activation, which fuse.c then stores: read fused through
   the windows, its index would divide by the padded width, a sum of
   sizes).  new_st: r's new strides.  1 and done, 0 with nothing changed,
   -1 out of memory. */
static int restride_views(Graph *g, Value *r, Expr *const *new_st) {
  Expr *st[MAXD];
  for (int pass = 0; pass < 2; pass++)  /* check all, then change all (an unfold after its input) */
    for (int i = 0; i < g->nvalues; i++) {
      Value *v = g->values[i];
      if (v->root != r->id || v == r) continue;
      int d = -1;
      int64_t step = 1;
      const Value *in = window_of(g, r, v, &d, &step);
      if (in && !pass) {  /* torch's unfold (or alias) of its input as it is */
        window_strides(g, in->sstride, in->ndim, d, step, st);
        if (same_strides(g, v, st)) continue;
      } else if (in) {
        window_strides(g, in == r ? new_st : in->sstride, in->ndim, d, step, st);
        if (set_strides(g, v, st)) return -1;
        continue;
      }
      int8_t p[MAXD];
      int ok = !in && same(g, v->soffset, r->soffset) && same(g, v->snumel, r->snumel) && v->snumel->lo > 0 &&
               reshape_strides(g, r->ssize, r->sstride, r->ndim, v->ssize, v->ndim, st) &&
               same_strides(g, v, st) &&  /* a reshape now: its strides are what the old layout gives */
               reshape_strides(g, r->ssize, new_st, r->ndim, v->ssize, v->ndim, st);
      if (!ok && !in && permuted(g, r, v, p)) {
        for (int d = 0; d < v->ndim; d++) st[d] = new_st[p[d]];
        ok = 1;
      }
      if (!ok) {
        keep_note(g, r, "torch's layout: a view of it is neither a reshape nor a permutation of it at every size");
        return g->pool.oom ? -1 : 0;
      }
      if (pass && set_strides(g, v, st)) return -1;
    }
  return 1;
}

/* The strides that a pointwise node's operands of its result's sizes (not
   broadcast) all have, views included, in st: 1, or 0 where they differ or
   there is none. */
static int operand_strides(Graph *g, const Node *n, const Value *out, Expr **st) {
  int found = 0;
  for (int k = 0; k < n->nopnd; k++) {
    if (n->opnd[k].v < 0) continue;
    const Value *a = g->values[n->opnd[k].v];
    if (!same_sizes(g, a, out)) continue;
    if (found && !same_strides(g, a, st)) return 0;
    if (!found) memcpy(st, a->sstride, sizeof(Expr *) * (size_t)a->ndim), found = 1;
  }
  return found;
}

/* Do strides st lay v's elements densely (a permutation of row-major), and
   differ from v's own? */
static int dense_other(Graph *g, const Value *v, Expr *const *st) {
  if (same_strides(g, v, st)) return 0;
  ExprCtx x;
  graph_size_ctx(g, &x);
  int used[MAXD] = {0};
  Expr *expect = ex_const(&x, 1);
  for (;;) {  /* the dim of stride `expect` among those left: innermost first */
    int found = -1;
    for (int d = 0; d < v->ndim && found < 0; d++)
      if (!used[d] && may_gt1(v->ssize[d]) && same(g, st[d], expect)) found = d;
    if (found < 0) break;
    used[found] = 1;
    expect = ex_mul_e(&x, expect, v->ssize[found]);
  }
  for (int d = 0; d < v->ndim; d++)
    if (may_gt1(v->ssize[d]) && !used[d]) return 0;
  return !g->pool.oom;
}

/* Nothing but views relies on v's strides (pinned, for any rank). */
static int free_layout(Graph *g, const Value *v) {
  return !(v->is_input || v->is_output || v->out_use || v->into >= 0 || v->is_dst || v->root != v->id ||
           v->fb_use || !whole(g, v));
}

/* lay[v]: value v is NHWC, or is computed pointwise from NHWC values (a
   view's root keeps its strides, but a value made from it elementwise
   follows where its data came from: GroupNorm's float32 cast of a
   convolution's result, viewed as [N, G, C/G, H*W] for its statistics). */

/* A pointwise node's operands of its result's sizes (not broadcast): 1 all
   NHWC by lay[], 0 one is not, -1 none such. */
static int nhwc_operands(Graph *g, const Node *n, const Value *out, const char *lay) {
  int any = -1;
  for (int k = 0; k < n->nopnd; k++) {
    if (n->opnd[k].v < 0) continue;
    const Value *a = g->values[n->opnd[k].v];
    if (!spatial(a) || !same_sizes(g, a, out)) continue;
    if (!lay[a->id] && !is_nhwc(g, a)) return 0;  /* a view restrided with its root is NHWC by now */
    any = 1;
  }
  return any;
}

/* A pad's or a reduction's input (through its views: a pooling window's
   unfolds) is an NHWC activation of the result's batch and channels: a
   padded activation, or a pool's windows summed over the spatial dims. */
static int nhwc_source(Graph *g, const Node *n, const Value *out, const char *lay) {
  const Value *r = g->values[g->values[n->red_in]->root];
  return spatial(r) && lay[r->id] && same(g, r->ssize[0], out->ssize[0]) && same(g, r->ssize[1], out->ssize[1]);
}

/* A cat's inputs are all NHWC activations (by lay[], or restrided views of
   them): ghostnet's concatenation of a convolution's result and a cheap
   depthwise convolution of it, along the channels. */
static int nhwc_cat(Graph *g, const Node *n, const char *lay) {
  for (int k = 0; k < n->ncat; k++) {
    const Value *a = g->values[n->cat_in[k]];
    if (!spatial(a) || (!lay[a->id] && !is_nhwc(g, a))) return 0;
  }
  return n->ncat > 0;
}

/* Is every fallback that reads v's storage (v or a view of it) a
   convolution reading it as its input, with a result free to be declared
   NHWC (conv_follows)?  cuDNN takes an NHWC input as it comes and makes
   an NHWC result of it; a result that had to stay NCHW would be copied. */
static int conv_reads_only(Graph *g, const Value *v, const char *views) {
  for (int i = 0; i < g->norder; i++) {
    const Node *n = g->order[i];
    if (n->form >= 0) continue;
    for (int k = 0; k < n->nargs; k++) {
      const ember_arg *a = &n->args[k];
      if (a->kind == EMBER_ARG_TENSORS)
        for (int j = 0; j < a->n; j++)
          if (a->list[j] >= 0 && g->values[a->list[j]]->root == v->id) return 0;
      if (a->kind != EMBER_ARG_TENSOR || g->values[a->i]->root != v->id) continue;
      if (k || !follows_input(n)) return 0;
      const Value *out = g->values[n->outs[0]];
      if (out->ndim != 4 || pinned(g, out, views) || out->dtype != g->values[a->i]->dtype) return 0;
    }
  }
  return 1;
}

/* A convolution's result and its weight follow its input: NHWC if the input
   is NHWC (and they are free to change). */
static int conv_follows(Graph *g, const Node *n, const char *views) {
  if (!follows_input(n)) return EMBER_OK;
  Value *in = g->values[n->args[0].i], *out = g->values[n->outs[0]];
  if (out->ndim != 4 || !is_nhwc(g, in)) return EMBER_OK;
  int rc = EMBER_OK;
  if (out->dtype == in->dtype && !is_nhwc(g, out)) {
    if (!pinned(g, out, views)) {
      rc = set_nhwc(g, out);
    } else if (!pinned_own(g, out)) {  /* viewed (GroupNorm's [N, G, C/G, H*W]): where its views reshape it */
      Expr *st[4];
      nhwc(g, out, st);
      int ok = restride_views(g, out, st);
      rc = ok < 0 ? graph_error(g, n, "out of memory planning layouts") : ok ? set_strides(g, out, st) : EMBER_OK;
    }
  }
  /* on a GPU, a weight an ember kernel writes (autocast's cast of the parameter) is written NHWC
     too, as cuDNN reads it with an NHWC input (graph inputs: copy_weights) */
  if (g->target == EMBER_CUDA && n->nargs > 1 && n->args[1].kind == EMBER_ARG_TENSOR) {
    Value *w = g->values[n->args[1].i];
    if (!rc && !pinned(g, w, views) && w->def && w->def->form >= 0 && !is_nhwc(g, w)) rc = set_nhwc(g, w);
  }
  return rc;
}

/* A channel slice of root r (a chunk of torch's split along dim 1): r's
   sizes but the channels', r's strides, an offset of whole channels, inside
   r; its first channel in *c0.  Static sizes only. */
static int channel_chunk(const Value *r, const Value *v, int64_t *c0) {
  if (v->symbolic || r->symbolic || v->ndim != 4 || r->ndim != 4 || r->stride[1] <= 0) return 0;
  for (int d = 0; d < 4; d++)
    if ((d != 1 && v->size[d] != r->size[d]) || v->stride[d] != r->stride[d]) return 0;
  *c0 = v->offset / r->stride[1];
  return v->offset % r->stride[1] == 0 && *c0 >= 0 && *c0 + v->size[1] <= r->size[1];
}

/* MixConv (mixnet): a value split by channels for convolutions of several
   kernel sizes.  Its views are slices, not reshapes, so restride_views
   kept it NCHW: the kernel making it read NHWC operands and wrote NCHW,
   cuDNN ran the convolutions NCHW, and the cat after them read NCHW and
   wrote NHWC (mixnet_s: bench/results/gpu-h100-s16-2026-11-27/lineup).
   Where each view of r is such a chunk and torch reads them only as
   convolutions' inputs, r becomes NHWC and the chunks take its strides
   (offset c0); each chunk a convolution reads is then copied into a dense
   NHWC value before it (chunk_copy).  1: done, 0: not, -1: out of memory. */
static int restride_chunks(Graph *g, Value *r, const char *views) {
  int64_t c0;
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = g->values[i];
    if (v->root == r->id && v != r &&
        (!channel_chunk(r, v, &c0) || v->is_output || v->out_use || v->into >= 0 || v->is_dst))
      return 0;
  }
  if (!conv_reads_only(g, r, views)) return 0;
  Expr *st[4];
  nhwc(g, r, st);
  ExprCtx x;
  graph_size_ctx(g, &x);
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->root != r->id || v == r) continue;
    channel_chunk(r, v, &c0);  /* r's strides are still the old ones */
    v->offset = c0, v->soffset = ex_const(&x, c0);
    if (set_strides(g, v, st)) return -1;
  }
  return set_strides(g, r, st) ? -1 : 1;
}

/* Does a fallback read r's storage (r or a view of it)? */
static int fallback_reads(Graph *g, const Value *r) {
  for (int i = 0; i < g->norder; i++) {
    const Node *n = g->order[i];
    for (int k = 0; n->form < 0 && k < n->nargs; k++) {
      const ember_arg *a = &n->args[k];
      if (a->kind == EMBER_ARG_TENSOR && g->values[a->i]->root == r->id) return 1;
      for (int j = 0; a->kind == EMBER_ARG_TENSORS && j < a->n; j++)
        if (a->list[j] >= 0 && g->values[a->list[j]]->root == r->id) return 1;
    }
  }
  return 0;
}

/* Convolution n reads a chunk of an NHWC value (restride_chunks): its
   input becomes a dense NHWC copy of the chunk, placed at g->order[at],
   the convolution one place on; the root needs a torch tensor no more
   once nothing else of torch reads it (fb_use, as lower.c set it).
   Returns the copy's value, 0 where n reads no such chunk, or a status. */
static int chunk_copy(Graph *g, Node *n, int at) {
  Value *in = g->values[n->args[0].i], *r = g->values[in->root];
  int64_t c0;
  if (in == r || !channel_chunk(r, in, &c0) || !is_nhwc(g, r) || is_nhwc(g, in)) return 0;
  int vid = nhwc_copy(g, n, 0, at, "input");
  if (vid < 0) return vid;
  r->fb_use = r->out_use || fallback_reads(g, r);
  return vid;
}

/* On the CPU, a convolution reading a channel chunk of a value an ember
   kernel writes: that value NHWC where nothing else keeps its layout
   (restride_chunks), and the chunk copied dense (chunk_copy), as an input
   an ember kernel writes is NHWC for every convolution.  (On a GPU,
   propagate_nhwc decides such a value from its operands.)  Returns the
   copy's value, 0, or a status. */
static int cpu_chunk_input(Graph *g, Node *n, int at, const char *views) {
  Value *in = g->values[n->args[0].i], *r = g->values[in->root];
  int64_t c0;
  if (g->target != EMBER_CPU || in == r || !channel_chunk(r, in, &c0)) return 0;
  if (!is_nhwc(g, r)) {
    if (pinned_own(g, r) || !r->def || r->def->form < 0) return 0;
    int ok = restride_chunks(g, r, views);
    if (ok <= 0) return ok < 0 ? graph_error(g, n, "out of memory planning layouts") : 0;
  }
  return chunk_copy(g, n, at);
}

static int pointwise(const Node *n) {
  return (n->form >= 0 && n->form < F_FULL) || n->form == F_ROUND_DEC || n->form == F_NEXTAFTER ||
         n->form == F_POLYGAMMA;
}

/* On a GPU, NHWC onward from the convolutions: a 4-d value an ember kernel
   computes pointwise from NHWC operands of its sizes (and from no NCHW one)
   is NHWC too, in program order, so that BatchNorm, activations, casts and
   residual adds between convolutions agree on one layout, as Inductor's
   do; so are a pad of such a value, a reduction over its spatial dims
   (a pool's sum) and a cat of NHWC values.  A value stored in NCHW from NHWC operands made its
   kernel iterate in the store's order and read its operands strided: a
   float32 BatchNorm output's kernel moved 362 GB/s (efficientnet_b0, H100).
   Values torch reads (fallbacks, outputs) and matmul operands keep their
   layouts; a view's root changes only with its views, where each reshapes
   it (restride_views). */
static int propagate_nhwc(Graph *g, const char *views, int nconv) {
  /* [v]: a matmul reads it; [cap + v]: lay; room for a chunk's copy per convolution */
  size_t cap = (size_t)g->nvalues + (size_t)nconv + 1;
  char *mm = calloc(cap, 2);
  if (!mm) return graph_error(g, NULL, "out of memory planning layouts");
  char *lay = mm + cap;
  for (int i = 0; i < g->nvalues; i++) lay[i] = spatial(g->values[i]) && is_nhwc(g, g->values[i]);
  for (int i = 0; i < g->norder; i++) {
    const Node *n = g->order[i];
    if (n->form != F_MATMUL) continue;
    mm[g->values[n->mm_a]->root] = mm[g->values[n->mm_b]->root] = 1;
    if (n->mm_bias >= 0) mm[g->values[n->mm_bias]->root] = 1;
  }
  int rc = EMBER_OK;
  for (int i = 0; i < g->norder && rc == EMBER_OK; i++) {
    const Node *n = g->order[i];
    int red = n->form == F_REDUCE || n->form == F_PAD, cat = n->form == F_CAT;
    if (follows_input(n)) {  /* an input made NHWC here: the result follows */
      int vid = chunk_copy(g, (Node *)n, i);
      if (vid > 0) lay[vid] = 1, i++;
      rc = vid < 0 ? vid : conv_follows(g, n, views);
      if (!rc && spatial(g->values[n->outs[0]])) lay[n->outs[0]] |= is_nhwc(g, g->values[n->outs[0]]);
      continue;
    }
    if ((!pointwise(n) && !red && !cat) || n->nouts != 1) continue;
    Value *v = g->values[n->outs[0]];
    /* any rank: the strides its operands share (GroupNorm's normalize in [N, 1, C, H*W] over a
       view of an NHWC activation), its views restrided with it */
    Expr *st[MAXD];
    if (!red && !cat && !mm[v->id] && free_layout(g, v) && operand_strides(g, n, v, st) && dense_other(g, v, st)) {
      int ok = views[v->id] ? restride_views(g, v, st) : 1;
      if (ok < 0) rc = graph_error(g, NULL, "out of memory planning layouts");
      else if (ok) rc = set_strides(g, v, st);
      if (rc) break;
    }
    if (!spatial(v) || lay[v->id] || (is_nhwc(g, v) && (lay[v->id] = 1))) continue;
    if (!(red ? nhwc_source(g, n, v, lay) : cat ? nhwc_cat(g, n, lay) : nhwc_operands(g, n, v, lay) == 1)) continue;
    lay[v->id] = 1;
    if (mm[v->id] || (v->fb_use && !conv_reads_only(g, v, views))) continue;
    if (!pinned(g, v, views)) {
      rc = set_nhwc(g, v);
    } else if (!pinned_own(g, v)) {  /* a view's root: where its views reshape it, or chunk it */
      nhwc(g, v, st);
      int ok = restride_views(g, v, st);
      if (ok > 0) rc = set_nhwc(g, v);
      else if (!ok) ok = restride_chunks(g, v, views);
      if (ok < 0) rc = graph_error(g, NULL, "out of memory planning layouts");
    }
  }
  free(mm);
  return rc;
}

/* A matmul's result stored transposed.  gMLP's spatial gate is a Linear
   over the tokens, between two transposes: bmm([B, C, T] viewed from the
   [B, T, C] rows, W^T) gives [B, C, T], its bias is added, and the
   product with the other half, [B, T, C], reads the sum transposed (a
   kernel that tiles it through shared memory, slower than Inductor's).
   Stored with a unit stride along its rows ([B, C, T] with strides
   (T*C, 1, C)), the result is computed as C^T = W v[b] (lower.c,
   matmul_fields: the same call with the operands swapped), the bias add
   follows its layout, and the product reads everything in order.

   Per matmul, a trial: its result takes the transposed strides (its views
   restrided with it, permutes included), pointwise values computed from it
   follow where their operands agree (as propagate_nhwc's rule), and the
   elements read across a kernel's stream (cross_reads) are counted before
   and after; kept only where that count falls, every reader of the values
   changed is a pointwise kernel or a matmul (which reads either layout),
   and every matmul involved still makes a library call.  Static sizes. */

/* Values a trial changes at most (the result and those that follow it). */
#define TRANSPOSE_REGION_MAX 64

/* The dim a kernel writing v streams along (the code generators order a
   pointwise kernel's loops by its result's strides): its unit stride, or
   -1 where it has none. */
static int stream_dim(const Value *v) {
  for (int d = v->ndim - 1; d >= 0; d--)
    if (v->size[d] > 1 && v->stride[d] == 1) return d;
  return -1;
}

/* Elements read across the stream by the pointwise nodes that read or
   write a value of the region (in[root]), from place `from` of the run
   order on (the matmul's: nothing before it reads or writes the region):
   an operand of the result's sizes whose stride along the result's stream
   dim is not 1 (a transposed read, which the code generators tile through
   shared memory). */
static int64_t cross_reads(Graph *g, const char *in, int from) {
  int64_t cost = 0;
  for (int i = from; i < g->norder; i++) {
    const Node *n = g->order[i];
    if (!pointwise(n) || n->nouts != 1) continue;
    const Value *out = g->values[n->outs[0]];
    int touched = in[out->root];
    for (int k = 0; k < n->nopnd && !touched; k++) touched = n->opnd[k].v >= 0 && in[g->values[n->opnd[k].v]->root];
    int d = stream_dim(out);
    for (int k = 0; touched && d >= 0 && k < n->nopnd; k++) {
      const Value *a = n->opnd[k].v >= 0 ? g->values[n->opnd[k].v] : NULL;
      if (a && same_sizes(g, a, out) && a->stride[d] != 1) cost += out->numel;
    }
  }
  return cost;
}

/* Does matmul n read or write a value of the region? */
static int matmul_in_region(Graph *g, const Node *n, const char *in) {
  return in[g->values[n->mm_a]->root] || in[g->values[n->mm_b]->root] || in[g->values[n->outs[0]]->root];
}

/* Is every reader of the region's values (and of their views) a pointwise
   node or a matmul that still makes a library call with the new strides?
   Its readers run from place `from` on, as in cross_reads. */
static int known_readers(Graph *g, const char *in, const int *reg, int nreg, int from) {
  int64_t reads = 0, known = 0;
  for (int i = 0; i < nreg; i++) reads += g->values[reg[i]]->nuses - g->values[reg[i]]->vuses;
  for (int i = from; i < g->norder; i++) {
    Node *n = g->order[i];
    if (n->form == F_MATMUL) {
      if (matmul_in_region(g, n, in) && matmul_relayout(g, n, 1)) return 0;
      int a = in[g->values[n->mm_a]->root], b = in[g->values[n->mm_b]->root];
      known += a + b;
    } else if (pointwise(n)) {
      for (int k = 0; k < n->nopnd; k++) known += n->opnd[k].v >= 0 && in[g->values[n->opnd[k].v]->root];
    }
  }
  return reads == known;
}

/* The strides a trial changed, to undo it: each value's as they were. */
typedef struct Saved {
  int id;
  Expr *s[MAXD];
  int64_t i[MAXD];
} Saved;
typedef struct Undo {
  Saved *v;
  int n, cap;
} Undo;

static int save_one(Undo *u, const Value *x) {
  if (u->n == u->cap) {
    int cap = u->cap ? 2 * u->cap : 16;
    Saved *s = realloc(u->v, sizeof(Saved) * (size_t)cap);
    if (!s) return -1;
    u->v = s, u->cap = cap;
  }
  Saved *s = &u->v[u->n++];
  s->id = x->id;
  memcpy(s->s, x->sstride, sizeof s->s), memcpy(s->i, x->stride, sizeof s->i);
  return 0;
}

/* Root r's strides and its views' (all that restride_views may change)
   into u: 0, or -1 out of memory. */
static int save_family(Graph *g, Undo *u, const Value *r, const char *views) {
  if (save_one(u, r)) return -1;
  for (int i = 0; views[r->id] && i < g->nvalues; i++)
    if (i != r->id && g->values[i]->root == r->id && save_one(u, g->values[i])) return -1;
  return 0;
}

static void undo(Graph *g, Undo *u) {
  while (u->n > 0) {
    const Saved *s = &u->v[--u->n];
    Value *x = g->values[s->id];
    memcpy(x->sstride, s->s, sizeof s->s), memcpy(x->stride, s->i, sizeof s->i);
  }
}

/* The trial's change: matmul mm's result transposed in its last two dims,
   then the values that follow it, in reg (in[] set), the old strides in u.
   The region's size, 0 where the result cannot take the strides, or -1 out
   of memory. */
static int transpose_region(Graph *g, const Node *mm, int at, const char *views, char *in, int *reg, Undo *u) {
  Value *c = g->values[mm->outs[0]];
  ExprCtx x;
  graph_size_ctx(g, &x);
  Expr *st[MAXD];
  int nd = c->ndim;
  memcpy(st, c->sstride, sizeof(Expr *) * (size_t)nd);
  st[nd - 2] = ex_const(&x, 1), st[nd - 1] = ex_const(&x, c->size[nd - 2]);
  if (save_family(g, u, c, views)) return -1;
  int ok = views[c->id] ? restride_views(g, c, st) : 1;
  if (ok <= 0) return ok;
  if (set_strides(g, c, st)) return -1;
  int nreg = 0;
  reg[nreg++] = c->id, in[c->id] = 1;
  for (int i = at + 1; i < g->norder && nreg < TRANSPOSE_REGION_MAX; i++) {
    const Node *n = g->order[i];
    if (!pointwise(n) || n->nouts != 1) continue;
    Value *out = g->values[n->outs[0]];
    int reads = 0;
    for (int k = 0; k < n->nopnd && !reads; k++)
      reads = n->opnd[k].v >= 0 && in[g->values[n->opnd[k].v]->root] && same_sizes(g, g->values[n->opnd[k].v], out);
    if (!reads || in[out->id] || !free_layout(g, out) || !operand_strides(g, n, out, st) || !dense_other(g, out, st))
      continue;
    if (save_family(g, u, out, views)) return -1;
    ok = views[out->id] ? restride_views(g, out, st) : 1;
    if (ok < 0 || (ok && set_strides(g, out, st))) return -1;
    if (ok) reg[nreg++] = out->id, in[out->id] = 1;
  }
  return nreg;
}

static int transpose_results(Graph *g, const char *views) {
  if (g->symbolic) return EMBER_OK;
  char *in = calloc((size_t)g->nvalues, 1);
  int *reg = malloc(sizeof(int) * TRANSPOSE_REGION_MAX);
  Undo u = {NULL, 0, 0};
  int rc = in && reg ? EMBER_OK : graph_error(g, NULL, "out of memory planning layouts");
  for (int i = 0; i < g->norder && rc == EMBER_OK; i++) {
    Node *mm = g->order[i];
    if (mm->form != F_MATMUL || matmul_relayout(g, mm, 1)) continue;  /* a plain call, as lower.c made it */
    Value *c = g->values[mm->outs[0]];
    int nd = c->ndim;
    if (nd < 2 || c->size[nd - 2] < 2 || c->size[nd - 1] < 2 || c->stride[nd - 1] != 1 || !free_layout(g, c))
      continue;
    int nreg = transpose_region(g, mm, i, views, in, reg, &u);
    int keep = nreg > 0 && known_readers(g, in, reg, nreg, i);
    int64_t after = keep ? cross_reads(g, in, i) : 0;
    undo(g, &u);
    keep = keep && after < cross_reads(g, in, i);
    for (int k = 0; k < nreg; k++) in[reg[k]] = 0;
    if (nreg < 0) rc = graph_error(g, mm, "out of memory planning layouts");
    if (!keep) continue;
    nreg = transpose_region(g, mm, i, views, in, reg, &u);  /* again, to keep */
    u.n = 0;
    for (int j = i; j < g->norder && nreg > 0; j++) {
      Node *n = g->order[j];
      if (n->form == F_MATMUL && matmul_in_region(g, n, in)) EM_ASSERT(!matmul_relayout(g, n, 0));
    }
    for (int k = 0; k < nreg; k++) in[reg[k]] = 0;
    if (nreg < 0) rc = graph_error(g, mm, "out of memory planning layouts");
  }
  free(in), free(reg), free(u.v);
  return rc;
}

int plan_layouts(Graph *g) {
  /* the run order starts here, the nodes in creation order (or as a pass
     before ordered them), with room for two copies per convolution (its
     input and its weight); split.c inserts its partial reductions later */
  Node **from = g->order ? g->order : g->nodes;
  int n0 = g->order ? g->norder : g->nnodes, nconv = 0;
  for (int i = 0; i < n0; i++) nconv += is_conv(from[i]);
  Node **order = pool_alloc(&g->pool, sizeof(Node *) * (size_t)(n0 + 2 * nconv + 1));
  if (!order) return graph_error(g, NULL, "out of memory planning layouts");
  memcpy(order, from, sizeof(Node *) * (size_t)n0);
  g->order = order, g->norder = n0;
  /* 1: some view has this value as its root; room for an input copy per convolution */
  char *views = calloc((size_t)g->nvalues + (size_t)nconv + 1, 1);
  if (!views) return graph_error(g, NULL, "out of memory planning layouts");
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->root != i) views[g->values[i]->root] = 1;
  for (int i = 0; i < g->norder; i++) {
    Node *n = g->order[i];
    if (!is_conv(n) || n->nargs < 1 || n->args[0].kind != EMBER_ARG_TENSOR || n->nouts != 1) continue;
    Value *in = g->values[n->args[0].i], *out = g->values[n->outs[0]];
    if (out->ndim != 4 || !nhwc_pays(g, n, out)) continue;
    if (copy_pays(g, in) && !pinned(g, out, views) && out->dtype == in->dtype) {
      int vid = nhwc_copy(g, n, 0, i++, "input");  /* the copy takes place i; the convolution moves to i + 1 */
      if (vid < 0) {
        free(views);
        return vid;
      }
      in = g->values[vid];
    }
    int vid = cpu_chunk_input(g, n, i, views);
    if (vid < 0) {
      free(views);
      return vid;
    }
    if (vid > 0) in = g->values[vid], i++;  /* the copy took place i */
    /* the input: a value an ember kernel writes (not a fallback's result) */
    int rc = EMBER_OK;
    if (!pinned(g, in, views) && in->def && in->def->form >= 0 && !is_nhwc(g, in)) rc = set_nhwc(g, in);
    if (!rc) rc = conv_follows(g, n, views);
    if (rc) {
      free(views);
      return rc;
    }
  }
  int rc = g->target == EMBER_CUDA ? propagate_nhwc(g, views, nconv) : EMBER_OK;
  if (!rc) rc = transpose_results(g, views);
  free(views);
  return rc ? rc : copy_weights(g);
}
