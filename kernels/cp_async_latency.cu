// cp.async (LDGSTS) completion latency (sm_80 and newer): one warp, each lane copies SIZE bytes
// from global to shared memory with one cp.async, then waits for it (cp.async.commit_group +
// cp.async.wait_group 0). The copy completes through the async-copy group counter, not a register
// scoreboard, so the timed region ends when wait_group returns: issue -> data in shared memory.
//
//   CG      0: cp.async.ca (cached in L1 too), 1: cp.async.cg (L2 only; SIZE must be 16)
//   SIZE    4 or 16 bytes per lane; lane l copies bytes [SIZE l, SIZE (l + 1)) of src, so the warp
//           reads 32 * SIZE contiguous bytes (one or four 128-byte lines); with CG, lane l copies
//           16 bytes at 16 (l mod 8): the warp reads one 128-byte line, so the copy's latency is
//           that line's L2 slice's, not the slowest of four lines' slices
//   PASSES  the copy runs PASSES times and the last is timed: the first brings the region into
//           the instruction caches and the source lines into L2 (and, for .ca, L1), so the timed
//           copy reads warm lines: an L1 hit for .ca, an L2 hit for .cg
//
// SASS (NVRTC 13.5, sm_90): LDGSTS.E[.128][.BYPASS.LTC128B.128], LDGDEPBAR, DEPBAR.LE SB0, 0x0.
// Below sm_80 the kernel is empty (it compiles, for the checks that read every kernel on every arch).
#include "gpuprops.cuh"

#ifndef CG
#define CG 0
#endif
#ifndef SIZE
#define SIZE 4
#endif
#ifndef PASSES
#define PASSES 2
#endif

#if CG
#if SIZE != 16
#error "cp.async.cg copies 16 bytes"
#endif
#define GP_CP "cp.async.cg.shared.global [%0], [%1], 16;"
#elif SIZE == 4
#define GP_CP "cp.async.ca.shared.global [%0], [%1], 4;"
#elif SIZE == 8
#define GP_CP "cp.async.ca.shared.global [%0], [%1], 8;"
#elif SIZE == 16
#define GP_CP "cp.async.ca.shared.global [%0], [%1], 16;"
#else
#error "SIZE must be 4, 8 or 16"
#endif

extern "C" __global__ void cp_async_latency(unsigned long long* cycles, const uint4* src, unsigned* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __shared__ __align__(16) unsigned char dst[32 * 16];
    __shared__ unsigned slot[32];
    unsigned lane = threadIdx.x & 31;
    // Both addresses pinned before the start read (gp_opaque), so no address arithmetic sits in the
    // region; the source is one 64-bit pointer, pinned as its offset from src.
    unsigned d = gp_opaque((unsigned)__cvta_generic_to_shared(dst) + lane * SIZE, &slot[lane], sink);
    unsigned off = gp_opaque(CG ? lane % 8 * 16 : lane * SIZE, &slot[lane], sink);
    const unsigned char* s = reinterpret_cast<const unsigned char*>(src) + off;
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
        asm volatile(GP_CP ::"r"(d), "l"(s) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        t1 = gp_clock();
    }
    sink[32 + lane] = reinterpret_cast<volatile unsigned*>(dst)[lane];
    gp_record(cycles, t0, t1);
#endif
}
