/*
 * util.c - the small things every pass uses: the Pool (one bump allocator
 * per graph, freed at once), Str (a growable string), hashing, time, and the
 * allocation-failure and I/O-failure hooks that the fault tests drive.  No
 * compiler logic.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ember_int.h"

/* 0: never fail; n: the nth allocation from now fails.  Atomic: the
   compile's threads (code generation, builds) allocate too. */
static long fail_countdown;

void em_fail_alloc_after(long n) { __atomic_store_n(&fail_countdown, n, __ATOMIC_SEQ_CST); }
int em_fail_armed(void) { return __atomic_load_n(&fail_countdown, __ATOMIC_SEQ_CST) > 0; }

static int should_fail(void) {
  if (__atomic_load_n(&fail_countdown, __ATOMIC_RELAXED) <= 0) return 0;
  return __atomic_sub_fetch(&fail_countdown, 1, __ATOMIC_SEQ_CST) == 0;
}

/* The same for the disk cache's I/O calls (em_io_fault). */
static long io_countdown;

void em_fail_io_after(long n) { __atomic_store_n(&io_countdown, n, __ATOMIC_SEQ_CST); }
int em_io_armed(void) { return __atomic_load_n(&io_countdown, __ATOMIC_SEQ_CST) > 0; }

int em_io_fault(void) {
  if (__atomic_load_n(&io_countdown, __ATOMIC_RELAXED) <= 0) return 0;
  if (__atomic_sub_fetch(&io_countdown, 1, __ATOMIC_SEQ_CST) != 0) return 0;
  errno = EIO;
  return 1;
}

void em_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void *em_malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }
void *em_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }

struct PoolBlock {
  struct PoolBlock *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

void *pool_alloc(Pool *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  struct PoolBlock *b = p->head;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    b = em_malloc(sizeof *b + cap);
    if (!b) { p->oom = 1; return NULL; }
    b->next = p->head, b->used = 0, b->cap = cap;
    p->head = b;
  }
  void *r = b->data + b->used;
  b->used += n;
  memset(r, 0, n);
  return r;
}

char *pool_strdup(Pool *p, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *r = pool_alloc(p, n);
  if (r) memcpy(r, s, n);
  return r;
}

char *pool_printf(Pool *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *r = pool_alloc(p, (size_t)n + 1);
  if (!r) return NULL;
  va_start(ap, fmt);
  vsnprintf(r, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return r;
}

void pool_adopt(Pool *dst, Pool *src) {
  dst->oom |= src->oom;
  if (!src->head) return;
  struct PoolBlock *t = src->head;
  while (t->next) t = t->next;
  t->next = dst->head;
  dst->head = src->head;
  src->head = NULL;
}

void pool_free(Pool *p) {
  struct PoolBlock *b = p->head;
  while (b) {
    struct PoolBlock *n = b->next;
    free(b);
    b = n;
  }
  p->head = NULL;
}

static int str_grow(Str *b, size_t need) {
  if (b->oom) return 0;
  if (b->len + need + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap * 2 : 256;
  while (cap < b->len + need + 1) cap *= 2;
  char *s = em_realloc(b->s, cap);
  if (!s) { b->oom = 1; return 0; }
  b->s = s, b->cap = cap;
  return 1;
}

void str_vprintf(Str *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || !str_grow(b, (size_t)n)) return;
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void str_printf(Str *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  str_vprintf(b, fmt, ap);
  va_end(ap);
}

void str_puts(Str *b, const char *s) {
  size_t n = strlen(s);
  if (!str_grow(b, n)) return;
  memcpy(b->s + b->len, s, n + 1);
  b->len += n;
}

void str_free(Str *b) {
  free(b->s);
  b->s = NULL, b->len = b->cap = 0, b->oom = 0;
}

void em_assert_fail(const char *cond, const char *file, int line) {
  fprintf(stderr, "ember: internal error: assertion `%s' failed at %s:%d\n", cond, file, line);
  abort();
}

uint64_t em_hash64(const void *data, size_t n, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

double em_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void em_entry_name(char *buf, size_t n, int id, int variant, int body) {
  const char *u = variant == EM_WIDE ? "_w" : variant ? "_u" : "";
  if (body) snprintf(buf, n, "ember_k%d%s_b%d", id, u, body);
  else snprintf(buf, n, "ember_k%d%s", id, u);
}

int em_write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

int em_read_all(int fd, void *data, size_t n) {
  char *p = data;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r, n -= (size_t)r;
  }
  return 0;
}

const char *ember_version(void) { return "0.1.0"; }
