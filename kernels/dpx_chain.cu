// Dependent latency and issue rate of Hopper's DPX integer min/max instructions, chosen by OP:
//
//   OP  intrinsic (per step, on chain value x)       SASS on sm_90 (NVRTC 13.5)
//   1   x = __vimax3_s32(x, b, c)                     VIMNMX3
//   2   x = __viaddmax_s32(x, b, c)                   VIADDMNMX           max(x + b, c)
//   3   x = __vibmax_s32(x, y, &p); y = p             ISETP.GE.AND, SEL, SEL  (not a DPX instruction)
//   4   x = __vimin3_u32(x, b, c)                     VIMNMX3.U32
//   5   x = __viaddmax_s32_relu(x, b, c)              VIADDMNMX.RELU      max(x + b, c, 0)
//
// b and c are loaded before the start read and never written: each step reads the previous step's
// result and those two registers only. Every step is one instruction that ptxas cannot merge with
// the next: a two-input max chain (__vimax_s32_relu, or __vibmax_s32 with its predicate unused) is
// folded two steps per VIMNMX3 by ptxas, which is why those are not measured that way.
//
// OP 3: __vibmax_s32 is a compare and two selects on sm_90 with this compiler (ptxas emits no
// VIMNMX with a predicate output): ISETP.GE.AND P, x, y; SEL x, x, y, P; SEL y, RZ, 0x1, !P. The
// predicate must be used or the step becomes a max (and pairs of steps one VIMNMX3), so it is the
// next step's second operand y: each step reads both results of the previous one. Its dependent
// path per step is ISETP then SEL; the predicate's SEL runs beside it. The last predicates are
// stored after the stop read, one word per chain, so that no SEL of the region sinks past it.
//
// Shapes, as kernels/alu_chain.cu: ILP independent chains of UNROLL steps. ILP 1, one warp, PASSES 2
// (the second pass is timed, with the region in the instruction caches): cycles per step. ILP 8 x 4
// warps per SM sub-partition, one pass: cycles per step per sub-partition over the block's span.
// ``in`` holds 32 * ILP start values (lane l of chain j starts from in[32 j + l]), then b and c
// (32 each, per lane). ``out`` holds 2 * ILP words per thread.
#include "gpuprops.cuh"

#ifndef OP
#define OP 1
#endif
#ifndef ILP
#define ILP 1
#endif
#ifndef UNROLL
#define UNROLL 128
#endif
#ifndef PASSES
#define PASSES 1
#endif

#if OP < 1 || OP > 5
#error "OP must be 1..5"
#endif

__device__ __forceinline__ void gp_dpx_step(int& x, int& y, int b, int c) {
#if OP == 1
    x = __vimax3_s32(x, b, c);
#elif OP == 2
    x = __viaddmax_s32(x, b, c);
#elif OP == 3
    bool p;
    x = __vibmax_s32(x, y, &p);
    y = p;
#elif OP == 4
    x = (int)__vimin3_u32((unsigned)x, (unsigned)b, (unsigned)c);
#elif OP == 5
    x = __viaddmax_s32_relu(x, b, c);
#endif
}

extern "C" __global__ void dpx_chain(unsigned long long* cycles, const int* in, int* out) {
    const unsigned lane = threadIdx.x & 31;
    const int b = in[32 * ILP + lane], c = in[32 * ILP + 32 + lane];
    int x[ILP], y[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) {
        x[j] = in[32 * j + lane];
        y[j] = b;
    }
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int j = 0; j < ILP; ++j) gp_dpx_step(x[j], y[j], b, c);
        }
        t1 = gp_clock();
    }
    int* o = out + 2 * ILP * (blockIdx.x * blockDim.x + threadIdx.x);
#pragma unroll
    for (int j = 0; j < ILP; ++j) {
        o[2 * j] = x[j];
        o[2 * j + 1] = y[j];
    }
    gp_record(cycles, t0, t1);
}
