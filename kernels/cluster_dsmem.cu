// Thread-block clusters and distributed shared memory (sm_90). The kernels are compiled with
// __cluster_dims__() (.explicitcluster: launched as clusters, the size given at launch through
// cuLaunchKernelEx's cluster-dimension attribute), so one build serves every cluster size and ptxas
// emits the cluster barrier without a fallback for a non-cluster launch. Each kernel reads its rank
// and the cluster's size from %cluster_ctarank and %cluster_nctarank.
//
//   dsmem_chase       one warp per CTA chases UNROLL dependent 8-byte loads through the shared memory
//                     of the CTA ``hop`` ranks on (hop 0: its own, through the same generic path;
//                     hop 1: its neighbour). Each word holds the generic address (mapa) of the next
//                     one in the same CTA; lanes l and l + 16 chase words l, l + 16, l + 32, ..., so a
//                     hop reads 16 distinct words, 128 bytes, as kernels/smem_latency_ld.cu's LDS.
//                     The addresses are generic (ld.u64): ld.shared::cluster with a 32-bit address
//                     compiles to the same generic LD behind two MOVs per hop (the window's high
//                     half) that would sit on the chain. SASS: LD.E.64. The last of PASSES is timed.
//   dsmem_bandwidth   every thread of a 1024-thread CTA loads (STORE 0) or stores (STORE 1) 16 bytes of
//                     its neighbour's shared memory per instruction (thread t: the neighbour's 16
//                     bytes t, conflict-free), UNROLL per loop trip, ``iters`` trips. The accesses are
//                     volatile (ld/st.volatile, SASS LD.E.128.STRONG.SYS / ST.E.128.STRONG.SYS):
//                     ptxas merges repeated weak or relaxed accesses to one address into one.
//   cluster_barrier   one warp per CTA runs UNROLL barrier.cluster.arrive + barrier.cluster.wait (all
//                     .aligned), the last of PASSES passes timed. RELAXED 1: arrive.relaxed, SASS
//                     UCGABAR_ARV, UCGABAR_WAIT, CCTL.IVALL (the wait's acquire); RELAXED 0: the
//                     default release arrive, MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before each arrive.
//
// Every CTA initialises its own shared memory and the cluster synchronises before any CTA reads a
// neighbour's, and again after the stop read, so that no CTA exits while its shared memory is read.
#include "gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 64
#endif
#ifndef PASSES
#define PASSES 2
#endif
#ifndef STORE
#define STORE 0
#endif
#ifndef RELAXED
#define RELAXED 1
#endif
#define CHAIN_WORDS 1024
// Clusters exist from sm_90 on; below, the kernels are empty (they compile, for the checks that read
// every kernel on every arch).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GP_CLUSTER __cluster_dims__()
#else
#define GP_CLUSTER
#endif

__device__ __forceinline__ unsigned gp_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned gp_cluster_size() {
    unsigned n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}

// The generic address of ``p``'s location in the shared memory of the CTA of rank ``rank``.
__device__ __forceinline__ unsigned long long gp_mapa_generic(const void* p, unsigned rank) {
    unsigned long long r;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
    return r;
}

// barrier.cluster.arrive (release, or relaxed: no fence before the arrive) + barrier.cluster.wait
__device__ __forceinline__ void gp_cluster_barrier() {
#if RELAXED
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#else
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void gp_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

extern "C" __global__ void GP_CLUSTER dsmem_chase(unsigned long long* cycles, unsigned* sink, unsigned hop) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ unsigned long long chain[CHAIN_WORDS];
    __shared__ unsigned slot[32];
    unsigned rank = gp_cluster_rank(), n = gp_cluster_size();
    for (unsigned i = threadIdx.x; i < CHAIN_WORDS; i += blockDim.x)
        chain[i] = gp_mapa_generic(&chain[(i + 16) % CHAIN_WORDS], rank);
    gp_cluster_sync();
    unsigned lane = threadIdx.x & 31;
    // The first address in the target CTA, pinned before the start read: lanes l and l + 16 chase
    // the same words, so each hop reads 16 distinct 8-byte words (128 bytes, as one LDS.32 per lane).
    unsigned long long first = gp_mapa_generic(&chain[lane % 16], (rank + hop) % n);
    unsigned lo = gp_opaque((unsigned)first, &slot[lane], sink);
    unsigned hi = gp_opaque((unsigned)(first >> 32), &slot[lane], sink);
    unsigned long long p = ((unsigned long long)hi << 32) | lo;
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
#pragma unroll
        for (int i = 0; i < UNROLL; ++i)
            asm volatile("ld.u64 %0, [%0];" : "+l"(p) :: "memory");
        t1 = gp_clock();
    }
    sink[blockIdx.x * blockDim.x + threadIdx.x] = (unsigned)p;
    gp_cluster_sync();
    gp_record(cycles, t0, t1);
#endif
}

extern "C" __global__ void GP_CLUSTER __launch_bounds__(1024) dsmem_bandwidth(unsigned long long* cycles, unsigned* sink, int iters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ uint4 buf[1024];
    __shared__ unsigned slot[1024];
    unsigned rank = gp_cluster_rank(), n = gp_cluster_size();
    buf[threadIdx.x] = make_uint4(threadIdx.x, rank, 0u, 1u);
    gp_cluster_sync();
    // The neighbour's 16 bytes t as a generic address, pinned before the start read.
    unsigned long long a = gp_mapa_generic(&buf[threadIdx.x], (rank + 1) % n);
    unsigned lo = gp_opaque((unsigned)a, &slot[threadIdx.x], sink);
    unsigned hi = gp_opaque((unsigned)(a >> 32), &slot[threadIdx.x], sink);
    unsigned long long addr = ((unsigned long long)hi << 32) | lo;
    // The trip count through the same round trip: in a register before the start read.
    int trips = (int)gp_opaque((unsigned)iters, &slot[threadIdx.x], sink);
    // The stored values, pinned the same way (constants would be rematerialised inside the loop).
    unsigned x0 = gp_opaque(threadIdx.x, &slot[threadIdx.x], sink), x1 = x0 ^ rank, x2 = x0 + 1u, x3 = x0 + 2u;
    int it = 0;
    __syncthreads();
    unsigned long long t0 = gp_clock();
#pragma unroll 1
    do {  // at least one trip: no zero-trip guard in the region
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#if STORE
            asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};"
                         ::"l"(addr), "r"(x0), "r"(x1), "r"(x2), "r"(x3) : "memory");
#else
            asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3) : "l"(addr) : "memory");
#endif
        }
    } while (++it < trips);
    unsigned long long t1 = gp_clock();
    sink[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3;
    gp_cluster_sync();
    gp_record(cycles, t0, t1);
#endif
}

extern "C" __global__ void GP_CLUSTER cluster_barrier(unsigned long long* cycles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    gp_cluster_sync();
    unsigned long long t0 = 0, t1 = 0;
#pragma unroll 1
    for (int pass = 0; pass < PASSES; ++pass) {
        t0 = gp_clock();
#pragma unroll
        for (int i = 0; i < UNROLL; ++i) gp_cluster_barrier();
        t1 = gp_clock();
    }
    gp_record(cycles, t0, t1);
#endif
}
