/*
 * hostmem.c - large host blocks for the tensors ember hands out on the CPU.
 *
 * A large tensor from torch's CPU allocator is a fresh mmap every time (glibc
 * maps blocks over 32 MiB and unmaps them when freed): the first write to
 * each 4 KiB page faults and the kernel zeroes the page.  For a 64 MiB output
 * that costs more than the kernel that fills it (gelu(x*w+b) over 2^24
 * floats on 2 cores).  Blocks from here are mapped
 * 2 MiB-aligned with transparent huge pages asked for, and a block whose
 * tensor dies is kept for the next tensor of the same rounded size, up to a
 * byte limit, so a loop that makes the same outputs step after step touches
 * no new pages.
 *
 * Thread-safe: a tensor may be freed on any thread.  Not done here: small
 * blocks (glibc's heap serves those without faults) and zeroing (ember's
 * kernels write every element of the tensors they hand out).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ember_int.h"

#define HM_ALIGN ((size_t)2 << 20)   /* huge-page size: blocks are multiples of it */

typedef struct Blk {
  char *p;                 /* the block (HM_ALIGN-aligned) */
  size_t len;              /* its mapped length, a multiple of HM_ALIGN */
  int live;                /* 1: a tensor holds it; 0: cached */
  unsigned long freed_at;  /* when it was cached (a counter): the oldest goes first */
} Blk;

static pthread_mutex_t hm_lock = PTHREAD_MUTEX_INITIALIZER;
static Blk *hm_blk;        /* every block, live or cached (malloc'ed) */
static int hm_n, hm_cap;
static size_t hm_cached;   /* bytes in cached blocks */
static size_t hm_limit = (size_t)1 << 30;  /* the most bytes kept cached */
static unsigned long hm_clock;

static void *map_aligned(size_t len) {
  char *raw = mmap(NULL, len + HM_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *p = (char *)(((uintptr_t)raw + HM_ALIGN - 1) & ~(uintptr_t)(HM_ALIGN - 1));
  if (p > raw) munmap(raw, (size_t)(p - raw));
  size_t tail = (size_t)(raw + len + HM_ALIGN - (p + len));
  if (tail) munmap(p + len, tail);
#ifdef MADV_HUGEPAGE
  madvise(p, len, MADV_HUGEPAGE);  /* advice: ignored where huge pages are off */
#endif
  return p;
}

/* Drop cached blocks, oldest first, until at most `keep` bytes stay cached.
   Called with the lock held. */
static void shrink(size_t keep) {
  while (hm_cached > keep) {
    int old = -1;
    for (int i = 0; i < hm_n; i++)
      if (!hm_blk[i].live && (old < 0 || hm_blk[i].freed_at < hm_blk[old].freed_at)) old = i;
    if (old < 0) break;
    munmap(hm_blk[old].p, hm_blk[old].len);
    hm_cached -= hm_blk[old].len;
    hm_blk[old] = hm_blk[--hm_n];
  }
}

void *ember_host_alloc(size_t nbytes) {
  if (nbytes == 0 || nbytes > ((size_t)1 << 48)) return NULL;
  size_t len = (nbytes + HM_ALIGN - 1) & ~(HM_ALIGN - 1);
  pthread_mutex_lock(&hm_lock);
  for (int i = 0; i < hm_n; i++)
    if (!hm_blk[i].live && hm_blk[i].len == len) {
      hm_blk[i].live = 1;
      hm_cached -= len;
      pthread_mutex_unlock(&hm_lock);
      return hm_blk[i].p;
    }
  void *p = NULL;
  if (hm_n == hm_cap) {
    int cap = hm_cap ? 2 * hm_cap : 64;
    Blk *nb = em_realloc(hm_blk, sizeof(Blk) * cap);
    if (!nb) goto out;
    hm_blk = nb, hm_cap = cap;
  }
  p = map_aligned(len);
  if (!p && hm_cached) {  /* no address space or memory: give the cache back and try once more */
    shrink(0);
    p = map_aligned(len);
  }
  if (p) hm_blk[hm_n++] = (Blk){p, len, 1, 0};
out:
  pthread_mutex_unlock(&hm_lock);
  return p;
}

void ember_host_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&hm_lock);
  int i = 0;
  while (i < hm_n && hm_blk[i].p != p) i++;
  EM_ASSERT(i < hm_n && hm_blk[i].live);  /* only blocks from ember_host_alloc come back */
  hm_blk[i].live = 0;
  hm_blk[i].freed_at = ++hm_clock;
  hm_cached += hm_blk[i].len;
  shrink(hm_limit);
  pthread_mutex_unlock(&hm_lock);
}

size_t ember_host_cached(void) {
  pthread_mutex_lock(&hm_lock);
  size_t n = hm_cached;
  pthread_mutex_unlock(&hm_lock);
  return n;
}

void ember_host_set_limit(size_t bytes) {
  pthread_mutex_lock(&hm_lock);
  hm_limit = bytes;
  shrink(hm_limit);
  pthread_mutex_unlock(&hm_lock);
}
