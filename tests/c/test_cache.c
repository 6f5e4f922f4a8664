/* test_cache.c - the disk cache: SHA-256, the directory's and the entries'
   checks, damaged entries rebuilt without the caller noticing, several
   processes storing the same entry at once, builds without the cache (and a
   warning) where it cannot be used, entries that load but lack the kernels
   evicted, things planted at an entry's name replaced, the default
   folder ($XDG_CACHE_HOME, ~/.cache, a private one in $TMPDIR), and every
   I/O call of the cache failed in turn (em_fail_io_after). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ember_int.h"
#include "t.h"

static char scratch[64];   /* this run's directory, removed at the end */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  int r = remove(p);
  if (r) perror(p);
  return r;
}
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A new, empty directory name under scratch (not created). */
static const char *fresh(const char *name) {
  static char buf[8][256];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, 256, "%s/%s", scratch, name);
  return b;
}

static BuildOpts opts(const char *dir) {
  BuildOpts o = {0};
  o.cc = getenv("EMBER_CC") ? getenv("EMBER_CC") : "cc";
  o.cache_dir = dir;
  return o;
}

/* The one entry of a cache directory: its .so path into buf; the number of
   files there (every name, dot files included). */
static int entry_of(const char *dir, char *buf, size_t n) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int count = 0;
  buf[0] = 0;
  if (!d) return -1;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    count++;
    size_t l = strlen(e->d_name);
    if (l > 3 && !strcmp(e->d_name + l - 3, ".so")) snprintf(buf, n, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  return count;
}

static void sidecar_of(const char *so, char *buf, size_t n) {
  snprintf(buf, n, "%.*s.sha256", (int)(strlen(so) - 3), so);
}

/* Build src through the cache at dir and call f(x); -1000 on failure. */
static int build_call(const char *dir, const char *src, int x, int *hit, double *ms, char *err) {
  BuildOpts o = opts(dir);
  EmDl *d = em_build(src, strlen(src), &o, hit, ms, err, 1024);
  if (!d) return -1000;
  int (*f)(int) = (int (*)(int))em_dl_sym(d, "f");
  int r = f ? f(x) : -1001;
  em_dl_close(d);
  return r;
}

static void test_sha256(void) {
  static const struct { const char *in; size_t rep; const char *hex; } v[] = {
    {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,   /* 448 bits */
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
     "lmnopqrsmnopqrstnopqrstu", 1,                                        /* 896 bits */
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    /* around the padding's edges: 55, 63 and 64 bytes */
    {"a", 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
    {"a", 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
    {"a", 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
    {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    size_t l = strlen(v[i].in), n = l * v[i].rep;
    char *buf = malloc(n + 1), hex[65];
    for (size_t r = 0; r < v[i].rep; r++) memcpy(buf + r * l, v[i].in, l);
    em_sha256_hex(buf, n, hex);
    CHECK_MSG(strcmp(hex, v[i].hex) == 0, "vector %zu: %s", i, hex);
    free(buf);
  }
}

static void test_dir(void) {
  char err[1024];
  struct stat st;

  /* created, with its missing parents, private */
  const char *d = fresh("made/a/b");
  CHECK(cache_open_dir(d, err, sizeof err) == 0);
  CHECK(stat(d, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  CHECK(stat(fresh("made/a"), &st) == 0 && (st.st_mode & 0777) == 0700);
  CHECK(cache_open_dir(d, err, sizeof err) == 0);       /* and fine the second time */

  /* an existing one others may write to */
  const char *loose = fresh("loose");
  mkdir(loose, 0700);
  chmod(loose, 0777);
  CHECK(cache_open_dir(loose, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "writable by group or others") && strstr(err, "0777"), "%s", err);
  chmod(loose, 0720);
  CHECK(cache_open_dir(loose, err, sizeof err) != 0);
  /* em_build builds without it, nothing read from or written there, and
     its warning says why */
  int hit = -1;
  char warn[1024];
  BuildOpts lo = opts(loose);
  lo.warn = warn, lo.warnlen = sizeof warn;
  EmDl *dl = em_build("int f(int x) { return x; }", 26, &lo, &hit, NULL, err, sizeof err);
  CHECK_MSG(dl != NULL, "%s", err);
  em_dl_close(dl);
  CHECK_MSG(strstr(warn, "writable by group or others") && strstr(warn, "without the disk cache"), "%s", warn);
  CHECK(hit == 0);
  char none[512];
  CHECK(entry_of(loose, none, sizeof none) == 0);

  /* a symbolic link, with and without a trailing slash */
  const char *target = fresh("target"), *link = fresh("link");
  mkdir(target, 0700);
  CHECK(symlink(target, link) == 0);
  CHECK(cache_open_dir(link, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "symbolic link"), "%s", err);
  char slash[300];
  snprintf(slash, sizeof slash, "%s/", link);
  CHECK(cache_open_dir(slash, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "symbolic link"), "%s", err);

  /* not a directory; not ours (when we can make it so) */
  const char *file = fresh("file");
  close(open(file, O_CREAT | O_WRONLY, 0600));
  CHECK(cache_open_dir(file, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "not a directory"), "%s", err);
  if (geteuid() == 0) {
    const char *theirs = fresh("theirs");
    mkdir(theirs, 0700);
    CHECK(chown(theirs, 65534, 65534) == 0);
    CHECK(cache_open_dir(theirs, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "belongs to uid 65534"), "%s", err);
  }
  CHECK(cache_open_dir("", err, sizeof err) != 0);
}

/* One entry, damaged in each way we can think of: the check refuses it,
   the next build replaces it (a miss, transparently), and the new entry
   checks out and is then hit. */
static void test_entries(void) {
  const char *dir = fresh("entries");
  const char *src = "int f(int x) { return 3 * x + 1; }\n";
  char err[1024], so[512], side[512];
  int hit = -1;
  double ms = -1;
  struct stat st;

  CHECK(build_call(dir, src, 2, &hit, &ms, err) == 7);
  CHECK(hit == 0 && ms > 0);
  CHECK(entry_of(dir, so, sizeof so) == 2);   /* <key>.so, <key>.sha256, nothing left over */
  sidecar_of(so, side, sizeof side);
  CHECK(cache_check_entry(so, err, sizeof err) == 0);
  CHECK(lstat(so, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) == 0);
  CHECK(lstat(side, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
  CHECK(build_call(dir, src, 2, &hit, &ms, err) == 7);
  CHECK(hit == 1 && ms == 0);

  /* two loaded at once (a hit and a hit) are both usable */
  BuildOpts o = opts(dir);
  EmDl *a = em_build(src, strlen(src), &o, &hit, NULL, err, sizeof err);
  EmDl *b = em_build(src, strlen(src), &o, &hit, NULL, err, sizeof err);
  CHECK(a && b);
  if (a && b) {
    int (*fa)(int) = (int (*)(int))em_dl_sym(a, "f");
    int (*fb)(int) = (int (*)(int))em_dl_sym(b, "f");
    CHECK(fa && fb && fa(1) == 4 && fb(5) == 16);
    CHECK(em_dl_sym(a, "no_such_symbol") == NULL);
  }
  em_dl_close(a);
  em_dl_close(b);
  em_dl_close(NULL);

#define REBUILT(what) do { \
    CHECK_MSG(build_call(dir, src, 2, &hit, &ms, err) == 7 && hit == 0, "%s: %s", what, err); \
    CHECK_MSG(cache_check_entry(so, err, sizeof err) == 0, "%s: %s", what, err); \
    CHECK_MSG(entry_of(dir, so, sizeof so) == 2, "%s", what); \
    CHECK(build_call(dir, src, 2, &hit, &ms, err) == 7 && hit == 1); \
  } while (0)

  /* a flipped byte */
  int fd = open(so, O_RDWR);
  unsigned char c;
  off_t at = 4096;
  CHECK(pread(fd, &c, 1, at) == 1);
  c ^= 0xff;
  CHECK(pwrite(fd, &c, 1, at) == 1);
  close(fd);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "does not match its recorded SHA-256"), "%s", err);
  REBUILT("flipped byte");

  /* writable by others: the object, then the record */
  chmod(so, 0666);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "writable by group or others"), "%s", err);
  REBUILT("object mode 0666");
  chmod(side, 0620);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  REBUILT("record mode 0620");

  /* the record missing, malformed, or of other bytes */
  unlink(side);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "missing"), "%s", err);
  REBUILT("record missing");
  fd = open(side, O_WRONLY | O_TRUNC);
  CHECK(write(fd, "hello\n", 6) == 6);
  close(fd);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "does not hold a SHA-256"), "%s", err);
  REBUILT("record malformed");
  fd = open(side, O_WRONLY | O_TRUNC);
  CHECK(write(fd, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", 65) == 65);
  close(fd);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  REBUILT("record of other bytes");

  /* the object missing (the record left behind) */
  unlink(so);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  CHECK(build_call(dir, src, 2, &hit, &ms, err) == 7 && hit == 0);
  CHECK(cache_check_entry(so, err, sizeof err) == 0);

  /* the object a symbolic link to good bytes: still refused */
  char copy[600];
  snprintf(copy, sizeof copy, "%s/elsewhere.so", scratch);
  CHECK(rename(so, copy) == 0);
  CHECK(symlink(copy, so) == 0);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  CHECK_MSG(strstr(err, "symbolic link"), "%s", err);
  REBUILT("object a symlink");
  CHECK(lstat(so, &st) == 0 && S_ISREG(st.st_mode));

  /* a FIFO in its place must not hang us */
  unlink(so);
  CHECK(mkfifo(so, 0600) == 0);
  CHECK(cache_check_entry(so, err, sizeof err) != 0);
  REBUILT("object a FIFO");

  if (geteuid() == 0) {       /* someone else's entry */
    CHECK(chown(so, 65534, 65534) == 0);
    CHECK(cache_check_entry(so, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "owned by uid 65534"), "%s", err);
    REBUILT("object not ours");
  }

  /* a failed allocation while reading a good entry is a miss, not damage */
  for (long n = 1; n <= 12; n++) {
    em_fail_alloc_after(n);
    int r = build_call(dir, src, 2, &hit, &ms, err);
    em_fail_alloc_after(0);
    CHECK_MSG(r == 7 || (r == -1000 && err[0]), "failing allocation %ld: %d %s", n, r, err);
  }
  CHECK(cache_check_entry(so, err, sizeof err) == 0);
  CHECK(entry_of(dir, so, sizeof so) == 2);
#undef REBUILT
}

/* cache_store_entry alone: the files it makes, and no leftovers. */
static void test_store(void) {
  const char *dir = fresh("store");
  char err[1024], tmp[512], so[512], side[512], key[65];
  struct stat st;
  CHECK(cache_open_dir(dir, err, sizeof err) == 0);
  em_sha256_hex("some key", 8, key);
  snprintf(tmp, sizeof tmp, "%s/new.tmp", dir);
  int fd = open(tmp, O_CREAT | O_WRONLY, 0666);
  CHECK(write(fd, "not really an object", 20) == 20);
  close(fd);
  chmod(tmp, 0666);                             /* as a loose umask would leave it */
  CHECK(cache_store_entry(dir, key, tmp, err, sizeof err) == 0);
  cache_entry_path(dir, key, so, sizeof so);
  sidecar_of(so, side, sizeof side);
  CHECK(cache_check_entry(so, err, sizeof err) == 0);
  CHECK(stat(so, &st) == 0 && (st.st_mode & 077) == 0);
  CHECK(stat(side, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK(access(tmp, F_OK) != 0);
  char buf[512];
  CHECK(entry_of(dir, buf, sizeof buf) == 2);
  CHECK(cache_store_entry(dir, key, tmp, err, sizeof err) != 0);   /* nothing to store */
  CHECK(entry_of(dir, buf, sizeof buf) == 2);
}

/* Writers replacing one entry over and over, readers checking it all the
   while: a reader never sees one writer's object with another's record. */
static void test_store_race(void) {
  const char *dir = fresh("race");
  char err[1024], key[65], so[512];
  CHECK(cache_open_dir(dir, err, sizeof err) == 0);
  em_sha256_hex("race", 4, key);
  cache_entry_path(dir, key, so, sizeof so);
  pid_t pids[6];
  for (int i = 0; i < 6; i++) {
    pids[i] = fork();
    if (pids[i] != 0) continue;
    int bad = 0;
    for (int round = 0; round < 300; round++) {
      if (i < 3) {                              /* a writer */
        char tmp[512], data[64];
        snprintf(tmp, sizeof tmp, "%s/tmp.%d", dir, i);
        int n = snprintf(data, sizeof data, "writer %d round %d", i, round);
        int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0600);
        bad |= fd < 0 || write(fd, data, (size_t)n) != n;
        close(fd);
        bad |= cache_store_entry(dir, key, tmp, err, sizeof err) != 0;
      } else if (access(so, F_OK) == 0) {      /* a reader, once there is an entry */
        bad |= cache_check_entry(so, err, sizeof err) != 0;
      }
      if (bad) {
        fprintf(stderr, "child %d round %d: %s\n", i, round, err);
        break;
      }
    }
    _exit(bad);
  }
  for (int i = 0; i < 6; i++) {
    int status = -1;
    waitpid(pids[i], &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d", i);
  }
  CHECK(cache_check_entry(so, err, sizeof err) == 0);
  char buf[512];
  CHECK(entry_of(dir, buf, sizeof buf) == 2);
}

/* Four processes compile the same new graph into the same empty cache at
   the same moment: all succeed and leave one good entry. */
static void test_concurrent_builds(void) {
  for (int round = 0; round < 2; round++) {
    const char *dir = fresh(round ? "together1" : "together0");
    char src[128], err[1024], so[512];
    snprintf(src, sizeof src, "int f(int x) { return x * x + %d; }\n", round);
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pids[4];
    for (int i = 0; i < 4; i++) {
      pids[i] = fork();
      if (pids[i] != 0) continue;
      char c;
      int hit = -1;
      close(go[1]);
      while (read(go[0], &c, 1) < 0 && errno == EINTR) {}   /* EOF: everyone starts */
      int r = build_call(dir, src, 3, &hit, NULL, err);
      if (r != 9 + round) fprintf(stderr, "child %d: %d: %s\n", i, r, err);
      _exit(r != 9 + round);
    }
    close(go[0]);
    close(go[1]);
    for (int i = 0; i < 4; i++) {
      int status = -1;
      waitpid(pids[i], &status, 0);
      CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "round %d child %d", round, i);
    }
    CHECK(entry_of(dir, so, sizeof so) == 2);
    CHECK_MSG(cache_check_entry(so, err, sizeof err) == 0, "%s", err);
    int hit = -1;
    CHECK(build_call(dir, src, 3, &hit, NULL, err) == 9 + round && hit == 1);
  }
}

/* The cache folder cannot be made (its parent is a regular file: that
   stops root too, whom file modes do not): the build works, uncached, with
   a warning naming the folder. */
static void test_unwritable(void) {
  char parent[256], dir[300], err[1024], warn[1024];
  snprintf(parent, sizeof parent, "%s/a-file", scratch);
  close(open(parent, O_CREAT | O_WRONLY, 0600));
  snprintf(dir, sizeof dir, "%s/cache", parent);
  for (int round = 0; round < 2; round++) {
    BuildOpts o = opts(dir);
    o.warn = warn, o.warnlen = sizeof warn;
    int hit = -1;
    EmDl *d = em_build("int f(int x) { return x - 1; }", 30, &o, &hit, NULL, err, sizeof err);
    CHECK_MSG(d != NULL, "%s", err);
    int (*f)(int) = d ? (int (*)(int))em_dl_sym(d, "f") : NULL;
    CHECK(f && f(5) == 4);
    em_dl_close(d);
    CHECK(hit == 0);
    CHECK_MSG(strstr(warn, dir) && strstr(warn, "without the disk cache"), "%s", warn);
  }
  /* a usable cache: no warning */
  BuildOpts o = opts(fresh("fine"));
  o.warn = warn, o.warnlen = sizeof warn;
  strcpy(warn, "stale");
  EmDl *d = em_build("int f;", 6, &o, NULL, NULL, err, sizeof err);
  CHECK_MSG(d != NULL && warn[0] == 0, "%s / %s", err, warn);
  em_dl_close(d);
}

/* Build src (which defines ember_k0 .. ember_k<nk-1>) through the cache at
   dir; 1 if it worked, with *hit. */
static int build_kernels(const char *dir, const char *src, int nk, int *hit, char *err) {
  BuildOpts o = opts(dir);
  o.nkernels = nk;
  EmDl *d = em_build(src, strlen(src), &o, hit, NULL, err, 1024);
  int ok = d != NULL;
  for (int i = 0; ok && i < nk; i++) {
    char name[32];
    snprintf(name, sizeof name, "ember_k%d", i);
    ok = em_dl_sym(d, name) != NULL;
  }
  em_dl_close(d);
  return ok;
}

/* Replace the entry at so with these bytes, and a record that matches them. */
static void plant(const char *so, const void *data, size_t n) {
  char side[600], hex[65];
  sidecar_of(so, side, sizeof side);
  unlink(so);
  int fd = open(so, O_CREAT | O_WRONLY | O_TRUNC, 0700);
  CHECK(fd >= 0 && write(fd, data, n) == (ssize_t)n);
  close(fd);
  em_sha256_hex(data, n, hex);
  hex[64] = '\n';
  fd = open(side, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  CHECK(fd >= 0 && write(fd, hex, 65) == 65);
  close(fd);
}

/* An entry whose record matches but whose object is not the graph's (it
   lacks the kernels): loaded once, found wanting, evicted and rebuilt, and
   the rebuilt entry is hit.  A directory (with files in it) planted at an
   entry's object or record name is replaced by the entry. */
static void test_evict_and_replace(void) {
  const char *dir = fresh("evict"), *other = fresh("evict-other");
  const char *src = "int ember_k0(int x) { return x; }\nint ember_k1(int x) { return -x; }\n";
  char err[1024], so[512], oso[512], side[512];
  int hit = -1;
  CHECK_MSG(build_kernels(dir, src, 2, &hit, err) && hit == 0, "%s", err);
  CHECK(entry_of(dir, so, sizeof so) == 2);
  CHECK(build_kernels(other, "int ember_k0(int x) { return x; }\n", 1, &hit, err));
  CHECK(entry_of(other, oso, sizeof oso) == 2);
  int fd = open(oso, O_RDONLY);
  struct stat st;
  CHECK(fd >= 0 && fstat(fd, &st) == 0);
  void *bytes = malloc((size_t)st.st_size);
  CHECK(bytes && read(fd, bytes, (size_t)st.st_size) == st.st_size);
  close(fd);
  plant(so, bytes, (size_t)st.st_size);          /* checks out, lacks ember_k1 */
  CHECK(cache_check_entry(so, err, sizeof err) == 0);
  CHECK_MSG(build_kernels(dir, src, 2, &hit, err) && hit == 0, "%s", err);
  CHECK_MSG(build_kernels(dir, src, 2, &hit, err) && hit == 1, "the rebuilt entry is not hit: %s", err);
  CHECK(entry_of(dir, so, sizeof so) == 2);

  /* cache_evict_entry spares an entry that changed meanwhile */
  CHECK(cache_evict_entry(so, bytes, (size_t)st.st_size) != 0);
  CHECK(cache_check_entry(so, err, sizeof err) == 0);
  free(bytes);

  /* a directory in the object's place, then in the record's */
  sidecar_of(so, side, sizeof side);
  for (int which = 0; which < 2; which++) {
    const char *at = which ? side : so;
    char inner[600];
    CHECK(unlink(at) == 0 && mkdir(at, 0700) == 0);
    snprintf(inner, sizeof inner, "%s/sub", at);
    CHECK(mkdir(inner, 0700) == 0);
    snprintf(inner, sizeof inner, "%s/sub/file", at);
    close(open(inner, O_CREAT | O_WRONLY, 0600));
    CHECK_MSG(build_kernels(dir, src, 2, &hit, err) && hit == 0, "%s", err);
    CHECK(lstat(at, &st) == 0 && S_ISREG(st.st_mode));
    CHECK(cache_check_entry(so, err, sizeof err) == 0);
    CHECK(build_kernels(dir, src, 2, &hit, err) && hit == 1);
  }
  /* a directory at the name when the entry is stored (no reader saw it) */
  char tmp[600], key[65];
  em_sha256_hex("planted", 7, key);
  cache_entry_path(dir, key, so, sizeof so);
  CHECK(mkdir(so, 0700) == 0);
  CHECK_MSG(cache_store_bytes(dir, key, "bytes", 5, err, sizeof err) == 0, "%s", err);
  CHECK(lstat(so, &st) == 0 && S_ISREG(st.st_mode) && cache_check_entry(so, err, sizeof err) == 0);
  (void)tmp;
}

/* The default folder: the cache_dir option, $XDG_CACHE_HOME/ember (absolute
   only), ~/.cache/ember, else $TMPDIR/ember-cache-<uid>, made 0700 and not
   used (an uncached build, a warning) when it is not ours. */
static void test_default_dir(void) {
  char buf[4096], want[4096], err[1024], warn[1024];
  EmOptions o = {0};
  o.cache = 1, o.cache_dir = "";
  const char *keep[] = {"EMBER_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "TMPDIR"};
  char *saved[4];
  for (int i = 0; i < 4; i++) saved[i] = getenv(keep[i]) ? strdup(getenv(keep[i])) : NULL;
  unsetenv("EMBER_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  setenv("HOME", "/h", 1);
  setenv("TMPDIR", scratch, 1);
  CHECK(strcmp(em_cache_dir(&o, buf, sizeof buf), "/x/cache/ember") == 0);
  setenv("XDG_CACHE_HOME", "relative", 1);       /* the spec: ignored */
  CHECK(strcmp(em_cache_dir(&o, buf, sizeof buf), "/h/.cache/ember") == 0);
  unsetenv("XDG_CACHE_HOME");
  CHECK(strcmp(em_cache_dir(&o, buf, sizeof buf), "/h/.cache/ember") == 0);
  unsetenv("HOME");
  snprintf(want, sizeof want, "%s/ember-cache-%u", scratch, (unsigned)geteuid());
  CHECK_MSG(strcmp(em_cache_dir(&o, buf, sizeof buf), want) == 0, "%s", buf);
  setenv("EMBER_CACHE_DIR", "/e", 1);  /* read by the options (options.c), not here */
  CHECK_MSG(strcmp(em_cache_dir(&o, buf, sizeof buf), want) == 0, "%s", buf);
  o.cache_dir = "/opt";
  CHECK(strcmp(em_cache_dir(&o, buf, sizeof buf), "/opt") == 0);
  o.cache = 0;
  CHECK(em_cache_dir(&o, buf, sizeof buf) == NULL);

  /* the temp one: made private, used */
  struct stat st;
  char so[512];
  int hit = -1;
  CHECK(build_call(want, "int f(int x) { return x + 2; }", 1, &hit, NULL, err) == 3);
  CHECK(lstat(want, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700 && st.st_uid == geteuid());
  CHECK(entry_of(want, so, sizeof so) == 2);
  /* someone else made it first: not used */
  if (geteuid() == 0) {
    CHECK(chown(want, 65534, 65534) == 0);
    BuildOpts b = opts(want);
    b.warn = warn, b.warnlen = sizeof warn;
    EmDl *d = em_build("int f(int x) { return x + 2; }", 30, &b, &hit, NULL, err, sizeof err);
    CHECK_MSG(d != NULL && hit == 0, "%s", err);
    em_dl_close(d);
    CHECK_MSG(strstr(warn, "belongs to uid 65534"), "%s", warn);
    CHECK(chown(want, 0, 0) == 0);
  }
  for (int i = 0; i < 4; i++) {
    if (saved[i]) setenv(keep[i], saved[i], 1);
    else unsetenv(keep[i]);
    free(saved[i]);
  }
}

/* No file but whole entries in dir: no temporary left behind. */
static int only_entries(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int ok = 1;
  if (!d) return 1;  /* a failed mkdir: nothing there */
  while ((e = readdir(d)))
    if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) ok = 0;
  closedir(d);
  return ok;
}

/* Every I/O call of the cache failed in turn, N = 1, 2, ... until a build
   makes fewer calls than N: a build whose cache lookup or store fails
   still gives the kernels (the cache is skipped with a warning, or the
   entry rebuilt) or a clear error, never a crash or a leak (ASan), leaves
   no temporary file in the cache, and the next build without faults uses
   the cache normally.  Once on a miss (empty directory), once on a hit. */
static void test_io_faults(void) {
  const char *src = "int f(int x) { return x * 5 + 1; }\n";
  char err[1024], so[512];
  int hit;
  double ms;
  for (int warm = 0; warm < 2; warm++) {
    long n;
    int done = 0;
    for (n = 1; n <= 200 && !done; n++) {
      char name[64];
      snprintf(name, sizeof name, "io-%s-%ld", warm ? "hit" : "miss", n);
      const char *dir = fresh(name);
      if (warm) CHECK(build_call(dir, src, 2, &hit, &ms, err) == 11 && !hit);
      BuildOpts o = opts(dir);
      char warn[512] = "";
      o.warn = warn, o.warnlen = sizeof warn;
      em_fail_io_after(n);
      EmDl *d = em_build(src, strlen(src), &o, &hit, &ms, err, sizeof err);
      done = em_io_armed();  /* the build made fewer than n calls */
      em_fail_io_after(0);
      if (d) {
        int (*f)(int) = (int (*)(int))em_dl_sym(d, "f");
        CHECK_MSG(f && f(2) == 11, "I/O fault %ld (%s): wrong kernels", n, name);
        em_dl_close(d);
      } else {
        CHECK_MSG(err[0], "I/O fault %ld (%s): no error message", n, name);
      }
      CHECK_MSG(only_entries(dir), "I/O fault %ld (%s): a temporary file left in the cache", n, name);
      /* the cache works again once the disk does: a hit, or a miss that stores the entry */
      CHECK_MSG(build_call(dir, src, 2, &hit, &ms, err) == 11, "after I/O fault %ld (%s): %s", n, name, err);
      CHECK_MSG(build_call(dir, src, 2, &hit, &ms, err) == 11 && hit, "after I/O fault %ld (%s): no hit", n, name);
      CHECK(entry_of(dir, so, sizeof so) == 2 && cache_check_entry(so, err, sizeof err) == 0);
    }
    CHECK_MSG(done, "the I/O fault sweep (%s) did not reach the end of a build", warm ? "hit" : "miss");
    CHECK_MSG(n > 4, "the I/O fault sweep (%s) found only %ld calls", warm ? "hit" : "miss", n - 2);
  }
}

int main(void) {
  snprintf(scratch, sizeof scratch, "/tmp/ember-test-cache-XXXXXX");
  if (!mkdtemp(scratch)) {
    perror("mkdtemp");
    return 1;
  }
  test_sha256();
  test_dir();
  test_entries();
  test_store();
  test_store_race();
  test_concurrent_builds();
  test_unwritable();
  test_evict_and_replace();
  test_default_dir();
  test_io_faults();
  rm_rf(scratch);
  return T_DONE("test_cache");
}
