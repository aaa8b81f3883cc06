// Capacity sweeps by pointer chase (hwtests/test_cache_capacity.py): the L1 data cache's capacity at
// a shared-memory carve-out (CACHE=0), and the TLBs' reach (CACHE=1, one node per page).
//
// Every node of the chain buffer holds the 64-bit address of the next node; the host lays out one
// random cycle over the footprint (hwtests/specs_caches.py fill_cycle), so each load's result is the
// next load's address and the timed region is UNROLL dependent 64-bit loads, nothing else.
//
//   CACHE=0: ld.global.ca (L1 and L2)    CACHE=1: ld.global.cg (L2 only; the TLB sweep)
//
// One warp, every lane on the same pointer: one request per hop. Before the start read the warp walks
// warm_hops untimed hops (the whole cycle: every node is then where the cache keeps what fits, and the
// walk ends where it began); the timed hops then go on through the same cycle. The carve-out is the
// launch's (dynamic shared memory and the function's PREFERRED_SHARED_MEMORY_CARVEOUT), not the code's.
//
// PLACEMENTS=K (>1): K cycles, each over its own equal slice of the chain buffer, start[k] the first node of
// cycle k; launch n walks cycle n mod K (out[1] counts the launches), so K consecutive launches read K
// placements of the footprint in memory (the L2 partitions' step: which partition a line lives in follows
// its physical address, so one placement reads the step where its own lines put it).
#include "gpuprops.cuh"

#ifndef CACHE
#define CACHE 0
#endif
#ifndef UNROLL
#define UNROLL 256
#endif
#ifndef PLACEMENTS
#define PLACEMENTS 1
#endif

#if CACHE == 0
#define GP_CAP_LD "ld.global.ca.u64 %0, [%0];"
#elif CACHE == 1
#define GP_CAP_LD "ld.global.cg.u64 %0, [%0];"
#else
#error "CACHE must be 0 (ld.global.ca) or 1 (ld.global.cg)"
#endif

// chain: the buffer holding the nodes (an argument so that the launch holds it); start: the address
// of the node the walk begins at (PLACEMENTS > 1: of each cycle's); out: where the last address goes, so the
// chase is not dead code (PLACEMENTS > 1: out[1] the launches so far).
extern "C" __global__ void capacity_chase(unsigned long long* cycles, const unsigned long long* chain,
                                          const unsigned long long* start, unsigned long long* out,
                                          int warm_hops) {
#if PLACEMENTS > 1
    const unsigned long long launch = *(volatile const unsigned long long*)(out + 1);
    unsigned long long p = *(volatile const unsigned long long*)(start + launch % PLACEMENTS);
#else
    unsigned long long p = *(volatile const unsigned long long*)start;
#endif
#pragma unroll 1
    for (int i = 0; i < warm_hops; ++i) asm volatile(GP_CAP_LD : "+l"(p)::"memory");
    unsigned long long t0 = gp_clock();
#pragma unroll
    for (int i = 0; i < UNROLL; ++i) asm volatile(GP_CAP_LD : "+l"(p));
    unsigned long long t1 = gp_clock();
    if (threadIdx.x == 0) {
        out[0] = p;
#if PLACEMENTS > 1
        out[1] = launch + 1;
#endif
    }
    gp_record(cycles, t0, t1);
}
