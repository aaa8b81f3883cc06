// Shared-memory bandwidth (the original sm_86 notes, shared memory, smem_bandwidth_*): one block of 1024
// threads on one SM repeats STS (LOAD=0) or LDS (LOAD=1) of VEC floats per thread (VEC = 1, 2, 4:
// float, float2, float4 -> STS/STS.64/STS.128). Thread t touches element t, so every warp access is
// conflict-free. Bytes per cycle per SM = 1024 * VEC * 4 * UNROLL * iters / (last stop - first start).
#include "gpuprops.cuh"

#ifndef VEC
#define VEC 1
#endif
#ifndef LOAD
#define LOAD 0
#endif
#ifndef UNROLL
#define UNROLL 32
#endif

#if VEC == 1
#define GP_SFX "f32"
#define GP_REGS "{%0}"
#elif VEC == 2
#define GP_SFX "v2.f32"
#define GP_REGS "{%0,%1}"
#else
#define GP_SFX "v4.f32"
#define GP_REGS "{%0,%1,%2,%3}"
#endif

extern "C" __global__ void __launch_bounds__(1024) smem_bandwidth(unsigned long long* cycles, float* sink, int iters) {
    __shared__ float4 buf[1024];
    __shared__ unsigned slot[1024];
    unsigned addr = gp_opaque((unsigned)__cvta_generic_to_shared(buf) + threadIdx.x * (VEC * 4), &slot[threadIdx.x],
                              reinterpret_cast<unsigned*>(sink));
    float x[4] = {threadIdx.x + 0.f, threadIdx.x + 1.f, threadIdx.x + 2.f, threadIdx.x + 3.f};
    float acc = 0.f;
    // The loop count through the same opaque round trip: in a register before the start read, not
    // an LDC that ptxas would otherwise sink into the timed loop.
    int n = (int)gp_opaque((unsigned)iters, &slot[threadIdx.x], reinterpret_cast<unsigned*>(sink));
    __syncthreads();
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    for (int it = 0; it < n; ++it) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#if LOAD
#if VEC == 1
            asm volatile("ld.volatile.shared.f32 %0, [%1];" : "=f"(x[u % 4]) : "r"(addr));
#elif VEC == 2
            asm volatile("ld.volatile.shared.v2.f32 {%0,%1}, [%2];" : "=f"(x[0]), "=f"(x[1]) : "r"(addr));
#else
            asm volatile("ld.volatile.shared.v4.f32 {%0,%1,%2,%3}, [%4];"
                         : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(addr));
#endif
#else
#if VEC == 1
            asm volatile("st.volatile.shared.f32 [%0], %1;" ::"r"(addr), "f"(x[0]) : "memory");
#elif VEC == 2
            asm volatile("st.volatile.shared.v2.f32 [%0], {%1,%2};" ::"r"(addr), "f"(x[0]), "f"(x[1]) : "memory");
#else
            asm volatile("st.volatile.shared.v4.f32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "f"(x[0]), "f"(x[1]),
                         "f"(x[2]), "f"(x[3]) : "memory");
#endif
#endif
        }
    }
    unsigned long long t1 = gp_clock();
    acc = x[0] + x[1] + x[2] + x[3];
    sink[threadIdx.x] = acc;
    gp_record(cycles, t0, t1);
}
