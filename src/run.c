/*
 * run.c - execute a compiled program: each step in order, a generated
 * kernel called with the table of value pointers, or a fallback handed back
 * to the client (which runs it through torch and fills in its results'
 * pointers).  Arena values get their pointers here; everything else the
 * client has filled in.
 */
#include "ember_int.h"

int run_program(Graph *g, void **ptrs, void *arena, ember_fallback_fn fb, void *ctx) {
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->storage == ST_ARENA) ptrs[i] = (char *)arena + v->arena_off;
  }
  for (int s = 0; s < g->nsteps; s++) {
    Step *st = &g->steps[s];
    if (st->kind == EMBER_STEP_KERNEL) {
      g->fns[st->index]((void *const *)ptrs);
    } else {
      if (!fb) return graph_error(g, g->nodes[st->index], "a fallback step has no client to run it");
      int rc = fb(ctx, st->index, ptrs);
      if (rc) return EMBER_ERUN;
    }
  }
  return EMBER_OK;
}
