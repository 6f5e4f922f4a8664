/* test_hostmem.c - the cache of large host blocks: alignment, reuse of a freed
   block for the same rounded size only, the byte limit (oldest dropped
   first), release of everything, and frees from other threads. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "ember.h"
#include "t.h"

#define MiB ((size_t)1 << 20)

static void *churn(void *arg) {
  (void)arg;
  for (int i = 0; i < 200; i++) {
    char *p = ember_host_alloc((size_t)(1 + i % 3) * 3 * MiB);
    if (!p) return (void *)1;
    p[0] = 1, p[3 * MiB - 1] = 2;  /* the whole requested size is ours */
    ember_host_free(p);
  }
  return NULL;
}

int main(void) {
  CHECK(ember_host_alloc(0) == NULL);
  CHECK(ember_host_cached() == 0);
  char *a = ember_host_alloc(3 * MiB);
  CHECK(a && (uintptr_t)a % (2 * MiB) == 0);
  memset(a, 7, 3 * MiB);
  ember_host_free(a);
  CHECK(ember_host_cached() == 4 * MiB);     /* rounded up to 2 MiB multiples */
  char *b = ember_host_alloc(4 * MiB);       /* the same rounded size: the same block */
  CHECK(b == a);
  CHECK(ember_host_cached() == 0);
  char *c = ember_host_alloc(6 * MiB);       /* another size: a new block */
  CHECK(c && c != b);
  ember_host_free(b);
  ember_host_free(c);
  CHECK(ember_host_cached() == 10 * MiB);
  ember_host_free(NULL);

  /* the limit drops the oldest cached blocks */
  ember_host_set_limit(8 * MiB);
  CHECK(ember_host_cached() == 6 * MiB);     /* b (4 MiB, freed first) went */
  char *d = ember_host_alloc(4 * MiB);
  CHECK(d && d != c);
  ember_host_free(d);
  CHECK(ember_host_cached() == 4 * MiB);     /* c (oldest) went to make room for d */
  ember_host_set_limit(0);
  CHECK(ember_host_cached() == 0);
  ember_host_set_limit(64 * MiB);

  /* tensors die on any thread */
  pthread_t th[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, churn, NULL) == 0);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    CHECK(r == NULL);
  }
  CHECK(ember_host_cached() <= 64 * MiB);
  ember_host_set_limit(0);
  CHECK(ember_host_cached() == 0);
  return T_DONE("test_hostmem");
}
