// How much shared memory a block gets and an SM holds, found by launching
// (pytest_gpuprops/smem_limits.py). Both kernels use dynamic shared memory only (no static
// __shared__), so the launch's dynamic size is all the block asks for.
//
// * smem_touch_last: one block; thread 0 reads the dynamic size the block was given
//   (%dynamic_smem_size), writes a pattern to its first and last byte through a volatile pointer
//   (a real STS each, read back by a real LDS) and reports out[0] = the size, out[1] = the last
//   byte read back, out[2] = the first byte read back. A size the SM did not really give would fault
//   on the last byte.
// * smem_pair_resident: thread 0 of each block counts the blocks resident on its SM
//   (residents[%smid], +1 on arrival, -1 on leaving) and waits up to wait_ns of %globaltimer for a
//   second one, keeping the most it saw in peak[%smid]. A grid of two blocks per SM: where two fit on
//   an SM at once every SM sees 2; where one fits, the second runs after the first has left, and
//   every SM sees 1. done[0] counts the blocks that ran; done[1] those whose %smid was past the
//   host's `slots` counters (none expected: the host gives more than any SM id).
#include "gpuprops.cuh"

__device__ __forceinline__ unsigned gp_dynamic_smem_size() {
    unsigned s;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(s));
    return s;
}

extern "C" __global__ void smem_touch_last(unsigned* out, unsigned pattern) {
    extern __shared__ unsigned char dyn[];
    if (threadIdx.x != 0) return;
    const unsigned size = gp_dynamic_smem_size();
    volatile unsigned char* p = dyn;
    out[0] = size;
    if (size == 0u) return;
    p[size - 1] = (unsigned char)pattern;
    p[0] = (unsigned char)(pattern >> 8);
    out[1] = p[size - 1];
    out[2] = p[0];
}

extern "C" __global__ void smem_pair_resident(unsigned* residents, unsigned* peak, unsigned* done,
                                              unsigned slots, unsigned long long wait_ns) {
    extern __shared__ unsigned char dyn[];
    if (threadIdx.x != 0) return;
    const unsigned size = gp_dynamic_smem_size();
    if (size) ((volatile unsigned char*)dyn)[size - 1] = 1;  // the block really holds its bytes
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (smid >= slots) {  // more SM ids than the host's counters: say so, count nothing
        atomicAdd(&done[1], 1u);
        return;
    }
    unsigned seen = atomicAdd(&residents[smid], 1u) + 1u;
    const unsigned long long t0 = gp_globaltimer();
    while (seen < 2u && gp_globaltimer() - t0 < wait_ns) {
        const unsigned now = atomicAdd(&residents[smid], 0u);
        seen = now > seen ? now : seen;
    }
    atomicMax(&peak[smid], seen);
    atomicSub(&residents[smid], 1u);
    atomicAdd(done, 1u);
}
