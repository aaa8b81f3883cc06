"""sm_90 (Hopper) asynchronous units: mbarrier, cp.async (LDGSTS), thread-block clusters and distributed
shared memory (DSMEM), bulk and tensor (TMA) copies. Each fact is one spec of specs_async.FACTS (its
launch, region, statistic, scope and method) and one test here; their timed regions are checked
without a GPU by test_static_async_units.py.

Each asynchronous operation completes through an mbarrier (try_wait in a loop until it returns true)
or an async-copy group (cp.async.wait_group 0: DEPBAR), not a register scoreboard, so its timed
region runs from the issue to the wait's return; every latency is one warp's (stop - start - clock
overhead), the median over warps (one warp per CTA for the cluster kernels), divided by the
operations in the region. The cluster kernels are launched with cuLaunchKernelEx and a cluster
dimension (KernelSpec.cluster), every CTA with 120 KiB of dynamic shared memory so that no two CTAs
of a cluster share an SM. A cluster launch the driver refuses (the non-portable 16, or 16 SMs of one
GPC not free) fails with the driver's reason and what to check: sm_90 has clusters and these facts were
measured with these launches; only an arch without clusters would skip (specs_async.refused_cluster).

* mbarrier_arrive_wait_cycles: one warp's mbarrier.arrive (32 arrivals complete the phase) ->
  mbarrier.try_wait.parity returns true; mbarrier_arrive_token_wait_cycles: the same waiting on the
  arrive's state token (the wait issues after the arrive returns).
* cp_async_<ca4|ca16|cg16>_latency_cycles: one cp.async per lane (4 or 16 bytes; .ca or .cg) from
  lines a first pass brought in (an L1 hit for .ca, an L2 hit for .cg), then commit_group +
  wait_group 0; the .cg copy line by line (below).
* dsmem_latency_cluster<k>_cycles: per hop of a dependent 8-byte chase through the neighbouring CTA's
  shared memory, clusters of k = 2, 4, 8, 16 (64 CTAs: 64 / k clusters, the median over CTAs);
  dsmem_self_latency_cycles: the same chase through the CTA's own shared memory by the same generic
  load (compare lds_latency_cycles, the LDS chase).
* dsmem_<load|store>_bytes_per_cycle: bytes per SM cycle one 1024-thread CTA moves to / from its
  neighbour's shared memory with 16-byte volatile accesses, clusters of 2; each CTA's span on its own
  SM's clock (mode block_span), median over the two. The stores are not waited for at the stop read
  (only a fence waits for a remote store): what is in flight then is a tail bounded by the store
  queues, against 32768 warp-wide stores (16 MiB) per CTA.
* dsmem_<load|store>_bytes_per_cycle_cluster<k>: the same accesses with every CTA of 64 (one per SM,
  64 / k clusters of k = 2, 4, 8, 16) loading / storing its neighbour's shared memory at once: DSMEM
  throughput per SM against cluster size, the median of the 64 CTAs' spans.
* cluster_barrier_cluster<k>_cycles: barrier.cluster.arrive.relaxed + barrier.cluster.wait, 16 in a
  row, clusters of k (64 CTAs, as the chase); cluster_barrier_release_cluster2_cycles: the default
  (release) arrive, which puts MEMBAR.ALL.GPU before it, as cooperative_groups' cluster.sync() does.
* tma_2d_store_4k_source_read_cycles, tma_2d_store_4k_visible_cycles: one TMA store
  (cp.async.bulk.tensor.2d.global.shared::cta.bulk_group, UTMASTG.2D) of the 4 KiB box from shared
  memory, issued and committed by lane 0: until lane 0's cp.async.bulk.wait_group.read 0 returns (the
  shared source read, so it may be written again; wait_group 0, "the writes done", compiles on sm_90 to
  the same wait and an L1 invalidation, so it is no fact of its own), or until every lane's
  ld.relaxed.gpu polls read the stored values of all 32 rows in L2 (the writes visible to the GPU).
* cp_async_bulk_<1k|4k>_latency_cycles, tma_1d_1k_latency_cycles, tma_2d_4k_latency_cycles: one bulk
  copy (cp.async.bulk; cp.async.bulk.tensor.1d / .2d through a tensor map) of 1 or 4 KiB from L2
  (warmed by a first pass) issued by lane 0, completed through the mbarrier it armed with
  expect_tx, until the warp's try_wait returns.

* tma_2d_load_bytes_per_cycle_box1k_blocks1, tma_2d_load_gbps_per_sm_box<4k|16k>_blocks<1|2>: TMA
  throughput from L2 per SM, on every SM at once: 1 or 2 blocks of 4 warps per SM (their dynamic shared
  memory lets no more on one), each warp streaming 2D boxes of 1, 4 or 16 KiB through a ring of mbarrier
  stages of its own (64 KiB in flight per block; each trip the lane elect.sync picks arms a stage and issues
  its copy, the warp waits for the stage the next trip refills); the bytes waited for in the region per
  cycle of each block's span (the 1 KiB box, bound by its issuing loop) or per nanosecond of it (%globaltimer:
  the 4 and 16 KiB boxes, bound by the L2, whose rate per SM cycle moves with the SM's clock state), the
  median over blocks, x the blocks per SM. Four issuing warps because one warp's loop bounded the 1 KiB box.

An L2 hit's latency depends on the slice that owns the line, which depends on the physical address
the allocation got, so the L2 copies are measured line by line, 64 lines (memory_levels.near_tier_latency):
the .cg copy (one line per warp) as the lowest tier's median, as the global atomics; the bulk and
tensor copies (8 to 32 lines each, so each waits for its slowest slice: one tier) as the median over
lines.
"""

import fact_tests
import pytest
import specs_async as sa

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(sa.FACTS))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)
