/* test_cuda.c - the CUDA driver, NVRTC and cuBLASLt layers (cuda.c, blas.c).
 *
 * Without a GPU (or without libcuda) it checks that every entry point fails
 * cleanly with a message, then says it skips and exits 0.  With one it
 * compiles kernels with NVRTC, loads and launches them on a stream, checks
 * the results bit for bit (saxpy with denormals, fp32 -> bf16 rounding with
 * NaN/Inf/ties), reads back a __device__ record a kernel wrote (the way
 * gathers report an index out of range), checks the error paths (NVRTC's
 * log in a syntax error, cuLaunchKernel named for an absurd block, a missing
 * function), launches
 * from a thread with no current context, and compares blas_matmul (fp32,
 * bf16, fp16; transposes, padded rows, batches, bias (also misaligned),
 * ReLU, GELU) with a float64 reference on the host, untuned and tuned
 * (BLAS_TUNE: each choice no slower than its default).  Then it times a few things.
 *
 * Device memory, streams and events come from libcuda directly (dlopen'ed
 * here): ember itself allocates through torch.  EMBER_CUDA_LIB_DIRS and
 * EMBER_CUDA_INC_DIRS (colon-separated) become the search path;
 * EMBER_TEST_QUICK=1 skips the timings. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "t.h"


typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUevent;

static struct {            /* what the test needs beyond ember's API */
  CUresult (*MemAlloc)(CUdeviceptr *p, size_t n);
  CUresult (*MemFree)(CUdeviceptr p);
  CUresult (*MemcpyHtoD)(CUdeviceptr d, const void *h, size_t n);
  CUresult (*MemcpyDtoH)(void *h, CUdeviceptr d, size_t n);
  CUresult (*StreamCreate)(CUstream *s, unsigned flags);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*StreamDestroy)(CUstream s);
  CUresult (*EventCreate)(CUevent *e, unsigned flags);
  CUresult (*EventRecord)(CUevent e, CUstream s);
  CUresult (*EventSynchronize)(CUevent e);
  CUresult (*EventElapsedTime)(float *ms, CUevent a, CUevent b);
  CUresult (*EventDestroy)(CUevent e);
  CUresult (*CtxGetCurrent)(void **c);
  CUresult (*LaunchKernel)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shmem, CUstream s, void **args, void **extra);
} d;

static int load_helpers(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return 1;
#define L(f, name) if (!(*(void **)&d.f = dlsym(h, name))) return fprintf(stderr, "no %s\n", name), 1
  L(MemAlloc, "cuMemAlloc_v2");
  L(MemFree, "cuMemFree_v2");
  L(MemcpyHtoD, "cuMemcpyHtoD_v2");
  L(MemcpyDtoH, "cuMemcpyDtoH_v2");
  L(StreamCreate, "cuStreamCreate");
  L(StreamSynchronize, "cuStreamSynchronize");
  L(StreamDestroy, "cuStreamDestroy_v2");
  L(EventCreate, "cuEventCreate");
  L(EventRecord, "cuEventRecord");
  L(EventSynchronize, "cuEventSynchronize");
  L(EventElapsedTime, "cuEventElapsedTime");
  L(EventDestroy, "cuEventDestroy_v2");
  L(CtxGetCurrent, "cuCtxGetCurrent");
  L(LaunchKernel, "cuLaunchKernel");
#undef L
  return 0;
}

static void *dalloc(size_t n) {
  CUdeviceptr p = 0;
  CUresult r = d.MemAlloc(&p, n);
  if (r) fprintf(stderr, "cuMemAlloc(%zu): %d\n", n, r);
  return (void *)(uintptr_t)p;
}
static void dfree(void *p) { if (p) d.MemFree((CUdeviceptr)(uintptr_t)p); }
static int up(void *dst, const void *src, size_t n) { return d.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n); }
static int down(void *dst, const void *src, size_t n) { return d.MemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n); }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {  /* uniform in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint16_t to_bf16(float f) {  /* round to nearest even; NaN stays NaN */
  uint32_t u = fbits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) { return bitsf((uint32_t)h << 16); }
static uint16_t to_f16(float f) {  /* IEEE half, round to nearest even (values here are normal and small) */
  uint32_t u = fbits(f), sign = (u >> 16) & 0x8000;
  int e = (int)((u >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = u & 0x7FFFFF;
  if (e <= 0) return (uint16_t)sign;  /* flush: tests use no such values */
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}
static float from_f16(uint16_t h) {
  int e = (h >> 10) & 0x1F;
  float m = (float)(h & 0x3FF);
  float v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
  return h & 0x8000 ? -v : v;
}

static double now_ms(void) { return em_now_ms(); }
static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- kernels */

static const char *kernels_src =
  "extern \"C\" __global__ void saxpy(int n, float a, const float *x, float *y) {\n"
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
  "  if (i < n) y[i] = a * x[i] + y[i];\n"
  "}\n"
  "extern \"C\" __global__ void to_bf16(int n, const float *x, unsigned short *y) {\n"
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
  "  if (i < n) {\n"
  "    unsigned short r;\n"
  "    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(r) : \"f\"(x[i]));\n"
  "    y[i] = r;\n"
  "  }\n"
  "}\n"
  /* reverses n floats through 64 KiB of dynamic shared memory (needs opting in) */
  "extern \"C\" __global__ void shrev(const float *x, float *y) {\n"
  "  extern __shared__ float s[];\n"
  "  const int n = 16384;\n"
  "  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];\n"
  "  __syncthreads();\n"
  "  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = s[n - 1 - i];\n"
  "}\n"
  /* a module-scope record a kernel writes and the host reads (ember_index_error's way) */
  "extern \"C\" { __device__ long long flag[2]; }\n"
  "extern \"C\" __global__ void setflag(long long v) {\n"
  "  if (threadIdx.x == 0) flag[0] = v, flag[1] = -v;\n"
  "}\n";

static const char *bad_src =
  "extern \"C\" __global__ void broken(float *y) {\n"
  "  y[0] = 1.0f +;\n"
  "}\n";

typedef struct {
  void *fn;
  int n;
  float a;
  void *x, *y;
  int rc;
  int had_ctx, raw_rc;     /* a context current at the start; what a bare cuLaunchKernel said */
  char err[512];
} ThreadLaunch;

static void *launch_in_thread(void *arg) {  /* a thread on which no context is current */
  ThreadLaunch *t = arg;
  void *ctx = NULL;
  d.CtxGetCurrent(&ctx);
  t->had_ctx = ctx != NULL;
  int zero = 0;  /* a launch that writes nothing, straight to the driver */
  unsigned one[3] = {1, 1, 1};
  void *zargs[] = {&zero, &t->a, &t->x, &t->y};
  t->raw_rc = d.LaunchKernel(t->fn, one[0], one[1], one[2], one[0], one[1], one[2], 0, NULL, zargs, NULL);
  unsigned grid[3] = {(unsigned)(t->n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  void *args[] = {&t->n, &t->a, &t->x, &t->y};
  t->rc = cuda_launch(t->fn, grid, block, 0, NULL, args, t->err, sizeof t->err);
  return NULL;
}

/* ---------------------------------------------------------------- no GPU */

static int no_gpu_checks(const char *why) {
  char err[512];
  int sm = 0;
  printf("test_cuda: cuda_init failed: %s\n", why);
  CHECK(strstr(why, "libcuda") || strstr(why, "cuInit"));
  CHECK(cuda_init(err, sizeof err) != 0 && !strcmp(err, why));  /* the same answer, cheaply */
  CHECK(cuda_arch(0, &sm, err, sizeof err) != 0 && *err);
  unsigned g[3] = {1, 1, 1};
  CHECK(cuda_launch((void *)1, g, g, 0, NULL, NULL, err, sizeof err) != 0 && *err);
  CHECK(cuda_memset_async(NULL, 0, 4, NULL, err, sizeof err) != 0 && *err);
  CHECK(!cuda_load("x", 1, 0, NULL, err, sizeof err) && *err);
  int64_t rec[2];
  int cap = 0;
  CHECK(cuda_read_sync(rec, (void *)8, sizeof rec, NULL, err, sizeof err) != 0 && *err);
  CHECK(cuda_capturing(NULL, &cap, err, sizeof err) != 0 && *err);
  CHECK(cuda_global(NULL, "flag") == NULL);
  char buf[64];
  CHECK(blas_matmul(EMBER_F32, 0, 0, 2, 2, 2, buf, 2, 0, buf, 2, 0, buf, 2, 0, 1, NULL, EPI_NONE, BLAS_LT,
                    NULL, 0, NULL, err, sizeof err) != 0 && *err);
  /* NVRTC needs no GPU: where it is found, compiling works here too. */
  void *bin = NULL;
  size_t n = 0;
  if (cuda_compile(kernels_src, 80, &bin, &n, err, sizeof err) == 0) {
    CHECK(n > 4 && !memcmp(bin, "\177ELF", 4));
    printf("test_cuda: NVRTC found: compiled %zu bytes of cubin without a GPU\n", n);
  } else {
    CHECK(strstr(err, "libnvrtc"));
    printf("test_cuda: no NVRTC either: %s\n", err);
  }
  free(bin);
  printf("test_cuda: no GPU: skipped the GPU checks\n");
  return T_DONE("test_cuda");
}

/* ---------------------------------------------------------------- matmul checks */

typedef struct {
  int dtype, transa, transb;
  int64_t m, n, k, batch;
  int pad;                 /* extra elements per row of A, B and C */
  int bcast_b;             /* batch stride 0 for B */
  int bias, epi;
  int bias_off;            /* the bias starts this many elements into its allocation (misaligned) */
  int api;                 /* enum BlasApi: BLAS_CUBLAS for cuBLAS's sgemm */
} MmCase;

static void store(int dtype, void *dst, int64_t i, float v) {
  if (dtype == EMBER_F32) ((float *)dst)[i] = v;
  else if (dtype == EMBER_BF16) ((uint16_t *)dst)[i] = to_bf16(v);
  else ((uint16_t *)dst)[i] = to_f16(v);
}
static float load(int dtype, const void *src, int64_t i) {
  if (dtype == EMBER_F32) return ((const float *)src)[i];
  if (dtype == EMBER_BF16) return from_bf16(((const uint16_t *)src)[i]);
  return from_f16(((const uint16_t *)src)[i]);
}
static const char *dname(int dtype) { return dtype == EMBER_F32 ? "f32" : dtype == EMBER_BF16 ? "bf16" : "f16"; }

static double act(int epi, double x) {
  if (epi == EPI_RELU) return x > 0 ? x : 0;
  if (epi == EPI_GELU) return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return x;
}

/* One blas_matmul against float64 on the host; 0 when it matches. */
static int check_matmul(const MmCase *c, void *ws, size_t wsn, CUstream s) {
  int es = c->dtype == EMBER_F32 ? 4 : 2;
  int64_t m = c->m, n = c->n, k = c->k, B = c->batch;
  int64_t ar = c->transa ? k : m, ac = c->transa ? m : k, lda = ac + c->pad;  /* stored rows x cols */
  int64_t br = c->transb ? n : k, bc = c->transb ? k : n, ldb = bc + c->pad;
  int64_t ldc = n + c->pad;
  int64_t sa = ar * lda, sb = c->bcast_b ? 0 : br * ldb, sc = m * ldc;
  int64_t na = sa * B, nb = c->bcast_b ? br * ldb : sb * B, nc = sc * B;
  char *ha = calloc((size_t)na, es), *hb = calloc((size_t)nb, es), *hc = malloc((size_t)nc * es);
  char *hbias = calloc((size_t)n, es);
  for (int64_t i = 0; i < na; i++) store(c->dtype, ha, i, (float)urand());
  for (int64_t i = 0; i < nb; i++) store(c->dtype, hb, i, (float)urand());
  for (int64_t i = 0; i < n; i++) store(c->dtype, hbias, i, (float)urand());
  void *da = dalloc((size_t)na * es), *db = dalloc((size_t)nb * es), *dc = dalloc((size_t)nc * es);
  void *dbias = c->bias ? dalloc((size_t)(n + c->bias_off) * es) : NULL;
  char *pbias = dbias ? (char *)dbias + c->bias_off * es : NULL;
  up(da, ha, (size_t)na * es), up(db, hb, (size_t)nb * es);
  if (dbias) up(pbias, hbias, (size_t)n * es);
  char err[1024] = "";
  cuda_memset_async(dc, 0xFF, (size_t)nc * es, s, err, sizeof err);  /* NaN everywhere: every element must be written */
  int rc = blas_matmul(c->dtype, c->transa, c->transb, m, n, k, da, lda, sa, db, ldb, sb, dc, ldc, sc, B, pbias,
                       c->epi, c->api, ws, wsn, s, err, sizeof err);
  d.StreamSynchronize(s);
  down(hc, dc, (size_t)nc * es);
  double num = 0, den = 0, worst = 0;
  int bad = 0;
  for (int64_t b = 0; b < B && !rc; b++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t p = 0; p < k; p++) {
          int64_t ia = b * sa + (c->transa ? p * lda + i : i * lda + p);
          int64_t ib = b * sb + (c->transb ? j * ldb + p : p * ldb + j);
          acc += (double)load(c->dtype, ha, ia) * load(c->dtype, hb, ib);
        }
        if (c->bias) acc += load(c->dtype, hbias, j);
        double ref = act(c->epi, acc), got = load(c->dtype, hc, b * sc + i * ldc + j);
        if (!isfinite(got)) bad++;
        num += (got - ref) * (got - ref), den += ref * ref;
        if (fabs(got - ref) > worst) worst = fabs(got - ref);
      }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num), tol = c->dtype == EMBER_F32 ? 1e-4 : 1e-2;
  static const char *en[] = {"", " relu", " gelu"};
  printf("  matmul %-4s m=%-4lld n=%-4lld k=%-4lld batch=%lld%s%s%s%s%s%s%s%s%s: ", dname(c->dtype), (long long)m,
         (long long)n, (long long)k, (long long)B, c->transa ? " A^T" : "", c->transb ? " B^T" : "",
         c->pad ? " padded" : "", c->bcast_b ? " B-bcast" : "", c->bias ? " +bias" : "",
         c->bias_off ? " (misaligned)" : "", en[c->epi],
         (c->api & BLAS_API_MASK) == BLAS_CUBLAS ? " (cuBLAS sgemm)" : "", c->api & BLAS_TUNE ? " tuned" : "");
  if (rc) printf("ERROR %s\n", err);
  else printf("rel err %.2e, max abs err %.2e%s\n", rel, worst, bad ? ", NON-FINITE outputs" : "");
  CHECK_MSG(!rc && !bad && rel <= tol, "matmul %s m=%lld: rc=%d bad=%d rel=%.3g %s", dname(c->dtype), (long long)m,
            rc, bad, rel, err);
  dfree(da), dfree(db), dfree(dc), dfree(dbias);
  free(ha), free(hb), free(hc), free(hbias);
  return rc || bad || rel > tol;
}

/* ---------------------------------------------------------------- main */

int main(void) {
  char err[4096];
  const char *libs = getenv("EMBER_CUDA_LIB_DIRS"), *incs = getenv("EMBER_CUDA_INC_DIRS");
  cuda_set_search_path(libs, incs);

  /* Argument checks come before any library is touched. */
  CHECK(blas_matmul(99, 0, 0, 2, 2, 2, err, 2, 0, err, 2, 0, err, 2, 0, 1, NULL, EPI_NONE, BLAS_LT, NULL, 0, NULL, err,
                    sizeof err) && strstr(err, "dtype"));
  CHECK(blas_matmul(EMBER_F32, 0, 0, 2, 2, 2, err, 1, 0, err, 2, 0, err, 2, 0, 1, NULL, EPI_NONE, BLAS_LT,
                    NULL, 0, NULL, err, sizeof err) && strstr(err, "lda=1"));
  CHECK(blas_matmul(EMBER_F32, 0, 0, 0, 2, 2, NULL, 2, 0, NULL, 2, 0, NULL, 2, 0, 1, NULL, EPI_NONE, BLAS_LT,
                    NULL, 0, NULL, err, sizeof err) == 0);  /* empty: nothing to do */

  if (cuda_init(err, sizeof err)) return no_gpu_checks(err);
  if (load_helpers()) {
    printf("test_cuda: libcuda lacks the test's helpers\n");
    return 1;
  }
  int quick = getenv("EMBER_TEST_QUICK") && *getenv("EMBER_TEST_QUICK") == '1';
  int sm = 0;
  CHECK(cuda_arch(0, &sm, err, sizeof err) == 0);
  printf("test_cuda: device 0 is sm_%d; search path: %s\n", sm, libs ? libs : "(none)");
  CHECK(cuda_arch(999, &sm, err, sizeof err) != 0 && strstr(err, "cuDeviceGet"));
  cuda_arch(0, &sm, err, sizeof err);

  /* Compile: the first call loads NVRTC. */
  void *bin = NULL, *bin2 = NULL;
  size_t nbin = 0, nbin2 = 0;
  double t0 = now_ms();
  int rc = cuda_compile(kernels_src, sm, &bin, &nbin, err, sizeof err);
  double t_first = now_ms() - t0;
  CHECK_MSG(rc == 0, "%s", err);
  if (rc) return T_DONE("test_cuda");
  t0 = now_ms();
  CHECK(cuda_compile(kernels_src, sm, &bin2, &nbin2, err, sizeof err) == 0);
  double t_second = now_ms() - t0;
  CHECK(nbin > 4 && !memcmp(bin, "\177ELF", 4));  /* a cubin, not PTX */
  CHECK(nbin == nbin2 && !memcmp(bin, bin2, nbin));
  free(bin2);
  printf("test_cuda: NVRTC: %zu-byte cubin for sm_%d in %.1f ms (first call, loads NVRTC), %.1f ms (second)\n",
         nbin, sm, t_first, t_second);

  /* Error paths. */
  void *junk = NULL;
  size_t njunk = 0;
  CHECK(cuda_compile(bad_src, sm, &junk, &njunk, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "nvrtcCompileProgram") && strstr(err, "ember.cu(2)") && strstr(err, "error"), "%s", err);
  CHECK(junk == NULL && njunk == 0);
  printf("test_cuda: a syntax error reads:\n---\n%s---\n", err);
  CHECK(cuda_compile(kernels_src, 10, &junk, &njunk, err, sizeof err) != 0 && strstr(err, "sm_10"));
  printf("test_cuda: sm_10 reads: %s\n", err);

  /* Load: the first call makes device 0's primary context (no torch here). */
  t0 = now_ms();
  CHECK_MSG(cuda_current_context(err, sizeof err) != NULL, "%s", err);
  double t_ctx = now_ms() - t0;
  const char *names[] = {"saxpy", "to_bf16", "shrev", "setflag"};
  t0 = now_ms();
  CudaMod *mod = cuda_load(bin, nbin, 4, names, err, sizeof err);
  double t_load = now_ms() - t0;
  CHECK_MSG(mod != NULL, "%s", err);
  if (!mod) return T_DONE("test_cuda");
  t0 = now_ms();
  CudaMod *mod2 = cuda_load(bin, nbin, 3, names, err, sizeof err);
  double t_load2 = now_ms() - t0;
  CHECK(mod2 != NULL);
  cuda_unload(mod2);
  printf("test_cuda: primary context made current in %.1f ms; cuda_load of 3 functions: %.3f ms, again %.3f ms\n",
         t_ctx, t_load, t_load2);
  const char *missing[] = {"saxpy", "nope"};
  CHECK(!cuda_load(bin, nbin, 2, missing, err, sizeof err) && strstr(err, "cuModuleGetFunction(\"nope\")"));
  printf("test_cuda: a missing function reads: %s\n", err);
  CHECK(!cuda_load("garbage, not a cubin", 21, 1, names, err, sizeof err) && strstr(err, "cuModuleLoadData"));
  printf("test_cuda: a bad image reads: %s\n", err);

  CUstream s = NULL;
  CHECK(d.StreamCreate(&s, 1) == 0);  /* CU_STREAM_NON_BLOCKING */

  /* saxpy: odd n, denormals kept (no flush to zero), fma contraction. */
  int n = 1000003;
  float a = 0.5f;
  float *hx = malloc(n * sizeof *hx), *hy = malloc(n * sizeof *hy), *ho = malloc(n * sizeof *ho);
  for (int i = 0; i < n; i++) hx[i] = (float)urand() * 100, hy[i] = (float)urand();
  hx[0] = 1e-39f, hy[0] = 0;           /* 0.5 * denormal = denormal */
  hx[1] = 2e-38f, hy[1] = -1.1754942e-38f;  /* result denormal */
  hx[2] = INFINITY, hy[2] = 1;
  hx[3] = NAN, hy[3] = 1;
  float *dx = dalloc(n * sizeof(float)), *dy = dalloc(n * sizeof(float));
  up(dx, hx, n * sizeof(float)), up(dy, hy, n * sizeof(float));
  unsigned grid[3] = {(unsigned)(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  void *args[] = {&n, &a, &dx, &dy};
  rc = cuda_launch(cuda_fn(mod, 0), grid, block, 0, s, args, err, sizeof err);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK(d.StreamSynchronize(s) == 0);
  down(ho, dy, n * sizeof(float));
  int wrong = 0;
  for (int i = 0; i < n; i++) {
    float want = fmaf(a, hx[i], hy[i]);
    if (!(fbits(want) == fbits(ho[i]) || (isnan(want) && isnan(ho[i])))) wrong++;
  }
  CHECK_MSG(wrong == 0, "saxpy: %d of %d differ from fmaf", wrong, n);

  /* A __device__ record: found by name, written by a kernel on the stream,
     read back in stream order (cuda_read_sync waits), cleared; the stream is
     not being captured. */
  void *flag = cuda_global(mod, "flag");
  CHECK(flag != NULL && cuda_global(mod, "nope") == NULL);
  long long fv = 1234567890123LL;
  void *fargs[] = {&fv};
  unsigned one3[3] = {1, 1, 1}, b32[3] = {32, 1, 1};
  int64_t rec[2] = {0, 0};
  int capturing = 1;
  if (flag) {
    CHECK(cuda_launch(cuda_fn(mod, 3), one3, b32, 0, s, fargs, err, sizeof err) == 0);
    CHECK_MSG(cuda_read_sync(rec, flag, sizeof rec, s, err, sizeof err) == 0, "%s", err);
    CHECK(rec[0] == fv && rec[1] == -fv);
    CHECK(cuda_memset_async(flag, 0, sizeof rec, s, err, sizeof err) == 0);
    CHECK(cuda_read_sync(rec, flag, sizeof rec, s, err, sizeof err) == 0 && rec[0] == 0 && rec[1] == 0);
  }
  CHECK_MSG(cuda_capturing(s, &capturing, err, sizeof err) == 0 && capturing == 0, "%s", err);
  CHECK(ho[0] == 0.5f * 1e-39f && ho[0] != 0);
  printf("test_cuda: saxpy on a stream: %d of %d results differ from the host's fmaf (denormal kept: %g)\n", wrong, n,
         ho[0]);

  /* fp32 -> bf16 with cvt.rn.bf16.f32: round to nearest even, NaN, Inf. */
  int nb = 4096;
  float *fx = malloc(nb * sizeof *fx);
  uint16_t *bo = malloc(nb * sizeof *bo);
  for (int i = 0; i < nb; i++) fx[i] = (float)(urand() * pow(2, (int)(urand() * 60)));
  float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, 3.4e38f, -3.39e38f,
                      bitsf(0x3F808000u) /* tie, even below */, bitsf(0x3F818000u) /* tie, odd below */,
                      bitsf(0x3F808001u), bitsf(0x7F7FFFFFu) /* rounds to Inf */};
  memcpy(fx, specials, sizeof specials);
  void *dfx = dalloc(nb * sizeof(float)), *dbo = dalloc(nb * 2);
  up(dfx, fx, nb * sizeof(float));
  unsigned grid2[3] = {(unsigned)(nb + 127) / 128, 1, 1}, block2[3] = {128, 1, 1};
  void *args2[] = {&nb, &dfx, &dbo};
  CHECK(cuda_launch(cuda_fn(mod, 1), grid2, block2, 0, s, args2, err, sizeof err) == 0);
  d.StreamSynchronize(s);
  down(bo, dbo, nb * 2);
  wrong = 0;
  for (int i = 0; i < nb; i++) {
    uint16_t want = to_bf16(fx[i]);
    int ok = isnan(fx[i]) ? ((bo[i] & 0x7F80) == 0x7F80 && (bo[i] & 0x7F)) : bo[i] == want;
    if (!ok) {
      if (wrong < 5) fprintf(stderr, "bf16(%a): got %04x want %04x\n", fx[i], bo[i], want);
      wrong++;
    }
  }
  CHECK_MSG(wrong == 0, "bf16: %d of %d wrong", wrong, nb);
  printf("test_cuda: cvt.rn.bf16.f32: %d of %d differ from the host's round-to-nearest-even\n", wrong, nb);

  /* 64 KiB of dynamic shared memory: cuda_launch opts the function in. */
  int ns = 16384;
  float *sx = malloc(ns * sizeof *sx), *so = malloc(ns * sizeof *so);
  for (int i = 0; i < ns; i++) sx[i] = (float)i;
  void *dsx = dalloc(ns * 4), *dso = dalloc(ns * 4);
  up(dsx, sx, ns * 4);
  unsigned g1[3] = {1, 1, 1}, b256[3] = {256, 1, 1};
  void *args3[] = {&dsx, &dso};
  rc = cuda_launch(cuda_fn(mod, 2), g1, b256, 65536, s, args3, err, sizeof err);
  CHECK_MSG(rc == 0, "%s", err);
  d.StreamSynchronize(s);
  down(so, dso, ns * 4);
  wrong = 0;
  for (int i = 0; i < ns; i++) wrong += so[i] != (float)(ns - 1 - i);
  CHECK(wrong == 0);
  printf("test_cuda: 64 KiB dynamic shared memory: %s\n", rc ? err : wrong ? "WRONG" : "ok");

  /* cuda_memset_async. */
  cuda_memset_async(dso, 0xAB, ns * 4, s, err, sizeof err);
  d.StreamSynchronize(s);
  down(so, dso, ns * 4);
  CHECK(fbits(so[0]) == 0xABABABABu && fbits(so[ns - 1]) == 0xABABABABu);

  /* An absurd block is refused by cuLaunchKernel, and said so. */
  unsigned huge[3] = {4096, 1, 1};
  CHECK(cuda_launch(cuda_fn(mod, 0), grid, huge, 0, s, args, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "cuLaunchKernel") && strstr(err, "CUDA_ERROR_"), "%s", err);
  printf("test_cuda: block 4096 reads: %s\n", err);

  /* A thread where no context is current (the autograd engine's, say). */
  ThreadLaunch tl = {.fn = cuda_fn(mod, 0), .n = n, .a = 2.0f, .x = dx, .y = dy};
  pthread_t th;
  pthread_create(&th, NULL, launch_in_thread, &tl);
  pthread_join(th, NULL);
  CHECK_MSG(tl.rc == 0, "%s", tl.err);
  CHECK(d.StreamSynchronize(NULL) == 0);  /* the legacy stream is the context's, shared by threads */
  down(hy, dy, n * sizeof(float));
  wrong = 0;
  for (int i = 4; i < n; i++) wrong += fbits(hy[i]) != fbits(fmaf(2.0f, hx[i], ho[i]));
  CHECK(wrong == 0);
  CHECK(!tl.had_ctx);
  printf("test_cuda: launch from a fresh thread (no context current: %s; bare cuLaunchKernel there returns %d): %s\n",
         tl.had_ctx ? "no" : "yes", tl.raw_rc, tl.rc ? tl.err : wrong ? "WRONG" : "ok");

  /* Launch overhead (host side, cached function). */
  if (!quick) {
    int small = 1024;
    unsigned gs[3] = {4, 1, 1};
    void *sargs[] = {&small, &a, &dx, &dy};
    for (int i = 0; i < 100; i++) cuda_launch(cuda_fn(mod, 0), gs, block, 0, s, sargs, err, sizeof err);
    d.StreamSynchronize(s);
    t0 = now_ms();
    for (int i = 0; i < 10000; i++) cuda_launch(cuda_fn(mod, 0), gs, block, 0, s, sargs, err, sizeof err);
    double t_launch = (now_ms() - t0) / 10000 * 1e3;
    d.StreamSynchronize(s);
    printf("test_cuda: cuda_launch host cost: %.2f us per launch\n", t_launch);
  }

  /* ------------------------------------------------------------ cuBLASLt */
  size_t wsn = 32u << 20;
  void *ws = dalloc(wsn);
  MmCase cases[] = {
    {EMBER_F32, 0, 0, 64, 96, 128, 1, 0, 0, 0, EPI_NONE, 0, BLAS_LT},
    {EMBER_F32, 0, 0, 67, 45, 33, 1, 0, 0, 1, EPI_NONE, 0, BLAS_LT},
    {EMBER_F32, 1, 0, 50, 70, 90, 1, 0, 0, 0, EPI_NONE, 0, BLAS_LT},
    {EMBER_F32, 0, 1, 50, 70, 90, 1, 3, 0, 1, EPI_RELU, 0, BLAS_LT},
    {EMBER_F32, 1, 1, 33, 17, 65, 1, 0, 0, 0, EPI_GELU, 0, BLAS_LT},
    {EMBER_F32, 0, 0, 40, 24, 56, 3, 0, 0, 1, EPI_RELU, 0, BLAS_LT},
    {EMBER_F32, 0, 1, 40, 24, 56, 4, 2, 1, 1, EPI_GELU, 0, BLAS_LT},
    {EMBER_F32, 0, 0, 1, 1000, 512, 1, 0, 0, 1, EPI_NONE, 0, BLAS_LT},
    {EMBER_BF16, 0, 0, 128, 256, 64, 1, 0, 0, 0, EPI_NONE, 0, BLAS_LT},
    {EMBER_BF16, 0, 1, 128, 256, 64, 1, 0, 0, 1, EPI_NONE, 0, BLAS_LT},
    {EMBER_BF16, 0, 1, 96, 192, 320, 1, 0, 0, 1, EPI_RELU, 0, BLAS_LT},
    {EMBER_BF16, 0, 1, 96, 192, 320, 1, 0, 0, 1, EPI_GELU, 0, BLAS_LT},
    {EMBER_BF16, 0, 1, 96, 192, 320, 1, 0, 0, 0, EPI_GELU, 0, BLAS_LT},
    {EMBER_BF16, 1, 0, 64, 80, 48, 1, 0, 0, 0, EPI_RELU, 0, BLAS_LT},
    {EMBER_BF16, 0, 0, 67, 45, 33, 1, 0, 0, 1, EPI_NONE, 0, BLAS_LT},
    {EMBER_BF16, 0, 0, 64, 64, 64, 5, 8, 0, 1, EPI_RELU, 0, BLAS_LT},
    {EMBER_BF16, 0, 1, 64, 64, 64, 5, 0, 1, 0, EPI_NONE, 0, BLAS_LT},
    {EMBER_F16, 0, 1, 128, 64, 96, 1, 0, 0, 1, EPI_GELU, 0, BLAS_LT},
    {EMBER_F16, 0, 0, 64, 64, 64, 2, 0, 0, 0, EPI_NONE, 0, BLAS_LT},
    /* a bias a few bytes past an aligned address (a slice of a larger
       buffer) is copied to the workspace first: never a misaligned load;
       one 16 bytes past goes to cuBLASLt as it is */
    {EMBER_BF16, 0, 1, 96, 192, 320, 1, 0, 0, 1, EPI_RELU, 1, BLAS_LT},
    {EMBER_BF16, 0, 1, 96, 192, 320, 1, 0, 0, 1, EPI_GELU, 8, BLAS_LT},
    {EMBER_BF16, 0, 1, 64, 200, 64, 3, 0, 0, 1, EPI_GELU, 3, BLAS_LT},
    {EMBER_F32, 0, 1, 50, 70, 90, 1, 0, 0, 1, EPI_NONE, 1, BLAS_LT},
    {EMBER_F16, 0, 0, 64, 64, 64, 2, 0, 0, 1, EPI_NONE, 7, BLAS_LT},
    /* cuBLAS's classic sgemm, each transpose, padded rows, a long k (its
       heuristic may split k); a batch, a bias or a 16-bit dtype asked of
       it go to cuBLASLt */
    {EMBER_F32, 0, 0, 64, 96, 128, 1, 0, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
    {EMBER_F32, 1, 0, 50, 70, 90, 1, 0, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
    {EMBER_F32, 0, 1, 50, 70, 90, 1, 3, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
    {EMBER_F32, 1, 1, 33, 17, 65, 1, 5, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
    {EMBER_F32, 0, 1, 128, 96, 3072, 1, 0, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
    {EMBER_F32, 0, 0, 40, 24, 56, 3, 0, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
    {EMBER_F32, 0, 1, 50, 70, 90, 1, 0, 0, 1, EPI_RELU, 0, BLAS_CUBLAS},
    {EMBER_BF16, 0, 1, 128, 256, 64, 1, 0, 0, 0, EPI_NONE, 0, BLAS_CUBLAS},
  };
  int ncases = (int)(sizeof cases / sizeof cases[0]), mm_bad = 0;
  printf("test_cuda: blas_matmul against float64 on the host:\n");
  for (int i = 0; i < ncases; i++) mm_bad += check_matmul(&cases[i], ws, wsn, s);
  /* The same problem again hits the plan cache and still matches. */
  mm_bad += check_matmul(&cases[10], ws, wsn, s);
  /* Tuned (BLAS_TUNE: the algorithms timed at the first call, the fastest
     kept; no disk cache here): the same results, each choice no slower than
     its default.  Quick mode tunes a few. */
  {
    static const int few[] = {0, 8, 10, 20, 24, 27};
    int before = ember_gemm_choices(-1, NULL), ntuned = quick ? (int)(sizeof few / sizeof few[0]) : ncases;
    for (int i = 0; i < ntuned; i++) {
      MmCase t = cases[quick ? few[i] : i];
      t.api |= BLAS_TUNE;
      mm_bad += check_matmul(&t, ws, wsn, s);
    }
    int after = ember_gemm_choices(-1, NULL);
    CHECK(after > before);
    for (int i = before; i < after; i++) {
      ember_gemm_choice c;
      ember_gemm_choices(i, &c);
      printf("  tuned %s: %s %.1f us -> %s %.1f us (%d timed, %.0f ms)%s%s\n", c.problem, c.dflt, c.dflt_ms * 1e3,
             c.chosen, c.chosen_ms * 1e3, c.candidates, c.tune_ms, c.note[0] ? ": " : "", c.note);
      CHECK_MSG(!c.note[0] && c.candidates >= 1 && c.chosen_ms <= c.dflt_ms, "%s: %s", c.problem, c.note);
    }
  }
  /* No workspace at all. */
  mm_bad += check_matmul(&cases[9], NULL, 0, NULL);
  /* A misaligned bias and no workspace to copy it into: an error, not a fault. */
  {
    char *buf = dalloc(4096), e2[512] = "";
    CHECK(blas_matmul(EMBER_F32, 0, 0, 2, 2, 2, buf, 2, 0, buf, 2, 0, buf + 1024, 2, 0, 1, buf + 2052, EPI_RELU,
                      BLAS_LT, NULL, 0, s, e2, sizeof e2) != 0 && strstr(e2, "aligned"));
    d.StreamSynchronize(s);
    dfree(buf);
  }

  /* A bf16 4096^3 product: time, and the host cost of a cached call. */
  double tflops = 0, host_us = 0, t_plan = 0;
  float med = 0;
  if (!quick) {
    int64_t N = 4096;
    size_t bytes = (size_t)(N * N * 2);
    uint16_t *hm = malloc(bytes);
    void *A = dalloc(bytes), *Bm = dalloc(bytes), *C = dalloc(bytes);
    for (int64_t i = 0; i < N * N; i++) hm[i] = to_bf16((float)urand());
    up(A, hm, bytes);
    uint16_t *ha = malloc(N * 2);  /* row 0 of A; hm keeps B */
    memcpy(ha, hm, N * 2);
    for (int64_t i = 0; i < N * N; i++) hm[i] = to_bf16((float)urand());
    up(Bm, hm, bytes);
    t0 = now_ms();
    rc = blas_matmul(EMBER_BF16, 0, 0, N, N, N, A, N, 0, Bm, N, 0, C, N, 0, 1, NULL, EPI_NONE, BLAS_LT, ws, wsn, s, err,
                     sizeof err);
    t_plan = now_ms() - t0;  /* includes the heuristic */
    CHECK_MSG(rc == 0, "%s", err);
    CUevent e0, e1;
    d.EventCreate(&e0, 0), d.EventCreate(&e1, 0);
    float times[20];
    for (int w = 0; w < 3; w++)
      blas_matmul(EMBER_BF16, 0, 0, N, N, N, A, N, 0, Bm, N, 0, C, N, 0, 1, NULL, EPI_NONE, BLAS_LT,
                  ws, wsn, s, err, sizeof err);
    for (int it = 0; it < 20; it++) {
      d.EventRecord(e0, s);
      blas_matmul(EMBER_BF16, 0, 0, N, N, N, A, N, 0, Bm, N, 0, C, N, 0, 1, NULL, EPI_NONE, BLAS_LT,
                  ws, wsn, s, err, sizeof err);
      d.EventRecord(e1, s);
      d.EventSynchronize(e1);
      d.EventElapsedTime(&times[it], e0, e1);
    }
    qsort(times, 20, sizeof times[0], cmp_float);
    med = times[10];
    tflops = 2.0 * N * N * N / (med * 1e-3) / 1e12;
    /* spot check 64 elements of row 0 of C */
    uint16_t *row = malloc(N * 2);
    down(row, C, N * 2);
    double worst = 0;
    for (int j = 0; j < 64; j++) {
      double acc = 0;
      for (int64_t p = 0; p < N; p++) acc += (double)from_bf16(ha[p]) * from_bf16(hm[p * N + j]);
      double e = fabs(from_bf16(row[j]) - acc) / (fabs(acc) + 1);
      if (e > worst) worst = e;
    }
    CHECK_MSG(worst < 2e-2, "4096^3 spot check: %g", worst);
    free(row), free(ha);
    /* host cost of a cached small call */
    for (int i = 0; i < 100; i++)
      blas_matmul(EMBER_BF16, 0, 1, 64, 64, 64, A, 64, 0, Bm, 64, 0, C, 64, 0, 1, NULL, EPI_NONE, BLAS_LT,
                  ws, wsn, s, err, sizeof err);
    d.StreamSynchronize(s);
    t0 = now_ms();
    for (int i = 0; i < 2000; i++)
      blas_matmul(EMBER_BF16, 0, 1, 64, 64, 64, A, 64, 0, Bm, 64, 0, C, 64, 0, 1, NULL, EPI_NONE, BLAS_LT,
                  ws, wsn, s, err, sizeof err);
    host_us = (now_ms() - t0) / 2000 * 1e3;
    d.StreamSynchronize(s);
    d.EventDestroy(e0), d.EventDestroy(e1);
    dfree(A), dfree(Bm), dfree(C);
    free(hm);
  }

  dfree(ws);
  dfree(dx), dfree(dy), dfree(dfx), dfree(dbo), dfree(dsx), dfree(dso);
  d.StreamDestroy(s);
  cuda_unload(mod);
  free(bin), free(hx), free(hy), free(ho), free(fx), free(bo), free(sx), free(so);

  printf("\n== summary ==\n");
  printf("arch sm_%d; NVRTC small kernel: %.1f ms first (with dlopen), %.1f ms next; cubin %zu bytes; context %.1f ms; "
         "load %.3f ms first, %.3f ms next\n", sm, t_first, t_second, nbin, t_ctx, t_load, t_load2);
  printf("blas_matmul: %d of %d checks failed\n", mm_bad, ncases + 2);
  if (!quick)
    printf("bf16 4096^3: %.3f ms median of 20 = %.0f TFLOP/s; first call (plan + heuristic) %.2f ms; cached call "
           "host cost %.2f us\n", med, tflops, t_plan, host_us);
  return T_DONE("test_cuda");
}
