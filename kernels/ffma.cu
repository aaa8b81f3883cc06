// FFMA latency and throughput: ILP independent chains x = fma(x, x, x), UNROLL steps each, so the
// timed region is ILP * UNROLL FFMAs. Each FFMA names one register in all three slots, which is read
// once, so no register-bank question enters the latency. (An earlier comment here said x*a+b with a
// same-bank conflict reads ~5 cycles on sm_90: that was the input LDG landing in the timed region,
// before the start clock read waited on every scoreboard; the chain reads ~4 either way.)
// ILP=1: dependent latency; ILP >= 4 with 4 warps per SM sub-partition: issue rate per sub-partition.
#include "gpuprops.cuh"

#ifndef ILP
#define ILP 1
#endif
#ifndef UNROLL
#define UNROLL 256
#endif

extern "C" __global__ void ffma(unsigned long long* cycles, const float* in, float* out) {
    float x[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) x[j] = in[2 + j];
    unsigned long long t0 = gp_clock();
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int j = 0; j < ILP; ++j) asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x[j]));
    }
    unsigned long long t1 = gp_clock();
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < ILP; ++j) s += x[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    gp_record(cycles, t0, t1);
}
