/*
 * split.c - two-stage reductions: a reduction with few results and many
 * elements per result, which one block per row (or 32 columns per block) on
 * the GPU would leave most SMs idle for, becomes two reductions.  The first
 * reads the input through a view with one reduced dim d split in two,
 * (S, D/S), and reduces everything but S: S partial results per result, in
 * float32 for 16-bit floats, so the partials are not rounded to the storage
 * type.  The second reduces the partials over S into the original result
 * value, which keeps its id, consumers and kernel (its pointwise consumers
 * still join it).  A loss `x.sum()` over a million elements was one block;
 * the bias gradient of a [2048, 768] linear (a sum over dim 0) was 24.
 *
 * Exact for max, min, any, all; a sum or product is reassociated (S chunks
 * of consecutive elements along d, each summed in order, then the chunks),
 * as torch's own CUDA reductions are; a mean is the mean of S means of
 * equal counts.  argmax / argmin are not split.
 *
 * It runs after layout.c, so it sees the strides the values are stored
 * with (channels-last activations), and decides as the CUDA target will
 * schedule the reduction (codegen_cuda.c): a block per row where the reduced
 * dims are innermost in memory, a thread column per result where the
 * innermost kept dim is (the mean over H and W of an NHWC activation in a
 * squeeze-and-excitation gate).  d is the reduced dim outermost in memory,
 * so that each partial reads a contiguous slab; in a column reduction S is
 * placed before the contiguous kept dim, so that the first stage is a column
 * reduction too.  The view's strides are the input's, d's split in two.
 *
 * The new view value and partial reduction are inserted before the
 * reduction in g->order (made by layout.c), the nodes' order from here on
 * (fuse.c, the dumps), so the copies layout.c placed there keep their
 * places; g->nodes keeps creation order, since a node's id is its place
 * there and the Python side names fallback nodes by id.
 *
 * Which reductions: on CUDA, those whose kernel would have fewer than
 * SPLIT_BLOCKS blocks (rows: one block per result; columns: 16 results per
 * block where there are few) and would take longer than the two kernels by
 * a rough model: a block loads its first ROW_FLIGHT or COL_FLIGHT bytes at
 * once (one round trip, which the two kernels pay too: a small bias
 * gradient's columns stay whole) and streams the rest at about BLOCK_GBS
 * GB/s, latency-bound; the GPU streams about GPU_GBS, and the second kernel
 * costs one launch (LAUNCH_US).  The constants are estimates for an H100,
 * BLOCK_GBS fitted to long rows and columns of few blocks measured there (a
 * GroupNorm's statistics in 32 blocks, a squeeze-and-excitation mean in 64),
 * to be replaced by measured ones; the model only has to tell a loss
 * `x.sum()` (1 block) from a reduction that fills the GPU.  Not symbolic
 * graphs (their sizes are expressions).  The test option
 * split_reductions=all splits every reduction that can be, on any target,
 * with the smallest split (the rewrite checked against torch on the CPU);
 * =off splits none.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

#define SPLIT_BLOCKS 128    /* fewer blocks than this (the H100 has 132 SMs): maybe split */
#define SPLIT_TARGET 256    /* ... into enough partials for about this many blocks */
#define BLOCK_GBS 10.0      /* GB/s one block streams past the bytes it loads at once (estimate) */
#define ROW_FLIGHT 32768    /* bytes a row block loads at once: 1024 threads x 8 in registers x 4 B */
#define COL_FLIGHT 65536    /* ... a column block: 16384 elements in registers x 4 B (codegen_cuda.c) */
#define GPU_GBS 2500.0      /* GB/s the whole GPU streams (estimate; the H100's copy: ~3000) */
#define LAUNCH_US 2.5       /* the second kernel (estimate) */
#define MIN_CHUNK_ROWS 1024 /* elements per partial at least: rows */
#define MIN_CHUNK_COLS 64   /* ... columns */
#define READ_DEPTH 4        /* pointwise ops followed back from a row-major input (read_strides) */

static int splittable(int red) {
  return red == R_SUM || red == R_MEAN || red == R_PROD || red == R_MAX || red == R_MIN || red == R_ANY ||
         red == R_ALL;
}

static int pointwise(const Node *n) {
  return (n->form >= 0 && n->form < F_FULL) || n->form == F_ROUND_DEC || n->form == F_NEXTAFTER ||
         n->form == F_POLYGAMMA;
}

/* Are v's strides those of a contiguous value of its sizes? */
static int row_major(const Value *v) {
  int64_t st = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->size[d] > 1 && v->stride[d] != st) return 0;
    st *= v->size[d];
  }
  return 1;
}

/* The strides by which the reduction's reads of input `in` walk memory:
   in's own, or where in is row-major and computed pointwise (recomputed
   where it is read), those of a dense operand of its sizes that layout.c
   laid out otherwise, up to READ_DEPTH ops back: a GroupNorm's squared
   deviations, [N, G, C/G, H*W] from a view of its NHWC input. */
static const int64_t *read_strides(const Graph *g, const Value *in) {
  const Value *v = in;
  for (int depth = 0; depth < READ_DEPTH && row_major(v); depth++) {
    if (v->root != v->id || !v->def || !pointwise(v->def)) break;
    const Value *next = NULL;
    for (int k = 0; k < v->def->nopnd && !next; k++) {
      int a = v->def->opnd[k].v;
      if (a >= 0 && g->values[a]->ndim == in->ndim && value_is_dense(g->values[a]) &&
          !memcmp(g->values[a]->size, in->size, sizeof(int64_t) * (size_t)in->ndim))
        next = g->values[a];  /* a dense operand (not a broadcast) of in's sizes */
    }
    if (!next) break;
    v = next;
  }
  return row_major(v) ? in->stride : v->stride;
}

static int64_t mag(int64_t s) { return s < 0 ? -s : s; }

/* The split for reduction n: the dim d of its input, the number of
   partials S (> 1) and the dim before which the view puts S (at), or 0 for
   none. */
static int choose(Graph *g, const Node *n, int all, int *dp, int64_t *sp, int *atp) {
  const Value *in = g->values[n->red_in], *out = g->values[n->outs[0]];
  if (!splittable(n->red) || in->ndim + 1 > MAXD || in->numel == 0 || out->numel == 0) return 0;
  const int64_t *st = read_strides(g, in);
  int64_t R = 1;
  int lo = -1, li = -1;  /* the innermost kept and reduced dims of size > 1 */
  for (int d = 0; d < in->ndim; d++) {
    int red = n->rmask >> d & 1;
    if (red) R *= in->size[d];
    if (in->size[d] > 1 && red) li = d;
    if (in->size[d] > 1 && !red) lo = d;
  }
  if (R < 2) return 0;
  /* codegen_cuda.c's column_schedule: the kept dim contiguous, the reduced one not */
  int cols = lo >= 0 && li >= 0 && st[lo] == 1 && st[li] != 1;
  /* blocks: a block per result, or per CUDA_COL_X columns; grid: the kernel's, where a column
     kernel of few blocks gets twice as many of half the width (codegen_cuda.c's col_x) */
  int64_t blocks = cols ? (out->numel + CUDA_COL_X - 1) / CUDA_COL_X : out->numel;
  int64_t grid = cols ? 2 * blocks : blocks, minchunk = cols ? MIN_CHUNK_COLS : MIN_CHUNK_ROWS;
  if (!all) {
    double mb = (double)in->numel * dtype_size(in->dtype) / 1e6;  /* the bytes read, in MB: us at GB/s * 1e3 */
    double per = mb * 1e6 / (double)grid - (cols ? COL_FLIGHT : ROW_FLIGHT);  /* past the first round trip */
    double one = per > 0 ? per / (BLOCK_GBS * 1e3) : 0, two = mb / GPU_GBS * 1e3 + LAUNCH_US;
    if (grid >= SPLIT_BLOCKS || R < 2 * minchunk || one < 1.25 * two) return 0;
  }
  int64_t want = all ? 2 : (SPLIT_TARGET + blocks - 1) / blocks;
  /* the reduced dims, outermost in memory first (stable) */
  int dims[MAXD], nd = 0;
  for (int d = 0; d < in->ndim; d++)
    if ((n->rmask >> d & 1) && in->size[d] > 1) {
      int j = nd++;
      for (; j > 0 && mag(st[dims[j - 1]]) < mag(st[d]); j--) dims[j] = dims[j - 1];
      dims[j] = d;
    }
  /* the outermost with a divisor that gives enough partials; else the most
     partials any dim allows */
  int bestd = -1;
  int64_t bests = 1;
  for (int i = 0; i < nd; i++) {
    int d = dims[i];
    int64_t D = in->size[d], pick = 1;
    for (int64_t s = 2; s <= D; s++) {
      if (D % s || (!all && R / s < minchunk)) continue;
      pick = s;
      if (s >= want) break;
    }
    if (pick >= want) { bestd = d, bests = pick; break; }
    if (pick > bests) bestd = d, bests = pick;
  }
  if (bestd < 0 || bests < 2) return 0;
  *dp = bestd, *sp = bests;
  *atp = cols && bestd > lo ? lo : bestd;
  return 1;
}

/* Rewrite reduction n as partials over a split of dim d into S, S placed
   before dim `at` (<= d) in the view; the partial's node in *pp. */
static int split_one(Graph *g, Node *n, int d, int64_t S, int at, Node **pp) {
  Value *in = g->values[n->red_in], *out = g->values[n->outs[0]];
  /* the view: dim d of the input as (S, D/S), S moved before dim at */
  int64_t vsize[MAXD], vstride[MAXD];
  uint32_t vmask = 0;
  int nd = 0, vs = -1;  /* vs: S's place in the view */
  for (int k = 0; k < in->ndim; k++) {
    if (k == at) {  /* S: chunks of D/S along d */
      vs = nd;
      vsize[nd] = S, vstride[nd] = in->stride[d] * (in->size[d] / S), nd++;
    }
    if (n->rmask >> k & 1) vmask |= 1u << nd;
    vsize[nd] = k == d ? in->size[k] / S : in->size[k], vstride[nd] = in->stride[k], nd++;
  }
  int vid = ember_graph_value((ember_graph *)g, in->dtype, in->device, nd, vsize, vstride, in->offset);
  if (vid < 0) return vid;
  Value *v = g->values[vid];
  v->root = in->root;
  /* the partials: the view's dims less the reduced ones (kept as 1 if the
     result keeps its reduced dims), S at its place */
  int keep = out->ndim == in->ndim && in->ndim > 0;
  int64_t psize[MAXD], pstride[MAXD];
  int np = 0, spos = -1;
  for (int k = 0; k < nd; k++) {
    if (vmask >> k & 1) {
      if (keep) psize[np++] = 1;
      continue;
    }
    if (k == vs) spos = np;
    psize[np++] = vsize[k];
  }
  for (int64_t k = np - 1, st = 1; k >= 0; k--) pstride[k] = st, st *= psize[k];
  int pdt = out->dtype == EMBER_F16 || out->dtype == EMBER_BF16 ? EMBER_F32 : out->dtype;
  int pid = ember_graph_value((ember_graph *)g, pdt, out->device, np, psize, pstride, 0);
  if (pid < 0) return pid;
  const char *name = pool_printf(&g->pool, "%s_split", n->name);
  Node *p = name ? graph_add_node(g, n->opname, name, vid, pid) : NULL;
  if (!p) return graph_error(g, n, "out of memory splitting a reduction");
  p->op = n->op, p->form = F_REDUCE, p->spell = n->spell;
  p->red = n->red, p->rmask = vmask, p->red_in = vid, p->cdtype = pdt;
  count_use(g, n->red_in, -1);
  count_use(g, vid, 1);
  count_use(g, pid, 1);
  n->red_in = pid;
  n->rmask = 1u << spos;
  *pp = p;
  return EMBER_OK;
}

int split_reductions(Graph *g) {
  int off = g->opt.split_reductions == SPLIT_OFF, all = g->opt.split_reductions == SPLIT_ALL;
  if (g->order && (off || g->symbolic || (!all && g->target != EMBER_CUDA))) return EMBER_OK;
  /* the run order so far (layout.c's), or creation order */
  Node **from = g->order ? g->order : g->nodes;
  int n0 = g->order ? g->norder : g->nnodes;
  /* each split adds one node */
  Node **order = pool_alloc(&g->pool, sizeof(Node *) * (size_t)(2 * n0 + 1));
  if (!order) return graph_error(g, NULL, "out of memory splitting reductions");
  int no = 0;
  for (int i = 0; i < n0; i++) {
    Node *n = from[i];
    int d, at;
    int64_t S;
    if (!off && !g->symbolic && (all || g->target == EMBER_CUDA) && n->form == F_REDUCE &&
        choose(g, n, all, &d, &S, &at)) {
      Node *p = NULL;
      int rc = split_one(g, n, d, S, at, &p);
      if (rc) return rc;
      order[no++] = p;
    }
    order[no++] = n;
  }
  g->order = order, g->norder = no;
  return g->failed ? EMBER_EINVAL : EMBER_OK;
}
