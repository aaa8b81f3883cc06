// The SM clock the kernels actually see: a spin of about spin_ns (by %globaltimer) whose clock64 cycles
// the host sets against CUDA-event time, the spins queued behind a gate spin (measure.Runner.sm_clock_mhz).
// out[0] = cycles, out[1] = %globaltimer nanoseconds. Not a timed region (no gp_record).
#include "gpuprops.cuh"

extern "C" __global__ void sm_clock_rate(unsigned long long* out, unsigned long long spin_ns) {
    unsigned long long g0 = gp_globaltimer();
    unsigned long long c0 = clock64();
    unsigned long long g1, c1;
    do {
        g1 = gp_globaltimer();
        c1 = clock64();
    } while (g1 - g0 < spin_ns);
    if (threadIdx.x == 0) {
        out[0] = c1 - c0;
        out[1] = g1 - g0;
    }
}
