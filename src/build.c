/*
 * build.c - from generated C to loaded code.  em_build runs the C compiler
 * on the kernels' translation unit, loads the shared object it makes, and
 * goes through the disk cache (cache.c) so that a graph this or an earlier
 * process has compiled is not compiled again.
 *
 * The compiler runs as a child process (posix_spawnp, never a shell) in a
 * process group of its own, with its output captured for the error message.
 * Every run is bounded: past its time limit (BuildOpts.timeout_s), or when
 * the client's interrupt check says stop (ember_set_interrupt_check: the
 * CPython binding's runs Python's signal handlers, so Ctrl-C works), the
 * whole group is killed and the build fails with a message naming the step
 * and the option.  The compiler command and the flag strings are split into
 * words as a shell would split them (quotes and backslashes, no expansion),
 * so a path with a space can be quoted.  The same waiting and killing serve
 * the NVRTC child processes of build_cuda.c.
 *
 * The cache key is the SHA-256 of the source, the compiler's command line,
 * the compiler's identity (its `--version`) and the machine (-march=native
 * depends on the CPU).  The compiler always works in a private folder under
 * $TMPDIR, which is removed whatever happens; the object's bytes are then
 * stored in the cache.  The cache only ever saves time: a cache folder that
 * cannot be used or written means an uncached build and a warning
 * (BuildOpts.warn), and an entry that loads but lacks the kernels is evicted
 * and rebuilt.
 *
 * Objects are loaded from memory, never by a path after a check: the bytes
 * read (for a cache entry, the bytes whose hash was checked) are copied
 * into a sealed memfd, or where there are none an unnamed O_TMPFILE file,
 * and dlopen'ed as /proc/self/fd/N; without /proc, from a new file in a
 * private folder of ours.  That copy stays while the object is loaded:
 * glibc finds loaded objects by name and by inode, and neither may come to
 * name an older object.
 *
 * Errors are messages for the user, never exits.  Not here: the cache's
 * layout and checks (cache.c), the source itself (codegen_c.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ember_int.h"

extern char **environ;

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U   /* Linux 6.3: an executable memfd where vm.memfd_noexec is set */
#endif

#define ERR_LINES 20       /* compiler output lines quoted in an error */
#define MAX_OBJECT ((size_t)1 << 30)
#define CHECK_EVERY_MS 100 /* the interrupt check's period while a child runs */

struct EmDl {
  void *handle;            /* from dlopen */
  int fd;                  /* the memfd or unnamed file it was loaded from, or -1 */
  char *path;              /* or the file in a private folder it was loaded from (malloc), or NULL */
};

static const char *tmp_dir(void) {
  const char *t = getenv("TMPDIR");
  return t && t[0] == '/' ? t : "/tmp";
}

static double timeout_of(const BuildOpts *o) { return o->timeout_s > 0 ? o->timeout_s : EM_BUILD_TIMEOUT_S; }

/* ---------------------------------------------------------------- interrupts */

static ember_interrupt_fn interrupt_check;  /* set by the client, read by any thread */

void ember_set_interrupt_check(ember_interrupt_fn fn) {
  __atomic_store_n(&interrupt_check, fn, __ATOMIC_RELEASE);
}

int em_interrupted(void) {
  ember_interrupt_fn fn = __atomic_load_n(&interrupt_check, __ATOMIC_ACQUIRE);
  return fn && fn() != 0;
}

/* ---------------------------------------------------------------- command lines */

typedef struct Argv {      /* a command line being built */
  char **v;                /* NULL-terminated; the words point into owned[] or are borrowed */
  int n, cap;
  char *owned[4];          /* copies of the strings split into words */
  int nowned;
  int oom;
  const char *bad;         /* the string that could not be split (an open quote), or NULL */
} Argv;

static void argv_add(Argv *a, const char *w) {  /* w is borrowed: it must outlive a */
  if (a->oom) return;
  if (a->n + 2 > a->cap) {
    int cap = a->cap ? a->cap * 2 : 32;
    char **v = em_realloc(a->v, (size_t)cap * sizeof *v);
    if (!v) {
      a->oom = 1;
      return;
    }
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = (char *)w;
  a->v[a->n] = NULL;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

/* Add the words of s as a POSIX shell splits a command line, expanding
   nothing: blanks separate words; '...' keeps everything in it; "..."
   keeps everything but a backslash before $ ` " \ or a newline; a backslash
   outside quotes keeps the next character (and a backslash-newline goes).
   So `'/opt/my cc/gcc' -O2`, `/opt/my\ cc/gcc` and `ccache gcc` all work.
   NULL adds nothing; an unterminated quote or a final backslash sets a->bad. */
static void argv_split(Argv *a, const char *s) {
  if (!s || a->oom || a->bad) return;
  EM_ASSERT(a->nowned < 4);
  char *out = em_malloc(strlen(s) + 1);   /* the words, each NUL-ended: never longer than s */
  if (!out) {
    a->oom = 1;
    return;
  }
  a->owned[a->nowned++] = out;
  const char *p = s;
  for (;;) {
    while (is_blank(*p)) p++;
    if (!*p) return;
    char *w = out;
    while (*p && !is_blank(*p)) {
      if (*p == '\'') {
        const char *end = strchr(p + 1, '\'');
        if (!end) goto bad;
        memcpy(out, p + 1, (size_t)(end - p - 1));
        out += end - p - 1, p = end + 1;
      } else if (*p == '"') {
        for (p++; *p != '"'; p++) {
          if (!*p) goto bad;
          if (*p == '\\' && p[1] && strchr("$`\"\\\n", p[1])) {
            if (*++p == '\n') continue;
          }
          *out++ = *p;
        }
        p++;
      } else if (*p == '\\') {
        if (!p[1]) goto bad;
        if (p[1] != '\n') *out++ = p[1];
        p += 2;
      } else {
        *out++ = *p++;
      }
    }
    *out++ = 0;
    argv_add(a, w);
  }
bad:
  a->bad = s;
}

static void argv_free(Argv *a) {
  free(a->v);
  for (int i = 0; i < a->nowned; i++) free(a->owned[i]);
  memset(a, 0, sizeof *a);
}

/* The message for a command line that could not be built. */
static void err_argv(const Argv *a, const char *cc, char *err, size_t errlen) {
  if (a->bad)
    em_seterr(err, errlen, "ember: cannot split `%s` into words: a quote is not closed or a backslash ends it "
           "(the compiler command and its flags are split as a shell splits them)", a->bad);
  else
    em_seterr(err, errlen, "ember: cannot run the C compiler `%s`: out of memory or file descriptors", cc);
}

static const char *cc_of(const BuildOpts *o) { return o->cc && *o->cc ? o->cc : "cc"; }

/* The full compiler command for src -> out: the shared object itself, or
   (object_only) one part's object file, for link_argv. */
static void compile_argv(Argv *a, const BuildOpts *o, const char *src, const char *out, int object_only) {
  static const char *const flags[] = {
    "-std=gnu11", "-O3", "-march=native", "-fPIC", "-fopenmp",
    "-fno-math-errno", "-fno-trapping-math", "-w",
  };
  argv_split(a, cc_of(o));
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) argv_add(a, flags[i]);
  argv_add(a, object_only ? "-c" : "-shared");
  argv_split(a, o->cflags);
  argv_add(a, src);
  argv_add(a, "-o");
  argv_add(a, out);
  if (object_only) return;
  argv_split(a, o->ldflags);
  argv_add(a, "-lm");
}

/* The command linking the parts' objects objs[0..n-1] into out (the
   extra compile flags too: some, such as a sanitizer's, are link flags). */
static void link_argv(Argv *a, const BuildOpts *o, char (*objs)[PATH_MAX], int n, const char *out) {
  argv_split(a, cc_of(o));
  argv_add(a, "-fPIC");
  argv_add(a, "-shared");
  argv_add(a, "-fopenmp");
  argv_split(a, o->cflags);
  for (int i = 0; i < n; i++) argv_add(a, objs[i]);
  argv_add(a, "-o");
  argv_add(a, out);
  argv_split(a, o->ldflags);
  argv_add(a, "-lm");
}

/* ---------------------------------------------------------------- child processes */

/* A file for a child's output: a memfd, or an unnamed temporary file. */
static int capture_fd(void) {
  int fd = memfd_create("ember-cc-output", MFD_CLOEXEC);
  if (fd >= 0) return fd;
  FILE *f = tmpfile();
  if (!f) return -1;
  fd = fcntl(fileno(f), F_DUPFD_CLOEXEC, 0);
  fclose(f);
  return fd;
}

/* The start of what was captured in fd, NUL-terminated (the caller frees). */
static char *read_capture(int fd, size_t max) {
  char *s = em_malloc(max + 1);
  size_t n = 0;
  if (!s) return NULL;
  if (lseek(fd, 0, SEEK_SET) == 0) {
    while (n < max) {
      ssize_t r = read(fd, s + n, max - n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      n += (size_t)r;
    }
  }
  s[n] = 0;
  return s;
}

pid_t em_fork_group(void) {
  pid_t pid = fork();
  if (pid == 0) setpgid(0, 0);
  else if (pid > 0) setpgid(pid, pid);   /* both sides: whichever runs first, the group exists */
  return pid;
}

void em_kill_group(pid_t pid) {
  if (pid <= 0) return;
  /* pid is our unreaped child, so neither it nor its group id is reused yet */
  if (kill(-pid, SIGKILL) < 0) kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

/* Sleep until fd (if >= 0) is readable or ms pass; EINTR is a return too. */
static void nap(int fd, int ms) {
  struct pollfd p = {fd, POLLIN, 0};
  poll(fd >= 0 ? &p : NULL, fd >= 0, ms);
}

/* Between waits: EM_WAIT_TIMEOUT past the deadline, EM_WAIT_INTERRUPTED
   when the client says stop (asked every CHECK_EVERY_MS, and after a
   signal), else 0 with the milliseconds to wait next in *ms. */
static int wait_turn(double deadline, double *next_check, int signalled, int *ms) {
  double now = em_now_ms();
  if (now >= deadline) return EM_WAIT_TIMEOUT;
  if (signalled || now >= *next_check) {
    if (em_interrupted()) return EM_WAIT_INTERRUPTED;
    *next_check = em_now_ms() + CHECK_EVERY_MS;
  }
  double left = deadline - now, until = *next_check - now;
  double w = left < until ? left : until;
  *ms = w < 1 ? 1 : (int)w;
  return 0;
}

int em_read_until(int fd, void *buf, size_t n, double deadline) {
  char *p = buf;
  double next_check = em_now_ms() + CHECK_EVERY_MS;
  int signalled = 0;
  while (n) {
    int ms, w = wait_turn(deadline, &next_check, signalled, &ms);
    if (w) return w;
    struct pollfd q = {fd, POLLIN, 0};
    int r = poll(&q, 1, ms);
    signalled = r < 0 && errno == EINTR;
    if (r <= 0) continue;
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return EM_WAIT_FAILED;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* Wait for child pid until the deadline: 0 with its wait status, else
   EM_WAIT_TIMEOUT or EM_WAIT_INTERRUPTED with its group killed. */
static int wait_child(pid_t pid, int *status, double deadline) {
#ifdef SYS_pidfd_open
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);  /* readable when pid ends; -1 before Linux 5.3 */
#else
  int pfd = -1;
#endif
  double next_check = em_now_ms() + CHECK_EVERY_MS;
  int rc = 0, signalled = 0, sleep_ms = 1;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      rc = EM_WAIT_FAILED;
      break;
    }
    int ms;
    if ((rc = wait_turn(deadline, &next_check, signalled, &ms))) {
      em_kill_group(pid);
      break;
    }
    if (pfd < 0) {   /* polling: short naps first, most compiles are quick */
      ms = ms < sleep_ms ? ms : sleep_ms;
      sleep_ms = sleep_ms < 32 ? sleep_ms * 2 : 50;
    }
    errno = 0;
    nap(pfd, ms);
    signalled = errno == EINTR;
  }
  if (pfd >= 0) close(pfd);
  return rc;
}

/* Start argv in a new process group with stdin from /dev/null and stdout
   and stderr into out_fd: its pid, or -1 with errno set (ENOENT: no such
   program). */
static pid_t spawn_cmd(char *const *argv, int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, dflt;
  pid_t pid;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  posix_spawnattr_init(&at);
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);  /* Python ignores it; the compiler should not */
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &dflt);
  posix_spawnattr_setpgroup(&at, 0);   /* its own group: killed whole, and out of the terminal's */
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

/* Run argv (as spawn_cmd does) and wait for it at most timeout_s seconds.
   0 with its wait status in *status; EM_WAIT_TIMEOUT or EM_WAIT_INTERRUPTED
   (it was killed); else EM_WAIT_FAILED with errno set. */
static int run_cmd(char *const *argv, int out_fd, double timeout_s, int *status) {
  double deadline = em_now_ms() + timeout_s * 1e3;
  pid_t pid = spawn_cmd(argv, out_fd);
  return pid < 0 ? EM_WAIT_FAILED : wait_child(pid, status, deadline);
}

static void err_not_found(const char *cc, char *err, size_t errlen) {
  em_seterr(err, errlen, "ember: C compiler `%s` not found; install one or set EMBER_CC", cc);
}

/* The message for a run that did not finish: step says what it was doing. */
static void err_stopped(int rc, const char *cc, const char *step, double timeout_s, char *err, size_t errlen) {
  if (rc == EM_WAIT_TIMEOUT)
    em_seterr(err, errlen, "ember: the C compiler `%s` did not finish %s within %g s and was stopped; "
           EM_TIMEOUT_HINT, cc, step, timeout_s);
  else if (rc == EM_WAIT_INTERRUPTED)
    em_seterr(err, errlen, "ember: interrupted while the C compiler `%s` was %s; it was stopped", cc, step);
  else
    em_seterr(err, errlen, "ember: cannot run the C compiler `%s`: %s", cc, strerror(errno));
}

/* ---------------------------------------------------------------- the cache key */

/* The first line of `cc --version`, once per process for each cc string.
   0 on success; -1 (with a message) when the compiler cannot be run. */
static int cc_identity(const char *cc, double timeout_s, char *id, size_t idn, char *err, size_t errlen) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static struct { char *cc, *id; } known[8];  /* kept for the process's life */
  static int nknown;

  pthread_mutex_lock(&lock);
  for (int i = 0; i < nknown; i++) {
    if (strcmp(known[i].cc, cc) == 0) {
      snprintf(id, idn, "%s", known[i].id);
      pthread_mutex_unlock(&lock);
      return 0;
    }
  }
  pthread_mutex_unlock(&lock);

  Argv a = {0};
  argv_split(&a, cc);
  argv_add(&a, "--version");
  int fd = a.oom || a.bad || a.n < 2 ? -1 : capture_fd();
  if (fd < 0) {
    err_argv(&a, cc, err, errlen);
    argv_free(&a);
    return -1;
  }
  int status = 0;
  int rc = run_cmd(a.v, fd, timeout_s, &status);
  int e = errno;
  argv_free(&a);
  if (rc != 0) {
    close(fd);
    errno = e;
    if (rc == EM_WAIT_FAILED && e == ENOENT) err_not_found(cc, err, errlen);
    else err_stopped(rc, cc, "answering `--version`", timeout_s, err, errlen);
    return -1;
  }
  char *out = read_capture(fd, 1024);
  close(fd);
  if (!out) {
    em_seterr(err, errlen, "ember: out of memory");
    return -1;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    out[strcspn(out, "\r\n")] = 0;
    snprintf(id, idn, "%s", out);
  } else {
    /* it runs but has no --version: the key still names it */
    snprintf(id, idn, "`%s --version` failed (wait status %d)", cc, status);
  }
  free(out);

  pthread_mutex_lock(&lock);
  if (nknown < (int)(sizeof known / sizeof *known)) {
    char *c = strdup(cc), *i = strdup(id);
    if (c && i) {
      known[nknown].cc = c, known[nknown].id = i;
      nknown++;
    } else {
      free(c), free(i);
    }
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

/* The machine code may depend on: `uname -m`, and a hash of the CPU's
   first model-name and feature-flags lines (-march=native). */
static char machine_id[128];
static void machine_init(void) {
  static char lines[8192];   /* static: no allocation that could fail once and stick */
  static const char *const keys[] = {"model name", "flags", "Features", "CPU implementer", "CPU part"};
  struct utsname u;
  char hex[65], line[4096];
  int seen[5] = {0};
  size_t n = 0;
  if (uname(&u) < 0) snprintf(u.machine, sizeof u.machine, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  /* a longer line is read in pieces: each piece counts, the same every time */
  while (f && fgets(line, sizeof line, f)) {
    if (line[0] == '\n' && n) break;   /* the first processor is enough */
    for (int k = 0; k < 5; k++) {
      size_t l = strlen(line);
      if (!seen[k] && strncmp(line, keys[k], strlen(keys[k])) == 0 && n + l < sizeof lines) {
        seen[k] = 1;
        memcpy(lines + n, line, l);
        n += l;
      }
    }
  }
  if (f) fclose(f);
  em_sha256_hex(lines, n, hex);
  snprintf(machine_id, sizeof machine_id, "%s cpu %.16s", u.machine, hex);
}

/* key = SHA-256(source NUL command NUL compiler NUL machine), in hex; the
   command's words each with their length, so that no two commands meet. */
static int cache_key(const BuildOpts *o, const char *src, size_t len, char key[65],
                     char *err, size_t errlen) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  char id[512];
  Argv a = {0};
  compile_argv(&a, o, "kernels.c", "kernels.so", 0);  /* the real paths vary; these do not; nor do the
                                                         parts a build is split into */
  if (a.bad) {
    err_argv(&a, cc_of(o), err, errlen);
    argv_free(&a);
    return -1;
  }
  if (cc_identity(cc_of(o), timeout_of(o), id, sizeof id, err, errlen) < 0) {
    argv_free(&a);
    return -1;
  }
  pthread_once(&once, machine_init);

  Str tail = {0};
  for (int i = 0; i < a.n; i++) str_printf(&tail, "%zu:%s ", strlen(a.v[i]), a.v[i]);
  str_printf(&tail, "%c", 0);  /* (Str keeps the length across the NUL) */
  str_printf(&tail, "ember-cache-2 %s", id);
  str_printf(&tail, "%c", 0);
  str_printf(&tail, "%s", machine_id);
  int oom = a.oom || tail.oom;
  argv_free(&a);
  char *buf = oom ? NULL : em_malloc(len + 1 + tail.len);
  if (!buf) {
    str_free(&tail);
    em_seterr(err, errlen, "ember: out of memory");
    return -1;
  }
  memcpy(buf, src, len);
  buf[len] = 0;
  memcpy(buf + len + 1, tail.s, tail.len);
  em_sha256_hex(buf, len + 1 + tail.len, key);
  free(buf);
  str_free(&tail);
  return 0;
}

/* ---------------------------------------------------------------- loading */

static int loader_test_mode;   /* em_build_test_loader */

void em_build_test_loader(int mode) { loader_test_mode = mode; }

/* A sealed memfd holding data, or -1 where memfds cannot be had. */
static int object_memfd(const void *data, size_t n) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  int fd = memfd_create("ember-kernels", flags | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) fd = memfd_create("ember-kernels", flags);  /* before Linux 6.3 */
  if (fd < 0) return -1;
  if (em_write_all(fd, data, n) < 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  return fd;
}

/* An unnamed file (O_TMPFILE) in $TMPDIR holding data, or -1. */
static int object_tmpfile(const void *data, size_t n) {
  int fd = open(tmp_dir(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0500);
  if (fd < 0) return -1;
  if (em_write_all(fd, data, n) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Keep the libraries that loading h brought in (the OpenMP runtime above
   all) loaded for good: the runtime's idle worker threads outlive the
   kernels, and unloading it under them crashes the process. */
static void pin_dependencies(void *h) {
  struct link_map *m = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &m) != 0 || !m) return;
  for (struct link_map *l = m->l_next; l; l = l->l_next) {  /* loaded after h: its new needs */
    if (!l->l_name || !l->l_name[0]) continue;
    void *p = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (p) dlclose(p);
  }
}

/* Load through descriptor fd as /proc/self/fd/N into d: 1 loaded, 0 not
   (err set), -1 no /proc (fd closed either way unless loaded). */
static int load_fd(EmDl *d, int fd, char *err, size_t errlen) {
  char name[64];
  /* glibc would hand back an object already loaded under this name (one
     that could not be unloaded): move to another descriptor then */
  for (int tries = 0;; tries++) {
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    void *old = dlopen(name, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!old) break;
    dlclose(old);
    int fd2 = tries < 64 ? fcntl(fd, F_DUPFD_CLOEXEC, fd + 1) : -1;
    close(fd);
    if (fd2 < 0) {
      em_seterr(err, errlen, "ember: cannot load the compiled kernels: no free descriptor");
      return 0;
    }
    fd = fd2;
  }
  if (access(name, F_OK) != 0) {
    close(fd);
    return -1;
  }
  dlerror();
  d->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!d->handle) {
    const char *why = dlerror();
    em_seterr(err, errlen, "ember: cannot load the compiled kernels: %s", why ? why : "dlopen failed");
    close(fd);
    return 0;
  }
  d->fd = fd;
  return 1;
}

/* Load from a new file in a new private folder of ours (no /proc): nobody
   else can change it between writing and loading.  1 loaded, 0 not. */
static int load_private_file(EmDl *d, const void *data, size_t n, char *err, size_t errlen) {
  char dir[PATH_MAX - 16];
  int w = snprintf(dir, sizeof dir, "%s/ember-load-XXXXXX", tmp_dir());
  char *path = w > 0 && (size_t)w < sizeof dir && mkdtemp(dir) ? em_malloc(strlen(dir) + 16) : NULL;
  if (!path) {
    em_seterr(err, errlen, "ember: cannot load the compiled kernels: no memfd, no /proc and no private "
           "folder in %s", tmp_dir());
    return 0;
  }
  sprintf(path, "%s/kernels.so", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0500);
  int bad = fd < 0 || em_write_all(fd, data, n) < 0;
  if (fd >= 0 && close(fd) < 0) bad = 1;
  if (!bad) {
    dlerror();
    d->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (d->handle) {
      d->path = path;
      return 1;
    }
    const char *why = dlerror();
    em_seterr(err, errlen, "ember: cannot load the compiled kernels: %s", why ? why : "dlopen failed");
  } else {
    em_seterr(err, errlen, "ember: cannot write the compiled kernels to `%s`: %s", path, strerror(errno));
  }
  unlink(path);
  rmdir(dir);
  free(path);
  return 0;
}

/* Load the object whose bytes are data (a copy of them: see the top). */
static EmDl *load_object(const void *data, size_t n, char *err, size_t errlen) {
  EmDl *d = em_malloc(sizeof *d);
  if (!d) {
    em_seterr(err, errlen, "ember: out of memory");
    return NULL;
  }
  d->handle = NULL, d->fd = -1, d->path = NULL;
  int fd = loader_test_mode < 1 ? object_memfd(data, n) : -1;
  if (fd < 0 && loader_test_mode < 2) fd = object_tmpfile(data, n);
  int r = fd >= 0 ? load_fd(d, fd, err, errlen) : -1;
  if (r < 0) r = load_private_file(d, data, n, err, errlen);
  if (!r) {
    free(d);
    return NULL;
  }
  pin_dependencies(d->handle);
  return d;
}

EmDl *em_dl_load(const void *data, size_t n, char *err, size_t errlen) { return load_object(data, n, err, errlen); }

int em_dl_bytes(EmDl *d, void **data, size_t *n) {
  *data = NULL, *n = 0;
  int fd = d && d->fd >= 0 ? d->fd : d && d->path ? open(d->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
  struct stat st;
  char *buf = NULL;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= MAX_OBJECT)
    buf = em_malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (buf && got < (size_t)st.st_size) {  /* pread: the descriptor's offset is dlopen's business */
    ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (fd >= 0 && fd != d->fd) close(fd);
  if (!buf || got != (size_t)st.st_size) {
    free(buf);
    return -1;
  }
  *data = buf, *n = got;
  return 0;
}

void *em_dl_sym(EmDl *d, const char *name) { return d ? dlsym(d->handle, name) : NULL; }

void em_dl_close(EmDl *d) {
  if (!d) return;
  char name[64];
  const char *id = d->path;
  if (d->fd >= 0) snprintf(name, sizeof name, "/proc/self/fd/%d", d->fd), id = name;
  if (d->handle) dlclose(d->handle);
  /* still loaded (someone else holds it): keep its copy, whose name and
     inode must not come to mean another object */
  void *still = id ? dlopen(id, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  if (still) {
    dlclose(still);
  } else {
    if (d->fd >= 0) close(d->fd);
    if (d->path) {
      unlink(d->path);
      *strrchr(d->path, '/') = 0;
      rmdir(d->path);
    }
  }
  free(d->path);
  free(d);
}

/* The first of ember_k0 .. ember_k<n-1> that d lacks, into name; 0 if none. */
static int missing_kernel(EmDl *d, int n, const unsigned char *lib, char *name, size_t len) {
  for (int i = 0; i < n; i++) {
    if (lib && lib[i]) continue;  /* a library call: no code */
    snprintf(name, len, "ember_k%d", i);
    if (!em_dl_sym(d, name)) return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------- compiling */

/* The object at path, read once (the caller frees); 0 on success. */
static int read_object(const char *path, void **data, size_t *len) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  char *buf = NULL;
  size_t n = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= MAX_OBJECT)
    buf = em_malloc((size_t)st.st_size + 1);
  while (buf && n < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (!buf || n != (size_t)st.st_size) {
    free(buf);
    return -1;
  }
  *data = buf, *len = n;
  return 0;
}

/* The compiler's failure, with the first lines of what it said. */
static void err_compiler(const char *cc, int status, const char *out, char *err, size_t errlen) {
  Str m = {0};
  if (WIFEXITED(status))
    str_printf(&m, "ember: the C compiler `%s` failed (exit status %d) on the generated kernels:",
               cc, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    str_printf(&m, "ember: the C compiler `%s` was killed by signal %d on the generated kernels:",
               cc, WTERMSIG(status));
  else
    str_printf(&m, "ember: the C compiler `%s` failed on the generated kernels:", cc);
  const char *p = out ? out : "";
  int lines = 0;
  while (*p && lines < ERR_LINES) {
    size_t k = strcspn(p, "\n");
    str_printf(&m, "\n  %.*s", (int)k, p);
    p += k + (p[k] == '\n');
    lines++;
  }
  if (*p) str_puts(&m, "\n  ...");
  if (!lines) str_puts(&m, " (it printed nothing)");
  em_seterr(err, errlen, "%s", m.s ? m.s : "ember: the C compiler failed");
  str_free(&m);
}

/* ---- builds in parts ----
   A graph's kernels are functions that share nothing but the prelude, and
   the C compiler's time grows with them (65 kernels of a ViT's backward:
   4 s at -O3), so a library of many is compiled as several translation
   units at once, each the prelude and a run of the kernels, whose objects
   are then linked.  Each part costs a compiler start, a prelude (about one
   small kernel's time) and its share of the link. */
#define MIN_KERNELS_PER_PART 4
#define MAX_PARTS EM_MAX_THREADS
#define LATER_PART "#define EM_LATER_PART 1\n"  /* the parts after the first: prelude_c.h's globals */

/* Kernel c's text: src[cuts[c], cuts[c + 1]), the last one's to the end. */
static size_t kernel_len(const BuildOpts *o, size_t len, int c) {
  return (c + 1 < o->ncuts ? o->cuts[c + 1] : len) - o->cuts[c];
}

typedef struct Piece { size_t len; int c; } Piece;   /* a kernel's text, to deal out */

static int longest_first(const void *a, const void *b) {
  const Piece *x = a, *y = b;
  return x->len != y->len ? (x->len < y->len ? 1 : -1) : x->c - y->c;
}

/* The parts, at most threads of them, each with at least
   MIN_KERNELS_PER_PART kernels: part[c] for kernel c, dealt out longest
   first to the part with the least text so far (the compiler's time grows
   with a kernel's text, and one long kernel can take many short ones'
   time).  Returns how many parts: 1 for one piece, part unused. */
static int split_parts(const BuildOpts *o, size_t len, unsigned char *part) {
  int np = o->threads < MAX_PARTS ? o->threads : MAX_PARTS;
  if (np > o->ncuts / MIN_KERNELS_PER_PART) np = o->ncuts / MIN_KERNELS_PER_PART;
  if (np < 2 || o->head == 0 || o->head > o->cuts[0] || o->cuts[o->ncuts - 1] >= len) return 1;
  Piece *order = em_malloc(sizeof *order * (size_t)o->ncuts);
  if (!order) return 1;
  for (int c = 0; c < o->ncuts; c++) {
    EM_ASSERT(c == 0 || o->cuts[c] > o->cuts[c - 1]);
    order[c] = (Piece){kernel_len(o, len, c), c};
  }
  qsort(order, (size_t)o->ncuts, sizeof *order, longest_first);
  size_t load[MAX_PARTS] = {0};
  for (int i = 0; i < o->ncuts; i++) {
    int j = 0;
    for (int k = 1; k < np; k++)
      if (load[k] < load[j]) j = k;
    part[order[i].c] = (unsigned char)j;
    load[j] += order[i].len;
  }
  free(order);
  return np;
}

/* Write part j of np to path: the whole source when np is 1, else the
   prelude and part j's kernels (part 0 also what lies between the two). */
static int write_part(const char *path, const char *src, size_t len, const BuildOpts *o,
                      const unsigned char *part, int j, int np) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  int bad = fd < 0;
  if (np == 1) {
    bad = bad || em_write_all(fd, src, len) < 0;
  } else {
    bad = bad || (j > 0 && em_write_all(fd, LATER_PART, strlen(LATER_PART)) < 0);
    bad = bad || em_write_all(fd, src, j ? o->head : o->cuts[0]) < 0;
    for (int c = 0; c < o->ncuts && !bad; c++)
      if (part[c] == j) bad = em_write_all(fd, src + o->cuts[c], kernel_len(o, len, c)) < 0;
  }
  if (fd >= 0 && close(fd) < 0) bad = 1;
  return bad ? -1 : 0;
}

typedef struct Job {       /* a compiler process */
  Argv a;
  int out;                 /* its captured output, or -1 */
  pid_t pid;               /* -1: not started */
  int rc, status, e;       /* wait_child's answer (EM_WAIT_FAILED: not started), the wait status, errno */
} Job;

static void job_free(Job *j) {
  if (j->out >= 0) close(j->out);
  argv_free(&j->a);
}

/* Start job b (its command made) with its output captured, under verbose
   saying the command: 0, or -1 with the message (b->rc says whether it
   started: EM_WAIT_FAILED where the compiler could not be run). */
static int job_start(const BuildOpts *o, Job *b, char *err, size_t errlen) {
  b->out = b->a.oom || b->a.bad || b->a.n == 0 ? -1 : capture_fd();
  if (b->out < 0) {
    err_argv(&b->a, cc_of(o), err, errlen);
    return -1;
  }
  if (o->verbose) {
    fprintf(stderr, "ember: compiling:");
    for (int i = 0; i < b->a.n; i++) fprintf(stderr, " %s", b->a.v[i]);
    fprintf(stderr, "\n");
  }
  b->pid = spawn_cmd(b->a.v, b->out);
  if (b->pid < 0) b->rc = EM_WAIT_FAILED, b->e = errno;
  return 0;
}

/* The message for a job that did not succeed (what says what it did): -1,
   or 0 where it did. */
static int job_error(const BuildOpts *o, Job *j, const char *what, char *err, size_t errlen) {
  if (j->rc != 0) {
    errno = j->e;
    if (j->rc == EM_WAIT_FAILED && j->e == ENOENT) err_not_found(cc_of(o), err, errlen);
    else err_stopped(j->rc, cc_of(o), what, timeout_of(o), err, errlen);
    return -1;
  }
  if (!WIFEXITED(j->status) || WEXITSTATUS(j->status) != 0) {
    char *text = read_capture(j->out, 16384);
    err_compiler(cc_of(o), j->status, text, err, errlen);
    free(text);
    return -1;
  }
  return 0;
}

/* Compile src into dir/kernels.so (dir is ours and empty): in parts at
   once where it has many kernels, then linked. */
static int compile(const BuildOpts *o, const char *dir, const char *src, size_t len, double *ms,
                   char *err, size_t errlen) {
  EM_ASSERT(strlen(dir) + 16 < PATH_MAX);
  unsigned char *part = o->ncuts > 0 ? em_malloc((size_t)o->ncuts) : NULL;
  int np = part ? split_parts(o, len, part) : 1, rc = 0;
  char sopath[PATH_MAX], (*cpath)[PATH_MAX] = em_malloc(sizeof *cpath * (size_t)(2 * np));
  char (*opath)[PATH_MAX] = cpath ? cpath + np : NULL;
  Job job[MAX_PARTS + 1];
  if (!cpath) {
    free(part);
    em_seterr(err, errlen, "ember: out of memory");
    return -1;
  }
  snprintf(sopath, sizeof sopath, "%s/kernels.so", dir);
  for (int j = 0; j <= np; j++) job[j] = (Job){.out = -1, .pid = -1};
  double t0 = em_now_ms(), deadline = t0 + timeout_of(o) * 1e3;
  for (int j = 0; j < np && !rc; j++) {
    if (np == 1) snprintf(cpath[j], PATH_MAX, "%s/kernels.c", dir);
    else snprintf(cpath[j], PATH_MAX, "%s/part%d.c", dir, j), snprintf(opath[j], PATH_MAX, "%s/part%d.o", dir, j);
    if (write_part(cpath[j], src, len, o, part, j, np) < 0) {
      em_seterr(err, errlen, "ember: cannot write the kernels' source `%s`: %s", cpath[j], strerror(errno));
      rc = -1;
      break;
    }
    Job *b = &job[j];
    compile_argv(&b->a, o, cpath[j], np == 1 ? sopath : opath[j], np > 1);
    rc = job_start(o, b, err, errlen);
    if (!rc && b->pid < 0) rc = job_error(o, b, "compiling the generated kernels", err, errlen);
  }
  /* wait for every part (killing the rest once one is stopped), then the first failure is the message */
  int stopped = rc;
  for (int j = 0; j < np; j++) {
    Job *b = &job[j];
    if (b->pid < 0) continue;
    if (stopped) {
      em_kill_group(b->pid);
      continue;
    }
    b->rc = wait_child(b->pid, &b->status, deadline);
    b->e = errno;
    stopped = b->rc != 0;
  }
  for (int j = 0; j < np && !rc; j++)
    if (job[j].pid >= 0) rc = job_error(o, &job[j], "compiling the generated kernels", err, errlen);
  if (!rc && np > 1) {
    Job *b = &job[np];
    link_argv(&b->a, o, opath, np, sopath);
    rc = job_start(o, b, err, errlen);
    if (!rc && b->pid >= 0) {
      b->rc = wait_child(b->pid, &b->status, deadline);
      b->e = errno;
    }
    if (!rc) rc = job_error(o, b, "linking the generated kernels", err, errlen);
  }
  *ms = job[0].pid >= 0 ? em_now_ms() - t0 : 0;   /* the time the compilers ran */
  if (o->parts) *o->parts = np;
  for (int j = 0; j <= np; j++) job_free(&job[j]);
  free(cpath);
  free(part);
  if (!rc && access(sopath, F_OK) != 0) {
    em_seterr(err, errlen, "ember: the C compiler `%s` succeeded but wrote no shared object", cc_of(o));
    rc = -1;
  }
  return rc;
}

/* Remove a build directory (ours, private) with whatever the compiler left
   in it: kernels.c, kernels.so, and the files of flags like -save-temps.
   A killed compiler's last writes may land just after it is gone from
   waitpid's view: look again a few times. */
static void remove_build_dir(const char *dir) {
  for (int tries = 0; tries < 20; tries++) {
    DIR *d = opendir(dir);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
      closedir(d);
    }
    if (rmdir(dir) == 0 || errno != ENOTEMPTY) return;
    nap(-1, 10);
  }
}

static void setwarn(const BuildOpts *o, const char *what, const char *then) {
  if (o->warn && o->warnlen) snprintf(o->warn, o->warnlen, "%s; %s", what, then);
}

EmDl *em_build(const char *src, size_t len, const BuildOpts *o, int *cache_hit,
               double *build_ms, char *err, size_t errlen) {
  char key[65], entry[PATH_MAX], why[1024] = "", dir[PATH_MAX - 64], sopath[PATH_MAX];
  char localerr[2048];
  double ms = 0;
  if (!err || !errlen) err = localerr, errlen = sizeof localerr;
  err[0] = 0;
  if (cache_hit) *cache_hit = 0;
  if (build_ms) *build_ms = 0;
  EM_ASSERT(o && (src || !len));
  if (o->parts) *o->parts = 0;
  if (o->warn && o->warnlen) o->warn[0] = 0;

  const char *cdir = o->cache_dir;
  if (cdir && cache_open_dir(cdir, why, sizeof why) != 0) {
    setwarn(o, why, "the kernels are compiled without the disk cache");
    cdir = NULL;
  }
  if (cdir) {
    if (cache_key(o, src, len, key, err, errlen) != 0) return NULL;
    cache_entry_path(cdir, key, entry, sizeof entry);
    void *data = NULL;
    size_t n = 0;
    if (cache_read_entry(entry, &data, &n, why, sizeof why) == 0) {
      EmDl *d = load_object(data, n, why, sizeof why);
      char name[32];
      if (d && missing_kernel(d, o->nkernels, o->lib, name, sizeof name)) {
        em_dl_close(d);
        d = NULL;
        em_seterr(why, sizeof why, "ember: cache entry `%s` lacks the kernel %s", entry, name);
      }
      if (d) {
        free(data);
        if (cache_hit) *cache_hit = 1;
        if (o->verbose) fprintf(stderr, "ember: kernels from the cache: %s\n", entry);
        return d;
      }
      /* it checks out but does not load, or is not these kernels: away with it */
      cache_evict_entry(entry, data, n);
      free(data);
    }
    if (why[0] && o->verbose) fprintf(stderr, "%s; rebuilding it\n", why);
  }

  /* a private directory to build in, removed whatever happens */
  int w = snprintf(dir, sizeof dir, "%s/ember-XXXXXX", tmp_dir());
  if (w < 0 || (size_t)w >= sizeof dir) {
    em_seterr(err, errlen, "ember: the directory name `%s` is too long", tmp_dir());
    return NULL;
  }
  if (!mkdtemp(dir)) {
    em_seterr(err, errlen, "ember: cannot make a directory to build in (%s): %s", dir, strerror(errno));
    return NULL;
  }
  int rc = compile(o, dir, src, len, &ms, err, errlen);
  if (build_ms) *build_ms = ms;  /* failed or not */
  if (rc != 0) {
    remove_build_dir(dir);
    return NULL;
  }
  if (o->verbose) fprintf(stderr, "ember: compiled the kernels in %.0f ms\n", ms);

  snprintf(sopath, sizeof sopath, "%s/kernels.so", dir);
  void *data = NULL;
  size_t n = 0;
  rc = read_object(sopath, &data, &n);
  remove_build_dir(dir);
  if (rc != 0) {
    em_seterr(err, errlen, "ember: cannot read the compiled kernels `%s`", sopath);
    return NULL;
  }
  EmDl *d = load_object(data, n, err, errlen);
  char name[32];
  /* stored once it loaded and has its kernels (the caller reports one missing) */
  if (d && cdir && !missing_kernel(d, o->nkernels, o->lib, name, sizeof name)) {
    if (cache_store_bytes(cdir, key, data, n, why, sizeof why) != 0) {
      setwarn(o, why, "the kernels are not cached");
      if (o->verbose) fprintf(stderr, "%s (the kernels are not cached)\n", why);
    }
  }
  free(data);
  return d;
}

const char *em_cache_dir(const EmOptions *o, char *buf, size_t n) {
  if (!o->cache) return NULL;
  if (o->cache_dir && *o->cache_dir) return o->cache_dir;
  /* XDG's base directories: only an absolute path counts */
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0] == '/') snprintf(buf, n, "%s/ember", xdg);
  else if (home && home[0] == '/') snprintf(buf, n, "%s/.cache/ember", home);
  else snprintf(buf, n, "%s/ember-cache-%u", tmp_dir(), (unsigned)geteuid());  /* made 0700, and
                                             checked to be ours by cache_open_dir */
  return buf;
}
