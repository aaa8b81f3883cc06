// Comparison only, not part of the suite: shared-memory load latency measured the way a standalone
// microbenchmark does it -- one self-contained .cu, built with `nvcc -O3 -arch=sm_90`, run once,
// printing one number. tools/bench_suite.py times its build + run against our warm fact test
// (hwtests/test_smem.py::test_lds_latency) and docs/performance.md has both.
//
// Method: one thread walks a ring of 256 shared-memory words in which each word holds the shared
// address of the next, so each load's address is the previous load's result; clock64() is read
// before and after 512 such dependent loads. Printed: cycles per load (clock-read cost and the
// last load's landing are not separated out: a reference, not a fact).
// The host part is left out under NVRTC (__CUDACC_RTC__), so the CPU suite compiles the kernel and
// checks its SASS (tests/test_ref_microbenchmarks.py); nvcc builds the whole program.
#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cuda_runtime.h>
#endif

#define RING 256
#define CHASE 512

__global__ void lds_chase(unsigned* sink, long long* cycles) {
    __shared__ unsigned ring[RING];
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(ring));
    for (int i = 0; i < RING; ++i) ring[i] = base + 4u * ((i + 1) % RING);
    __syncthreads();
    unsigned p = base;
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < CHASE; ++i) asm volatile("ld.shared.u32 %0, [%0];" : "+r"(p));
    const long long t1 = clock64();
    sink[0] = p;
    cycles[0] = t1 - t0;
}

#ifndef __CUDACC_RTC__
static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

int main() {
    unsigned* sink;
    long long* cycles;
    check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
    check(cudaMalloc(&cycles, sizeof(long long)), "cudaMalloc");
    long long c = 0;
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms the instruction cache
        lds_chase<<<1, 1>>>(sink, cycles);
        check(cudaDeviceSynchronize(), "launch");
    }
    check(cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::printf("%.2f\n", static_cast<double>(c) / CHASE);
    return 0;
}
#endif  // __CUDACC_RTC__
