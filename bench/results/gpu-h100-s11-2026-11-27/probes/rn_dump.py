import os, sys, glob, torch
import ember
from ember.backend import make_backend
from ember.tools import vision
d = sys.argv[2]; mode = sys.argv[1]
os.environ["EMBER_DEBUG"]="1"; os.environ["EMBER_DEBUG_DIR"]=d
m = vision.ResNet().eval()
cf = torch.compile(m, backend=make_backend(None, _cuda_check=90), dynamic=(mode=="dyn"))
with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
    if mode == "dyn": cf(torch.randn(3, 3, 64, 64))
    cf(torch.randn(4, 3, 64, 64))
print(sorted(glob.glob(d+"/run_*/graph_*/kernels.cu")))
