// mma.sync for the other tensor-core input types, the HMMA_16816 kernel's method per DTYPE:
//
//   DTYPE  PTX                                                    SASS (sm_80 .. sm_90)
//   1      mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32    HMMA.16816.F32.BF16
//   2      mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32     HMMA.1688.F32.TF32
//   3      mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32        IMMA.16832.S8.S8
//   4      mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16      HMMA.16816.F16
//   5      mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32   HMMA.SP.16832.F32 (2:4 sparse A)
//   6      mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 HMMA.SP.16832.F32.BF16
//
// The sparse forms (5, 6) take A as 4 registers of its nonzero halves (16 x 16 of the 16 x 32), B as
// 4 registers (32 x 8), a metadata register (two 2-bit indices per kept pair) and sparsity selector 0:
// 8 + 1 words per thread, from in + lane * 9, so the launch passes 32 * 9 words (A/B ones and the
// metadata word last).
//
// ILP independent accumulator chains, UNROLL steps each, ITERS loop trips, so the timed region is
// ILP * UNROLL mma instructions per trip. A and B fragments are the same registers for every step (4 + 2 per thread, from
// in + lane * 6); each chain's accumulator starts distinct so that ptxas cannot merge chains. ILP=1,
// one warp: dependent latency; larger ILP and more warps per SM sub-partition (128 * W threads):
// issue interval and pipe rate. The body needs sm_80; below it the kernel is empty.
#include "gpuprops.cuh"

#ifndef DTYPE
#define DTYPE 1
#endif
#ifndef ILP
#define ILP 1
#endif
#ifndef UNROLL
#define UNROLL 64
#endif
#ifndef ITERS
#define ITERS 1  // loop trips of the unrolled body: long runs, as kernels/hmma_16816.cu
#endif

#if DTYPE == 1
#define GP_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#elif DTYPE == 2
#define GP_MMA "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
#elif DTYPE == 3
#define GP_MMA "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
#elif DTYPE == 4
#define GP_MMA "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
#elif DTYPE == 5
#define GP_MMA "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
#elif DTYPE == 6
#define GP_MMA "mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
#else
#error "DTYPE must be 1 (bf16), 2 (tf32), 3 (s8), 4 (f16 accumulate), 5 (sparse f16) or 6 (sparse bf16)"
#endif
#define GP_SPARSE (DTYPE == 5 || DTYPE == 6)
#if GP_SPARSE
#define GP_WORDS 9  // A 4, B 4, metadata 1
#else
#define GP_WORDS 6  // A 4, B 2
#endif

extern "C" __global__ void mma_sync(unsigned long long* cycles, const unsigned* in, unsigned* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned* p = in + (threadIdx.x & 31) * GP_WORDS;
    unsigned a0 = p[0], a1 = p[1], a2 = p[2], a3 = p[3], b0 = p[4], b1 = p[5];
#if GP_SPARSE
    unsigned b2 = p[6], b3 = p[7], meta = p[8];
#endif
#if DTYPE == 4
    unsigned acc[ILP][2];  // f16x2 pairs
#pragma unroll
    for (int j = 0; j < ILP; ++j) acc[j][0] = p[0] ^ (unsigned)j, acc[j][1] = p[1] ^ (unsigned)j;
#elif DTYPE == 3
    unsigned acc[ILP][4];  // s32
#pragma unroll
    for (int j = 0; j < ILP; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[j][k] = p[k] + (unsigned)j;
#else
    float acc[ILP][4];
#pragma unroll
    for (int j = 0; j < ILP; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[j][k] = __uint_as_float(p[k] & 0x3fffffffu) + j;
#endif
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    for (int it = 0; it < ITERS; ++it) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int j = 0; j < ILP; ++j) {
#if DTYPE == 4
            asm volatile(GP_MMA "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                         : "+r"(acc[j][0]), "+r"(acc[j][1])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#elif DTYPE == 3
            asm volatile(GP_MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+r"(acc[j][0]), "+r"(acc[j][1]), "+r"(acc[j][2]), "+r"(acc[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#elif GP_SPARSE
            asm volatile(GP_MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3), "r"(meta));
#else
            asm volatile(GP_MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
        }
    }
    }
    unsigned long long t1 = gp_clock();
    unsigned s = 0;
#pragma unroll
    for (int j = 0; j < ILP; ++j) {
#if DTYPE == 4
        s += acc[j][0] + acc[j][1];
#elif DTYPE == 3
        s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
#else
        s += __float_as_uint(acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3]);
#endif
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    gp_record(cycles, t0, t1);
#endif
}
