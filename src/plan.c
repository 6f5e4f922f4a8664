/*
 * plan.c - storage for every value, and the arena.
 *
 * A value is an input (the caller's tensor), a fallback's result (a tensor
 * torch made), a host tensor (materialized and seen from Python: a graph
 * output or a fallback's operand, allocated by the client before the run), an
 * arena slot (materialized, only kernels read it), a view (of its root), or
 * nothing (fused away).  Arena slots are placed first-fit, largest first,
 * sharing bytes between values whose lifetimes (in steps) do not overlap; a
 * library call's padded copies then take bytes free during its step.
 *
 * It also decides what the client does with memory around the kernels: the
 * fallback step before which each fallback result is dropped (its first after
 * the result's last read; never for an output's root), where each host
 * tensor's memory comes from (the client's allocator, the CPU block cache
 * for large ones, or, on request, one pooled block for a run's outputs: that
 * last layout is made by program.c's ember_program_pool_outputs, when the
 * client knows which outputs it pools).  The client only allocates and frees
 * as told.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

#define ALIGN 64

/* kernel, staged: the kernel walked and whether the item walked reads at the
   full shape (a store or a reduction), so that it is in a later stage than
   any reduction or outer value of the kernel it reads; stage_read[v]: such a
   value, read by a later stage of its own kernel. */
typedef struct Life { Graph *g; int step; int kernel; int staged; char *stage_read; } Life;

static void note_read(void *ud, int r, Expr *addr) {
  Life *l = ud;
  Value *v = l->g->values[r];
  if (l->step > v->last_step) v->last_step = l->step;
  if (l->staged && v->kernel == l->kernel && v->item_kind != IT_STORE) l->stage_read[r] = 1;
}

/* Largest first, then by id: a stable order so the plan is deterministic. */
static int before(const Value *x, const Value *y) {
  return x->nbytes != y->nbytes ? x->nbytes > y->nbytes : x->id < y->id;
}

/* First fit: the lowest offset for bytes alive from step first to last that
   overlaps none of the n values of order already placed and alive then. */
static size_t first_fit(Graph *g, const int *order, int n, int first, int last, size_t bytes) {
  size_t off = 0;
  for (int again = 1; again;) {
    again = 0;
    for (int j = 0; j < n; j++) {
      Value *u = g->values[order[j]];
      int alive = !(u->last_step < first || last < u->first_step);
      if (alive && off < u->arena_off + u->nbytes && u->arena_off < off + bytes) {
        off = u->arena_off + u->nbytes;
        again = 1;
      }
    }
  }
  return off;
}


/* The client's part of the plan: drops of fallback results, host tensors'
   memory.  After the lifetimes are final. */
static int plan_client(Graph *g) {
  char *kept = calloc(g->nvalues + 1, 1);
  if (!kept) return graph_error(g, NULL, "out of memory in the memory planner");
  for (int i = 0; i < g->noutputs; i++)   /* the outputs' roots: alive to the end of the run */
    if (g->outputs[i] >= 0) kept[g->values[g->outputs[i]]->root] = 1;
  int cuda = g->target == EMBER_CUDA;
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    v->drop_step = -1;
    v->host_alloc = EMBER_HOST_TORCH;
    v->host_bytes = v->block_off = 0;
    if (v->storage == ST_FALLBACK && !kept[i]) {
      for (int s = v->last_step + 1; s < g->nsteps; s++)
        if (g->steps[s].kind == EMBER_STEP_FALLBACK) { v->drop_step = s; break; }
    } else if (v->storage == ST_HOST && v->symbolic) {
      /* its bytes are known at the call: the client takes a CPU block from the cache where they
         are at least HOST_CACHE_MIN then (host_bytes 0: decided per call) */
      if (!cuda) v->host_alloc = EMBER_HOST_CACHE;
    } else if (v->storage == ST_HOST) {
      v->host_bytes = (size_t)value_span(v) * dtype_size(v->dtype);
      if (!cuda && v->host_bytes >= HOST_CACHE_MIN) v->host_alloc = EMBER_HOST_CACHE;
    }
  }
  free(kept);
  return EMBER_OK;
}

int plan(Graph *g) {
  char *stage_read = pool_alloc(&g->pool, (size_t)g->nvalues + 1);  /* the graph's, freed with it */
  if (!stage_read) return graph_error(g, NULL, "out of memory in the memory planner");
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->is_input) v->storage = ST_INPUT;
    else if (v->into >= 0) v->storage = ST_INTO;  /* the input's memory */
    else if (v->root != v->id) v->storage = ST_VIEW;
    else if (v->def && v->def->form < 0) v->storage = ST_FALLBACK;
    else if (!v->materialized) v->storage = ST_NONE;
    else v->storage = v->out_use ? ST_HOST : ST_ARENA;  /* a fallback's operand: a tensor view of the arena */
    v->first_step = v->ready_step;
    v->last_step = v->ready_step;
  }
  /* lifetimes: the last step that reads each arena value */
  for (int s = 0; s < g->nsteps; s++) {
    if (g->steps[s].kind == EMBER_STEP_FALLBACK) {
      /* a fallback reads its tensor operands */
      Node *n = g->nodes[g->steps[s].index];
      for (int a = 0; a < n->nargs; a++) {
        const ember_arg *x = &n->args[a];
        int cnt = x->kind == EMBER_ARG_TENSOR ? 1 : x->kind == EMBER_ARG_TENSORS ? x->n : 0;
        for (int j = 0; j < cnt; j++) {
          if (x->kind == EMBER_ARG_TENSORS && x->list[j] < 0) continue;  /* None */
          Value *r = g->values[g->values[x->kind == EMBER_ARG_TENSOR ? x->i : x->list[j]]->root];
          if (s > r->last_step) r->last_step = s;
        }
      }
      continue;
    }
    Kernel *k = g->kernels[g->steps[s].index];
    if (k->lib) {  /* a library call reads its matrices' (and bias's) storage */
      const Node *n = k->call;
      int in[3] = {n->mm_a, n->mm_b, n->mm_bias};
      for (int i = 0; i < 3; i++) {
        if (in[i] < 0) continue;
        Value *r = g->values[g->values[in[i]]->root];
        if (s > r->last_step) r->last_step = s;
      }
      continue;
    }
    ExprCtx x = {&g->pool, 0, {0}};
    x.syms = &g->syms;
    kernel_vars(&x, k);
    Life l = {g, s, k->id, 0, stage_read};
    for (int i = 0; i < k->nitems; i++) {
      Value *v = g->values[k->items[i].v];
      Expr *idx[MAXD];
      l.staged = k->rmask && k->items[i].kind != IT_OUTER;
      if (k->items[i].kind == IT_REDUCE) {
        for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(&x, d);
        walk_reads(g, &x, v->def->red_in, idx, note_read, &l);
      } else {
        item_index(&x, k, v, k->items[i].kind, idx);
        int m = v->materialized;
        v->materialized = 0;  /* walk its definition, not its storage */
        walk_reads(g, &x, v->id, idx, note_read, &l);
        v->materialized = m;
      }
    }
  }
  /* a fallback's result may alias its operands (a view op): keep the operands
     as long, unless the op's schema says its results are new tensors */
  for (int s = g->nsteps - 1; s >= 0; s--) {
    if (g->steps[s].kind != EMBER_STEP_FALLBACK) continue;
    Node *n = g->nodes[g->steps[s].index];
    if (n->noalias) continue;
    int last = s;
    for (int k = 0; k < n->nouts; k++) {
      const Value *o = g->values[n->outs[k]];
      if (o->last_step > last) last = o->last_step;
      if (o->out_use) last = g->nsteps;
    }
    for (int a = 0; a < n->nargs; a++) {
      const ember_arg *x = &n->args[a];
      int cnt = x->kind == EMBER_ARG_TENSOR ? 1 : x->kind == EMBER_ARG_TENSORS ? x->n : 0;
      for (int j = 0; j < cnt; j++) {
        if (x->kind == EMBER_ARG_TENSORS && x->list[j] < 0) continue;  /* None */
        Value *r = g->values[g->values[x->kind == EMBER_ARG_TENSOR ? x->i : x->list[j]]->root];
        if (last > r->last_step) r->last_step = last;
      }
    }
  }
  /* values read only inside their own kernel need no memory: reductions and
     outer values, and a pointwise kernel's stores, whose readers in the kernel
     read them at the element they are computed for (fuse.c's join rule) in
     the same loop body.  A store in a reduction's kernel is read in a later
     stage, another iteration of its loops: it keeps its memory.  On the CPU
     so does a reduction or outer value that a later stage reads (weight_norm's
     backward scales the weight's gradient by its sum over dims 0 and 1): the
     column schedule (codegen_c.c) reads it back from memory, where a register
     would leave the kernel one output point at a time, striding down the
     columns. */
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->storage != ST_ARENA || v->last_step != v->first_step || v->kernel < 0) continue;
    if (stage_read[i] && g->target != EMBER_CUDA) continue;
    const Kernel *k = g->kernels[v->kernel];
    if (v->item_kind != IT_STORE || (!k->rmask && !k->lib && !k->into)) v->storage = ST_NONE, v->local = 1;
  }
  /* a symbolic graph's arena offsets are planned at each call from the
     lifetimes above (program.c, program_sym_arena), after the library
     calls' workspace, which is the arena's first bytes at every size */
  if (g->symbolic) {
    g->ws_off = g->ws_bytes = 0;
    for (int i = 0; i < g->nkernels && !g->ws_bytes && g->target == EMBER_CUDA; i++)  /* the CPU BLAS needs none */
      if (g->kernels[i]->lib) g->ws_bytes = LIB_WORKSPACE;
    g->arena_bytes = g->ws_bytes;
    return plan_client(g);
  }
  int *order = em_malloc(sizeof(int) * (g->nvalues + 1));
  if (!order) return graph_error(g, NULL, "out of memory in the memory planner");
  int n = 0;
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->storage != ST_ARENA) continue;
    size_t bytes = (size_t)value_span(v) * dtype_size(v->dtype);
    v->nbytes = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    order[n++] = i;
  }
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && before(g->values[order[j]], g->values[order[j - 1]]); j--) {
      int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
    }
  size_t top = 0;
  for (int i = 0; i < n; i++) {
    Value *v = g->values[order[i]];
    v->arena_off = first_fit(g, order, i, v->first_step, v->last_step, v->nbytes);
    if (v->arena_off + v->nbytes > top) top = v->arena_off + v->nbytes;
  }
  /* a library call's padded copies (lower.c, matmul_pad): bytes free during
     its step alone (no two calls' copies are alive at once) */
  for (int i = 0; i < g->nkernels; i++) {
    Kernel *k = g->kernels[i];
    if (!k->lib) continue;
    MatStore ms[3];
    size_t bytes = matmul_store(k->call, dtype_size(g->values[k->call->mm_out]->dtype), ms);
    if (!bytes) continue;
    k->scratch_off = first_fit(g, order, n, k->step, k->step, bytes);
    if (k->scratch_off + bytes > top) top = k->scratch_off + bytes;
  }
  free(order);
  /* the library calls' workspace, after every value */
  g->ws_off = g->ws_bytes = 0;
  for (int i = 0; i < g->nkernels && g->target == EMBER_CUDA; i++)  /* the CPU BLAS needs none */
    if (g->kernels[i]->lib) {
      g->ws_off = (top + 255) / 256 * 256;
      g->ws_bytes = LIB_WORKSPACE;
      top = g->ws_off + g->ws_bytes;
      break;
    }
  g->arena_bytes = top;
  return plan_client(g);
}
