"""Variants of ember's BN+SiLU kernel (k42) for the microbenchmark: lanes per thread, block size,
grid-stride loop or one pass, full math or a trivial body."""
def kernel(name, lanes=4, loop=True, math=True, block=256):
    L = lanes
    s = [f'template <class T> struct alignas({L} * sizeof(T)) vecL_{name} {{ T v[{L}]; }};']
    s.append(f'extern "C" __global__ void __launch_bounds__({block}) {name}(const uint16_t *__restrict__ p0, const float *__restrict__ p1, const float *__restrict__ p2, const float *__restrict__ p3, const float *__restrict__ p4, uint16_t *__restrict__ p5, int nq) {{')
    if loop:
        s.append('  const int step = (int)gridDim.x * blockDim.x;')
        s.append('  for (int q = (int)blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += step) {')
    else:
        s.append('  { const int q = (int)blockIdx.x * blockDim.x + threadIdx.x; if (q >= nq) return;')
    s.append(f'    const int lin = q * {L}; const int i1 = lin % 768; const int i0 = lin / 768;')
    s.append(f'    const vecL_{name}<uint16_t> V0 = *(const vecL_{name}<uint16_t> *)&p0[i1 + 768*i0];')
    for k in range(1, 5):
        s.append(f'    const vecL_{name}<float> V{k} = *(const vecL_{name}<float> *)&p{k}[i1];')
    s.append(f'    vecL_{name}<uint16_t> S;')
    s.append('    #pragma unroll')
    s.append(f'    for (int l = 0; l < {L}; l++) {{')
    if math:
        s.append('      float t0 = em_bf16_to_f32(V0.v[l]); float t2 = V1.v[l]; float t3 = em_sub(t0,t2); float t4 = V2.v[l];')
        s.append('      float t5 = em_add(t4,((float)(((float)1.0000000000000001e-05)))); float t6 = em_rsqrt(t5); float t7 = V3.v[l];')
        s.append('      float t8 = em_mul(t6,t7); float t9 = em_mul(t3,t8); float t10 = V4.v[l]; float t11 = em_add(t9,t10);')
        s.append('      float t12 = em_round_bf16((float)(t11)); float t14 = em_sigmoid(t12); float t15 = em_mul(t12,t14);')
        s.append('      S.v[l] = em_f32_to_bf16(em_round_bf16((float)(t15)));')
    else:
        s.append('      float t0 = em_bf16_to_f32(V0.v[l]); S.v[l] = em_f32_to_bf16(t0 * V3.v[l] + V1.v[l] + V2.v[l] + V4.v[l]);')
    s.append('    }')
    s.append(f'    *(vecL_{name}<uint16_t> *)&p5[i1 + 768*i0] = S;')
    s.append('  }\n}\n')
    return "\n".join(s)
VARIANTS = [dict(name=f"v_l{l}_b{b}_{'loop' if lp else 'once'}_{'math' if m else 'copy'}", lanes=l, block=b, loop=lp, math=m)
            for l in (2, 4, 8) for b in (128, 256) for lp in (True, False) for m in (True, False)]
def source():
    return "\n".join(kernel(**v) for v in VARIANTS)
