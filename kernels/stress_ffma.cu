// Whole-GPU compute stress and throughput, in time units (pytest_gpuprops/throughput.py): every SM,
// every warp busy, for as long as the host keeps launching. Not a timed region (no gp_record): the
// host times launches with CUDA events, and thread 0 of each block stamps (clock64, %globaltimer)
// SAMPLES + 1 times, so the SM clock each block ran at is known over time (cycles / ns).
//
// stress_ffma    ILP independent FFMA chains per thread, x = x * a + b, UNROLL steps per loop trip:
//                the loop body is UNROLL * ILP FFMAs and 3 (sm_90) to 5 instructions of loop control.
//                One thread does SAMPLES * iters * UNROLL * ILP FFMAs = 2x that many FLOPs.
// stress_wgmma   sm_90a only (empty below it): WARPGROUPS warpgroups per block, each one chain of
//                wgmma.mma_async m64n256kK on its own f32 accumulator, UNROLL per loop trip between
//                a wgmma.fence and a commit_group + wait_group 0. WGMMA_DTYPE 0: bf16 (k16,
//                HGMMA.64x256x16.F32.BF16), 1: e4m3 (k32, QGMMA.64x256x32.F32.E4M3.E4M3). One
//                warpgroup does SAMPLES * iters * UNROLL instructions of 2 * 64 * 256 * K FLOPs.
//                A block barrier before each stamp: thread 0 (warpgroup 0) stamps only once every
//                warpgroup has finished the sample's work, so each interval brackets the whole
//                block's work and a launch's span (first stamp to last) covers all of it, the span
//                the tensor stress's rate is read over (throughput.stress_reading).
//
// Launch arguments (both): stamps (u64, gridDim.x * (SAMPLES + 1) * 2), smids (u32, gridDim.x),
// out (f32, never written in practice: keeps the arithmetic alive), iters (loop trips per sample).
// stress_ffma also takes a and b: the host passes a = -1, b = 0.5, so each chain alternates between
// two values of opposite sign (x, 0.5 - x): its bits change at every step and never settle on a
// fixed point (the FMA units' power depends on the bits they switch), and x stays finite.
//
// The operands of stress_wgmma are pseudo-random finite values of mixed sign (not zeros): the
// tensor cores' power, and so the clock they sustain, depends on the data they switch. ZERO_OPERANDS=1
// makes every operand word 0 instead (the same instructions on all-zero data: the zero-vs-random
// operand power facts, hwtests/test_tensor_power.py).
#include "gpuprops.cuh"

#ifndef ILP
#define ILP 8
#endif
#ifndef UNROLL
#define UNROLL 64
#endif
#ifndef SAMPLES
#define SAMPLES 8
#endif
#ifndef BLOCK
#define BLOCK 512  // stress_ffma's block size: at most 32 registers a thread, so 2048 threads fill an SM
#endif
#ifndef WARPGROUPS
#define WARPGROUPS 2
#endif
#ifndef WGMMA_DTYPE
#define WGMMA_DTYPE 0
#endif
#ifndef ZERO_OPERANDS
#define ZERO_OPERANDS 0
#endif

// Thread 0 of each block: stamp k = (clock64, %globaltimer), read back to back.
__device__ __forceinline__ void tp_stamp(unsigned long long* stamps, int k) {
    if (threadIdx.x == 0) {
        unsigned long long c = gp_clock();
        unsigned long long g = gp_globaltimer();
        unsigned long long* p = stamps + 2ull * ((unsigned long long)blockIdx.x * (SAMPLES + 1) + k);
        p[0] = c;
        p[1] = g;
    }
}

// The whole block arrives, then thread 0 stamps: the stamp brackets every warp's work before it.
__device__ __forceinline__ void tp_stamp_block(unsigned long long* stamps, int k) {
    __syncthreads();
    tp_stamp(stamps, k);
}

__device__ __forceinline__ void tp_smid(unsigned* smids) {
    if (threadIdx.x == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        smids[blockIdx.x] = s;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK, 2048 / BLOCK) stress_ffma(unsigned long long* stamps, unsigned* smids, float* out, int iters, float a,
                                       float b) {
    float x[ILP];
#pragma unroll
    for (int j = 0; j < ILP; ++j) x[j] = __int2float_rn((int)threadIdx.x + j) * a;
    tp_smid(smids);
    tp_stamp(stamps, 0);
#pragma unroll 1
    for (int s = 0; s < SAMPLES; ++s) {
#pragma unroll 1
        for (int i = 0; i < iters; ++i) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
                for (int j = 0; j < ILP; ++j) x[j] = __fmaf_rn(x[j], a, b);
            }
        }
        tp_stamp(stamps, s + 1);
    }
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < ILP; ++j) sum += x[j];
    if (sum != sum) out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // never: the chains stay finite
}

#if WGMMA_DTYPE == 0
#define TP_K 16
#define TP_WGMMA "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
#define TP_TAIL "1, 1, 1, 0, 0"  // scale-d, scale-a, scale-b, no transpose of A or B
#elif WGMMA_DTYPE == 1
#define TP_K 32
#define TP_WGMMA "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
#define TP_TAIL "1, 1, 1"  // scale-d, scale-a, scale-b (8-bit types have no transpose)
#else
#error "WGMMA_DTYPE must be 0 (bf16) or 1 (e4m3)"
#endif

#define TP_D                                                                                            \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                       \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                              \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                              \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                              \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                              \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                              \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"                  \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define TP_F4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define TP_F16(i) TP_F4(i), TP_F4((i) + 4), TP_F4((i) + 8), TP_F4((i) + 12)
#define TP_ACC TP_F16(0), TP_F16(16), TP_F16(32), TP_F16(48), TP_F16(64), TP_F16(80), TP_F16(96), TP_F16(112)

// Word j of an operand tile: pseudo-random finite values of mixed sign, magnitudes 2^-7 .. 2^-1.
__device__ __forceinline__ unsigned tp_word(unsigned j) {
#if ZERO_OPERANDS
    return 0u * j;
#endif
    unsigned h = j * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
#if WGMMA_DTYPE == 0  // two bf16: sign, exponent 120 .. 126, 7 random mantissa bits
    unsigned lo = ((h & 1u) << 15) | ((120u + ((h >> 1) % 7u)) << 7) | ((h >> 4) & 0x7Fu);
    unsigned hi = (((h >> 11) & 1u) << 15) | ((120u + ((h >> 12) % 7u)) << 7) | ((h >> 16) & 0x7Fu);
    return lo | (hi << 16);
#else  // four e4m3: sign, exponent field 1 .. 6 (2^-6 .. 2^-1), 3 random mantissa bits
    unsigned w = 0;
    for (unsigned k = 0; k < 4; ++k) {
        unsigned v = h >> (8 * k);
        w |= (((v & 1u) << 7) | ((1u + ((v >> 1) % 6u)) << 3) | ((v >> 4) & 7u)) << (8 * k);
    }
    return w;
#endif
}

__device__ __forceinline__ unsigned long long tp_desc(unsigned smem_addr) {
    // start address, leading byte offset 128 (K), stride byte offset 256 (8 rows of 32 bytes), no swizzle
    return ((smem_addr & 0x3FFFFu) >> 4) | (8ull << 16) | (16ull << 32);
}

extern "C" __global__ void __launch_bounds__(128 * WARPGROUPS, 1)
    stress_wgmma(unsigned long long* stamps, unsigned* smids, float* out, int iters) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // A: 64 rows, B: 256 rows, 32 bytes of K per row (16 bf16 or 32 e4m3), 8 x 16-byte core matrices
    __shared__ __align__(1024) unsigned a_tile[64 * 32 / 4], b_tile[256 * 32 / 4];
    for (unsigned j = threadIdx.x; j < 64 * 32 / 4; j += blockDim.x) a_tile[j] = tp_word(j);
    for (unsigned j = threadIdx.x; j < 256 * 32 / 4; j += blockDim.x) b_tile[j] = tp_word(j + 4096u);
    // the tiles were written by ordinary stores; wgmma reads them through the async proxy
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const unsigned long long da = tp_desc((unsigned)__cvta_generic_to_shared(a_tile));
    const unsigned long long db = tp_desc((unsigned)__cvta_generic_to_shared(b_tile));
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    tp_smid(smids);
    tp_stamp_block(stamps, 0);
#pragma unroll 1
    for (int s = 0; s < SAMPLES; ++s) {
#pragma unroll 1
        for (int i = 0; i < iters; ++i) {
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                asm volatile(TP_WGMMA TP_D ", %128, %129, " TP_TAIL ";" : TP_ACC : "l"(da), "l"(db));
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        }
        tp_stamp_block(stamps, s + 1);
    }
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 128; ++i) sum += d[i];
    if (sum != sum) out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // never: the sums stay finite
#endif
}
