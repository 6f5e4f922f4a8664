/* The driver's own cost of a launch on this host: cuLaunchKernel of an
   empty kernel (PTX loaded by the driver) timed on the host, no waiting, the
   queue drained every 64 launches.  ember's run (tools/gpu/launch_cost.py)
   is compared with this.

     cc -O2 -o /tmp/launch_raw tools/gpu/launch_raw.c -ldl && /tmp/launch_raw */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

typedef int (*fn_t)();
static const char *ptx =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry k(.param .u64 a, .param .u64 b, .param .u64 c)\n{\nret;\n}\n";

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

int main(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return printf("no libcuda: %s\n", dlerror()), 1;
  fn_t init = (fn_t)dlsym(h, "cuInit"), dget = (fn_t)dlsym(h, "cuDeviceGet"),
       retain = (fn_t)dlsym(h, "cuDevicePrimaryCtxRetain"), setc = (fn_t)dlsym(h, "cuCtxSetCurrent"),
       load = (fn_t)dlsym(h, "cuModuleLoadData"), getf = (fn_t)dlsym(h, "cuModuleGetFunction"),
       launch = (fn_t)dlsym(h, "cuLaunchKernel"), sync = (fn_t)dlsym(h, "cuCtxSynchronize"),
       screate = (fn_t)dlsym(h, "cuStreamCreate"), ssync = (fn_t)dlsym(h, "cuStreamSynchronize");
  int dev;
  void *ctx, *mod, *f, *stream;
  if (init(0) || dget(&dev, 0) || retain(&ctx, dev) || setc(ctx) || load(&mod, ptx) || getf(&f, mod, "k") ||
      screate(&stream, 0))
    return printf("setup failed\n"), 1;
  unsigned long long a = 0, b = 0, c = 0;
  void *args[3] = {&a, &b, &c};
  for (int s = 0; s < 2; s++) {
    void *st = s ? stream : NULL;
    double best = 1e30, sum = 0;
    int rounds = 200;
    for (int r = 0; r < rounds; r++) {
      ssync(st);
      double t = now();
      for (int i = 0; i < 64; i++) launch(f, 1, 1, 1, 32, 1, 1, 0, st, args, NULL);
      double us = (now() - t) / 64;
      sum += us;
      if (us < best) best = us;
    }
    sync();
    printf("cuLaunchKernel on the %s stream: %.2f us per launch (mean of %d x 64), best %.2f\n",
           s ? "created" : "legacy default", sum / rounds, rounds, best);
  }
  return 0;
}
