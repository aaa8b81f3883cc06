// HMMA.16816.F32 (mma.sync.m16n8k16.row.col.f32.f16.f16.f32) in ILP independent accumulator chains,
// UNROLL steps each, so the timed region is ILP * UNROLL HMMAs (times ITERS loop trips).
// ILP=1 is the dependent chain (latency); larger ILP and more warps per SM sub-partition (launch
// 128 * W threads: warp w runs on sub-partition w % 4) give the issue interval and the pipe's rate.
// ALIGN=1 puts a block barrier before the start read, so the block's warps start together and a
// span (last stop - first start) holds no launch skew. ITERS > 1 repeats the unrolled body in a
// loop: a kernel long enough for a profiler's launch overhead to vanish.
#include "gpuprops.cuh"

#ifndef ILP
#define ILP 1
#endif
#ifndef UNROLL
#define UNROLL 64
#endif
#ifndef ITERS
#define ITERS 1
#endif
#ifndef ALIGN
#define ALIGN 0
#endif

extern "C" __global__ void hmma_16816(unsigned long long* cycles, const unsigned* in, float* out) {
    const unsigned* p = in + (threadIdx.x & 31) * 6;
    unsigned a0 = p[0], a1 = p[1], a2 = p[2], a3 = p[3], b0 = p[4], b1 = p[5];
    float acc[ILP][4];
#pragma unroll
    for (int j = 0; j < ILP; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[j][k] = __uint_as_float(p[k] & 0x3fffffffu) + j;  // distinct per chain: no CSE
#if ALIGN
    __syncthreads();
#endif
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    for (int it = 0; it < ITERS; ++it) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int j = 0; j < ILP; ++j) {
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                    "{%0,%1,%2,%3};"
                    : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
        }
    }
    unsigned long long t1 = gp_clock();
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < ILP; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    gp_record(cycles, t0, t1);
}
