// Shared-memory bank conflicts: one block of 1024 threads on one SM repeats LDS (VEC=1), LDS.64
// (VEC=2) or LDS.128 (VEC=4) where lane l of every warp reads the VEC words starting at word
// l * stride_words of one shared buffer (stride_words a multiple of VEC, at most 256). 32 banks of
// 4 bytes: the access costs as many wavefronts as the model in hwtests/smem_banks.py says, so cycles
// per warp access = wavefronts x the conflict-free cost. Cycles per warp access per SM =
// (last stop - first start) / (32 warps * UNROLL * iters).
//
// The stride is a launch argument, not a define: the code (and so the timed region) is the same for
// every stride, so one build per width serves all strides.
#include "gpuprops.cuh"

#ifndef VEC
#define VEC 1
#endif
#ifndef UNROLL
#define UNROLL 32
#endif
#define CONFLICT_WORDS 8192  // 31 * 256 + 4 words, rounded up: 32 KiB

extern "C" __global__ void __launch_bounds__(1024) smem_conflict(unsigned long long* cycles, float* sink,
                                                                 int stride_words, int iters) {
    __shared__ __align__(16) float buf[CONFLICT_WORDS];
    __shared__ unsigned slot[1024];
    unsigned addr = gp_opaque((unsigned)__cvta_generic_to_shared(buf) + (threadIdx.x & 31) * stride_words * 4,
                              &slot[threadIdx.x], reinterpret_cast<unsigned*>(sink));
    float x[4] = {threadIdx.x + 0.f, threadIdx.x + 1.f, threadIdx.x + 2.f, threadIdx.x + 3.f};
    // The loop count through the same opaque round trip: in a register before the start read.
    int n = (int)gp_opaque((unsigned)iters, &slot[threadIdx.x], reinterpret_cast<unsigned*>(sink));
    __syncthreads();
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    for (int it = 0; it < n; ++it) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#if VEC == 1
            asm volatile("ld.volatile.shared.f32 %0, [%1];" : "=f"(x[u % 4]) : "r"(addr));
#elif VEC == 2
            asm volatile("ld.volatile.shared.v2.f32 {%0,%1}, [%2];" : "=f"(x[0]), "=f"(x[1]) : "r"(addr));
#else
            asm volatile("ld.volatile.shared.v4.f32 {%0,%1,%2,%3}, [%4];"
                         : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(addr));
#endif
        }
    }
    unsigned long long t1 = gp_clock();
    sink[threadIdx.x] = x[0] + x[1] + x[2] + x[3];
    gp_record(cycles, t0, t1);
}
