"""NVRTC a kernels.cu (with its prelude.cuh) for sm_90: ptxas -v info, PTX to a file."""
import ctypes, glob, os, sys
src_path = sys.argv[1]; ptx_out = sys.argv[2] if len(sys.argv) > 2 else None
d = os.environ["EMBER_CUDA_LIB_DIRS"]
lib = ctypes.CDLL(sorted(glob.glob(d + "/libnvrtc.so*"))[0])
src = open(src_path).read()
hdr = open(os.path.join(os.path.dirname(src_path), "prelude.cuh")).read()
p = ctypes.c_void_p()
H = (ctypes.c_char_p * 1)(hdr.encode()); N = (ctypes.c_char_p * 1)(b"prelude.cuh")
assert lib.nvrtcCreateProgram(ctypes.byref(p), src.encode(), b"k.cu", 1, H, N) == 0
opts = [b"-default-device", b"--std=c++17", b"-ftz=false", b"-prec-div=true", b"-prec-sqrt=true",
        b"--gpu-architecture=sm_90", b"--ptxas-options=-v"]
O = (ctypes.c_char_p * len(opts))(*opts)
r = lib.nvrtcCompileProgram(p, len(opts), O)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(p, ctypes.byref(n)); b = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(p, b)
for ln in b.value.decode().splitlines():
    if "registers" in ln or "spill" in ln or "Compiling" in ln or "error" in ln: print(ln.strip())
if ptx_out:
    lib.nvrtcGetPTXSize(p, ctypes.byref(n)); b = ctypes.create_string_buffer(n.value); lib.nvrtcGetPTX(p, b)
    open(ptx_out, "w").write(b.value.decode())
print("rc", r)
