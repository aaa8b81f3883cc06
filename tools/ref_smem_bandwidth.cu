// Comparison only, not part of the suite: shared-memory load bandwidth measured the way a
// standalone microbenchmark does it -- one self-contained .cu, built with `nvcc -O3 -arch=sm_90`,
// run once, printing one number. tools/bench_suite.py times its build + run against our warm fact
// test (hwtests/test_smem.py::test_smem_bandwidth, LDS float4) and docs/performance.md has both.
//
// Method: one block of 1024 threads on one SM; thread t loads element t of a float4 array in shared
// memory (each warp reads 512 consecutive bytes: no bank conflict), ITERS x UNROLL times. Each warp
// records clock64() before and after; printed: bytes loaded by the block / (last stop - first start),
// in bytes per SM clock.
// The host part is left out under NVRTC (__CUDACC_RTC__), so the CPU suite compiles the kernel and
// checks its SASS (tests/test_ref_microbenchmarks.py); nvcc builds the whole program.
#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cuda_runtime.h>
#endif

#define THREADS 1024
#define UNROLL 32
#define ITERS 64

__global__ void __launch_bounds__(THREADS) smem_read(float* sink, long long* starts, long long* stops, int iters) {
    __shared__ float4 buf[THREADS];
    buf[threadIdx.x] = make_float4(threadIdx.x, 1.f, 2.f, 3.f);
    __syncthreads();
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&buf[threadIdx.x]));
    float acc = 0.f;
    const long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            float x, y, z, w;
            // volatile + a memory clobber: each load is issued, none is merged with another
            asm volatile("ld.volatile.shared.v4.f32 {%0,%1,%2,%3}, [%4];"
                         : "=f"(x), "=f"(y), "=f"(z), "=f"(w) : "r"(addr) : "memory");
            acc += (x + y) + (z + w);
        }
    }
    const long long t1 = clock64();
    sink[threadIdx.x] = acc;
    if (threadIdx.x % 32 == 0) {
        starts[threadIdx.x / 32] = t0;
        stops[threadIdx.x / 32] = t1;
    }
}

#ifndef __CUDACC_RTC__
static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

int main() {
    const int warps = THREADS / 32;
    float* sink;
    long long *starts, *stops;
    check(cudaMalloc(&sink, THREADS * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&starts, warps * sizeof(long long)), "cudaMalloc");
    check(cudaMalloc(&stops, warps * sizeof(long long)), "cudaMalloc");
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms the instruction cache
        smem_read<<<1, THREADS>>>(sink, starts, stops, ITERS);
        check(cudaDeviceSynchronize(), "launch");
    }
    long long s[warps], e[warps];
    check(cudaMemcpy(s, starts, sizeof(s), cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(cudaMemcpy(e, stops, sizeof(e), cudaMemcpyDeviceToHost), "cudaMemcpy");
    long long first = s[0], last = e[0];
    for (int w = 1; w < warps; ++w) {
        first = s[w] < first ? s[w] : first;
        last = e[w] > last ? e[w] : last;
    }
    const double bytes = static_cast<double>(THREADS) * sizeof(float4) * UNROLL * ITERS;
    std::printf("%.2f\n", bytes / static_cast<double>(last - first));
    return 0;
}
#endif  // __CUDACC_RTC__
