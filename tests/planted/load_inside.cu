// Planted: a global load inside the timed region of what claims to be an FFMA chain.
#include "gpuprops.cuh"

extern "C" __global__ void load_inside(unsigned long long* cycles, const float* in, float* out) {
    float x = 1.0f;
    unsigned long long t0 = gp_clock();
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(x) : "l"(in + threadIdx.x) : "memory");
#pragma unroll
    for (int u = 0; u < 16; ++u) asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x));
    unsigned long long t1 = gp_clock();
    out[threadIdx.x] = x;
    gp_record(cycles, t0, t1);
}
