/*
 * run.c - execute a compiled program: each step in order, a generated
 * kernel called with the table of value pointers, or a fallback handed back
 * to the client (which runs it through torch and fills in its results'
 * pointers).  Arena values get their pointers here; everything else the
 * client has filled in.
 */
#include "ember_int.h"

static int launch(Graph *g, Kernel *k, void **ptrs, void *stream) {
  if (k->grid[0] == 0) return EMBER_OK;  /* nothing to do: an empty space */
  void *args[256];
  if (k->nparams > 256) return graph_error(g, NULL, "kernel ember_k%d has too many arguments", k->id);
  for (int i = 0; i < k->nparams; i++) args[i] = &ptrs[k->params[i]];
  char err[1024];
  if (cuda_launch(cuda_fn(g->cmod, k->id), k->grid, k->block, 0, stream, args, err, sizeof err)) {
    const Value *v = g->values[k->items[0].v];
    snprintf(g->err, sizeof g->err, "ember: CUDA kernel ember_k%d (computing %s) failed: %s", k->id,
             v->def ? v->def->name : "?", err);
    return EMBER_ERUN;
  }
  return EMBER_OK;
}

int run_program(Graph *g, void **ptrs, void *arena, void *stream, ember_fallback_fn fb, void *ctx) {
  if (g->opt.build_only && g->nkernels > 0) {
    snprintf(g->err, sizeof g->err, "ember: this program was compiled with build_only and cannot run");
    return EMBER_ERUN;
  }
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->storage == ST_ARENA) ptrs[i] = (char *)arena + v->arena_off;
  }
  for (int s = 0; s < g->nsteps; s++) {
    Step *st = &g->steps[s];
    if (st->kind == EMBER_STEP_KERNEL) {
      if (g->target == EMBER_CUDA) {
        int rc = launch(g, g->kernels[st->index], ptrs, stream);
        if (rc) return rc;
      } else {
        g->fns[st->index]((void *const *)ptrs);
        if (g->zero_div && __atomic_load_n(g->zero_div, __ATOMIC_RELAXED)) {
          __atomic_store_n(g->zero_div, 0, __ATOMIC_RELAXED);
          Kernel *k = g->kernels[st->index];
          const Value *v = g->values[k->items[0].v];
          snprintf(g->err, sizeof g->err,
                   "ZeroDivisionError: integer division by zero in kernel ember_k%d (computing %s)",
                   k->id, v->def ? v->def->name : "?");
          return EMBER_ERUN;
        }
      }
    } else {
      if (!fb) return graph_error(g, g->nodes[st->index], "a fallback step has no client to run it");
      int rc = fb(ctx, st->index, ptrs);
      if (rc) return EMBER_ERUN;
    }
  }
  return EMBER_OK;
}
