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
 * Algorithms: the heuristic's first choice.  Timing its other candidates
 * on the call's operands found no faster tiles for bert-base or vit_b_16
 * (the ones Inductor's calls got are not among them), and was removed.
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
#include <dlfcn.h>
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
};

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
} cb;

static const struct LtSym cb_syms[] = {
#define S(f, name, opt) {name, offsetof(__typeof__(cb), f), opt}
  S(Create, "cublasCreate_v2", 0),
  S(SetStream, "cublasSetStream_v2", 0),
  S(SetWorkspace, "cublasSetWorkspace_v2", 0),
  S(Sgemm, "cublasSgemm_v2", 0),
  S(GetStatusName, "cublasGetStatusName", 1),
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
  uint64_t workspace;
} PlanKey;

typedef struct Plan {
  int used;
  PlanKey key;
  LtHandle handle;                    /* the context's; not owned */
  LtDesc desc;                        /* owned: the operation */
  LtLayout la, lb, lc;                /* owned: cuBLASLt's A (our B), B (our A), C = D */
  LtAlgo algo;                        /* the heuristic's first choice */
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

/* Fill p (key already set) with descriptors and an algorithm. */
static int plan_make(Plan *p, const void *bias, char *err, size_t errlen) {
  const PlanKey *k = &p->key;
  int type = k->dtype == EMBER_F32 ? LT_R_32F : k->dtype == EMBER_BF16 ? LT_R_16BF : LT_R_16F;
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
  if ((s = lt.PrefCreate(&pref))) return lt_fail(s, "cublasLtMatmulPreferenceCreate", err, errlen);
  uint64_t ws = k->workspace;
  uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c;
  /* split-K partial sums reduced in fp32 (cublasLtReductionScheme_t's
     COMPUTE_TYPE = 2), never rounded to a 16-bit output type first */
  uint32_t reductions = type == LT_R_32F ? 7u : 2u;
  LtHeuristic hs[1];
  int got = 0;
  if ((s = lt.PrefSetAttribute(pref, LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
      (s = lt.PrefSetAttribute(pref, LT_PREF_MIN_ALIGN_A, &al_a, sizeof al_a)) ||
      (s = lt.PrefSetAttribute(pref, LT_PREF_MIN_ALIGN_B, &al_b, sizeof al_b)) ||
      (s = lt.PrefSetAttribute(pref, LT_PREF_MIN_ALIGN_C, &al_c, sizeof al_c)) ||
      (s = lt.PrefSetAttribute(pref, LT_PREF_MIN_ALIGN_D, &al_c, sizeof al_c)) ||
      (s = lt.PrefSetAttribute(pref, LT_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof reductions))) {
    lt.PrefDestroy(pref);
    return lt_fail(s, "cublasLtMatmulPreferenceSetAttribute", err, errlen);
  }
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

/* Under lock: the product through cublasSgemm (see the header), row-major
   C = A B computed as C^T = B^T A^T like the cuBLASLt path.  0 done, 1 with
   err set, -1 where the classic API is not to be had (cuBLASLt's turn). */
static int classic_sgemm(void *ctx, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a,
                         int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, void *workspace,
                         size_t workspace_bytes, void *stream, char *err, size_t errlen) {
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX ||
      !workspace_bytes || load_cb())
    return -1;
  int i;
  for (i = 0; i < MAX_CTX && handles[i].ctx != ctx; i++) {}
  if (i == MAX_CTX) return -1;  /* handle_for made the slot; a full table keeps to cuBLASLt */
  LtStatus s;
  if (!handles[i].cb && (s = cb.Create(&handles[i].cb))) return cb_fail(s, "cublasCreate", err, errlen);
  CbHandle h = handles[i].cb;
  const float one = 1.0f, zero = 0.0f;
  if ((s = cb.SetStream(h, stream))) return cb_fail(s, "cublasSetStream", err, errlen);
  if ((s = cb.SetWorkspace(h, workspace, workspace_bytes))) return cb_fail(s, "cublasSetWorkspace", err, errlen);
  if ((s = cb.Sgemm(h, transb ? LT_OP_T : LT_OP_N, transa ? LT_OP_T : LT_OP_N, (int)n, (int)m, (int)k, &one, b,
                    (int)ldb, a, (int)lda, &zero, c, (int)ldc)))
    return cb_fail(s, "cublasSgemm", err, errlen);
  return 0;
}

static const char *mm_dtype_name(int dtype) {
  return dtype == EMBER_F32 ? "f32" : dtype == EMBER_BF16 ? "bf16" : dtype == EMBER_F16 ? "f16" : "?";
}

int blas_matmul(int dtype, int transa, int transb, int64_t m, int64_t n, int64_t k,
                const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b,
                void *c, int64_t ldc, int64_t stride_c, int64_t batch, const void *bias, int epilogue, int api,
                void *workspace, size_t workspace_bytes, void *stream, char *err, size_t errlen) {
  int64_t es = dtype == EMBER_F32 ? 4 : 2;
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
  unsigned hash = (unsigned)em_hash64(&key, sizeof key, 0);

  pthread_mutex_lock(&lock);
  int rc = 1;
  Plan *p = NULL;
  if (load_lt(err, errlen)) goto out;
  if (api == BLAS_CUBLAS && dtype == EMBER_F32 && batch == 1 && !bias && epilogue == EPI_NONE) {
    if (!handle_for(ctx, err, errlen)) goto out;
    int r = classic_sgemm(ctx, transa, transb, m, n, k, a, lda, b, ldb, c, ldc, workspace, whole, stream, err,
                          errlen);
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
  }
  LtStatus s;
  if (bias && (s = lt.DescSetAttribute(p->desc, LT_DESC_BIAS_POINTER, &bias, sizeof bias))) {
    lt_fail(s, "cublasLtMatmulDescSetAttribute(bias)", err, errlen);
    goto out;
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
