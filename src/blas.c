/*
 * blas.c - matrix products through cuBLASLt, dlopen'ed (libcublasLt.so.13 or
 * .so.12, found like NVRTC: the copy torch loaded, then cuda.c's search
 * path), so that ember needs no CUDA headers or libraries at build time.
 *
 * blas_matmul takes row-major matrices as torch stores them.  cuBLASLt is
 * column-major, and a row-major m x n matrix read column-major is its
 * transpose, so C = A B is computed as C^T = B^T A^T: our B goes in
 * cuBLASLt's A slot, our A in its B slot, and D is n x m.  The bias (n
 * elements, one per output column) is then one per row of D, which is what
 * cuBLASLt's bias epilogue adds.
 *
 * Numerics: storage fp32, bf16 or fp16, compute and scale in fp32
 * (CUBLAS_COMPUTE_32F, never FAST_TF32: torch's default fp32 matmul does not
 * use TF32 either); split-K partial sums of bf16/fp16 products are reduced
 * in fp32, never in the output type; the bias has the output's dtype.  EPI_GELU is cuBLASLt's
 * GELU, the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))):
 * fuse it only for gelu(approximate='tanh'), never for the exact erf GELU.
 *
 * The bias: cuBLASLt's alignment preferences cover A, B, C and D but not
 * the bias, and its heuristic may pick a kernel that loads the bias 16 bytes
 * at a time, which faults with "misaligned address" (and the CUDA context is
 * lost) on a bias that starts inside a larger buffer (PyTorch's addmm falls
 * back to an unfused path there: pytorch/pytorch#194497).  Such a bias is
 * first copied, in stream order, to a 256-byte aligned spot at the end of
 * the workspace; the call keeps the rest of the workspace.  Graph inputs'
 * addresses are only known at run time, so this is decided here, per call.
 *
 * Each distinct problem (shape, strides, dtypes, epilogue, the pointers'
 * alignments, workspace size, context) gets a plan: the descriptors and the
 * algorithm cuBLASLt's heuristic picked, kept in a small table, so a repeated
 * call costs a hash lookup and cublasLtMatmul.  One lock guards the table
 * and is held across the (asynchronous) cublasLtMatmul call, since the bias
 * pointer is set on the shared descriptor.
 *
 * Algorithms: the heuristic's first choice, unless the product is tuned
 * (BLAS_TUNE: the option tune_gemms, the modes max-autotune*; "tuning"
 * below).  Timing only the heuristic's other top candidates found no faster
 * tiles for bert-base or vit_b_16 (the ones Inductor's calls got are not
 * among them), so tuning also times the classic API's choice and
 * configurations made directly (every algorithm id, tile, stage count,
 * split-K, swizzle, cluster shape cuBLASLt accepts for the problem).
 *
 * The classic API: for a float32 product with no batch and nothing in the
 * epilogue, lower.c picks cuBLAS's cublasSgemm (libcublas, dlopen'ed beside
 * cuBLASLt) instead: the entry point torch's own mm reaches, and so
 * Inductor's extern mm.  Its heuristic is not cuBLASLt's: for bert-base's
 * products at batch 1 it splits K where cuBLASLt's does not, and is faster
 * (tools/gpu/gemm_api.py compares them), given the room: with torch's 32 MiB workspace (its default on Hopper), not with
 * cuBLASLt's 8 MiB, where it picks cuBLASLt's kernels.  So the classic call
 * gets the whole workspace (LIB_WORKSPACE, 32 MiB) and cuBLASLt its first
 * 8 MiB.  The call sets the stream, then the workspace (setting the stream
 * resets the workspace to cuBLAS's own), on one handle per context, under
 * the lock.
 * Where libcublas cannot be opened, or a size does not fit an int, cuBLASLt runs the
 * product as before.
 *
 * Not here: choosing to call a library (lower.c), the workspace's memory
 * (the caller's, e.g. from the arena).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

/* From cuda.c (to move into ember_int.h's cuda.c section). */

/* ---------------------------------------------------------------- cuBLASLt ABI */
/* The few types and constants used here, written from the cuBLASLt
   documentation (values as in cuBLAS 12/13). */
typedef int LtStatus;                 /* cublasStatus_t: 0 is success */
typedef struct LtCtx *LtHandle;       /* cublasLtHandle_t */
typedef struct LtDescS *LtDesc;       /* cublasLtMatmulDesc_t */
typedef struct LtLayoutS *LtLayout;   /* cublasLtMatrixLayout_t */
typedef struct LtPrefS *LtPref;       /* cublasLtMatmulPreference_t */
typedef struct {                      /* cublasLtMatmulAlgo_t: opaque, 8 words */
  uint64_t data[8];
} LtAlgo;
typedef struct {                      /* cublasLtMatmulHeuristicResult_t */
  LtAlgo algo;
  size_t workspace_size;              /* what this algorithm needs */
  LtStatus state;                     /* 0 if the algorithm applies */
  float waves;                        /* wavesCount */
  int reserved[4];
} LtHeuristic;
_Static_assert(sizeof(LtAlgo) == 64 && sizeof(LtHeuristic) == 96, "cuBLASLt's documented layout");

enum {
  LT_R_32F = 0, LT_R_16F = 2, LT_R_16BF = 14,  /* cudaDataType_t */
  LT_COMPUTE_32F = 68,                         /* cublasComputeType_t: CUBLAS_COMPUTE_32F */
  LT_OP_N = 0, LT_OP_T = 1,                    /* cublasOperation_t */
  /* cublasLtMatmulDescAttributes_t */
  LT_DESC_TRANSA = 3, LT_DESC_TRANSB = 4, LT_DESC_EPILOGUE = 7, LT_DESC_BIAS_POINTER = 8,
  /* cublasLtMatrixLayoutAttribute_t */
  LT_LAYOUT_BATCH_COUNT = 5, LT_LAYOUT_STRIDED_BATCH_OFFSET = 6,
  /* cublasLtMatmulPreferenceAttributes_t */
  LT_PREF_MAX_WORKSPACE_BYTES = 1, LT_PREF_REDUCTION_SCHEME_MASK = 3, LT_PREF_MIN_ALIGN_A = 5, LT_PREF_MIN_ALIGN_B = 6, LT_PREF_MIN_ALIGN_C = 7,
  LT_PREF_MIN_ALIGN_D = 8,
  /* cublasLtEpilogue_t */
  LT_EPI_DEFAULT = 1, LT_EPI_RELU = 2, LT_EPI_BIAS = 4, LT_EPI_RELU_BIAS = 6, LT_EPI_GELU = 32,
  LT_EPI_GELU_BIAS = 36,
  /* cublasLtMatmulAlgoCapAttributes_t */
  LT_CAP_SPLITK = 0, LT_CAP_REDUCTION_MASK = 1, LT_CAP_SWIZZLE = 2, LT_CAP_STRIDED_BATCH = 3, LT_CAP_TILE_IDS = 6,
  LT_CAP_CUSTOM_MAX = 7, LT_CAP_EPILOGUE_MASK = 12, LT_CAP_STAGES_IDS = 13, LT_CAP_NUMERICS = 15, LT_CAP_MIN_ALIGN_A = 16,
  /* cublasLtMatmulAlgoConfigAttributes_t */
  LT_CFG_ID = 0, LT_CFG_TILE = 1, LT_CFG_SPLITK = 2, LT_CFG_REDUCTION = 3, LT_CFG_SWIZZLE = 4, LT_CFG_CUSTOM = 5,
  LT_CFG_STAGES = 6, LT_CFG_INNER = 7, LT_CFG_CLUSTER = 8,
  /* cublasLtReductionScheme_t: the partial sums in fp32 (compute type); in place (in the output) */
  LT_RED_NONE = 0, LT_RED_INPLACE = 1, LT_RED_COMPUTE = 2,
  /* cublasLtClusterShape_t: 1x1x1 .. 4x4x1, the shapes of up to 16 blocks */
  LT_CLUSTER_FIRST = 2, LT_CLUSTER_LAST = 10,
  /* cuBLAS: cublasMath_t, cublasGemmAlgo_t */
  CB_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16, CB_GEMM_DEFAULT = -1,
};
/* cublasLtNumericalImplFlags_t bits that would change the numerics: tensor
   ops (for fp32 data: TF32 or emulation), a 16-bit accumulator, TF32 inputs. */
#define LT_NUM_TENSOR_OP 0xfeull
#define LT_NUM_ACC_16F (1ull << 8)
#define LT_NUM_INPUT_TF32 (4ull << 16)

static struct {                       /* cuBLASLt's functions, filled once under lock */
  void *lib;
  LtStatus (*Create)(LtHandle *h);
  size_t (*GetVersion)(void);
  const char *(*GetStatusName)(LtStatus s);                     /* optional */
  const char *(*GetStatusString)(LtStatus s);                   /* optional */
  LtStatus (*DescCreate)(LtDesc *d, int compute, int scale_type);
  LtStatus (*DescDestroy)(LtDesc d);
  LtStatus (*DescSetAttribute)(LtDesc d, int attr, const void *buf, size_t n);
  LtStatus (*LayoutCreate)(LtLayout *l, int type, uint64_t rows, uint64_t cols, int64_t ld);
  LtStatus (*LayoutDestroy)(LtLayout l);
  LtStatus (*LayoutSetAttribute)(LtLayout l, int attr, const void *buf, size_t n);
  LtStatus (*PrefCreate)(LtPref *p);
  LtStatus (*PrefDestroy)(LtPref p);
  LtStatus (*PrefSetAttribute)(LtPref p, int attr, const void *buf, size_t n);
  LtStatus (*AlgoGetHeuristic)(LtHandle h, LtDesc d, LtLayout a, LtLayout b, LtLayout c, LtLayout dd, LtPref p,
                               int requested, LtHeuristic *results, int *returned);
  LtStatus (*Matmul)(LtHandle h, LtDesc d, const void *alpha, const void *a, LtLayout la, const void *b,
                     LtLayout lb, const void *beta, const void *c, LtLayout lc, void *dd, LtLayout ld,
                     const LtAlgo *algo, void *workspace, size_t workspace_bytes, void *stream);
  /* optional, for tuning: the algorithms enumerated and configured directly */
  LtStatus (*AlgoGetIds)(LtHandle h, int compute, int scale, int at, int bt, int ct, int dt, int requested,
                         int *ids, int *returned);
  LtStatus (*AlgoInit)(LtHandle h, int compute, int scale, int at, int bt, int ct, int dt, int id, LtAlgo *algo);
  LtStatus (*AlgoCheck)(LtHandle h, LtDesc d, LtLayout a, LtLayout b, LtLayout c, LtLayout dd, const LtAlgo *algo,
                        LtHeuristic *result);
  LtStatus (*CapGet)(const LtAlgo *algo, int attr, void *buf, size_t n, size_t *written);
  LtStatus (*ConfigSet)(LtAlgo *algo, int attr, const void *buf, size_t n);
  LtStatus (*ConfigGet)(const LtAlgo *algo, int attr, void *buf, size_t n, size_t *written);
} lt;

static const struct LtSym {
  const char *name;
  size_t off;
  int optional;
} lt_syms[] = {
#define S(f, name, opt) {name, offsetof(__typeof__(lt), f), opt}
  S(Create, "cublasLtCreate", 0),
  S(GetVersion, "cublasLtGetVersion", 0),
  S(GetStatusName, "cublasLtGetStatusName", 1),
  S(GetStatusString, "cublasLtGetStatusString", 1),
  S(DescCreate, "cublasLtMatmulDescCreate", 0),
  S(DescDestroy, "cublasLtMatmulDescDestroy", 0),
  S(DescSetAttribute, "cublasLtMatmulDescSetAttribute", 0),
  S(LayoutCreate, "cublasLtMatrixLayoutCreate", 0),
  S(LayoutDestroy, "cublasLtMatrixLayoutDestroy", 0),
  S(LayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute", 0),
  S(PrefCreate, "cublasLtMatmulPreferenceCreate", 0),
  S(PrefDestroy, "cublasLtMatmulPreferenceDestroy", 0),
  S(PrefSetAttribute, "cublasLtMatmulPreferenceSetAttribute", 0),
  S(AlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", 0),
  S(Matmul, "cublasLtMatmul", 0),
  S(AlgoGetIds, "cublasLtMatmulAlgoGetIds", 1),
  S(AlgoInit, "cublasLtMatmulAlgoInit", 1),
  S(AlgoCheck, "cublasLtMatmulAlgoCheck", 1),
  S(CapGet, "cublasLtMatmulAlgoCapGetAttribute", 1),
  S(ConfigSet, "cublasLtMatmulAlgoConfigSetAttribute", 1),
  S(ConfigGet, "cublasLtMatmulAlgoConfigGetAttribute", 1),
#undef S
};

/* cuBLAS's classic API: the few functions cublasSgemm needs. */
typedef struct CbCtx *CbHandle;       /* cublasHandle_t */
static struct {
  void *lib;
  int failed;                         /* 1: not found; cuBLASLt runs every product */
  LtStatus (*Create)(CbHandle *h);
  LtStatus (*SetStream)(CbHandle h, void *stream);
  LtStatus (*SetWorkspace)(CbHandle h, void *workspace, size_t bytes);
  LtStatus (*Sgemm)(CbHandle h, int transa, int transb, int m, int n, int k, const float *alpha, const float *a,
                    int lda, const float *b, int ldb, const float *beta, float *c, int ldc);
  const char *(*GetStatusName)(LtStatus s);                     /* optional */
  /* optional, for tuning: the classic call for 16-bit types and batches */
  LtStatus (*SetMathMode)(CbHandle h, int mode);
  LtStatus (*GemmEx)(CbHandle h, int transa, int transb, int m, int n, int k, const void *alpha, const void *a,
                     int atype, int lda, const void *b, int btype, int ldb, const void *beta, void *c, int ctype,
                     int ldc, int compute, int algo);
  LtStatus (*GemmStridedBatchedEx)(CbHandle h, int transa, int transb, int m, int n, int k, const void *alpha,
                                   const void *a, int atype, int lda, long long sa, const void *b, int btype,
                                   int ldb, long long sb, const void *beta, void *c, int ctype, int ldc,
                                   long long sc, int batch, int compute, int algo);
} cb;

static const struct LtSym cb_syms[] = {
#define S(f, name, opt) {name, offsetof(__typeof__(cb), f), opt}
  S(Create, "cublasCreate_v2", 0),
  S(SetStream, "cublasSetStream_v2", 0),
  S(SetWorkspace, "cublasSetWorkspace_v2", 0),
  S(Sgemm, "cublasSgemm_v2", 0),
  S(GetStatusName, "cublasGetStatusName", 1),
  S(SetMathMode, "cublasSetMathMode", 1),
  S(GemmEx, "cublasGemmEx", 1),
  S(GemmStridedBatchedEx, "cublasGemmStridedBatchedEx", 1),
#undef S
};

/* "call: CUBLAS_STATUS_X (text)" into err, by the library's own names for
   its statuses where it has them; returns 1. */
static int status_fail(const char *(*name_of)(LtStatus), const char *(*text_of)(LtStatus), LtStatus s,
                       const char *call, char *err, size_t errlen) {
  const char *name = name_of ? name_of(s) : NULL;
  const char *text = text_of ? text_of(s) : NULL;
  if (name && text)
    em_seterr(err, errlen, "%s: %s (%s)", call, name, text);
  else if (name)
    em_seterr(err, errlen, "%s: %s", call, name);
  else
    em_seterr(err, errlen, "%s: cuBLAS status %d", call, s);
  return 1;
}

static int lt_fail(LtStatus s, const char *call, char *err, size_t errlen) {
  return status_fail(lt.GetStatusName, lt.GetStatusString, s, call, err, errlen);
}

static int cb_fail(LtStatus s, const char *call, char *err, size_t errlen) {
  return status_fail(cb.GetStatusName, NULL, s, call, err, errlen);
}

/* ---------------------------------------------------------------- plans */

enum { MAX_CTX = 16, NPLAN = 128 };   /* NPLAN: a power of two */

typedef struct PlanKey {              /* everything the descriptors and the algorithm depend on */
  void *ctx;                          /* CUcontext: algorithms and handles are per device */
  int64_t dtype, transa, transb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch, epi;
  int64_t align_a, align_b, align_c, align_bias;  /* bytes, powers of two up to 256 */
  uint64_t workspace;                 /* cuBLASLt's */
  uint64_t whole;                     /* the classic call's: tuning only, else 0 */
  int64_t api;                        /* BLAS_LT or BLAS_CUBLAS, with BLAS_TUNE */
} PlanKey;

typedef struct Plan {
  int used;
  PlanKey key;
  LtHandle handle;                    /* the context's; not owned */
  LtDesc desc;                        /* owned: the operation */
  LtLayout la, lb, lc;                /* owned: cuBLASLt's A (our B), B (our A), C = D */
  LtAlgo algo;                        /* the heuristic's first choice, or the tuned one */
  int classic;                        /* 1: cuBLAS's classic call runs it (the sgemm default, or tuned) */
  int decided;                        /* BLAS_TUNE: the choice is made (timed, read from disk, given up) */
} Plan;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* guards everything below and lt's loading */
static Plan plans[NPLAN];
static unsigned evict_next;           /* the slot reused when a probe finds no room */
static struct {
  void *ctx;
  LtHandle h;
  CbHandle cb;                        /* the classic API's, made at its first use */
} handles[MAX_CTX];                   /* one cuBLASLt handle per context, never destroyed */

/* The symbols of syms from library h into the function table at base: NULL,
   or the name of the first required one h lacks. */
static const char *load_syms(void *h, const struct LtSym *syms, size_t n, void *base) {
  for (size_t i = 0; i < n; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f && !syms[i].optional) return syms[i].name;
    memcpy((char *)base + syms[i].off, &f, sizeof f);
  }
  return NULL;
}

/* Under lock. */
static int load_lt(char *err, size_t errlen) {
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
  if (lt.lib) return 0;
  void *h = cuda_open_lib(names, err, errlen);
  if (!h) return 1;
  const char *lacks = load_syms(h, lt_syms, sizeof lt_syms / sizeof lt_syms[0], &lt);
  if (lacks) return em_seterr(err, errlen, "libcublasLt lacks %s", lacks), 1;
  lt.lib = h;
  return 0;
}

/* Under lock: libcublas, opened once; 0 if it is there. */
static int load_cb(void) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
  if (cb.lib || cb.failed) return cb.failed;
  char err[512];
  void *h = cuda_open_lib(names, err, sizeof err);
  if (!h || load_syms(h, cb_syms, sizeof cb_syms / sizeof cb_syms[0], &cb)) return cb.failed = 1;
  cb.lib = h;
  return 0;
}

/* Under lock: the context's handle, created at its first use. */
static LtHandle handle_for(void *ctx, char *err, size_t errlen) {
  int i;
  for (i = 0; i < MAX_CTX && handles[i].ctx; i++)
    if (handles[i].ctx == ctx) return handles[i].h;
  if (i == MAX_CTX) return em_seterr(err, errlen, "blas_matmul: more than %d CUDA contexts", MAX_CTX), NULL;
  LtStatus s = lt.Create(&handles[i].h);
  if (s) return lt_fail(s, "cublasLtCreate", err, errlen), NULL;
  handles[i].ctx = ctx;
  return handles[i].h;
}

static void plan_free(Plan *p) {
  if (p->desc) lt.DescDestroy(p->desc);
  if (p->la) lt.LayoutDestroy(p->la);
  if (p->lb) lt.LayoutDestroy(p->lb);
  if (p->lc) lt.LayoutDestroy(p->lc);
  memset(p, 0, sizeof *p);
}

/* The largest power of two (up to 256) dividing the address and, for
   batches, the byte stride between matrices: the alignment every matrix of
   the batch has. */
static int64_t alignment(const void *p, int64_t stride_bytes, int64_t batch) {
  uint64_t a = (uint64_t)(uintptr_t)p | 256;
  if (batch > 1 && stride_bytes) a |= (uint64_t)stride_bytes;
  return (int64_t)(a & -a);
}

static int layout(LtLayout *l, int type, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                  char *err, size_t errlen) {
  LtStatus s = lt.LayoutCreate(l, type, (uint64_t)rows, (uint64_t)cols, ld);
  if (s) return lt_fail(s, "cublasLtMatrixLayoutCreate", err, errlen);
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    if ((s = lt.LayoutSetAttribute(*l, LT_LAYOUT_BATCH_COUNT, &count, sizeof count)) ||
        (s = lt.LayoutSetAttribute(*l, LT_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride)))
      return lt_fail(s, "cublasLtMatrixLayoutSetAttribute(batch)", err, errlen);
  }
  return 0;
}

/* The heuristic's preferences for problem k: the workspace, the pointers'
   alignments, and split-K partial sums reduced in fp32
   (cublasLtReductionScheme_t's COMPUTE_TYPE = 2), never rounded to a 16-bit
   output type first. */
static int make_pref(const PlanKey *k, int type, LtPref *pref, char *err, size_t errlen) {
  LtStatus s;
  if ((s = lt.PrefCreate(pref))) return lt_fail(s, "cublasLtMatmulPreferenceCreate", err, errlen);
  uint64_t ws = k->workspace;
  uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c;
  uint32_t reductions = type == LT_R_32F ? 7u : 2u;
  if ((s = lt.PrefSetAttribute(*pref, LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
      (s = lt.PrefSetAttribute(*pref, LT_PREF_MIN_ALIGN_A, &al_a, sizeof al_a)) ||
      (s = lt.PrefSetAttribute(*pref, LT_PREF_MIN_ALIGN_B, &al_b, sizeof al_b)) ||
      (s = lt.PrefSetAttribute(*pref, LT_PREF_MIN_ALIGN_C, &al_c, sizeof al_c)) ||
      (s = lt.PrefSetAttribute(*pref, LT_PREF_MIN_ALIGN_D, &al_c, sizeof al_c)) ||
      (s = lt.PrefSetAttribute(*pref, LT_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof reductions))) {
    lt.PrefDestroy(*pref);
    return lt_fail(s, "cublasLtMatmulPreferenceSetAttribute", err, errlen);
  }
  return 0;
}

static int lt_type(int dtype) { return dtype == EMBER_F32 ? LT_R_32F : dtype == EMBER_BF16 ? LT_R_16BF : LT_R_16F; }

/* Fill p (key already set) with descriptors and an algorithm. */
static int plan_make(Plan *p, const void *bias, char *err, size_t errlen) {
  const PlanKey *k = &p->key;
  int type = lt_type((int)k->dtype);
  LtStatus s = lt.DescCreate(&p->desc, LT_COMPUTE_32F, LT_R_32F);
  if (s) return lt_fail(s, "cublasLtMatmulDescCreate", err, errlen);
  int32_t opa = k->transb ? LT_OP_T : LT_OP_N, opb = k->transa ? LT_OP_T : LT_OP_N;  /* slots swapped: C^T = B^T A^T */
  uint32_t epi = (uint32_t)k->epi;
  if ((s = lt.DescSetAttribute(p->desc, LT_DESC_TRANSA, &opa, sizeof opa)) ||
      (s = lt.DescSetAttribute(p->desc, LT_DESC_TRANSB, &opb, sizeof opb)) ||
      (s = lt.DescSetAttribute(p->desc, LT_DESC_EPILOGUE, &epi, sizeof epi)))
    return lt_fail(s, "cublasLtMatmulDescSetAttribute", err, errlen);
  /* The heuristic reads the bias pointer's alignment. */
  if (bias && (s = lt.DescSetAttribute(p->desc, LT_DESC_BIAS_POINTER, &bias, sizeof bias)))
    return lt_fail(s, "cublasLtMatmulDescSetAttribute(bias)", err, errlen);
  /* Stored matrices as cuBLASLt sees them (column-major views of row-major
     storage): our B is n x k (k x n if stored transposed), our A k x m (m x k). */
  if (layout(&p->la, type, k->transb ? k->k : k->n, k->transb ? k->n : k->k, k->ldb, k->batch, k->sb, err, errlen) ||
      layout(&p->lb, type, k->transa ? k->m : k->k, k->transa ? k->k : k->m, k->lda, k->batch, k->sa, err, errlen) ||
      layout(&p->lc, type, k->n, k->m, k->ldc, k->batch, k->sc, err, errlen))
    return 1;

  LtPref pref;
  LtHeuristic hs[1];
  int got = 0;
  if (make_pref(k, type, &pref, err, errlen)) return 1;
  s = lt.AlgoGetHeuristic(p->handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, hs, &got);
  lt.PrefDestroy(pref);
  if (s) return lt_fail(s, "cublasLtMatmulAlgoGetHeuristic", err, errlen);
  if (got < 1 || hs[0].state)
    return em_seterr(err, errlen, "cublasLtMatmulAlgoGetHeuristic: no algorithm for this problem"), 1;
  p->algo = hs[0].algo;
  return 0;
}

#define BIAS_ALIGN 16  /* bytes: what a bias must be aligned to for any cuBLASLt kernel */
#define LT_WORKSPACE ((size_t)8 << 20)  /* the most of the workspace cuBLASLt is given (ember_int.h) */

/* A bias that is not BIAS_ALIGN-aligned: copy it (n elements of es bytes) to
   the end of the workspace, in stream order, and point *bias at the copy;
   the workspace left to the call shrinks by the room taken.  0, or 1 with
   err set when the workspace has no room for it. */
static int copy_misaligned_bias(const void **bias, int64_t n, int64_t es, void *workspace, size_t *workspace_bytes,
                                void *stream, char *err, size_t errlen) {
  if (!*bias || (uintptr_t)*bias % BIAS_ALIGN == 0) return 0;
  size_t bytes = (size_t)n * (size_t)es;
  uintptr_t lo = (uintptr_t)workspace, end = (lo + *workspace_bytes) & ~(uintptr_t)255;
  uintptr_t at = end >= bytes ? (end - bytes) & ~(uintptr_t)255 : 0;
  if (!workspace || end <= lo || at < lo)
    return em_seterr(err, errlen, "blas_matmul: the bias at %p is not %d-byte aligned, and the workspace (%zu bytes) "
                  "has no room for an aligned copy of its %zu bytes", *bias, BIAS_ALIGN, *workspace_bytes, bytes), 1;
  if (cuda_copy_async((void *)at, *bias, bytes, stream, err, errlen)) return 1;
  *bias = (const void *)at;
  *workspace_bytes = at - lo;
  return 0;
}

/* Under lock: the context's classic cuBLAS handle (made at its first use,
   with split-K partial sums of 16-bit products kept in fp32), or NULL where
   the classic API is not to be had. */
static CbHandle classic_handle(void *ctx, char *err, size_t errlen) {
  if (load_cb()) return NULL;
  int i;
  for (i = 0; i < MAX_CTX && handles[i].ctx != ctx; i++) {}
  if (i == MAX_CTX) return NULL;  /* handle_for made the slot; a full table keeps to cuBLASLt */
  LtStatus s;
  if (!handles[i].cb) {
    if ((s = cb.Create(&handles[i].cb))) return cb_fail(s, "cublasCreate", err, errlen), NULL;
    if (cb.SetMathMode) cb.SetMathMode(handles[i].cb, CB_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  }
  return handles[i].cb;
}

/* Can the classic call run this product?  float32 with one matrix through
   cublasSgemm; other types and batches through cublasGemmEx and its strided
   batched twin (tuning only), where the library has them; never a bias or
   an epilogue, and every size an int. */
static int classic_fits(int dtype, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                        int64_t batch, int bias, int epi) {
  if (bias || epi != EPI_NONE || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX ||
      ldb > INT32_MAX || ldc > INT32_MAX)
    return 0;
  if (dtype == EMBER_F32 && batch == 1) return 1;
  return cb.SetMathMode && (batch == 1 ? cb.GemmEx != NULL : cb.GemmStridedBatchedEx != NULL);
}

/* Under lock: the product through cuBLAS's classic API (see the header),
   row-major C = A B computed as C^T = B^T A^T like the cuBLASLt path.  0
   done, 1 with err set, -1 where the classic API is not to be had
   (cuBLASLt's turn). */
static int classic_gemm(void *ctx, int dtype, int transa, int transb, int64_t m, int64_t n, int64_t k,
                        const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, void *c,
                        int64_t ldc, int64_t sc, int64_t batch, void *workspace, size_t workspace_bytes,
                        void *stream, char *err, size_t errlen) {
  if (!workspace_bytes || load_cb() || !classic_fits(dtype, m, n, k, lda, ldb, ldc, batch, 0, EPI_NONE)) return -1;
  char why[256] = "";
  CbHandle h = classic_handle(ctx, why, sizeof why);
  if (!h) return *why ? (em_seterr(err, errlen, "%s", why), 1) : -1;
  const float one = 1.0f, zero = 0.0f;
  int ta = transb ? LT_OP_T : LT_OP_N, tb = transa ? LT_OP_T : LT_OP_N;
  int type = dtype == EMBER_F32 ? LT_R_32F : dtype == EMBER_BF16 ? LT_R_16BF : LT_R_16F;
  LtStatus s;
  if ((s = cb.SetStream(h, stream))) return cb_fail(s, "cublasSetStream", err, errlen);
  if ((s = cb.SetWorkspace(h, workspace, workspace_bytes))) return cb_fail(s, "cublasSetWorkspace", err, errlen);
  if (dtype == EMBER_F32 && batch == 1) {
    if ((s = cb.Sgemm(h, ta, tb, (int)n, (int)m, (int)k, &one, b, (int)ldb, a, (int)lda, &zero, c, (int)ldc)))
      return cb_fail(s, "cublasSgemm", err, errlen);
  } else if (batch == 1) {
    if ((s = cb.GemmEx(h, ta, tb, (int)n, (int)m, (int)k, &one, b, type, (int)ldb, a, type, (int)lda, &zero, c, type,
                       (int)ldc, LT_COMPUTE_32F, CB_GEMM_DEFAULT)))
      return cb_fail(s, "cublasGemmEx", err, errlen);
  } else if ((s = cb.GemmStridedBatchedEx(h, ta, tb, (int)n, (int)m, (int)k, &one, b, type, (int)ldb, sb, a, type,
                                          (int)lda, sa, &zero, c, type, (int)ldc, sc, (int)batch, LT_COMPUTE_32F,
                                          CB_GEMM_DEFAULT))) {
    return cb_fail(s, "cublasGemmStridedBatchedEx", err, errlen);
  }
  return 0;
}

static const char *mm_dtype_name(int dtype) {
  return dtype == EMBER_F32 ? "f32" : dtype == EMBER_BF16 ? "bf16" : dtype == EMBER_F16 ? "f16" : "?";
}

/* ---------------------------------------------------------------- tuning: the choice and its record
   (no GPU here: tests/c/test_gemm_tune.c) */

#define TUNE_MARGIN 0.03             /* a candidate replaces the default only when this much faster */
#define TUNE_RECORD_MAGIC "ember-gemm-tune 1\n"

static int valid_ms(double x) { return x > 0 && isfinite(x); }

int blas_tune_pick(const double *ms, int n, int dflt, double margin) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (valid_ms(ms[i]) && (best < 0 || ms[i] < ms[best])) best = i;
  if (best < 0 || best == dflt || dflt < 0 || dflt >= n || !valid_ms(ms[dflt])) return dflt;
  return ms[best] < ms[dflt] * (1.0 - margin) ? best : dflt;
}

int blas_tune_best(const double *ms, int n, int dflt, int k, int *out) {
  int got = 0;
  for (int i = 0; i < n; i++) {
    if (i == dflt || !valid_ms(ms[i])) continue;
    int j = got < k ? got++ : k;   /* insert i in order; past k it falls off */
    while (j > 0 && ms[out[j - 1]] > ms[i]) {
      if (j < k) out[j] = out[j - 1];
      j--;
    }
    if (j < k) out[j] = i;
  }
  return got;
}

static double median(const double *x, int n) {
  double s[64];
  if (n <= 0) return INFINITY;
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) {
    int j = i;
    for (; j > 0 && s[j - 1] > x[i]; j--) s[j] = s[j - 1];
    s[j] = x[i];
  }
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* One line of text (no newline) from a record's field. */
static void clean_line(char *dst, size_t n, const char *src) {
  size_t i = 0;
  for (; src && src[i] && i + 1 < n; i++) dst[i] = src[i] == '\n' || src[i] == '\r' ? ' ' : src[i];
  if (n) dst[i] = 0;
}

int blas_tune_encode(const BlasTuneRec *r, char *buf, size_t n) {
  char hex[129], p[sizeof r->problem], d[sizeof r->dflt], c[sizeof r->chosen];
  for (int i = 0; i < 64; i++) snprintf(hex + 2 * i, 3, "%02x", r->algo[i]);
  clean_line(p, sizeof p, r->problem), clean_line(d, sizeof d, r->dflt), clean_line(c, sizeof c, r->chosen);
  int w = snprintf(buf, n, TUNE_RECORD_MAGIC "kind %d\nalgo %s\ndefault_ms %.17g\nchosen_ms %.17g\ncandidates %d\n"
                   "problem %s\ndefault %s\nchosen %s\n", r->kind, hex, r->dflt_ms, r->chosen_ms, r->candidates,
                   p, d, c);
  return w < 0 || (size_t)w >= n ? -1 : w;
}

/* The text after "name " on the line that starts with it, up to the newline, into dst. */
static int field(const char *buf, size_t n, const char *name, char *dst, size_t dn) {
  size_t ln = strlen(name);
  for (size_t i = 0; i < n;) {
    const char *line = buf + i, *nl = memchr(line, '\n', n - i);
    size_t len = nl ? (size_t)(nl - line) : n - i;
    if (len > ln && !memcmp(line, name, ln) && line[ln] == ' ') {
      size_t vl = len - ln - 1;
      if (vl >= dn) return -1;
      memcpy(dst, line + ln + 1, vl);
      dst[vl] = 0;
      return 0;
    }
    i += len + 1;
  }
  return -1;
}

int blas_tune_decode(const char *buf, size_t n, BlasTuneRec *r) {
  memset(r, 0, sizeof *r);
  size_t ml = strlen(TUNE_RECORD_MAGIC);
  char v[256], hex[160], *end;
  if (n < ml || memcmp(buf, TUNE_RECORD_MAGIC, ml)) return -1;
  if (field(buf, n, "kind", v, sizeof v)) return -1;
  r->kind = (int)strtol(v, &end, 10);
  if (*end || r->kind < 0 || r->kind > 2) return -1;
  if (field(buf, n, "algo", hex, sizeof hex) || strlen(hex) != 128) return -1;
  for (int i = 0; i < 64; i++) {
    char two[3] = {hex[2 * i], hex[2 * i + 1], 0};
    unsigned long x = strtoul(two, &end, 16);
    if (*end || !isxdigit((unsigned char)two[0]) || !isxdigit((unsigned char)two[1])) return -1;
    r->algo[i] = (unsigned char)x;
  }
  if (field(buf, n, "default_ms", v, sizeof v)) return -1;
  r->dflt_ms = strtod(v, &end);
  if (*end) return -1;
  if (field(buf, n, "chosen_ms", v, sizeof v)) return -1;
  r->chosen_ms = strtod(v, &end);
  if (*end) return -1;
  if (field(buf, n, "candidates", v, sizeof v)) return -1;
  r->candidates = (int)strtol(v, &end, 10);
  if (*end || r->candidates < 0) return -1;
  if (field(buf, n, "problem", r->problem, sizeof r->problem) || field(buf, n, "default", r->dflt, sizeof r->dflt) ||
      field(buf, n, "chosen", r->chosen, sizeof r->chosen))
    return -1;
  return 0;
}

void blas_tune_key(const char *gpu, size_t lt_version, const char *problem, char key[65]) {
  char buf[1024];
  int w = snprintf(buf, sizeof buf, "ember gemm tuning 1\ngpu %s\ncublasLt %zu\n%s\n", gpu ? gpu : "",
                   lt_version, problem ? problem : "");
  em_sha256_hex(buf, w < 0 ? 0 : (size_t)w < sizeof buf ? (size_t)w : sizeof buf - 1, key);
}

int blas_tune_store(const char *dir, const char *key, const BlasTuneRec *r, char *err, size_t errlen) {
  char buf[2048];
  int w = blas_tune_encode(r, buf, sizeof buf);
  if (w < 0) return em_seterr(err, errlen, "the tuning record does not fit %zu bytes", sizeof buf), -1;
  if (cache_open_dir(dir, err, errlen)) return -1;
  return cache_store_bytes(dir, key, buf, (size_t)w, err, errlen);
}

int blas_tune_load(const char *dir, const char *key, BlasTuneRec *r) {
  char path[4096], why[512];
  void *data = NULL;
  size_t n = 0;
  if (!dir || !*dir || cache_open_dir(dir, why, sizeof why)) return 1;
  cache_entry_path(dir, key, path, sizeof path);
  if (cache_read_entry(path, &data, &n, why, sizeof why)) return 1;
  int bad = blas_tune_decode(data, n, r);
  free(data);
  return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- tuning: timing on the GPU

   At a product's first call with BLAS_TUNE (option tune_gemms, the modes
   max-autotune and max-autotune-no-cudagraphs), outside a CUDA-graph
   capture (the runner's warm-up calls come first), the candidates are
   timed on the call's own operands and stream, and the fastest kept when
   it beats the default by TUNE_MARGIN.  The candidates: the default (the
   heuristic's first choice, or cublasSgemm where lower.c asked for it); the
   heuristic's next TUNE_HEURISTIC; the classic call (cublasSgemm,
   cublasGemmEx, cublasGemmStridedBatchedEx: another heuristic, the one
   torch's mm and so Inductor's extern kernels reach) where there is no
   bias or epilogue; and configurations made directly: every algorithm id
   of the types, every tile it offers with its own and a listed stage count,
   checked by cublasLtMatmulAlgoCheck.  Round one times each (the budget
   allowing); the best TUNE_REFINE cuBLASLt ones are then varied one
   attribute at a time (every stage count, split-K 2..16 with fp32 partial
   sums, CTA swizzle, custom options, cluster shapes) and those timed; the
   TUNE_FINALISTS fastest and the default are timed again in
   TUNE_FINAL_ROUNDS interleaved rounds, and the medians decide.

   Numerics stay as untuned: compute and accumulation in fp32 (an algorithm
   whose implementation flags say tensor ops on fp32 data, a 16-bit
   accumulator or TF32 inputs is skipped), split-K sums in fp32, the classic
   handle told to keep 16-bit reductions in fp32.  An algorithm whose
   minimum alignments exceed the operands' (pointers, leading dimensions,
   batch strides) or whose workspace exceeds the call's is skipped.

   Timing writes the call's own output: beta is 0 and no epilogue reads C,
   and the output never aliases an operand, so the last run, the chosen
   algorithm's, leaves the right result.  Each timing waits for its events
   (the only waits, once per problem).  The choice goes to the disk cache
   (cache.c's entries, keyed by the GPU's name, cuBLASLt's version and the
   problem), where a later process reads it without timing anything; during
   a capture only the disk is asked.  Budgets of wall time: TUNE_PROBLEM_MS
   per problem, TUNE_GRAPH_MS per graph (blas.c does not see graphs: the
   client calls ember_gemm_budget_reset before a graph's first run, where
   its products are tuned) and TUNE_PROCESS_MS per process; past one, a
   product keeps its default (and says so).  Whatever goes wrong while tuning
   (events, a candidate that will not run) leaves the default and a note;
   it never fails the call. */

#define TUNE_HEURISTIC 32            /* the heuristic's candidates asked for */
#define TUNE_MAX_CANDIDATES 640      /* timed per problem, at most ... */
#define TUNE_ROUND_ONE 480           /* ... of them in round one, the rest left to the variations */
#define TUNE_MAX_IDS 128             /* algorithm ids enumerated */
#define TUNE_STAGES_PER_TILE 2       /* stage counts per tile in round one ... */
#define TUNE_STAGE_TRIES 6           /* ... of the first ones it lists */
#define TUNE_REFINE 4                /* cuBLASLt candidates varied after round one */
#define TUNE_MAX_CUSTOM 8            /* custom options tried per refined candidate */
#define TUNE_MIN_SPLIT_K 64          /* k per split, at least */
#define TUNE_FINALISTS 8
#define TUNE_FINAL_ROUNDS 5
#define TUNE_WARMUP 1                /* untimed runs before each timing */
#define TUNE_REPS 3                  /* timed batches per timing (median) */
#define TUNE_BATCH_MS 0.05           /* a timed batch repeats the product to last this long ... */
#define TUNE_MAX_INNER 64            /* ... up to this many runs */
#define TUNE_PROBLEM_MS 1500.0       /* wall time per problem */
#define TUNE_GRAPH_MS 60000.0        /* wall time per graph (since ember_gemm_budget_reset) */
#define TUNE_PROCESS_MS 300000.0     /* wall time per process */

static char tune_folder[4096];       /* the disk cache's folder, "" none (under lock) */
static double tune_spent_ms;         /* this process's tuning so far */
static double tune_graph_ms;         /* ... since the client's last ember_gemm_budget_reset */
static BlasTuned *tuned_list;        /* every problem tuned, in order (malloc) */
static int ntuned, captuned;

void ember_gemm_cache_dir(const char *dir) {
  pthread_mutex_lock(&lock);
  snprintf(tune_folder, sizeof tune_folder, "%s", dir ? dir : "");
  pthread_mutex_unlock(&lock);
}

void ember_gemm_budget_reset(void) {
  pthread_mutex_lock(&lock);
  tune_graph_ms = 0;
  pthread_mutex_unlock(&lock);
}

int ember_gemm_choices(int i, ember_gemm_choice *out) {
  pthread_mutex_lock(&lock);
  int n = ntuned;
  if (out && i >= 0 && i < n) *out = tuned_list[i];
  pthread_mutex_unlock(&lock);
  return n;
}

/* Under lock. */
static void tuned_add(const BlasTuned *t) {
  if (ntuned == captuned) {
    int cap = captuned ? 2 * captuned : 32;
    BlasTuned *nl = em_realloc(tuned_list, sizeof *nl * (size_t)cap);
    if (!nl) return;  /* out of memory: the report loses a line */
    tuned_list = nl, captuned = cap;
  }
  tuned_list[ntuned++] = *t;
}

typedef struct Cand {
  int kind;                          /* 1 cuBLASLt (algo), 2 the classic call */
  LtAlgo algo;
  double ms;                         /* round one's median per run; INFINITY: not timed or failed */
} Cand;

typedef struct Tuning {              /* one problem's search */
  Plan *p;
  void *ctx;
  int dtype, ta, tb;
  int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
  const void *a, *b;
  void *c;
  void *ws, *stream;
  size_t ws_bytes, whole;
  uint32_t align[3];                 /* cuBLASLt's A (our B), B (our A) and C = D: bytes */
  int classic_fits;
  void *ev[2];
  int inner;                         /* runs per timed batch */
  double deadline;                   /* em_now_ms() past which nothing more is timed */
  Cand cand[TUNE_MAX_CANDIDATES];
  int ncand, timed;
  char err[512];
} Tuning;

static int run_cand(Tuning *T, const Cand *c) {
  Plan *p = T->p;
  if (c->kind == 2)
    return classic_gemm(T->ctx, T->dtype, T->ta, T->tb, T->m, T->n, T->k, T->a, T->lda, T->sa, T->b, T->ldb, T->sb,
                        T->c, T->ldc, T->sc, T->batch, T->ws, T->whole, T->stream, T->err, sizeof T->err) != 0;
  const float one = 1.0f, zero = 0.0f;
  LtStatus s = lt.Matmul(p->handle, p->desc, &one, T->b, p->la, T->a, p->lb, &zero, T->c, p->lc, T->c, p->lc,
                         &c->algo, T->ws, T->ws_bytes, T->stream);
  return s ? lt_fail(s, "cublasLtMatmul", T->err, sizeof T->err) : 0;
}

/* The median time of one run of c over reps batches of T->inner runs. */
static int time_cand(Tuning *T, const Cand *c, int reps, double *ms) {
  double s[16];
  if (reps > 16) reps = 16;
  for (int w = 0; w < TUNE_WARMUP; w++)
    if (run_cand(T, c)) return 1;
  for (int r = 0; r < reps; r++) {
    float f = 0;
    if (cuda_event_record(T->ev[0], T->stream, T->err, sizeof T->err)) return 1;
    for (int j = 0; j < T->inner; j++)
      if (run_cand(T, c)) return 1;
    if (cuda_event_record(T->ev[1], T->stream, T->err, sizeof T->err) ||
        cuda_event_ms(T->ev[0], T->ev[1], &f, T->err, sizeof T->err))
      return 1;
    s[r] = (double)f / T->inner;
  }
  *ms = median(s, reps);
  return 0;
}

/* Add a candidate unless it is there already; 1 if added. */
static int add_cand(Tuning *T, int kind, const LtAlgo *algo) {
  if (T->ncand >= TUNE_MAX_CANDIDATES) return 0;
  for (int i = 0; i < T->ncand; i++)
    if (T->cand[i].kind == kind && (kind == 2 || !memcmp(&T->cand[i].algo, algo, sizeof *algo))) return 0;
  Cand *c = &T->cand[T->ncand++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  if (algo) c->algo = *algo;
  c->ms = INFINITY;
  return 1;
}

/* The algorithm keeps the numerics and fits the operands' alignments. */
static int algo_fits(const Tuning *T, const LtAlgo *al) {
  uint64_t f = 0;
  size_t w = 0;
  if (!lt.CapGet || lt.CapGet(al, LT_CAP_NUMERICS, &f, sizeof f, &w)) return 0;
  if (f & (LT_NUM_ACC_16F | LT_NUM_INPUT_TF32)) return 0;
  if (T->dtype == EMBER_F32 && (f & LT_NUM_TENSOR_OP)) return 0;
  for (int i = 0; i < 4; i++) {
    uint32_t need = 0;
    if (lt.CapGet(al, LT_CAP_MIN_ALIGN_A + i, &need, sizeof need, &w)) return 0;
    if (need > T->align[i < 3 ? i : 2]) return 0;
  }
  if (T->batch > 1) {
    int32_t strided = 0;
    if (lt.CapGet(al, LT_CAP_STRIDED_BATCH, &strided, sizeof strided, &w) || !strided) return 0;
  }
  /* the epilogue's bits (bias, relu, gelu; none for the default) */
  uint32_t epis = 0, need = (uint32_t)T->p->key.epi & ~(uint32_t)LT_EPI_DEFAULT;
  if (need && !lt.CapGet(al, LT_CAP_EPILOGUE_MASK, &epis, sizeof epis, &w) && (epis & need) != need) return 0;
  return 1;
}

/* Checked by cuBLASLt for this problem and added; 1 if added. */
static int check_add(Tuning *T, const LtAlgo *al) {
  LtHeuristic r;
  memset(&r, 0, sizeof r);
  Plan *p = T->p;
  if (lt.AlgoCheck(p->handle, p->desc, p->la, p->lb, p->lc, p->lc, al, &r) || r.state ||
      r.workspace_size > T->ws_bytes)
    return 0;
  return add_cand(T, 1, al);
}

/* An array capability (tile or stage ids) into a new buffer; its count. */
static int cap_list(const LtAlgo *al, int attr, uint32_t **out) {
  size_t w = 0;
  *out = NULL;
  if (lt.CapGet(al, attr, NULL, 0, &w) || w < sizeof(uint32_t)) return 0;
  uint32_t *ids = em_malloc(w);
  if (!ids) return 0;
  if (lt.CapGet(al, attr, ids, w, &w)) return free(ids), 0;
  *out = ids;
  return (int)(w / sizeof(uint32_t));
}

static int cfg(LtAlgo *al, int attr, uint32_t v) {
  if (attr == LT_CFG_CLUSTER || attr == LT_CFG_INNER) {
    uint16_t x = (uint16_t)v;
    return lt.ConfigSet(al, attr, &x, sizeof x) != 0;
  }
  return lt.ConfigSet(al, attr, &v, sizeof v) != 0;  /* int32_t and uint32_t alike */
}

static int can_configure(void) {
  return lt.AlgoGetIds && lt.AlgoInit && lt.AlgoCheck && lt.CapGet && lt.ConfigSet && lt.ConfigGet;
}

/* Every algorithm id of the types, every tile, up to TUNE_STAGES_PER_TILE
   stage counts (its own first).  The ids take turns, a tile each, so that
   when the candidates or the time run out every id has had its share. */
typedef struct IdTiles {
  LtAlgo base;
  uint32_t *tiles, *stages;          /* cap_list's (malloc) */
  int nt, ns;
} IdTiles;

static void enumerate(Tuning *T) {
  if (!can_configure()) return;
  int type = lt_type(T->dtype), ids[TUNE_MAX_IDS], nid = 0, n = 0, most = 1;
  if (lt.AlgoGetIds(T->p->handle, LT_COMPUTE_32F, LT_R_32F, type, type, type, type, TUNE_MAX_IDS, ids, &nid)) return;
  IdTiles *it = em_malloc(sizeof *it * (size_t)(nid > 0 ? nid : 1));
  if (!it) return;
  for (int i = 0; i < nid; i++) {
    IdTiles *d = &it[n];
    memset(d, 0, sizeof *d);
    if (lt.AlgoInit(T->p->handle, LT_COMPUTE_32F, LT_R_32F, type, type, type, type, ids[i], &d->base) ||
        !algo_fits(T, &d->base))
      continue;
    d->nt = cap_list(&d->base, LT_CAP_TILE_IDS, &d->tiles);
    d->ns = cap_list(&d->base, LT_CAP_STAGES_IDS, &d->stages);
    if (d->nt > most) most = d->nt;
    n++;
  }
  for (int t = 0; t < most && T->ncand < TUNE_ROUND_ONE && em_now_ms() < T->deadline; t++)
    for (int i = 0; i < n && T->ncand < TUNE_ROUND_ONE; i++) {
      IdTiles *d = &it[i];
      LtAlgo al = d->base;
      if (t >= (d->nt ? d->nt : 1) || (d->nt && cfg(&al, LT_CFG_TILE, d->tiles[t]))) continue;
      int added = 0;
      for (int j = -1; j < d->ns && j < TUNE_STAGE_TRIES && added < TUNE_STAGES_PER_TILE &&
                       T->ncand < TUNE_ROUND_ONE; j++) {
        LtAlgo v = al;
        if (j >= 0 && (!d->stages[j] || cfg(&v, LT_CFG_STAGES, d->stages[j]))) continue;
        added += check_add(T, &v);
      }
    }
  for (int i = 0; i < n; i++) free(it[i].tiles), free(it[i].stages);
  free(it);
}

/* Variations of a cuBLASLt candidate, one attribute at a time. */
static void refine(Tuning *T, LtAlgo base) {
  if (!can_configure()) return;
  int32_t splitk = 0, custom_max = 0;
  uint32_t red_mask = 0, swizzle = 0, cur_swizzle = 0;
  size_t w;
  lt.CapGet(&base, LT_CAP_SPLITK, &splitk, sizeof splitk, &w);
  lt.CapGet(&base, LT_CAP_REDUCTION_MASK, &red_mask, sizeof red_mask, &w);
  lt.CapGet(&base, LT_CAP_SWIZZLE, &swizzle, sizeof swizzle, &w);
  lt.CapGet(&base, LT_CAP_CUSTOM_MAX, &custom_max, sizeof custom_max, &w);
  lt.ConfigGet(&base, LT_CFG_SWIZZLE, &cur_swizzle, sizeof cur_swizzle, &w);
  uint32_t *stages;
  int ns = cap_list(&base, LT_CAP_STAGES_IDS, &stages);
  for (int j = 0; j < ns; j++) {
    LtAlgo v = base;
    if (stages[j] && !cfg(&v, LT_CFG_STAGES, stages[j])) check_add(T, &v);
  }
  free(stages);
  /* split-K with the partial sums in fp32: the compute type's, or (fp32 output) in place */
  uint32_t red = red_mask & LT_RED_COMPUTE ? LT_RED_COMPUTE
               : T->dtype == EMBER_F32 && (red_mask & LT_RED_INPLACE) ? LT_RED_INPLACE : LT_RED_NONE;
  static const int splits[] = {2, 3, 4, 6, 8, 12, 16};
  for (int i = 0; splitk && red != LT_RED_NONE && i < (int)(sizeof splits / sizeof splits[0]); i++) {
    if (T->k / splits[i] < TUNE_MIN_SPLIT_K) break;
    LtAlgo v = base;
    if (!cfg(&v, LT_CFG_SPLITK, (uint32_t)splits[i]) && !cfg(&v, LT_CFG_REDUCTION, red)) check_add(T, &v);
  }
  if (swizzle) {
    LtAlgo v = base;
    if (!cfg(&v, LT_CFG_SWIZZLE, !cur_swizzle)) check_add(T, &v);
  }
  for (int o = 1; o <= custom_max && o <= TUNE_MAX_CUSTOM; o++) {
    LtAlgo v = base;
    if (!cfg(&v, LT_CFG_CUSTOM, (uint32_t)o)) check_add(T, &v);
  }
  for (int cl = LT_CLUSTER_FIRST; cl <= LT_CLUSTER_LAST; cl++) {
    LtAlgo v = base;
    if (!cfg(&v, LT_CFG_CLUSTER, (uint32_t)cl)) check_add(T, &v);
  }
}

/* The heuristic's first TUNE_HEURISTIC answers (its first is the default). */
static void heuristic_cands(Tuning *T) {
  LtHeuristic *hs = em_malloc(sizeof *hs * TUNE_HEURISTIC);
  LtPref pref;
  int got = 0;
  char err[256];
  if (!hs) return;
  if (!make_pref(&T->p->key, lt_type(T->dtype), &pref, err, sizeof err)) {
    Plan *p = T->p;
    if (lt.AlgoGetHeuristic(p->handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, TUNE_HEURISTIC, hs, &got)) got = 0;
    lt.PrefDestroy(pref);
  }
  for (int i = 0; i < got; i++)
    if (!hs[i].state && hs[i].workspace_size <= T->ws_bytes && algo_fits(T, &hs[i].algo)) add_cand(T, 1, &hs[i].algo);
  free(hs);
}

/* Round one: every candidate not timed yet, while the budget lasts. */
static void time_round(Tuning *T, int from) {
  for (int i = from; i < T->ncand && em_now_ms() < T->deadline; i++) {
    Cand *c = &T->cand[i];
    if (valid_ms(c->ms)) continue;
    double ms;
    T->timed++;
    c->ms = time_cand(T, c, TUNE_REPS, &ms) ? -1 : ms;  /* -1: failed, not timed again */
  }
}

static void describe(const Cand *c, const Tuning *T, char *buf, size_t n) {
  if (c->kind == 2) {
    snprintf(buf, n, "cuBLAS %s", T->dtype == EMBER_F32 && T->batch == 1 ? "sgemm"
                                  : T->batch == 1 ? "gemmEx" : "gemmStridedBatchedEx");
    return;
  }
  int32_t id = -1, splitk = 1;
  uint32_t tile = 0, stages = 0, swizzle = 0, custom = 0;
  uint16_t cluster = 0;
  size_t w;
  if (!lt.ConfigGet) {
    snprintf(buf, n, "cuBLASLt matmul");
    return;
  }
  lt.ConfigGet(&c->algo, LT_CFG_ID, &id, sizeof id, &w);
  lt.ConfigGet(&c->algo, LT_CFG_TILE, &tile, sizeof tile, &w);
  lt.ConfigGet(&c->algo, LT_CFG_STAGES, &stages, sizeof stages, &w);
  lt.ConfigGet(&c->algo, LT_CFG_SPLITK, &splitk, sizeof splitk, &w);
  lt.ConfigGet(&c->algo, LT_CFG_SWIZZLE, &swizzle, sizeof swizzle, &w);
  lt.ConfigGet(&c->algo, LT_CFG_CUSTOM, &custom, sizeof custom, &w);
  lt.ConfigGet(&c->algo, LT_CFG_CLUSTER, &cluster, sizeof cluster, &w);
  snprintf(buf, n, "cuBLASLt algo %d tile %u stages %u split-K %d swizzle %u custom %u cluster %u", id, tile, stages,
           splitk, swizzle, custom, cluster);
}

/* The search (see above): 0 with rec filled, 1 with T->err set. */
static int tune_search(Tuning *T, BlasTuneRec *rec) {
  Plan *p = T->p;
  add_cand(T, p->classic ? 2 : 1, &p->algo);
  double d;
  T->inner = 1;
  if (time_cand(T, &T->cand[0], TUNE_REPS, &d)) return 1;
  T->cand[0].ms = d;
  T->inner = d > 0 ? (int)ceil(TUNE_BATCH_MS / d) : TUNE_MAX_INNER;
  if (T->inner < 1) T->inner = 1;
  if (T->inner > TUNE_MAX_INNER) T->inner = TUNE_MAX_INNER;
  if (T->inner > 1 && time_cand(T, &T->cand[0], TUNE_REPS, &T->cand[0].ms)) return 1;
  T->timed = 1;
  heuristic_cands(T);
  if (T->classic_fits) add_cand(T, 2, NULL);
  enumerate(T);
  time_round(T, 1);

  double ms[TUNE_MAX_CANDIDATES];
  int best[TUNE_FINALISTS], nb, from = T->ncand;
  for (int i = 0; i < T->ncand; i++) ms[i] = T->cand[i].kind == 1 ? T->cand[i].ms : -1;
  nb = blas_tune_best(ms, T->ncand, -1, TUNE_REFINE, best);
  for (int i = 0; i < nb; i++) refine(T, T->cand[best[i]].algo);
  time_round(T, from);

  /* the finals: the default and the fastest, interleaved */
  for (int i = 0; i < T->ncand; i++) ms[i] = T->cand[i].ms;
  int fin[TUNE_FINALISTS + 1];
  fin[0] = 0;
  nb = blas_tune_best(ms, T->ncand, 0, TUNE_FINALISTS, fin + 1);
  int nf = nb + 1;
  double samples[TUNE_FINALISTS + 1][TUNE_FINAL_ROUNDS], fm[TUNE_FINALISTS + 1];
  for (int r = 0; r < TUNE_FINAL_ROUNDS; r++)
    for (int f = 0; f < nf; f++) {
      double x;
      if (time_cand(T, &T->cand[fin[f]], TUNE_REPS, &x)) {
        if (f == 0) return 1;  /* the default fails: leave everything as it is */
        x = INFINITY;
      }
      samples[f][r] = x;
    }
  for (int f = 0; f < nf; f++) {  /* a candidate that failed once is out */
    fm[f] = median(samples[f], TUNE_FINAL_ROUNDS);
    for (int r = 0; r < TUNE_FINAL_ROUNDS; r++)
      if (!valid_ms(samples[f][r])) fm[f] = INFINITY;
  }
  int pick = blas_tune_pick(fm, nf, 0, TUNE_MARGIN);
  const Cand *chosen = &T->cand[fin[pick]];
  memset(rec, 0, sizeof *rec);
  rec->kind = pick == 0 ? 0 : chosen->kind;
  if (rec->kind == 1) memcpy(rec->algo, &chosen->algo, sizeof rec->algo);
  rec->dflt_ms = fm[0], rec->chosen_ms = fm[pick];
  rec->candidates = T->timed;
  describe(&T->cand[0], T, rec->dflt, sizeof rec->dflt);
  describe(chosen, T, rec->chosen, sizeof rec->chosen);
  return 0;
}

/* Apply a record to p: 0, or 1 where it cannot apply here (a stale entry). */
static int apply_rec(Tuning *T, const BlasTuneRec *r) {
  Plan *p = T->p;
  if (r->kind == 0) return 0;
  if (r->kind == 2) {
    if (!T->classic_fits) return 1;
    p->classic = 1;
    return 0;
  }
  LtAlgo al;
  LtHeuristic h;
  memcpy(&al, r->algo, sizeof al);
  memset(&h, 0, sizeof h);
  if (!lt.AlgoCheck || !algo_fits(T, &al) ||
      lt.AlgoCheck(p->handle, p->desc, p->la, p->lb, p->lc, p->lc, &al, &h) || h.state ||
      h.workspace_size > T->ws_bytes)
    return 1;
  p->algo = al, p->classic = 0;
  return 0;
}

static const char *epi_name(int64_t epi) {
  switch (epi) {
  case LT_EPI_BIAS: return " +bias";
  case LT_EPI_RELU: return " relu";
  case LT_EPI_RELU_BIAS: return " +bias relu";
  case LT_EPI_GELU: return " gelu";
  case LT_EPI_GELU_BIAS: return " +bias gelu";
  default: return "";
  }
}

static int64_t low_bit(int64_t x) { return x ? x & -x : 256; }
static uint32_t min_align(int64_t ptr_align, int64_t ld_bytes) {
  int64_t a = low_bit(ld_bytes);
  if (a > ptr_align) a = ptr_align;
  return (uint32_t)(a > 256 ? 256 : a);
}

/* Under lock: decide p's algorithm (see above); never fails the call. */
static void tune_plan(Tuning *T) {
  Plan *p = T->p;
  const PlanKey *k = &p->key;
  int64_t es = T->dtype == EMBER_F32 ? 4 : 2;
  T->align[0] = min_align(k->align_b, k->ldb * es);
  T->align[1] = min_align(k->align_a, k->lda * es);
  T->align[2] = min_align(k->align_c, k->ldc * es);
  int has_bias = k->align_bias != 0, act = k->epi != LT_EPI_DEFAULT && k->epi != LT_EPI_BIAS;
  T->classic_fits = !load_cb() &&
                    classic_fits(T->dtype, T->m, T->n, T->k, T->lda, T->ldb, T->ldc, T->batch, has_bias,
                                 act ? EPI_RELU : EPI_NONE) &&
                    classic_handle(T->ctx, T->err, sizeof T->err) != NULL;
  BlasTuned t;
  memset(&t, 0, sizeof t);
  snprintf(t.problem, sizeof t.problem, "%s m=%lld n=%lld k=%lld batch=%lld%s%s%s ld=%lld,%lld,%lld align=%u,%u,%u",
           mm_dtype_name(T->dtype), (long long)T->m, (long long)T->n, (long long)T->k, (long long)T->batch,
           T->ta ? " A^T" : "", T->tb ? " B^T" : "", epi_name(k->epi), (long long)T->lda, (long long)T->ldb,
           (long long)T->ldc, T->align[1], T->align[0], T->align[2]);
  char problem[sizeof t.problem + 256], key[65] = "", gpu[257] = "";
  snprintf(problem, sizeof problem, "%s strides=%lld,%lld,%lld bias_align=%lld ws=%llu,%llu api=%lld", t.problem,
           (long long)k->sa, (long long)k->sb, (long long)k->sc, (long long)k->align_bias,
           (unsigned long long)k->workspace, (unsigned long long)k->whole, (long long)(k->api & BLAS_API_MASK));
  int disk = tune_folder[0] && !cuda_device_name(gpu, sizeof gpu, NULL, 0);
  if (disk) blas_tune_key(gpu, lt.GetVersion(), problem, key);
  double t0 = em_now_ms();
  BlasTuneRec rec;
  if (disk && !blas_tune_load(tune_folder, key, &rec) && !strcmp(rec.problem, problem) && !apply_rec(T, &rec)) {
    p->decided = 1;
    snprintf(t.dflt, sizeof t.dflt, "%s", rec.dflt);
    snprintf(t.chosen, sizeof t.chosen, "%s", rec.chosen);
    t.dflt_ms = rec.dflt_ms, t.chosen_ms = rec.chosen_ms, t.candidates = rec.candidates, t.from_disk = 1;
    t.tune_ms = em_now_ms() - t0;
    tuned_add(&t);
    return;
  }
  int capturing = 1;
  if (cuda_capturing(T->stream, &capturing, NULL, 0) || capturing) return;  /* a later call outside tunes it */
  p->decided = 1;
  if (tune_spent_ms >= TUNE_PROCESS_MS || tune_graph_ms >= TUNE_GRAPH_MS) {
    Cand d = {.kind = p->classic ? 2 : 1, .algo = p->algo};
    describe(&d, T, t.dflt, sizeof t.dflt);
    snprintf(t.chosen, sizeof t.chosen, "%s", t.dflt);
    snprintf(t.note, sizeof t.note, "not tuned: the %s's tuning budget (%.0f s) is spent",
             tune_spent_ms >= TUNE_PROCESS_MS ? "process" : "graph",
             (tune_spent_ms >= TUNE_PROCESS_MS ? TUNE_PROCESS_MS : TUNE_GRAPH_MS) / 1e3);
    tuned_add(&t);
    return;
  }
  double left = TUNE_PROCESS_MS - tune_spent_ms;
  if (TUNE_GRAPH_MS - tune_graph_ms < left) left = TUNE_GRAPH_MS - tune_graph_ms;
  T->deadline = t0 + (left < TUNE_PROBLEM_MS ? left : TUNE_PROBLEM_MS);
  T->err[0] = 0;
  int bad = cuda_event_pair(T->ev, T->err, sizeof T->err) || tune_search(T, &rec);
  cuda_event_pair_free(T->ev);
  Cand dflt = {.kind = p->classic ? 2 : 1, .algo = p->algo};
  if (!bad) {
    if (apply_rec(T, &rec)) {  /* cannot happen: it was just checked; keep the default */
      p->algo = dflt.algo, p->classic = dflt.kind == 2;
      rec.kind = 0;
    }
    snprintf(t.dflt, sizeof t.dflt, "%s", rec.dflt);
    snprintf(t.chosen, sizeof t.chosen, "%s", rec.kind ? rec.chosen : rec.dflt);
    t.dflt_ms = rec.dflt_ms, t.chosen_ms = rec.kind ? rec.chosen_ms : rec.dflt_ms;
    t.candidates = rec.candidates;
    snprintf(rec.problem, sizeof rec.problem, "%s", problem);
    char why[512] = "";
    if (disk && blas_tune_store(tune_folder, key, &rec, why, sizeof why))
      snprintf(t.note, sizeof t.note, "not cached: %.140s", why);
  } else {
    describe(&dflt, T, t.dflt, sizeof t.dflt);
    snprintf(t.chosen, sizeof t.chosen, "%s", t.dflt);
    snprintf(t.note, sizeof t.note, "not tuned: %.140s", T->err);
  }
  t.tune_ms = em_now_ms() - t0;
  tune_spent_ms += t.tune_ms;
  tune_graph_ms += t.tune_ms;
  tuned_add(&t);
}

int blas_matmul(int dtype, int transa, int transb, int64_t m, int64_t n, int64_t k,
                const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                void *c, int64_t ldc, int64_t stride_c, int64_t batch, const void *bias, int epilogue, int api,
                void *workspace, size_t workspace_bytes, void *stream, char *err, size_t errlen) {
  int64_t es = dtype == EMBER_F32 ? 4 : 2;
  int tune = (api & BLAS_TUNE) != 0;
  api &= BLAS_API_MASK;
  if (dtype != EMBER_F32 && dtype != EMBER_BF16 && dtype != EMBER_F16)
    return em_seterr(err, errlen, "blas_matmul: dtype %d is not f32, bf16 or f16", dtype), 1;
  if (epilogue != EPI_NONE && epilogue != EPI_RELU && epilogue != EPI_GELU)
    return em_seterr(err, errlen, "blas_matmul: unknown epilogue %d", epilogue), 1;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || batch > INT32_MAX)
    return em_seterr(err, errlen, "blas_matmul: bad sizes m=%lld n=%lld k=%lld batch=%lld", (long long)m,
                  (long long)n, (long long)k, (long long)batch), 1;
  if (!m || !n || !batch) return 0;
  if (!k)  /* C would be the bias (or zeros): the caller's to write */
    return em_seterr(err, errlen, "blas_matmul: k = 0 (an empty product) is not a library call"), 1;
  if (lda < (transa ? m : k) || ldb < (transb ? k : n) || ldc < n)
    return em_seterr(err, errlen, "blas_matmul: row strides lda=%lld ldb=%lld ldc=%lld too small for m=%lld n=%lld "
                  "k=%lld%s%s", (long long)lda, (long long)ldb, (long long)ldc, (long long)m, (long long)n,
                  (long long)k, transa ? " (A transposed)" : "", transb ? " (B transposed)" : ""), 1;
  if (!a || !b || !c) return em_seterr(err, errlen, "blas_matmul: NULL matrix"), 1;
  if (workspace_bytes && !workspace) return em_seterr(err, errlen, "blas_matmul: workspace size without a workspace"), 1;

  void *ctx = cuda_current_context(err, errlen);  /* loads the driver; makes a context current */
  if (!ctx) return 1;
  size_t whole = workspace_bytes;  /* the classic call's; cuBLASLt gets at most LT_WORKSPACE of it */
  if (workspace_bytes > LT_WORKSPACE) workspace_bytes = LT_WORKSPACE;
  if (copy_misaligned_bias(&bias, n, es, workspace, &workspace_bytes, stream, err, errlen)) return 1;

  PlanKey key;
  memset(&key, 0, sizeof key);        /* hashed as bytes: no stray padding */
  key.ctx = ctx;
  key.dtype = dtype, key.transa = !!transa, key.transb = !!transb;
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.batch = batch;
  key.sa = batch > 1 ? stride_a : 0, key.sb = batch > 1 ? stride_b : 0, key.sc = batch > 1 ? stride_c : 0;
  key.epi = epilogue == EPI_RELU ? (bias ? LT_EPI_RELU_BIAS : LT_EPI_RELU)
          : epilogue == EPI_GELU ? (bias ? LT_EPI_GELU_BIAS : LT_EPI_GELU)
          : (bias ? LT_EPI_BIAS : LT_EPI_DEFAULT);
  key.align_a = alignment(a, stride_a * es, batch);
  key.align_b = alignment(b, stride_b * es, batch);
  key.align_c = alignment(c, stride_c * es, batch);
  key.align_bias = bias ? alignment(bias, 0, 1) : 0;
  key.workspace = workspace_bytes;
  key.whole = tune ? whole : 0;
  key.api = api | (tune ? BLAS_TUNE : 0);
  unsigned hash = (unsigned)em_hash64(&key, sizeof key, 0);

  pthread_mutex_lock(&lock);
  int rc = 1;
  Plan *p = NULL;
  if (load_lt(err, errlen)) goto out;
  int sgemm = api == BLAS_CUBLAS && dtype == EMBER_F32 && batch == 1 && !bias && epilogue == EPI_NONE;
  if (sgemm && !tune) {
    if (!handle_for(ctx, err, errlen)) goto out;
    int r = classic_gemm(ctx, dtype, transa, transb, m, n, k, a, lda, 0, b, ldb, 0, c, ldc, 0, 1, workspace, whole,
                         stream, err, errlen);
    if (r >= 0) {
      rc = r;
      goto out;
    }
  }
  for (unsigned i = 0; i < 8 && !p; i++) {  /* a short linear probe */
    Plan *q = &plans[(hash + i) & (NPLAN - 1)];
    if (q->used && !memcmp(&q->key, &key, sizeof key)) p = q;
  }
  if (!p) {
    for (unsigned i = 0; i < 8 && !p; i++)
      if (!plans[(hash + i) & (NPLAN - 1)].used) p = &plans[(hash + i) & (NPLAN - 1)];
    if (!p) {
      p = &plans[(hash + (evict_next++ & 7)) & (NPLAN - 1)];
      plan_free(p);
    }
    p->key = key;
    if (!(p->handle = handle_for(ctx, err, errlen)) || plan_make(p, bias, err, errlen)) {
      size_t l = err ? strlen(err) : 0;
      if (err && l + 1 < errlen)
        snprintf(err + l, errlen - l, " [%s m=%lld n=%lld k=%lld batch=%lld%s%s%s]", mm_dtype_name(dtype),
                 (long long)m, (long long)n, (long long)k, (long long)batch, transa ? " A^T" : "",
                 transb ? " B^T" : "", bias ? " +bias" : "");
      plan_free(p);
      goto out;
    }
    p->used = 1;
    /* the default of a tuned product is what runs untuned: cublasSgemm where lower.c asked for it */
    p->classic = tune && sgemm && !load_cb() && whole && classic_handle(ctx, NULL, 0) != NULL;
  }
  LtStatus s;
  if (bias && (s = lt.DescSetAttribute(p->desc, LT_DESC_BIAS_POINTER, &bias, sizeof bias))) {
    lt_fail(s, "cublasLtMatmulDescSetAttribute(bias)", err, errlen);
    goto out;
  }
  if (tune && !p->decided) {
    Tuning *T = em_malloc(sizeof *T);
    if (T) {  /* out of memory: untuned this time */
      memset(T, 0, sizeof *T);
      T->p = p, T->ctx = ctx, T->dtype = dtype, T->ta = !!transa, T->tb = !!transb;
      T->m = m, T->n = n, T->k = k, T->lda = lda, T->ldb = ldb, T->ldc = ldc;
      T->sa = key.sa, T->sb = key.sb, T->sc = key.sc, T->batch = batch;
      T->a = a, T->b = b, T->c = c, T->ws = workspace, T->stream = stream;
      T->ws_bytes = workspace_bytes, T->whole = whole;
      tune_plan(T);
      free(T);
    }
  }
  if (p->classic) {
    int r = classic_gemm(ctx, dtype, transa, transb, m, n, k, a, lda, key.sa, b, ldb, key.sb, c, ldc, key.sc, batch,
                         workspace, whole, stream, err, errlen);
    if (r >= 0) {
      rc = r;
      goto out;
    }
  }
  const float one = 1.0f, zero = 0.0f;
  s = lt.Matmul(p->handle, p->desc, &one, b, p->la, a, p->lb, &zero, c, p->lc, c, p->lc, &p->algo, workspace,
                workspace_bytes, stream);
  if (s) {
    lt_fail(s, "cublasLtMatmul", err, errlen);
    goto out;
  }
  rc = 0;
out:
  pthread_mutex_unlock(&lock);
  return rc;
}
