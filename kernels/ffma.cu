// FFMA latency and throughput: ILP independent chains x = fma(x, x, x), UNROLL steps each, so the
// timed region is ILP * UNROLL FFMAs. Each FFMA names one register in all three slots, which is read
// once, so no register-bank question enters the latency. (An earlier comment here said x*a+b with a
// same-bank conflict reads ~5 cycles on sm_90: that was the input LDG landing in the timed region,
// before the start clock read waited on every scoreboard; the chain reads ~4 either way.)
// ILP=1: dependent latency; ILP >= 4 with 4 warps per SM sub-partition: issue rate per sub-partition.
//
// PASSES > 1 (the issue-rate shape): the chains run PASSES times through the same code and only the
// last pass is timed, each pass after a block barrier. The region is ILP * UNROLL * 16 bytes of
// straight-line code (32 KiB at ILP 8), more than an L0 instruction cache holds; timed on its first
// pass it runs at the speed its SM fetches it, cold on an SM that has not run it (a one-block launch
// lands on any SM, the warm-up launch warmed one), and its warps start as they were dispatched, so a
// block's span took in their skew: per launch 1.009-1.080 cycles per FFMA per sub-partition (H100,
// 2026-11-21), and a median of 5 such launches moved by 1.8 % between processes. The barrier starts
// every warp of the timed pass together and after the last warp's previous pass, with the code fetched.
#include "gpuprops.cuh"

#ifndef ILP
#define ILP 1
#endif
#ifndef UNROLL
#define UNROLL 256
#endif
#ifndef PASSES
#define PASSES 1
#endif

extern "C" __global__ void ffma(unsigned long long* cycles, const float* in, float* out) {
    float x[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) x[j] = in[2 + j];
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
#if PASSES > 1
        __syncthreads();
#endif
        t0 = gp_clock();
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int j = 0; j < ILP; ++j) asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x[j]));
        }
        t1 = gp_clock();
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < ILP; ++j) s += x[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    gp_record(cycles, t0, t1);
}
