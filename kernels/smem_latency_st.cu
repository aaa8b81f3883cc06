// STS latency (the original sm_86 notes, shared memory, smem_latency_st): UNROLL back-to-back STS. As
// compiled they are independent; the measure layer chains them by patching the control codes so
// that each STS waits on the previous STS's read scoreboard, as the seed did with CuAssembler
// ([B0-----:R0:...]). THEN_LDS=1 adds one LDS of the last address after the stores (the seed's
// STS -> LDS variant, which separates store and load latency from the clock overhead); UNROLL=0 with
// THEN_LDS=1 is the LDS-alone reference.
#include "gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 50
#endif
#ifndef THEN_LDS
#define THEN_LDS 0
#endif

extern "C" __global__ void smem_latency_st(unsigned long long* cycles, unsigned* sink) {
    __shared__ unsigned buf[32 * (UNROLL + 2)];
    __shared__ unsigned slot[32];
    unsigned a = gp_opaque((unsigned)__cvta_generic_to_shared(buf) + threadIdx.x * 4, &slot[threadIdx.x & 31], sink);
    unsigned v = threadIdx.x;
    unsigned r = 0;
    unsigned long long t0 = gp_clock();
#pragma unroll
    for (int i = 0; i < UNROLL; ++i)
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(a + i * 128), "r"(v) : "memory");
#if THEN_LDS
    // Only the LDS sits in the region: the stop read is patched to wait on its scoreboard, so its
    // result is in when the clock is read (a test of the value here would put an ISETP and a
    // predicated STG in the region; the static region test refuses that).
    asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(r) : "r"(a + (UNROLL > 0 ? UNROLL - 1 : 0) * 128) : "memory");
#endif
    unsigned long long t1 = gp_clock();
    sink[threadIdx.x] = r;
    gp_record(cycles, t0, t1);
}
