// Shared timing conventions for every gpuprops kernel.
//
// * gp_clock() reads the SM cycle counter (CS2R Rx, SR_CLOCKLO). The "memory" clobber keeps loads
//   before the start read and stores after the stop read, so the timed region holds only the chain.
// * Lane 0 of each warp writes its (start, stop) pair to cycles[2*warp], cycles[2*warp+1]; warp is
//   the global warp index. The measure layer turns pairs into per-warp deltas and per-block spans.
// * Before launch, the measure layer patches the stop read to wait on every scoreboard, so the
//   region ends when its last variable-latency result (LDS, HMMA, STS read) is in.
#pragma once

__device__ __forceinline__ unsigned long long gp_clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
    return t;
}

__device__ __forceinline__ unsigned long long gp_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

__device__ __forceinline__ void gp_record(unsigned long long* cycles, unsigned long long t0, unsigned long long t1) {
    if ((threadIdx.x & 31) == 0) {
        unsigned w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
        cycles[2 * w] = t0;
        cycles[2 * w + 1] = t1;
    }
}

// %globaltimer beside the clock pairs (a kernel built with TIMER=1, KernelSpec.timer): warp w's (start, stop)
// nanoseconds after every warp's clock pair, at cycles[2 * warps + 2 * w], for a span to be read in time
// where the SM clock is not the clock of the unit that bounds it (an L2-bound rate moves with the SM's clock
// against the L2's). %globaltimer ticks every 32 ns on H100 (2026-11-26).
__device__ __forceinline__ void gp_record_timer(unsigned long long* cycles, unsigned long long g0, unsigned long long g1) {
    if ((threadIdx.x & 31) == 0) {
        unsigned warps = (gridDim.x * blockDim.x) >> 5;
        unsigned w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
        cycles[2 * warps + 2 * w] = g0;
        cycles[2 * warps + 2 * w + 1] = g1;
    }
}

// A value the compiler cannot rematerialise: it round-trips through shared memory and is tested
// before the caller's start read, so address arithmetic stays out of the timed region and the value
// is ready when the region starts. slot: this thread's own shared word.
__device__ __forceinline__ unsigned gp_opaque(unsigned v, volatile unsigned* slot, unsigned* sink) {
    *slot = v;
    v = *slot;
    if (v == 0xffffffffu) sink[0] = v;
    return v;
}
