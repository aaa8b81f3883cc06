// L1 data-cache load bandwidth of one SM: every thread of one 1024-thread block loads 16 bytes per
// instruction, UNROLL loads per loop trip, ``iters`` trips. Load u of thread t reads the 16 bytes at
// 16 t + STRIDE u of a global buffer (STRIDE bytes apart: an immediate offset, so no address
// arithmetic in the loop, and no two loads of one thread read the same address, which ptxas would
// merge into one); a warp's load reads four whole 128-byte lines. The footprint, 16 KiB + (UNROLL - 1)
// x STRIDE (47 KiB by default); odd trips read the next 47 KiB. Both fit in L1, and every thread runs one
// trip over each before the start read, so every timed load is an L1 hit.
//
// The loads are ld.global.ca (SASS LDG.E.128.STRONG.SM, cached in L1); each one's four words are
// XORed into one register (LOP3), stored after the stop read. The address and the
// trip count are pinned before the start read (gp_opaque), so the loop holds the loads and its own
// control only.
#include "gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 32
#endif
#ifndef STRIDE
#define STRIDE 1024
#endif
#define HALF (16384ull + (UNROLL - 1) * STRIDE)  // bytes: the footprint of one trip

// UNROLL loads from addr + u * STRIDE, each load's four words folded into acc (ptxas drops a load
// whose value is never used, asm volatile or not, and narrows one whose words are partly used)
#define GP_L1_LOADS(addr)                                                                               \
    _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                                                \
        unsigned x0, x1, x2, x3;                                                                        \
        asm volatile("ld.global.ca.v4.u32 {%0, %1, %2, %3}, [%4];"                                      \
                     : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3) : "l"((addr) + u * STRIDE) : "memory");   \
        acc ^= x0 ^ x1 ^ x2 ^ x3;                                                                       \
    }

extern "C" __global__ void __launch_bounds__(1024) l1_bandwidth(unsigned long long* cycles, const uint4* src,
                                                                unsigned* sink, int iters) {
    __shared__ unsigned slot[1024];
    const unsigned char* p = reinterpret_cast<const unsigned char*>(src) + 16 * (threadIdx.x & 1023);
    unsigned lo = gp_opaque((unsigned)(unsigned long long)p, &slot[threadIdx.x], sink);
    unsigned hi = gp_opaque((unsigned)((unsigned long long)p >> 32), &slot[threadIdx.x], sink);
    unsigned long long addr = ((unsigned long long)hi << 32) | lo;
    int trips = (int)gp_opaque((unsigned)iters, &slot[threadIdx.x], sink);
    unsigned acc = 0;
    GP_L1_LOADS(addr)  // the warming trips (both halves): the lines come into L1
    GP_L1_LOADS(addr + HALF)
    slot[threadIdx.x] = acc;  // and they complete before the start read
    int it = 0;
    __syncthreads();
    unsigned long long t0 = gp_clock();
    // Odd trips read the buffer's second half: the addresses change trip to trip, so ptxas cannot
    // hoist the loads out of the loop as invariant.
#pragma unroll 1
    do {  // at least one trip: no zero-trip guard in the region
        GP_L1_LOADS(addr + ((unsigned long long)(it & 1) * HALF))
    } while (++it < trips);
    unsigned long long t1 = gp_clock();
    sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    gp_record(cycles, t0, t1);
}
