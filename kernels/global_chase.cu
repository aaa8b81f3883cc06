// Global-memory latency by pointer chase: every node of a device buffer holds the 64-bit address of
// the next node (the host lays out one random cycle with one node per 128-byte line or more, so each
// hop is a new line and no prefetcher can guess it), so each load's result is the next load's address
// and the timed region is UNROLL dependent 64-bit loads and nothing else: no address arithmetic sits
// in the chain.
//
//   CACHE=0: ld.global.ca (cached in L1 and L2)    CACHE=1: ld.global.cg (L2 only, L1 bypassed)
//
// One warp whose 32 lanes hold the same pointer: one request per hop, as from one thread, with no
// divergence around the clock reads. The chase starts where the previous launch stopped (cursor[0],
// written back after the stop read), so successive launches walk on through the cycle: with UNROLL=1
// each launch times one new hop, and the launches' values are the per-hop latency distribution.
// warm_hops untimed hops run before the start read (the L1 warm-up: a pass over the whole cycle
// brings every node back to where it started, now in L1); the start read waits on them all.
//
// One line (a chain of one node that holds its own address): every hop loads the same line, so with
// CACHE=1 every timed load is an L2 hit served by the slice that owns that line.
// DISCARD=1 (CACHE=1, UNROLL=1): one DRAM miss of the line at cursor[0]. warm_hops loads of the line
// (values unused: its page's translation is then cached and the line is in L2), discard.global.L2
// drops the line from L2 without writing it back, a fence waits for that, and the one timed load of
// the same address misses L2. The line's contents are undefined after the discard, so the address
// is never taken from what the line holds: cursor[0] stays. The loaded value is read (an xor into the
// warm loads' sink, one LOP3) before the stop read, so the region ends when the miss is in whether or
// not the stop read's scoreboard wait holds it; the loaded value, xored with that, goes to cursor[1].
//
// TIMER=1: the warp also reads %globaltimer just before its start read and just after its stop read
// (outside the region; gp_record_timer), so a launch of many hops says the SM clock it ran at (cycles
// over nanoseconds, measure.Runner: the launch info's region_clock_mhz), reported beside the latency.
#include "gpuprops.cuh"

#ifndef CACHE
#define CACHE 0
#endif
#ifndef UNROLL
#define UNROLL 256
#endif

#ifndef DISCARD
#define DISCARD 0
#endif
#ifndef TIMER
#define TIMER 0
#endif
#if DISCARD && (CACHE != 1 || UNROLL != 1)
#error "DISCARD=1 times one ld.global.cg: it needs CACHE=1 and UNROLL=1"
#endif

#if CACHE == 0
#define GP_LD "ld.global.ca.u64 %0, [%0];"
#elif CACHE == 1
#define GP_LD "ld.global.cg.u64 %0, [%0];"
#else
#error "CACHE must be 0 (ld.global.ca) or 1 (ld.global.cg)"
#endif

// chain: the buffer the nodes live in (only the addresses in it are followed; it is an argument so
// that the launch holds it). cursor[0]: the address of the node to start from.
extern "C" __global__ void global_chase(unsigned long long* cycles, const unsigned long long* chain,
                                        unsigned long long* cursor, int warm_hops) {
    unsigned long long p = *(volatile unsigned long long*)cursor;
#if DISCARD
    unsigned long long sink = 0;
#pragma unroll 1
    for (int i = 0; i < warm_hops; ++i) {
        unsigned long long v = p;
        asm volatile(GP_LD : "+l"(v)::"memory");
        sink ^= v;
    }
    asm volatile("discard.global.L2 [%0], 128;" ::"l"(p) : "memory");
    __threadfence();
#else
#pragma unroll 1
    for (int i = 0; i < warm_hops; ++i) asm volatile(GP_LD : "+l"(p)::"memory");
#endif
#if TIMER
    const unsigned long long g0 = gp_globaltimer();
#endif
    unsigned long long t0 = gp_clock();
#pragma unroll
    for (int i = 0; i < UNROLL; ++i) asm volatile(GP_LD : "+l"(p));
#if DISCARD
    // The missed line's value is consumed before the stop read: one xor of its low word into the warm
    // loads' sink, in order, so the stop read cannot issue before the load's data is in (a stop read
    // with nothing reading the load read 2.0 cycles on the H100 for every line, 2026-11-26).
    unsigned consumed = (unsigned)sink;
    asm volatile("xor.b32 %0, %0, %1;" : "+r"(consumed) : "r"((unsigned)p));
#endif
    unsigned long long t1 = gp_clock();
#if TIMER
    const unsigned long long g1 = gp_globaltimer();
#endif
#if DISCARD
    if (threadIdx.x == 0) cursor[1] = p ^ consumed;  // all 64 bits read: the load stays a 64-bit one
#else
    if (threadIdx.x == 0) cursor[0] = p;
#endif
    gp_record(cycles, t0, t1);
#if TIMER
    gp_record_timer(cycles, g0, g1);
#endif
}
