/*
 * ember_int.h - the map of ember's C core.  Read this first.
 *
 * The compiler is a straight line of passes over one graph (ember.c):
 *
 *   graph.c   the builder: values (tensor meta) and nodes (ATen ops) as handed in
 *   lower.c   each node becomes a loop expression: pointwise, reduction, view,
 *             cat, pad, factory, gather (reads at indices loaded from index
 *             tensors), or a fallback the client runs through torch; mm and
 *             bmm on CUDA a cuBLASLt call, which also does the bias add and
 *             relu or tanh GELU that follow it (its epilogue)
 *   fuse.c    choose which values are materialized, then group the computing
 *             values into kernels (loop nests) in step order
 *   plan.c    storage for every value: input, host tensor, arena offset, view
 *   codegen_c.c  C source for the kernels (CPU, OpenMP)
 *   build.c   run the C compiler, dlopen the result; cache.c keeps the disk cache
 *   ember.c   the driver: the passes in order, then the Program made from the
 *             graph (program_make), the kernels built into it, the graph freed
 *
 * The runtime reads only the Program, never the graph, and calls no pass:
 *
 *   program.c the compiled program: per value its storage, per kernel its
 *             entry point and launch, the steps, the fallbacks' nodes, the
 *             loaded code's handles (CUDA modules from the images it keeps);
 *             the ember_program_* API; CUDA kernels'
 *             unaligned variants, compiled from the text it keeps at their
 *             first need
 *   program_io.c  the program as bytes and back (ember_program_save/load):
 *             its fields in one list, its kernels' object embedded, all of
 *             it checked before anything is loaded
 *   run.c     execute the steps: kernels and fallbacks; raise what kernels
 *             flagged (integer division by zero, an index out of range)
 *   hostmem.c large host blocks, kept for reuse, for the tensors the client
 *             hands out (public API only: ember_host_*)
 *
 * Support: util.c (pools, strings, errors, hashing), expr.c (integer index
 * expressions and their simplifier), remap.c (the index arithmetic of flip
 * and the scatters).  Ops are defined once, in ops.def.
 *
 * Memory: every structure of a graph lives in its Pool (g->pool) and is freed
 * at once when ember_compile is done with it; every structure of a program
 * in the program's own Pool (p->pool), freed with it.  Pointers into a pool
 * are never freed alone.
 */
#ifndef EMBER_INT_H
#define EMBER_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "ember.h"

#define MAXD EMBER_MAX_DIMS

typedef struct Pool Pool;
typedef struct Str Str;
typedef struct Expr Expr;
typedef struct Value Value;
typedef struct Node Node;
typedef struct Operand Operand;
typedef struct Kernel Kernel;
typedef struct Item Item;
typedef struct AlignCheck { int v, mod; int64_t off; } AlignCheck;  /* (uintptr_t)ptrs[v] + off, a multiple of mod */
typedef struct Step Step;
typedef struct Graph Graph;
typedef struct CudaMod CudaMod;  /* cuda.c: a loaded module and its functions */
typedef struct EmDl EmDl;        /* build.c: a loaded shared object */
typedef struct Program Program;  /* program.c: the compiled program */

/* An internal invariant: a bug in ember, never the user's input. */
#define EM_ASSERT(c) \
  do { if (!(c)) em_assert_fail(#c, __FILE__, __LINE__); } while (0)

/* ---------------------------------------------------------------- util.c */
struct Pool {              /* a bump allocator: everything freed by pool_free */
  struct PoolBlock *head;  /* newest block first */
  int oom;                 /* set once an allocation failed */
};
void *pool_alloc(Pool *p, size_t n);           /* zeroed; NULL (and p->oom) on failure */
char *pool_strdup(Pool *p, const char *s);
char *pool_printf(Pool *p, const char *fmt, ...);
void pool_free(Pool *p);
void pool_adopt(Pool *dst, Pool *src);         /* src's blocks (and oom) become dst's; src is left empty */

struct Str {               /* a growable string; s is NUL-terminated */
  char *s;
  size_t len, cap;
  int oom;                 /* set once growing failed: s then holds what fit */
};
void str_printf(Str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void str_vprintf(Str *b, const char *fmt, va_list ap);
void str_puts(Str *b, const char *s);
void str_free(Str *b);

/* printf into a caller's message buffer err[errlen] (nothing where err is NULL) */
void em_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void em_assert_fail(const char *cond, const char *file, int line);
uint64_t em_hash64(const void *data, size_t n, uint64_t seed);  /* FNV-1a, for tables */
double em_now_ms(void);
/* A generated CUDA kernel's entry point into buf[n]: "ember_k<id>", "_u" after it for its unaligned
   variant (variant EM_UNALIGNED), "_w" for its wide one (EM_WIDE), "_b<body>" last for a body past
   the first of a kernel of several (Kernel.nbodies). */
enum { EM_MAIN, EM_UNALIGNED, EM_WIDE };
void em_entry_name(char *buf, size_t n, int id, int variant, int body);
/* A symbolic CUDA kernel indexes with 32-bit ints where every index it makes at the call's sizes is
   below this (Kernel.swide): the rest of 2^31 is room for a grid's overshoot past the last element. */
#define EM_INDEX32_LIM (((int64_t)1 << 31) - ((int64_t)1 << 29))
/* All n bytes written to / read from fd (retrying short counts and EINTR): 0, or -1 on an error or
   an early end of file. */
int em_write_all(int fd, const void *data, size_t n);
int em_read_all(int fd, void *data, size_t n);
/* Test hook: fail the Nth allocation from now (0: never).  For fault tests. */
void em_fail_alloc_after(long n);
int em_fail_armed(void);                       /* a failure is pending: run single-threaded */
/* Test hook: fail the Nth I/O call of the disk cache from now with EIO (0:
   never); em_io_fault() is asked before each such call (cache.c's IO()) and
   says 1, errno set, for the one that fails. */
void em_fail_io_after(long n);
int em_io_armed(void);                         /* a failure is pending */
int em_io_fault(void);
#define EM_MAX_THREADS 16
void *em_malloc(size_t n);
void *em_realloc(void *p, size_t n);

/* ---------------------------------------------------------------- options.c */
/* Every option of options.def as a field: BOOL and CHOICE (the choice's
   index) an int, INT an int64_t, STR a string (owned by the ember_options
   object, or by the graph's pool once copied into g->opt; never NULL). */
#define OPT_FIELD_BOOL int
#define OPT_FIELD_INT int64_t
#define OPT_FIELD_STR const char *
#define OPT_FIELD_CHOICE int
typedef struct EmOptions {
#define OPT(name, type, dflt, lo, hi, choices, who, doc) OPT_FIELD_##type name;
#include "options.def"
#undef OPT
} EmOptions;
enum { SPLIT_AUTO, SPLIT_OFF, SPLIT_ALL };   /* EmOptions.split_reductions */
enum { GEMM_PAD_AUTO, GEMM_PAD_ALL };        /* EmOptions.gemm_pad */
const EmOptions *em_options_of(const ember_options *o);
/* dst = src with src's strings copied into pool. */
int em_options_copy(EmOptions *dst, const EmOptions *src, Pool *pool);
/* Threads for the parallel parts of a compile (code generation, NVRTC):
   the compile_threads option, or the online CPUs, up to EM_MAX_THREADS. */
int em_compile_threads(const EmOptions *o);

/* ---------------------------------------------------------------- ops.def */
enum OpCode {
#define OP(e, name, form, spell) OP_##e,
#include "ops.def"
#undef OP
  OP_COUNT,
  OP_FALLBACK = -1
};
enum Form {                /* how lower.c reads an op's arguments */
  F_UNARY, F_UFLOAT, F_ULOGIC, F_UPRED, F_UNARY2, F_UFLOAT1, F_UFLOAT2, F_UFLOAT3,
  F_CAST, F_COPY, F_GELU, F_NAN_TO_NUM, F_CLAMP,
  F_BINARY, F_BINARY1, F_BFLOAT, F_ADDSUB, F_TRUEDIV, F_DIVMODE, F_CMP, F_LOGIC, F_BITWISE,
  F_GELU_BW, F_WHERE, F_TERNARY, F_TERNARY1, F_MASKFILL,
  F_FULL, F_ARANGE, F_REDUCE, F_VIEW, F_CAT, F_PAD,
  F_GATHER,                /* reads at indices loaded from index tensors (lower_gather) */
  F_FLIP, F_SCATTER,       /* elements moved by index arithmetic (remap.c) */
  F_ROUND_DEC, F_NEXTAFTER,/* pointwise: round(x, decimals); nextafter, spelled per storage dtype */
  F_POLYGAMMA,             /* pointwise: polygamma(n, x), spelled per order n */
  F_MATMUL,                /* mm, bmm on CUDA: a cuBLASLt call (blas.c), no generated code */
  F_COMPOSITE,             /* computed by other ops of this table: expand.c puts them in its place
                              as the node is added; one it left in falls back */
  F_EPILOGUE               /* a bias add, relu or gelu that an F_MATMUL node's call does in its
                              epilogue (lower.c's fold_epilogues): nothing to compute here */
};
typedef struct OpInfo {
  const char *name;        /* "aten.add.Tensor" */
  int form;                /* enum Form */
  const char *spell;       /* C template for pointwise forms; reduction kind for F_REDUCE */
} OpInfo;
extern const OpInfo em_ops[OP_COUNT];   /* ops.c */
int em_op_lookup(const char *name);            /* OpCode, or OP_FALLBACK (ops.c) */

/* ---------------------------------------------------------------- expr.c */
enum ExprKind { E_CONST, E_VAR, E_ADD, E_MUL, E_DIV, E_MOD, E_MIN, E_MAX, E_SYM, E_PROD };
struct Expr {              /* an integer index expression; immutable once built */
  int kind;                /* enum ExprKind */
  int64_t c;               /* CONST: value; MUL: factor; DIV, MOD, MIN, MAX: the constant (b NULL) */
  int var;                 /* VAR: variable number; SYM: size variable number */
  Expr *a, *b;             /* ADD: a + b; PROD: a * b; MUL: a * c; DIV/MOD/MIN/MAX: a op b, or a op c when b is NULL */
  int64_t lo, hi;          /* the range of values, inclusive; +-EX_INF: unbounded */
};
/* Variables: loop indices 0 .. nvars-1 (a kernel's dims, then merged loops),
   and from EX_GATHERED on, gathered variables: integers loaded at run time
   (a gather's index, checked against its dim, so in [0, hi]), pushed while
   the read through them is walked or printed and popped after.  The
   simplifier treats both alike: unknowns with a range.
   Size variables (SYM) are the symbolic sizes of a dynamic-shape graph:
   integers in [lo, hi] (lo 2 unless a guard says otherwise, hi EX_INF when
   unknown), the same for a whole call.  A variable whose extent is a size
   expression n ranges over [0, n-1]: set it with ex_set_size, which keeps
   vhi[v] (a numeric bound) in step.  Writing vhi directly is for constant
   extents and needs vsize[v] NULL. */
#define EX_MAXVARS 64
#define EX_GATHERED (2 * MAXD)
#define EX_MAXSYMS EMBER_MAX_SYMS
#define EX_INF ((int64_t)1 << 62)  /* a range end at or past this is unbounded */
typedef struct ExSyms {    /* the size variables of one graph and what the guards say of them */
  int n;
  int64_t lo[EX_MAXSYMS];  /* s_i >= lo[i] */
  int64_t hi[EX_MAXSYMS];  /* s_i <= hi[i]; EX_INF when unknown */
} ExSyms;
typedef struct ExprCtx {   /* the variables' ranges, and where exprs are allocated */
  Pool *pool;
  int nvars;
  int64_t vhi[EX_MAXVARS]; /* var v ranges over [0, vhi[v]] */
  int ngathered;           /* gathered vars EX_GATHERED .. EX_GATHERED + ngathered - 1 are live */
  const ExSyms *syms;      /* the size variables (not owned), or NULL in a static graph */
  Expr *vsize[EX_MAXVARS]; /* var v ranges over [0, vsize[v] - 1] when not NULL */
} ExprCtx;
enum ExCmp { EX_UNKNOWN, EX_LT, EX_LE, EX_EQ, EX_GE, EX_GT };
Expr *ex_const(ExprCtx *x, int64_t c);
Expr *ex_var(ExprCtx *x, int v);
/* A fresh gathered variable over [0, hi]: its number, or -1 when all
   EX_MAXVARS - EX_GATHERED are live.  Pop in reverse order of pushing. */
int ex_push_var(ExprCtx *x, int64_t hi);
int ex_push_var_size(ExprCtx *x, Expr *n);        /* ... over [0, n-1], n a size expression */
void ex_pop_var(ExprCtx *x);
void ex_set_size(ExprCtx *x, int v, Expr *n);     /* loop var v ranges over [0, n-1] */
int ex_add_sym(ExSyms *s, int64_t lo, int64_t hi);  /* a new size variable: its number, or -1 */
Expr *ex_sym(ExprCtx *x, int s);                  /* size variable s (a constant if lo == hi) */
Expr *ex_add(ExprCtx *x, Expr *a, Expr *b);      /* these build simplified exprs */
Expr *ex_mul(ExprCtx *x, Expr *a, int64_t c);
Expr *ex_div(ExprCtx *x, Expr *a, int64_t c);     /* floor division, c > 0 */
Expr *ex_mod(ExprCtx *x, Expr *a, int64_t c);     /* floor modulo, c > 0 */
Expr *ex_min(ExprCtx *x, Expr *a, int64_t c);
Expr *ex_max(ExprCtx *x, Expr *a, int64_t c);
/* The same with an expression operand.  A divisor must be positive at run
   time (a size expression); a constant operand takes the paths above. */
Expr *ex_sub(ExprCtx *x, Expr *a, Expr *b);
Expr *ex_mul_e(ExprCtx *x, Expr *a, Expr *b);
Expr *ex_div_e(ExprCtx *x, Expr *a, Expr *d);
Expr *ex_mod_e(ExprCtx *x, Expr *a, Expr *d);
Expr *ex_min_e(ExprCtx *x, Expr *a, Expr *b);
Expr *ex_max_e(ExprCtx *x, Expr *a, Expr *b);
/* What holds for every value of the variables and size variables in their
   ranges: EX_EQ, EX_LT (a < b), EX_LE, EX_GE, EX_GT, or EX_UNKNOWN. */
int ex_cmp(ExprCtx *x, Expr *a, Expr *b);
Expr *ex_subst(ExprCtx *x, Expr *e, int var, Expr *by);  /* e with var := by, simplified */
int ex_equal(const Expr *a, const Expr *b);
int ex_uses_var(const Expr *e, int var);
/* Is each term of e but its constant *k a multiple of m (so e == *k modulo m at every value)? */
int ex_terms_multiple(const Expr *e, int64_t m, int64_t *k);
int ex_is_size(const Expr *e);                    /* no loop or gathered variable in it */
int ex_count_divmod(const Expr *e);               /* DIV and MOD nodes over variables */
/* The value at vars[v] (may be NULL for a size expression) and syms[s];
   floor division and modulo, and 0 for a division by 0. */
int64_t ex_eval(const Expr *e, const int64_t *vars, const int64_t *syms);
/* Print as C (int64_t arithmetic); vars are named by names[v], size
   variables s0, s1, ... (kernels take them as arguments of those names). */
void ex_print(Str *b, const Expr *e, const char *const *names);

/* ---------------------------------------------------------------- graph.c */
enum Storage {             /* mirrors enum ember_storage */
  ST_NONE = EMBER_STORE_NONE, ST_INPUT = EMBER_STORE_INPUT, ST_HOST = EMBER_STORE_HOST,
  ST_FALLBACK = EMBER_STORE_FALLBACK, ST_ARENA = EMBER_STORE_ARENA, ST_VIEW = EMBER_STORE_VIEW,
  ST_INTO = EMBER_STORE_INTO
};
struct Value {
  int id;
  int dtype, device, ndim;
  int64_t size[MAXD], stride[MAXD], offset;   /* torch's meta; -1 where it is symbolic */
  int64_t numel;           /* -1 where it is symbolic */
  Expr *ssize[MAXD], *sstride[MAXD], *soffset, *snumel;  /* the same as size expressions over the graph's
                              size variables (in g->pool); constants in a static graph */
  int symbolic;            /* some of them is not a constant */
  Node *def;               /* producing node; NULL for a graph input or an unused value */
  int def_out;             /* which output of def */
  int is_input;
  int is_output;           /* a graph output (itself, not through a view) */
  int root;                /* the non-view value whose storage this is (itself if not a view) */
  int nuses;               /* operand references from nodes, views' uses counted on the root too */
  int vuses;               /* ... of them, the views' own references (a view reads nothing: the
                              value's readers are nuses - vuses) */
  int into;                /* copy_ into a graph input: that input's value id (its memory is this
                              value's), else -1; lower.c */
  int is_dst;              /* a graph input some value is written into */
  const char *layout_kept; /* layout.c: why a symbolic value NHWC was considered for keeps torch's
                              layout (a static string, said in graph.txt), or NULL */
  /* fuse.c */
  int materialized;        /* 1: has storage (input, fallback, host or arena) */
  int kernel;              /* the kernel computing it, or -1 */
  int item_kind;           /* how that kernel computes it (enum ItemKind) */
  int permuted;            /* IT_STORE in a reduction kernel whose space is a permutation of its
                              shape: dim d is the kernel's dim item_perm[d] (fuse.c, store_perm) */
  int8_t item_perm[MAXD];
  int ready_step;          /* the step after which it can be read */
  int inline_cost;         /* ops to recompute it where it is used */
  int inline_reads;        /* loads of materialized tensors that recomputing it takes */
  int inline_gvars;        /* gathered variables live at once while recomputing it (nested gathers) */
  int fb_use;              /* read by a fallback or returned: needs a torch tensor */
  int out_use;             /* returned (itself or through a view): needs memory of its own */
  /* plan.c */
  int storage;             /* enum Storage */
  int first_step, last_step;  /* lifetime in steps */
  size_t arena_off, nbytes;
  int local;               /* a reduction or outer value read only in its own kernel: a register */
  int drop_step;           /* ST_FALLBACK: the fallback step before which the client drops it (its
                              first after last_step), or -1: kept to the end (an output's root) */
  int host_alloc;          /* ST_HOST: enum ember_host_alloc, where the client gets its memory */
  size_t host_bytes;       /* ST_HOST: the bytes it spans (HOST_CACHE: what to ask the cache for) */
  size_t block_off;        /* HOST_BLOCK: its byte offset in the pooled block */
};

struct Operand {           /* an input of a pointwise node: a tensor or a constant */
  int v;                   /* value id, or -1 for a scalar */
  int is_float;            /* scalar: which of f / i holds it */
  double f;
  int64_t i;
  Expr *sz;                /* a scalar that is a size (a SymInt: its value is the call's), or NULL */
};

enum RedKind { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_ANY, R_ALL, R_ARGMAX, R_ARGMIN };

/* F_MATMUL in a symbolic graph: the call's sizes as expressions (Node.mm_sx, PCall.sx), in this order */
enum MatmulSize { MM_M, MM_N, MM_K, MM_BATCH, MM_LDA, MM_LDB, MM_LDC, MM_SA, MM_SB, MM_SC, MM_NSX };
struct Node {
  int id;
  int op;                  /* enum OpCode, or OP_FALLBACK */
  const char *opname;      /* as handed in */
  const char *name;        /* the FX node's name */
  int noalias;             /* its results never alias its arguments (ember_graph_node_noalias) */
  int made;                /* made by the compiler (split.c), not a node of the graph handed in */
  int part;                /* one of the nodes an F_COMPOSITE node became (expand.c): 1 for the
                              first, 2 for the second, ...; 0 for any other node */
  int nargs;
  ember_arg *args;         /* deep copies in the pool */
  int nouts;
  int *outs;               /* value ids */
  /* lower.c */
  int form;                /* enum Form, or -1 for a fallback */
  const char *reason;      /* why it fell back */
  const char *spell;       /* pointwise template (may differ from the table's) */
  int nopnd;
  Operand opnd[6];         /* pointwise operands; F_CAT keeps its inputs in cat_in */
  int cdtype;              /* compute dtype of the pointwise body */
  int red;                 /* enum RedKind */
  uint32_t rmask;          /* reduced dims of the input */
  int red_in;              /* reduction input value */
  int cat_dim, ncat;
  int *cat_in;
  int64_t pad[2 * MAXD];   /* F_PAD: (before, after) per dim, from the last dim as torch has it */
  int npad;
  double fill;             /* F_PAD value, F_FULL value, F_ARANGE start */
  double step;             /* F_ARANGE step */
  int fill_is_int;
  /* F_GATHER: out[o] = src[s] with src = red_in and, per source dim d,
     s[d] = o[gmap[d]] where gmap[d] >= 0, else the value of index tensor
     gidx[-1 - gmap[d]] at o, checked against sgsize[d] (and counted from the
     end where negative, if gwrap).  Index tensors broadcast, right-aligned,
     over the output dims gblk .. gblk + gblklen - 1.  A 0-d source has one
     dim of size 1 here (gndim 1): its index is checked, then not used. */
  int ngidx, gndim;
  int gidx[MAXD];
  int gmap[MAXD];
  int64_t gsize[MAXD];     /*   -1 where symbolic */
  Expr *sgsize[MAXD];      /*   gsize as a size expression (in the graph's pool) */
  int gblk, gblklen;
  int gwrap;
  /* F_FLIP and F_SCATTER (remap.c says how they read); red_in is the input */
  uint32_t flip;           /* F_FLIP: the reversed dims */
  int64_t roll[MAXD];      /* F_FLIP (a roll): per dim, the shift in [0, size): i reads (i - roll) mod size */
  int scat_src;            /* F_SCATTER: the value written into (a copy of) the input */
  int scat_strided;        /* F_SCATTER: 1 if src's place is storage addresses (as_strided_scatter) */
  int emb_dim[MAXD];       /* F_SCATTER, not strided: per result dim d, the src dim j_k it follows, or -1 */
  int64_t emb_mul[MAXD];   /*   i_d = emb_base[d] + emb_mul[d] * j_k (emb_mul > 0), or */
  int64_t emb_base[MAXD];  /*   i_d = emb_base[d] where emb_dim[d] is -1 */
  int64_t vstride[MAXD];   /* F_SCATTER, strided: src[j] sits at storage element voff + sum j_k vstride[k] */
  int64_t voff;            /*   of the input's layout (the result is the input's clone, strides kept) */
  /* F_MATMUL: out[b] (m x n) = A[b] (m x k) @ B[b] (k x n) with A = mm_a, B = mm_b
     (values, views allowed); each matrix row-major with leading dim ld, or
     stored transposed (t* = 1) with ld its column stride; batch strides in
     elements (0 for mm, or a broadcast batch) */
  int mm_a, mm_b;
  int mm_ta, mm_tb;
  int64_t mm_m, mm_n, mm_k, mm_batch;
  int64_t mm_lda, mm_ldb, mm_ldc, mm_sa, mm_sb, mm_sc;
  int mm_bias;             /* the bias value (one per column of out, the same for each batch), or -1 */
  int mm_epi;              /* enum BlasEpilogue: the activation applied after the bias */
  int mm_out;              /* the value the call writes: its result (outs[0]), or the result of
                              the last node folded into its epilogue (same layout) */
  int64_t mm_pad[3];       /* A, B, the result: the leading dim of its padded copy in the call's
                              scratch (matmul_pad in lower.c), or 0 for read / written in place
                              (A always, for now: run.c copies any operand given one) */
  int64_t mm_ncall;        /* the columns the call computes when more than mm_n (padded), else 0 */
  int mm_api;              /* enum BlasApi: cuBLASLt, or cuBLAS's classic sgemm (lower.c, matmul_api) */
  Expr *mm_sx[MM_NSX];     /* a symbolic graph's call: mm_m .. mm_sc as size expressions (in the
                              graph's pool), evaluated per call (run.c); the int64 fields then hold
                              a constant's value or -1.  NULL in a static graph */
  int epi_of;              /* F_EPILOGUE: the id of the F_MATMUL node whose call computes it */
};

struct Graph {             /* the internals of ember_graph: the IR, freed once compiled */
  Pool pool;
  Value **values;  int nvalues, cap_values;
  Node **nodes;    int nnodes, cap_nodes;   /* in creation order: a node's id is its place */
  Node **order;    int norder;             /* the nodes in the order they run (layout.c makes it,
                                              split.c adds to it), for fuse.c on */
  int *inputs;     int ninputs, cap_inputs;
  int *outputs;    int noutputs;
  char err[4096];          /* the first error, naming the op and node */
  int failed;
  /* fuse.c */
  Kernel **kernels; int nkernels, cap_kernels;
  Step *steps;      int nsteps, cap_steps;
  int target;              /* EMBER_CPU or EMBER_CUDA: where the kernels run */
  /* plan.c */
  size_t arena_bytes;
  size_t ws_off, ws_bytes;  /* the library calls' workspace in the arena (cuBLASLt) */
  /* codegen */
  char *source;            /* generated C, in the pool */
  size_t src_head;         /* the prelude's length: g->source before the first kernel */
  int index_checks;        /* some kernel checks gathered indices (codegen) */
  int index_nowait;        /* CUDA: the asynchronous index check (run.c; unless
                              the cuda_index_wait option) */
  ember_report report;     /* the compile's; the program takes a copy */
  EmOptions opt;           /* the compile's options (options.def); its strings live in the pool */
  /* dynamic shapes (graph.c): size variables and the size handles' expressions */
  ExSyms syms;             /* the size variables s0, s1, ... */
  const char *sym_name[EX_MAXSYMS];   /* as the client named them (Dynamo's), in the pool */
  int sym_input[EX_MAXSYMS], sym_dim[EX_MAXSYMS];  /* the graph input (its number) and dim whose size
                              the variable is, or -1: not said */
  int sym_handle[EX_MAXSYMS];  /* the handle of the variable itself */
  Expr **sizex; int nsizex, cap_sizex;  /* by size handle: its expression (in the pool) */
  int symbolic;            /* some value has a symbolic size, stride or offset */
};
struct ember_graph { Graph g; };

int graph_error(Graph *g, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int dtype_size(int dtype);
const char *dtype_name(int dtype);
int dtype_is_float(int dtype);
int value_is_dense(const Value *v);          /* non-overlapping and without holes */
int64_t value_span(const Value *v);           /* elements from offset to the last one, +1 */

/* A context for building size expressions over g's size variables (no loop variables). */
void graph_size_ctx(Graph *g, ExprCtx *x);
/* The graph's size variable s as the client named it ("s0" when it gave none). */
const char *graph_sym_name(const Graph *g, int s);
/* The expression of size handle h, or NULL when there is no such handle. */
Expr *graph_size_expr(const Graph *g, int64_t h);
/* Value v's expressions (ssize, ...) as constants from its integers: for
   a static value, or one whose strides a pass changed (layout.c). */
int value_const_exprs(Graph *g, Value *v);
/* A new value of like's dtype, device and sizes (its strides for now, which
   the caller sets), at offset 0, no input: its id, or a status. */
int graph_value_like(Graph *g, const Value *like);
/* A symbolic graph that pass `pass` cannot compile for every size: the
   graph's error, starting with EMBER_SYMBOLIC_REFUSED, says why. */
int graph_refuse_symbolic(Graph *g, const char *pass, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
Node *graph_add_node(Graph *g, const char *op, const char *name, int in, int out);
/* Node op(args) -> outs as handed in, checked and appended: its id, or a status. */
int graph_node(Graph *g, const char *op, const char *name, int nargs, const ember_arg *args, int nouts,
               const int *outs);

/* ---------------------------------------------------------------- expand.c */
/* ember_graph_node (ember.h) is here: graph_node, then expand_node for a composite op. */
/* Node n, an F_COMPOSITE op just added as the graph's last node: replaced by
   the nodes of its formula (returns the first one's id), or left to fall
   back with n->reason (returns n's id); < 0 on an error. */
int expand_node(Graph *g, Node *n);

/* ---------------------------------------------------------------- split.c */
/* Two-stage reductions where one would leave the GPU idle, decided on the
   layouts layout.c chose; inserts their partials into g->order. */
int split_reductions(Graph *g);
/* Output points (columns) per block of the CUDA column schedule, one warp
   across (half of it where that gives too few blocks); split.c counts a
   reduction's blocks with it. */
#define CUDA_COL_X 32

/* ---------------------------------------------------------------- layout.c */
/* The run order (g->order), channels-last strides for the values
   convolutions read and write, where ember owns their layout, and matmul
   results stored transposed where their readers then stream. */
int plan_layouts(Graph *g);

/* ---------------------------------------------------------------- lower.c */
int lower(Graph *g);       /* fills Node.form..; never fails on an op it cannot lower */
/* Node n's positional argument pos, or its keyword argument kw; an
   EMBER_ARG_NONE argument if it has neither. */
const ember_arg *node_arg(const Node *n, int pos, const char *kw);
/* The dtype torch computes a pointwise op of operands of dtypes a and b in. */
int promote_dtypes(int a, int b);
/* Count `by` (+1, or -1 to take one back) reads of value v in Value.nuses, on its root too. */
void count_use(Graph *g, int v, int by);
/* The code with which a kernel reports an index out of range for dim d of
   gather node n's source (ember_index_error in the preludes), and back: the
   node (NULL when the code names no gather of g) and *d. */
int64_t gather_error_code(const Node *n, int d);
Node *gather_error_node(Graph *g, int64_t code, int *d);
/* What F_MATMUL node n's call adds in its epilogue, for dumps and errors:
   " + bias + relu", " + bias", ... ("" for nothing). */
const char *matmul_epilogue_name(const Node *n);
const char *matmul_api_name(const Node *n);  /* "cuBLASLt matmul", "cuBLAS sgemm" or "CPU BLAS gemm" */
/* F_MATMUL node n's call made again from its operands' and result's strides
   (a result stored transposed swaps the operands): 0, or 1 where they make
   no library call (n unchanged; check: only ask). */
int matmul_relayout(Graph *g, Node *n, int check);
/* Matrix i (0: A, 1: B, 2: the result) of F_MATMUL node n as stored: rows
   of len elements, ld apart; nb matrices (1 for a broadcast batch), bstride
   apart.  With mm_pad[i], its padded copy's shape and place in the call's scratch. */
typedef struct MatStore {
  int64_t rows, len, ld, nb, bstride;
  int64_t pad, crows;      /* the padded copy's leading dim (0: none) and rows (rows, or more for mm_ncall) */
  size_t off;
} MatStore;
/* Fills s[3]; returns the scratch bytes the call's padded copies take (a
   symbolic call's result has rows -1: its copy's bytes are the call's, run.c). */
size_t matmul_store(const Node *n, int64_t es, MatStore s[3]);

/* ---------------------------------------------------------------- fuse.c */
enum ItemKind { IT_STORE, IT_REDUCE, IT_OUTER };
struct Item {
  int kind;                /* enum ItemKind */
  int v;                   /* the value computed */
};
#define MAX_BODIES 3       /* a kernel's entry points, one per body: rows of symbolic length have three */
struct Kernel {
  int id;
  int ndim;                /* the iteration space: the full space for reductions */
  int64_t size[MAXD];      /* -1 where symbolic */
  Expr *ssize[MAXD];       /* the same as size expressions (constants where not symbolic) */
  int symbolic;            /* some dim's size is symbolic */
  uint32_t rmask;          /* dims iterated inside each stage (reduced); 0: pointwise */
  Item *items; int nitems, cap;
  int step;                /* its position in g->steps */
  int nops;                /* op nodes fused into it */
  size_t src_off, src_len; /* its text in g->source (codegen) */
  /* The C target: its body function, at body_off, body_len in its own text
     while the kernels are generated (codegen_c.c), and the kernel whose body
     it calls: its own id (codegen.c sets it), or an earlier kernel's of the
     same code (Target.share) */
  size_t body_off, body_len;
  int same_as;
  int index_checks;        /* it checks gathered indices (writes ember_index_error) */
  int lib;                 /* 1: a library call (its one item is call->mm_out): no generated code */
  Node *call;              /* lib: the F_MATMUL node it runs */
  size_t scratch_off;      /* lib: the arena offset of its padded copies (call->mm_pad), if any */
  int into;                /* 1: its items are stores into graph inputs (copy_) and nothing else */
  /* CUDA */
  unsigned grid[3], block[3];  /* launch shape */
  Expr *sgrid;                 /* a symbolic kernel's grid[0] as an expression over the size variables
                                  (the launch's at the call's sizes), or NULL: grid[0] */
  Expr *sblock;                /* ... its block[0] the same way (a row's threads chosen by its length;
                                  block[0] is then the most it can be), or NULL: block[0] */
  Expr *svec;                  /* ... 0 at the sizes where its vector paths may run (the sum of the
                                  remainders by 4 of the sizes they assume 4 divides), or NULL;
                                  where it is not 0 the launch runs ember_k<id>_u as for a pointer */
  /* A symbolic kernel's rows (columns) of symbolic length may have several bodies, each an
     entry point of its own (ember_k<id>, ember_k<id>_b1, ...: em_entry_name) with its own
     __launch_bounds__ (codegen_cuda.c, sym_entry), which the launch chooses by the call's sizes. */
  int nbodies;                 /* its entry points: 1, or up to MAX_BODIES */
  Expr *sbody;                 /* ... the body the launch runs at the call's sizes (0 to nbodies - 1), or
                                  NULL: the first */
  unsigned bblock[MAX_BODIES]; /* ... the most threads block[0] may be for each body (its bound) */
  int *params; int nparams;    /* the values whose pointers are its arguments, in order */
  /* CUDA vector accesses (codegen_cuda.c, pw_lanes and row_vec): the text at
     src_off has only the aligned path, and the launch checks the pointers
     (ptrs[v] + off bytes a multiple of mod for each); where one is not
     aligned it runs ember_k<id>_u, the kernel with its unaligned path too
     (alt_off, alt_len in g->source), compiled when first needed. */
  AlignCheck *align; int nalign;
  /* A symbolic graph's kernel indexes with 32-bit ints (ember_k<id>, and its unaligned variant);
     where an index may reach EM_INDEX32_LIM at some sizes, swide is the largest it makes at the
     call's sizes, and where the launch finds it at least that, it runs ember_k<id>_w, the kernel
     with 64-bit indices and both paths of its vector accesses, also in the alt text.  NULL: no
     such variant (a static graph's kernel, whose index type its sizes chose, or a symbolic one
     whose indices are 64-bit in the kernel itself: one that checks gathered indices). */
  Expr *swide;
  size_t alt_off, alt_len;     /* the variants' text (ember_k<id>_u and ember_k<id>_w entries);
                                  alt_len 0: no variant */
};
struct Step {
  int kind;                /* EMBER_STEP_KERNEL or EMBER_STEP_FALLBACK */
  int index;               /* kernel id or node id */
};
int fuse(Graph *g);
/* Walk the loop expression of value v at logical index idx (one Expr per dim):
   fn is called for every materialized value read, with the address read
   (elements from the root's storage offset).  Used by fuse.c and codegen. */
typedef void (*ReadFn)(void *ud, int root, Expr *addr);
void walk_reads(Graph *g, ExprCtx *x, int v, Expr **idx, ReadFn fn, void *ud);
/* The same for the definition of v even where v is materialized (what a
   kernel that stores v reads to compute it); v is not changed, so other
   threads may walk it at the same time. */
void walk_def_reads(Graph *g, ExprCtx *x, int v, Expr **idx, ReadFn fn, void *ud);
/* The address of logical index idx of value v, relative to its root's offset. */
Expr *value_addr(Graph *g, ExprCtx *x, const Value *v, Expr **idx);
/* Index of an operand broadcast from output shape `out` to value `in`. */
void bcast_index(ExprCtx *x, const Value *in, int out_ndim, Expr **out_idx, Expr **in_idx);
/* F_GATHER node n: the index at which index tensor `in` is read for output index out_idx. */
Expr *cat_index(ExprCtx *x, Expr *i, Expr *start, Expr *len);  /* a cat input's clamped index */
void gather_index(ExprCtx *x, const Node *n, const Value *in, Expr **out_idx, Expr **in_idx);
/* The item index of value v in kernel k: fills idx (v's dims) from the kernel vars. */
void item_index(ExprCtx *x, const Kernel *k, const Value *v, int kind, Expr **idx);
/* x's loop variables: kernel k's dims, each over [0, size - 1] (a size expression where symbolic). */
void kernel_vars(ExprCtx *x, const Kernel *k);
/* Is symbolic value v dense (its elements without holes or overlaps) for every size? */
int value_dense_sym(Graph *g, const Value *v);

/* ---------------------------------------------------------------- remap.c */
/* The index arithmetic of flip and the scatters, shared by fuse.c (what a
   value reads) and codegen.c (what the kernel computes), so the two agree. */
typedef struct Bound {     /* the condition lo <= e <= hi (hx: <= hx, a size expression, where not NULL) */
  Expr *e;
  int64_t lo, hi;
  Expr *hx;
} Bound;
#define SCATTER_MAX_BOUNDS (2 * MAXD + 2)
/* F_FLIP (a flip or a roll): the input's index read for result index idx. */
void flip_index(ExprCtx *x, const Node *n, const Value *out, Expr **idx, Expr **in_idx);
/* F_SCATTER at result index idx: fills src_idx (always inside src) and the
   conditions under which the element is src's (else the input's at idx).
   Returns how many conditions (those the index ranges prove are left out:
   0 means always src), or -1 when one of them never holds (always the input). */
int scatter_index(Graph *g, ExprCtx *x, const Node *n, Expr **idx, Expr **src_idx, Bound *cond);

/* ---------------------------------------------------------------- plan.c */
int plan(Graph *g);
/* CPU host tensors of at least this many bytes come from the block cache
   (hostmem.c): torch maps and faults in fresh pages for each one, which costs
   more than computing them; smaller ones are torch's (glibc's heap reuses
   them without faults). */
#define HOST_CACHE_MIN EMBER_HOST_CACHE_MIN
/* A value's offset in the pooled block is a multiple of this: torch's own
   allocation alignment. */
#define BLOCK_ALIGN ((size_t)512)
/* The library calls' workspace, when a graph makes any: 32 MiB, what torch
   gives cuBLAS on Hopper, since cuBLAS's heuristic picks its split-K
   kernels only with room for them (blas.c); cuBLASLt is given its first
   8 MiB (LT_WORKSPACE), the size its choices were measured with. */
#define LIB_WORKSPACE ((size_t)32 << 20)
#define PAD_MIN_BYTES ((int64_t)1 << 20)  /* a misaligned result this large is computed padded (lower.c) */

/* ---------------------------------------------------------------- codegen.c */
/* The walker shared by the targets; a target only shapes each kernel. */
typedef struct Cg Cg;
/* A target: the spellings and state of one kind of generated code (C for
   the host compiler, CUDA C++ for NVRTC).  The walker (codegen.c) is shared;
   it calls kernel() once per kernel (and again for each loop merge it tries),
   and asks the hooks where a load, a store or the end of a reduction look
   other than plain C.  A NULL hook: the plain C spelling. */
#define CG_MAX_LANES 4     /* the most elements a target emits at once (cat_lanes) */
typedef struct Target {
  const char *name;
  const char *(*prelude)(void);   /* the text put before the kernels */
  void *(*state_new)(Cg *c);      /* the target's state for one generating thread (Cg.ts); NULL: out of memory */
  void (*state_free)(void *ts);
  /* One kernel into out; merge: see cg_loops.  alt: where its variant for
     unaligned pointers goes (the final generation only, else NULL). */
  void (*kernel)(Cg *c, Kernel *k, Str *out, Str *alt, uint32_t merge);
  /* A load of materialized value r at addr (printed: a), as a temp, or NULL: b<id>[a]. */
  const char *(*load)(Cg *c, const Value *r, Expr *addr, const char *a);
  /* Store x into v at addr (printed: a): 1 if emitted, 0: b<id>[a] = x. */
  int (*store)(Cg *c, const Value *v, Expr *addr, const char *a, const char *x);
  /* Combine a reduction's partial accumulators (of dtype ad) before its result is taken. */
  void (*red_combine)(Cg *c, const Value *v, int ad);
  /* Lanes: a target that emits the code of several consecutive elements at
     once.  lane: the one being emitted where the element at index idx (n
     dims) is another in each lane, else -1 (common subexpressions are keyed
     by it: one computed in lane 0 serves the others where -1); cat_lanes: how many lanes' values a cat's branches may
     compute at once where the cat dim's index is at (1: this lane alone);
     set_lane: emit lane u from now on. */
  int (*lane)(Cg *c, Expr **idx, int n);
  int (*cat_lanes)(Cg *c, Expr *at);
  void (*set_lane)(Cg *c, int u);
  /* A computed value v (its key: v's name at its index and lane) a target keeps in registers for
     later reads: def_find gives the register or NULL before v is computed, def_keep sees its temp. */
  const char *(*def_find)(Cg *c, const Value *v, const char *key);
  void (*def_keep)(Cg *c, const Value *v, const char *key, const char *t);
  /* A cat's element read where its dim's index is at, not known to lie in one input. */
  void (*cat_seen)(Cg *c, const Node *n, Expr *at);
  /* After every kernel's text (text[i]) is made, before they are joined: kernels of the same code
     made into one (the C target's kernels call one body function); NULL: nothing.  0 or -1 (out of
     memory). */
  int (*share)(Graph *g, Str *text);
  int eager_gpu;                  /* numerics of eager's GPU kernels: float accumulators for 16-bit sums,
                                     add's and sub's scalar operand taken in float */
} Target;
extern const Target target_c;     /* codegen_c.c */
extern const Target target_cuda;  /* codegen_cuda.c */

typedef struct Cse { const char *key, *name; } Cse;
typedef struct Loop {      /* one loop of a kernel's nest */
  int var;
  int64_t n;               /* its extent; -1 where symbolic */
  Expr *sn;                /* a symbolic extent (a size expression), or NULL */
} Loop;

struct Cg {                /* the shared walker's state, generating one graph's kernels (one per thread) */
  Graph *g;
  const Target *t;
  void *ts;                /* the target's own state (codegen_c.c, codegen_cuda.c) */
  Pool *pool;
  ExprCtx x;
  Kernel *k;
  Str *body;               /* statements of the current kernel */
  int indent;
  int ntemp;
  Cse *cse; int ncse, cap; /* named subexpressions; truncating ncse closes a scope */
  unsigned char *used;     /* per value: 1 read, 2 written */
  int *slot; int nslot;    /* per value: 1 + its position among the kernel's parameters (p<n>), or 0 */
  int *acc; int nacc;      /* per value: 1 + its number among the kernel's accumulators (a<n>), or 0 */
  const char *names[EX_MAXVARS];  /* vars 0..7: the space's dims; 8+d: a merged loop starting at dim d;
                              EX_GATHERED..: gathered vars, named by the temps that hold them */
  Expr *sub[MAXD];         /* a merged dim's index in terms of its loop's var, or NULL */
  long divmods;            /* divisions and modulos in the printed indices: what merging must not add */
  Expr *numbers;           /* the largest magnitude of the size expressions the kernel takes as numbers
                              (a SymInt operand), or NULL: a symbolic kernel's 32-bit indices need it to fit */
  int stray;               /* 1 + id of a register value read where it is not in scope (a bug), or 0 */
  int nops;                /* values computed from an op's definition so far (not found named): what a
                              target weighs a schedule by */
  int oom;
};

int codegen(Graph *g, Str *out);  /* the whole source of g's kernels, for g->target */
char *cg_fmt(Cg *c, const char *f, ...) __attribute__((format(printf, 2, 3)));
void cg_line(Cg *c, const char *f, ...) __attribute__((format(printf, 2, 3)));
Expr *cg_subst(Cg *c, Expr *e);                /* an index over the loops' vars (merged loops substituted) */
const char *cg_expr(Cg *c, Expr *e);           /* an index as C, merged loops substituted */
const char *cg_size(Cg *c, const Expr *e);     /* a size expression as C (over s0, s1, ...) */
const char *cg_extent(Cg *c, const Loop *l);   /* a loop's extent as C */
const char *cg_storage_ctype(int dtype);
const char *cg_compute_ctype(int dtype);
/* Start generating kernel k into body: names, scopes and counts reset. */
void cg_begin(Cg *c, Kernel *k, Str *body);
/* Names by position in the kernel, so that alike kernels have equal text:
   value vid as a parameter (p<n>, in order of first use), its accumulator's
   number (a<n>, n<n>, j<n>); cg_params: the parameters' value ids in order,
   their count. */
const char *cg_param(Cg *c, int vid);
int cg_acc(Cg *c, int vid);
int cg_params(Cg *c, int *vids);
const char *cg_value(Cg *c, int vid, Expr **idx);           /* value vid at idx, as a temp */
const char *cg_def(Cg *c, const Value *v, Expr **idx);      /* computed from its definition */
void cg_store(Cg *c, const Value *v, Expr **idx, const char *t);
int cg_acc_dtype(Cg *c, const Node *n, const Value *in);
const char *cg_temp(Cg *c, int dt, const char *e, const char *comment);  /* a new temp t<n> = e */
const char *cg_load_conv(Cg *c, const char *e, int dt);   /* a stored element as its compute type */
const char *cg_store_conv(Cg *c, const char *e, int dt);  /* ... and back */
void cg_cse_put(Cg *c, const char *key, const char *name);
/* arr (n used of *cap elements, elem bytes each) with room for one more,
   doubling from first: the array (perhaps moved), or NULL with c->oom set. */
void *cg_room(Cg *c, void *arr, int n, int *cap, int first, size_t elem);
const char *cg_red_clause(const Node *n);      /* OpenMP reduction operator, or NULL */
void cg_red_init(Cg *c, const Value *v);       /* accumulator declarations */
void cg_red_update(Cg *c, const Value *v);     /* one element into the accumulator */
void cg_red_finish(Cg *c, const Value *v);     /* the result as a temp, stored */
int cg_reads_stage_reduce(Cg *c, const Item *it, const int *stage_red, int nred);
/* Does e (over k's loop vars) move along k's reduced dims of size > 1? */
int cg_along_row(const Kernel *k, const Expr *e);
/* The end (exclusive) of the stage of k's items that starts at item i: up to
   the next outer item or the first item that reads one of the stage's
   reductions (at most 64 reductions a stage). */
int cg_stage_end(Cg *c, const Kernel *k, int i);
/* The loops of one class of dims (reduced or not); bit d of merge joins dim d
   with the next dim of its class into one loop. */
int cg_loops(Cg *c, const Kernel *k, int reduced, uint32_t merge, Loop *loops);
/* rows: order a reduction's outer loops too, by its first result (CUDA's short rows) */
void cg_order_loops(Cg *c, const Kernel *k, Loop *loops, int n, int rows);

/* ---------------------------------------------------------------- build.c, cache.c */
/* The default limit on one external compiler run (the C compiler, its
   --version probe, a batch of NVRTC child processes), in seconds. */
#define EM_BUILD_TIMEOUT_S 600
#define EM_TIMEOUT_HINT "raise the compile_timeout option (EMBER_COMPILE_TIMEOUT)"
typedef struct BuildOpts {
  const char *cc;          /* compiler command (may hold flags), split into words as a shell
                              splits them: quotes and backslashes, no expansion */
  const char *cflags;      /* extra compile flags (split the same way), or NULL */
  const char *ldflags;     /* extra link flags (split the same way), or NULL */
  const char *cache_dir;   /* NULL: no disk cache */
  int verbose;
  double timeout_s;        /* the most seconds one compiler run may take; 0: EM_BUILD_TIMEOUT_S */
  int nkernels;            /* the object defines ember_k0 .. ember_k<nkernels-1>: a cache
                              entry that does not is evicted and rebuilt */
  const unsigned char *lib; /* per kernel, nonzero for a library call (no code in the object,
                              none looked up), or NULL: every kernel has code */
  char *warn;              /* out, or NULL: why the disk cache was not used or not written
                              (the build went on without it), else "" */
  size_t warnlen;
  /* To compile in parts at once (build.c): the source's prelude ends at
     head, and its kernels begin at cuts[0..ncuts-1] (ascending, from head
     on; each kernel's text runs to the next one's, the last one's to the
     end); at most threads parts.  head 0: one piece. */
  size_t head;
  const size_t *cuts;
  int ncuts, threads;
  int *parts;              /* out, or NULL: the parts compiled (0: the object came from the cache) */
} BuildOpts;
/* Compile C source to a shared object (through the disk cache when
   cache_dir is set and usable) and load it.  On failure returns NULL and
   writes a message naming the compiler and its first error lines, or the
   step that ran past the time limit or was interrupted, into err.
   *cache_hit (if not NULL) tells whether the object came from the cache;
   *build_ms the time spent in the compiler. */
EmDl *em_build(const char *src, size_t len, const BuildOpts *o, int *cache_hit,
               double *build_ms, char *err, size_t errlen);
/* Load an object from its n bytes (copied first, as em_build's are: see
   build.c's top), NULL with err set on failure; the caller has checked
   where the bytes come from (program_io.c: their SHA-256). */
EmDl *em_dl_load(const void *data, size_t n, char *err, size_t errlen);
/* The bytes of the object d was loaded from (malloc'ed into *data; the
   caller frees them): 0, or -1. */
int em_dl_bytes(EmDl *d, void **data, size_t *n);
void *em_dl_sym(EmDl *d, const char *name);
void em_dl_close(EmDl *d);
/* Test hook: load as if memfd_create were missing (1), or /proc too (2); 0: normally. */
void em_build_test_loader(int mode);

/* Waiting on child processes, bounded (build.c; build_cuda.c's NVRTC children too). */
enum { EM_WAIT_FAILED = -1, EM_WAIT_TIMEOUT = -2, EM_WAIT_INTERRUPTED = -3 };
/* The client's interrupt check (ember_set_interrupt_check) says stop. */
int em_interrupted(void);
/* fork() into a new process group (the child leads it), so that
   em_kill_group ends it with whatever it started. */
pid_t em_fork_group(void);
/* Kill child pid's process group and reap pid. */
void em_kill_group(pid_t pid);
/* Read n bytes from fd by em_now_ms() time deadline, asking the interrupt
   check every so often: 0, EM_WAIT_FAILED (an error or an early end),
   EM_WAIT_TIMEOUT or EM_WAIT_INTERRUPTED. */
int em_read_until(int fd, void *buf, size_t n, double deadline);

/* The disk cache's folder from the options: o->cache_dir, else
   $XDG_CACHE_HOME/ember, ~/.cache/ember, else $TMPDIR/ember-cache-<uid>
   (into buf); NULL when the cache option is off. */
const char *em_cache_dir(const EmOptions *o, char *buf, size_t n);

/* build_cuda.c: identical kernels compiled once, the distinct ones split into
   chunks compiled by NVRTC in parallel threads, each chunk's cubin kept in
   the disk cache; then loaded (unless build_only).  Reads g's kernels and
   source; fills p's modules, functions, kernels' rep, index record and
   g's report build fields.  On failure p may hold some modules:
   program_free releases them. */
int build_cuda(Graph *g, Program *p);
/* The key under which kernels are the same code (codegen.c): the SHA-256
   of kernel id's text (or its unaligned variant's, or its C body function)
   without comments and without its own name "ember_k<id>" (every other
   name in it is by position in the kernel).  0, or -1 when out of memory. */
int em_kernel_key(const char *text, size_t n, int id, char hex[65]);

/* cache.c: a content-addressed directory of shared objects, private to its user. */
/* Make (mode 0700) or check the cache directory: it must be ours and not
   writable by others.  0 on success. */
int cache_open_dir(const char *dir, char *err, size_t errlen);
/* Path of entry `key` (hex) in dir, into buf. */
void cache_entry_path(const char *dir, const char *key, char *buf, size_t n);
/* Check that the entry is a regular file owned by us, not writable by others,
   and that its content hash matches the recorded one; 0 if it can be loaded. */
int cache_check_entry(const char *path, char *err, size_t errlen);
/* Record a freshly built object: write it under a temporary name with its
   content hash, then rename into place.  0 on success. */
int cache_store_entry(const char *dir, const char *key, const char *tmp_obj, char *err, size_t errlen);
/* The same for bytes in memory (an object, a cubin): written under a temporary name in
   dir first.  0 on success. */
int cache_store_bytes(const char *dir, const char *key, const void *data, size_t n, char *err, size_t errlen);
/* Remove the entry at path if its object is still the n bytes at data (it
   loaded and failed: see em_build), or is damaged.  0 if it was removed. */
int cache_evict_entry(const char *path, const void *data, size_t n);
/* Read a checked entry: 0 with exactly the bytes whose hash was verified in
   *data (the caller frees them), or 1 for a miss; a damaged entry is removed
   and err says why.  Takes the directory's shared lock while reading. */
int cache_read_entry(const char *path, void **data, size_t *len, char *err, size_t errlen);
/* SHA-256 of data, as 64 hex characters plus NUL into hex. */
void em_sha256_hex(const void *data, size_t n, char hex[65]);
/* The cache key of a cubin compiled from the n bytes of src: what NVRTC makes
   of a source (ident: cuda_compile_identity) and ember's version, then the
   source; it starts "cu", so cubins stand apart from objects. */
void cache_cubin_key(const char *ident, const char *src, size_t n, char key[65]);

/* ---------------------------------------------------------------- cuda.c */
/* The CUDA driver (libcuda.so.1) and NVRTC, dlopen'ed at first use, so that
   ember builds with a C compiler alone.  All functions return 0 on success or
   a nonzero status with a message in err naming the CUDA call that failed. */
/* Colon-separated folders searched (before the system's) for libnvrtc and
   libcublasLt, and for NVRTC's headers: the nvidia wheels torch installs. */
void cuda_set_search_path(const char *lib_dirs, const char *include_dirs);
int cuda_init(char *err, size_t errlen);          /* load the libraries; cheap after the first call */
int cuda_arch(int device, int *sm, char *err, size_t errlen);  /* compute capability as 90, 80, ... */
/* The architecture of the current context's device (the one modules load
   into: cuda_current_context) and the driver's CUDA version (12080 for 12.8). */
int cuda_current_arch(int *sm, int *driver, char *err, size_t errlen);
/* Test hook: cuda_current_arch answers sm and driver without asking the
   driver (sm 0: it asks the driver again). */
void cuda_test_device(int sm, int driver);
/* The driver's CUDA version (cuDriverGetVersion), loading it first; 0 where there is none. */
int cuda_driver_version(void);
/* CUDA C source to a cubin for sm_<sm> (*cubin is malloc'ed; the caller frees it). */
int cuda_compile(const char *src, int sm, void **cubin, size_t *n, char *err, size_t errlen);
/* What cuda_compile's output depends on besides the source, for cache keys:
   NVRTC's version, the architecture option and the fixed options (needs NVRTC). */
int cuda_compile_identity(int sm, char *buf, size_t n, char *err, size_t errlen);
/* What cuda_compile makes for sm: NVRTC's version (12080 for 12.8) and
   whether the image is PTX (1: the driver JIT-compiles it) or a cubin (0). */
int cuda_compile_facts(int sm, int *nvrtc_version, int *ptx, char *err, size_t errlen);
/* Load a cubin into the current context (torch's) and fetch nfn functions by name. */
CudaMod *cuda_load(const void *cubin, size_t n, int nfn, const char *const *names, char *err, size_t errlen);
void *cuda_fn(CudaMod *m, int i);
void cuda_unload(CudaMod *m);
int cuda_launch(void *fn, const unsigned grid[3], const unsigned block[3], unsigned shmem, void *stream,
                void **args, char *err, size_t errlen);
int cuda_memset_async(void *ptr, int value, size_t bytes, void *stream, char *err, size_t errlen);
/* Copy bytes from device to device in stream order (no waiting). */
int cuda_copy_async(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t errlen);
/* Copy rows of width bytes, dpitch / spitch bytes apart, device to device in stream order. */
int cuda_copy2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                      void *stream, char *err, size_t errlen);
/* The device address of module m's __device__ variable `name`, or NULL. */
void *cuda_global(CudaMod *m, const char *name);
/* Zeroed page-locked host memory the device can write (its device address in
   *dev), or NULL with err set; freed by cuda_host_free. */
void *cuda_host_mapped(size_t bytes, void **dev, char *err, size_t errlen);
void cuda_host_free(void *p);
/* Copy bytes from the host to device address dst, waiting for the copy. */
int cuda_write_sync(void *dst, const void *src, size_t bytes, char *err, size_t errlen);
/* Copy bytes from the device to the host in stream order, then wait for the stream. */
int cuda_read_sync(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t errlen);
int cuda_sync(void *stream, char *err, size_t errlen);  /* wait for the stream's work */
/* *capturing = 1 if stream is being captured into a CUDA graph (no waiting allowed). */
int cuda_capturing(void *stream, int *capturing, char *err, size_t errlen);
/* This thread's stream capture mode exchanged with *mode (CUDA's
   cuThreadExchangeStreamCaptureMode; 2: relaxed, which lets a module load
   while a capture is under way); 1 where the driver lacks it. */
#define CUDA_CAPTURE_RELAXED 2
int cuda_capture_mode(int *mode);
/* Timing on a stream (blas.c's tuning): two events made, recorded, and the
   milliseconds between them once the second has happened (a wait). */
int cuda_event_pair(void *ev[2], char *err, size_t errlen);
void cuda_event_pair_free(void *ev[2]);
int cuda_event_record(void *ev, void *stream, char *err, size_t errlen);
int cuda_event_ms(void *start, void *end, float *ms, char *err, size_t errlen);
/* The current context's device's name ("NVIDIA H100 80GB HBM3"). */
int cuda_device_name(char *buf, size_t n, char *err, size_t errlen);
/* The current context, making the primary context of device 0 current if none is. */
void *cuda_current_context(char *err, size_t errlen);
/* dlopen the first of names found on the search path (used for libcublasLt too). */
void *cuda_open_lib(const char *const *names, char *err, size_t errlen);

/* ---------------------------------------------------------------- blas.c */
/* GEMM through cuBLASLt (dlopen'ed), row-major as torch stores it:
   C[b] (m x n) = A[b] (m x k) @ B[b] (k x n), each matrix given by a pointer,
   row stride (ld, elements) and batch stride; transa/transb mean the stored
   matrix is the transpose (A stored k x m, ...).  bias (n elements with unit
   stride, the output's dtype, the same for every batch; or NULL) and the
   epilogue are fused; a bias that is not 16-byte aligned is first copied to
   the end of the workspace (which then needs room for it).  dtype is
   EMBER_F32, EMBER_BF16 or EMBER_F16; compute in fp32.  api BLAS_CUBLAS asks
   for cublasSgemm (float32, one matrix, no bias or epilogue; else, or
   where libcublas is missing, cuBLASLt runs it). */
enum BlasEpilogue { EPI_NONE, EPI_RELU, EPI_GELU };
enum BlasApi { BLAS_LT, BLAS_CUBLAS, BLAS_CPU,  /* BLAS_CPU: a CPU graph's call (blas_cpu.c) */
               BLAS_API_MASK = 3,
               BLAS_TUNE = 4 };  /* or'ed into api (option tune_gemms): time the product's candidate
                                    algorithms at its first call outside a CUDA-graph capture */
int blas_matmul(int dtype, int transa, int transb, int64_t m, int64_t n, int64_t k,
                const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                void *c, int64_t ldc, int64_t stride_c, int64_t batch, const void *bias, int epilogue, int api,
                void *workspace, size_t workspace_bytes, void *stream, char *err, size_t errlen);
/* GEMM tuning (blas.c): the disk cache's folder for its choices (NULL or
   "": none), set by each compile that tunes. */
/* One tuned problem (include/ember.h's ember_gemm_choice); ember_gemm_choices lists them. */
typedef ember_gemm_choice BlasTuned;
/* The pure parts, tested without a GPU (tests/c/test_gemm_tune.c): */
/* The index whose time is lowest if it beats ms[dflt] by the fraction
   margin, else dflt; a negative or non-finite time is a failed candidate. */
int blas_tune_pick(const double *ms, int n, int dflt, double margin);
/* Up to k indices (not dflt) of the lowest valid times, fastest first, into out; returns how many. */
int blas_tune_best(const double *ms, int n, int dflt, int k, int *out);
/* A choice as stored on disk: kind 0 the default (nothing beat it), 1 a
   cuBLASLt algorithm (its 64 opaque bytes, valid for the same cuBLASLt
   version), 2 the classic cuBLAS call. */
typedef struct BlasTuneRec {
  int kind;
  unsigned char algo[64];  /* kind 1: the cublasLtMatmulAlgo_t */
  char problem[512];       /* everything the plan depends on, as text: checked on reading */
  char dflt[128], chosen[128];  /* the algorithms, described for the log */
  double dflt_ms, chosen_ms;    /* the finals' medians, ms per call */
  int candidates;          /* timed */
} BlasTuneRec;
int blas_tune_encode(const BlasTuneRec *r, char *buf, size_t n);  /* bytes written, or -1 */
int blas_tune_decode(const char *buf, size_t n, BlasTuneRec *r);  /* 0, or -1 for a damaged record */
/* The record's cache key: SHA-256 hex of the GPU's name, cuBLASLt's version and the problem. */
void blas_tune_key(const char *gpu, size_t lt_version, const char *problem, char key[65]);
int blas_tune_store(const char *dir, const char *key, const BlasTuneRec *r, char *err, size_t errlen);
int blas_tune_load(const char *dir, const char *key, BlasTuneRec *r);  /* 0 found, 1 none/damaged */

/* ---------------------------------------------------------------- blas_cpu.c */
/* GEMM on the CPU through the Fortran BLAS torch loaded (sgemm_, dgemm_),
   row-major, with blas_matmul's meaning of the arguments (no bias,
   epilogue or workspace); dtype EMBER_F32 or EMBER_F64.  0, or -1 with err
   set (no BLAS in the process, sizes beyond its 32-bit integers). */
int blas_cpu_matmul(int dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                    int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, void *c, int64_t ldc,
                    int64_t stride_c, int64_t batch, char *err, size_t errlen);
int blas_cpu_available(int dtype);  /* the process has the dtype's gemm (looked up once) */
int blas_cpu_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);  /* 32-bit ints */

/* ---------------------------------------------------------------- program.c */
/* The compiled program: what running needs and nothing of the compiler's IR.
   ember_compile makes it from the graph (program_make, ember.c), builds the
   kernels into it and frees the graph.  Plain data (ids, offsets, strings in
   p->pool) plus the handles of the loaded code, so that it can be written
   out and read back; the client reads it through the ember_program_*
   functions (program.c), run.c executes it. */
typedef struct PValue {    /* a value at run time */
  int storage;             /* enum Storage */
  int dtype, device, ndim;
  int elsize;              /* bytes per element */
  int64_t size[MAXD], stride[MAXD], offset;   /* torch's meta */
  int root;                /* the non-view value whose storage this is (itself if not a view) */
  int64_t root_delta;      /* offset - root's offset, in elements */
  int into;                /* ST_INTO: the graph input whose memory it is, else -1 */
  size_t arena_off, nbytes;/* ST_ARENA: its place in the arena */
  int first_step, last_step;
  int needs_tensor;        /* read by a fallback or returned: the client holds a tensor */
  int drop_step;           /* plan.c's client plan (Value's fields of the same names) */
  int host_alloc;
  size_t host_bytes, block_off;
  Expr **sx;               /* symbolic: its sizes, strides and offset as expressions over the
                              size variables (2 * ndim + 1, in p->pool); NULL: size[] etc. hold them */
} PValue;
typedef struct PNode {     /* a node as the client sees it (a fallback runs it; errors name it) */
  const char *op, *name;   /* the ATen op and the FX node's name */
  const char *reason;      /* why it fell back, or NULL */
  int nargs;
  int *arg_v;              /* per argument: its value id where it is one tensor, else -1 */
  int nouts;
  int *outs;               /* the values it produces */
} PNode;
typedef struct PCall {     /* a library step's blas_matmul (lower.c's F_MATMUL fields, copied) */
  int node;                /* the F_MATMUL node */
  const char *what;        /* "cuBLASLt matmul + bias + relu", for errors */
  int dtype, ta, tb, epi, api;
  int a, b, out, bias;     /* value ids (views allowed); bias -1: none */
  int64_t m, n, k, batch;  /* n: the columns the call computes (more than the result's, padded) */
  MatStore ms[3];          /* A, B, the result as stored, and their padded copies in the scratch */
  Expr **sx;               /* symbolic: m, n, k, batch, the leading dims and batch strides (enum
                              MatmulSize; in p->pool), evaluated at each call's sizes by run.c;
                              padded copies (ms[i].pad) where the result is large enough at the
                              call's m (program_sym_pad_bytes); NULL: the fields above */
} PCall;
typedef struct PKernel {
  const char *what;        /* the FX name of the node computing its first item, for errors */
  int lib;                 /* 1: a library call, p->calls[call]; no generated code */
  int call;
  size_t scratch_off;      /* lib: the arena offset of its padded copies */
  int index_checks;        /* it checks gathered indices */
  unsigned grid[3], block[3];  /* CUDA launch shape */
  const Expr *sgrid;       /* CUDA, symbolic: grid[0] at the call's sizes (Kernel.sgrid), or NULL */
  const Expr *sblock;      /* CUDA, symbolic: block[0] at the call's sizes (Kernel.sblock), or NULL */
  const Expr *svec;        /* CUDA, symbolic: not 0 where the unaligned variant runs (Kernel.svec), or NULL */
  int nbodies;             /* CUDA: its entry points, one per body (Kernel.nbodies); 1 on the CPU */
  const Expr *sbody;       /* CUDA, symbolic: the body at the call's sizes (Kernel.sbody), or NULL: the first */
  unsigned bblock[MAX_BODIES];  /* CUDA: per body, the most threads block[0] may be (Kernel.bblock) */
  int *params; int nparams;    /* CUDA: the values whose pointers are its arguments, in order */
  AlignCheck *align; int nalign;  /* CUDA: where one fails, the unaligned variant runs */
  const Expr *swide;       /* CUDA, symbolic: where it is EM_INDEX32_LIM or more at the call's sizes,
                              the wide variant runs (Kernel.swide), or NULL: none */
  const char *alt; size_t alt_len;  /* CUDA: the variants' text (ember_k<id>_u, ember_k<id>_w), NULL: none */
  int rep;                 /* CUDA: the first kernel of the same text, whose function and
                              variant it shares (build_cuda.c); itself otherwise */
} PKernel;
typedef struct PImage {   /* CUDA: one module's image as cuda_load is given it (a chunk's cubin or PTX) */
  const void *data; size_t n;  /* in p->pool */
  int *kern; int nkern;    /* the items compiled into it, in order: kernel ids, or nkernels + id
                              for kernel id's unaligned variant (build_only programs only) */
  const char *hash;        /* its SHA-256 in hex: set by a save or read by a load, else NULL */
} PImage;
typedef struct PIndexCode {  /* a kernel's code for an index out of range (lower.c's gather_error_code) */
  int64_t code;
  int node, dim;           /* the gather node and its source's dim */
  int64_t size;            /* that dim's size */
} PIndexCode;
struct Program {
  Pool pool;               /* everything below but the handles and the malloc'ed tables */
  int target;              /* EMBER_CPU or EMBER_CUDA */
  int build_only;          /* compiled to check the code: cannot run */
  PValue *values; int nvalues;
  PNode *nodes; int nnodes;     /* by node id (steps and the client name them) */
  PKernel *kernels; int nkernels;  /* by kernel id */
  PCall *calls; int ncalls;
  Step *steps; int nsteps;
  int *inputs; int ninputs;
  int *outputs; int noutputs;   /* value ids, -1 for None */
  size_t arena_bytes;
  size_t ws_off, ws_bytes;      /* the library calls' workspace in the arena */
  size_t block_bytes;           /* the pooled block of outputs (ember_program_pool_outputs), or 0 */
  PIndexCode *icodes; int nicodes;
  int index_checks;             /* some kernel checks gathered indices */
  char *source; size_t src_head;  /* the generated source and its prelude's length */
  const char *cache_dir;        /* CUDA: the disk cache for the variants' cubins, NULL: none */
  int cuda_sm;                  /* CUDA: the architecture the kernels are compiled for */
  PImage *images; int nimages;  /* CUDA: the modules' images, chunk 0 first (kept for saving) */
  int index_nowait;             /* CUDA: the asynchronous index check asked (lower.c's g->index_nowait) */
  int nvrtc_version, image_ptx; /* CUDA: cuda_compile_facts of the images */
  int driver_version;           /* CUDA: the driver the images were loaded with (build_only: 0) */
  int nsyms;                    /* size variables a run takes (ember_program_run_sized), 0: none */
  struct SymPlan *splan;        /* symbolic: the arena plan of the last sizes (program.c; malloc) */
  const char *dump_dir;         /* the debug option's folder, NULL: none; a symbolic CUDA program
                                   writes its launches at each new sizes to launches.txt there */
  /* the loaded code: handles, released by program_free */
  EmDl *dl;                     /* CPU: the loaded object */
  void (**fns)(void *const *);  /* CPU: per kernel its entry point (malloc) */
  int *zero_div;                /* CPU: the object's ember_zero_division flag */
  int64_t *index_err;           /* CPU: the object's ember_index_error {code, index} */
  CudaMod **cmods; int ncmods;  /* CUDA: one module per compiled chunk and variant (malloc) */
  void **kfn;                   /* CUDA: per kernel and body its function, kfn[id * MAX_BODIES + body];
                                   identical kernels share theirs (malloc) */
  void **kfn_u;                 /* CUDA: the same for the unaligned variants, once compiled (malloc, lazily) */
  void **kfn_w;                 /* CUDA: the same for the wide variants (PKernel.swide) */
  void *index_dev;              /* CUDA: the module's ember_index_error (a device address) */
  int64_t *index_host;          /* CUDA: the asynchronous check's record in host-mapped memory
                                   {code, index}, or NULL: the record is read back after each run */
  ember_report report;
  char err[4096];               /* the last run's error */
  char warn[1024];              /* why the disk cache was not used or written, or "" */
};
struct ember_program { Program p; };
Program *program_new(void);     /* empty, with its pool; NULL when out of memory */
void program_free(Program *p);  /* releases the loaded code too; NULL: nothing */
/* An error of the run naming node (-1: none) into p->err: EMBER_EINVAL. */
int program_error(Program *p, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Body `body` of kernel k's unaligned or wide variant (EM_UNALIGNED, EM_WIDE: its rep's alt text,
   every variant's every body's entry point), compiled (through the disk cache), loaded and kept at
   its first need: a launch of k, or of a kernel of the same text, with a pointer that is not
   aligned or sizes whose indices pass 32 bits.  NULL with p->err set on failure.  Thread-safe. */
void *program_variant_fn(Program *p, int k, int body, int variant, void *stream);
/* Load p's images (p->images: the chunks' cubins or PTX, kept by build_cuda
   or read back by program_io.c) as modules into the current context, give
   every kernel its functions (by name ember_k<id> and its other bodies'
   entry points, em_entry_name, shared through p->kernels[i].rep), find the index record and set up the asynchronous
   index check where p->index_nowait asks for it; p->report's load_ms and
   index_async.  On failure a message in err (p may hold some modules:
   program_free releases them). */
int program_load_modules(Program *p, char *err, size_t errlen);

/* ---------------------------------------------------------------- program_io.c */
/* ember_program_save/load (ember.h).  The blob's fixed header, for tests
   that corrupt a blob and mend its hash: PROGRAM_HEADER_BYTES bytes, the
   last PROGRAM_HASH_HEX of them the hex SHA-256 of everything after it. */
#define PROGRAM_HEADER_BYTES 144
#define PROGRAM_HASH_HEX 64

/* A symbolic program's arena at sizes syms: first fit at call time over the
   plan's recipe (the arena values' lifetimes, from plan.c), kept for the
   last sizes.  *bytes: the arena it needs; with ptrs, the arena values'
   pointers into arena set too.  0, or EMBER_ENOMEM.  Thread-safe. */
int program_sym_arena(Program *p, const int64_t *syms, void **ptrs, void *arena, size_t *bytes);
/* A symbolic library call's padded copies (lower.c, matmul_pad): their
   bytes at sizes syms, 0 where the call runs in place at them. */
size_t program_sym_pad_bytes(const Program *p, const PCall *c, const int64_t *syms);
/* ... and the arena offset of the scratch they take at sizes syms, after
   every value (one library call runs at a time).  Thread-safe. */
size_t program_sym_scratch(Program *p, const int64_t *syms);

/* ---------------------------------------------------------------- run.c */
int run_program(Program *p, void **ptrs, void *arena, void *stream, ember_fallback_fn fb, void *ctx);
/* CUDA: read (waiting for stream), raise and clear the kernels' record of an index out of range. */
int run_check_index(Program *p, void *stream);

/* ---------------------------------------------------------------- verify.c */
/* Check the IR's invariants as they stand after pass `pass` ("build",
   "lower", "split", "layout", "fuse", "plan"): EMBER_OK, or an internal
   error on g naming the pass and the value or node. */
int verify(Graph *g, const char *pass);

/* ---------------------------------------------------------------- ember.c */
/* the driver: the passes in order (lower, split, layout, fuse, plan), codegen, build; the debug dumps */
void dump_graph(Graph *g, Str *b);  /* the graph with its lowering and kernels, readable */
/* The program of graph g after code generation: everything running needs,
   copied (the source and variants' text included), no code loaded yet.
   NULL with g's error set when out of memory. */
Program *program_make(Graph *g);

#endif
