/* mock_cuda.c - a stand-in for libcuda, libcublasLt and libcublas, so that
 * tests/c/test_gemm_mock.c runs blas.c's GEMM tuning from end to end on a
 * machine without a GPU.  Built three times (MOCK_CUDA, MOCK_LT, MOCK_CB)
 * into libraries named and with the sonames of the real ones; the test
 * loads them by path first, and ember's own dlopen by name then finds them.
 *
 * "Device" memory is host memory: the products are computed on the host
 * (column-major, as the libraries do: transposes, batches, bias, ReLU, GELU;
 * f32 and bf16), so the test checks results.  Time is a clock that only the
 * products advance, each by a cost that depends on its algorithm's
 * configuration (below), so events time them exactly.  What the test
 * checks through mock_stats: products run while a capture is under way,
 * events used during one, algorithms run on operands less aligned than they
 * require, the classic handle's math mode.  Only what blas.c and cuda.c
 * call is here; the rest of the driver fails. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct MockStats {
  double clock_ms;              /* advanced by every product */
  int capturing;                /* what cuStreamIsCapturing says */
  long gemms, gemms_capturing;  /* products run; of those, while "capturing" */
  long events_capturing;        /* event calls while capturing (tuning must make none) */
  long misaligned;              /* products whose algorithm needs more alignment than they had */
  long numerics_16f;            /* products run with the 16-bit-accumulator algorithm */
  int math_mode;                /* the classic handle's last math mode */
} MockStats;

#ifdef MOCK_CUDA
static MockStats st;
MockStats *mock_stats(void) { return &st; }
void mock_clock_add(double ms) {
  st.clock_ms += ms;
  st.gemms++;
  if (st.capturing) st.gemms_capturing++;
}

static int ctx_obj;
int cuInit(unsigned f) { return 0; }
int cuDriverGetVersion(int *v) { return *v = 13000, 0; }
int cuGetErrorName(int r, const char **s) { return *s = "CUDA_ERROR_MOCK", 0; }
int cuGetErrorString(int r, const char **s) { return *s = "the mock does not do this", 0; }
int cuDeviceGet(int *d, int o) { return *d = o, 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { return *v = a == 75 ? 9 : 0, 0; }
int cuCtxGetCurrent(void **c) { return *c = &ctx_obj, 0; }
int cuCtxSetCurrent(void *c) { return 0; }
int cuCtxGetDevice(int *d) { return *d = 0, 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { return *c = &ctx_obj, 0; }
int cuModuleLoadData(void **m, const void *img) { return 1; }
int cuModuleUnload(void *m) { return 0; }
int cuModuleGetFunction(void **f, void *m, const char *n) { return 1; }
int cuFuncSetAttribute(void *f, int a, int v) { return 1; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned sh, void *s, void **a, void **e) { return 1; }
int cuMemsetD8Async(uint64_t p, unsigned char v, size_t n, void *s) { return memset((void *)(uintptr_t)p, v, n), 0; }
int cuModuleGetGlobal_v2(uint64_t *p, size_t *b, void *m, const char *n) { return 1; }
int cuMemcpyDtoHAsync_v2(void *d, uint64_t s, size_t n, void *st_) { return memcpy(d, (void *)(uintptr_t)s, n), 0; }
int cuMemcpyDtoDAsync_v2(uint64_t d, uint64_t s, size_t n, void *st_) {
  return memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n), 0;
}
int cuMemcpy2DAsync_v2(const void *c, void *s) { return 1; }
int cuMemHostAlloc(void **p, size_t n, unsigned f) { return (*p = calloc(1, n)) ? 0 : 2; }
int cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned f) { return *d = (uintptr_t)p, 0; }
int cuMemFreeHost(void *p) { return free(p), 0; }
int cuMemcpyHtoD_v2(uint64_t d, const void *s, size_t n) { return memcpy((void *)(uintptr_t)d, s, n), 0; }
int cuStreamSynchronize(void *s) { return 0; }
int cuStreamIsCapturing(void *s, int *status) { return *status = st.capturing, 0; }
int cuEventCreate(void **e, unsigned f) { return (*e = calloc(1, sizeof(double))) ? 0 : 2; }
int cuEventRecord(void *e, void *s) {
  if (st.capturing) return st.events_capturing++, 900;  /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
  return *(double *)e = st.clock_ms, 0;
}
int cuEventSynchronize(void *e) { return st.capturing ? (st.events_capturing++, 900) : 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) { return *ms = (float)(*(double *)b - *(double *)a), 0; }
int cuEventDestroy_v2(void *e) { return free(e), 0; }
int cuDeviceGetName(char *n, int len, int d) { return snprintf(n, (size_t)len, "Mock GPU %d", d), 0; }
#else
MockStats *mock_stats(void);
void mock_clock_add(double ms);

/* ---- host products, column-major ---- */
enum { R32F = 0, R16BF = 14 };
static float ld_el(int type, const void *p, int64_t i) {
  if (type == R32F) return ((const float *)p)[i];
  uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void st_el(int type, void *p, int64_t i, float v) {
  if (type == R32F) {
    ((float *)p)[i] = v;
    return;
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  u += 0x7fff + ((u >> 16) & 1);  /* round to nearest even (no NaN here) */
  ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

/* D (rows x cols, ldd) = op(A) op(B) + bias (per row), then relu or gelu (tanh). */
static void gemm(int type, int ta, int tb, int64_t rows, int64_t cols, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, void *d, int64_t ldd, const void *bias, int act) {
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++)
        s += (double)ld_el(type, a, ta ? p + i * lda : i + p * lda) * ld_el(type, b, tb ? j + p * ldb : p + j * ldb);
      float v = (float)s;
      if (bias) v += ld_el(type, bias, i);
      if (act == 1) v = v > 0 ? v : 0;
      if (act == 2) v = 0.5f * v * (1 + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
      st_el(type, d, i + j * ldd, v);
    }
}
static int esize(int type) { return type == R32F ? 4 : 2; }
__attribute__((unused)) static unsigned align_of(const void *p, int64_t ld_bytes) {
  uint64_t a = (uint64_t)(uintptr_t)p | (uint64_t)ld_bytes | 256;
  return (unsigned)(a & -a);
}
#endif

#ifdef MOCK_LT
typedef struct { int type; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; } Lay;
typedef struct { int32_t ta, tb; uint32_t epi; const void *bias; } Desc;
typedef struct { uint64_t ws; } Pref;
typedef struct { uint64_t data[8]; } Algo;  /* id, tile, stages, splitk, reduction, swizzle, custom, cluster | type << 32 */
typedef struct { Algo algo; size_t ws; int state; float waves; int reserved[4]; } Heur;
static char handle_obj;

int cublasLtCreate(void **h) { return *h = &handle_obj, 0; }
size_t cublasLtGetVersion(void) { return 130100; }
const char *cublasLtGetStatusName(int s) { return "CUBLAS_STATUS_MOCK"; }
int cublasLtMatmulDescCreate(Desc **d, int compute, int scale) { return (*d = calloc(1, sizeof **d)) ? 0 : 3; }
int cublasLtMatmulDescDestroy(Desc *d) { return free(d), 0; }
int cublasLtMatmulDescSetAttribute(Desc *d, int attr, const void *buf, size_t n) {
  if (attr == 3) memcpy(&d->ta, buf, 4);
  else if (attr == 4) memcpy(&d->tb, buf, 4);
  else if (attr == 7) memcpy(&d->epi, buf, 4);
  else if (attr == 8) memcpy(&d->bias, buf, sizeof d->bias);
  else return 7;
  return 0;
}
int cublasLtMatrixLayoutCreate(Lay **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (!(*l = calloc(1, sizeof **l))) return 3;
  (*l)->type = type, (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld, (*l)->batch = 1;
  return 0;
}
int cublasLtMatrixLayoutDestroy(Lay *l) { return free(l), 0; }
int cublasLtMatrixLayoutSetAttribute(Lay *l, int attr, const void *buf, size_t n) {
  if (attr == 5) memcpy(&l->batch, buf, 4);
  else if (attr == 6) memcpy(&l->stride, buf, 8);
  else return 7;
  return 0;
}
int cublasLtMatmulPreferenceCreate(Pref **p) { return (*p = calloc(1, sizeof **p)) ? 0 : 3; }
int cublasLtMatmulPreferenceDestroy(Pref *p) { return free(p), 0; }
int cublasLtMatmulPreferenceSetAttribute(Pref *p, int attr, const void *buf, size_t n) {
  if (attr == 1) memcpy(&p->ws, buf, 8);
  return 0;
}

/* The algorithms: id 0 (any alignment, FMA for f32, tensor ops for 16-bit),
   id 1 (needs 16-byte alignment; tensor ops, so TF32 for f32), id 2 (the
   fastest, but accumulates in fp16: never to be chosen). */
static unsigned min_align(const Algo *al) { return al->data[0] == 1 ? 16 : 2; }
static double cost(const Algo *al) {
  uint64_t id = al->data[0], tile = al->data[1], stages = al->data[2], splitk = al->data[3];
  uint64_t swz = al->data[5], custom = al->data[6], cluster = al->data[7] & 0xffff;
  double f = id == 2 ? 0.5 : id == 1 ? 0.9 : 1.0;
  f *= 1 + 0.05 * fabs((double)tile - 4);
  if (stages == 12) f -= 0.03;
  if (swz) f -= 0.01;
  if (splitk == 2) f -= 0.04;
  if (cluster == 3) f -= 0.02;
  if (custom == 1) f += 0.05;
  return 0.010 * f;
}
static Algo make(int type, int id, int tile, int stages) {
  Algo a;
  memset(&a, 0, sizeof a);
  a.data[0] = (uint64_t)id, a.data[1] = (uint64_t)tile, a.data[2] = (uint64_t)stages, a.data[3] = 1;
  a.data[7] = (uint64_t)type << 32;
  return a;
}
static int check(const Algo *al) {
  if (al->data[0] > 2 || al->data[2] == 13 || (al->data[7] & 0xffff) > 5 || (al->data[0] == 1 && al->data[1] == 5) ||
      al->data[3] > 8 || (al->data[3] > 1 && al->data[4] == 0))
    return 15;  /* CUBLAS_STATUS_NOT_SUPPORTED */
  return 0;
}
static size_t ws_need(const Algo *al) { return al->data[3] > 1 ? (size_t)1 << 20 : 0; }

int cublasLtMatmulAlgoGetHeuristic(void *h, Desc *d, Lay *a, Lay *b, Lay *c, Lay *dd, Pref *p, int req, Heur *res,
                                   int *ret) {
  static const int cfg[][3] = {{0, 3, 11}, {1, 2, 12}, {0, 1, 11}, {0, 5, 12}, {1, 4, 11}, {2, 1, 11}};
  *ret = 0;
  for (int i = 0; i < 6 && *ret < req; i++) {
    memset(&res[*ret], 0, sizeof res[*ret]);
    res[*ret].algo = make(a->type, cfg[i][0], cfg[i][1], cfg[i][2]);
    res[*ret].waves = 1;
    (*ret)++;
  }
  return 0;
}
int cublasLtMatmulAlgoGetIds(void *h, int compute, int scale, int at, int bt, int ct, int dt, int req, int *ids,
                             int *ret) {
  *ret = 0;
  for (int i = 0; i < 3 && i < req; i++) ids[(*ret)++] = i;
  return 0;
}
int cublasLtMatmulAlgoInit(void *h, int compute, int scale, int at, int bt, int ct, int dt, int id, Algo *al) {
  if (id < 0 || id > 2) return 7;
  *al = make(at, id, 0, 0);
  return 0;
}
int cublasLtMatmulAlgoCheck(void *h, Desc *d, Lay *a, Lay *b, Lay *c, Lay *dd, const Algo *al, Heur *res) {
  int s = check(al);
  if (s) return s;
  memset(res, 0, sizeof *res);
  res->ws = ws_need(al), res->waves = 1;
  return 0;
}
static int cap_array(const uint32_t *v, size_t n, void *buf, size_t size, size_t *w) {
  if (!size) return *w = n * 4, 0;
  if (size < n * 4) return 7;
  memcpy(buf, v, n * 4);
  return *w = n * 4, 0;
}
#define CAP(T, x) (size != sizeof(T) ? 7 : (*(T *)buf = (T)(x), *w = sizeof(T), 0))
int cublasLtMatmulAlgoCapGetAttribute(const Algo *al, int attr, void *buf, size_t size, size_t *w) {
  static const uint32_t tiles[] = {1, 2, 3, 4, 5}, stages[] = {11, 12, 13};
  int type = (int)(al->data[7] >> 32), id = (int)al->data[0];
  switch (attr) {
  case 0: return CAP(int32_t, 1);                           /* split-K */
  case 1: return CAP(uint32_t, 7);                          /* reduction schemes */
  case 2: return CAP(uint32_t, 1);                          /* swizzle */
  case 3: return CAP(int32_t, 1);                           /* strided batch */
  case 6: return cap_array(tiles, 5, buf, size, w);
  case 7: return CAP(int32_t, 2);                           /* custom options 0..2 */
  case 12: return CAP(uint32_t, 0xffffffffu);               /* every epilogue */
  case 13: return cap_array(stages, 3, buf, size, w);
  case 15: {                                                /* numerics */
    uint64_t f = id == 2 ? (2 | 1u << 8) : type == R32F && id == 0 ? (1 | 2u << 8) : (2 | 2u << 8);
    return CAP(uint64_t, f);
  }
  case 16: case 17: case 18: case 19: return CAP(uint32_t, min_align(al));
  default: return 7;
  }
}
static const int cfg_slot[] = {-1, 1, 3, 4, 5, 6, 2, -1, 7};  /* config attribute -> data[] */
int cublasLtMatmulAlgoConfigSetAttribute(Algo *al, int attr, const void *buf, size_t n) {
  if (attr < 1 || attr > 8 || attr == 7) return 7;
  if (n != (attr == 8 ? 2u : 4u)) return 7;
  uint64_t v = 0;
  if (n == 2) {
    uint16_t x;
    memcpy(&x, buf, 2);
    al->data[7] = (al->data[7] & ~(uint64_t)0xffff) | x;
    return 0;
  }
  uint32_t x;
  memcpy(&x, buf, 4);
  v = x;
  al->data[cfg_slot[attr]] = v;
  return 0;
}
int cublasLtMatmulAlgoConfigGetAttribute(const Algo *al, int attr, void *buf, size_t n, size_t *w) {
  if (attr == 0) return n != 4 ? 7 : (*(int32_t *)buf = (int32_t)al->data[0], *w = 4, 0);
  if (attr < 1 || attr > 8 || attr == 7) return 7;
  if (n != (attr == 8 ? 2u : 4u)) return 7;
  if (n == 2) return *(uint16_t *)buf = (uint16_t)(al->data[7] & 0xffff), *w = 2, 0;
  return *(uint32_t *)buf = (uint32_t)al->data[cfg_slot[attr]], *w = 4, 0;
}
int cublasLtMatmul(void *h, Desc *d, const float *alpha, const void *A, Lay *la, const void *B, Lay *lb,
                   const float *beta, const void *C, Lay *lc, void *D, Lay *ld, const Algo *al, void *ws,
                   size_t wsb, void *stream) {
  if (check(al) || ws_need(al) > wsb) return 7;
  int es = esize(la->type);
  if (align_of(A, la->ld * es) < min_align(al) || align_of(B, lb->ld * es) < min_align(al) ||
      align_of(D, ld->ld * es) < min_align(al))
    mock_stats()->misaligned++;
  if (al->data[0] == 2) mock_stats()->numerics_16f++;
  int64_t k = d->ta ? (int64_t)la->rows : (int64_t)la->cols;
  int act = (d->epi & 2) ? 1 : (d->epi & 32) ? 2 : 0;
  const void *bias = (d->epi & 4) ? d->bias : NULL;
  for (int32_t i = 0; i < ld->batch; i++)
    gemm(la->type, d->ta, d->tb, (int64_t)ld->rows, (int64_t)ld->cols, k, (const char *)A + i * la->stride * es,
         la->ld, (const char *)B + i * lb->stride * es, lb->ld, (char *)D + i * ld->stride * es, ld->ld, bias, act);
  mock_clock_add(cost(al));
  return 0;
}
#endif

#ifdef MOCK_CB
static char cb_obj;
#define CLASSIC_MS 0.0093
int cublasCreate_v2(void **h) { return *h = &cb_obj, 0; }
int cublasSetStream_v2(void *h, void *s) { return 0; }
int cublasSetWorkspace_v2(void *h, void *w, size_t n) { return 0; }
int cublasSetMathMode(void *h, int mode) { return mock_stats()->math_mode = mode, 0; }
const char *cublasGetStatusName(int s) { return "CUBLAS_STATUS_MOCK"; }
int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *al, const float *a, int lda,
                   const float *b, int ldb, const float *be, float *c, int ldc) {
  gemm(R32F, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, NULL, 0);
  mock_clock_add(CLASSIC_MS);
  return 0;
}
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *al, const void *a, int at, int lda,
                 const void *b, int bt, int ldb, const void *be, void *c, int ct, int ldc, int compute, int algo) {
  gemm(at, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, NULL, 0);
  mock_clock_add(CLASSIC_MS);
  return 0;
}
int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *al, const void *a, int at,
                               int lda, long long sa, const void *b, int bt, int ldb, long long sb, const void *be,
                               void *c, int ct, int ldc, long long sc, int batch, int compute, int algo) {
  int es = esize(at);
  for (int i = 0; i < batch; i++)
    gemm(at, ta, tb, m, n, k, (const char *)a + i * sa * es, lda, (const char *)b + i * sb * es, ldb,
         (char *)c + i * sc * es, ldc, NULL, 0);
  mock_clock_add(CLASSIC_MS);
  return 0;
}
#endif
