/* test_gemm_tune.c - GEMM tuning's parts that need no GPU (blas.c): the
 * choice from the timings (the margin, failed candidates, the default kept
 * on a tie), the finalists' order, the record as text and back (damaged
 * records refused), the cache key (GPU, cuBLASLt version, problem), and the
 * record stored in and read back from the disk cache in a fresh folder
 * (a missing or tampered entry reads as none). */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember_int.h"
#include "t.h"

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) { return remove(p); }

static void test_pick(void) {
  double ms[] = {1.0, 0.99, 0.90, 0.95};
  CHECK(blas_tune_pick(ms, 4, 0, 0.03) == 2);          /* 10% faster: taken */
  CHECK(blas_tune_pick(ms, 2, 0, 0.03) == 0);          /* 1% faster: within the margin, default kept */
  CHECK(blas_tune_pick(ms, 4, 0, 0.15) == 0);          /* nothing beats a 15% margin */
  CHECK(blas_tune_pick(ms, 4, 2, 0.03) == 2);          /* the default is the fastest */
  double failed[] = {1.0, -1, INFINITY, NAN, 0.0, 0.5};
  CHECK(blas_tune_pick(failed, 6, 0, 0.03) == 5);      /* failed or zero times are never chosen */
  CHECK(blas_tune_pick(failed, 5, 0, 0.03) == 0);
  double dflt_failed[] = {-1, 0.5};
  CHECK(blas_tune_pick(dflt_failed, 2, 0, 0.03) == 0); /* an untimed default stays */
  CHECK(blas_tune_pick(ms, 0, 0, 0.03) == 0);
  double tie[] = {1.0, 1.0};
  CHECK(blas_tune_pick(tie, 2, 0, 0.0) == 0);          /* a tie keeps the default */
}

static void test_best(void) {
  double ms[] = {1.0, 0.5, -1, 0.7, 0.2, INFINITY, 0.9, 0.6};
  int out[8];
  int n = blas_tune_best(ms, 8, 0, 3, out);
  CHECK(n == 3 && out[0] == 4 && out[1] == 1 && out[2] == 7);
  n = blas_tune_best(ms, 8, 4, 8, out);                /* all valid but the excluded one, in order */
  CHECK(n == 5 && out[0] == 1 && out[1] == 7 && out[2] == 3 && out[3] == 6 && out[4] == 0);
  n = blas_tune_best(ms, 8, -1, 1, out);
  CHECK(n == 1 && out[0] == 4);
  CHECK(blas_tune_best(ms, 0, -1, 4, out) == 0);
}

static BlasTuneRec sample(void) {
  BlasTuneRec r;
  memset(&r, 0, sizeof r);
  r.kind = 1;
  for (int i = 0; i < 64; i++) r.algo[i] = (unsigned char)(i * 37 + 5);
  snprintf(r.problem, sizeof r.problem, "bf16 m=6304 n=3072 k=768 batch=1 +bias gelu ld=768,3072,3072");
  snprintf(r.dflt, sizeof r.dflt, "cuBLASLt algo 66 tile 20 stages 0 split-K 1 swizzle 0 custom 0 cluster 0");
  snprintf(r.chosen, sizeof r.chosen, "cuBLASLt algo 66 tile 23 stages 8 split-K 1 swizzle 1 custom 0 cluster 3");
  r.dflt_ms = 0.0512345678901234, r.chosen_ms = 0.0411, r.candidates = 213;
  return r;
}

static void test_record(void) {
  BlasTuneRec r = sample(), back;
  char buf[2048];
  int w = blas_tune_encode(&r, buf, sizeof buf);
  CHECK(w > 0 && (size_t)w < sizeof buf);
  CHECK(blas_tune_decode(buf, (size_t)w, &back) == 0);
  CHECK(back.kind == 1 && !memcmp(back.algo, r.algo, 64) && back.candidates == 213);
  CHECK(back.dflt_ms == r.dflt_ms && back.chosen_ms == r.chosen_ms);  /* %.17g: exact */
  CHECK(!strcmp(back.problem, r.problem) && !strcmp(back.dflt, r.dflt) && !strcmp(back.chosen, r.chosen));
  /* a newline inside a field would split the record: written as a space */
  BlasTuneRec nl = r;
  snprintf(nl.chosen, sizeof nl.chosen, "cuBLAS\ngemmEx");
  nl.kind = 2;
  w = blas_tune_encode(&nl, buf, sizeof buf);
  CHECK(w > 0 && blas_tune_decode(buf, (size_t)w, &back) == 0 && back.kind == 2 &&
        !strcmp(back.chosen, "cuBLAS gemmEx"));
  /* too small a buffer */
  CHECK(blas_tune_encode(&r, buf, 40) == -1);
  /* damaged records */
  w = blas_tune_encode(&r, buf, sizeof buf);
  char bad[2048];
  memcpy(bad, buf, (size_t)w);
  bad[0] = 'X';
  CHECK(blas_tune_decode(bad, (size_t)w, &back) == -1);            /* not a record */
  CHECK(blas_tune_decode(buf, (size_t)w / 2, &back) == -1);        /* cut short */
  memcpy(bad, buf, (size_t)w);
  char *k = strstr(bad, "kind 1");
  k[5] = '7';
  CHECK(blas_tune_decode(bad, (size_t)w, &back) == -1);            /* no such kind */
  memcpy(bad, buf, (size_t)w);
  char *a = strstr(bad, "algo ");
  a[10] = 'g';
  CHECK(blas_tune_decode(bad, (size_t)w, &back) == -1);            /* not hex */
  memcpy(bad, buf, (size_t)w);
  char *c = strstr(bad, "candidates 213");
  c[11] = 'x';
  CHECK(blas_tune_decode(bad, (size_t)w, &back) == -1);
}

static void test_key(void) {
  char k1[65], k2[65], k3[65], k4[65], k5[65];
  blas_tune_key("NVIDIA H100 80GB HBM3", 130000, "bf16 m=1 n=2 k=3", k1);
  blas_tune_key("NVIDIA H100 80GB HBM3", 130000, "bf16 m=1 n=2 k=3", k2);
  blas_tune_key("NVIDIA H200", 130000, "bf16 m=1 n=2 k=3", k3);
  blas_tune_key("NVIDIA H100 80GB HBM3", 130100, "bf16 m=1 n=2 k=3", k4);
  blas_tune_key("NVIDIA H100 80GB HBM3", 130000, "bf16 m=1 n=2 k=4", k5);
  CHECK(strlen(k1) == 64 && !strcmp(k1, k2));
  CHECK(strcmp(k1, k3) && strcmp(k1, k4) && strcmp(k1, k5));
}

static void test_disk(void) {
  char dir[] = "/tmp/ember_tune_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char folder[256], err[512] = "";
  snprintf(folder, sizeof folder, "%s/cache", dir);  /* made by the store */
  BlasTuneRec r = sample(), back;
  char key[65];
  blas_tune_key("gpu", 1, r.problem, key);
  CHECK(blas_tune_load(folder, key, &back) == 1);    /* nothing yet */
  CHECK_MSG(blas_tune_store(folder, key, &r, err, sizeof err) == 0, "%s", err);
  CHECK(blas_tune_load(folder, key, &back) == 0 && back.kind == 1 && !memcmp(back.algo, r.algo, 64) &&
        !strcmp(back.problem, r.problem));
  char other[65];
  blas_tune_key("gpu", 2, r.problem, other);
  CHECK(blas_tune_load(folder, other, &back) == 1);  /* another cuBLASLt: a miss */
  CHECK(blas_tune_load(NULL, key, &back) == 1 && blas_tune_load("", key, &back) == 1);
  /* a record changed on disk fails its hash: a miss (and removed) */
  char path[512];
  cache_entry_path(folder, key, path, sizeof path);
  FILE *f = fopen(path, "r+");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 25, SEEK_SET);
    fputc('9', f);
    fclose(f);
  }
  CHECK(blas_tune_load(folder, key, &back) == 1);
  CHECK(access(path, F_OK) != 0);
  /* stored again: read back */
  r.kind = 0;
  CHECK(blas_tune_store(folder, key, &r, err, sizeof err) == 0);
  CHECK(blas_tune_load(folder, key, &back) == 0 && back.kind == 0);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
  test_pick();
  test_best();
  test_record();
  test_key();
  test_disk();
  CHECK(ember_gemm_choices(0, NULL) == 0);            /* nothing tuned in this process */
  return T_DONE("test_gemm_tune");
}
