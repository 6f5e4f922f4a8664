/*
 * cuda.c - the CUDA driver (libcuda.so.1) and NVRTC, both dlopen'ed, so that
 * ember builds with a C compiler alone and imports on a machine with no CUDA
 * at all (cuda_init then says libcuda was not found).
 *
 * The driver is loaded once per process (pthread_once); its functions are
 * resolved through cuGetProcAddress_v2 at the ABI of CUDA 12.0, the one this
 * file is written against, or by their versioned names (cuMemAlloc_v2, ...)
 * on older drivers.  NULL streams mean the legacy default stream.
 *
 * NVRTC is loaded at the first cuda_compile, from the folders handed to
 * cuda_set_search_path (the nvidia wheels torch installs), then
 * $CUDA_HOME/lib64, /usr/local/cuda/lib64 and the loader's path; a copy
 * already loaded in the process (torch's) is used first.  Compiling needs no
 * GPU.  Kernels are compiled to a cubin for the exact architecture (loads in
 * microseconds); only where NVRTC lacks the cubin API or the architecture is
 * newer than NVRTC knows do we hand PTX to the driver's JIT.
 *
 * Contexts: modules load into the calling thread's current context, which
 * is torch's (the device's primary context) once torch has touched CUDA on
 * that thread.  Where no context is current, the primary context of device 0
 * is retained and made current, as the runtime does for a fresh thread.
 *
 * Errors are messages naming the call and the driver's error name and text;
 * nothing here exits or aborts.  Not here: cuBLASLt (blas.c), the kernels'
 * source (codegen), when to launch what (run.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"

/* Shared with blas.c (declared there; to move into ember_int.h's cuda.c section). */

/* ---------------------------------------------------------------- driver ABI */
/* The few driver types and constants used here, written from the driver API
   documentation (values as in CUDA 12/13). */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

struct Memcpy2D {                     /* CUDA_MEMCPY2D: rows of WidthInBytes, each pitch apart */
  size_t srcXInBytes, srcY;
  int srcMemoryType;                  /* CUmemorytype */
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
};

enum {
  CU_SUCCESS = 0,
  CU_ERROR_INVALID_CONTEXT = 201,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEMHOSTALLOC_PORTABLE = 1, CU_MEMHOSTALLOC_DEVICEMAP = 2,
  CU_ATTR_CC_MAJOR = 75,              /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
  CU_ATTR_CC_MINOR = 76,
  CU_FUNC_MAX_DYNAMIC_SHARED = 8,     /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
  CU_PROC_LEGACY_STREAM = 1,          /* CU_GET_PROC_ADDRESS_LEGACY_STREAM */
  CU_ABI_VERSION = 12000,             /* the API version the signatures below follow */
  STATIC_SHMEM_LIMIT = 48 * 1024,     /* dynamic shared memory beyond this needs opting in */
};

static struct {                       /* the driver's functions, filled once by load_driver */
  void *lib;
  CUresult (*Init)(unsigned flags);
  CUresult (*DriverGetVersion)(int *v);
  CUresult (*GetErrorName)(CUresult r, const char **s);
  CUresult (*GetErrorString)(CUresult r, const char **s);
  CUresult (*DeviceGet)(CUdevice *d, int ordinal);
  CUresult (*DeviceGetAttribute)(int *v, int attr, CUdevice d);
  CUresult (*CtxGetCurrent)(CUcontext *c);
  CUresult (*CtxSetCurrent)(CUcontext c);
  CUresult (*CtxGetDevice)(CUdevice *d);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *c, CUdevice d);
  CUresult (*ModuleLoadData)(CUmodule *m, const void *image);
  CUresult (*ModuleUnload)(CUmodule m);
  CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
  CUresult (*FuncSetAttribute)(CUfunction f, int attr, int value);
  CUresult (*FuncLoad)(CUfunction f);                    /* optional: CUDA 12.4+ */
  CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shmem, CUstream s, void **args, void **extra);
  CUresult (*MemsetD8Async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
  CUresult (*ModuleGetGlobal)(CUdeviceptr *p, size_t *bytes, CUmodule m, const char *name);
  CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream s);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
  CUresult (*Memcpy2DAsync)(const struct Memcpy2D *c, CUstream s);
  CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr *d, void *p, unsigned flags);
  CUresult (*MemFreeHost)(void *p);
  CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void *src, size_t n);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*StreamIsCapturing)(CUstream s, int *status);
  CUresult (*ThreadExchangeStreamCaptureMode)(int *mode);  /* optional */
  CUresult (*EventCreate)(void **e, unsigned flags);       /* optional: blas.c's tuning times with them */
  CUresult (*EventRecord)(void *e, CUstream s);            /* optional */
  CUresult (*EventSynchronize)(void *e);                   /* optional */
  CUresult (*EventElapsedTime)(float *ms, void *start, void *end);  /* optional */
  CUresult (*EventDestroy)(void *e);                       /* optional */
  CUresult (*DeviceGetName)(char *name, int len, CUdevice d);       /* optional */
  int version;                        /* cuDriverGetVersion: 13000 for CUDA 13.0 */
} cu;

/* name for cuGetProcAddress, name for dlsym on drivers without it, where */
static const struct DrvSym {
  const char *name, *dlname;
  size_t off;
  int optional;
} drv_syms[] = {
#define S(f, dl, opt) {"cu" #f, dl, offsetof(__typeof__(cu), f), opt}
  S(Init, "cuInit", 0),
  S(DriverGetVersion, "cuDriverGetVersion", 0),
  S(GetErrorName, "cuGetErrorName", 0),
  S(GetErrorString, "cuGetErrorString", 0),
  S(DeviceGet, "cuDeviceGet", 0),
  S(DeviceGetAttribute, "cuDeviceGetAttribute", 0),
  S(CtxGetCurrent, "cuCtxGetCurrent", 0),
  S(CtxSetCurrent, "cuCtxSetCurrent", 0),
  S(CtxGetDevice, "cuCtxGetDevice", 0),
  S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0),
  S(ModuleLoadData, "cuModuleLoadData", 0),
  S(ModuleUnload, "cuModuleUnload", 0),
  S(ModuleGetFunction, "cuModuleGetFunction", 0),
  S(FuncSetAttribute, "cuFuncSetAttribute", 0),
  S(FuncLoad, "cuFuncLoad", 1),
  S(LaunchKernel, "cuLaunchKernel", 0),
  S(MemsetD8Async, "cuMemsetD8Async", 0),
  S(ModuleGetGlobal, "cuModuleGetGlobal_v2", 0),
  S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 0),
  S(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 0),
  S(Memcpy2DAsync, "cuMemcpy2DAsync_v2", 0),
  S(MemHostAlloc, "cuMemHostAlloc", 0),
  S(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 0),
  S(MemFreeHost, "cuMemFreeHost", 0),
  S(MemcpyHtoD, "cuMemcpyHtoD_v2", 0),
  S(StreamSynchronize, "cuStreamSynchronize", 0),
  S(StreamIsCapturing, "cuStreamIsCapturing", 0),
  S(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 1),
  S(EventCreate, "cuEventCreate", 1),
  S(EventRecord, "cuEventRecord", 1),
  S(EventSynchronize, "cuEventSynchronize", 1),
  S(EventElapsedTime, "cuEventElapsedTime", 1),
  S(EventDestroy, "cuEventDestroy_v2", 1),
  S(DeviceGetName, "cuDeviceGetName", 1),
#undef S
};

/* "cuX(...): CUDA_ERROR_Y (text)" into err; returns 1 (a failed status). */
static int cu_fail(CUresult r, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int cu_fail(CUresult r, char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return 1;
  const char *name = NULL, *text = NULL;
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  if (cu.GetErrorString) cu.GetErrorString(r, &text);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= errlen) return 1;
  if (name)
    snprintf(err + n, errlen - (size_t)n, ": %s (%s)", name, text ? text : "no description");
  else
    snprintf(err + n, errlen - (size_t)n, ": CUDA error %d", r);
  return 1;
}

/* ---------------------------------------------------------------- search path */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* guards the paths, NVRTC's loading, primary ctx */
static char *lib_path, *inc_path;     /* colon-separated; owned here (malloc) */

void cuda_set_search_path(const char *lib_dirs, const char *include_dirs) {
  char *l = lib_dirs ? strdup(lib_dirs) : NULL, *i = include_dirs ? strdup(include_dirs) : NULL;
  pthread_mutex_lock(&lock);
  free(lib_path), free(inc_path);
  lib_path = l, inc_path = i;
  pthread_mutex_unlock(&lock);
}

static char *copy_path(char *const *which) {
  pthread_mutex_lock(&lock);
  char *r = *which ? strdup(*which) : NULL;
  pthread_mutex_unlock(&lock);
  return r;
}

static void *try_open(const char *dir, const char *name) {
  char p[4096];
  if (dir) {
    if (!*dir || (size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p) return NULL;
    return dlopen(p, RTLD_NOW | RTLD_LOCAL);
  }
  return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

/* Open the first library of names (sonames, most wanted first): a copy the
   process has already loaded (torch's), then each folder of the search path,
   $CUDA_HOME/lib64, /usr/local/cuda/lib64, then the loader's own path. */
void *cuda_open_lib(const char *const *names, char *err, size_t errlen) {
  void *h = NULL;
  for (int i = 0; names[i] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h) return h;
  char *path = copy_path(&lib_path);
  for (char *dir = path, *next; dir && !h; dir = next) {
    next = strchr(dir, ':');
    if (next) *next++ = 0;
    for (int i = 0; names[i] && !h; i++) h = try_open(dir, names[i]);
  }
  free(path);
  const char *home = getenv("CUDA_HOME");
  char dir[4096];
  if (!h && home && *home && (size_t)snprintf(dir, sizeof dir, "%s/lib64", home) < sizeof dir)
    for (int i = 0; names[i] && !h; i++) h = try_open(dir, names[i]);
  for (int i = 0; names[i] && !h; i++) h = try_open("/usr/local/cuda/lib64", names[i]);
  const char *why = NULL;
  for (int i = 0; names[i] && !h; i++) {
    h = try_open(NULL, names[i]);
    if (!h) why = dlerror();
  }
  if (!h) {
    char *p = copy_path(&lib_path);
    em_seterr(err, errlen, "%s not found in the search path (%s), $CUDA_HOME/lib64, /usr/local/cuda/lib64 "
           "or the loader's path: %s", names[0], p ? p : "none set", why ? why : "?");
    free(p);
  }
  return h;
}

/* ---------------------------------------------------------------- the driver */

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_status;                /* 0 once the driver loaded and cuInit succeeded */
static char drv_err[512];             /* why it did not */

static void load_driver(void) {
  drv_status = 1;
  cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu.lib) {
    const char *why = dlerror();
    em_seterr(drv_err, sizeof drv_err, "libcuda.so.1 (the NVIDIA driver) not found: %s", why ? why : "?");
    return;
  }
  typedef CUresult (*GetProc)(const char *, void **, int, unsigned long long, int *);
  GetProc getproc = (GetProc)dlsym(cu.lib, "cuGetProcAddress_v2");
  for (size_t i = 0; i < sizeof drv_syms / sizeof drv_syms[0]; i++) {
    const struct DrvSym *s = &drv_syms[i];
    void *f = NULL;
    int found = 0;
    if (getproc && getproc(s->name, &f, CU_ABI_VERSION, CU_PROC_LEGACY_STREAM, &found) != CU_SUCCESS) f = NULL;
    if (!f) f = dlsym(cu.lib, s->dlname);
    if (!f && !s->optional) {
      em_seterr(drv_err, sizeof drv_err, "libcuda.so.1 lacks %s: the NVIDIA driver is too old", s->dlname);
      return;
    }
    memcpy((char *)&cu + s->off, &f, sizeof f);
  }
  CUresult r = cu.Init(0);
  if (r != CU_SUCCESS) {
    cu_fail(r, drv_err, sizeof drv_err, "cuInit");
    return;
  }
  if ((r = cu.DriverGetVersion(&cu.version)) != CU_SUCCESS) {
    cu_fail(r, drv_err, sizeof drv_err, "cuDriverGetVersion");
    return;
  }
  drv_status = 0;
}

int cuda_init(char *err, size_t errlen) {
  pthread_once(&drv_once, load_driver);
  if (drv_status) em_seterr(err, errlen, "%s", drv_err);
  return drv_status;
}

int cuda_arch(int device, int *sm, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  CUdevice d;
  int major = 0, minor = 0;
  CUresult r = cu.DeviceGet(&d, device);
  if (r) return cu_fail(r, err, errlen, "cuDeviceGet(%d)", device);
  if ((r = cu.DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, d)) ||
      (r = cu.DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, d)))
    return cu_fail(r, err, errlen, "cuDeviceGetAttribute(compute capability, device %d)", device);
  *sm = major * 10 + minor;
  return 0;
}

int cuda_driver_version(void) { return cuda_init(NULL, 0) ? 0 : cu.version; }

static int test_sm, test_driver;      /* cuda_test_device's answer; test_sm 0: none */

void cuda_test_device(int sm, int driver) { test_sm = sm, test_driver = driver; }

int cuda_current_arch(int *sm, int *driver, char *err, size_t errlen) {
  if (test_sm) return *sm = test_sm, *driver = test_driver, 0;
  if (!cuda_current_context(err, errlen)) return 1;
  CUdevice d;
  int major = 0, minor = 0;
  CUresult r = cu.CtxGetDevice(&d);
  if (r) return cu_fail(r, err, errlen, "cuCtxGetDevice");
  if ((r = cu.DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, d)) ||
      (r = cu.DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, d)))
    return cu_fail(r, err, errlen, "cuDeviceGetAttribute(compute capability, the current device)");
  *sm = major * 10 + minor, *driver = cu.version;
  return 0;
}

static CUcontext primary0;            /* device 0's primary context, retained once (under lock) */

/* The calling thread's current context; where there is none, device 0's
   primary context (the one torch and the runtime use) made current. */
void *cuda_current_context(char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return NULL;
  CUcontext c = NULL;
  CUresult r = cu.CtxGetCurrent(&c);
  if (r) return cu_fail(r, err, errlen, "cuCtxGetCurrent"), NULL;
  if (c) return c;
  pthread_mutex_lock(&lock);
  if (!primary0) {
    CUdevice d;
    if ((r = cu.DeviceGet(&d, 0)) == CU_SUCCESS) r = cu.DevicePrimaryCtxRetain(&c, d);
    if (r == CU_SUCCESS) primary0 = c;
  }
  c = primary0;
  pthread_mutex_unlock(&lock);
  if (r) return cu_fail(r, err, errlen, "cuDevicePrimaryCtxRetain(device 0)"), NULL;
  if ((r = cu.CtxSetCurrent(c))) return cu_fail(r, err, errlen, "cuCtxSetCurrent(primary context of device 0)"), NULL;
  return c;
}

/* ---------------------------------------------------------------- modules and launches */

struct CudaMod {
  CUmodule mod;
  int nfn;
  CUfunction fn[];         /* in the order of the names given to cuda_load */
};

CudaMod *cuda_load(const void *cubin, size_t n, int nfn, const char *const *names, char *err, size_t errlen) {
  if (!cuda_current_context(err, errlen)) return NULL;
  if (!cubin || !n) return em_seterr(err, errlen, "cuda_load: empty image"), NULL;
  CudaMod *m = em_malloc(sizeof *m + (size_t)(nfn > 0 ? nfn : 0) * sizeof(CUfunction));
  if (!m) return em_seterr(err, errlen, "cuda_load: out of memory"), NULL;
  m->nfn = nfn;
  CUresult r = cu.ModuleLoadData(&m->mod, cubin);
  if (r) {
    cu_fail(r, err, errlen, "cuModuleLoadData(%zu bytes)", n);
    free(m);
    return NULL;
  }
  for (int i = 0; i < nfn; i++) {
    if ((r = cu.ModuleGetFunction(&m->fn[i], m->mod, names[i]))) {
      cu_fail(r, err, errlen, "cuModuleGetFunction(\"%s\")", names[i]);
      cuda_unload(m);
      return NULL;
    }
    /* Load now rather than at the first launch (CUDA_MODULE_LOADING=LAZY,
       torch's default): a first launch inside graph capture must not load. */
    if (cu.FuncLoad && (r = cu.FuncLoad(m->fn[i]))) {
      cu_fail(r, err, errlen, "cuFuncLoad(\"%s\")", names[i]);
      cuda_unload(m);
      return NULL;
    }
  }
  return m;
}

void *cuda_fn(CudaMod *m, int i) {
  EM_ASSERT(m && i >= 0 && i < m->nfn);
  return m->fn[i];
}

void cuda_unload(CudaMod *m) {
  if (!m) return;
  if (m->mod) cu.ModuleUnload(m->mod);
  free(m);
}

int cuda_launch(void *fn, const unsigned grid[3], const unsigned block[3], unsigned shmem, void *stream,
                void **args, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  if (!fn) return em_seterr(err, errlen, "cuLaunchKernel: no function"), 1;
  CUfunction f = fn;
  CUresult r;
  if (shmem > STATIC_SHMEM_LIMIT && (r = cu.FuncSetAttribute(f, CU_FUNC_MAX_DYNAMIC_SHARED, (int)shmem)))
    return cu_fail(r, err, errlen, "cuFuncSetAttribute(max dynamic shared memory %u)", shmem);
  r = cu.LaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, stream, args, NULL);
  if (r == CU_ERROR_INVALID_CONTEXT && cuda_current_context(NULL, 0))  /* a thread torch never touched */
    r = cu.LaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, stream, args, NULL);
  if (r)
    return cu_fail(r, err, errlen, "cuLaunchKernel(grid %ux%ux%u, block %ux%ux%u, shared %u bytes)", grid[0],
                   grid[1], grid[2], block[0], block[1], block[2], shmem);
  return 0;
}

int cuda_memset_async(void *ptr, int value, size_t bytes, void *stream, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  CUresult r = cu.MemsetD8Async((CUdeviceptr)(uintptr_t)ptr, (unsigned char)value, bytes, stream);
  if (r == CU_ERROR_INVALID_CONTEXT && cuda_current_context(NULL, 0))
    r = cu.MemsetD8Async((CUdeviceptr)(uintptr_t)ptr, (unsigned char)value, bytes, stream);
  if (r) return cu_fail(r, err, errlen, "cuMemsetD8Async(%p, %d, %zu bytes)", ptr, value, bytes);
  return 0;
}

int cuda_copy2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                      void *stream, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  if (!width || !rows) return 0;
  struct Memcpy2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = (CUdeviceptr)(uintptr_t)src, c.srcPitch = spitch;
  c.dstDevice = (CUdeviceptr)(uintptr_t)dst, c.dstPitch = dpitch;
  c.WidthInBytes = width, c.Height = rows;
  CUresult r = cu.Memcpy2DAsync(&c, stream);
  if (r == CU_ERROR_INVALID_CONTEXT && cuda_current_context(NULL, 0)) r = cu.Memcpy2DAsync(&c, stream);
  if (r)
    return cu_fail(r, err, errlen, "cuMemcpy2DAsync(%p pitch %zu <- %p pitch %zu, %zu rows of %zu bytes)", dst, dpitch,
                   src, spitch, rows, width);
  return 0;
}

int cuda_copy_async(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
  CUresult r = cu.MemcpyDtoDAsync(d, s, bytes, stream);
  if (r == CU_ERROR_INVALID_CONTEXT && cuda_current_context(NULL, 0)) r = cu.MemcpyDtoDAsync(d, s, bytes, stream);
  if (r) return cu_fail(r, err, errlen, "cuMemcpyDtoDAsync(%p <- %p, %zu bytes)", dst, src, bytes);
  return 0;
}

void *cuda_host_mapped(size_t bytes, void **dev, char *err, size_t errlen) {
  if (cuda_init(err, errlen) || !cuda_current_context(err, errlen)) return NULL;
  void *h = NULL;
  CUdeviceptr d = 0;
  CUresult r = cu.MemHostAlloc(&h, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  if (r) return cu_fail(r, err, errlen, "cuMemHostAlloc(%zu bytes, mapped)", bytes), NULL;
  if ((r = cu.MemHostGetDevicePointer(&d, h, 0))) {
    cu.MemFreeHost(h);
    return cu_fail(r, err, errlen, "cuMemHostGetDevicePointer"), NULL;
  }
  memset(h, 0, bytes);
  *dev = (void *)(uintptr_t)d;
  return h;
}

void cuda_host_free(void *p) {
  if (p && drv_status == 0) cu.MemFreeHost(p);
}

int cuda_write_sync(void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  CUresult r = cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, bytes);
  if (r) return cu_fail(r, err, errlen, "cuMemcpyHtoD(%zu bytes)", bytes);
  return 0;
}

void *cuda_global(CudaMod *m, const char *name) {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  if (!m || cu.ModuleGetGlobal(&p, &bytes, m->mod, name) != CU_SUCCESS) return NULL;
  return (void *)(uintptr_t)p;
}

int cuda_read_sync(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  CUresult r = cu.MemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, stream);
  if (r == CU_ERROR_INVALID_CONTEXT && cuda_current_context(NULL, 0))
    r = cu.MemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, stream);
  if (r) return cu_fail(r, err, errlen, "cuMemcpyDtoHAsync(%zu bytes)", bytes);
  return cuda_sync(stream, err, errlen);
}

int cuda_sync(void *stream, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  CUresult r = cu.StreamSynchronize(stream);
  if (r) return cu_fail(r, err, errlen, "cuStreamSynchronize");
  return 0;
}

int cuda_capturing(void *stream, int *capturing, char *err, size_t errlen) {
  if (cuda_init(err, errlen)) return 1;
  int status = 0;  /* CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE, _INVALIDATED */
  CUresult r = cu.StreamIsCapturing(stream, &status);
  if (r) return cu_fail(r, err, errlen, "cuStreamIsCapturing");
  *capturing = status != 0;
  return 0;
}

int cuda_capture_mode(int *mode) {
  if (!cu.ThreadExchangeStreamCaptureMode) return 1;
  return cu.ThreadExchangeStreamCaptureMode(mode) != CU_SUCCESS;
}

/* Events, for timing on a stream (blas.c's GEMM tuning). */
int cuda_event_pair(void *ev[2], char *err, size_t errlen) {
  ev[0] = ev[1] = NULL;
  if (cuda_init(err, errlen)) return 1;
  if (!cu.EventCreate || !cu.EventRecord || !cu.EventSynchronize || !cu.EventElapsedTime || !cu.EventDestroy)
    return em_seterr(err, errlen, "libcuda.so.1 lacks the event calls"), 1;
  CUresult r = cu.EventCreate(&ev[0], 0);
  if (r == CU_SUCCESS && (r = cu.EventCreate(&ev[1], 0)) != CU_SUCCESS) {
    cu.EventDestroy(ev[0]);
    ev[0] = NULL;
  }
  return r ? cu_fail(r, err, errlen, "cuEventCreate") : 0;
}

void cuda_event_pair_free(void *ev[2]) {
  for (int i = 0; i < 2; i++)
    if (ev[i] && cu.EventDestroy) cu.EventDestroy(ev[i]), ev[i] = NULL;
}

int cuda_event_record(void *ev, void *stream, char *err, size_t errlen) {
  CUresult r = cu.EventRecord(ev, stream);
  return r ? cu_fail(r, err, errlen, "cuEventRecord") : 0;
}

int cuda_event_ms(void *start, void *end, float *ms, char *err, size_t errlen) {
  CUresult r = cu.EventSynchronize(end);
  if (r) return cu_fail(r, err, errlen, "cuEventSynchronize");
  if ((r = cu.EventElapsedTime(ms, start, end))) return cu_fail(r, err, errlen, "cuEventElapsedTime");
  return 0;
}

int cuda_device_name(char *buf, size_t n, char *err, size_t errlen) {
  if (!cuda_current_context(err, errlen)) return 1;
  CUdevice d;
  CUresult r = cu.CtxGetDevice(&d);
  if (r) return cu_fail(r, err, errlen, "cuCtxGetDevice");
  if (!cu.DeviceGetName) return em_seterr(err, errlen, "libcuda.so.1 lacks cuDeviceGetName"), 1;
  if ((r = cu.DeviceGetName(buf, (int)(n > 256 ? 256 : n), d))) return cu_fail(r, err, errlen, "cuDeviceGetName");
  return 0;
}

/* ---------------------------------------------------------------- NVRTC */

typedef int nvrtcResult;
typedef struct nvrtcProg *nvrtcProgram;

static struct {                       /* NVRTC's functions, filled under lock by load_nvrtc */
  void *lib;
  const char *(*GetErrorString)(nvrtcResult r);
  nvrtcResult (*Version)(int *major, int *minor);
  nvrtcResult (*CreateProgram)(nvrtcProgram *p, const char *src, const char *name, int nheaders,
                               const char *const *headers, const char *const *include_names);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *p);
  nvrtcResult (*CompileProgram)(nvrtcProgram p, int nopts, const char *const *opts);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram p, size_t *n);
  nvrtcResult (*GetProgramLog)(nvrtcProgram p, char *log);
  nvrtcResult (*GetPTXSize)(nvrtcProgram p, size_t *n);
  nvrtcResult (*GetPTX)(nvrtcProgram p, char *ptx);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram p, size_t *n);     /* optional: CUDA 11.1+ */
  nvrtcResult (*GetCUBIN)(nvrtcProgram p, char *cubin);
  nvrtcResult (*GetNumSupportedArchs)(int *n);                /* optional: CUDA 11.2+ */
  nvrtcResult (*GetSupportedArchs)(int *archs);
} nv;

static const struct NvSym {
  const char *name;
  size_t off;
  int optional;
} nv_syms[] = {
#define S(f, opt) {"nvrtc" #f, offsetof(__typeof__(nv), f), opt}
  S(GetErrorString, 0), S(Version, 0), S(CreateProgram, 0), S(DestroyProgram, 0), S(CompileProgram, 0),
  S(GetProgramLogSize, 0), S(GetProgramLog, 0), S(GetPTXSize, 0), S(GetPTX, 0), S(GetCUBINSize, 1),
  S(GetCUBIN, 1), S(GetNumSupportedArchs, 1), S(GetSupportedArchs, 1),
#undef S
};

static int load_nvrtc(char *err, size_t errlen) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
  pthread_mutex_lock(&lock);
  int ok = nv.lib != NULL;
  pthread_mutex_unlock(&lock);
  if (ok) return 0;
  void *h = cuda_open_lib(names, err, errlen);  /* outside the lock: it reads the path under it */
  if (!h) return 1;
  pthread_mutex_lock(&lock);
  int rc = 0;
  if (!nv.lib) {
    for (size_t i = 0; i < sizeof nv_syms / sizeof nv_syms[0]; i++) {
      void *f = dlsym(h, nv_syms[i].name);
      if (!f && !nv_syms[i].optional) {
        em_seterr(err, errlen, "libnvrtc lacks %s", nv_syms[i].name);
        rc = 1;
        break;
      }
      memcpy((char *)&nv + nv_syms[i].off, &f, sizeof f);
    }
    if (!rc && nv.GetCUBIN && !nv.GetCUBINSize) nv.GetCUBIN = NULL;
    if (!rc) nv.lib = h;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

/* The architecture NVRTC is asked for: sm itself when it knows it, else its
   newest one below as PTX (the driver JIT-compiles that for the device). */
static int pick_arch(int sm, int *arch, int *ptx, char *err, size_t errlen) {
  *arch = sm, *ptx = nv.GetCUBIN == NULL;
  int n = 0, archs[128];
  if (!nv.GetNumSupportedArchs || !nv.GetSupportedArchs || nv.GetNumSupportedArchs(&n) || n <= 0 || n > 128)
    return 0;
  if (nv.GetSupportedArchs(archs)) return 0;
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (archs[i] == sm) return 0;
    if (archs[i] < sm && archs[i] > best) best = archs[i];
  }
  if (best < 0) return em_seterr(err, errlen, "NVRTC does not support sm_%d (its oldest is sm_%d)", sm, archs[0]), 1;
  *arch = best, *ptx = 1;
  return 0;
}

#define LOG_LINES 30  /* the lines of NVRTC's log an error keeps */

/* Whether a log line starts one of NVRTC's messages ("ember.cu(12): error:
   ...", "1 error detected ..."): the lines after it that start with a space
   (the source line, the caret) are its own. */
static int message_start(const char *line) { return *line && *line != ' ' && *line != '\n'; }

/* Whether the message starting at line is an error. */
static int message_error(const char *line) {
  const char *nl = strchr(line, '\n');
  size_t n = nl ? (size_t)(nl - line) : strlen(line);
  for (size_t i = 0; i + 5 <= n; i++)
    if (!memcmp(line + i, "error", 5)) return 1;
  return 0;
}

/* NVRTC's log after "head": its first LOG_LINES lines, its errors' messages
   first (a kernel's warnings, such as a row cache set but not read, may come
   before the error that failed the build). */
static void log_into(nvrtcProgram p, const char *head, char *err, size_t errlen) {
  size_t n = 0;
  char *log = NULL, *out = NULL;
  if (nv.GetProgramLogSize(p, &n) == 0 && n > 1 && (log = malloc(n)) && (out = malloc(n)) &&
      nv.GetProgramLog(p, log) == 0) {
    log[n - 1] = 0;
    size_t w = 0;
    int lines = 0, more = 0;
    for (int pass = 0; pass < 2; pass++) {  /* errors, then the rest */
      int take = pass;  /* lines before any message: with the rest */
      for (const char *line = log; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (message_start(line)) take = message_error(line) == !pass;
        if (take && lines < LOG_LINES) memcpy(out + w, line, len), w += len, lines++;
        else if (take) more = 1;
        line += len;
      }
    }
    out[w] = 0;
    em_seterr(err, errlen, "%s\n%s%s", head, out, more ? "[log truncated]\n" : "");
  } else {
    em_seterr(err, errlen, "%s (no log)", head);
  }
  free(log);
  free(out);
}

/* Exact IEEE semantics: no fast math, denormals kept, IEEE division and
   square root (these are NVRTC's defaults, spelled out).  fmad stays on, as
   in torch's own kernels. */
static const char *const fixed_opts[] = {"-default-device", "--std=c++17", "-ftz=false", "-prec-div=true",
                                         "-prec-sqrt=true"};
enum { NFIXED_OPTS = sizeof fixed_opts / sizeof fixed_opts[0] };

int cuda_compile_identity(int sm, char *buf, size_t n, char *err, size_t errlen) {
  if (load_nvrtc(err, errlen)) return 1;
  int arch, ptx, major = 0, minor = 0;
  if (pick_arch(sm, &arch, &ptx, err, errlen)) return 1;
  if (nv.Version(&major, &minor)) return em_seterr(err, errlen, "nvrtcVersion failed"), 1;
  int w = snprintf(buf, n, "nvrtc %d.%d %s_%d", major, minor, ptx ? "compute" : "sm", arch);
  for (int i = 0; i < NFIXED_OPTS && w >= 0 && (size_t)w < n; i++)
    w += snprintf(buf + w, n - (size_t)w, " %s", fixed_opts[i]);
  return w < 0 || (size_t)w >= n ? (em_seterr(err, errlen, "cuda_compile_identity: buffer too small"), 1) : 0;
}

int cuda_compile_facts(int sm, int *nvrtc_version, int *ptx, char *err, size_t errlen) {
  if (load_nvrtc(err, errlen)) return 1;
  int arch, major = 0, minor = 0;
  if (pick_arch(sm, &arch, ptx, err, errlen)) return 1;
  if (nv.Version(&major, &minor)) return em_seterr(err, errlen, "nvrtcVersion failed"), 1;
  *nvrtc_version = major * 1000 + minor * 10;
  return 0;
}

int cuda_compile(const char *src, int sm, void **cubin, size_t *n, char *err, size_t errlen) {
  *cubin = NULL, *n = 0;
  if (load_nvrtc(err, errlen)) return 1;
  int arch, ptx;
  if (pick_arch(sm, &arch, &ptx, err, errlen)) return 1;

  char archopt[48];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", arch);
  enum { NFIXED = NFIXED_OPTS + 2 };
  char *incs = copy_path(&inc_path);
  int ninc = 0;
  for (char *s = incs; s && *s; s++) ninc += *s == ':';
  const char **opts = malloc((NFIXED + (size_t)ninc + 1) * sizeof *opts);
  char **incopt = calloc((size_t)ninc + 1, sizeof *incopt);
  int nopts = 0, rc = 1;
  nvrtcProgram p = NULL;
  if (!opts || !incopt) {
    em_seterr(err, errlen, "cuda_compile: out of memory");
    goto out;
  }
  opts[nopts++] = archopt;
  for (int i = 0; i < NFIXED_OPTS; i++) opts[nopts++] = fixed_opts[i];
  int k = 0;
  for (char *dir = incs, *next; dir; dir = next) {
    next = strchr(dir, ':');
    if (next) *next++ = 0;
    if (!*dir) continue;
    size_t len = strlen(dir) + 16;
    if (!(incopt[k] = malloc(len))) {
      em_seterr(err, errlen, "cuda_compile: out of memory");
      goto out;
    }
    snprintf(incopt[k], len, "--include-path=%s", dir);
    opts[nopts++] = incopt[k++];
  }

  nvrtcResult r = nv.CreateProgram(&p, src, "ember.cu", 0, NULL, NULL);
  if (r) {
    em_seterr(err, errlen, "nvrtcCreateProgram: %s", nv.GetErrorString(r));
    p = NULL;
    goto out;
  }
  if ((r = nv.CompileProgram(p, nopts, opts))) {
    char head[160];
    snprintf(head, sizeof head, "nvrtcCompileProgram(%s): %s; NVRTC's log:", archopt, nv.GetErrorString(r));
    log_into(p, head, err, errlen);
    goto out;
  }
  size_t size = 0;
  r = ptx ? nv.GetPTXSize(p, &size) : nv.GetCUBINSize(p, &size);
  char *image = r == 0 && size ? malloc(size) : NULL;
  if (r == 0 && image) r = ptx ? nv.GetPTX(p, image) : nv.GetCUBIN(p, image);
  if (r || !image) {
    em_seterr(err, errlen, "%s: %s", ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", r ? nv.GetErrorString(r) : "out of memory");
    free(image);
    goto out;
  }
  *cubin = image, *n = size;
  rc = 0;
out:
  if (p) nv.DestroyProgram(&p);
  for (int i = 0; incopt && i < ninc + 1; i++) free(incopt[i]);
  free(incopt);
  free(opts);
  free(incs);
  return rc;
}
