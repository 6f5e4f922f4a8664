/*
 * ember.h - the public C API of ember, a compiler for PyTorch graphs.
 *
 * A client (the CPython binding in ember/_ext.c, or a C test) builds a graph
 * of tensor values and ATen ops, compiles it into a program, and runs the
 * program with the data pointers of its buffers.  Everything here is an
 * opaque handle or a plain struct; the internals live in src/ember_int.h.
 *
 * Errors: functions return EMBER_OK (0) or a negative status, and the
 * handle keeps a message (ember_graph_error, ember_program_error) that names
 * the op and the graph node involved.  The library never exits the process.
 */
#ifndef EMBER_H
#define EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_MAX_DIMS 8
#define EMBER_MAX_SYMS 32   /* size variables in one graph (ember_graph_sym) */

enum ember_status {
  EMBER_OK = 0,
  EMBER_EINVAL = -1,   /* malformed graph or argument */
  EMBER_ENOMEM = -2,   /* allocation failed */
  EMBER_EBUILD = -3,   /* the C compiler is missing or failed */
  EMBER_ECACHE = -4,   /* the disk cache could not be used */
  EMBER_ERUN = -5,     /* a fallback or kernel failed at run time */
  EMBER_EINDEX = -6,   /* a kernel met an index out of range (a gather's): torch's IndexError */
};

/* Element types, numbered like nothing in particular: the binding maps torch dtypes. */
enum ember_dtype {
  EMBER_BOOL, EMBER_U8, EMBER_I8, EMBER_I16, EMBER_I32, EMBER_I64,
  EMBER_F16, EMBER_BF16, EMBER_F32, EMBER_F64,
  EMBER_OPAQUE,          /* a dtype ember does not compute on (complex, fp8, ...): fallbacks only */
  EMBER_NDTYPE
};

enum ember_device { EMBER_CPU, EMBER_CUDA, EMBER_OTHER_DEVICE };

typedef struct ember_graph ember_graph;     /* a graph being built; owns everything it holds */
typedef struct ember_program ember_program; /* a compiled graph; owns its kernels and plan */

/* One argument of an op, as the FX node gives it. */
enum ember_arg_kind {
  EMBER_ARG_NONE, EMBER_ARG_TENSOR, EMBER_ARG_INT, EMBER_ARG_FLOAT, EMBER_ARG_BOOL,
  EMBER_ARG_INTS, EMBER_ARG_TENSORS, EMBER_ARG_DTYPE, EMBER_ARG_STRING, EMBER_ARG_OTHER,
  EMBER_ARG_SIZE,        /* a SymInt: i is a size handle (ember_graph_sym and the size functions) */
  EMBER_ARG_SIZES        /* a SymInt[] (a view's shape): list holds n size handles */
};
typedef struct ember_arg {
  int kind;              /* enum ember_arg_kind */
  int64_t i;             /* TENSOR: value id; INT/BOOL: value; DTYPE: enum ember_dtype; SIZE: a handle */
  double f;              /* FLOAT */
  const int64_t *list;   /* INTS: the ints; TENSORS: value ids, -1 for None in a Tensor?[]; SIZES: handles
                            (borrowed, copied by add_node) */
  int n;                 /* length of list */
  const char *name;      /* keyword name, or NULL for a positional argument (borrowed) */
  const char *s;         /* STRING (borrowed, copied) */
} ember_arg;

/* ---- building ---- */
ember_graph *ember_graph_new(void);
void ember_graph_free(ember_graph *g);
const char *ember_graph_error(const ember_graph *g);

/* A tensor value with the meta torch gives it; returns its id (>= 0) or a status. */
int ember_graph_value(ember_graph *g, int dtype, int device, int ndim,
                      const int64_t *sizes, const int64_t *strides, int64_t storage_offset);
/* Dynamic shapes: sizes as expressions over size variables (Dynamo's
   SymInts).  A size handle (an int >= 0) names an expression of the graph;
   functions return one, or a negative status with the graph's error set.
   A size variable is an integer in [lo, hi] (hi: EMBER_SIZE_INF when
   unknown), the same for a whole call; name is the client's (Dynamo's "s0"),
   for dumps and errors. */
#define EMBER_SIZE_INF ((int64_t)1 << 62)
enum ember_size_op {
  EMBER_SIZE_ADD, EMBER_SIZE_MUL,
  EMBER_SIZE_FLOORDIV, EMBER_SIZE_MOD,   /* by an expression that is positive for every size: b's lo >= 1 */
  EMBER_SIZE_MIN, EMBER_SIZE_MAX
};
int ember_graph_sym(ember_graph *g, const char *name, int64_t lo, int64_t hi);
int ember_graph_size_const(ember_graph *g, int64_t c);
int ember_graph_size_op(ember_graph *g, int op, int a, int b);
/* Size variable sym (the handle ember_graph_sym returned) is graph input
   number `input`'s size in dim `dim` (where a run reads its value). */
int ember_graph_sym_from_input(ember_graph *g, int sym, int input, int dim);
/* ember_graph_value with sizes, strides and the storage offset as size
   handles; ember_graph_value is this with constants.  A graph that has a
   value of symbolic size is compiled for every size or not at all: see
   ember_compile. */
int ember_graph_value_sym(ember_graph *g, int dtype, int device, int ndim, const int *sizes, const int *strides,
                          int offset);
/* 1 if some value of g has a symbolic size, else 0. */
int ember_graph_is_symbolic(const ember_graph *g);
/* Mark value v as the next graph input. */
int ember_graph_input(ember_graph *g, int v);
/* An op node: op is the ATen name ("aten.add.Tensor"); name is the FX node's
   name.  outs are the value ids it produces (already created).  Returns the
   node id.  Ops ember cannot lower become fallback nodes, run by the client. */
int ember_graph_node(ember_graph *g, const char *op, const char *name,
                     int nargs, const ember_arg *args, int nouts, const int *outs);
/* The graph's outputs, in order. */
int ember_graph_outputs(ember_graph *g, int n, const int *values);
/* Node `node`'s results never alias its tensor arguments (the op's schema
   says so).  Without this, a node that falls back is assumed to maybe return
   a view of an argument, which then lives as long as the results do. */
int ember_graph_node_noalias(ember_graph *g, int node);

/* ---- options ---- */
/* Every option is a line of src/options.def (name, type, default, doc);
   `ember.options()` prints the user's.  An ember_options object holds a
   value for each, starting from the defaults; it owns its strings. */
typedef struct ember_options ember_options;
ember_options *ember_options_new(void);    /* every option at its default; NULL if out of memory */
void ember_options_free(ember_options *o);
/* Set option `name` from its text ("1", "min_cut", "/tmp/x"): EMBER_OK, or
   EMBER_EINVAL for an unknown name or a bad value (ember_options_error says which). */
int ember_options_set(ember_options *o, const char *name, const char *value);
/* Set each user option whose EMBER_<NAME> (EMBER_CACHE_DIR for cache_dir) is set in
   the environment and not empty: EMBER_OK, or EMBER_EINVAL naming the variable. */
int ember_options_read_env(ember_options *o);
const char *ember_options_error(const ember_options *o);
/* Option `name`'s value as text into buf (a choice by its name, a bool as 0 or 1). */
int ember_options_get(const ember_options *o, const char *name, char *buf, size_t n);
/* The table itself, for printing it. */
typedef struct ember_option_info {
  const char *name;
  const char *type;      /* "bool", "int", "str" or "choice" */
  const char *dflt;      /* the default, as text */
  const char *choices;   /* a choice's names, '|'-separated */
  const char *who;       /* "user": set by users (and EMBER_<NAME>); "host": by the client
                            (the device, library folders); "test": forces a path for tests */
  const char *doc;
  int64_t lo, hi;        /* an int's range */
} ember_option_info;
int ember_option_count(void);
int ember_option_describe(int i, ember_option_info *info);

/* ---- compiling ---- */
/* Compile g (which the compile takes and frees, whether it succeeds or not:
   do not free g afterwards; the program keeps what running needs) with
   options opt (NULL: the defaults, then the environment's EMBER_<NAME>; read
   during the compile, so opt may be freed after it).  On failure returns NULL and, if err is not
   NULL, copies a message into it.  A graph with symbolic sizes that some
   pass cannot compile for every size fails with a message that starts with
   EMBER_SYMBOLIC_REFUSED and says which pass and why: the client then
   compiles the graph per concrete shape. */
#define EMBER_SYMBOLIC_REFUSED "ember: symbolic sizes not compiled: "
ember_program *ember_compile(ember_graph *g, const ember_options *opt, char *err, size_t errlen);
void ember_program_free(ember_program *p);
const char *ember_program_error(const ember_program *p);
/* Why the disk cache was not used or not written for this program (the
   kernels were compiled without it), or NULL: for the client to warn. */
const char *ember_program_warning(const ember_program *p);

/* ---- saving and loading a compiled program (src/program_io.c) ---- */
/* The blob's format version: a blob of another version is refused. */
#define EMBER_PROGRAM_FORMAT 7
/* p as bytes (*buf malloc'ed: the caller frees it with free()), which
   ember_program_load turns back into a program in any process of this
   ember version on a machine like this one: the plan, the fallbacks'
   nodes, the source and the compiled kernels themselves, so loading needs
   no compiler and no disk cache (a CUDA program's kernels as NVRTC's
   images, loaded on a device of the same architecture: no NVRTC). */
int ember_program_save(ember_program *p, void **buf, size_t *len);
/* The program saved in the len bytes at buf, into *p.  Everything is
   checked before it is used (header, format and ember version, length,
   SHA-256 of the whole and of the kernels' object, every id and arena
   place) and the object is loaded only after its hash matched: a
   truncated, corrupted or mismatched blob is EMBER_EINVAL with a message
   naming what is wrong in err, a CUDA program for another architecture
   or a newer driver than the current device's too; an object or image
   that does not load, or no usable CUDA, is EMBER_EBUILD.  The loaded
   program has no disk cache folder; its report's counts are the
   compile's, its compile_ms, build_ms and load_ms this load's time, its
   pass times 0. */
int ember_program_load(const void *buf, size_t len, ember_program **p, char *err, size_t errlen);

/* Called about every 100 ms, and after a signal, while the core waits on a
   compiler (the C compiler, NVRTC child processes): nonzero stops the
   compile, which then fails with its children killed.  The CPython binding
   sets one that runs Python's signal handlers, so Ctrl-C interrupts a
   compile.  NULL (the default): never stop. */
typedef int (*ember_interrupt_fn)(void);
void ember_set_interrupt_check(ember_interrupt_fn fn);

/* ---- what the client needs to run a program ---- */
int ember_program_num_values(const ember_program *p);

/* Where each value's storage comes from. */
enum ember_storage {
  EMBER_STORE_NONE,      /* never materialized: fused into kernels */
  EMBER_STORE_INPUT,     /* a graph input: the client passes its pointer */
  EMBER_STORE_HOST,      /* the client allocates a tensor (empty_strided) before the run */
  EMBER_STORE_FALLBACK,  /* produced by a fallback step: the client stores the tensor */
  EMBER_STORE_ARENA,     /* lives in the arena at arena_offset */
  EMBER_STORE_VIEW,      /* a view of root: the client makes it with as_strided when needed */
  EMBER_STORE_INTO,      /* written into the memory of graph input `root` (copy_ into an input) */
};
/* Where a HOST value's memory comes from (the memory plan, src/plan.c). */
enum ember_host_alloc {
  EMBER_HOST_TORCH,      /* its own tensor from the client's allocator (empty_strided) */
  EMBER_HOST_CACHE,      /* CPU: a block of host_bytes from ember_host_alloc (large tensors); with
                            symbolic sizes host_bytes is 0: a block where the call's bytes are at
                            least EMBER_HOST_CACHE_MIN, else torch's */
  EMBER_HOST_BLOCK,      /* block_offset bytes into the call's pooled block of outputs
                            (ember_program_pool_outputs) */
};
#define EMBER_HOST_CACHE_MIN ((size_t)2 << 20)
typedef struct ember_value_info {
  int storage;             /* enum ember_storage */
  int dtype, device, ndim;
  const int64_t *sizes, *strides; /* owned by the program */
  int64_t storage_offset;  /* as torch gave it */
  int root;                /* VIEW: the value whose storage this views; else itself */
  int64_t root_delta;      /* VIEW: storage_offset - root's storage_offset, in elements */
  size_t arena_offset;     /* ARENA: byte offset in the arena */
  int needs_tensor;        /* 1 if the client must hold a torch tensor for it (fallback in, output) */
  int first_step, last_step;  /* the steps that write it first and read it last (-1: before any) */
  int drop_step;           /* FALLBACK: the client drops its tensor just before running fallback
                              step drop_step (the first after its last use); -1: keep it to the end */
  int host_alloc;          /* HOST: enum ember_host_alloc */
  size_t host_bytes;       /* HOST: the bytes from its first element to its last */
  size_t block_offset;     /* HOST_BLOCK: byte offset in the pooled block */
} ember_value_info;
int ember_program_value(const ember_program *p, int v, ember_value_info *info);
size_t ember_program_arena_bytes(const ember_program *p);
/* Pool the outputs from position `start` on (a training forward's saved
   activations, a backward's gradients: freed together by the caller) into
   one block per call instead of one allocation each (on the CPU only the
   values torch would allocate: large ones keep the block cache); an output
   before `start` that shares a
   root keeps memory of its own, so it never holds the block alive.  Call
   before the first run (a second call replaces the first's pooling);
   0 <= start <= the number of outputs, else EMBER_EINVAL. */
int ember_program_pool_outputs(ember_program *p, int start);
/* The pooled block's bytes (0: no block; its HOST values are allocated one by one). */
size_t ember_program_block_bytes(const ember_program *p);
int ember_program_num_outputs(const ember_program *p);
int ember_program_output(const ember_program *p, int i);  /* value id, or -1 for None */
int ember_program_num_inputs(const ember_program *p);
int ember_program_input(const ember_program *p, int i);

/* Steps run in order: a kernel, or a fallback node the client executes. */
enum ember_step_kind { EMBER_STEP_KERNEL, EMBER_STEP_FALLBACK };
int ember_program_num_steps(const ember_program *p);
int ember_program_step(const ember_program *p, int i, int *kind, int *index);
/* A fallback node: its op name, FX node name, and the values it produces. */
const char *ember_program_node_op(const ember_program *p, int node);
const char *ember_program_node_name(const ember_program *p, int node);
int ember_program_node_outputs(const ember_program *p, int node, const int **outs);
/* The value id of node's argument `arg` (in the order given to
   ember_graph_node) where it is one tensor, -1 where it is something else,
   -2 past the last argument.  A fallback's argument
   can differ from the one it was built with: the program may give it a copy
   of its own in another layout (an input copied to NHWC for a convolution). */
int ember_program_node_arg(const ember_program *p, int node, int arg);

/* The client's side of a run: execute fallback node `node`, then set
   ptrs[v] for each value v it produced.  Returns 0, or nonzero to stop. */
typedef int (*ember_fallback_fn)(void *ctx, int node, void **ptrs);

/* Run: ptrs has one slot per value; the client has filled INPUT and HOST
   slots; arena is ember_program_arena_bytes bytes (or NULL if that is 0).
   CUDA kernels are launched on `stream` (a CUstream; NULL: the default). */
int ember_program_run(ember_program *p, void **ptrs, void *arena, void *stream,
                      ember_fallback_fn fallback, void *ctx);
/* Dynamic shapes: a program compiled from a graph with symbolic sizes takes
   the values of its size variables (in the order ember_graph_sym made them)
   at each run; its values' sizes, strides and root_delta (VIEW) then come
   from ember_program_value_sizes, not ember_program_value.  Such a run's
   ptrs has one slot more than the values (run_sized fills it).  num_syms:
   0 for a program of constant sizes, which runs with either function. */
int ember_program_num_syms(const ember_program *p);
int ember_program_run_sized(ember_program *p, const int64_t *syms, void **ptrs, void *arena, void *stream,
                            ember_fallback_fn fallback, void *ctx);
/* The arena bytes a run at these sizes needs (ember_program_arena_bytes for a
   program of constant sizes); 0 also when out of memory, which the run then reports. */
size_t ember_program_arena_bytes_for(ember_program *p, const int64_t *syms);
/* ARENA value v's byte offset in the arena at these sizes (-1: not an arena value, or out of
   memory). */
int64_t ember_program_arena_offset(ember_program *p, int v, const int64_t *syms);
/* Value v's sizes and strides (ndim each) and root_delta at these sizes. */
int ember_program_value_sizes(const ember_program *p, int v, const int64_t *syms, int64_t *sizes,
                              int64_t *strides, int64_t *root_delta);
/* 1 if the program's kernels run on a CUDA device. */
int ember_program_is_cuda(const ember_program *p);
/* CUDA: kernels record an index out of range on the device; a run checks
   the record at its end (waiting for the stream) unless the stream is being
   captured into a CUDA graph.  After replaying such a graph, this checks it:
   EMBER_EINDEX with the message, or EMBER_OK (also for CPU programs, which
   check after each kernel, and programs without gathers). */
int ember_program_check(ember_program *p, void *stream);

/* ---- reporting ---- */
typedef struct ember_report {
  int nodes;          /* op nodes handed in */
  int kernels;        /* generated kernels */
  int distinct_kernels;  /* kernels compiled: identical ones share code (CUDA; on the CPU = kernels) */
  int library_calls;  /* steps that call a library instead of generated code (cuBLASLt matmuls) */
  int fused_ops;      /* op nodes computed inside kernels (views included) or library calls' epilogues */
  int epilogue_ops;   /* of which done by a library call's epilogue: bias adds, relu, gelu (cuBLASLt) */
  int fallbacks;      /* op nodes run by the client */
  double compile_ms;  /* lower + fuse + plan + codegen + build */
  double build_ms;    /* of which the C compiler or NVRTC with the disk cache (0 compiled on a hit),
                         and loading the result */
  int cache_hit;      /* 1 if the kernels came from the disk cache */
  /* compile_ms by phase: lowering (epilogue folds included), fusion (two-stage
     reductions included), memory planning, code generation; of build_ms, the
     loading of the compiled CUDA modules (0 on the CPU) */
  double lower_ms, fuse_ms, plan_ms, codegen_ms, load_ms;
  int index_async;    /* CUDA: gathered indices are checked asynchronously (the default; run.c):
                         a run does not wait; ember_program_check reads host memory */
  int unaligned_variants;  /* CUDA: kernels' unaligned variants built so far, at the first launch
                              that met a pointer not 16-byte aligned (runs add to it) */
  double variant_ms;  /* ... and the time building them took */
  /* CUDA: NVRTC's part of build_ms: the chunks compiled (not from the cache), how many of them
     in child processes, the wall time they took, and the longest and the sum of their own times */
  int nvrtc_chunks, nvrtc_processes;
  double nvrtc_ms, nvrtc_chunk_max_ms, nvrtc_chunk_sum_ms;
  /* CPU: the translation units the C compiler ran on at once (a graph of many kernels is
     compiled in parts: build.c); 0 when the kernels came from the disk cache */
  int c_parts;
} ember_report;
int ember_program_report(const ember_program *p, ember_report *r);
/* Why node `node` fell back ("no lowering", "dtype complex64", ...). */
const char *ember_program_fallback_reason(const ember_program *p, int node);
/* The generated source, for dumps and explain. */
const char *ember_program_source(const ember_program *p);
/* The length of the source's prelude (the runtime header the kernels
   call): source + head is the first kernel. */
size_t ember_program_source_head(const ember_program *p);

/* ---- host memory for large CPU tensors (hostmem.c) ---- */
/* A block of at least nbytes, 2 MiB-aligned and not zeroed, for a tensor the
   client hands out; a freed block is kept for the next one of its rounded
   size (up to a byte limit), so its pages are not faulted in again.  NULL on
   failure.  Thread-safe. */
void *ember_host_alloc(size_t nbytes);
void ember_host_free(void *p);            /* p from ember_host_alloc, or NULL */
size_t ember_host_cached(void);           /* bytes kept for reuse now */

/* ---- GEMM tuning (blas.c; the option tune_gemms: the max-autotune modes) ---- */
/* Each matrix product tuned in this process, in order: its problem, the
   algorithm that ran untuned and the one chosen, their median times
   (milliseconds per call; the tuning run's when read from the disk cache),
   how many candidates were timed, whether the choice came from the disk
   cache (nothing timed), the wall time spent, and a note where it was not
   tuned or not cached.  ember_gemm_choices copies the i-th into *out when
   0 <= i < the count, which it returns. */
typedef struct ember_gemm_choice {
  char problem[192];
  char dflt[128], chosen[128];
  double dflt_ms, chosen_ms;
  int candidates;
  int from_disk;
  double tune_ms;
  char note[160];
} ember_gemm_choice;
int ember_gemm_choices(int i, ember_gemm_choice *out);
/* The tuning's per-graph time budget starts again: the client calls it
   before each graph's first run (where its products are tuned). */
void ember_gemm_budget_reset(void);
/* The cache folder that keeps the chosen algorithms across processes
   (NULL or "": none).  A compile that tunes sets it from its options; a
   client that loads programs instead (ember_program_load) sets it itself. */
void ember_gemm_cache_dir(const char *dir);
void ember_host_set_limit(size_t bytes);  /* the most bytes kept (default 1 GiB); 0 releases all */

/* ---- the ops ember computes itself (src/ops.def) ---- */
int ember_op_count(void);
/* Op i's ATen name ("aten.add.Tensor"), NULL past the end; *expanded (if
   not NULL) is 1 for an op replaced by its formula in other ops of the
   table as it is added (src/expand.c), 0 for one lowered as itself. */
const char *ember_op_name(int i, int *expanded);

const char *ember_version(void);

#ifdef __cplusplus
}
#endif
#endif
