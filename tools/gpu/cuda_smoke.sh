#!/usr/bin/env bash
# cuda_smoke.sh - on a machine with an NVIDIA GPU and a CUDA build of torch:
# build tests/c/test_cuda.c (cuda.c, blas.c, cache.c, util.c) with gcc and run it,
# with the nvidia wheels' lib and include folders as ember's search path;
# then the same test under AddressSanitizer (quick mode), and torch's time
# for the same bf16 4096^3 product, for comparison.
#   EMBER_SMOKE_DIAG=1  also print where NVRTC, cuBLASLt and the headers are.
#   PYTHON=...          the python whose torch and nvidia wheels to use.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
BIN=tests/c/bin
mkdir -p "$BIN"

# The wheels' folders: nvidia/<pkg>/lib holding libnvrtc or libcublasLt, and
# nvidia/<pkg>/include holding cuda_fp16.h (cu13 wheels put all in nvidia/cu13).
read -r LIBS INCS < <($PY - <<'EOF'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
libs, incs = [], []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib"))):
        if glob.glob(d + "/libnvrtc.so*") or glob.glob(d + "/libcublasLt.so*"):
            libs.append(d)
    for d in sorted(glob.glob(os.path.join(r, "*", "include"))):
        if os.path.exists(d + "/cuda_fp16.h") or os.path.exists(d + "/nvrtc.h"):
            incs.append(d)
print(":".join(libs) or "-", ":".join(incs) or "-")
EOF
)
[ "$LIBS" = "-" ] && LIBS=""
[ "$INCS" = "-" ] && INCS=""
export EMBER_CUDA_LIB_DIRS="$LIBS" EMBER_CUDA_INC_DIRS="$INCS"
echo "lib dirs: ${LIBS:-none}"
echo "include dirs: ${INCS:-none}"

if [ "${EMBER_SMOKE_DIAG:-0}" = 1 ]; then
  echo "== where things are"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  $PY -c "import torch, nvidia; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nvidia paths', list(nvidia.__path__))" 2>&1
  find / \( -name 'libnvrtc*.so*' -o -name 'libcublasLt.so*' -o -name 'libcuda.so*' -o -name 'cuda_bf16.h' \) \
       -not -path '/proc/*' 2>/dev/null | head -30
  for d in ${LIBS//:/ }; do ls "$d"; done
  for d in ${LIBS//:/ }; do for f in "$d"/libnvrtc.so.* "$d"/libcublasLt.so.*; do
    [ -e "$f" ] && { echo "$f:"; readelf -d "$f" 2>/dev/null | grep -E 'NEEDED|RUNPATH|RPATH'; }; done; done
fi

CFLAGS="-std=gnu11 -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc"
SRCS="tests/c/test_cuda.c src/cuda.c src/blas.c src/cache.c src/util.c"
echo "== build"
gcc $CFLAGS -O2 -g -o $BIN/test_cuda $SRCS -ldl -lpthread -lm || exit 1
gcc $CFLAGS -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -o $BIN/test_cuda_asan $SRCS \
    -ldl -lpthread -lm || exit 1

echo "== test_cuda"
$BIN/test_cuda
rc=$?
echo "== test_cuda under AddressSanitizer (quick)"
# The driver maps memory where ASan's shadow gap would be: leave it unprotected.
EMBER_TEST_QUICK=1 ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 $BIN/test_cuda_asan > $BIN/asan.log 2>&1
arc=$?
grep -E "passed|ERROR|check failed|runtime error" $BIN/asan.log | head -20
echo "== test_cuda with no search path (\$CUDA_HOME/lib64, /usr/local/cuda/lib64, the loader's path)"
EMBER_TEST_QUICK=1 EMBER_CUDA_LIB_DIRS= EMBER_CUDA_INC_DIRS= $BIN/test_cuda 2>&1 | grep -E "NVRTC|passed|failed"

echo "== inside a torch process (ctypes): torch's context, stream, CUDA graph, libraries"
gcc $CFLAGS -O2 -shared -fPIC -o $BIN/libembercuda.so src/cuda.c src/blas.c src/cache.c src/util.c -ldl -lpthread -lm || exit 1
$PY - <<'EOF' 2>&1
import ctypes as C, os, torch, torch.nn.functional as F
lib = C.CDLL(os.path.abspath("tests/c/bin/libembercuda.so"))
lib.cuda_set_search_path(os.environ["EMBER_CUDA_LIB_DIRS"].encode(), os.environ["EMBER_CUDA_INC_DIRS"].encode())
err = C.create_string_buffer(4096)
def ok(rc):
    assert rc == 0, err.value.decode()
torch.zeros(1, device="cuda")                       # torch's context is current
sm = C.c_int(); ok(lib.cuda_arch(0, C.byref(sm), err, 4096))
src = (b'extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {\n'
       b'  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n')
img, n = C.c_void_p(), C.c_size_t()
ok(lib.cuda_compile(src, sm, C.byref(img), C.byref(n), err, 4096))
lib.cuda_load.restype = lib.cuda_fn.restype = C.c_void_p
mod = lib.cuda_load(img, n, 1, (C.c_char_p * 1)(b"saxpy"), err, 4096); assert mod, err.value.decode()
fn = C.c_void_p(lib.cuda_fn(C.c_void_p(mod), 0))
N = 1 << 20
x = torch.randn(N, device="cuda"); y = torch.randn(N, device="cuda"); y0 = y.clone()
cn, ca, cx, cy = C.c_int(N), C.c_float(2.0), C.c_void_p(x.data_ptr()), C.c_void_p(y.data_ptr())
args = (C.c_void_p * 4)(*[C.cast(C.pointer(v), C.c_void_p) for v in (cn, ca, cx, cy)])
grid, block = (C.c_uint * 3)((N + 255) // 256, 1, 1), (C.c_uint * 3)(256, 1, 1)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    ok(lib.cuda_launch(fn, grid, block, 0, C.c_void_p(s.cuda_stream), args, err, 4096))
torch.cuda.synchronize()
print("saxpy on torch's stream:", "ok" if torch.allclose(y, 2 * x + y0, rtol=1e-6, atol=1e-6) else "WRONG")
g = torch.cuda.CUDAGraph(); y.copy_(y0)
with torch.cuda.graph(g):
    ok(lib.cuda_launch(fn, grid, block, 0, C.c_void_p(torch.cuda.current_stream().cuda_stream), args, err, 4096))
for _ in range(3): g.replay()
torch.cuda.synchronize()
print("saxpy captured in a CUDA graph, 3 replays:",
      "ok" if torch.allclose(y, 6 * x + y0, rtol=1e-5, atol=1e-5) else "WRONG")
lib.blas_matmul.argtypes = [C.c_int] * 3 + [C.c_int64] * 3 + [C.c_void_p, C.c_int64, C.c_int64] * 3 + \
    [C.c_int64, C.c_void_p, C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.c_char_p, C.c_size_t]
BF16, GELU = 7, 2                                   # EMBER_BF16, EPI_GELU
a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
w = torch.randn(384, 512, device="cuda", dtype=torch.bfloat16) / 20
bias = torch.randn(384, device="cuda", dtype=torch.bfloat16)
out = torch.empty(256, 384, device="cuda", dtype=torch.bfloat16)
ws = torch.empty(32 << 20, device="cuda", dtype=torch.uint8)
def lin():
    ok(lib.blas_matmul(BF16, 0, 1, 256, 384, 512, a.data_ptr(), 512, 0, w.data_ptr(), 512, 0, out.data_ptr(), 384, 0,
                       1, bias.data_ptr(), GELU, ws.data_ptr(), ws.numel(), torch.cuda.current_stream().cuda_stream,
                       err, 4096))
lin(); torch.cuda.synchronize()
ref = F.gelu(F.linear(a.float(), w.float(), bias.float()), approximate="tanh")
rel = ((out.float() - ref).norm() / ref.norm()).item()
print(f"linear+bias+gelu(tanh) bf16 vs torch fp32: rel err {rel:.2e}", "ok" if rel < 1e-2 else "WRONG")
out.zero_(); g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2):
    lin()
g2.replay(); torch.cuda.synchronize()
rel = ((out.float() - ref).norm() / ref.norm()).item()
print(f"the same blas_matmul captured in a CUDA graph: rel err {rel:.2e}", "ok" if rel < 1e-2 else "WRONG")
maps = open("/proc/self/maps").read().split("\n")
for name in ("libnvrtc.so", "libnvrtc-builtins", "libcublasLt.so", "libcuda.so"):
    print(name, "copies mapped:", sorted({l.split()[-1] for l in maps if name in l}))
EOF

echo "== torch, same bf16 4096^3 product"
$PY - <<'EOF' 2>&1
import torch
a = torch.rand(4096, 4096, device="cuda", dtype=torch.bfloat16) * 2 - 1
b = torch.rand(4096, 4096, device="cuda", dtype=torch.bfloat16) * 2 - 1
for _ in range(3):
    c = a @ b
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(20):
    e0.record(); c = a @ b; e1.record(); e1.synchronize(); ts.append(e0.elapsed_time(e1))
ts.sort()
print(f"torch bf16 4096^3: {ts[10]:.3f} ms median of 20 = {2 * 4096**3 / (ts[10] * 1e-3) / 1e12:.0f} TFLOP/s")
EOF
echo "== result: test_cuda rc=$rc, under ASan rc=$arc"
[ $rc = 0 ] && [ $arc = 0 ]
