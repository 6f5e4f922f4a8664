/*
 * blas_cpu.c - matrix products on the CPU through the BLAS already loaded in
 * the process: torch's libtorch_cpu exports the Fortran entry points sgemm_
 * and dgemm_ (MKL in torch's CPU wheels, 32-bit integers), found with dlsym
 * at first use (resolve), so ember links no BLAS of its own.
 *
 * blas_cpu_matmul takes row-major matrices as torch stores them (the same
 * arguments as blas.c's blas_matmul, without bias, epilogue or workspace).
 * Fortran BLAS is column-major, and a row-major m x n matrix read
 * column-major is its transpose, so C = A B is computed as C^T = B^T A^T:
 * our B in the first slot, our A in the second, n x m result with our ldc.
 * An operand stored transposed (transa / transb) is given the 'T' flag and
 * its own leading dim, never copied.  A batch is a loop of calls, each
 * matrix at its batch stride (0: one matrix for every batch).  beta is 0, so
 * the result's old contents (an arena's garbage, NaNs included) are never
 * read.
 *
 * Threads: the library uses torch's thread count (torch.set_num_threads
 * sets MKL's and OpenMP's).  run.c calls it between kernels, never inside
 * one of ember's OpenMP regions.
 *
 * Where the process has no such BLAS (a C program without torch),
 * blas_cpu_available says so and lower.c leaves the product to the client's
 * fallback at compile time; a saved program loaded into such a process fails
 * its first call with a message saying why.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ember_int.h"

/* The Fortran ABI: every argument by pointer; the two trailing lengths are
   the character arguments' hidden lengths (gfortran passes them, C
   implementations of the BLAS ignore them). */
typedef void (*SgemmFn)(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
                        const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
                        const int *ldc, size_t lta, size_t ltb);
typedef void (*DgemmFn)(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
                        const double *a, const int *lda, const double *b, const int *ldb, const double *beta,
                        double *c, const int *ldc, size_t lta, size_t ltb);

#define TORCH_CPU_LIB "libtorch_cpu.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static SgemmFn sgemm;
static DgemmFn dgemm;

/* The process's global symbols first (a BLAS linked in or loaded
   RTLD_GLOBAL), then torch's library: Python loads torch's extension with
   RTLD_LOCAL, so its libtorch_cpu's symbols are not global; RTLD_NOLOAD
   gives its handle only where it is already loaded, and loads nothing. */
static void resolve(void) {
  void *s = dlsym(RTLD_DEFAULT, "sgemm_"), *d = dlsym(RTLD_DEFAULT, "dgemm_");
  void *torch = s && d ? NULL : dlopen(TORCH_CPU_LIB, RTLD_LAZY | RTLD_NOLOAD);
  if (torch) {  /* the reference is kept: torch stays loaded for the process's life */
    if (!s) s = dlsym(torch, "sgemm_");
    if (!d) d = dlsym(torch, "dgemm_");
  }
  memcpy(&sgemm, &s, sizeof s);
  memcpy(&dgemm, &d, sizeof d);
}

int blas_cpu_available(int dtype) {
  pthread_once(&once, resolve);
  return dtype == EMBER_F32 ? sgemm != NULL : dtype == EMBER_F64 ? dgemm != NULL : 0;
}

int blas_cpu_fits(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}

int blas_cpu_matmul(int dtype, int transa, int transb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                    int64_t stride_a, const void *b, int64_t ldb, int64_t stride_b, void *c, int64_t ldc,
                    int64_t stride_c, int64_t batch, char *err, size_t errlen) {
  if (m <= 0 || n <= 0 || batch <= 0) return 0;  /* nothing to compute */
  if (!blas_cpu_available(dtype)) {
    snprintf(err, errlen, "no %s in this process (torch's libtorch_cpu exports it: import torch first)",
             dtype == EMBER_F64 ? "dgemm_" : "sgemm_");
    return -1;
  }
  if (k <= 0 || !blas_cpu_fits(m, n, k, lda, ldb, ldc)) {
    snprintf(err, errlen, "sizes m=%lld n=%lld k=%lld do not fit the BLAS's 32-bit integers (or k is 0)",
             (long long)m, (long long)n, (long long)k);
    return -1;
  }
  /* column-major: C^T (n x m) = op(B)^T op(A)^T */
  const char ta = transb ? 'T' : 'N', tb = transa ? 'T' : 'N';
  const int M = (int)n, N = (int)m, K = (int)k, LDA = (int)ldb, LDB = (int)lda, LDC = (int)ldc;
  size_t es = dtype == EMBER_F64 ? 8 : 4;
  for (int64_t i = 0; i < batch; i++) {
    const char *pa = (const char *)b + (size_t)(i * stride_b) * es, *pb = (const char *)a + (size_t)(i * stride_a) * es;
    char *pc = (char *)c + (size_t)(i * stride_c) * es;
    if (dtype == EMBER_F64) {
      const double one = 1, zero = 0;
      dgemm(&ta, &tb, &M, &N, &K, &one, (const double *)pa, &LDA, (const double *)pb, &LDB, &zero, (double *)pc,
            &LDC, 1, 1);
    } else {
      const float one = 1, zero = 0;
      sgemm(&ta, &tb, &M, &N, &K, &one, (const float *)pa, &LDA, (const float *)pb, &LDB, &zero, (float *)pc, &LDC,
            1, 1);
    }
  }
  return 0;
}
