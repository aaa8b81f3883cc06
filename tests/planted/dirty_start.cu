// Planted: the input load is issued before the start clock read and first used inside the timed
// region, so unless the start read waits on its scoreboard, the load's latency is timed.
#include "gpuprops.cuh"

extern "C" __global__ void dirty_start(unsigned long long* cycles, const float* in, float* out) {
    float x = in[threadIdx.x];
    unsigned long long t0 = gp_clock();
#pragma unroll
    for (int u = 0; u < 16; ++u) asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x));
    unsigned long long t1 = gp_clock();
    out[threadIdx.x] = x;
    gp_record(cycles, t0, t1);
}
