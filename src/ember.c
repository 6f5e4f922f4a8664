/*
 * ember.c - the driver.  ember_compile runs the passes of the table below in
 * order, then codegen; then it makes the Program from the graph
 * (program_make: what running needs, copied), builds the kernels into it
 * and frees the graph, so that the compiled program keeps nothing of the
 * compiler's IR.  With a dump folder (the debug option) the IR is written
 * after each pass (after_<pass>.txt) and after planning as graph.txt, and the
 * source beside them, all before the graph goes; the verifier (verify.c)
 * checks the IR after each pass in debug builds and with a dump folder.  The
 * ember_program_* functions are program.c's and run.c's.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember_int.h"


static const char *storage_names[] = {"fused", "input", "host", "fallback", "arena", "view", "into"};

/* A symbolic value's meta: sizes, strides and offset as expressions. */
static void dump_sym_value(const Value *v, Str *b) {
  str_puts(b, "[");
  for (int d = 0; d < v->ndim; d++) str_puts(b, d ? ", " : ""), ex_print(b, v->ssize[d], NULL);
  str_puts(b, "] strides (");
  for (int d = 0; d < v->ndim; d++) str_puts(b, d ? ", " : ""), ex_print(b, v->sstride[d], NULL);
  str_puts(b, ") +");
  ex_print(b, v->soffset, NULL);
}

void dump_graph(Graph *g, Str *b) {
  str_puts(b, "# ember graph: values, nodes as lowered, kernels and steps\n\n");
  if (g->syms.n) {
    str_puts(b, "## size variables\n");
    for (int s = 0; s < g->syms.n; s++) {
      str_printf(b, "s%d = %s in [%lld, ", s, graph_sym_name(g, s), (long long)g->syms.lo[s]);
      if (g->syms.hi[s] >= EX_INF) str_puts(b, "inf]");
      else str_printf(b, "%lld]", (long long)g->syms.hi[s]);
      if (g->sym_input[s] >= 0) str_printf(b, ", input %d dim %d", g->sym_input[s], g->sym_dim[s]);
      str_puts(b, "\n");
    }
    str_puts(b, "\n");
  }
  str_puts(b, "## values\n");
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
    if (v->symbolic) {
      str_printf(b, "v%-4d %-8s ", i, dtype_name(v->dtype));
      dump_sym_value(v, b);
      str_printf(b, "  %s", v->local ? "register" : storage_names[v->storage]);
      if (v->root != i) str_printf(b, " of v%d", v->root);
      if (v->storage == ST_ARENA) str_printf(b, " (placed per call, steps %d..%d)", v->first_step, v->last_step);
      if (v->def) str_printf(b, "  <- %s", v->def->name);
      if (v->layout_kept) str_printf(b, "  (%s)", v->layout_kept);
      str_puts(b, "\n");
      continue;
    }
    str_printf(b, "v%-4d %-8s [", i, dtype_name(v->dtype));
    for (int d = 0; d < v->ndim; d++) str_printf(b, "%s%lld", d ? ", " : "", (long long)v->size[d]);
    str_puts(b, "] strides (");
    for (int d = 0; d < v->ndim; d++) str_printf(b, "%s%lld", d ? ", " : "", (long long)v->stride[d]);
    str_printf(b, ") +%lld  %s", (long long)v->offset, v->local ? "register" : storage_names[v->storage]);
    if (v->root != i) str_printf(b, " of v%d", v->root);
    if (v->into >= 0) str_printf(b, " v%d", v->into);
    if (v->storage == ST_ARENA) str_printf(b, " @%zu (%zu B, steps %d..%d)", v->arena_off, v->nbytes, v->first_step, v->last_step);
    if (v->def) str_printf(b, "  <- %s", v->def->name);
    str_puts(b, "\n");
  }
  str_puts(b, "\n## nodes\n");
  for (int i = 0; i < (g->order ? g->norder : g->nnodes); i++) {
    Node *n = g->order ? g->order[i] : g->nodes[i];
    str_printf(b, "%-20s %-32s", n->name, n->opname);
    if (n->form < 0) str_printf(b, n->reason ? " FALLBACK (%s)" : " (not lowered)", n->reason);
    if (n->form == F_EPILOGUE) str_printf(b, " EPILOGUE of %s", g->nodes[n->epi_of]->name);
    str_puts(b, " ->");
    for (int k = 0; k < n->nouts; k++) str_printf(b, " v%d", n->outs[k]);
    str_puts(b, "\n");
  }
  str_puts(b, "\n## steps (kernels are fusion groups)\n");
  for (int s = 0; s < g->nsteps; s++) {
    Step *st = &g->steps[s];
    if (st->kind == EMBER_STEP_FALLBACK) {
      Node *n = g->nodes[st->index];
      str_printf(b, "%3d  fallback %s = %s\n", s, n->name, n->opname);
      continue;
    }
    Kernel *k = g->kernels[st->index];
    if (k->lib) {  /* the call, then the nodes its epilogue does */
      str_printf(b, "%3d  %s%s ember_k%d: %s", s, matmul_api_name(k->call), matmul_epilogue_name(k->call), k->id,
                 k->call->name);
      for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->form == F_EPILOGUE && g->nodes[i]->epi_of == k->call->id)
          str_printf(b, " %s", g->nodes[i]->name);
      str_printf(b, " -> v%d", k->call->mm_out);
      static const char *const mats[3] = {"A", "B", "result"};
      for (int i = 0; i < 3; i++)  /* lower.c, matmul_pad */
        if (k->call->mm_pad[i]) str_printf(b, "; %s through a copy padded to ld %lld", mats[i],
                                           (long long)k->call->mm_pad[i]);
      if (k->call->mm_ncall) str_printf(b, ", %lld columns computed", (long long)k->call->mm_ncall);
      if (k->call->mm_ncall && k->call->mm_sx[0])
        str_printf(b, " where the result takes at least %lld bytes at the call's m, else in place",
                   (long long)PAD_MIN_BYTES);
      if (k->call->mm_sx[0]) {  /* symbolic: what run.c evaluates per call */
        static const char *const names[MM_NSX] = {"m", "n", "k", "batch", "lda", "ldb", "ldc", "sa", "sb", "sc"};
        str_puts(b, "; per call");
        for (int i = 0; i < MM_NSX; i++) str_printf(b, " %s=", names[i]), ex_print(b, k->call->mm_sx[i], NULL);
      }
      str_puts(b, "\n");
      continue;
    }
    str_printf(b, "%3d  kernel ember_k%d:", s, k->id);
    static const char *kinds[] = {"store", "reduce", "outer"};
    for (int i = 0; i < k->nitems; i++) {
      const Value *v = g->values[k->items[i].v];
      str_printf(b, " %s(%s", v->def->name, kinds[k->items[i].kind]);
      if (v->permuted) {  /* its dims as the kernel's: (store, dims 0 2 1) */
        str_puts(b, ", dims");
        for (int d = 0; d < v->ndim; d++) str_printf(b, " %d", v->item_perm[d]);
      }
      str_puts(b, ")");
    }
    str_puts(b, "\n");
  }
}

/* ---------------------------------------------------------------- the program */

static char *cp(Program *p, const char *s) { return s ? pool_strdup(&p->pool, s) : NULL; }

static void *cpy(Program *p, const void *src, size_t n) {
  void *d = pool_alloc(&p->pool, n + 1);
  if (d && n) memcpy(d, src, n);
  return d;
}

/* Expression e copied into the program's pool (NULL when out of memory). */
static Expr *copy_expr(Program *p, const Expr *e) {
  Expr *c = pool_alloc(&p->pool, sizeof *c);
  if (!c) return NULL;
  *c = *e;
  if (e->a && !(c->a = copy_expr(p, e->a))) return NULL;
  if (e->b && !(c->b = copy_expr(p, e->b))) return NULL;
  return c;
}

Program *program_make(Graph *g) {
  Program *p = program_new();
  if (!p) {
    graph_error(g, NULL, "out of memory making the program");
    return NULL;
  }
  Pool *pl = &p->pool;
  p->target = g->target;
  p->build_only = g->opt.build_only;
  p->nvalues = g->nvalues;
  p->values = pool_alloc(pl, sizeof *p->values * (size_t)(g->nvalues + 1));
  for (int i = 0; p->values && i < g->nvalues; i++) {
    const Value *v = g->values[i];
    PValue *pv = &p->values[i];
    pv->storage = v->storage;
    pv->dtype = v->dtype, pv->device = v->device, pv->ndim = v->ndim;
    pv->elsize = dtype_size(v->dtype);
    memcpy(pv->size, v->size, sizeof v->size), memcpy(pv->stride, v->stride, sizeof v->stride);
    pv->offset = v->offset;
    pv->root = v->root;
    pv->root_delta = v->offset - g->values[v->root]->offset;
    pv->into = v->into;
    pv->arena_off = v->arena_off, pv->nbytes = v->nbytes;
    pv->first_step = v->first_step, pv->last_step = v->last_step;
    pv->drop_step = v->drop_step;
    pv->host_alloc = v->host_alloc, pv->host_bytes = v->host_bytes, pv->block_off = v->block_off;
    pv->needs_tensor = v->fb_use || v->is_output;
    const Value *r = g->values[v->root];
    if (v->symbolic || r->symbolic) {  /* sizes, strides, offset: evaluated per call */
      pv->sx = pool_alloc(pl, sizeof(Expr *) * (size_t)(2 * v->ndim + 2));
      for (int d = 0; pv->sx && d < v->ndim; d++)
        pv->sx[d] = copy_expr(p, v->ssize[d]), pv->sx[v->ndim + d] = copy_expr(p, v->sstride[d]);
      if (pv->sx) pv->sx[2 * v->ndim] = copy_expr(p, v->soffset);
      pv->root_delta = 0;
    }
  }
  p->nsyms = g->symbolic ? g->syms.n : 0;
  p->nnodes = g->nnodes;
  p->nodes = pool_alloc(pl, sizeof *p->nodes * (size_t)(g->nnodes + 1));
  int nicodes = 0;
  for (int i = 0; p->nodes && i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    PNode *pn = &p->nodes[i];
    pn->op = cp(p, n->opname), pn->name = cp(p, n->name), pn->reason = cp(p, n->reason);
    pn->nargs = n->nargs;
    pn->arg_v = pool_alloc(pl, sizeof(int) * (size_t)(n->nargs + 1));
    for (int a = 0; pn->arg_v && a < n->nargs; a++)
      pn->arg_v[a] = n->args[a].kind == EMBER_ARG_TENSOR ? (int)n->args[a].i : -1;
    pn->nouts = n->nouts;
    pn->outs = cpy(p, n->outs, sizeof(int) * (size_t)n->nouts);
    if (n->form == F_GATHER) nicodes += n->gndim;
  }
  /* the gathers' codes for an index out of range, as lower.c made them */
  p->icodes = pool_alloc(pl, sizeof *p->icodes * (size_t)(nicodes + 1));
  for (int i = 0; p->icodes && i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->form != F_GATHER) continue;
    for (int d = 0; d < n->gndim; d++)
      p->icodes[p->nicodes++] = (PIndexCode){gather_error_code(n, d), n->id, d, n->gsize[d]};
  }
  p->nkernels = g->nkernels;
  p->kernels = pool_alloc(pl, sizeof *p->kernels * (size_t)(g->nkernels + 1));
  p->calls = pool_alloc(pl, sizeof *p->calls * (size_t)(g->nkernels + 1));
  for (int i = 0; p->kernels && p->calls && i < g->nkernels; i++) {
    const Kernel *k = g->kernels[i];
    PKernel *pk = &p->kernels[i];
    EM_ASSERT(k->id == i);
    const Value *v = k->nitems ? g->values[k->items[0].v] : NULL;
    pk->what = cp(p, v && v->def ? v->def->name : "?");
    pk->index_checks = k->index_checks;
    memcpy(pk->grid, k->grid, sizeof k->grid), memcpy(pk->block, k->block, sizeof k->block);
    if (k->sgrid) pk->sgrid = copy_expr(p, k->sgrid);  /* NULL only when out of memory: pl->oom */
    if (k->sblock) pk->sblock = copy_expr(p, k->sblock);
    if (k->svec) pk->svec = copy_expr(p, k->svec);
    if (k->swide) pk->swide = copy_expr(p, k->swide);
    pk->nbodies = k->nbodies ? k->nbodies : 1;  /* the CPU's kernels and library calls: one */
    if (k->sbody) pk->sbody = copy_expr(p, k->sbody);
    memcpy(pk->bblock, k->bblock, sizeof k->bblock);
    pk->nparams = k->nparams;
    pk->params = cpy(p, k->params, sizeof(int) * (size_t)k->nparams);
    pk->nalign = k->nalign;
    pk->align = cpy(p, k->align, sizeof(AlignCheck) * (size_t)k->nalign);
    if (k->alt_len) {  /* the variant's text, compiled when a launch first needs it */
      pk->alt = pool_printf(pl, "%.*s", (int)k->alt_len, g->source + k->alt_off);
      pk->alt_len = k->alt_len;
    }
    pk->rep = i;
    pk->call = -1;
    pk->scratch_off = k->scratch_off;
    if (!k->lib) continue;
    const Node *n = k->call;
    const Value *out = g->values[n->mm_out];
    PCall *c = &p->calls[p->ncalls];
    pk->lib = 1, pk->call = p->ncalls++;
    c->node = n->id;
    c->what = pool_printf(pl, "%s%s", matmul_api_name(n), matmul_epilogue_name(n));
    c->dtype = out->dtype, c->ta = n->mm_ta, c->tb = n->mm_tb, c->epi = n->mm_epi,
    c->api = n->mm_api | (g->opt.tune_gemms ? BLAS_TUNE : 0);
    c->a = n->mm_a, c->b = n->mm_b, c->out = n->mm_out, c->bias = n->mm_bias;
    c->m = n->mm_m, c->n = n->mm_ncall ? n->mm_ncall : n->mm_n, c->k = n->mm_k, c->batch = n->mm_batch;
    matmul_store(n, dtype_size(out->dtype), c->ms);
    if (n->mm_sx[0]) {  /* symbolic: the sizes at each call (run.c) */
      c->sx = pool_alloc(pl, sizeof(Expr *) * MM_NSX);
      for (int j = 0; c->sx && j < MM_NSX; j++) c->sx[j] = copy_expr(p, n->mm_sx[j]);
    }
  }
  p->nsteps = g->nsteps;
  p->steps = cpy(p, g->steps, sizeof(Step) * (size_t)g->nsteps);
  p->ninputs = g->ninputs;
  p->inputs = cpy(p, g->inputs, sizeof(int) * (size_t)g->ninputs);
  p->noutputs = g->noutputs;
  p->outputs = cpy(p, g->outputs, sizeof(int) * (size_t)g->noutputs);
  p->arena_bytes = g->arena_bytes, p->ws_off = g->ws_off, p->ws_bytes = g->ws_bytes;
  p->index_checks = g->index_checks;
  p->source = cp(p, g->source ? g->source : "");
  p->src_head = g->src_head;
  char cache[4096];
  p->cache_dir = cp(p, em_cache_dir(&g->opt, cache, sizeof cache));
  if (g->opt.dump_dir && *g->opt.dump_dir) p->dump_dir = cp(p, g->opt.dump_dir);
  if (g->opt.tune_gemms && p->ncalls) ember_gemm_cache_dir(p->cache_dir);  /* where the tuned choices are kept */
  p->cuda_sm = (int)g->opt.cuda_sm;
  if (pl->oom || !p->values || !p->nodes || !p->icodes || !p->kernels || !p->calls) {
    program_free(p);
    graph_error(g, NULL, "out of memory making the program");
    return NULL;
  }
  return p;
}

static int write_file(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* The passes, in the order they run; each returns a status.  Their times
   add up to the report's field at ms_off. */
typedef struct Pass {
  const char *name;
  int (*run)(Graph *g);
  size_t ms_off;
} Pass;
static const Pass passes[] = {
    {"lower", lower, offsetof(ember_report, lower_ms)},           /* lower.c: ops become loop expressions */
    {"layout", plan_layouts, offsetof(ember_report, fuse_ms)},     /* layout.c: the run order, channels-last
                                                                      around convolutions */
    {"split", split_reductions, offsetof(ember_report, fuse_ms)},  /* split.c: two-stage reductions, as laid out */
    {"fuse", fuse, offsetof(ember_report, fuse_ms)},               /* fuse.c: kernels and steps */
    {"plan", plan, offsetof(ember_report, plan_ms)},               /* plan.c: storage, lifetimes, the arena */
};

#ifdef NDEBUG
#define VERIFY_ALWAYS 0
#else
#define VERIFY_ALWAYS 1  /* debug builds (the C tests) check the IR after every pass */
#endif

static void dump(Graph *g, const char *stage_name) {
  if (!g->opt.dump_dir || !*g->opt.dump_dir) return;
  mkdir(g->opt.dump_dir, 0755);
  Str b = {0};
  dump_graph(g, &b);
  if (b.s) write_file(g->opt.dump_dir, stage_name, b.s);
  str_free(&b);
}

/* The generated source in the dump folder: the kernels (kernels.c or
   kernels.cu) first, #including the runtime header written beside them
   (prelude.h or prelude.cuh), so the file opens on the model's code. */
static void dump_source(Graph *g, const char *src) {
  int cuda = g->target == EMBER_CUDA;
  const char *pre = cuda ? "prelude.cuh" : "prelude.h";
  Str b = {0};
  str_printf(&b, "%.*s", (int)g->src_head, src);
  if (b.s) write_file(g->opt.dump_dir, pre, b.s);
  str_free(&b);
  str_printf(&b, "/* The kernels of one graph, generated by ember: each kernel's comment says what it computes,\n"
                 "   each line names the FX node it comes from. */\n#include \"%s\"  /* ember's runtime header (the "
                 "em_* functions), beside this file */\n%s", pre, src + g->src_head);
  if (b.s) write_file(g->opt.dump_dir, cuda ? "kernels.cu" : "kernels.c", b.s);
  str_free(&b);
}

ember_program *ember_compile(ember_graph *eg, const ember_options *opt, char *err, size_t errlen) {
  double t0 = em_now_ms();
  Graph *g = &eg->g;
  ember_options *own = NULL;
  if (!opt) {
    own = ember_options_new();
    if (own && ember_options_read_env(own)) {
      snprintf(g->err, sizeof g->err, "%s", ember_options_error(own));
      g->failed = 1;
    }
    opt = own;
  }
  if (!opt || em_options_copy(&g->opt, em_options_of(opt), &g->pool)) {
    snprintf(g->err, sizeof g->err, "ember: out of memory reading the options");
    g->failed = 1;
    memset(&g->opt, 0, sizeof g->opt);
  }
  ember_options_free(own);
  int rc = g->failed ? EMBER_EINVAL : EMBER_OK;
  for (int i = 0; i < g->noutputs && !rc; i++) {
    int v = g->outputs[i];
    if (v >= g->nvalues) rc = graph_error(g, NULL, "output %d names a value that does not exist", i);
    else if (v >= 0 && !g->values[v]->is_input && !g->values[v]->def)
      rc = graph_error(g, NULL, "output %d (value %d) is never defined by a node or input", i, v);
  }
  int dumps = g->opt.dump_dir && *g->opt.dump_dir, check = VERIFY_ALWAYS || dumps;
  if (!rc && check) rc = verify(g, "build");
  for (size_t i = 0; i < sizeof passes / sizeof passes[0] && !rc; i++) {
    double t = em_now_ms();
    rc = passes[i].run(g);
    *(double *)((char *)&g->report + passes[i].ms_off) += em_now_ms() - t;
    if (!rc && check) rc = verify(g, passes[i].name);
    if (dumps && i + 1 < sizeof passes / sizeof passes[0]) {
      char name[64];
      snprintf(name, sizeof name, "after_%s.txt", passes[i].name);
      dump(g, name);
    }
  }
  dump(g, "graph.txt");
  Str src = {0};
  double t = em_now_ms();
  if (!rc) rc = codegen(g, &src);
  g->report.codegen_ms = em_now_ms() - t;
  if (!rc && src.oom) rc = graph_error(g, NULL, "out of memory in code generation");
  if (!rc && !(g->source = pool_strdup(&g->pool, src.s ? src.s : "")))
    rc = graph_error(g, NULL, "out of memory in code generation");
  if (!rc) {
    if (dumps && src.s) dump_source(g, src.s);
  }
  g->report.nodes = 0;
  for (int i = 0; i < g->nnodes; i++) g->report.nodes += !g->nodes[i]->made && g->nodes[i]->part <= 1;
  for (int i = 0; i < g->nkernels; i++) {
    if (g->kernels[i]->lib) g->report.library_calls++;
    else g->report.kernels++;
  }
  g->report.distinct_kernels = 0;  /* C kernels of the same code share one body (codegen_c.c); CUDA: build_cuda.c */
  for (int i = 0; i < g->nkernels; i++) g->report.distinct_kernels += !g->kernels[i]->lib && g->kernels[i]->same_as == i;
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i]->made || g->nodes[i]->part > 1) continue;  /* an expanded op counts once */
    if (g->nodes[i]->form < 0) g->report.fallbacks++;
    else if (g->nodes[i]->form != F_MATMUL) g->report.fused_ops++;
    if (g->nodes[i]->form == F_EPILOGUE) g->report.epilogue_ops++;  /* fused into a library call */
  }
  Program *p = NULL;
  if (!rc && !(p = program_make(g))) rc = EMBER_ENOMEM;
  if (!rc && g->nkernels > 0 && g->target == EMBER_CUDA) {
    rc = build_cuda(g, p);
  } else if (!rc && g->nkernels > 0 && !g->opt.build_only) {
    /* library steps (CPU matmuls, blas_cpu.c) have no code in the object: the cache does not ask for them */
    unsigned char *lib = em_malloc((size_t)g->nkernels);
    if (!lib) rc = graph_error(g, NULL, "out of memory");
    for (int i = 0; lib && i < g->nkernels; i++) lib[i] = g->kernels[i]->lib != 0;
    size_t *cuts = em_malloc(sizeof(size_t) * (size_t)g->nkernels);
    int ncuts = 0;
    for (int i = 0; cuts && i < g->nkernels; i++)
      if (g->kernels[i]->src_len) cuts[ncuts++] = g->kernels[i]->src_off;
    BuildOpts bo = {.cc = g->opt.cc, .cflags = g->opt.cflags, .ldflags = g->opt.ldflags, .cache_dir = p->cache_dir,
                    .timeout_s = (double)g->opt.compile_timeout, .nkernels = g->nkernels, .lib = lib,
                    .warn = p->warn, .warnlen = sizeof p->warn, .head = cuts ? g->src_head : 0, .cuts = cuts,
                    .ncuts = ncuts, .threads = em_compile_threads(&g->opt), .parts = &g->report.c_parts};
    char berr[4096] = "";
    int hit = 0;
    double bms = 0;
    if (lib) p->dl = em_build(p->source, strlen(p->source), &bo, &hit, &bms, berr, sizeof berr);
    free(lib);
    free(cuts);
    if (rc) {
      /* out of memory, said above */
    } else if (!p->dl) {
      snprintf(g->err, sizeof g->err, "%s", berr[0] ? berr : "ember: building the kernels failed");
      g->failed = 1;
      rc = EMBER_EBUILD;
    } else {
      g->report.cache_hit = hit;
      g->report.build_ms = bms;
      p->zero_div = em_dl_sym(p->dl, "ember_zero_division");
      p->index_err = em_dl_sym(p->dl, "ember_index_error");
      p->fns = em_malloc(sizeof(*p->fns) * g->nkernels);
      if (!p->fns) rc = graph_error(g, NULL, "out of memory");
      for (int i = 0; !rc && i < g->nkernels; i++) {
        if (g->kernels[i]->lib) continue;  /* a library call: no code (run.c calls blas_cpu.c) */
        char name[64];
        snprintf(name, sizeof name, "ember_k%d", i);
        void *f = em_dl_sym(p->dl, name);
        if (!f) rc = graph_error(g, NULL, "kernel %s missing from the built object", name);
        else memcpy(&p->fns[i], &f, sizeof f);
      }
    }
  }
  str_free(&src);
  g->report.compile_ms = em_now_ms() - t0;
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "%s", g->err[0] ? g->err : "ember: compilation failed");
    program_free(p);
    ember_graph_free(eg);
    return NULL;
  }
  p->report = g->report;
  ember_graph_free(eg);  /* the program keeps nothing of it */
  return (ember_program *)p;
}

int ember_op_count(void) { return OP_COUNT; }
const char *ember_op_name(int i, int *expanded) {
  if (i < 0 || i >= OP_COUNT) return NULL;
  if (expanded) *expanded = em_ops[i].form == F_COMPOSITE;
  return em_ops[i].name;
}
