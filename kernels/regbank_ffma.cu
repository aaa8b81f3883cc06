// Register-bank probe (the original sm_86 notes, register banks): a loop whose body is NFFMA FFMAs in NACC accumulator
// chains. The sass patcher rewrites every body FFMA's sources (Ra, Rb, Rc), reuse flags and stall;
// destinations stay the accumulators, which are the designated scratch registers (their values feed
// only the sink), and sources are drawn from the other registers, so no patched FFMA reads a
// register another one writes: the loop's cost is set by how the three source reads fall on the
// register banks. NLIVE values loaded before the loop stay live across it (stored after), so
// R0..R(NLIVE) are allocated and readable.
#include "gpuprops.cuh"

#ifndef NFFMA
#define NFFMA 128
#endif
#ifndef NACC
#define NACC 8
#endif
#ifndef NLIVE
#define NLIVE 48
#endif

extern "C" __global__ void regbank_ffma(unsigned long long* cycles, const float* in, float* out, int iters) {
    float r[NLIVE];
#pragma unroll
    for (int i = 0; i < NLIVE; ++i) r[i] = in[i * 32 + (threadIdx.x & 31)];
    float acc[NACC];
#pragma unroll
    for (int j = 0; j < NACC; ++j) acc[j] = in[NLIVE * 32 + j];
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < NFFMA; ++i)
            asm volatile("fma.rn.f32 %0, %1, %2, %0;" : "+f"(acc[i % NACC]) : "f"(r[0]), "f"(r[1]));
    }
    unsigned long long t1 = gp_clock();
    float* o = out + (blockIdx.x * blockDim.x + threadIdx.x) * (NLIVE + 1);
#pragma unroll
    for (int i = 0; i < NLIVE; ++i) o[i] = r[i];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NACC; ++j) s += acc[j];
    o[NLIVE] = s;
    gp_record(cycles, t0, t1);
}
