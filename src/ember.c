/*
 * ember.c - the driver and the program API.  ember_compile runs the passes
 * of the table below in order, then codegen and build.  With a dump folder
 * (the debug option) the IR is written after each pass (after_<pass>.txt)
 * and after planning as graph.txt; the verifier (verify.c) checks it after
 * each pass in debug builds and with a dump folder.  The ember_program_*
 * functions answer the client's questions about the compiled program.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember_int.h"


static const char *storage_names[] = {"fused", "input", "host", "fallback", "arena", "view", "into"};

void dump_graph(Graph *g, Str *b) {
  str_puts(b, "# ember graph: values, nodes as lowered, kernels and steps\n\n## values\n");
  for (int i = 0; i < g->nvalues; i++) {
    Value *v = g->values[i];
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
    if (n->form < 0) str_printf(b, " FALLBACK (%s)", n->reason);
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
      str_puts(b, "\n");
      continue;
    }
    str_printf(b, "%3d  kernel ember_k%d:", s, k->id);
    static const char *kinds[] = {"store", "reduce", "outer"};
    for (int i = 0; i < k->nitems; i++)
      str_printf(b, " %s(%s)", g->values[k->items[i].v]->def->name, kinds[k->items[i].kind]);
    str_puts(b, "\n");
  }
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
    {"split", split_reductions, offsetof(ember_report, fuse_ms)},  /* split.c: two-stage reductions, the run order */
    {"layout", plan_layouts, offsetof(ember_report, fuse_ms)},     /* layout.c: channels-last around convolutions */
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
  g->report.distinct_kernels = g->report.kernels;
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i]->made || g->nodes[i]->part > 1) continue;  /* an expanded op counts once */
    if (g->nodes[i]->form < 0) g->report.fallbacks++;
    else if (g->nodes[i]->form != F_MATMUL) g->report.fused_ops++;
    if (g->nodes[i]->form == F_EPILOGUE) g->report.epilogue_ops++;  /* fused into a library call */
  }
  if (!rc && g->nkernels > 0 && g->target == EMBER_CUDA) {
    rc = build_cuda(g);
  } else if (!rc && g->nkernels > 0 && !g->opt.build_only) {
    char cache[4096];
    const char *cdir = em_cache_dir(&g->opt, cache, sizeof cache);
    BuildOpts bo = {.cc = g->opt.cc, .cflags = g->opt.cflags, .ldflags = g->opt.ldflags, .cache_dir = cdir,
                    .timeout_s = (double)g->opt.compile_timeout, .nkernels = g->nkernels, .warn = g->warn,
                    .warnlen = sizeof g->warn};
    char berr[4096] = "";
    int hit = 0;
    double bms = 0;
    g->dl = em_build(g->source, strlen(g->source), &bo, &hit, &bms, berr, sizeof berr);
    if (!g->dl) {
      snprintf(g->err, sizeof g->err, "%s", berr[0] ? berr : "ember: building the kernels failed");
      g->failed = 1;
      rc = EMBER_EBUILD;
    } else {
      g->report.cache_hit = hit;
      g->report.build_ms = bms;
      g->zero_div = em_dl_sym(g->dl, "ember_zero_division");
      g->index_err = em_dl_sym(g->dl, "ember_index_error");
      g->fns = em_malloc(sizeof(*g->fns) * g->nkernels);
      if (!g->fns) rc = graph_error(g, NULL, "out of memory");
      for (int i = 0; !rc && i < g->nkernels; i++) {
        char name[64];
        snprintf(name, sizeof name, "ember_k%d", i);
        void *f = em_dl_sym(g->dl, name);
        if (!f) rc = graph_error(g, NULL, "kernel %s missing from the built object", name);
        else memcpy(&g->fns[i], &f, sizeof f);
      }
    }
  }
  str_free(&src);
  g->report.compile_ms = em_now_ms() - t0;
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "%s", g->err[0] ? g->err : "ember: compilation failed");
    ember_graph_free(eg);
    return NULL;
  }
  return (ember_program *)eg;
}

void ember_program_free(ember_program *p) { ember_graph_free((ember_graph *)p); }
const char *ember_program_error(const ember_program *p) { return p->g.err; }
const char *ember_program_warning(const ember_program *p) { return p->g.warn[0] ? p->g.warn : NULL; }
int ember_program_num_values(const ember_program *p) { return p->g.nvalues; }
size_t ember_program_arena_bytes(const ember_program *p) { return p->g.arena_bytes; }
int ember_program_num_outputs(const ember_program *p) { return p->g.noutputs; }
int ember_program_output(const ember_program *p, int i) {
  return i >= 0 && i < p->g.noutputs ? p->g.outputs[i] : -1;
}
int ember_program_num_inputs(const ember_program *p) { return p->g.ninputs; }
int ember_program_input(const ember_program *p, int i) {
  return i >= 0 && i < p->g.ninputs ? p->g.inputs[i] : -1;
}

int ember_program_value(const ember_program *p, int vid, ember_value_info *info) {
  const Graph *g = &p->g;
  if (vid < 0 || vid >= g->nvalues) return EMBER_EINVAL;
  const Value *v = g->values[vid];
  info->storage = v->storage;
  info->dtype = v->dtype, info->device = v->device, info->ndim = v->ndim;
  info->sizes = v->size, info->strides = v->stride;
  info->storage_offset = v->offset;
  info->root = v->root;
  info->root_delta = v->offset - g->values[v->root]->offset;
  info->arena_offset = v->arena_off;
  info->needs_tensor = v->fb_use || v->is_output;
  info->first_step = v->first_step, info->last_step = v->last_step;
  info->drop_step = v->drop_step;
  info->host_alloc = v->host_alloc, info->host_bytes = v->host_bytes, info->block_offset = v->block_off;
  return EMBER_OK;
}

int ember_op_count(void) { return OP_COUNT; }
const char *ember_op_name(int i, int *expanded) {
  if (i < 0 || i >= OP_COUNT) return NULL;
  if (expanded) *expanded = em_ops[i].form == F_COMPOSITE;
  return em_ops[i].name;
}

int ember_program_pool_outputs(ember_program *p, int start) { return plan_pool_outputs(&p->g, start); }
size_t ember_program_block_bytes(const ember_program *p) { return p->g.block_bytes; }

int ember_program_num_steps(const ember_program *p) { return p->g.nsteps; }
int ember_program_step(const ember_program *p, int i, int *kind, int *index) {
  if (i < 0 || i >= p->g.nsteps) return EMBER_EINVAL;
  *kind = p->g.steps[i].kind, *index = p->g.steps[i].index;
  return EMBER_OK;
}

const char *ember_program_node_op(const ember_program *p, int node) {
  return node >= 0 && node < p->g.nnodes ? p->g.nodes[node]->opname : NULL;
}
const char *ember_program_node_name(const ember_program *p, int node) {
  return node >= 0 && node < p->g.nnodes ? p->g.nodes[node]->name : NULL;
}
int ember_program_node_outputs(const ember_program *p, int node, const int **outs) {
  if (node < 0 || node >= p->g.nnodes) return EMBER_EINVAL;
  *outs = p->g.nodes[node]->outs;
  return p->g.nodes[node]->nouts;
}
int ember_program_node_arg(const ember_program *p, int node, int arg) {
  if (node < 0 || node >= p->g.nnodes || arg < 0 || arg >= p->g.nodes[node]->nargs) return -2;
  const ember_arg *a = &p->g.nodes[node]->args[arg];
  return a->kind == EMBER_ARG_TENSOR ? (int)a->i : -1;
}
const char *ember_program_fallback_reason(const ember_program *p, int node) {
  return node >= 0 && node < p->g.nnodes ? p->g.nodes[node]->reason : NULL;
}

int ember_program_run(ember_program *p, void **ptrs, void *arena, void *stream, ember_fallback_fn fb, void *ctx) {
  return run_program(&p->g, ptrs, arena, stream, fb, ctx);
}

int ember_program_is_cuda(const ember_program *p) { return p->g.target == EMBER_CUDA; }

int ember_program_check(ember_program *p, void *stream) { return run_check_index(&p->g, stream); }

int ember_program_report(const ember_program *p, ember_report *r) {
  *r = p->g.report;
  return EMBER_OK;
}

const char *ember_program_source(const ember_program *p) { return p->g.source; }
size_t ember_program_source_head(const ember_program *p) { return p->g.source ? p->g.src_head : 0; }
