// LDS latency by pointer chase (the original sm_86 notes, shared memory, smem_latency_ld): each load's result
// is the shared-window byte address of the next load, so the timed region is UNROLL dependent LDS
// and nothing else. One warp; lane i chases words i, i+32, i+64, ... so each lane stays in bank i
// and the warp reads 32 banks once per step, conflict-free.
#include "gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 500
#endif
#define CHAIN_WORDS 2048

extern "C" __global__ void smem_latency_ld(unsigned long long* cycles, unsigned* sink) {
    __shared__ unsigned chain[CHAIN_WORDS];
    unsigned base = (unsigned)__cvta_generic_to_shared(chain);
    for (unsigned i = threadIdx.x; i < CHAIN_WORDS; i += blockDim.x)
        chain[i] = base + ((i + 32) % CHAIN_WORDS) * 4;
    __syncthreads();
    // The first address comes from memory and is checked before the start read, so no address
    // arithmetic can be scheduled into the timed region and the first link starts on a ready value.
    unsigned p = ((volatile unsigned*)chain)[threadIdx.x];
    if (p == 0u) sink[blockDim.x] = p;
    unsigned long long t0 = gp_clock();
#pragma unroll
    for (int i = 0; i < UNROLL; ++i)
        asm volatile("ld.shared.u32 %0, [%0];" : "+r"(p));
    unsigned long long t1 = gp_clock();
    sink[threadIdx.x] = p;
    gp_record(cycles, t0, t1);
}
