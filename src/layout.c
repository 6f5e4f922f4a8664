/*
 * layout.c - channels-last activations for convolutions torch runs.
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

/* NHWC strides for a 4-d value of v's sizes. */
static void nhwc(const Value *v, int64_t *st) {
  int64_t c = v->size[1], h = v->size[2], w = v->size[3];
  st[1] = 1;
  st[3] = c > 0 ? c : 1;
  st[2] = st[3] * (w > 0 ? w : 1);
  st[0] = st[2] * (h > 0 ? h : 1);
}

/* v given NHWC strides, its expressions too. */
static int set_nhwc(Graph *g, Value *v) {
  nhwc(v, v->stride);
  return value_const_exprs(g, v);
}

static int is_nhwc(const Value *v) {
  int64_t st[4];
  nhwc(v, st);
  for (int d = 0; d < 4; d++)
    if (v->size[d] > 1 && v->stride[d] != st[d]) return 0;
  return 1;
}

/* Does anything rely on v's strides as torch's meta gave them? */
static int pinned_own(const Value *v) {  /* ... other than as a view's root */
  return v->ndim != 4 || v->is_input || v->is_output || v->out_use || v->into >= 0 || v->is_dst ||
         v->root != v->id || value_span(v) != v->numel || v->offset != 0;
}

static int pinned(const Value *v, const char *views) { return pinned_own(v) || views[v->id]; }

/* On the CPU, torch's convolution (oneDNN) with an NHWC input and the
   parameter's NCHW weight reorders the weight at every call; where the
   weight has over 1000 elements per output position (N * Ho * Wo), that
   costs more than NHWC saves (a 3x3 convolution of 512 channels at 7x7 is
   slower NHWC, one of 256 channels at 14x14 faster; resnet50 at a small
   image size took almost twice as long with every convolution NHWC). */
static int nhwc_pays(const Graph *g, const Node *n, const Value *out) {
  if (g->target != EMBER_CPU || n->nargs < 2 || n->args[1].kind != EMBER_ARG_TENSOR) return 1;
  const Value *w = g->values[n->args[1].i];
  return out->size[0] * out->size[2] * out->size[3] * 1000 >= w->numel;
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
  int64_t st[4];
  nhwc(in, st);
  int vid = ember_graph_value((ember_graph *)g, in->dtype, in->device, 4, in->size, st, 0);
  if (vid < 0) return vid;
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
   than one channel that is not NHWC already. */
static int copy_pays(const Graph *g, const Value *in) {
  return g->target == EMBER_CUDA && in->is_input && in->ndim == 4 && in->root == in->id && !is_nhwc(in) &&
         (in->dtype == EMBER_F32 || in->dtype == EMBER_F16 || in->dtype == EMBER_BF16) && in->size[1] > 1;
}

/* A convolution on a GPU whose input is NHWC, with a weight that is a
   graph input (a parameter: NCHW by torch's meta) of more than 1x1: torch
   copies the weight to channels-last at every call, a kernel of its own per
   convolution (59 in densenet121 inference, 17 in resnet50's).  Inductor copies them in kernels
   of its own too.  Here ember does, and copies of one shape placed together
   fuse into one kernel (the 58 [32, 128, 3, 3] weights of densenet121). */
static int weight_copy_pays(const Graph *g, const Node *conv) {
  if (g->target != EMBER_CUDA || !is_conv(conv) || conv->nargs < 2 || conv->args[0].kind != EMBER_ARG_TENSOR ||
      conv->args[1].kind != EMBER_ARG_TENSOR)
    return 0;
  const Value *in = g->values[conv->args[0].i], *w = g->values[conv->args[1].i];
  return in->ndim == 4 && is_nhwc(in) && w->is_input && !w->is_dst && w->ndim == 4 && w->root == w->id &&
         !is_nhwc(w) && w->dtype == in->dtype &&
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
   more than one spatial element (else NCHW and NHWC strides agree)? */
static int spatial(const Value *v) {
  return v->ndim == 4 && v->size[1] > 1 && v->size[2] * v->size[3] > 1;
}

/* The strides of a view of sizes `to` (nt dims) that reshapes a tensor of
   sizes `from` and strides `st` (nf dims) without copying, as torch's view
   finds them: 1, or 0 where no strides can (the reshape merges dims that are
   not contiguous with each other). */
static int reshape_strides(const int64_t *from, const int64_t *st, int nf, const int64_t *to, int nt, int64_t *out) {
  int vd = nt - 1;
  int64_t base = st[nf - 1], tn = 1, vn = 1;
  for (int td = nf - 1; td >= 0; td--) {
    tn *= from[td];
    if (td == 0 || (from[td - 1] != 1 && st[td - 1] != tn * base)) {  /* a contiguous chunk ends */
      while (vd >= 0 && (vn < tn || to[vd] == 1)) {
        out[vd] = vn * base;
        vn *= to[vd--];
      }
      if (vn != tn) return 0;
      if (td > 0) base = st[td - 1], tn = 1, vn = 1;
    }
  }
  return vd == -1;
}

/* Root r is about to take NHWC strides, and views of it exist: can each be
   described over them?  Each must reshape r's whole storage (a GroupNorm's
   [N, G, C/G, H*W]), and then gets the strides torch's view would give it
   over an NHWC r.  new_st: r's NHWC strides.  1 and done, 0 with nothing
   changed, -1 out of memory. */
static int restride_views(Graph *g, const Value *r, const int64_t *new_st) {
  int64_t st[MAXD];
  for (int pass = 0; pass < 2; pass++)  /* check all, then change all */
    for (int i = 0; i < g->nvalues; i++) {
      Value *v = g->values[i];
      if (v->root != r->id || v == r) continue;
      if (v->offset != r->offset || v->numel != r->numel || v->numel <= 0 || v->symbolic) return 0;
      if (!reshape_strides(r->size, r->stride, r->ndim, v->size, v->ndim, st)) return 0;
      for (int d = 0; d < v->ndim; d++)  /* a reshape now: its strides are what the old layout gives */
        if (v->size[d] > 1 && st[d] != v->stride[d]) return 0;
      if (!reshape_strides(r->size, new_st, r->ndim, v->size, v->ndim, st)) return 0;
      if (pass) {
        memcpy(v->stride, st, sizeof(int64_t) * (size_t)v->ndim);
        if (value_const_exprs(g, v)) return -1;
      }
    }
  return 1;
}

/* The strides that a pointwise node's operands of its result's sizes (not
   broadcast) all have, views included, in st: 1, or 0 where they differ or
   there is none. */
static int operand_strides(const Graph *g, const Node *n, const Value *out, int64_t *st) {
  int found = 0;
  for (int k = 0; k < n->nopnd; k++) {
    if (n->opnd[k].v < 0) continue;
    const Value *a = g->values[n->opnd[k].v];
    if (a->ndim != out->ndim || a->symbolic || memcmp(a->size, out->size, sizeof(int64_t) * (size_t)a->ndim))
      continue;
    for (int d = 0; d < a->ndim; d++)
      if (found && a->size[d] > 1 && a->stride[d] != st[d]) return 0;
    if (!found) memcpy(st, a->stride, sizeof(int64_t) * (size_t)a->ndim), found = 1;
  }
  return found;
}

/* Do strides st lay v's elements densely (a permutation of row-major), and
   differ from v's own? */
static int dense_other(const Value *v, const int64_t *st) {
  int other = 0, used[MAXD] = {0};
  for (int d = 0; d < v->ndim; d++) other |= v->size[d] > 1 && st[d] != v->stride[d];
  if (!other) return 0;
  int64_t expect = 1;
  for (;;) {  /* the dim of stride `expect` among those left: innermost first */
    int found = -1;
    for (int d = 0; d < v->ndim && found < 0; d++)
      if (!used[d] && v->size[d] > 1 && st[d] == expect) found = d;
    if (found < 0) break;
    used[found] = 1;
    expect *= v->size[found];
  }
  for (int d = 0; d < v->ndim; d++)
    if (v->size[d] > 1 && !used[d]) return 0;
  return 1;
}

/* Nothing but views relies on v's strides (pinned, for any rank). */
static int free_layout(const Value *v) {
  return !(v->is_input || v->is_output || v->out_use || v->into >= 0 || v->is_dst || v->root != v->id ||
           v->symbolic || value_span(v) != v->numel || v->offset != 0 || v->fb_use);
}

/* lay[v]: value v is NHWC, or is computed pointwise from NHWC values (a
   view's root keeps its strides, but a value made from it elementwise
   follows where its data came from: GroupNorm's float32 cast of a
   convolution's result, viewed as [N, G, C/G, H*W] for its statistics). */

/* A pointwise node's operands of its result's sizes (not broadcast): 1 all
   NHWC by lay[], 0 one is not, -1 none such. */
static int nhwc_operands(const Graph *g, const Node *n, const Value *out, const char *lay) {
  int any = -1;
  for (int k = 0; k < n->nopnd; k++) {
    if (n->opnd[k].v < 0) continue;
    const Value *a = g->values[n->opnd[k].v];
    if (!spatial(a) || memcmp(a->size, out->size, sizeof(int64_t) * 4)) continue;
    if (!lay[a->id] && !is_nhwc(a)) return 0;  /* a view restrided with its root is NHWC by now */
    any = 1;
  }
  return any;
}

/* A pad's or a reduction's input (through its views: a pooling window's
   unfolds) is an NHWC activation of the result's batch and channels: a
   padded activation, or a pool's windows summed over the spatial dims. */
static int nhwc_source(const Graph *g, const Node *n, const Value *out, const char *lay) {
  const Value *r = g->values[g->values[n->red_in]->root];
  return spatial(r) && lay[r->id] && r->size[0] == out->size[0] && r->size[1] == out->size[1];
}

/* A cat's inputs are all NHWC activations (by lay[], or restrided views of
   them): ghostnet's concatenation of a convolution's result and a cheap
   depthwise convolution of it, along the channels. */
static int nhwc_cat(const Graph *g, const Node *n, const char *lay) {
  for (int k = 0; k < n->ncat; k++) {
    const Value *a = g->values[n->cat_in[k]];
    if (!spatial(a) || (!lay[a->id] && !is_nhwc(a))) return 0;
  }
  return n->ncat > 0;
}

/* Is every fallback that reads v's storage (v or a view of it) a
   convolution reading it as its input, with a result free to be declared
   NHWC (conv_follows)?  cuDNN takes an NHWC input as it comes and makes
   an NHWC result of it; a result that had to stay NCHW would be copied. */
static int conv_reads_only(const Graph *g, const Value *v, const char *views) {
  for (int i = 0; i < g->norder; i++) {
    const Node *n = g->order[i];
    if (n->form >= 0) continue;
    for (int k = 0; k < n->nargs; k++) {
      const ember_arg *a = &n->args[k];
      if (a->kind == EMBER_ARG_TENSORS)
        for (int j = 0; j < a->n; j++)
          if (a->list[j] >= 0 && g->values[a->list[j]]->root == v->id) return 0;
      if (a->kind != EMBER_ARG_TENSOR || g->values[a->i]->root != v->id) continue;
      if (k || !is_conv(n) || n->nouts != 1) return 0;
      const Value *out = g->values[n->outs[0]];
      if (out->ndim != 4 || pinned(out, views) || out->dtype != g->values[a->i]->dtype) return 0;
    }
  }
  return 1;
}

/* A convolution's result and its weight follow its input: NHWC if the input
   is NHWC (and they are free to change). */
static int conv_follows(Graph *g, const Node *n, const char *views) {
  if (!is_conv(n) || n->nargs < 1 || n->args[0].kind != EMBER_ARG_TENSOR || n->nouts != 1) return EMBER_OK;
  Value *in = g->values[n->args[0].i], *out = g->values[n->outs[0]];
  if (out->ndim != 4 || !is_nhwc(in)) return EMBER_OK;
  int rc = EMBER_OK;
  if (!pinned(out, views) && out->dtype == in->dtype && !is_nhwc(out)) rc = set_nhwc(g, out);
  /* on a GPU, a weight an ember kernel writes (autocast's cast of the parameter) is written NHWC
     too, as cuDNN reads it with an NHWC input (graph inputs: copy_weights) */
  if (g->target == EMBER_CUDA && n->nargs > 1 && n->args[1].kind == EMBER_ARG_TENSOR) {
    Value *w = g->values[n->args[1].i];
    if (!rc && !pinned(w, views) && w->def && w->def->form >= 0 && !is_nhwc(w)) rc = set_nhwc(g, w);
  }
  return rc;
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
static int propagate_nhwc(Graph *g, const char *views) {
  char *mm = calloc((size_t)g->nvalues + 1, 2);  /* [v]: a matmul reads it; [nvalues + 1 + v]: lay */
  if (!mm) return graph_error(g, NULL, "out of memory planning layouts");
  char *lay = mm + g->nvalues + 1;
  for (int i = 0; i < g->nvalues; i++) lay[i] = spatial(g->values[i]) && is_nhwc(g->values[i]);
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
    if (is_conv(n)) {  /* an input made NHWC here: the result follows */
      rc = conv_follows(g, n, views);
      if (!rc && n->nouts == 1 && spatial(g->values[n->outs[0]])) lay[n->outs[0]] |= is_nhwc(g->values[n->outs[0]]);
      continue;
    }
    if ((!pointwise(n) && !red && !cat) || n->nouts != 1) continue;
    Value *v = g->values[n->outs[0]];
    /* any rank: the strides its operands share (GroupNorm's normalize in [N, 1, C, H*W] over a
       view of an NHWC activation), its views restrided with it */
    int64_t st[MAXD];
    if (!red && !cat && !mm[v->id] && free_layout(v) && operand_strides(g, n, v, st) && dense_other(v, st)) {
      int ok = views[v->id] ? restride_views(g, v, st) : 1;
      if (ok < 0) rc = graph_error(g, NULL, "out of memory planning layouts");
      else if (ok) {
        memcpy(v->stride, st, sizeof(int64_t) * (size_t)v->ndim);
        rc = value_const_exprs(g, v);
      }
      if (rc) break;
    }
    if (!spatial(v) || lay[v->id] || (is_nhwc(v) && (lay[v->id] = 1))) continue;
    if (!(red ? nhwc_source(g, n, v, lay) : cat ? nhwc_cat(g, n, lay) : nhwc_operands(g, n, v, lay) == 1)) continue;
    lay[v->id] = 1;
    if (mm[v->id] || (v->fb_use && !conv_reads_only(g, v, views))) continue;
    if (!pinned(v, views)) {
      rc = set_nhwc(g, v);
    } else if (!pinned_own(v)) {  /* a view's root: where its views reshape it */
      int64_t st[4];
      nhwc(v, st);
      int ok = restride_views(g, v, st);
      rc = ok < 0 ? graph_error(g, NULL, "out of memory planning layouts") : ok ? set_nhwc(g, v) : EMBER_OK;
    }
  }
  free(mm);
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
  if (g->symbolic) return EMBER_OK;  /* its NHWC strides would be expressions: torch's layouts kept */
  char *views = calloc((size_t)g->nvalues + 1, 1);  /* 1: some view has this value as its root */
  if (!views) return graph_error(g, NULL, "out of memory planning layouts");
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->root != i) views[g->values[i]->root] = 1;
  for (int i = 0; i < g->norder; i++) {
    Node *n = g->order[i];
    if (!is_conv(n) || n->nargs < 1 || n->args[0].kind != EMBER_ARG_TENSOR || n->nouts != 1) continue;
    Value *in = g->values[n->args[0].i], *out = g->values[n->outs[0]];
    if (out->ndim != 4 || !nhwc_pays(g, n, out)) continue;
    if (copy_pays(g, in) && !pinned(out, views) && out->dtype == in->dtype) {
      int vid = nhwc_copy(g, n, 0, i++, "input");  /* the copy takes place i; the convolution moves to i + 1 */
      if (vid < 0) {
        free(views);
        return vid;
      }
      char *more = realloc(views, (size_t)g->nvalues + 1);
      if (!more) {
        free(views);
        return graph_error(g, NULL, "out of memory planning layouts");
      }
      views = more;
      views[vid] = 0;
      in = g->values[vid];
    }
    /* the input: a value an ember kernel writes (not a fallback's result) */
    int rc = EMBER_OK;
    if (!pinned(in, views) && in->def && in->def->form >= 0 && !is_nhwc(in)) rc = set_nhwc(g, in);
    if (!rc) rc = conv_follows(g, n, views);
    if (rc) {
      free(views);
      return rc;
    }
  }
  int rc = g->target == EMBER_CUDA ? propagate_nhwc(g, views) : EMBER_OK;
  free(views);
  return rc ? rc : copy_weights(g);
}
