/*
 * cache.c - the disk cache of compiled kernels, and SHA-256.
 *
 * An entry is two files in one directory: <key>.so, a shared object, and
 * <key>.sha256, the hex SHA-256 of its bytes.  The key is the hex SHA-256
 * of everything the object depends on; build.c computes it, compiles on a
 * miss and loads what it gets.
 *
 * The objects are loaded into the user's process, so the cache is a
 * security boundary.  The directory and every file of an entry must be
 * ours and not writable by group or others, no final path component is
 * followed through a symbolic link, and an entry is handed out only as a
 * buffer whose hash was checked (cache_read_entry): build.c loads exactly
 * those bytes, never the file again.  A damaged or foreign entry is removed
 * and reported as a miss, so the caller simply rebuilds it.
 *
 * Concurrency: an entry is published by two renames, which are atomic one
 * by one but not together.  Writers therefore hold an exclusive flock on
 * the directory while they rename, and readers a shared one while they
 * read both files: nobody sees the object of one writer with the hash of
 * another, two processes storing the same key at once leave a whole entry,
 * and a crashed process leaves no lock behind.  Compiling happens outside
 * the lock.  Where flock is not supported we go on without it: at worst an
 * entry reads as damaged and is rebuilt.
 *
 * Anything else found under an entry's name (a directory, a FIFO, a link)
 * is removed and replaced.  An entry is evicted only when it is damaged, or
 * when build.c found that it loads but is not the kernels it should be.
 *
 * Not here: an object's key, the compiler, loading (build.c); a cubin's key
 * is here (cache_cubin_key), shared by the CUDA build and the program's
 * lazily built variants.  Nothing is evicted for size or age.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "ember_int.h"

#define MAX_OBJECT ((size_t)1 << 30)   /* larger "objects" are refused, not read */

/* A call that reads or changes the disk, failed with EIO where the fault
   test says so (em_fail_io_after).  Cleanup calls (unlink, rmdir, close of a
   file only read) are not wrapped: their failure changes nothing we read. */
#define IO(call) (em_io_fault() ? -1 : (call))

/* ---------------------------------------------------------------- SHA-256
   FIPS 180-4, section 6.2, for byte strings. */

typedef struct Sha256 {
  uint32_t h[8];           /* the hash value H(i) */
  uint64_t nbytes;         /* message length so far */
  unsigned char block[64]; /* the partial block */
  size_t nblock;           /* bytes in it */
} Sha256;

/* K: the first 32 bits of the fractional parts of the cube roots of the
   first 64 primes (section 4.2.2). */
static const uint32_t sha_k[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* H(0): the first 32 bits of the fractional parts of the square roots of
   the first 8 primes (section 5.3.3). */
static const uint32_t sha_h0[8] = {
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* One 512-bit block (section 6.2.2). */
static void sha_block(Sha256 *s, const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
           (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);   /* sigma0 */
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);    /* sigma1 */
    w[t] = s1 + w[t - 7] + s0 + w[t - 16];
  }
  uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
  uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);                     /* Sigma1 */
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + S1 + ch + sha_k[t] + w[t];
    uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);                     /* Sigma0 */
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    h = g, g = f, f = e, e = d + t1;
    d = c, c = b, b = a, a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha_init(Sha256 *s) {
  memcpy(s->h, sha_h0, sizeof s->h);
  s->nbytes = 0, s->nblock = 0;
}

static void sha_update(Sha256 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->nbytes += n;
  if (s->nblock) {
    size_t take = 64 - s->nblock < n ? 64 - s->nblock : n;
    memcpy(s->block + s->nblock, p, take);
    s->nblock += take, p += take, n -= take;
    if (s->nblock < 64) return;
    sha_block(s, s->block);
    s->nblock = 0;
  }
  for (; n >= 64; p += 64, n -= 64) sha_block(s, p);
  memcpy(s->block, p, n);
  s->nblock = n;
}

/* Padding (section 5.1.1): a 1 bit, zeros to 448 mod 512, the bit length. */
static void sha_final(Sha256 *s, unsigned char out[32]) {
  uint64_t bits = s->nbytes * 8;
  unsigned char pad[72] = {0x80};
  size_t npad = (s->nblock < 56 ? 56 : 120) - s->nblock;
  for (int i = 0; i < 8; i++) pad[npad + i] = (unsigned char)(bits >> (56 - 8 * i));
  sha_update(s, pad, npad + 8);
  EM_ASSERT(s->nblock == 0);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (unsigned char)(s->h[i] >> 24), out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
    out[4 * i + 2] = (unsigned char)(s->h[i] >> 8), out[4 * i + 3] = (unsigned char)s->h[i];
  }
}

void em_sha256_hex(const void *data, size_t n, char hex[65]) {
  static const char digits[] = "0123456789abcdef";
  Sha256 s;
  unsigned char d[32];
  sha_init(&s);
  sha_update(&s, data, n);
  sha_final(&s, d);
  for (int i = 0; i < 32; i++) hex[2 * i] = digits[d[i] >> 4], hex[2 * i + 1] = digits[d[i] & 15];
  hex[64] = 0;
}

void cache_cubin_key(const char *ident, const char *src, size_t n, char key[65]) {
  static const char digits[] = "0123456789abcdef";
  char head[1024];
  int hn = snprintf(head, sizeof head, "ember-cubin-1 %s %s\n", ember_version(), ident);
  if (hn < 0) hn = 0;
  if ((size_t)hn >= sizeof head) hn = sizeof head - 1;
  Sha256 s;
  unsigned char d[32];
  sha_init(&s);
  sha_update(&s, head, (size_t)hn);
  sha_update(&s, src, n);
  sha_final(&s, d);
  for (int i = 0; i < 32; i++) key[2 * i] = digits[d[i] >> 4], key[2 * i + 1] = digits[d[i] & 15];
  key[64] = 0;
  memcpy(key, "cu", 2);
}

/* ---------------------------------------------------------------- the directory */

int cache_open_dir(const char *dir, char *err, size_t errlen) {
  char path[PATH_MAX];
  size_t n = dir ? strlen(dir) : 0;
  if (n == 0) {
    em_seterr(err, errlen, "ember: the cache directory name is empty");
    return -1;
  }
  if (n >= sizeof path) {
    em_seterr(err, errlen, "ember: the cache directory name is too long");
    return -1;
  }
  memcpy(path, dir, n + 1);
  while (n > 1 && path[n - 1] == '/') path[--n] = 0;  /* "x/" would follow a link named x */

  struct stat st;
  if (IO(lstat(path, &st)) < 0 && errno == ENOENT) {
    /* mkdir -p, each new directory private; errors on parents show up below */
    for (char *p = path + 1; *p; p++) {
      if (*p != '/') continue;
      *p = 0;
      IO(mkdir(path, 0700));
      *p = '/';
    }
    if (IO(mkdir(path, 0700)) == 0) {
      chmod(path, 0700);              /* the umask may have taken our own bits */
    } else if (errno != EEXIST) {
      em_seterr(err, errlen, "ember: cannot create the cache directory `%s`: %s", path, strerror(errno));
      return -1;
    }
  }
  if (IO(lstat(path, &st)) < 0) {
    em_seterr(err, errlen, "ember: cannot use the cache directory `%s`: %s", path, strerror(errno));
    return -1;
  }
  if (S_ISLNK(st.st_mode)) {
    em_seterr(err, errlen,
           "ember: the cache directory `%s` is a symbolic link; ember loads code from it and "
           "does not follow links there (name the link's target instead)", path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    em_seterr(err, errlen, "ember: the cache directory `%s` is not a directory", path);
    return -1;
  }
  if (st.st_uid != geteuid()) {
    em_seterr(err, errlen,
           "ember: the cache directory `%s` belongs to uid %u, not to you (uid %u); ember loads "
           "code from it, so it must be your own", path, (unsigned)st.st_uid, (unsigned)geteuid());
    return -1;
  }
  if (st.st_mode & 022) {
    em_seterr(err, errlen,
           "ember: the cache directory `%s` is writable by group or others (mode %04o); ember "
           "loads code from it, so only you may write there (chmod go-w %s)",
           path, (unsigned)(st.st_mode & 07777), path);
    return -1;
  }
  return 0;
}

void cache_entry_path(const char *dir, const char *key, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s.so", dir, key);
}

/* <key>.sha256 next to <key>.so; -1 if it does not fit. */
static int sidecar_path(const char *so, char *buf, size_t n) {
  size_t len = strlen(so);
  size_t stem = len >= 3 && strcmp(so + len - 3, ".so") == 0 ? len - 3 : len;
  int w = snprintf(buf, n, "%.*s.sha256", (int)stem, so);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* Lock the directory holding `path` (or `path` itself when is_dir).
   Returns the fd to pass to unlock, or -1 where locking is not possible. */
static int lock_dir(const char *path, int is_dir, int op) {
  char dir[PATH_MAX];
  if (is_dir) {
    snprintf(dir, sizeof dir, "%s", path);
  } else {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  }
  int fd = IO(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd < 0) return -1;
  while (IO(flock(fd, op)) < 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

static void unlock_dir(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f;
  if (flag == FTW_DP) rmdir(p);
  else unlink(p);
  return 0;
}

/* Remove whatever is at path in the cache directory: a file, a link, a
   FIFO, or a directory planted there with all it holds (not following
   links, not leaving the file system). */
static void remove_any(const char *path) {
  if (unlink(path) == 0 || (errno != EISDIR && errno != EPERM)) return;
  nftw(path, remove_one, 8, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* ---------------------------------------------------------------- checking an entry */

enum {
  ENTRY_OK,
  ENTRY_MISSING,           /* no object: a miss */
  ENTRY_BAD,               /* damaged or foreign: removed, then a miss */
  ENTRY_ERROR              /* could not be read (memory, I/O): a miss, the entry is kept */
};

/* Open one file of an entry for reading, refusing a link, anything but a
   regular file, a file of someone else's and one others may write. */
static int open_private(const char *path, int *fdp, char *err, size_t errlen) {
  /* O_NONBLOCK: a FIFO planted here must not hang us */
  int fd = IO(open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd < 0) {
    if (errno == ENOENT) {
      em_seterr(err, errlen, "ember: cache file `%s` is missing", path);
      return ENTRY_MISSING;
    }
    if (errno == ELOOP) em_seterr(err, errlen, "ember: cache file `%s` is a symbolic link", path);
    else em_seterr(err, errlen, "ember: cannot open cache file `%s`: %s", path, strerror(errno));
    return ENTRY_BAD;
  }
  struct stat st;
  const char *why = NULL;
  char buf[96];
  if (IO(fstat(fd, &st)) < 0) {
    why = strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_uid != geteuid()) {
    snprintf(buf, sizeof buf, "owned by uid %u, not by you", (unsigned)st.st_uid);
    why = buf;
  } else if (st.st_mode & 022) {
    snprintf(buf, sizeof buf, "writable by group or others (mode %04o)", (unsigned)(st.st_mode & 07777));
    why = buf;
  } else if ((size_t)st.st_size > MAX_OBJECT) {
    why = "too large";
  }
  if (why) {
    em_seterr(err, errlen, "ember: cache file `%s` is %s", path, why);
    close(fd);
    return ENTRY_BAD;
  }
  *fdp = fd;
  return ENTRY_OK;
}

/* Read fd to its end into a new buffer; 0 on success, -1 on an error
   (memory, I/O), -2 when there are more than max bytes. */
static int read_all(int fd, size_t max, unsigned char **out, size_t *outlen) {
  size_t cap = max < 65535 ? max + 1 : 65536, len = 0;
  unsigned char *buf = em_malloc(cap);
  if (!buf) return -1;
  int rc = -1;
  for (;;) {
    if (len > max) {
      rc = -2;
      break;
    }
    if (len == cap) {
      size_t ncap = cap > max / 2 ? max + 1 : cap * 2;
      unsigned char *nb = em_realloc(buf, ncap);
      if (!nb) break;
      buf = nb, cap = ncap;
    }
    ssize_t r = IO(read(fd, buf + len, cap - len));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (r == 0) {
      *out = buf, *outlen = len;
      return 0;
    }
    len += (size_t)r;
  }
  free(buf);
  return rc;
}

/* Check the entry whose object is at so_path and read it: on ENTRY_OK the
   object's bytes, whose hash matched, are in *data (the caller frees). */
static int verify_entry(const char *so_path, void **data, size_t *len, char *err, size_t errlen) {
  char side[PATH_MAX], hex[65];
  unsigned char *obj = NULL, *rec = NULL;
  size_t nobj = 0, nrec = 0;
  int fd, r;
  if (sidecar_path(so_path, side, sizeof side) < 0) {
    em_seterr(err, errlen, "ember: cache path `%s` is too long", so_path);
    return ENTRY_BAD;
  }
  if ((r = open_private(so_path, &fd, err, errlen)) != ENTRY_OK) return r;
  int rr = read_all(fd, MAX_OBJECT, &obj, &nobj);
  close(fd);
  if (rr < 0) {
    em_seterr(err, errlen, "ember: cannot read cache file `%s`: %s", so_path,
           rr == -2 ? "too large" : "out of memory or I/O error");
    return rr == -2 ? ENTRY_BAD : ENTRY_ERROR;
  }
  if ((r = open_private(side, &fd, err, errlen)) != ENTRY_OK) {
    free(obj);
    return ENTRY_BAD;  /* an object without its hash is not an entry */
  }
  rr = read_all(fd, 128, &rec, &nrec);
  close(fd);
  if (rr == -1) {
    em_seterr(err, errlen, "ember: cannot read cache file `%s`: out of memory or I/O error", side);
    free(obj);
    return ENTRY_ERROR;
  }
  /* the record: 64 lowercase hex digits and an optional newline */
  int wellformed = rr == 0 && (nrec == 64 || (nrec == 65 && rec[64] == '\n'));
  for (size_t i = 0; wellformed && i < 64; i++)
    wellformed = (rec[i] >= '0' && rec[i] <= '9') || (rec[i] >= 'a' && rec[i] <= 'f');
  if (!wellformed) {
    em_seterr(err, errlen, "ember: cache file `%s` does not hold a SHA-256", side);
    free(obj), free(rec);
    return ENTRY_BAD;
  }
  em_sha256_hex(obj, nobj, hex);
  if (memcmp(hex, rec, 64) != 0) {
    em_seterr(err, errlen, "ember: cache file `%s` does not match its recorded SHA-256 "
           "(corrupted or replaced)", so_path);
    free(obj), free(rec);
    return ENTRY_BAD;
  }
  free(rec);
  *data = obj, *len = nobj;
  return ENTRY_OK;
}

int cache_check_entry(const char *path, char *err, size_t errlen) {
  void *data = NULL;
  size_t len = 0;
  int lk = lock_dir(path, 0, LOCK_SH);
  int r = verify_entry(path, &data, &len, err, errlen);
  unlock_dir(lk);
  free(data);
  return r != ENTRY_OK;
}

/* The verified bytes of the entry at path: 0 with them in *data (the
   caller frees), or 1 for a miss.  A damaged or foreign entry is removed
   and counts as a miss; err then says what was wrong with it (as it does
   when the entry could not be read for want of memory). */
int cache_read_entry(const char *path, void **data, size_t *len, char *err, size_t errlen) {
  em_seterr(err, errlen, "%s", "");
  int lk = lock_dir(path, 0, LOCK_SH);
  int r = verify_entry(path, data, len, err, errlen);
  unlock_dir(lk);
  if (r == ENTRY_OK) return 0;
  if (r == ENTRY_MISSING) em_seterr(err, errlen, "%s", "");
  if (r != ENTRY_BAD) return 1;
  /* Look again under the exclusive lock: a writer may have replaced it
     meanwhile, and a good entry must not be removed. */
  lk = lock_dir(path, 0, LOCK_EX);
  r = verify_entry(path, data, len, err, errlen);
  if (r == ENTRY_OK) em_seterr(err, errlen, "%s", "");
  if (r == ENTRY_BAD) {
    char side[PATH_MAX];
    remove_any(path);
    if (sidecar_path(path, side, sizeof side) == 0) remove_any(side);
  } else if (r == ENTRY_MISSING) {
    em_seterr(err, errlen, "%s", "");
  }
  unlock_dir(lk);
  return r != ENTRY_OK;
}

int cache_evict_entry(const char *path, const void *data, size_t n) {
  void *now = NULL;
  size_t len = 0;
  char err[256], side[PATH_MAX];
  int lk = lock_dir(path, 0, LOCK_EX);
  int r = verify_entry(path, &now, &len, err, sizeof err);
  /* another process may have put a good entry there meanwhile: keep that */
  int gone = r == ENTRY_BAD || (r == ENTRY_OK && len == n && memcmp(now, data, n) == 0);
  if (gone) {
    remove_any(path);
    if (sidecar_path(path, side, sizeof side) == 0) remove_any(side);
  }
  unlock_dir(lk);
  free(now);
  return gone ? 0 : -1;
}

/* ---------------------------------------------------------------- storing an entry */

static uint32_t tmp_nonce(void) {
  static unsigned counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t mix[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec,
                     __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)};
  return (uint32_t)em_hash64(mix, sizeof mix, 0x656d626572);
}

int cache_store_entry(const char *dir, const char *key, const char *tmp_obj, char *err, size_t errlen) {
  char so[PATH_MAX], side[PATH_MAX], tmp_side[PATH_MAX], hex[65];
  int w = snprintf(so, sizeof so, "%s/%s.so", dir, key);
  /* the longest name used here is tmp_side's */
  if (w < 0 || (size_t)w + 40 >= sizeof so || sidecar_path(so, side, sizeof side) < 0) {
    em_seterr(err, errlen, "ember: cache path in `%s` is too long", dir);
    return -1;
  }

  /* hash the object and make it private */
  int fd = IO(open(tmp_obj, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd < 0) {
    em_seterr(err, errlen, "ember: cannot open the new object `%s`: %s", tmp_obj, strerror(errno));
    return -1;
  }
  struct stat st;
  unsigned char *obj = NULL;
  size_t nobj = 0;
  if (IO(fstat(fd, &st)) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      IO(fchmod(fd, 0700)) < 0 || read_all(fd, MAX_OBJECT, &obj, &nobj) < 0) {
    em_seterr(err, errlen, "ember: cannot read the new object `%s`", tmp_obj);
    close(fd);
    return -1;
  }
  close(fd);
  em_sha256_hex(obj, nobj, hex);
  free(obj);
  hex[64] = '\n';

  /* the record, under a name no other process uses */
  fd = -1;
  for (int tries = 0; fd < 0 && tries < 100; tries++) {
    snprintf(tmp_side, sizeof tmp_side, "%s/.%s.sha256.%ld.%08x", dir, key, (long)getpid(), tmp_nonce());
    fd = IO(open(tmp_side, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    em_seterr(err, errlen, "ember: cannot write in the cache directory `%s`: %s", dir, strerror(errno));
    return -1;
  }
  int bad = IO(fchmod(fd, 0600)) < 0 || IO(em_write_all(fd, hex, 65)) < 0;
  int closed = close(fd);
  if (IO(closed) < 0) bad = 1;
  if (bad) {
    em_seterr(err, errlen, "ember: cannot write `%s`: %s", tmp_side, strerror(errno));
    unlink(tmp_side);
    return -1;
  }

  /* publish: object first, then its record, with no reader in between */
  int lk = lock_dir(dir, 1, LOCK_EX);
  int rc = 0;
  struct stat old;
  /* something other than a file in the way (a directory cannot be renamed over) */
  if (IO(lstat(so, &old)) == 0 && !S_ISREG(old.st_mode)) remove_any(so);
  if (IO(lstat(side, &old)) == 0 && !S_ISREG(old.st_mode)) remove_any(side);
  if (IO(rename(tmp_obj, so)) < 0) {
    em_seterr(err, errlen, "ember: cannot store `%s`: %s", so, strerror(errno));
    unlink(tmp_side);
    rc = -1;
  } else if (IO(rename(tmp_side, side)) < 0) {
    em_seterr(err, errlen, "ember: cannot store `%s`: %s", side, strerror(errno));
    unlink(tmp_side);
    unlink(so);
    rc = -1;
  }
  unlock_dir(lk);
  return rc;
}

int cache_store_bytes(const char *dir, const char *key, const void *data, size_t n, char *err, size_t errlen) {
  char tmp[PATH_MAX];
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 100; tries++) {
    int w = snprintf(tmp, sizeof tmp, "%s/.%s.obj.%ld.%08x", dir, key, (long)getpid(), tmp_nonce());
    if (w < 0 || (size_t)w >= sizeof tmp) {
      em_seterr(err, errlen, "ember: cache path in `%s` is too long", dir);
      return -1;
    }
    fd = IO(open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    em_seterr(err, errlen, "ember: cannot write in the cache directory `%s`: %s", dir, strerror(errno));
    return -1;
  }
  int bad = IO(em_write_all(fd, data, n)) < 0;
  int closed = close(fd);
  if (IO(closed) < 0) bad = 1;
  if (bad) {
    em_seterr(err, errlen, "ember: cannot write `%s`: %s", tmp, strerror(errno));
    unlink(tmp);
    return -1;
  }
  int rc = cache_store_entry(dir, key, tmp, err, errlen);
  if (rc) unlink(tmp);
  return rc;
}
