/*
 * codegen_cuda.c - the CUDA target: a kernel is an `extern "C" __global__`
 * function taking the pointers of the values it reads and writes, compiled by
 * NVRTC (cuda.c) with src/prelude_cuda.h in front.
 *
 * Thread mapping: a pointwise kernel gives each thread elements of the
 * flattened space (a grid-stride loop, consecutive threads on consecutive
 * elements, so loads coalesce); a kernel with reduced dims gives each block
 * one row (outer point) at a time, its threads striding over the row in each
 * stage, partial results combined across the block (warp shuffles, then
 * shared memory) and broadcast, so every thread can use the row's result in
 * the next stage.  Row results are stored by thread 0.  The expressions are
 * the shared walker's (codegen.c), as on the CPU.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "prelude_cuda_gen.h"  /* em_prelude_cuda: the text of src/prelude_cuda.h */

#define PW_BLOCK 256
#define MAX_GRID (1u << 20)

static const char *cuda_prelude_text(void) { return em_prelude_cuda; }

/* Declare the loop vars of `loops` from a linear index `lin` over them. */
static void decompose(Cg *c, const Loop *loops, int n, const char *lin) {
  int64_t stride = 1;
  for (int i = n - 1; i >= 0; i--) {
    const char *v = c->names[loops[i].var];
    if (n == 1) cg_line(c, "const int64_t %s = %s;", v, lin);
    else if (i == n - 1) cg_line(c, "const int64_t %s = %s %% %lld;", v, lin, (long long)loops[i].n);
    else if (i == 0) cg_line(c, "const int64_t %s = %s / %lld;", v, lin, (long long)stride);
    else cg_line(c, "const int64_t %s = (%s / %lld) %% %lld;", v, lin, (long long)stride, (long long)loops[i].n);
    stride *= loops[i].n;
  }
}

static unsigned row_block(int64_t n) {
  if (n >= 8192) return 1024;
  if (n >= 2048) return 512;
  if (n >= 512) return 256;
  if (n >= 128) return 128;
  return 64;
}

static void stage(Cg *c, const Item *items, int n, const Loop *inner, int ni) {
  Kernel *k = c->k;
  int64_t iext = 1;
  for (int i = 0; i < ni; i++) iext *= inner[i].n;
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) cg_red_init(c, c->g->values[items[i].v]);
  int scope = c->ncse;
  cg_line(c, "for (int64_t r = threadIdx.x; r < %lld; r += blockDim.x) {", (long long)iext);
  c->indent++;
  decompose(c, inner, ni, "r");
  for (int i = 0; i < n; i++) {
    const Value *v = c->g->values[items[i].v];
    if (items[i].kind == IT_REDUCE) cg_red_update(c, v);
    else {
      Expr *idx[MAXD];
      item_index(&c->x, k, v, IT_STORE, idx);
      cg_store(c, v, idx, cg_def(c, v, idx));
    }
  }
  c->indent--;
  cg_line(c, "}");
  c->ncse = scope;
  c->store_guard = "threadIdx.x == 0";
  c->combine = 1;
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) cg_red_finish(c, c->g->values[items[i].v]);
  c->store_guard = NULL;
  c->combine = 0;
}

static void cuda_kernel(Cg *c, Kernel *k, Str *out, uint32_t merge) {
  Graph *g = c->g;
  Str body = {0};
  c->k = k;
  c->body = &body;
  c->ncse = 0;
  c->ntemp = 0;
  c->divmods = 0;
  c->store_guard = NULL;
  memset(c->used, 0, g->nvalues);
  memset(c->sub, 0, sizeof c->sub);
  kernel_vars(&c->x, k);
  c->x.nvars = 2 * MAXD;
  Loop outer[MAXD], inner[MAXD];
  int no = cg_loops(c, k, 0, merge, outer), ni = cg_loops(c, k, 1, merge, inner);
  int64_t oext = 1, iext = 1;
  for (int i = 0; i < no; i++) oext *= outer[i].n;
  for (int i = 0; i < ni; i++) iext *= inner[i].n;
  int empty = 0;
  for (int d = 0; d < k->ndim; d++) empty |= k->size[d] == 0;
  c->indent = 1;
  unsigned block;
  int64_t grid;
  if (k->rmask == 0) {
    /* pointwise: a grid-stride loop over the flattened space */
    block = PW_BLOCK;
    grid = (oext + block - 1) / block;
    cg_line(c, "for (int64_t lin = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; lin < %lld; "
               "lin += (int64_t)gridDim.x * blockDim.x) {", (long long)oext);
    c->indent++;
    decompose(c, outer, no, "lin");
    for (int i = 0; i < k->nitems; i++) {
      const Value *v = g->values[k->items[i].v];
      Expr *idx[MAXD];
      if (k->items[i].kind == IT_REDUCE) {  /* a reduction over no dims: one element each */
        cg_red_init(c, v);
        cg_red_update(c, v);
        cg_red_finish(c, v);
        continue;
      }
      item_index(&c->x, k, v, IT_STORE, idx);
      cg_store(c, v, idx, cg_def(c, v, idx));
    }
    c->indent--;
    cg_line(c, "}");
  } else {
    /* rows: one block per outer point */
    block = row_block(iext);
    grid = oext;
    cg_line(c, "for (int64_t o = blockIdx.x; o < %lld; o += gridDim.x) {", (long long)oext);
    c->indent++;
    decompose(c, outer, no, "o");
    int i = 0;
    while (i < k->nitems) {
      if (k->items[i].kind == IT_OUTER) {
        const Value *v = g->values[k->items[i].v];
        Expr *idx[MAXD];
        item_index(&c->x, k, v, IT_OUTER, idx);
        const char *t = cg_def(c, v, idx);
        c->store_guard = "threadIdx.x == 0";
        cg_store(c, v, idx, t);
        c->store_guard = NULL;
        i++;
        continue;
      }
      int red[64], nred = 0, j = i;
      while (j < k->nitems && k->items[j].kind != IT_OUTER && !cg_reads_stage_reduce(c, &k->items[j], red, nred)) {
        if (k->items[j].kind == IT_REDUCE && nred < 64) red[nred++] = k->items[j].v;
        j++;
      }
      stage(c, &k->items[i], j - i, inner, ni);
      i = j;
    }
    c->indent--;
    cg_line(c, "}");
  }
  if (grid < 1) grid = 1;
  if (grid > MAX_GRID) grid = MAX_GRID;
  k->grid[0] = empty ? 0 : (unsigned)grid, k->grid[1] = k->grid[2] = 1;
  k->block[0] = block, k->block[1] = k->block[2] = 1;
  /* the signature: the pointers this kernel uses, by value id */
  int np = 0;
  for (int v = 0; v < g->nvalues; v++) np += c->used[v] != 0;
  k->params = pool_alloc(c->pool, sizeof(int) * (np + 1));
  if (!k->params) c->oom = 1;
  k->nparams = 0;
  str_printf(out, "\n/* kernel %d: space [", k->id);
  for (int d = 0; d < k->ndim; d++) str_printf(out, "%s%lld", d ? ", " : "", (long long)k->size[d]);
  str_printf(out, "]%s; grid %u, block %u; computes", k->rmask ? ", a block per row" : "", k->grid[0], block);
  for (int it = 0; it < k->nitems; it++) str_printf(out, " %s", g->values[k->items[it].v]->def->name);
  str_printf(out, " */\nextern \"C\" __global__ void __launch_bounds__(%u) ember_k%d(", block, k->id);
  for (int v = 0; v < g->nvalues; v++) {
    if (!c->used[v]) continue;
    const char *ct = cg_storage_ctype(g->values[v]->dtype);
    str_printf(out, "%s%s%s *__restrict__ b%d", k->nparams ? ", " : "", c->used[v] & 2 ? "" : "const ", ct, v);
    if (k->params) k->params[k->nparams++] = v;
  }
  str_puts(out, ") {\n");
  if (!empty) str_puts(out, body.s ? body.s : "");
  str_puts(out, "}\n");
  if (body.oom) c->oom = 1;
  str_free(&body);
}

const Target target_cuda = {"cuda", cuda_prelude_text, cuda_kernel, 1};
