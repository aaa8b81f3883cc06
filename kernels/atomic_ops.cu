// Latency and throughput of 32-bit integer atomic adds, by SPACE and RET:
//
//   SPACE RET  PTX (per step, chain j)                 SASS on sm_90 (NVRTC 13.5)
//   0     1    atom.shared.add.u32 v, [a + 128 j], v    ATOMS.ADD
//   1     1    atom.global.add.u32 v, [a + 128 j], v    ATOMG.E.ADD.STRONG.GPU
//   1     0    red.global.add.u32  [a + 128 j], v       RED.E.ADD.STRONG.GPU
//
// Addresses: warp w's chain j works on the 128-byte group of 32 words that starts at word
// 32 (w ILP + j) of the buffer (shared: a static array; global: ``buf``, zeroed by the host), and
// lane l on byte lane_off[l] of its group, which the host fills: 4 l (every lane on its own word of
// one 128-byte line) or 0 (all 32 lanes on one word). The pattern is data, so the compiler cannot
// see it (it would merge a warp's same-address atomics into one if it could) and both patterns run
// the same code. Each address is computed, and made opaque (gp_opaque), before the start read.
//
// With RET 1, each atomic's operand is the value the previous atomic of its chain returned, so it
// cannot issue before that one is done: ILP 1, one warp, UNROLL steps, PASSES 2 (the second is timed,
// with the region in the instruction caches and the global lines in L2) gives the latency per
// atomic. A global atomic is performed in L2 (no DRAM), in the slice that owns its line; on H100/H200
// the L2 is two partitions and a line in the far one costs more, so the host runs this one-line chain
// on many lines of a large buffer, one per launch, passing ``buf`` from the chosen 128-byte line on
// (hwtests/specs_sync_units.py, atomic_line_offsets): the code is the same for every line.
// With RET 0 (red) nothing is returned: the steps are independent and the stop read waits on
// nothing of theirs, so only a throughput shape makes sense, where the memory system's back
// pressure holds the issue rate to the rate reductions are done at; ITERS is large enough that the
// reductions still in flight at the stop read are a small part of the span.
//
// Throughput: ILP chains x ITERS trips of UNROLL steps per warp, many warps, one block, one pass,
// cycles per warp-wide atomic instruction per SM over the block's span (a shape whose span varies
// with how the warps interleave runs more ITERS: the same loop, timed for longer). The chains of a
// warp and the warps never share a word, so the same-address pattern contends only within a warp
// instruction. ``out`` holds ILP words per thread (each chain's last value).
#include "gpuprops.cuh"

#ifndef SPACE
#define SPACE 0
#endif
#ifndef RET
#define RET 1
#endif
#ifndef ILP
#define ILP 1
#endif
#ifndef UNROLL
#define UNROLL 64
#endif
#ifndef ITERS
#define ITERS 1
#endif
#ifndef PASSES
#define PASSES 1
#endif
#define GP_MAX_WARPS 32  // blocks of at most 1024 threads

#if SPACE == 0 && RET == 0
#error "red.shared does not exist in PTX; shared reductions are atom.shared with the result unused"
#endif

#if SPACE == 0
__shared__ unsigned gp_words[GP_MAX_WARPS * ILP * 32];
#endif

template <int J>
__device__ __forceinline__ void gp_atomic_step(unsigned& v, unsigned long long a) {
#if SPACE == 0
    asm volatile("atom.shared.add.u32 %0, [%1+%2], %0;" : "+r"(v) : "r"((unsigned)a), "n"(128 * J) : "memory");
#elif RET == 1
    asm volatile("atom.global.add.u32 %0, [%1+%2], %0;" : "+r"(v) : "l"(a), "n"(128 * J) : "memory");
#else
    asm volatile("red.global.add.u32 [%0+%1], %2;" ::"l"(a), "n"(128 * J), "r"(v) : "memory");
#endif
}

template <int J>
__device__ __forceinline__ void gp_atomic_steps(unsigned* v, unsigned long long a) {
    if constexpr (J < ILP) {
        gp_atomic_step<J>(v[J], a);
        gp_atomic_steps<J + 1>(v, a);
    }
}

extern "C" __global__ void atomic_ops(unsigned long long* cycles, const unsigned* lane_off, unsigned* buf,
                                      unsigned* out) {
    __shared__ unsigned slot[1024];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned group = warp * ILP * 32;  // this warp's first word
#if SPACE == 0
    for (unsigned i = lane; i < ILP * 32; i += 32) gp_words[group + i] = 0;
    __syncthreads();
    unsigned long long a = (unsigned)__cvta_generic_to_shared(gp_words) + 4 * group + lane_off[lane];
#else
    unsigned long long a = (unsigned long long)buf + 4 * group + lane_off[lane];
#endif
    a = gp_opaque((unsigned)a, slot + threadIdx.x, out) | (SPACE == 0 ? 0ull : a & ~0xffffffffull);
    unsigned v[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) v[j] = lane + 1 + 32 * j;  // distinct, so no chain starts as a copy
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
#pragma unroll 1
        for (int it = 0; it < ITERS; ++it) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) gp_atomic_steps<0>(v, a);
        }
        t1 = gp_clock();
    }
#pragma unroll
    for (int j = 0; j < ILP; ++j) out[ILP * (blockIdx.x * blockDim.x + threadIdx.x) + j] = v[j];
    gp_record(cycles, t0, t1);
}
