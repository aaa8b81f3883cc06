// What a launch costs on the GPU's side (pytest_gpuprops/launch_overhead.py).
//
// * empty: the kernel whose launches are timed. It does nothing, so a batch of N back-to-back
//   launches on one stream takes N x (the front end taking the launch, the block's dispatch, its exit
//   and the kernel's completion before the next may start).
// * launch_gate: holds its stream until the host has queued the whole batch behind it, so the batch
//   runs at the GPU's pace, not at the pace the host (Python, CuPy) issues launches. It spins on
//   gate[0], a word of mapped pinned host memory the host sets to 1 once the batch is queued. It
//   gives up after timeout_ns of %globaltimer and sets gate[1] = 1, so a host that cannot queue the
//   batch (a launch queue too short for it) fails the measurement instead of hanging the GPU.
#include "gpuprops.cuh"

extern "C" __global__ void empty() {}

extern "C" __global__ void launch_gate(volatile unsigned* gate, unsigned long long timeout_ns) {
    if (threadIdx.x != 0) return;
    const unsigned long long t0 = gp_globaltimer();
    while (gate[0] == 0u) {
        if (gp_globaltimer() - t0 > timeout_ns) {
            gate[1] = 1u;
            break;
        }
    }
}
