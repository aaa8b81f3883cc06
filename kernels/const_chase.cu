// Constant-cache hit latency: a dependent chase through __constant__ memory, one warp.
//
// gp_const_next holds NODES words; word i holds the byte offset of word (i + STRIDE) % NODES, one
// cycle through all of them (STRIDE odd, NODES a power of two). Each hop loads the word at the
// offset the previous hop returned: ld.const.u32 off, [gp_const_next + off], which is
//   LDC Rn, c[0x3][Rm]       (Rm the previous LDC's result)
// on sm_90 (NVRTC 13.5): the offset is a register, so no constant-bank operand can be folded into
// another instruction and no uniform load (ULDC) can stand in for it. Every lane starts from the
// offset in start[lane]; the host gives them all the same one, so each LDC reads one address for
// the whole warp (a broadcast: differing addresses would be serialised).
//
// The table (NODES * 4 bytes, 256 by default) is small enough for the SM's constant cache. The
// chain runs PASSES times and only the last pass is timed: the first brings the table and the
// region's code into their caches, so every timed hop is a constant-cache hit. UNROLL hops per
// pass; cycles per hop = (stop - start) / UNROLL.
//
// SERIAL=1 (one warp a block, a block on every SM): the blocks run one at a time, in block order,
// through the ``turn`` counter, so each SM's chase has the constant caches to itself. The level
// behind the constant L1 is shared by several SMs, and its latency from each is set by where that
// SM lies: one H100 (GPU-e83f86ff, 2026-11-26) read nine levels from 93.2 to 111.2 cycles a hop over
// its 132 SMs, SMs of one TPC alike; run all at once, SMs read up to 1.2 cycles off their own.
//
// The capacity sweep (hwtests/test_cache_capacity.py) sets NODES up to 16384 (the whole 64 KiB
// constant bank) and WARM_HOPS = NODES: that many untimed hops before the passes walk the whole
// table once, so the timed hops find in each constant-cache level what it can keep of it. STRIDE
// must then be odd and share no factor with NODES (one cycle through every word).
#include "gpuprops.cuh"

#ifndef NODES
#define NODES 64
#endif
#ifndef STRIDE
#define STRIDE 17
#endif
#ifndef UNROLL
#define UNROLL 256
#endif
#ifndef PASSES
#define PASSES 2
#endif
#ifndef WARM_HOPS
#define WARM_HOPS 0
#endif
#ifndef SERIAL
#define SERIAL 0
#endif

struct GpConstTable {
    unsigned next[NODES];
};

__host__ __device__ constexpr GpConstTable gp_const_table() {
    GpConstTable t{};
    for (unsigned i = 0; i < NODES; ++i) t.next[i] = 4u * ((i + STRIDE) % NODES);
    return t;
}

__constant__ GpConstTable gp_const_next = gp_const_table();

extern "C" __global__ void const_chase(unsigned long long* cycles, const unsigned* start, unsigned* out,
                                       unsigned* turn) {
#if SERIAL
    // one block at a time, in block order: block b waits until b blocks have finished
    if (threadIdx.x == 0)
        while (atomicAdd(turn, 0u) != blockIdx.x) {
        }
    __syncwarp();
#endif
    unsigned off = start[threadIdx.x & 31];
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int i = 0; i < WARM_HOPS; ++i) off = *(const unsigned*)((const char*)gp_const_next.next + off);
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) off = *(const unsigned*)((const char*)gp_const_next.next + off);
        t1 = gp_clock();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = off;
    gp_record(cycles, t0, t1);
#if SERIAL
    // the next block's turn; the last block sets the counter back to 0 for the next launch
    __threadfence();
    if (threadIdx.x == 0) atomicExch(turn, blockIdx.x + 1 == gridDim.x ? 0u : blockIdx.x + 1);
#endif
}
