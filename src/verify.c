/*
 * verify.c - checks of the IR's invariants between passes.
 *
 * The driver (ember.c) calls verify(g, pass) after each pass when the
 * compile's debug option is on, and the C tests call it after their
 * passes.  What it checks grows with the passes that ran: the graph as
 * handed in (ids, ranges, each value's producer, its size expressions
 * agreeing with its integer meta), then the lowered forms,
 * the run order, the kernels and steps, and the memory plan (no two arena
 * values alive at once share a byte).  A failed check is a bug in ember,
 * not in the user's graph: the error says so and names the pass after
 * which the IR broke and the value or node.  Nothing here changes the IR.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

/* How far the compile has got: which checks apply. */
enum { AFTER_BUILD, AFTER_LOWER, AFTER_ORDER, AFTER_FUSE, AFTER_PLAN };

static int stage_of(const char *pass) {
  static const struct { const char *name; int stage; } passes[] = {
      {"build", AFTER_BUILD}, {"lower", AFTER_LOWER}, {"split", AFTER_ORDER}, {"layout", AFTER_ORDER},
      {"fuse", AFTER_FUSE},   {"plan", AFTER_PLAN},   {"codegen", AFTER_PLAN},
  };
  for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++)
    if (!strcmp(passes[i].name, pass)) return passes[i].stage;
  return AFTER_PLAN;
}

#define BROKEN(...) return graph_error(g, NULL, "internal error: after the " "%s pass, " __VA_ARGS__)

static int value_ok(const Graph *g, int v) { return v >= 0 && v < g->nvalues; }

/* Value v's size expressions: present, and in a value that is not symbolic
   constants equal to its meta's integers; in one that is, the integers are
   the constants' values or -1. */
static int check_exprs(Graph *g, const Value *v, const char *pass) {
  int i = v->id;
  if (!v->soffset || !v->snumel) BROKEN("value %d has no offset or numel expression", pass, i);
  const Expr *e[2 * MAXD + 2];
  const int64_t *n[2 * MAXD + 2];
  int m = 0;
  for (int d = 0; d < v->ndim; d++) e[m] = v->ssize[d], n[m++] = &v->size[d];
  for (int d = 0; d < v->ndim; d++) e[m] = v->sstride[d], n[m++] = &v->stride[d];
  e[m] = v->soffset, n[m++] = &v->offset;
  e[m] = v->snumel, n[m++] = &v->numel;
  int any = 0;
  for (int k = 0; k < m; k++) {
    if (!e[k]) BROKEN("value %d lacks a size or stride expression", pass, i);
    if (!ex_is_size(e[k])) BROKEN("value %d has a loop variable in its meta's expressions", pass, i);
    if (e[k]->kind != E_CONST) {
      any = 1;
      if (*n[k] != -1) BROKEN("value %d: a symbolic size or stride with the integer %lld", pass, i, (long long)*n[k]);
    } else if (e[k]->c != *n[k]) {
      BROKEN("value %d: its meta says %lld where its expression says %lld", pass, i, (long long)*n[k],
             (long long)e[k]->c);
    }
  }
  if (any != v->symbolic) BROKEN("value %d is marked %ssymbolic", pass, i, v->symbolic ? "" : "not ");
  if (any && !g->symbolic) BROKEN("value %d is symbolic in a graph that is not", pass, i);
  return EMBER_OK;
}

/* Each size variable that says where its value comes from names a graph
   input's dim whose size expression is that variable. */
static int check_syms(Graph *g, const char *pass) {
  for (int s = 0; s < g->syms.n; s++) {
    if (g->sym_input[s] < 0) continue;
    int in = g->sym_input[s], d = g->sym_dim[s];
    if (in >= g->ninputs) BROKEN("size variable %s comes from input %d of %d", pass, graph_sym_name(g, s), in,
                                 g->ninputs);
    const Value *v = g->values[g->inputs[in]];
    if (d >= v->ndim || v->ssize[d]->kind != E_SYM || v->ssize[d]->var != s)
      BROKEN("size variable %s is not the size of input %d's dim %d", pass, graph_sym_name(g, s), in, d);
  }
  return EMBER_OK;
}

static int check_values(Graph *g, const char *pass) {
  for (int i = 0; i < g->nvalues; i++) {
    const Value *v = g->values[i];
    if (!v || v->id != i) BROKEN("value %d is missing or has id %d", pass, i, v ? v->id : -1);
    if (v->ndim < 0 || v->ndim > MAXD) BROKEN("value %d has %d dims", pass, i, v->ndim);
    if (v->dtype < 0 || v->dtype >= EMBER_NDTYPE) BROKEN("value %d has dtype %d", pass, i, v->dtype);
    for (int d = 0; d < v->ndim; d++)
      if (v->size[d] < (v->symbolic ? -1 : 0)) BROKEN("value %d has size %lld in dim %d", pass, i, (long long)v->size[d], d);
    if (check_exprs(g, v, pass)) return EMBER_EINVAL;
    if (!value_ok(g, v->root) || g->values[v->root]->root != v->root)
      BROKEN("value %d's root %d is not a root", pass, i, v->root);
    if (v->def) {
      const Node *n = v->def;
      if (n->id < 0 || n->id >= g->nnodes || g->nodes[n->id] != n || v->def_out < 0 || v->def_out >= n->nouts ||
          n->outs[v->def_out] != i)
        BROKEN("value %d's producer %s does not list it as output %d", pass, i, n->name, v->def_out);
    }
  }
  for (int i = 0; i < g->ninputs; i++)
    if (!value_ok(g, g->inputs[i]) || !g->values[g->inputs[i]]->is_input)
      BROKEN("input %d names value %d, which is not an input", pass, i, g->inputs[i]);
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i] != -1 && !value_ok(g, g->outputs[i]))
      BROKEN("output %d names value %d", pass, i, g->outputs[i]);
  return EMBER_OK;
}

static int check_nodes(Graph *g, const char *pass, int stage) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n || n->id != i) BROKEN("node %d is missing or has id %d", pass, i, n ? n->id : -1);
    for (int a = 0; a < n->nargs; a++) {
      const ember_arg *x = &n->args[a];
      if (x->kind == EMBER_ARG_TENSOR && x->i != -1 && !value_ok(g, (int)x->i))
        BROKEN("node %s's argument %d names value %lld", pass, n->name, a, (long long)x->i);
      for (int k = 0; x->kind == EMBER_ARG_TENSORS && k < x->n; k++)
        if (x->list[k] != -1 && !value_ok(g, (int)x->list[k]))
          BROKEN("node %s's argument %d names value %lld", pass, n->name, a, (long long)x->list[k]);
    }
    for (int o = 0; o < n->nouts; o++)
      if (!value_ok(g, n->outs[o]) || g->values[n->outs[o]]->def != n)
        BROKEN("node %s's output %d (value %d) is not produced by it", pass, n->name, o, n->outs[o]);
    if (stage < AFTER_LOWER) continue;
    if (n->form < -1 || n->form == F_COMPOSITE) BROKEN("node %s has form %d", pass, n->name, n->form);
    for (int k = 0; n->form >= 0 && k < n->nopnd; k++)
      if (n->opnd[k].v != -1 && !value_ok(g, n->opnd[k].v))
        BROKEN("node %s's operand %d names value %d", pass, n->name, k, n->opnd[k].v);
    if (n->form == F_REDUCE && !value_ok(g, n->red_in)) BROKEN("reduction %s reads value %d", pass, n->name, n->red_in);
  }
  return EMBER_OK;
}

static int check_order(Graph *g, const char *pass) {
  if (!g->order) BROKEN("there is no run order", pass);
  char *seen = calloc((size_t)g->nnodes + 1, 1);
  if (!seen) return graph_error(g, NULL, "out of memory checking the IR");
  int rc = EMBER_OK;
  for (int i = 0; i < g->norder && !rc; i++) {
    const Node *n = g->order[i];
    if (!n || n->id < 0 || n->id >= g->nnodes || g->nodes[n->id] != n)
      rc = graph_error(g, NULL, "internal error: after the %s pass, place %d of the run order is no node",
                       pass, i);
    else if (seen[n->id]++)
      rc = graph_error(g, NULL, "internal error: after the %s pass, node %s runs twice", pass, n->name);
  }
  free(seen);
  return rc;
}

static int check_steps(Graph *g, const char *pass) {
  char *seen = calloc((size_t)g->nkernels + 1, 1);
  if (!seen) return graph_error(g, NULL, "out of memory checking the IR");
  int rc = EMBER_OK;
  for (int s = 0; s < g->nsteps && !rc; s++) {
    const Step *st = &g->steps[s];
    if (st->kind == EMBER_STEP_KERNEL) {
      if (st->index < 0 || st->index >= g->nkernels || g->kernels[st->index]->step != s || seen[st->index]++)
        rc = graph_error(g, NULL, "internal error: after the %s pass, step %d runs kernel %d wrongly", pass,
                         s, st->index);
    } else if (st->kind != EMBER_STEP_FALLBACK || st->index < 0 || st->index >= g->nnodes ||
               g->nodes[st->index]->form >= 0) {
      rc = graph_error(g, NULL, "internal error: after the %s pass, step %d is neither a kernel nor a "
                       "fallback", pass, s);
    }
  }
  for (int k = 0; k < g->nkernels && !rc; k++) {
    if (g->kernels[k]->id != k || !seen[k])
      rc = graph_error(g, NULL, "internal error: after the %s pass, kernel %d is in no step", pass, k);
  }
  free(seen);
  return rc;
}

/* Arena values by offset, to find two alive at once that share a byte. */
static const Graph *sort_graph;
static int by_offset(const void *a, const void *b) {
  const Value *x = sort_graph->values[*(const int *)a], *y = sort_graph->values[*(const int *)b];
  return x->arena_off < y->arena_off ? -1 : x->arena_off > y->arena_off;
}

static int check_plan(Graph *g, const char *pass) {
  int n = 0;
  int *arena = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
  if (!arena) return graph_error(g, NULL, "out of memory checking the IR");
  int rc = EMBER_OK;
  for (int i = 0; i < g->nvalues && !rc; i++) {
    const Value *v = g->values[i];
    if (v->storage < ST_NONE || v->storage > ST_INTO)
      rc = graph_error(g, NULL, "internal error: after the %s pass, value %d has storage %d", pass, i,
                       v->storage);
    else if (v->storage == ST_VIEW && (v->fb_use || v->out_use) && g->values[v->root]->storage == ST_NONE)
      rc = graph_error(g, NULL, "internal error: after the %s pass, value %d, which torch reads, views value %d, "
                       "which has no storage", pass, i, v->root);
    else if (v->storage == ST_ARENA && v->nbytes) {
      if (v->arena_off + v->nbytes > g->arena_bytes || v->first_step > v->last_step)
        rc = graph_error(g, NULL, "internal error: after the %s pass, arena value %d lies outside the "
                         "arena or its lifetime", pass, i);
      arena[n++] = i;
    }
  }
  /* sorted by offset, each value need only be compared with those that start before it ends */
  sort_graph = g;
  if (!rc) qsort(arena, (size_t)n, sizeof *arena, by_offset);
  for (int a = 0; a < n && !rc; a++) {
    const Value *x = g->values[arena[a]];
    for (int b = a + 1; b < n && !rc; b++) {
      const Value *y = g->values[arena[b]];
      if (y->arena_off >= x->arena_off + x->nbytes) break;
      if (!(x->last_step < y->first_step || y->last_step < x->first_step))
        rc = graph_error(g, NULL, "internal error: after the %s pass, arena values %d and %d are alive "
                         "at once in the same bytes", pass, x->id, y->id);
    }
  }
  free(arena);
  return rc;
}

int verify(Graph *g, const char *pass) {
  if (g->failed) return EMBER_EINVAL;
  int stage = stage_of(pass);
  int rc = check_values(g, pass);
  if (!rc) rc = check_syms(g, pass);
  if (!rc) rc = check_nodes(g, pass, stage);
  if (!rc && stage >= AFTER_ORDER) rc = check_order(g, pass);
  if (!rc && stage >= AFTER_FUSE) rc = check_steps(g, pass);
  if (!rc && stage >= AFTER_PLAN) rc = check_plan(g, pass);
  return rc;
}
