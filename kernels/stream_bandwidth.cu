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
#include "gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef BLOCK
#define BLOCK 256  // the launch's block size: at most 32 registers a thread, so 2048 threads fill an SM
#endif

// Thread 0 of each block: stamp k (0: start, 1: end) = (clock64, %globaltimer), read back to back.
__device__ __forceinline__ void tp_stamp(unsigned long long* stamps, int k) {
    if (threadIdx.x == 0) {
        unsigned long long c = gp_clock();
        unsigned long long g = gp_globaltimer();
        unsigned long long* p = stamps + 2ull * ((unsigned long long)blockIdx.x * 2 + k);
        p[0] = c;
        p[1] = g;
    }
}

__device__ __forceinline__ uint4 tp_load(const uint4* p) { return *p; }

__device__ __forceinline__ uint4 tp_load_cg(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <bool CG>
__device__ __forceinline__ void tp_read(unsigned long long* stamps, const uint4* src, unsigned* sink,
                                        unsigned long long n16, int reps) {
    tp_stamp(stamps, 0);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
#pragma unroll 1
        for (unsigned long long i = first; i < n16; i += stride * UNROLL) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const unsigned long long j = i + u * stride;
                v[u] = j < n16 ? (CG ? tp_load_cg(src + j) : tp_load(src + j)) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
    }
    __syncthreads();
    tp_stamp(stamps, 1);
    if (acc == 0xFFFFFFFFu) sink[first] = acc;
}

extern "C" __global__ void __launch_bounds__(BLOCK, 2048 / BLOCK) stream_read(unsigned long long* stamps, const uint4* src, unsigned* sink,
                                       unsigned long long n16, int reps) {
    tp_read<false>(stamps, src, sink, n16, reps);
}

extern "C" __global__ void __launch_bounds__(BLOCK, 2048 / BLOCK) stream_read_cg(unsigned long long* stamps, const uint4* src, unsigned* sink,
                                          unsigned long long n16, int reps) {
    tp_read<true>(stamps, src, sink, n16, reps);
}

extern "C" __global__ void __launch_bounds__(BLOCK, 2048 / BLOCK) stream_copy(unsigned long long* stamps, const uint4* src,
                                       uint4* dst, unsigned long long n16, int reps) {
    tp_stamp(stamps, 0);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
#pragma unroll 1
        for (unsigned long long i = first; i < n16; i += stride * UNROLL) {
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const unsigned long long j = i + u * stride;
                if (j < n16) v[u] = src[j];
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const unsigned long long j = i + u * stride;
                if (j < n16) dst[j] = v[u];
            }
        }
    }
    __syncthreads();
    tp_stamp(stamps, 1);
}

extern "C" __global__ void __launch_bounds__(BLOCK, 2048 / BLOCK) stream_write(unsigned long long* stamps, const uint4* src,
                                        uint4* dst, unsigned long long n16, int reps) {
    tp_stamp(stamps, 0);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
#pragma unroll 1
        for (unsigned long long i = first; i < n16; i += stride * UNROLL) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const unsigned long long j = i + u * stride;
                if (j < n16) dst[j] = make_uint4((unsigned)j, (unsigned)r, 0u, 0u);
            }
        }
    }
    __syncthreads();
    tp_stamp(stamps, 1);
}
