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
 * On by default on the CPU and CUDA; EMBER_CHANNELS_LAST=0 turns it off.
 * On the H100, resnet50 inference fp32 batch 32 went from 4.73 to 4.05 ms
 * (cuDNN's NHWC convolutions; tests/gpu/issue_bench.sh unmeasured-perf).
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

static int is_nhwc(const Value *v) {
  int64_t st[4];
  nhwc(v, st);
  for (int d = 0; d < 4; d++)
    if (v->size[d] > 1 && v->stride[d] != st[d]) return 0;
  return 1;
}

/* Does anything rely on v's strides as torch's meta gave them? */
static int pinned(const Value *v, const char *views) {
  return v->ndim != 4 || v->is_input || v->is_output || v->out_use || v->into >= 0 || v->is_dst ||
         v->root != v->id || views[v->id] || value_span(v) != v->numel || v->offset != 0;
}

/* On the CPU, torch's convolution (oneDNN) with an NHWC input and the
   parameter's NCHW weight reorders the weight at every call; where the
   weight has over 1000 elements per output position (N * Ho * Wo), that
   costs more than NHWC saves.  2 cores, one 3x3 convolution of 512 channels
   at 7x7, batch 8: 4.74 ms NCHW, 6.18 ms NHWC; 256 channels at 14x14: 4.70
   against 3.93 ms; resnet50 at 96x96, batch 4: 25.9 ms with every
   convolution NCHW, 46.5 ms with every one NHWC. */
static int nhwc_pays(const Graph *g, const Node *n, const Value *out) {
  if (g->target != EMBER_CPU || n->nargs < 2 || n->args[1].kind != EMBER_ARG_TENSOR) return 1;
  const Value *w = g->values[n->args[1].i];
  return out->size[0] * out->size[2] * out->size[3] * 1000 >= w->numel;
}

int plan_layouts(Graph *g) {
  const char *e = getenv("EMBER_CHANNELS_LAST");
  int on = !(e && !strcmp(e, "0"));
  if (!on) return EMBER_OK;
  char *views = calloc((size_t)g->nvalues + 1, 1);  /* 1: some view has this value as its root */
  if (!views) return graph_error(g, NULL, "out of memory planning layouts");
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->root != i) views[g->values[i]->root] = 1;
  for (int i = 0; i < g->norder; i++) {
    Node *n = g->order[i];
    if (!is_conv(n) || n->nargs < 1 || n->args[0].kind != EMBER_ARG_TENSOR || n->nouts != 1) continue;
    Value *in = g->values[n->args[0].i], *out = g->values[n->outs[0]];
    if (out->ndim != 4 || !nhwc_pays(g, n, out)) continue;
    /* the input: a value an ember kernel writes (not a fallback's result) */
    if (!pinned(in, views) && in->def && in->def->form >= 0 && !is_nhwc(in)) nhwc(in, in->stride);
    if (is_nhwc(in) && !pinned(out, views) && out->dtype == in->dtype) nhwc(out, out->stride);
  }
  free(views);
  return EMBER_OK;
}
