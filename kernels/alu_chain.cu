// Dependent latency and issue rate of one ALU / SFU / shuffle instruction, chosen by OP:
//
//   OP  PTX (per step, in place on x)                 SASS (the region's intended opcode)
//   1   shfl.sync.bfly.b32 x, x, 1, 0x1f, -1          SHFL.BFLY
//   2   shfl.sync.idx.b32  x, x, x, 0x1f, -1          SHFL.IDX (x is also the source lane)
//   3   ex2.approx.ftz.f32 x, x                       MUFU.EX2
//   4   rsqrt.approx.ftz.f32 x, x                     MUFU.RSQ
//   5   sin.approx.ftz.f32 x, x                       FMUL.RZ (range reduction) then MUFU.SIN
//   6   fma.rn.f64 x, x, x, x                         DFMA
//   7   mad.lo.u32 x, x, x, x                         IMAD
//
// ILP independent chains, UNROLL steps each: each step's result is the next step's only operand
// (one register in every source slot, so no register-bank conflict adds to the latency). ILP=1, one
// warp: dependent latency per step; ILP 8 x 4 warps per SM sub-partition: cycles per instruction per
// sub-partition (the pipe's rate). Inputs are loaded before the start read, results stored after the
// stop read, so the timed region holds the chains and nothing else. The chains run PASSES times and
// only the last pass is timed: for the latency shape (PASSES 2) the first brings the region into the
// instruction caches. Timed on its first pass, a DFMA chain (a fixed 8-cycle stall between steps)
// read 9.9-10.6 cycles per step, varying with the SM and the launch, and 7.938 on every SM once warm
// (H100, 2026-11-21, tools/explore_dfma.py); FFMA read the same either way. hwtests/specs.py says why
// the throughput shapes run one pass. ``in`` holds 32 * ILP values of
// the chain's type (lane l of chain j starts from in[32 j + l]). For OP=2 the host fills in with lane
// numbers, e.g. (l + 1) % 32: each step reads the lane its value names, so the values stay lane
// numbers and the chain is a permutation walk the compiler cannot fold (a constant source lane makes
// every value after the first warp-uniform, and ptxas drops the later shuffles).
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

#if OP == 6
typedef double gp_t;
#define GP_C "d"
#elif OP == 7 || OP == 1 || OP == 2
typedef unsigned gp_t;
#define GP_C "r"
#else
typedef float gp_t;
#define GP_C "f"
#endif

#if OP == 1
#define GP_STEP "shfl.sync.bfly.b32 %0, %0, 1, 0x1f, 0xffffffff;"
#elif OP == 2
#define GP_STEP "shfl.sync.idx.b32 %0, %0, %0, 0x1f, 0xffffffff;"
#elif OP == 3
#define GP_STEP "ex2.approx.ftz.f32 %0, %0;"
#elif OP == 4
#define GP_STEP "rsqrt.approx.ftz.f32 %0, %0;"
#elif OP == 5
#define GP_STEP "sin.approx.ftz.f32 %0, %0;"
#elif OP == 6
#define GP_STEP "fma.rn.f64 %0, %0, %0, %0;"
#elif OP == 7
#define GP_STEP "mad.lo.u32 %0, %0, %0, %0;"
#else
#error "OP must be 1..7"
#endif

extern "C" __global__ void alu_chain(unsigned long long* cycles, const gp_t* in, gp_t* out) {
    gp_t x[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) x[j] = in[32 * j + (threadIdx.x & 31)];  // per lane: a shuffle of a
    // warp-uniform value would be folded away
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int j = 0; j < ILP; ++j) asm volatile(GP_STEP : "+" GP_C(x[j]));
        }
        t1 = gp_clock();
    }
    gp_t s = 0;
#pragma unroll
    for (int j = 0; j < ILP; ++j) s += x[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    gp_record(cycles, t0, t1);
}
