/* test_gemm_mock.c - blas.c's GEMM tuning from end to end without a GPU,
 * against tests/c/mock_cuda.c's stand-ins for libcuda, cuBLASLt and cuBLAS
 * (host memory, products computed on the host, a clock that only products
 * advance, each by a cost set by its algorithm's configuration).
 *
 * Checked: the results of tuned calls against a float64 reference (f32 and
 * bf16; bias and GELU in the epilogue, a misaligned operand, batches, the
 * classic API as the default and as the choice); the choice is the
 * cheapest candidate the rules allow: never the algorithm that
 * accumulates in fp16, never a tensor-op one for fp32 data, never one that
 * needs more alignment than the operands have; a product is tuned once per
 * process; one first met during a capture runs its default with no event
 * and is tuned at its next call outside one; the classic handle keeps
 * 16-bit reductions in fp32; and a second process (this program run again)
 * reads every choice from the disk cache and times nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ember_int.h"
#include "t.h"

typedef struct MockStats {     /* as in mock_cuda.c */
  double clock_ms;
  int capturing;
  long gemms, gemms_capturing, events_capturing, misaligned, numerics_16f;
  int math_mode;
} MockStats;
static MockStats *ms;

enum { WS = 16 << 20 };
static void *ws;

static float bf(float x) {  /* x rounded to bf16 and back */
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}
static uint16_t bf_bits(float x) {
  x = bf(x);
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}
static float bf_val(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

typedef struct Mat {           /* a row-major operand: rows x cols, ld, batch stride, as floats and stored */
  int64_t rows, cols, ld, stride, batch;
  int dtype;
  float *f;                    /* the values (bf16-representable for bf16) */
  void *mem;                   /* 256-byte aligned */
  void *p;                     /* mem + off elements */
} Mat;

static unsigned seed = 12345;
static float rnd(void) {
  seed = seed * 1103515245u + 12345u;
  return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static Mat mat(int dtype, int64_t batch, int64_t rows, int64_t cols, int64_t ld, int off, int fill) {
  Mat m = {rows, cols, ld, rows * ld, batch, dtype, NULL, NULL, NULL};
  size_t n = (size_t)(batch * rows * ld + off + 64);
  int es = dtype == EMBER_F32 ? 4 : 2;
  m.f = calloc(n, sizeof(float));
  m.mem = aligned_alloc(256, (n * (size_t)es + 255) / 256 * 256);
  memset(m.mem, 0, n * (size_t)es);
  m.p = (char *)m.mem + off * es;
  for (size_t i = 0; fill && i < (size_t)(batch * rows * ld); i++) {
    float v = dtype == EMBER_F32 ? rnd() : bf(rnd());
    m.f[i] = v;
    if (dtype == EMBER_F32) ((float *)m.p)[i] = v;
    else ((uint16_t *)m.p)[i] = bf_bits(v);
  }
  return m;
}
static void mat_free(Mat *m) {
  free(m->f);
  free(m->mem);
}
static float mat_get(const Mat *m, int64_t i) {
  return m->dtype == EMBER_F32 ? ((float *)m->p)[i] : bf_val(((uint16_t *)m->p)[i]);
}

/* C = A B (+ bias, gelu) against the reference; 1 if every element is close. */
static int product_ok(const Mat *a, const Mat *b, const Mat *c, const Mat *bias, int gelu) {
  double tol = c->dtype == EMBER_F32 ? 1e-4 : 2e-2;
  for (int64_t q = 0; q < c->batch; q++)
    for (int64_t i = 0; i < c->rows; i++)
      for (int64_t j = 0; j < c->cols; j++) {
        double s = 0;
        for (int64_t p = 0; p < a->cols; p++)
          s += (double)a->f[q * a->stride + i * a->ld + p] * b->f[q * b->stride + p * b->ld + j];
        if (bias) s += bias->f[j];
        if (gelu) s = 0.5 * s * (1 + tanh(0.7978845608 * (s + 0.044715 * s * s * s)));
        double got = mat_get(c, q * c->stride + i * c->ld + j);
        if (fabs(got - s) > tol * (1 + fabs(s))) {
          fprintf(stderr, "  [%lld,%lld,%lld] got %g want %g\n", (long long)q, (long long)i, (long long)j, got, s);
          return 0;
        }
      }
  return 1;
}

static int call(const Mat *a, const Mat *b, Mat *c, const Mat *bias, int epi, int api) {
  char err[512] = "";
  int rc = blas_matmul(c->dtype, 0, 0, c->rows, c->cols, a->cols, a->p, a->ld, a->stride, b->p, b->ld, b->stride,
                       c->p, c->ld, c->stride, c->batch, bias ? bias->p : NULL, epi, api, ws, WS, NULL, err,
                       sizeof err);
  if (rc) fprintf(stderr, "  blas_matmul: %s\n", err);
  return rc;
}

static int choices(void) { return ember_gemm_choices(-1, NULL); }
static ember_gemm_choice last(void) {
  ember_gemm_choice c;
  memset(&c, 0, sizeof c);
  int n = choices();
  if (n) ember_gemm_choices(n - 1, &c);
  return c;
}

/* f32, no bias: the classic call (the mock's cheapest allowed) wins. */
static void test_f32_classic_wins(void) {
  Mat a = mat(EMBER_F32, 1, 8, 128, 128, 0, 1), b = mat(EMBER_F32, 1, 128, 8, 8, 0, 1);
  Mat c = mat(EMBER_F32, 1, 8, 8, 8, 0, 0);
  int before = choices();
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0));
  CHECK(choices() == before + 1);
  ember_gemm_choice t = last();
  CHECK_MSG(strstr(t.dflt, "cuBLASLt algo 0 tile 3") && !strcmp(t.chosen, "cuBLAS sgemm"), "%s -> %s", t.dflt,
            t.chosen);
  CHECK(t.candidates > 10 && !t.from_disk && !t.note[0]);
  CHECK(fabs(t.chosen_ms - 0.0093) < 1e-6 && t.dflt_ms > t.chosen_ms);
  CHECK(strstr(t.problem, "f32 m=8 n=8 k=128 batch=1") != NULL);
  /* tuned once: the next call runs the choice alone */
  long g = ms->gemms;
  memset(c.p, 0, 8 * 8 * 4);
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0) && ms->gemms == g + 1 && choices() == before + 1);
  mat_free(&a), mat_free(&b), mat_free(&c);
}

/* bf16 with bias and GELU: algorithm 1 (16-byte aligned operands) refined. */
static void test_bf16_epilogue(void) {
  Mat a = mat(EMBER_BF16, 1, 20, 64, 64, 0, 1), b = mat(EMBER_BF16, 1, 64, 48, 48, 0, 1);
  Mat c = mat(EMBER_BF16, 1, 20, 48, 48, 0, 0), bias = mat(EMBER_BF16, 1, 1, 48, 48, 0, 1);
  CHECK(call(&a, &b, &c, &bias, EPI_GELU, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, &bias, 1));
  ember_gemm_choice t = last();
  CHECK_MSG(strstr(t.chosen, "cuBLASLt algo 1 tile 4") != NULL, "%s", t.chosen);
  CHECK(strstr(t.problem, "+bias gelu") != NULL);
  CHECK(t.chosen_ms < 0.0090 * 1.0001 && t.chosen_ms < t.dflt_ms * 0.97);
  mat_free(&a), mat_free(&b), mat_free(&c), mat_free(&bias);
}

/* bf16, A 2 bytes off: algorithm 1 would fault, so it is never run. */
static void test_bf16_misaligned(void) {
  Mat a = mat(EMBER_BF16, 1, 20, 64, 64, 1, 1), b = mat(EMBER_BF16, 1, 64, 48, 48, 0, 1);
  Mat c = mat(EMBER_BF16, 1, 20, 48, 48, 0, 0);
  int before = choices();
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0) && choices() == before + 1);
  ember_gemm_choice t = last();
  CHECK_MSG(!strstr(t.chosen, "algo 1"), "%s", t.chosen);
  CHECK(strstr(t.problem, "align=2,") != NULL);
  mat_free(&a), mat_free(&b), mat_free(&c);
}

/* Batches: the strided batched classic call among the candidates. */
static void test_bf16_batched(void) {
  Mat a = mat(EMBER_BF16, 3, 16, 32, 32, 0, 1), b = mat(EMBER_BF16, 3, 32, 24, 24, 0, 1);
  Mat c = mat(EMBER_BF16, 3, 16, 24, 24, 0, 0);
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0));
  ember_gemm_choice t = last();
  CHECK(strstr(t.problem, "batch=3") != NULL && t.candidates > 10);
  CHECK(ms->math_mode == 16);  /* CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION */
  mat_free(&a), mat_free(&b), mat_free(&c);
}

/* lower.c asked for cublasSgemm: that is the default the others must beat. */
static void test_sgemm_default(void) {
  Mat a = mat(EMBER_F32, 1, 12, 40, 40, 0, 1), b = mat(EMBER_F32, 1, 40, 20, 20, 0, 1);
  Mat c = mat(EMBER_F32, 1, 12, 20, 20, 0, 0);
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_CUBLAS | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0));
  ember_gemm_choice t = last();
  CHECK_MSG(!strcmp(t.dflt, "cuBLAS sgemm") && !strcmp(t.chosen, "cuBLAS sgemm"), "%s -> %s", t.dflt, t.chosen);
  mat_free(&a), mat_free(&b), mat_free(&c);
}

/* First met during a capture: its default runs, nothing is timed; tuned at the next call outside. */
static void test_capture(void) {
  Mat a = mat(EMBER_F32, 1, 17, 64, 64, 0, 1), b = mat(EMBER_F32, 1, 64, 24, 24, 0, 1);
  Mat c = mat(EMBER_F32, 1, 17, 24, 24, 0, 0);
  int before = choices();
  long g = ms->gemms;
  ms->capturing = 1;
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  ms->capturing = 0;
  CHECK(product_ok(&a, &b, &c, NULL, 0));
  CHECK(choices() == before && ms->gemms == g + 1 && ms->gemms_capturing == 1 && ms->events_capturing == 0);
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0));
  CHECK(choices() == before + 1 && last().candidates > 10 && ms->gemms > g + 10);
  mat_free(&a), mat_free(&b), mat_free(&c);
}

/* Untuned calls stay as they were: no record, one product. */
static void test_untuned(void) {
  Mat a = mat(EMBER_BF16, 1, 20, 64, 64, 0, 1), b = mat(EMBER_BF16, 1, 64, 48, 48, 0, 1);
  Mat c = mat(EMBER_BF16, 1, 20, 48, 48, 0, 0);
  int before = choices();
  long g = ms->gemms;
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0) && choices() == before && ms->gemms == g + 1);
  mat_free(&a), mat_free(&b), mat_free(&c);
}

/* Each allocation, then each disk-cache I/O call, of a tuned call failed in
   turn (a new problem each time): the call still succeeds with the right
   product; a failed store says "not cached". */
static void test_faults(void) {
  int rounds[2] = {0, 0};
  for (int io = 0; io < 2; io++)
    for (long n = 1; n < 1000; n++) {
      /* a new problem each time: B's row stride */
      Mat a = mat(EMBER_F32, 1, 2, 64, 64, 0, 1), b = mat(EMBER_F32, 1, 64, 4, 4 + n + 1000 * io, 0, 1);
      Mat c = mat(EMBER_F32, 1, 2, 4, 4, 0, 0);
      if (io) em_fail_io_after(n);
      else em_fail_alloc_after(n);
      int rc = call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE);
      int hit = io ? !em_io_armed() : !em_fail_armed();
      em_fail_alloc_after(0), em_fail_io_after(0);
      CHECK_MSG(rc == 0 && product_ok(&a, &b, &c, NULL, 0), "%s fault %ld", io ? "I/O" : "allocation", n);
      ember_gemm_choice t = last();
      if (io && hit && strstr(t.problem, "k=64") && t.note[0]) CHECK(strstr(t.note, "not cached") != NULL);
      mat_free(&a), mat_free(&b), mat_free(&c);
      if (!hit) break;
      rounds[io]++;
    }
  CHECK(rounds[0] > 3 && rounds[1] > 3);  /* the loops reached faults */
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) { return remove(p); }

static int setup(const char *self) {
  char dir[PATH_MAX], path[PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%s", self);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  static const char *const libs[] = {"libcuda.so.1", "libcublasLt.so.13", "libcublas.so.13"};
  void *h[3];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/mock/%s", dir, libs[i]);
    if (!(h[i] = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) {
      fprintf(stderr, "test_gemm_mock: %s\n", dlerror());
      return 1;
    }
  }
  MockStats *(*stats)(void) = (MockStats * (*)(void)) dlsym(h[0], "mock_stats");
  if (!stats) return 1;
  ms = stats();
  snprintf(path, sizeof path, "%s/mock", dir);
  cuda_set_search_path(path, "");
  ws = aligned_alloc(256, WS);
  return !ws;
}

/* The second process: the first problem again, from the disk cache. */
static int child(const char *folder) {
  ember_gemm_cache_dir(folder);
  Mat a = mat(EMBER_F32, 1, 8, 128, 128, 0, 1), b = mat(EMBER_F32, 1, 128, 8, 8, 0, 1);
  Mat c = mat(EMBER_F32, 1, 8, 8, 8, 0, 0);
  CHECK(call(&a, &b, &c, NULL, EPI_NONE, BLAS_LT | BLAS_TUNE) == 0);
  CHECK(product_ok(&a, &b, &c, NULL, 0));
  ember_gemm_choice t = last();
  CHECK(choices() == 1 && t.from_disk && !strcmp(t.chosen, "cuBLAS sgemm") && t.candidates > 10);
  CHECK(ms->gemms == 1);  /* nothing timed */
  mat_free(&a), mat_free(&b), mat_free(&c);
  free(ws);
  return T_DONE("test_gemm_mock (second process)");
}

int main(int argc, char **argv) {
  if (setup(argv[0])) return 1;
  if (argc == 3 && !strcmp(argv[1], "child")) return child(argv[2]);
  char dir[] = "/tmp/ember_tune_mock_XXXXXX", folder[64];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(folder, sizeof folder, "%s/cache", dir);
  ember_gemm_cache_dir(folder);
  test_f32_classic_wins();
  test_bf16_epilogue();
  test_bf16_misaligned();
  test_bf16_batched();
  test_sgemm_default();
  test_capture();
  test_untuned();
  test_faults();
  CHECK(ms->misaligned == 0 && ms->numerics_16f == 0);
  /* the same program again reads the choices */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv[0], "child", folder, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(ws);
  return T_DONE("test_gemm_mock");
}
