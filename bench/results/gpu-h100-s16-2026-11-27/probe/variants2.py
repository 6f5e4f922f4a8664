"""Math variants of k42 (4 lanes, block 256, one pass): which part of the precise math costs."""
HEAD = r'''
__device__ __forceinline__ float rs_precise(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ float rs_fast(float x) { return rsqrtf(x); }
__device__ __forceinline__ float sig_precise(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float sig_fastdiv(float x) { return __fdividef(1.0f, 1.0f + expf(-x)); }
__device__ __forceinline__ float sig_fastexp(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float sig_fast(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
'''
def kernel(name, rs="rs_precise", sig="sig_precise", pre_scale=False):
    s = [f'extern "C" __global__ void __launch_bounds__(256) {name}(const uint16_t *__restrict__ p0, const float *__restrict__ p1, const float *__restrict__ p2, const float *__restrict__ p3, const float *__restrict__ p4, uint16_t *__restrict__ p5, int nq) {{',
         '  const int q = (int)blockIdx.x * blockDim.x + threadIdx.x; if (q >= nq) return;',
         '  const int lin = q * 4; const int i1 = lin % 768; const int i0 = lin / 768;',
         '  const em_vec4<uint16_t> V0 = *(const em_vec4<uint16_t> *)&p0[i1 + 768*i0];']
    for k in range(1, 5):
        s.append(f'  const em_vec4<float> V{k} = *(const em_vec4<float> *)&p{k}[i1];')
    s.append('  em_vec4<uint16_t> S;\n  #pragma unroll\n  for (int l = 0; l < 4; l++) {')
    s.append('    float t0 = em_bf16_to_f32(V0.v[l]); float t3 = __fsub_rn(t0, V1.v[l]);')
    if pre_scale:
        s.append('    float t8 = V2.v[l];')
    else:
        s.append(f'    float t6 = {rs}(__fadd_rn(V2.v[l], 1e-05f)); float t8 = __fmul_rn(t6, V3.v[l]);')
    s.append('    float t11 = __fadd_rn(__fmul_rn(t3, t8), V4.v[l]);')
    s.append(f'    float t12 = em_round_bf16(t11); float t15 = __fmul_rn(t12, {sig}(t12));')
    s.append('    S.v[l] = em_f32_to_bf16(em_round_bf16(t15));\n  }')
    s.append('  *(em_vec4<uint16_t> *)&p5[i1 + 768*i0] = S;\n}\n')
    return "\n".join(s)
VARIANTS = [
    dict(name="m_precise"),
    dict(name="m_rsqrtf", rs="rs_fast"),
    dict(name="m_sig_fastdiv", sig="sig_fastdiv"),
    dict(name="m_sig_fastexp", sig="sig_fastexp"),
    dict(name="m_sig_fast", sig="sig_fast"),
    dict(name="m_all_fast", rs="rs_fast", sig="sig_fast"),
    dict(name="m_prescale", pre_scale=True),
    dict(name="m_prescale_sig_fast", pre_scale=True, sig="sig_fast"),
]
def source():
    return HEAD + "\n".join(kernel(**v) for v in VARIANTS)
