// mbarrier round trip (sm_90): one warp arrives on a shared-memory mbarrier (mbarrier.arrive) and
// waits for the phase it completed (mbarrier.try_wait in a loop until it returns true). The barrier
// expects 32 arrivals, one per lane, so the warp's arrive completes the phase: the timed region is
// arrive -> the waiter sees the phase complete.
//
//   TOKEN   0: mbarrier.try_wait.parity with the phase's parity (0): the wait does not depend on
//           the arrive's result and may issue before the arrive has landed (a false try_wait goes
//           round the loop); 1: mbarrier.try_wait with the state token the arrive returned, so the
//           wait issues once the arrive has returned its token
//   PASSES  the round trip runs PASSES times and the last is timed: the first brings the region
//           into the instruction caches. Each pass has its own barrier, initialised before the first
//           pass and used once (phase 0), so the parity is the constant 0 and no phase arithmetic
//           sits in the region
//
// SASS (NVRTC 13.5, sm_90): SYNCS.ARRIVE.TRANS64.A1T0 (arrive), SYNCS.PHASECHK.TRANS64.TRYWAIT
// (try_wait), and the wait loop's BSSY / @!P0 BRA / BSYNC; ptxas puts the retry path (YIELD,
// TRYWAIT, BRA back) out of line after the kernel's EXIT, so in address order the region holds one
// try_wait. The retries, if any, are timed: they run between the two clock reads.
// Below sm_90 the kernel is empty (it compiles, for the checks that read every kernel on every arch).
#include "gpuprops.cuh"

#ifndef TOKEN
#define TOKEN 0
#endif
#ifndef PASSES
#define PASSES 2
#endif

extern "C" __global__ void mbarrier_roundtrip(unsigned long long* cycles, unsigned* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(8) unsigned long long bars[PASSES];
    __shared__ unsigned slot[32];
    if (threadIdx.x < PASSES)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
                     ::"r"((unsigned)__cvta_generic_to_shared(&bars[threadIdx.x])), "r"(32u) : "memory");
    __syncthreads();
    unsigned lane = threadIdx.x & 31;
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        // This pass's barrier, pinned before the start read (gp_opaque): no address arithmetic in
        // the region.
        unsigned bar = gp_opaque((unsigned)__cvta_generic_to_shared(&bars[pass]), &slot[lane], sink);
        t0 = gp_clock();
#if TOKEN
        asm volatile("{\n\t.reg .b64 st;\n\t.reg .pred p;\n\t"
                     "mbarrier.arrive.shared::cta.b64 st, [%0];\n"
                     "GP_WAIT_%=:\n\t"
                     "mbarrier.try_wait.shared::cta.b64 p, [%0], st;\n\t"
                     "@!p bra GP_WAIT_%=;\n}" ::"r"(bar) : "memory");
#else
        asm volatile("{\n\t.reg .b64 st;\n\t.reg .pred p;\n\t"
                     "mbarrier.arrive.shared::cta.b64 st, [%0];\n"
                     "GP_WAIT_%=:\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n\t"
                     "@!p bra GP_WAIT_%=;\n}" ::"r"(bar) : "memory");
#endif
        t1 = gp_clock();
    }
    gp_record(cycles, t0, t1);
#endif
}
