"""Which attention ops reach a backend's graphs on the GPU: the ATen graph
AOTAutograd hands a compiler for bert-base (fp32, batch 1, seq 512) and gpt2
(bf16, batch 8, seq 256), counted by op (attention, bmm, softmax), then
Inductor's pattern-matcher counters for the same models (does Inductor
rewrite a matmul-softmax-matmul back into a fused attention kernel?).

    python3 tools/gpu/attn_ops.py
"""
import collections

import torch
import transformers
from torch._dynamo.utils import counters
from torch._functorch.aot_autograd import aot_module_simplified


def build(name):
    if name == "bert-base":
        m = transformers.BertForMaskedLM(transformers.BertConfig()).cuda().eval()
        return m, torch.randint(3, 30000, (1, 512), device="cuda"), torch.float32
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)).cuda().eval()
    return m, torch.randint(3, 50000, (8, 256), device="cuda"), torch.bfloat16


def main():
    for name in ("bert-base", "gpt2"):
        m, ids, dt = build(name)
        ops = collections.Counter()

        def backend(gm, inputs):
            def fw(g, _):
                for n in g.graph.nodes:
                    if n.op == "call_function":
                        ops[str(n.target)] += 1
                return g
            return aot_module_simplified(gm, inputs, fw_compiler=fw)
        torch._dynamo.reset()
        with torch.no_grad(), torch.autocast("cuda", dtype=dt, enabled=dt != torch.float32):
            torch.compile(m, backend=backend)(ids)
        print(name, "attn implementation", m.config._attn_implementation)
        print(" ", {k: v for k, v in ops.items() if any(s in k for s in ("attention", "bmm", "softmax", "baddbmm"))})
        torch._dynamo.reset()
        counters.clear()
        with torch.no_grad(), torch.autocast("cuda", dtype=dt, enabled=dt != torch.float32):
            torch.compile(m)(ids)
        print("  inductor counters:", {k: dict(v) for k, v in counters.items() if k == "inductor"})


if __name__ == "__main__":
    main()
