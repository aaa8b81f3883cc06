// Bulk copies global <-> shared (sm_90). Loads (global -> shared) complete through an mbarrier: lane 0 of one warp arms the
// barrier with the bytes to expect (mbarrier.arrive.expect_tx) and issues the copy; every lane then
// waits for the barrier's phase (mbarrier.try_wait.parity in a loop until it returns true). The
// copy completes through the barrier's transaction count, not a register scoreboard, so the timed
// region ends when the wait returns: issue -> data in shared memory.
//
//   bulk_copy   cp.async.bulk (non-tensor): ``bytes`` contiguous bytes (a multiple of 16, at most
//               SMEM_BYTES), from ``src``
//   tma_tensor  cp.async.bulk.tensor.DIMd.tile through the tensor map ``tmap`` (built on the host
//               with cuTensorMapEncodeTiled, passed by value as a __grid_constant__ 128-byte
//               parameter): the box at coordinate 0 of every dimension
//
// The copy runs PASSES times and the last is timed: the first brings the region into the
// instruction caches and the source into L2 (bulk copies do not allocate in L1), so the timed copy
// reads L2 hits. Each pass has its own mbarrier, initialised before the first pass and used once
// (phase 0), so the wait's parity is the constant 0 and no phase arithmetic sits in the region.
// Lane 0 alone arms and copies: ptxas branches around the two for the other lanes and issues the
// copy (uniform-register operands) inside its ELECT loop, which runs once; that is the code one
// thread's bulk copy is, and it is timed with the copy.
//
//   tma_store   cp.async.bulk.tensor.DIMd.global.shared::cta.bulk_group (a TMA store, shared ->
//               global) of the box at the origin, then cp.async.bulk.commit_group and
//               cp.async.bulk.wait_group 0 (WAIT_READ 0: until the writes are done) or
//               cp.async.bulk.wait_group.read 0 (WAIT_READ 1: until the source has been read, when the
//               shared memory may be written again). A store completes through the issuing thread's
//               bulk-async group, so lane 0 alone issues, commits and waits, and lane 0's clock pair is
//               the one recorded (gp_record). The shared source is written and fenced for the async
//               proxy (fence.proxy.async.shared::cta) before the start read.
//               On sm_90 both waits compile to the same DEPBAR.LE SB0, 0x0 on the commit's
//               (UTMACMDFLUSH's) read scoreboard; wait_group 0 adds only CCTL.IVALL after it. So the
//               two waits time one event.
//   STORE_VISIBLE=1 (tma_store takes one more argument, ``dst``: the tensor's global address)
//               times something else: from the store's issue until a strong load from this SM
//               (ld.relaxed.gpu, LDG.E.STRONG.GPU: L2, not L1) reads the timed pass's values in every
//               row of the box. Lane r polls the last word of row r (STORE_ROW_WORDS words a row in
//               the tensor), the warp until all 32 lanes see them (VOTE.ALL); no wait_group in the
//               region (lane 0 waits after the stop read, before the source is written again). Each
//               pass stores values of its own (word i of the box: i + (pass + 1) << 16; the tensor starts
//               zeroed), written and fenced before the start read. Each poll waits for the one before
//               it (one L2 round trip, RT), so the region ends between RT/2 and 1.5 RT after the last
//               row lands in L2.
//               One warp a block, the blocks (one an SM) one at a time in block order through the
//               ``turn`` counter (one more argument), block b storing the box at rows 32 b .. 32 b + 31 of
//               the tensor (STORE_ROW_WORDS words a row, 32 x gridDim.x rows): each block's reading is
//               its own SM's and its own 32 lines', so the median over the blocks does not follow which
//               L2 slices one box's lines fell on (one box at the origin, read from one SM, moved
//               514-537 and 541-560 cycles between processes on two H100s, 2026-11-26).
//
//   tma_stream  throughput, not latency: every warp of ISSUERS a block streams 2D boxes from L2 into a
//               ring of its own, STAGES stages of dynamic shared memory, one box (``stage_bytes``) a stage
//               under one mbarrier. Each trip the lane elect.sync picks arms the stage the trip is at
//               (arrive.expect_tx) and issues its cp.async.bulk.tensor.2d; then the warp waits for the stage
//               it refills next (try_wait.parity on the phase its copy of a round ago completes).
//               ``trips`` trips a warp (a multiple of STAGES), the start read before the first, the stop
//               read after the last wait: the copies waited for in the region are those of the first
//               trips - STAGES + 1 trips; the others are waited for after the stop read (before the block
//               exits). Every stage's phase 0 is completed before the start read (one plain arrive each),
//               so the first round's waits return at once. Warp k (= b * ISSUERS + w) starts at row
//               ``walks[2k]`` and moves ``walks[2k + 1]`` rows on each trip (round to row 0 past
//               ``tensor_rows``): the host picks the walk (hwtests/specs_async.py tma_stream_walks). L2 hits
//               after the first round: bulk and tensor copies do not allocate in L1. Everything the loop
//               reads is pinned in registers before the start read, the tensor map's generic address too (gp_opaque64): the device's NVRTC 13.0 otherwise
//               reloads it in the region (LDC.64 c[0x0][...]). elect.sync, not a lane-0 branch: ptxas
//               then issues the arm and the copy once, straight line (WARPSYNC.ALL, ELECT, the copy's
//               R2URs), where ``if (lane == 0)`` gave an ELECT loop round each copy (BRA.U.ANY) and, with
//               NVRTC 13.0, a per-trip VOTEU.ALL. SASS per trip (NVRTC 13.5 and 13.0, nvcc 13.0 alike):
//               SYNCS.ARRIVE.TRANS64, UTMALDG.2D, SYNCS.PHASECHK.TRANS64.TRYWAIT (retries out of line),
//               with the loop's control and the stage's index, parity and addresses: 27 instructions.
//               TIMER=1: each warp also reads %globaltimer just before its start read and just after its stop
//               read (outside the region), for an L2-bound rate in time rather than in SM cycles.
//
// SASS (NVRTC 13.5, sm_90): SYNCS.ARRIVE.TRANS64 (arrive.expect_tx), UBLKCP.S.G / UTMALDG.1D /
// UTMALDG.2D, SYNCS.PHASECHK.TRANS64.TRYWAIT, with ELECT, BRA.U.ANY and the wait loop's branch.
// Below sm_90 the kernels are empty (they compile, for the checks that read every kernel on every arch).
#include "gpuprops.cuh"

#ifndef PASSES
#define PASSES 2
#endif
#ifndef DIM
#define DIM 2
#endif
#define SMEM_BYTES 16384
#ifndef WAIT_READ
#define WAIT_READ 0
#endif
#ifndef TIMER
#define TIMER 0  // tma_stream: 1 also records each warp's %globaltimer span (gp_record_timer)
#endif
#ifndef STORE_VISIBLE
#define STORE_VISIBLE 0
#endif
#ifndef STORE_ROW_WORDS
#define STORE_ROW_WORDS 64  // the stored tensor's innermost dimension, in 4-byte words
#endif
#if STORE_VISIBLE && DIM != 2
#error "STORE_VISIBLE polls the 32 rows of a 2D box of 32 x 32 words: DIM must be 2"
#endif

struct __align__(64) gp_tensor_map {
    unsigned long long words[16];  // CUtensorMap: 128 opaque bytes, 64-byte aligned
};

__device__ __forceinline__ void gp_wait_phase0(unsigned bar) {
    asm volatile(
        "{\n\t.reg .pred p;\n"
        "GP_WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n\t"
        "@!p bra GP_WAIT_%=;\n}" ::"r"(bar) : "memory");
}

// One mbarrier per pass, each expecting one arrival (lane 0's arrive.expect_tx).
__device__ __forceinline__ void gp_init_bars(unsigned long long* bars) {
    if (threadIdx.x < PASSES)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&bars[threadIdx.x]))
                     : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
}

extern "C" __global__ void bulk_copy(unsigned long long* cycles, const uint4* src, unsigned bytes, unsigned* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) unsigned char dst[SMEM_BYTES];
    __shared__ __align__(8) unsigned long long bars[PASSES];
    __shared__ unsigned slot[32];
    gp_init_bars(bars);
    unsigned lane = threadIdx.x & 31;
    // Shared addresses and the byte count are warp-uniform (uniform registers): only the leader
    // test is per lane, and it is pinned before the start read.
    unsigned d = (unsigned)__cvta_generic_to_shared(dst), n = bytes;
    unsigned leader = gp_opaque(lane, &slot[lane], sink);
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        unsigned bar = (unsigned)__cvta_generic_to_shared(&bars[pass]);
        t0 = gp_clock();
        asm volatile(
            "{\n\t.reg .pred p;\n\t.reg .b64 st;\n\t"
            "setp.eq.u32 p, %3, 0;\n\t"
            "@p mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %2;\n\t"
            "@p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%1], [%4], %2, [%0];\n}"
            ::"r"(bar), "r"(d), "r"(n), "r"(leader), "l"(src) : "memory");
        gp_wait_phase0(bar);
        t1 = gp_clock();
    }
    sink[32 + lane] = reinterpret_cast<volatile unsigned*>(dst)[lane];
    gp_record(cycles, t0, t1);
#endif
}

extern "C" __global__ void tma_tensor(unsigned long long* cycles, const __grid_constant__ gp_tensor_map tmap,
                                      unsigned bytes, unsigned* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) unsigned char dst[SMEM_BYTES];
    __shared__ __align__(8) unsigned long long bars[PASSES];
    __shared__ unsigned slot[32];
    gp_init_bars(bars);
    unsigned lane = threadIdx.x & 31;
    // Shared addresses and the byte count are warp-uniform (uniform registers): only the leader
    // test is per lane, and it is pinned before the start read.
    unsigned d = (unsigned)__cvta_generic_to_shared(dst), n = bytes;
    unsigned leader = gp_opaque(lane, &slot[lane], sink);
    unsigned x = 0u;  // the box's coordinates
    unsigned long long map = reinterpret_cast<unsigned long long>(&tmap);
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        unsigned bar = (unsigned)__cvta_generic_to_shared(&bars[pass]);
        t0 = gp_clock();
#if DIM == 1
        asm volatile(
            "{\n\t.reg .pred p;\n\t.reg .b64 st;\n\t"
            "setp.eq.u32 p, %3, 0;\n\t"
            "@p mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %2;\n\t"
            "@p cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%1], [%4, {%5}], [%0];\n}"
            ::"r"(bar), "r"(d), "r"(n), "r"(leader), "l"(map), "r"(x) : "memory");
#elif DIM == 2
        asm volatile(
            "{\n\t.reg .pred p;\n\t.reg .b64 st;\n\t"
            "setp.eq.u32 p, %3, 0;\n\t"
            "@p mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %2;\n\t"
            "@p cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%1], [%4, {%5, %5}], [%0];\n}"
            ::"r"(bar), "r"(d), "r"(n), "r"(leader), "l"(map), "r"(x) : "memory");
#else
#error "DIM must be 1 or 2"
#endif
        gp_wait_phase0(bar);
        t1 = gp_clock();
    }
    sink[32 + lane] = reinterpret_cast<volatile unsigned*>(dst)[lane];
    gp_record(cycles, t0, t1);
#endif
}

#ifndef STAGES
#define STAGES 4
#endif
#ifndef ISSUERS
#define ISSUERS 1
#endif

__device__ __forceinline__ void gp_wait_parity(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred p;\n"
        "GP_WAITP_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
        "@!p bra GP_WAITP_%=;\n}" ::"r"(bar), "r"(parity) : "memory");
}

// gp_opaque for a 64-bit value (the tensor map's generic address): pinned in a register pair before the
// start read, so no compiler reloads the parameter's address (LDC / ULDC of c[0x0][...]) in the region.
__device__ __forceinline__ unsigned long long gp_opaque64(unsigned long long v, volatile unsigned long long* slot,
                                                          unsigned* sink) {
    *slot = v;
    v = *slot;
    if (v == ~0ull) sink[0] = 0u;
    return v;
}

extern "C" __global__ void tma_stream(unsigned long long* cycles, const __grid_constant__ gp_tensor_map tmap,
                                      const unsigned* walks, unsigned stage_bytes, int trips, unsigned tensor_rows,
                                      unsigned* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) unsigned long long bars[ISSUERS * STAGES];
    __shared__ __align__(8) unsigned long long wide[32 * ISSUERS];
    __shared__ unsigned slot[32 * ISSUERS];
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x < ISSUERS * STAGES)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&bars[threadIdx.x]))
                     : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    // phase 0 of every stage completed: the first round's waits return at once
    if (threadIdx.x < ISSUERS * STAGES)
        asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n}"
                     ::"r"((unsigned)__cvta_generic_to_shared(&bars[threadIdx.x])) : "memory");
    __syncthreads();
    // this warp's ring: its STAGES barriers and stages; everything the loop reads pinned before the start read
    volatile unsigned* mine = &slot[threadIdx.x];
    unsigned bar0 = gp_opaque((unsigned)__cvta_generic_to_shared(&bars[warp * STAGES]), mine, sink);
    unsigned n = gp_opaque(stage_bytes, mine, sink);
    unsigned ring0 = gp_opaque((unsigned)__cvta_generic_to_shared(ring) + warp * STAGES * stage_bytes, mine, sink);
    unsigned k = blockIdx.x * ISSUERS + warp;
    unsigned y = gp_opaque(walks[2 * k], mine, sink), step = gp_opaque(walks[2 * k + 1], mine, sink);
    unsigned wrap = gp_opaque(tensor_rows, mine, sink);
    int count = (int)gp_opaque((unsigned)trips, mine, sink);
    unsigned long long map = gp_opaque64(reinterpret_cast<unsigned long long>(&tmap), &wide[threadIdx.x], sink);
    // the loop's state, pinned like the rest (constants would be set after the start read)
    unsigned x = gp_opaque(0u, mine, sink), s = gp_opaque(0u, mine, sink), parity = gp_opaque(0u, mine, sink);
    int it = (int)gp_opaque(0u, mine, sink);
    __syncwarp();
#if TIMER
    const unsigned long long g0 = gp_globaltimer();
#endif
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    do {  // at least one trip: no zero-trip guard in the region
        unsigned bar = bar0 + 8u * s, dst = ring0 + n * s;
        // elect.sync picks one lane of the (converged) warp: ptxas issues the arm and the copy once, straight
        // line (ELECT, the copy's R2URs), with no per-lane branch, vote or ELECT loop round them
        asm volatile(
            "{\n\t.reg .pred p;\n\t.reg .b64 st;\n\t"
            "elect.sync _|p, 0xffffffff;\n\t"
            "@p mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t"
            "@p cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%2], [%3, {%4, %5}], [%0];\n}"
            ::"r"(bar), "r"(n), "r"(dst), "l"(map), "r"(x), "r"(y) : "memory");
        y += step;  // this warp's next box (step < wrap)
        if (y >= wrap) y -= wrap;
        if (++s == STAGES) {
            s = 0u;
            parity ^= 1u;
        }
        gp_wait_parity(bar0 + 8u * s, parity);  // the stage the next trip refills: its copy of a round ago
    } while (++it < count);
    unsigned long long t1 = gp_clock();
#if TIMER
    const unsigned long long g1 = gp_globaltimer();
#endif
    // the last round's copies (trips is a multiple of STAGES: s is 0 again, and every stage's last copy
    // completes the phase of parity ``parity``), before the block's shared memory is released
#pragma unroll
    for (int k = 0; k < STAGES; ++k) gp_wait_parity(bar0 + 8u * k, parity);
    sink[32 + lane] = reinterpret_cast<volatile unsigned*>(ring)[lane];
    gp_record(cycles, t0, t1);
#if TIMER
    gp_record_timer(cycles, g0, g1);
#endif
#endif
}

#if STORE_VISIBLE
// The values pass ``pass`` stores: word i of the box (row-major, 32 words a row) holds i + (pass + 1) << 16.
__device__ __forceinline__ unsigned gp_store_word(unsigned i, int pass) { return i + ((unsigned)(pass + 1) << 16); }
#endif

extern "C" __global__ void tma_store(unsigned long long* cycles, const __grid_constant__ gp_tensor_map tmap,
#if STORE_VISIBLE
                                     const unsigned* dst,
#endif
                                     unsigned* sink
#if STORE_VISIBLE
                                     , unsigned* turn
#endif
                                     ) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) unsigned char src[SMEM_BYTES];
    __shared__ unsigned slot[32];
    unsigned lane = threadIdx.x & 31;
#if !STORE_VISIBLE
    for (unsigned i = lane; i < SMEM_BYTES / 4; i += 32) reinterpret_cast<unsigned*>(src)[i] = i;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
#endif
    unsigned s = (unsigned)__cvta_generic_to_shared(src);
    unsigned leader = gp_opaque(lane, &slot[lane], sink);
    unsigned x = 0u;
    unsigned long long map = reinterpret_cast<unsigned long long>(&tmap);
#if STORE_VISIBLE
    // this block's box: rows 32 b .. 32 b + 31 (a uniform value: the store's coordinate needs no set-up in the region)
    unsigned row0 = 32u * blockIdx.x;
    const unsigned* row_end = dst + (row0 + lane) * STORE_ROW_WORDS + 31;  // lane r: the last word of row r of the box
    // one block at a time, in block order: block b waits until b blocks have finished
    if (lane == 0)
        while (atomicAdd(turn, 0u) != blockIdx.x) {
        }
    __syncthreads();
#endif
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
#if STORE_VISIBLE
        for (unsigned i = lane; i < 32 * 32; i += 32) reinterpret_cast<unsigned*>(src)[i] = gp_store_word(i, pass);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        // what lane r's poll must read, pinned before the start read (no arithmetic in the region)
        unsigned want = gp_opaque(gp_store_word(lane * 32 + 31, pass), &slot[lane], sink);
#endif
        t0 = gp_clock();
        if (leader == 0) {
#if DIM == 1
            asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];"
                         ::"l"(map), "r"(s), "r"(x) : "memory");
#elif DIM == 2 && STORE_VISIBLE
            asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                         ::"l"(map), "r"(s), "r"(x), "r"(row0) : "memory");
#elif DIM == 2
            asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %2}], [%1];"
                         ::"l"(map), "r"(s), "r"(x) : "memory");
#else
#error "DIM must be 1 or 2"
#endif
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#if STORE_VISIBLE
        }
        unsigned seen;
        do {
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(row_end) : "memory");
        } while (!__all_sync(0xffffffffu, seen == want));
        t1 = gp_clock();
        if (leader == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // before the source is written again
        __syncwarp();
#else
#if WAIT_READ
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#else
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
        }
        t1 = gp_clock();
#endif
    }
    gp_record(cycles, t0, t1);
#if STORE_VISIBLE
    // the next block's turn; the last block sets the counter back to 0 for the next launch
    __threadfence();
    if (lane == 0) atomicExch(turn, blockIdx.x + 1 == gridDim.x ? 0u : blockIdx.x + 1);
#endif
#endif
}
