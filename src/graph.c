/*
 * graph.c - the IR's graph and the builder behind ember_graph_* (but for
 * ember_graph_node, which expand.c wraps around graph_node): values carry the tensor
 * meta torch gives (sizes, strides, storage offset, dtype, device), nodes
 * carry an ATen op name, its arguments and the values it produces.
 *
 * Every input is checked here, so later passes may assume a well-formed
 * graph: a bad id, a bad rank or a view that reads outside its storage gets
 * an error naming the op and the node.  Nothing is lowered here.
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

static const char *dtype_names[EMBER_NDTYPE] = {
  "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "opaque"
};
static const int dtype_sizes[EMBER_NDTYPE] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 0};

int dtype_size(int d) { return d >= 0 && d < EMBER_NDTYPE ? dtype_sizes[d] : 0; }
const char *dtype_name(int d) { return d >= 0 && d < EMBER_NDTYPE ? dtype_names[d] : "?"; }
int dtype_is_float(int d) { return d == EMBER_F16 || d == EMBER_BF16 || d == EMBER_F32 || d == EMBER_F64; }

/* The graph's one error: head (a printf format taking the strings a and b)
   then fmt's message, in g->err; the first error is kept, it is the cause. */
static int graph_fail(Graph *g, const char *head, const char *a, const char *b, const char *fmt, va_list ap) {
  if (g->failed) return EMBER_EINVAL;
  g->failed = 1;
  int k = snprintf(g->err, sizeof g->err, head, a, b);
  if (k < 0 || k >= (int)sizeof g->err) k = 0;
  vsnprintf(g->err + k, sizeof g->err - k, fmt, ap);
  return EMBER_EINVAL;
}

int graph_error(Graph *g, const Node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = n ? graph_fail(g, "ember: %s (node %s): ", n->opname ? n->opname : "?", n->name ? n->name : "?", fmt, ap)
            : graph_fail(g, "ember: %s%s", "", "", fmt, ap);
  va_end(ap);
  return r;
}

int64_t value_span(const Value *v) {
  if (v->numel == 0) return 0;
  int64_t hi = 0;
  for (int d = 0; d < v->ndim; d++) hi += (v->size[d] - 1) * v->stride[d];
  return hi + 1;
}

int value_is_dense(const Value *v) {
  /* sort dims of size > 1 by stride; each stride must be the product of the sizes inside it */
  int idx[MAXD], n = 0;
  for (int d = 0; d < v->ndim; d++)
    if (v->size[d] > 1) idx[n++] = d;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v->stride[idx[j]] < v->stride[idx[j - 1]]; j--) {
      int t = idx[j]; idx[j] = idx[j - 1]; idx[j - 1] = t;
    }
  int64_t expect = 1;
  for (int i = 0; i < n; i++) {
    if (v->stride[idx[i]] != expect) return 0;
    expect *= v->size[idx[i]];
  }
  return 1;
}

static int grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return 1;
  int c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void *p = em_realloc(*arr, (size_t)c * elem);
  if (!p) return 0;
  *arr = p, *cap = c;
  return 1;
}

ember_graph *ember_graph_new(void) {
  ember_graph *eg = calloc(1, sizeof *eg);
  return eg;
}

void graph_release(Graph *g) {
  free(g->values), free(g->nodes), free(g->inputs), free(g->outputs);
  free(g->kernels), free(g->steps), free(g->sizex);
  pool_free(&g->pool);
}

void ember_graph_free(ember_graph *eg) {
  if (!eg) return;
  graph_release(&eg->g);
  free(eg);
}

const char *ember_graph_error(const ember_graph *eg) { return eg->g.err; }

static int oom(Graph *g) {
  graph_error(g, NULL, "out of memory while building the graph");
  return EMBER_ENOMEM;
}

/* ---------------------------------------------------------------- size expressions */

void graph_size_ctx(Graph *g, ExprCtx *x) {
  memset(x, 0, sizeof *x);
  x->pool = &g->pool;
  x->syms = &g->syms;
}

const char *graph_sym_name(const Graph *g, int s) {
  static const char *const fallback = "s?";
  return s >= 0 && s < g->syms.n && g->sym_name[s] ? g->sym_name[s] : fallback;
}

Expr *graph_size_expr(const Graph *g, int64_t h) {
  return h >= 0 && h < g->nsizex ? g->sizex[h] : NULL;
}

int graph_refuse_symbolic(Graph *g, const char *pass, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = graph_fail(g, EMBER_SYMBOLIC_REFUSED "%s: %s", pass, "", fmt, ap);
  va_end(ap);
  return r;
}

/* A new size handle for e: its number, or a status. */
static int size_handle(Graph *g, Expr *e) {
  if (!e || g->pool.oom || !grow((void **)&g->sizex, &g->cap_sizex, g->nsizex + 1, sizeof(Expr *)))
    return oom(g);
  g->sizex[g->nsizex] = e;
  return g->nsizex++;
}

#define SIZE_CONST_MAX ((int64_t)1 << 40)  /* the largest size, stride or offset a graph may state */

int ember_graph_sym(ember_graph *eg, const char *name, int64_t lo, int64_t hi) {
  Graph *g = &eg->g;
  if (lo < 0 || hi < lo)
    return graph_error(g, NULL, "size variable %s: range [%lld, %lld] is empty or negative", name ? name : "?",
                       (long long)lo, (long long)hi);
  if (g->syms.n == EX_MAXSYMS)
    return graph_error(g, NULL, "size variable %s: more than %d size variables", name ? name : "?", EX_MAXSYMS);
  int s = ex_add_sym(&g->syms, lo, hi);
  EM_ASSERT(s >= 0);
  g->sym_name[s] = name && *name ? pool_strdup(&g->pool, name) : pool_printf(&g->pool, "s%d", s);
  g->sym_input[s] = g->sym_dim[s] = -1;
  ExprCtx x;
  graph_size_ctx(g, &x);
  int h = size_handle(g, ex_sym(&x, s));
  if (h >= 0) g->sym_handle[s] = h;
  return h;
}

int ember_graph_size_const(ember_graph *eg, int64_t c) {
  Graph *g = &eg->g;
  if (c < -SIZE_CONST_MAX || c > SIZE_CONST_MAX)
    return graph_error(g, NULL, "size constant %lld is too large", (long long)c);
  ExprCtx x;
  graph_size_ctx(g, &x);
  return size_handle(g, ex_const(&x, c));
}

int ember_graph_size_op(ember_graph *eg, int op, int a, int b) {
  Graph *g = &eg->g;
  static const char *const names[] = {"+", "*", "//", "%", "min", "max"};
  if (op < EMBER_SIZE_ADD || op > EMBER_SIZE_MAX) return graph_error(g, NULL, "size operation %d is unknown", op);
  Expr *ea = graph_size_expr(g, a), *eb = graph_size_expr(g, b);
  if (!ea || !eb)
    return graph_error(g, NULL, "size operation %s: no size handle %d", names[op], ea ? b : a);
  if ((op == EMBER_SIZE_FLOORDIV || op == EMBER_SIZE_MOD) && eb->lo < 1)
    return graph_error(g, NULL, "size operation %s: the divisor may be %lld", names[op], (long long)eb->lo);
  int64_t prod;
  if (op == EMBER_SIZE_MUL && ea->kind == E_CONST && eb->kind == E_CONST &&
      (__builtin_mul_overflow(ea->c, eb->c, &prod) || prod > EX_INF / 4 || prod < -EX_INF / 4))
    return graph_error(g, NULL, "size operation *: the product is too large");
  ExprCtx x;
  graph_size_ctx(g, &x);
  Expr *e = NULL;
  switch (op) {
  case EMBER_SIZE_ADD: e = ex_add(&x, ea, eb); break;
  case EMBER_SIZE_MUL: e = ex_mul_e(&x, ea, eb); break;
  case EMBER_SIZE_FLOORDIV: e = ex_div_e(&x, ea, eb); break;
  case EMBER_SIZE_MOD: e = ex_mod_e(&x, ea, eb); break;
  case EMBER_SIZE_MIN: e = ex_min_e(&x, ea, eb); break;
  case EMBER_SIZE_MAX: e = ex_max_e(&x, ea, eb); break;
  }
  return size_handle(g, e);
}

int ember_graph_sym_from_input(ember_graph *eg, int sym, int input, int dim) {
  Graph *g = &eg->g;
  Expr *e = graph_size_expr(g, sym);
  if (!e || e->kind != E_SYM)
    return graph_error(g, NULL, "sym_from_input: size handle %d is not a size variable", sym);
  if (input < 0 || dim < 0 || dim >= MAXD)
    return graph_error(g, NULL, "sym_from_input: %s: no input %d dim %d", graph_sym_name(g, e->var), input, dim);
  g->sym_input[e->var] = input, g->sym_dim[e->var] = dim;
  return EMBER_OK;
}

int ember_graph_is_symbolic(const ember_graph *eg) { return eg->g.symbolic; }

/* Value v's meta as constant expressions, from its integers (a static value,
   or one a pass gave new strides).  0, or a status. */
int value_const_exprs(Graph *g, Value *v) {
  ExprCtx x;
  graph_size_ctx(g, &x);
  for (int d = 0; d < v->ndim; d++) v->ssize[d] = ex_const(&x, v->size[d]), v->sstride[d] = ex_const(&x, v->stride[d]);
  v->soffset = ex_const(&x, v->offset);
  v->snumel = ex_const(&x, v->numel);
  v->symbolic = 0;
  return g->pool.oom ? oom(g) : EMBER_OK;
}

/* A new value with its dtype, device and rank checked, appended to g: NULL
   with g's error set. */
static Value *new_value(Graph *g, int dtype, int device, int ndim) {
  if (dtype < 0 || dtype >= EMBER_NDTYPE) {
    graph_error(g, NULL, "value %d: unknown dtype code %d", g->nvalues, dtype);
    return NULL;
  }
  if (device < 0 || device > EMBER_OTHER_DEVICE) {
    graph_error(g, NULL, "value %d: unknown device code %d", g->nvalues, device);
    return NULL;
  }
  if (ndim < 0 || ndim > MAXD) {
    graph_error(g, NULL, "value %d: rank %d is outside 0..%d", g->nvalues, ndim, MAXD);
    return NULL;
  }
  Value *v = NULL;
  if (!grow((void **)&g->values, &g->cap_values, g->nvalues + 1, sizeof(Value *)) ||
      !(v = pool_alloc(&g->pool, sizeof *v))) {
    oom(g);
    return NULL;
  }
  v->id = g->nvalues;
  v->dtype = dtype, v->device = device, v->ndim = ndim;
  v->root = v->id;
  v->into = -1;
  v->kernel = -1;
  return v;
}

int graph_value_like(Graph *g, const Value *like) {
  Value *v = new_value(g, like->dtype, like->device, like->ndim);
  if (!v) return EMBER_EINVAL;
  for (int d = 0; d < like->ndim; d++) {
    v->size[d] = like->size[d], v->stride[d] = like->stride[d];
    v->ssize[d] = like->ssize[d], v->sstride[d] = like->sstride[d];
  }
  ExprCtx x;
  graph_size_ctx(g, &x);
  v->soffset = ex_const(&x, 0);
  if (g->pool.oom) return oom(g);
  v->offset = 0;
  v->numel = like->numel, v->snumel = like->snumel;
  v->symbolic = like->symbolic;  /* its strides are the caller's to set */
  g->values[g->nvalues++] = v;
  return v->id;
}

int ember_graph_value_sym(ember_graph *eg, int dtype, int device, int ndim, const int *sizes, const int *strides,
                          int offset) {
  Graph *g = &eg->g;
  if (ndim > 0 && (!sizes || !strides))
    return graph_error(g, NULL, "value %d: sizes or strides missing", g->nvalues);
  Value *v = new_value(g, dtype, device, ndim);
  if (!v) return EMBER_EINVAL;
  Expr *off = graph_size_expr(g, offset);
  if (!off) return graph_error(g, NULL, "value %d: no size handle %d for its offset", g->nvalues, offset);
  if (off->lo < 0) return graph_error(g, NULL, "value %d: storage offset may be negative", g->nvalues);
  ExprCtx x;
  graph_size_ctx(g, &x);
  Expr *numel = ex_const(&x, 1);
  int symbolic = off->kind != E_CONST;
  int64_t n = 1;  /* the number of elements where every size is a constant */
  for (int d = 0; d < ndim; d++) {
    Expr *sz = graph_size_expr(g, sizes[d]), *st = graph_size_expr(g, strides[d]);
    if (!sz || !st)
      return graph_error(g, NULL, "value %d: no size handle %d in dim %d", g->nvalues, sz ? strides[d] : sizes[d], d);
    if (sz->lo < 0 || st->lo < 0)
      return graph_error(g, NULL, "value %d: size or stride may be negative in dim %d", g->nvalues, d);
    if (sz->kind == E_CONST && sz->c > SIZE_CONST_MAX)
      return graph_error(g, NULL, "value %d: size or stride too large in dim %d", g->nvalues, d);
    v->ssize[d] = sz, v->sstride[d] = st;
    v->size[d] = sz->kind == E_CONST ? sz->c : -1;
    v->stride[d] = st->kind == E_CONST ? st->c : -1;
    symbolic |= sz->kind != E_CONST || st->kind != E_CONST;
    if (sz->kind == E_CONST && sz->c && n > (((int64_t)1 << 42) / sz->c))
      return graph_error(g, NULL, "value %d: too many elements", g->nvalues);
    n = sz->kind == E_CONST && n >= 0 ? n * sz->c : -1;
    numel = ex_mul_e(&x, numel, sz);
  }
  if (g->pool.oom) return oom(g);
  v->soffset = off;
  v->offset = off->kind == E_CONST ? off->c : -1;
  v->snumel = numel;
  v->numel = numel->kind == E_CONST ? numel->c : -1;
  v->symbolic = symbolic;
  g->symbolic |= symbolic;
  g->values[g->nvalues++] = v;
  return v->id;
}

int ember_graph_value(ember_graph *eg, int dtype, int device, int ndim, const int64_t *sizes,
                      const int64_t *strides, int64_t storage_offset) {
  Graph *g = &eg->g;
  if (dtype < 0 || dtype >= EMBER_NDTYPE)
    return graph_error(g, NULL, "value %d: unknown dtype code %d", g->nvalues, dtype);
  if (device < 0 || device > EMBER_OTHER_DEVICE)
    return graph_error(g, NULL, "value %d: unknown device code %d", g->nvalues, device);
  if (ndim < 0 || ndim > MAXD)
    return graph_error(g, NULL, "value %d: rank %d is outside 0..%d", g->nvalues, ndim, MAXD);
  if (ndim > 0 && (!sizes || !strides))
    return graph_error(g, NULL, "value %d: sizes or strides missing", g->nvalues);
  if (storage_offset < 0)
    return graph_error(g, NULL, "value %d: negative storage offset", g->nvalues);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0 || strides[d] < 0)
      return graph_error(g, NULL, "value %d: negative size or stride in dim %d", g->nvalues, d);
    if (sizes[d] > ((int64_t)1 << 40) || strides[d] > ((int64_t)1 << 40))
      return graph_error(g, NULL, "value %d: size or stride too large in dim %d", g->nvalues, d);
    if (sizes[d] && numel > (((int64_t)1 << 42) / sizes[d]))  /* checked before multiplying: no overflow */
      return graph_error(g, NULL, "value %d: too many elements", g->nvalues);
    numel *= sizes[d];
  }
  if (!grow((void **)&g->values, &g->cap_values, g->nvalues + 1, sizeof(Value *))) return oom(g);
  Value *v = pool_alloc(&g->pool, sizeof *v);
  if (!v) return oom(g);
  v->id = g->nvalues;
  v->dtype = dtype, v->device = device, v->ndim = ndim;
  for (int d = 0; d < ndim; d++) v->size[d] = sizes[d], v->stride[d] = strides[d];
  v->offset = storage_offset;
  v->numel = numel;
  v->root = v->id;
  v->into = -1;
  v->kernel = -1;
  if (value_const_exprs(g, v)) return EMBER_ENOMEM;
  g->values[g->nvalues++] = v;
  return v->id;
}

int ember_graph_input(ember_graph *eg, int vid) {
  Graph *g = &eg->g;
  if (vid < 0 || vid >= g->nvalues)
    return graph_error(g, NULL, "input: no value %d", vid);
  Value *v = g->values[vid];
  if (v->is_input || v->def)
    return graph_error(g, NULL, "input: value %d is already defined", vid);
  if (!grow((void **)&g->inputs, &g->cap_inputs, g->ninputs + 1, sizeof(int))) return oom(g);
  v->is_input = 1;
  g->inputs[g->ninputs++] = vid;
  return EMBER_OK;
}

static int copy_arg(Graph *g, Node *n, ember_arg *dst, const ember_arg *src) {
  *dst = *src;
  dst->name = pool_strdup(&g->pool, src->name);
  dst->s = pool_strdup(&g->pool, src->s);
  dst->list = NULL;
  if (src->kind == EMBER_ARG_INTS || src->kind == EMBER_ARG_TENSORS || src->kind == EMBER_ARG_SIZES) {
    if (src->n < 0 || src->n > 100000 || (src->n > 0 && !src->list))
      return graph_error(g, n, "argument list of bad length %d", src->n);
    int64_t *l = pool_alloc(&g->pool, sizeof(int64_t) * (src->n + 1));
    if (!l) return oom(g);
    if (src->n) memcpy(l, src->list, sizeof(int64_t) * src->n);
    dst->list = l;
  }
  if (src->kind == EMBER_ARG_TENSOR) {
    if (src->i < 0 || src->i >= g->nvalues)
      return graph_error(g, n, "argument names value %lld, which does not exist", (long long)src->i);
    const Value *v = g->values[src->i];
    if (!v->is_input && !v->def)
      return graph_error(g, n, "argument value %lld is used before any node defines it", (long long)src->i);
  }
  if (src->kind == EMBER_ARG_TENSORS)
    for (int k = 0; k < src->n; k++) {
      if (src->list[k] == -1) continue;  /* None in a Tensor?[] */
      if (src->list[k] < 0 || src->list[k] >= g->nvalues)
        return graph_error(g, n, "argument list names value %lld, which does not exist",
                           (long long)src->list[k]);
      const Value *v = g->values[src->list[k]];
      if (!v->is_input && !v->def)
        return graph_error(g, n, "argument list value %lld is used before any node defines it",
                           (long long)src->list[k]);
    }
  if (src->kind == EMBER_ARG_SIZE && !graph_size_expr(g, src->i))
    return graph_error(g, n, "argument names size handle %lld, which does not exist", (long long)src->i);
  if (src->kind == EMBER_ARG_SIZE && graph_size_expr(g, src->i)->kind != E_CONST)
    g->symbolic = 1;  /* a size only an argument names (x * n, n a number Dynamo passes) */
  if (src->kind == EMBER_ARG_SIZES)
    for (int k = 0; k < src->n; k++) {
      Expr *e = graph_size_expr(g, src->list[k]);
      if (!e)
        return graph_error(g, n, "argument list names size handle %lld, which does not exist",
                           (long long)src->list[k]);
      g->symbolic |= e->kind != E_CONST;
    }
  if (src->kind < EMBER_ARG_NONE || src->kind > EMBER_ARG_SIZES)
    return graph_error(g, n, "argument of unknown kind %d", src->kind);
  return EMBER_OK;
}

/* The node as handed in, checked and appended; ember_graph_node (expand.c)
   then puts a composite op's formula in its place. */
int graph_node(Graph *g, const char *op, const char *name, int nargs, const ember_arg *args, int nouts,
               const int *outs) {
  if (!op || !*op) return graph_error(g, NULL, "node %s: empty op name", name ? name : "?");
  if (nargs < 0 || nargs > 64 || (nargs && !args))
    return graph_error(g, NULL, "node %s (%s): bad argument count %d", name ? name : "?", op, nargs);
  if (nouts < 0 || nouts > 64 || (nouts && !outs))
    return graph_error(g, NULL, "node %s (%s): bad output count %d", name ? name : "?", op, nouts);
  if (!grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof(Node *))) return oom(g);
  Node *n = pool_alloc(&g->pool, sizeof *n);
  if (!n) return oom(g);
  n->id = g->nnodes;
  n->opname = pool_strdup(&g->pool, op);
  n->name = pool_strdup(&g->pool, name ? name : "");
  n->op = em_op_lookup(op);
  n->nargs = nargs;
  n->args = pool_alloc(&g->pool, sizeof(ember_arg) * (nargs + 1));
  n->outs = pool_alloc(&g->pool, sizeof(int) * (nouts + 1));
  if (!n->args || !n->outs || !n->opname || !n->name) return oom(g);
  for (int i = 0; i < nargs; i++) {
    int rc = copy_arg(g, n, &n->args[i], &args[i]);
    if (rc) return rc;
  }
  for (int i = 0; i < nouts; i++) {
    if (outs[i] < 0 || outs[i] >= g->nvalues)
      return graph_error(g, n, "output %d names value %d, which does not exist", i, outs[i]);
    Value *v = g->values[outs[i]];
    if (v->def || v->is_input)
      return graph_error(g, n, "output %d (value %d) is already defined", i, outs[i]);
    v->def = n, v->def_out = i;
    n->outs[i] = outs[i];
  }
  n->nouts = nouts;
  n->form = -1;
  n->red_in = -1;
  g->nodes[g->nnodes++] = n;
  return n->id;
}

/* A node the compiler makes (split.c): appended to g->nodes with one
   tensor argument `in` and one result `out`, not yet lowered; the caller
   fills in its lowering.  NULL when out of memory (g->err says so). */
Node *graph_add_node(Graph *g, const char *op, const char *name, int in, int out) {
  Node *n = pool_alloc(&g->pool, sizeof *n);
  if (!n || !grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof(Node *))) {
    oom(g);
    return NULL;
  }
  n->id = g->nnodes;
  n->made = 1;
  n->opname = op;
  n->name = name;
  n->op = em_op_lookup(op);
  n->nargs = 1;
  n->args = pool_alloc(&g->pool, sizeof(ember_arg) * 2);
  n->outs = pool_alloc(&g->pool, sizeof(int) * 2);
  if (!n->args || !n->outs) {
    oom(g);
    return NULL;
  }
  n->args[0] = (ember_arg){0};
  n->args[0].kind = EMBER_ARG_TENSOR, n->args[0].i = in, n->args[0].name = "self";
  n->outs[0] = out;
  n->nouts = 1;
  n->form = -1;
  n->red_in = -1;
  g->values[out]->def = n, g->values[out]->def_out = 0;
  g->nodes[g->nnodes++] = n;
  return n;
}

int ember_graph_node_noalias(ember_graph *eg, int node) {
  Graph *g = &eg->g;
  if (node < 0 || node >= g->nnodes) return graph_error(g, NULL, "noalias: node %d does not exist", node);
  g->nodes[node]->noalias = 1;
  return EMBER_OK;
}

int ember_graph_outputs(ember_graph *eg, int n, const int *vals) {
  Graph *g = &eg->g;
  if (n < 0 || (n && !vals)) return graph_error(g, NULL, "outputs: bad count %d", n);
  int *o = em_malloc(sizeof(int) * (n + 1));
  if (!o) return oom(g);
  for (int i = 0; i < n; i++) {
    if (vals[i] < -1 || vals[i] >= g->nvalues) {
      free(o);
      return graph_error(g, NULL, "output %d names value %d, which does not exist", i, vals[i]);
    }
    o[i] = vals[i];
  }
  free(g->outputs);
  g->outputs = o, g->noutputs = n;
  return EMBER_OK;
}
