"""bf16 broadcast add x[16*512, 3072] + b[3072]: 4 vs 8 lanes per thread, constant vs runtime
(int64) column divisor, against eager and a copy. NVRTC + the driver API through ctypes."""
import ctypes, glob, os, torch
import torch.utils.cpp_extension
SRC = r'''
typedef unsigned short u16; typedef long long i64;
__device__ __forceinline__ float bf2f(u16 h){ return __uint_as_float(((unsigned)h)<<16); }
__device__ __forceinline__ u16 f2bf(float f){ unsigned u=__float_as_uint(f); u += 0x7fffu + ((u>>16)&1u); return (u16)(u>>16); }
template<int L> struct alignas(2*L) vec { u16 v[L]; };
#define BODY(L, COL) \
  i64 step = (i64)gridDim.x*blockDim.x; \
  for (i64 q = (i64)blockIdx.x*blockDim.x+threadIdx.x; q < n/L; q += step) { \
    i64 lin = q*L; i64 i2 = COL; \
    vec<L> X = *(const vec<L>*)&x[lin]; vec<L> B = *(const vec<L>*)&b[i2]; vec<L> Y; \
    _Pragma("unroll") for (int u=0;u<L;u++) Y.v[u] = f2bf(bf2f(X.v[u])+bf2f(B.v[u])); \
    *(vec<L>*)&y[lin] = Y; }
extern "C" __global__ void __launch_bounds__(256) a4s(const u16*__restrict__ x,const u16*__restrict__ b,u16*__restrict__ y,i64 n,i64 s){ BODY(4, lin % 3072) }
extern "C" __global__ void __launch_bounds__(256) a8s(const u16*__restrict__ x,const u16*__restrict__ b,u16*__restrict__ y,i64 n,i64 s){ BODY(8, lin % 3072) }
extern "C" __global__ void __launch_bounds__(256) a4d(const u16*__restrict__ x,const u16*__restrict__ b,u16*__restrict__ y,i64 n,i64 s){ BODY(4, lin % s) }
extern "C" __global__ void __launch_bounds__(256) a8d(const u16*__restrict__ x,const u16*__restrict__ b,u16*__restrict__ y,i64 n,i64 s){ BODY(8, lin % s) }
extern "C" __global__ void __launch_bounds__(256) a4d32(const u16*__restrict__ x,const u16*__restrict__ b,u16*__restrict__ y,i64 n,i64 s){ BODY(4, (i64)((unsigned)lin % (unsigned)s)) }
extern "C" __global__ void __launch_bounds__(256) a8d32(const u16*__restrict__ x,const u16*__restrict__ b,u16*__restrict__ y,i64 n,i64 s){ BODY(8, (i64)((unsigned)lin % (unsigned)s)) }
'''
from ember.backend import _cuda_dirs
nv = None
for nm in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
    try:
        nv = ctypes.CDLL(nm); break
    except OSError:
        pass
cu = ctypes.CDLL("libcuda.so.1")
p = ctypes.c_void_p()
assert nv.nvrtcCreateProgram(ctypes.byref(p), SRC.encode(), b"k.cu", 0, None, None) == 0
cap = torch.cuda.get_device_capability()
opts = [b"--std=c++17", f"--gpu-architecture=sm_{cap[0]}{cap[1]}".encode()]
r = nv.nvrtcCompileProgram(p, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = ctypes.c_size_t(); nv.nvrtcGetProgramLogSize(p, ctypes.byref(n)); lg = ctypes.create_string_buffer(n.value); nv.nvrtcGetProgramLog(p, lg)
assert r == 0, lg.value.decode()
nv.nvrtcGetCUBINSize(p, ctypes.byref(n)); img = ctypes.create_string_buffer(n.value); nv.nvrtcGetCUBIN(p, img)
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
mod = ctypes.c_void_p(); assert cu.cuModuleLoadData(ctypes.byref(mod), img) == 0
N, C = 16 * 512, 3072
x = torch.randn(N, C, device="cuda").bfloat16(); b = torch.randn(C, device="cuda").bfloat16(); y = torch.empty_like(x)
ref = x + b
def timeit(f):
    for _ in range(3): f()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]; ts = []
    for _ in range(11):
        ev[0].record()
        for _ in range(20): f()
        ev[1].record(); torch.cuda.synchronize(); ts.append(ev[0].elapsed_time(ev[1]) / 20 * 1e3)
    return sorted(ts)[5]
print("floor_us", round(x.numel() * 4 / 3e6, 1))
print("eager x+b us", round(timeit(lambda: torch.add(x, b, out=y)), 1))
print("copy us", round(timeit(lambda: y.copy_(x)), 1))
stream = torch.cuda.current_stream().cuda_stream
for name, L in [("a4s", 4), ("a8s", 8), ("a4d", 4), ("a8d", 8), ("a4d32", 4), ("a8d32", 8)]:
    fn = ctypes.c_void_p(); assert cu.cuFuncGetAttribute is not None
    assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()) == 0
    for per in (1, 4):
        args = [ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(b.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_longlong(N * C), ctypes.c_longlong(C)]
        ptrs = (ctypes.c_void_p * 5)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        grid = min((N * C // L + 256 * per - 1) // (256 * per), 1048576)
        def launch():
            assert cu.cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, ctypes.c_void_p(stream), ptrs, None) == 0
        y.zero_(); launch(); torch.cuda.synchronize()
        assert torch.equal(y, ref), name
        print(name, "per_thread_iters", per, "us", round(timeit(launch), 1), flush=True)
