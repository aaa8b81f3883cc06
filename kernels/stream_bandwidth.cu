// Whole-GPU memory bandwidth in time units (pytest_gpuprops/throughput.py): grid-stride loops of
// 16-byte vector accesses over a buffer, UNROLL independent accesses per thread per loop trip, on a
// grid that fills every SM. The host times launches with CUDA events; thread 0 of each block stamps
// (clock64, %globaltimer) at its start and end, so the SM clock the launch ran at is known.
//
// stream_read     reads n16 16-byte vectors, reps times (LDG.E.128): DRAM read bandwidth over a
//                 buffer many times the L2.
// stream_read_cg  the same with ld.global.cg (LDG.E.128.STRONG.GPU: L2, not L1): L2 read bandwidth
//                 over a buffer a quarter of the L2, read reps times per launch.
// stream_copy     dst[i] = src[i] over n16 vectors, reps times (LDG.E.128 + STG.E.128): copy
//                 bandwidth, bytes read + bytes written.
// stream_write    dst[i] = (i, reps, 0, 0) over n16 vectors, reps times (STG.E.128): write bandwidth
//                 (the values depend on the index, so nothing is a memset the hardware could skip).
//
// Every access past n16 is skipped (the last loop trip of some threads is partial), so a launch makes
// exactly n16 * reps 16-byte reads (and as many writes for the copy). Each read's words are
// folded into one register per thread, stored only if they are all-ones (never, the buffers hold
// zeros), so no load can be dropped.
//
// Variants, to find the fastest way to stream DRAM (the defaults build the kernels described above;
// tests/test_stream_variants.py checks what each variant's loop holds):
//   STORE       the copy's and the write's stores: STORE_WB (default, st.global: STG.E.128), STORE_CS
//               (st.global.cs, evict-first streaming), STORE_WT (st.global.wt, write-through),
//               STORE_L2_EVICT_FIRST (st.global.L2::cache_hint with an L2 evict_first policy),
//               STORE_L1_NO_ALLOCATE (st.global.L1::no_allocate)
//   LOAD        the copy's and stream_read's loads: LOAD_PLAIN (default, ld.global: LDG.E.128),
//               LOAD_CS (ld.global.cs), LOAD_LU (ld.global.lu, last use), LOAD_NC (ld.global.nc,
//               the read-only path), LOAD_L2_EVICT_FIRST (ld.global.L2::cache_hint, L2 evict_first),
//               LOAD_L2_256B (ld.global.L2::256B, the L2 fetches 256-byte blocks)
//   LAYOUT      which vectors a trip covers: LAYOUT_THREAD_STRIDE (default: a thread's UNROLL accesses
//               are the whole grid apart), LAYOUT_BLOCK_TILE (a block covers BLOCK x UNROLL consecutive
//               vectors a trip, a thread's accesses BLOCK apart, the block's tiles the grid apart: on a
//               grid of n16 / (BLOCK x UNROLL) blocks each block makes one trip, the shape of
//               PyTorch's vectorized elementwise kernels), LAYOUT_BLOCK_CHUNK (each block owns one
//               contiguous range of n16 / grid vectors, rounded up to whole tiles, and walks it a tile
//               a trip), LAYOUT_SHARED_CHUNK (the buffer is n16 / CHUNK16 chunks of CHUNK16 vectors; block
//               b walks chunk b % chunks a tile a trip, so a grid of several blocks a chunk has many SMs
//               read each chunk at once: the L2's peak read into the SMs, the shape of RRZE-HPC
//               gpu-benches' gpu-l2-cache; the buffer's vectors past whole chunks are not read)
//   CHUNK16     LAYOUT_SHARED_CHUNK's chunk, in 16-byte vectors (default 32768: 512 KiB)
//   GUARD       GUARD_EACH (default: every access checks that it is inside the buffer), GUARD_TAIL
//               (whole trips make their accesses unchecked; only a last partial trip checks)
//   MIN_BLOCKS  the launch bounds' blocks per SM (default 2048 / BLOCK: 32 registers a thread);
//               fewer allow more registers, for a larger UNROLL
//   STAMPS      1 (default): thread 0 of each block stamps its start and end; 0: no stamps, for grids
//               of many small blocks, where 32 bytes of stamps a block would be writes of their own
// The BLOCK_TILE and BLOCK_CHUNK layouts take their blocks' size from BLOCK (the tile's offsets are
// then constants of the code): launch them with BLOCK threads a block.
#include "gpuprops.cuh"

#define STORE_WB 1
#define STORE_CS 2
#define STORE_WT 3
#define STORE_L2_EVICT_FIRST 4
#define STORE_L1_NO_ALLOCATE 5
#define LOAD_PLAIN 1
#define LOAD_CS 2
#define LOAD_LU 3
#define LOAD_NC 4
#define LOAD_L2_EVICT_FIRST 5
#define LOAD_L2_256B 6
#define LAYOUT_THREAD_STRIDE 1
#define LAYOUT_BLOCK_TILE 2
#define LAYOUT_BLOCK_CHUNK 3
#define LAYOUT_SHARED_CHUNK 4
#define GUARD_EACH 1
#define GUARD_TAIL 2

#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef BLOCK
#define BLOCK 256  // the launch's block size: at most 32 registers a thread, so 2048 threads fill an SM
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (2048 / BLOCK)
#endif
#ifndef STORE
#define STORE STORE_WB
#endif
#ifndef LOAD
#define LOAD LOAD_PLAIN
#endif
#ifndef LAYOUT
#define LAYOUT LAYOUT_THREAD_STRIDE
#endif
#ifndef GUARD
#define GUARD GUARD_EACH
#endif
#ifndef CHUNK16
#define CHUNK16 32768
#endif
#ifndef STAMPS
#define STAMPS 1
#endif
// A misspelt name is an undefined identifier, 0 in #if: refused here, never built as the default.
#if STORE < STORE_WB || STORE > STORE_L1_NO_ALLOCATE
#error "STORE must be STORE_WB, STORE_CS, STORE_WT, STORE_L2_EVICT_FIRST or STORE_L1_NO_ALLOCATE"
#endif
#if LOAD < LOAD_PLAIN || LOAD > LOAD_L2_256B
#error "LOAD must be LOAD_PLAIN, LOAD_CS, LOAD_LU, LOAD_NC, LOAD_L2_EVICT_FIRST or LOAD_L2_256B"
#endif
#if LAYOUT < LAYOUT_THREAD_STRIDE || LAYOUT > LAYOUT_SHARED_CHUNK
#error "LAYOUT must be LAYOUT_THREAD_STRIDE, LAYOUT_BLOCK_TILE, LAYOUT_BLOCK_CHUNK or LAYOUT_SHARED_CHUNK"
#endif
#if GUARD < GUARD_EACH || GUARD > GUARD_TAIL
#error "GUARD must be GUARD_EACH or GUARD_TAIL"
#endif

// Thread 0 of each block: stamp k (0: start, 1: end) = (clock64, %globaltimer), read back to back.
__device__ __forceinline__ void tp_stamp(unsigned long long* stamps, int k) {
    if (STAMPS && threadIdx.x == 0) {
        unsigned long long c = gp_clock();
        unsigned long long g = gp_globaltimer();
        unsigned long long* p = stamps + 2ull * ((unsigned long long)blockIdx.x * 2 + k);
        p[0] = c;
        p[1] = g;
    }
}

// The L2 evict_first policy operand of the cache_hint variants (createpolicy, sm_80 and newer).
__device__ __forceinline__ unsigned long long tp_evict_first_policy() {
    unsigned long long policy = 0;
#if STORE == STORE_L2_EVICT_FIRST || LOAD == LOAD_L2_EVICT_FIRST
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    return policy;
}

__device__ __forceinline__ uint4 tp_load(const uint4* p, unsigned long long policy) {
#if LOAD == LOAD_PLAIN
    return *p;
#elif LOAD == LOAD_CS
    return __ldcs(p);
#elif LOAD == LOAD_LU
    return __ldlu(p);
#elif LOAD == LOAD_NC
    return __ldg(p);
#else
    uint4 v;
#if LOAD == LOAD_L2_EVICT_FIRST
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
#else
    asm volatile("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
    return v;
#endif
}

__device__ __forceinline__ void tp_store(uint4* p, uint4 v, unsigned long long policy) {
#if STORE == STORE_WB
    *p = v;
#elif STORE == STORE_CS
    __stcs(p, v);
#elif STORE == STORE_WT
    __stwt(p, v);
#elif STORE == STORE_L2_EVICT_FIRST
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy) : "memory");
#else
    asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#endif
}

// stream_read_cg's load, L2_LOAD: L2_LOAD_CG (default, ld.global.cg: LDG.E.128.STRONG.GPU), or a weak load
// that does not allocate in L1, so a repeated window is still read from L2: L2_LOAD_NC_NO_ALLOCATE
// (ld.global.nc.L1::no_allocate, the read-only path), L2_LOAD_NO_ALLOCATE (ld.global.L1::no_allocate)
#define L2_LOAD_CG 1
#define L2_LOAD_NC_NO_ALLOCATE 2
#define L2_LOAD_NO_ALLOCATE 3
#ifndef L2_LOAD
#define L2_LOAD L2_LOAD_CG
#endif
#if L2_LOAD < L2_LOAD_CG || L2_LOAD > L2_LOAD_NO_ALLOCATE
#error "L2_LOAD must be L2_LOAD_CG, L2_LOAD_NC_NO_ALLOCATE or L2_LOAD_NO_ALLOCATE"
#endif

__device__ __forceinline__ uint4 tp_load_cg(const uint4* p) {
    uint4 v;
#if L2_LOAD == L2_LOAD_CG
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#elif L2_LOAD == L2_LOAD_NC_NO_ALLOCATE
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#else
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
    return v;
}

// What a thread covers, as locals of the kernel: trips start at first, first + step, ... below limit;
// a trip's UNROLL accesses are apart apart; slot is the thread's own word of the reads' sink. (Macros,
// not a function returning a struct, so that the default build is the code it always was.)
#if LAYOUT == LAYOUT_THREAD_STRIDE
#define TP_SPAN(n16)                                                                               \
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;                  \
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;    \
    const unsigned long long step = stride * UNROLL, apart = stride, limit = (n16), slot = first;
#elif LAYOUT == LAYOUT_BLOCK_TILE
#define TP_SPAN(n16)                                                                               \
    const unsigned long long tile = (unsigned long long)BLOCK * UNROLL;                            \
    const unsigned long long first = (unsigned long long)blockIdx.x * tile + threadIdx.x;          \
    const unsigned long long step = (unsigned long long)gridDim.x * tile, apart = BLOCK,           \
                             limit = (n16), slot = (unsigned long long)blockIdx.x * BLOCK + threadIdx.x;
#elif LAYOUT == LAYOUT_SHARED_CHUNK
#define TP_SPAN(n16)                                                                               \
    const unsigned long long tile = (unsigned long long)BLOCK * UNROLL;                            \
    const unsigned long long chunks = (n16) / CHUNK16 ? (n16) / CHUNK16 : 1;                       \
    const unsigned long long begin = (unsigned long long)(blockIdx.x % chunks) * CHUNK16;          \
    const unsigned long long first = begin + threadIdx.x;                                          \
    const unsigned long long step = tile, apart = BLOCK,                                           \
                             limit = begin + CHUNK16 < (n16) ? begin + CHUNK16 : (n16),            \
                             slot = (unsigned long long)blockIdx.x * BLOCK + threadIdx.x;
#else
#define TP_SPAN(n16)                                                                               \
    const unsigned long long tile = (unsigned long long)BLOCK * UNROLL;                            \
    const unsigned long long chunk = (((n16) + tile - 1) / tile + gridDim.x - 1) / gridDim.x * tile; \
    const unsigned long long begin = (unsigned long long)blockIdx.x * chunk;                       \
    const unsigned long long first = begin + threadIdx.x;                                          \
    const unsigned long long step = tile, apart = BLOCK,                                           \
                             limit = begin + chunk < (n16) ? begin + chunk : (n16),                \
                             slot = (unsigned long long)blockIdx.x * BLOCK + threadIdx.x;
#endif

// Every trip of one pass over the span, TRIP(i, checked) each: GUARD_EACH checks every access;
// GUARD_TAIL runs the whole trips unchecked, then the one partial trip a thread can have, checked.
#if GUARD == GUARD_EACH
#define TP_PASS(TRIP)                                                            \
    _Pragma("unroll 1") for (unsigned long long i = first; i < limit; i += step) \
        TRIP(i, 1)
#else
#define TP_PASS(TRIP)                                                                                       \
    {                                                                                                       \
        unsigned long long i = first;                                                                       \
        _Pragma("unroll 1") for (; i + (UNROLL - 1) * apart < limit; i += step) TRIP(i, 0)                  \
        if (i < limit) TRIP(i, 1)                                                                           \
    }
#endif

// One trip of each kernel at i; CHECKED (0 or 1): each access checks that it lies below limit.
#define TP_READ_TRIP(I, CHECKED)                                                                             \
    {                                                                                                        \
        uint4 v[UNROLL];                                                                                     \
        _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                                                 \
            const unsigned long long j = (I) + u * apart;                                                    \
            v[u] = !(CHECKED) || j < limit ? (CG ? tp_load_cg(src + j) : tp_load(src + j, policy))           \
                                           : make_uint4(0u, 0u, 0u, 0u);                                     \
        }                                                                                                    \
        _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;         \
    }

#define TP_COPY_TRIP(I, CHECKED)                                                           \
    {                                                                                      \
        uint4 v[UNROLL];                                                                   \
        _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                               \
            const unsigned long long j = (I) + u * apart;                                  \
            if (!(CHECKED) || j < limit) v[u] = tp_load(src + j, policy);                  \
            else if (GUARD == GUARD_TAIL) v[u] = make_uint4(0u, 0u, 0u, 0u);               \
        }                                                                                  \
        _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                               \
            const unsigned long long j = (I) + u * apart;                                  \
            if (!(CHECKED) || j < limit) tp_store(dst + j, v[u], policy);                  \
        }                                                                                  \
    }

#define TP_WRITE_TRIP(I, CHECKED)                                                                            \
    {                                                                                                        \
        _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) {                                                 \
            const unsigned long long j = (I) + u * apart;                                                    \
            if (!(CHECKED) || j < limit) tp_store(dst + j, make_uint4((unsigned)j, (unsigned)r, 0u, 0u), policy); \
        }                                                                                                    \
    }

template <bool CG>
__device__ __forceinline__ void tp_read(unsigned long long* stamps, const uint4* src, unsigned* sink,
                                        unsigned long long n16, int reps) {
    tp_stamp(stamps, 0);
    TP_SPAN(n16)
    const unsigned long long policy = tp_evict_first_policy();
    unsigned acc = 0;
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
        TP_PASS(TP_READ_TRIP)
    }
    __syncthreads();
    tp_stamp(stamps, 1);
    if (acc == 0xFFFFFFFFu) sink[slot] = acc;
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) stream_read(unsigned long long* stamps, const uint4* src, unsigned* sink,
                                       unsigned long long n16, int reps) {
    tp_read<false>(stamps, src, sink, n16, reps);
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) stream_read_cg(unsigned long long* stamps, const uint4* src, unsigned* sink,
                                          unsigned long long n16, int reps) {
    tp_read<true>(stamps, src, sink, n16, reps);
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) stream_copy(unsigned long long* stamps, const uint4* src,
                                       uint4* dst, unsigned long long n16, int reps) {
    tp_stamp(stamps, 0);
    TP_SPAN(n16)
    const unsigned long long policy = tp_evict_first_policy();
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
        TP_PASS(TP_COPY_TRIP)
    }
    __syncthreads();
    tp_stamp(stamps, 1);
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) stream_write(unsigned long long* stamps, const uint4* src,
                                        uint4* dst, unsigned long long n16, int reps) {
    tp_stamp(stamps, 0);
    TP_SPAN(n16)
    const unsigned long long policy = tp_evict_first_policy();
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
        TP_PASS(TP_WRITE_TRIP)
    }
    __syncthreads();
    tp_stamp(stamps, 1);
}
