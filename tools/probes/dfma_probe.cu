// Exploration only (tools/explore_dfma.py), not part of the suite: why the DFMA dependent latency
// moved between runs (9.95-10.20 cycles per step) while each run was steady.
//
// One warp per block runs UNROLL dependent DFMAs (x = x * x + x) PASSES times; only the last pass is
// timed, so with PASSES = 2 the region's instructions are already in the instruction caches. Lane 0
// writes (start, stop) like gp_record and the SM it ran on (%smid) to sm[block]. OP 2 is FFMA, the
// control: its latency never moved.
#include "../../kernels/gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 128
#endif
#ifndef PASSES
#define PASSES 1
#endif
#ifndef OP
#define OP 1
#endif

#if OP == 1
typedef double gp_t;
#define GP_STEP "fma.rn.f64 %0, %0, %0, %0;"
#define GP_C "d"
#else
typedef float gp_t;
#define GP_STEP "fma.rn.f32 %0, %0, %0, %0;"
#define GP_C "f"
#endif

extern "C" __global__ void dfma_probe(unsigned long long* cycles, const gp_t* in, gp_t* out, unsigned* sm) {
    gp_t x = in[threadIdx.x & 31];
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int p = 0; p < PASSES; ++p) {
        t0 = gp_clock();
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) asm volatile(GP_STEP : "+" GP_C(x));
        t1 = gp_clock();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
    if ((threadIdx.x & 31) == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        sm[blockIdx.x] = s;
    }
    gp_record(cycles, t0, t1);
}
