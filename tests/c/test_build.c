/* test_build.c - running the compiler and loading what it makes, without
   the disk cache: flags reach the compiler, failures come back as clear
   messages, nothing is left on disk, and objects loaded one after another
   (or together) each keep their own code.  Fake compilers (shell scripts)
   that hang are stopped at the time limit or by the interrupt check, with
   their children; command words are split as a shell splits them, so paths
   with spaces work; objects load without memfds and without /proc too. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <ftw.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ember_int.h"
#include "t.h"

static char scratch[64];   /* this run's TMPDIR, removed at the end */
static char bin[64];       /* this run's fake compilers and libraries, removed at the end */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  return remove(p);
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static const char *default_cc(void) { return getenv("EMBER_CC") ? getenv("EMBER_CC") : "cc"; }

static EmDl *build(const char *cc, const char *cflags, const char *ldflags, const char *src,
                   int *hit, double *ms, char *err) {
  BuildOpts o = {.cc = cc, .cflags = cflags, .ldflags = ldflags};
  return em_build(src, strlen(src), &o, hit, ms, err, 2048);
}

static int call(EmDl *d, int x) {
  int (*f)(int) = (int (*)(int))em_dl_sym(d, "f");
  return f ? f(x) : -1001;
}

static void test_plain(void) {
  char err[2048];
  int hit = -1;
  double ms = -1;
  EmDl *d = build(default_cc(), NULL, NULL, "int f(int x) { return x + 40; }\n", &hit, &ms, err);
  CHECK_MSG(d != NULL, "%s", err);
  CHECK(hit == 0 && ms > 0);
  if (d) CHECK(call(d, 2) == 42);
  em_dl_close(d);
  CHECK(count_files(scratch) == 0);   /* the private build directory is gone */

  /* OpenMP is on, and libm linked */
  const char *omp =
    "#include <math.h>\n"
    "#include <omp.h>\n"
    "int f(int x) { int s = 0;\n"
    "#pragma omp parallel for reduction(+:s)\n"
    "  for (int i = 0; i < 100; i++) s += (int)sqrt((double)(i * 0 + x * x));\n"
    "  return s; }\n";
  d = build(default_cc(), NULL, NULL, omp, NULL, NULL, err);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 3) == 300);
  em_dl_close(d);
  CHECK(count_files(scratch) == 0);
}

/* The cc string's own words, cflags and ldflags all reach the compiler. */
static void test_flags(void) {
  char err[2048];
  const char *src = "int f(int x) { return A * 100 + B * 10 + x; }\n";
  char cc[256];
  snprintf(cc, sizeof cc, "%s  -DA=1", default_cc());   /* two spaces: empty words are skipped */
  EmDl *d = build(cc, "-DB=2 -UNOTHING", "-L/tmp -lm", src, NULL, NULL, err);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 3) == 123);
  em_dl_close(d);
  /* flags that leave more files next to the source: all cleaned up */
  d = build(default_cc(), "-DA=4 -DB=5 -save-temps=obj", NULL, src, NULL, NULL, err);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 6) == 456);
  em_dl_close(d);
  CHECK(count_files(scratch) == 0);
}

static void test_errors(void) {
  char err[2048];
  int hit = -1;
  double ms = -1;

  /* no such compiler */
  EmDl *d = build("no-such-cc-xyz", NULL, NULL, "int f(int x) { return x; }", &hit, &ms, err);
  CHECK(d == NULL && hit == 0 && ms == 0);
  CHECK_MSG(strstr(err, "`no-such-cc-xyz` not found") && strstr(err, "EMBER_CC"), "%s", err);
  CHECK(count_files(scratch) == 0);
  /* the same through the cache, where the compiler is asked its version first */
  char cache[256];
  snprintf(cache, sizeof cache, "%s/cache", scratch);
  BuildOpts o = {.cc = "no-such-cc-xyz", .cache_dir = cache};
  d = em_build("int f;", 6, &o, &hit, &ms, err, sizeof err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "`no-such-cc-xyz` not found"), "%s", err);
  CHECK(count_files(cache) == 0);
  rmdir(cache);

  /* a syntax error: the compiler's words, and where */
  d = build(default_cc(), NULL, NULL, "int f(int x) {\n  return x +;\n}\n", &hit, &ms, err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "the C compiler") && strstr(err, "failed (exit status 1) on the generated kernels:"),
            "%s", err);
  CHECK_MSG(strstr(err, "error") && strstr(err, "expected expression") && strstr(err, "kernels.c:2"),
            "%s", err);
  CHECK(ms > 0);
  CHECK(count_files(scratch) == 0);

  /* many errors: the message keeps the first lines only */
  Str many = {0};
  for (int i = 0; i < 100; i++) str_printf(&many, "int g%d(void) { return ; ; }\nx y z;\n", i);
  d = build(default_cc(), NULL, NULL, many.s, NULL, NULL, err);
  CHECK(d == NULL);
  int lines = 0;
  for (const char *p = err; (p = strchr(p, '\n')); p++) lines++;
  CHECK_MSG(lines >= 10 && lines <= 21 && strstr(err, "\n  ..."), "%d lines: %s", lines, err);
  str_free(&many);

  /* a link error */
  d = build(default_cc(), NULL, "-lno-such-lib-xyz", "int f(int x) { return x; }", NULL, NULL, err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "failed (exit status") && strstr(err, "no-such-lib-xyz"), "%s", err);

  /* an object that does not load (an undefined symbol, found at dlopen) */
  d = build(default_cc(), NULL, NULL,
            "extern int ember_test_undefined(int);\n"
            "int f(int x) { return ember_test_undefined(x); }\n", NULL, NULL, err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "cannot load the compiled kernels") && strstr(err, "ember_test_undefined"),
            "%s", err);
  CHECK(count_files(scratch) == 0);

  /* a compiler that is not one: it runs, fails, and says nothing */
  d = build("false", NULL, NULL, "int f;", NULL, NULL, err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "`false` failed (exit status 1)") && strstr(err, "printed nothing"), "%s", err);
  CHECK(count_files(scratch) == 0);

  /* err may be NULL */
  CHECK(build("no-such-cc-xyz", NULL, NULL, "int f;", NULL, NULL, NULL) == NULL);
}

/* Objects with the same symbols, loaded together and one after another
   (the descriptor numbers they are loaded through get reused). */
static void test_many(void) {
  char err[2048], src[128];
  EmDl *d[4] = {0};
  for (int i = 0; i < 3; i++) {
    snprintf(src, sizeof src, "int f(int x) { return x + %d; }\n", i * 10);
    d[i] = build(default_cc(), NULL, NULL, src, NULL, NULL, err);
    CHECK_MSG(d[i] != NULL, "%s", err);
  }
  for (int i = 0; i < 3; i++)
    if (d[i]) CHECK(call(d[i], 1) == 1 + i * 10);
  em_dl_close(d[1]);
  em_dl_close(d[0]);
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, "int f(int x) { return x + %d; }\n", 100 + i);
    d[i] = build(default_cc(), NULL, NULL, src, NULL, NULL, err);
    CHECK_MSG(d[i] != NULL, "%s", err);
    if (d[i]) CHECK(call(d[i], 1) == 101 + i);
  }
  if (d[2]) CHECK(call(d[2], 1) == 21);
  for (int i = 0; i < 3; i++) em_dl_close(d[i]);

  /* An object that stays loaded after em_dl_close (here: someone holds
     another reference) keeps its name, /proc/self/fd/N, in glibc's list;
     the next object, whose memfd may well get number N, must still be its
     own code and not that one. */
  d[0] = build(default_cc(), NULL, NULL, "int f(int x) { return x + 1000; }\n", NULL, NULL, err);
  CHECK_MSG(d[0] != NULL, "%s", err);
  if (!d[0]) return;
  Dl_info info;
  void *held = NULL;
  CHECK(dladdr(em_dl_sym(d[0], "f"), &info) && strncmp(info.dli_fname, "/proc/self/fd/", 14) == 0);
  held = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  CHECK(held != NULL);
  em_dl_close(d[0]);
  for (int i = 0; i < 3; i++) {
    snprintf(src, sizeof src, "int f(int x) { return x + %d; }\n", 2000 + i);
    d[i] = build(default_cc(), NULL, NULL, src, NULL, NULL, err);
    CHECK_MSG(d[i] != NULL, "%s", err);
    if (d[i]) CHECK_MSG(call(d[i], 1) == 2001 + i, "got %d", call(d[i], 1));
  }
  for (int i = 0; i < 3; i++) em_dl_close(d[i]);
  if (held) dlclose(held);
}

/* Write an executable shell script at path. */
static void script(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
  chmod(path, 0700);
}

/* The pid written into file, or -1. */
static pid_t pid_in(const char *file) {
  FILE *f = fopen(file, "r");
  long p = -1;
  if (f) {
    if (fscanf(f, "%ld", &p) != 1) p = -1;
    fclose(f);
  }
  return (pid_t)p;
}

/* Process pid has ended (gone, or a zombie waiting for init to reap it). */
static int ended(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  for (int tries = 0; tries < 100; tries++) {   /* SIGKILL is delivered at once, but not synchronously */
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')');
    if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z') return 1;
    usleep(10000);
  }
  return 0;
}

static int stop_calls;
static double stop_after;          /* em_now_ms() time after which the check says stop */
static int stop_check(void) {
  stop_calls++;
  return em_now_ms() >= stop_after;
}

/* A compiler that never finishes (a shell that waits on a child, so the
   child must be killed with it), one whose --version probe never finishes,
   and both stopped by the interrupt check: each stopped within its limit,
   with its children, nothing left on disk, a message naming the step and
   the option. */
static void test_timeouts(void) {
  char hang[256], probe[256], pidfile[256], text[1024], err[2048];
  snprintf(hang, sizeof hang, "%s/hang-cc", bin);
  snprintf(probe, sizeof probe, "%s/probe-hang-cc", bin);
  snprintf(pidfile, sizeof pidfile, "%s/sleep.pid", bin);
  snprintf(text, sizeof text, "#!/bin/sh\nsleep 60 &\necho $! > '%s'\nwait\n", pidfile);
  script(hang, text);
  snprintf(text, sizeof text, "#!/bin/sh\nif [ \"$1\" = --version ]; then sleep 60 & echo $! > '%s'; wait; fi\n"
           "exec %s \"$@\"\n", pidfile, default_cc());
  script(probe, text);

  /* the compile itself hangs */
  unlink(pidfile);
  BuildOpts o = {.cc = hang, .timeout_s = 1};
  double t0 = em_now_ms();
  EmDl *d = em_build("int f;", 6, &o, NULL, NULL, err, sizeof err);
  double took = em_now_ms() - t0;
  CHECK(d == NULL);
  CHECK_MSG(took >= 900 && took < 5000, "took %.0f ms", took);
  CHECK_MSG(strstr(err, "did not finish compiling the generated kernels within 1 s") &&
            strstr(err, "compile_timeout option (EMBER_COMPILE_TIMEOUT)") && strstr(err, hang), "%s", err);
  pid_t child = pid_in(pidfile);
  CHECK(child > 0);
  if (child > 0) CHECK_MSG(ended(child), "the compiler's child %ld still runs", (long)child);
  CHECK(count_files(scratch) == 0);

  /* only its --version probe hangs (asked when the cache is used) */
  char cache[256];
  snprintf(cache, sizeof cache, "%s/probe-cache", bin);
  unlink(pidfile);
  BuildOpts p = {.cc = probe, .timeout_s = 1, .cache_dir = cache};
  t0 = em_now_ms();
  d = em_build("int f;", 6, &p, NULL, NULL, err, sizeof err);
  took = em_now_ms() - t0;
  CHECK(d == NULL);
  CHECK_MSG(took >= 900 && took < 5000, "took %.0f ms", took);
  CHECK_MSG(strstr(err, "did not finish answering `--version` within 1 s") && strstr(err, "compile_timeout"),
            "%s", err);
  child = pid_in(pidfile);
  CHECK(child > 0);
  if (child > 0) CHECK_MSG(ended(child), "the probe's child %ld still runs", (long)child);
  CHECK(count_files(cache) == 0 && count_files(scratch) == 0);
  rmdir(cache);

  /* interrupted (as Ctrl-C does through the binding's check), well before the limit */
  unlink(pidfile);
  ember_set_interrupt_check(stop_check);
  stop_calls = 0;
  stop_after = em_now_ms() + 300;
  o.timeout_s = 30;
  t0 = em_now_ms();
  d = em_build("int f;", 6, &o, NULL, NULL, err, sizeof err);
  took = em_now_ms() - t0;
  ember_set_interrupt_check(NULL);
  CHECK(d == NULL && stop_calls >= 2);
  CHECK_MSG(took >= 250 && took < 3000, "took %.0f ms", took);
  CHECK_MSG(strstr(err, "interrupted while the C compiler") && strstr(err, "stopped"), "%s", err);
  child = pid_in(pidfile);
  if (child > 0) CHECK(ended(child));
  CHECK(count_files(scratch) == 0);

  /* a check that never says stop changes nothing */
  ember_set_interrupt_check(stop_check);
  stop_after = em_now_ms() + 1e9;
  d = build(default_cc(), NULL, NULL, "int f(int x) { return x * 7; }\n", NULL, NULL, err);
  ember_set_interrupt_check(NULL);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 6) == 42);
  em_dl_close(d);

  /* the pieces build_cuda.c uses for its NVRTC children: a group that
     hangs is read with a deadline and killed whole */
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t g = em_fork_group();
  if (g == 0) {
    close(fds[0]);
    if (fork() == 0) {          /* a grandchild in the same group */
      execlp("sleep", "sleep", "60", (char *)NULL);
      _exit(127);
    }
    execlp("sleep", "sleep", "60", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  CHECK(g > 0 && getpgid(g) == g);
  char buf[8];
  t0 = em_now_ms();
  CHECK(em_read_until(fds[0], buf, sizeof buf, em_now_ms() + 500) == EM_WAIT_TIMEOUT);
  took = em_now_ms() - t0;
  CHECK_MSG(took >= 450 && took < 2000, "took %.0f ms", took);
  em_kill_group(g);
  CHECK(kill(g, 0) < 0 && errno == ESRCH);   /* reaped */
  CHECK(kill(-g, 0) < 0 || ended(g));        /* its group (the grandchild) killed too */
  close(fds[0]);
}

/* Command words split as a shell splits them: a compiler path with a space,
   quoted three ways; a wrapper in front (as `ccache gcc`); a library folder
   with a space, linked and found at load through -rpath (torch installed
   under such a path); an unclosed quote is an error. */
static void test_shell_words(void) {
  char dir[256], cc[300], text[512], cmd[1024], err[2048], libdir[300];
  const char *src = "int f(int x) { return A * 100 + x; }\n";
  snprintf(dir, sizeof dir, "%s/my cc", bin);
  mkdir(dir, 0700);
  snprintf(cc, sizeof cc, "%s/cc", dir);
  snprintf(text, sizeof text, "#!/bin/sh\nexec %s \"$@\"\n", default_cc());
  script(cc, text);
  const char *forms[] = {"'%s/my cc/cc' -DA=1", "\"%s/my cc/cc\" -DA=1", "%s/my\\ cc/cc -DA=1",
                         "env '%s/my cc/cc' '-DA=1'"};
  for (int i = 0; i < 4; i++) {
    snprintf(cmd, sizeof cmd, forms[i], bin);
    EmDl *d = build(cmd, NULL, NULL, src, NULL, NULL, err);
    CHECK_MSG(d != NULL, "%s: %s", cmd, err);
    if (d) CHECK(call(d, 5) == 105);
    em_dl_close(d);
  }
  snprintf(cmd, sizeof cmd, "env %s", default_cc());   /* a wrapper, as ccache */
  EmDl *d = build(cmd, "-DA=2", NULL, src, NULL, NULL, err);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 5) == 205);
  em_dl_close(d);
  /* in double quotes \" and \\ are one character, in single quotes all is
     kept: both words here are -DX="a\\b", a 3-character C string */
  d = build(default_cc(), "\"-DS=\\\"a\\\\\\\\b\\\"\" '-DU=\"a\\\\b\"'", NULL,
            "int f(int x) { return (int)sizeof(S) * 10 + (int)sizeof(U) + x; }\n", NULL, NULL, err);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 0) == 44);
  em_dl_close(d);

  /* a library under a folder with a space, found through -rpath */
  snprintf(libdir, sizeof libdir, "%s/lib dir", bin);
  mkdir(libdir, 0700);
  snprintf(text, sizeof text, "%s/space.c", bin);
  FILE *f = fopen(text, "w");
  CHECK(f != NULL);
  if (f) {
    fputs("int space_fn(int x) { return x + 9000; }\n", f);
    fclose(f);
  }
  snprintf(cmd, sizeof cmd, "%s -shared -fPIC -o '%s/libspace.so' '%s'", default_cc(), libdir, text);
  CHECK(system(cmd) == 0);
  char ld[1024];
  snprintf(ld, sizeof ld, "-L'%s' '-Wl,-rpath,%s' -lspace", libdir, libdir);
  d = build(default_cc(), NULL, ld, "int space_fn(int);\nint f(int x) { return space_fn(x); }\n",
            NULL, NULL, err);
  CHECK_MSG(d != NULL, "%s", err);
  if (d) CHECK(call(d, 1) == 9001);
  em_dl_close(d);

  /* unclosed quotes and a final backslash */
  const char *bad[] = {"'cc", "cc \"-O2", "cc \\"};
  for (int i = 0; i < 3; i++) {
    d = build(bad[i], NULL, NULL, "int f;", NULL, NULL, err);
    CHECK(d == NULL);
    CHECK_MSG(strstr(err, "cannot split") && strstr(err, bad[i]), "%s", err);
  }
  d = build(default_cc(), "'-DA=1", NULL, "int f;", NULL, NULL, err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "cannot split `'-DA=1`"), "%s", err);
  CHECK(count_files(scratch) == 0);
}

/* Where there are no memfds the object is loaded through an unnamed file
   in $TMPDIR and /proc/self/fd; without /proc too, from a file in a private
   folder; nothing is left behind, and objects still keep their own code. */
static void test_loaders(void) {
  char err[2048], src[128];
  for (int mode = 1; mode <= 2; mode++) {
    em_build_test_loader(mode);
    EmDl *d[3] = {0};
    for (int i = 0; i < 3; i++) {
      snprintf(src, sizeof src, "int f(int x) { return x + %d; }\n", mode * 100 + i);
      d[i] = build(default_cc(), NULL, NULL, src, NULL, NULL, err);
      CHECK_MSG(d[i] != NULL, "mode %d: %s", mode, err);
    }
    for (int i = 0; i < 3; i++)
      if (d[i]) CHECK(call(d[i], 1) == 1 + mode * 100 + i);
    Dl_info info;
    if (d[0] && dladdr(em_dl_sym(d[0], "f"), &info)) {
      if (mode == 1) CHECK_MSG(strncmp(info.dli_fname, "/proc/self/fd/", 14) == 0, "%s", info.dli_fname);
      else CHECK_MSG(strncmp(info.dli_fname, scratch, strlen(scratch)) == 0 &&
                     strstr(info.dli_fname, "/ember-load-"), "%s", info.dli_fname);
    }
    if (mode == 2) CHECK(count_files(scratch) == 3);   /* a private folder for each loaded object */
    for (int i = 0; i < 3; i++) em_dl_close(d[i]);
    CHECK(count_files(scratch) == 0);
  }
  em_build_test_loader(0);
}

/* Failing each allocation in turn: a message or a working object, never a
   crash or a leak. */
/* A source of many kernels compiled in parts at once and linked: every
   kernel is in the object, the head's global is one variable whichever
   part a kernel came from, the parts are dealt by length, and a failure in
   any part, or a hang, is the message a one-piece build gives. */
#define PARTS_HEAD "#ifdef EM_LATER_PART\nextern int calls;\n#else\nint calls;\n#endif\n" \
                   "static int helper(int x) { return 3 * x; }\n"
static void parts_source(Str *s, int n, int broken) {
  str_puts(s, PARTS_HEAD);
  for (int i = 0; i < n; i++) {
    str_printf(s, "/* kernel %d */\nint ember_k%d(int x) {\n  calls++;\n", i, i);
    for (int j = 0; j < (i % 3) * 4; j++) str_printf(s, "  x += %d - %d;\n", j, j);  /* lengths differ */
    str_printf(s, "  return helper(x) + %d%s;\n}\n", i, i == broken ? " +" : "");
  }
}

static void parts_cuts(const Str *s, size_t *cuts, int *n) {
  *n = 0;
  for (const char *p = s->s; (p = strstr(p, "/* kernel ")); p++) cuts[(*n)++] = (size_t)(p - s->s);
}

static void test_parts(void) {
  char err[2048], name[32];
  size_t cuts[64];
  int ncuts, parts = -1;
  Str s = {0};
  parts_source(&s, 12, -1);
  parts_cuts(&s, cuts, &ncuts);
  CHECK(ncuts == 12);
  BuildOpts o = {.cc = default_cc(), .head = strlen(PARTS_HEAD), .cuts = cuts, .ncuts = ncuts, .threads = 2,
                 .parts = &parts};
  double ms = 0;
  EmDl *d = em_build(s.s, s.len, &o, NULL, &ms, err, sizeof err);
  CHECK_MSG(d != NULL, "%s", err);
  CHECK_MSG(parts == 2 && ms > 0, "%d parts", parts);
  for (int i = 0; d && i < 12; i++) {
    snprintf(name, sizeof name, "ember_k%d", i);
    int (*k)(int) = (int (*)(int))em_dl_sym(d, name);
    CHECK_MSG(k && k(2) == 6 + i, "%s", name);
  }
  int *calls = d ? em_dl_sym(d, "calls") : NULL;
  CHECK(calls && *calls == 12);
  em_dl_close(d);
  CHECK(count_files(scratch) == 0);

  /* as many parts as threads, at most one per MIN_KERNELS_PER_PART kernels */
  int want[][2] = {{1, 1}, {3, 3}, {16, 3}, {0, 1}};
  for (int t = 0; t < 4; t++) {
    o.threads = want[t][0], parts = -1;
    d = em_build(s.s, s.len, &o, NULL, NULL, err, sizeof err);
    CHECK_MSG(d != NULL, "%s", err);
    CHECK_MSG(parts == want[t][1], "%d threads: %d parts", want[t][0], parts);
    int (*k)(int) = d ? (int (*)(int))em_dl_sym(d, "ember_k11") : NULL;
    CHECK(k && k(1) == 14);
    em_dl_close(d);
  }

  /* an error in a later kernel: the compiler's words, nothing left behind */
  str_free(&s);
  parts_source(&s, 12, 9);
  o.threads = 2;
  d = em_build(s.s, s.len, &o, NULL, NULL, err, sizeof err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "failed (exit status 1) on the generated kernels:") && strstr(err, "expected expression"),
            "%s", err);
  CHECK(count_files(scratch) == 0);

  /* a link error comes after the parts compiled */
  str_free(&s);
  parts_source(&s, 12, -1);
  o.ldflags = "-lno-such-lib-xyz";
  d = em_build(s.s, s.len, &o, NULL, NULL, err, sizeof err);
  CHECK(d == NULL);
  CHECK_MSG(strstr(err, "failed (exit status") && strstr(err, "no-such-lib-xyz"), "%s", err);
  CHECK(count_files(scratch) == 0);
  o.ldflags = NULL;

  /* compilers that hang: every part stopped at the time limit */
  char hang[256], text[256];
  snprintf(hang, sizeof hang, "%s/hang-parts-cc", bin);
  snprintf(text, sizeof text, "#!/bin/sh\nsleep 60 & echo $! >> '%s/parts.pids'\nwait\n", bin);
  script(hang, text);
  o.cc = hang, o.timeout_s = 1;
  double t0 = em_now_ms();
  d = em_build(s.s, s.len, &o, NULL, NULL, err, sizeof err);
  double took = em_now_ms() - t0;
  CHECK(d == NULL);
  CHECK_MSG(took >= 900 && took < 5000, "took %.0f ms", took);
  CHECK_MSG(strstr(err, "did not finish compiling the generated kernels within 1 s"), "%s", err);
  char pids[256];
  snprintf(pids, sizeof pids, "%s/parts.pids", bin);
  FILE *f = fopen(pids, "r");
  long pid;
  int n = 0;
  while (f && fscanf(f, "%ld", &pid) == 1) {
    n++;
    CHECK_MSG(ended((pid_t)pid), "a part's child %ld still runs", pid);
  }
  if (f) fclose(f);
  CHECK_MSG(n == 2, "%d parts started", n);
  CHECK(count_files(scratch) == 0);
  str_free(&s);
}

static void test_alloc_failures(void) {
  char err[2048];
  int failed = 0;
  for (long n = 1; n <= 12; n++) {
    em_fail_alloc_after(n);
    EmDl *d = build(default_cc(), NULL, NULL, "int f(int x) { return -x; }\n", NULL, NULL, err);
    em_fail_alloc_after(0);
    if (d) CHECK(call(d, 5) == -5);
    else {
      CHECK_MSG(err[0] != 0, "allocation %ld", n);
      failed++;
    }
    em_dl_close(d);
  }
  CHECK(failed > 0);
  CHECK(count_files(scratch) == 0);
}

int main(void) {
  snprintf(scratch, sizeof scratch, "/tmp/ember-test-build-XXXXXX");
  if (!mkdtemp(scratch)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(bin, sizeof bin, "/tmp/ember-test-bin-XXXXXX");
  if (!mkdtemp(bin)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("TMPDIR", scratch, 1);   /* where em_build makes its private directories */
  test_plain();
  test_flags();
  test_errors();
  test_many();
  test_timeouts();
  test_shell_words();
  test_loaders();
  test_parts();
  test_alloc_failures();
  nftw(scratch, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  nftw(bin, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return T_DONE("test_build");
}
