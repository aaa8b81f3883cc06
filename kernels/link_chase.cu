// Latency across a link (NVLink, PCIe) by a long dependent chase: every node of a buffer holds the
// 64-bit address of the next (one random cycle, one node per 128-byte line, laid out by the host as
// for global_chase.cu), and one thread follows `hops` of them with ld.global.cg (L2 only: a line of a
// peer GPU's memory is not kept in this GPU's L1). The buffer may live in another GPU's memory (peer
// access on): each hop is then a round trip over the link to that GPU's L2.
//
// The chase is long (tens of thousands of hops, milliseconds) and timed inside the kernel by both the
// SM cycle counter and %globaltimer, so the per-hop value needs no launch-overhead correction and
// gives cycles and nanoseconds of the same hops. The stop reads follow the store of the final
// pointer, which waits for the last load: the region ends when the last hop's data is in.
//
// The SM the chase runs on is chosen: the grid has a block for every SM and more, and only the first
// block that finds itself on SM `target_sm` (%smid; `claimed` starts at 0) chases; the others return.
// Where that SM sits (its GPC, its distance to the NVLink ports) moves the latency by up to ~6 %
// between SMs, so the host samples several SMs spread over the GPU.
//
// out[0] = final pointer (the next launch starts there), out[1] = cycles, out[2] = nanoseconds,
// out[3] = the SM + 1 (0: no block ran on the target SM).
#include "gpuprops.cuh"

#ifndef UNROLL
#define UNROLL 16
#endif

extern "C" __global__ void link_chase(const unsigned long long* start, unsigned long long* out, int hops,
                                      unsigned target_sm, unsigned* claimed) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (smid != target_sm || atomicExch(claimed, 1u) != 0u) return;
    unsigned long long p = *(volatile const unsigned long long*)start;
    const unsigned long long c0 = gp_clock();
    const unsigned long long g0 = gp_globaltimer();
#pragma unroll 1
    for (int i = 0; i < hops; i += UNROLL) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) asm volatile("ld.global.cg.u64 %0, [%0];" : "+l"(p)::"memory");
    }
    *(volatile unsigned long long*)out = p;
    const unsigned long long c1 = gp_clock();
    const unsigned long long g1 = gp_globaltimer();
    out[1] = c1 - c0;
    out[2] = g1 - g0;
    out[3] = smid + 1;
}
