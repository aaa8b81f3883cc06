"""sm_90 (Hopper) asynchronous units: mbarrier, cp.async (LDGSTS), thread-block clusters and distributed
shared memory (DSMEM), bulk and tensor (TMA) copies. Launch shapes: specs_async.py; their timed
regions are checked without a GPU by test_static_async_units.py.

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
* cluster_barrier_cluster<k>_cycles: barrier.cluster.arrive.relaxed + barrier.cluster.wait, 16 in a
  row, clusters of k (64 CTAs, as the chase); cluster_barrier_release_cluster2_cycles: the default
  (release) arrive, which puts MEMBAR.ALL.GPU before it, as cooperative_groups' cluster.sync() does.
* tma_2d_store_4k_latency_cycles, tma_2d_store_4k_source_read_cycles: one TMA store
  (cp.async.bulk.tensor.2d.global.shared::cta.bulk_group, UTMASTG.2D) of the 4 KiB box from shared
  memory, issued, committed and waited for by lane 0: until cp.async.bulk.wait_group 0 returns (the
  writes done) or wait_group.read 0 (the shared source read, so it may be written again).
* cp_async_bulk_<1k|4k>_latency_cycles, tma_1d_1k_latency_cycles, tma_2d_4k_latency_cycles: one bulk
  copy (cp.async.bulk; cp.async.bulk.tensor.1d / .2d through a tensor map) of 1 or 4 KiB from L2
  (warmed by a first pass) issued by lane 0, completed through the mbarrier it armed with
  expect_tx, until the warp's try_wait returns.

An L2 hit's latency depends on the slice that owns the line, which depends on the physical address
the allocation got, so the L2 copies are measured line by line, 64 lines (memory_levels.near_tier_latency):
the .cg copy (one line per warp) as the lowest tier's median, as the global atomics; the bulk and
tensor copies (8 to 32 lines each, so each waits for its slowest slice: one tier) as the median over
lines.
"""

import pytest
import specs_async as sa
from memory_levels import ALL_LINES, ALL_LINES_TEXT, NEAR_TIER_TEXT, near_tier_latency

from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import measure

pytestmark = [pytest.mark.gpu, pytest.mark.arch("sm_90")]
# These move with the memory system and the clocks of the GPU model (H100 and H200 differ), so they
# are facts of the GPU's section: the L2 reads (.cg, bulk and TMA copies), a release fence that waits
# for memory, and the TMA stores (their writes reach L2).
gp_facts.register_gpu_scoped("cp_async_cg16_latency_cycles", "cp_async_bulk_1k_latency_cycles",
                             "cp_async_bulk_4k_latency_cycles", "tma_1d_1k_latency_cycles", "tma_2d_4k_latency_cycles",
                             "cluster_barrier_release_cluster2_cycles", "tma_2d_store_4k_latency_cycles",
                             "tma_2d_store_4k_source_read_cycles")
MBARRIER_FACT = {"parity": "mbarrier_arrive_wait_cycles", "token": "mbarrier_arrive_token_wait_cycles"}
KIB = {1024: "1k", 4096: "4k"}


def _require_clusters(gpuprops, spec):
    """Before a cluster launch: where the driver refuses ``spec``'s clusters, fail with its reason and
    what to check on sm_90 and newer (they have clusters, and the fact was measured with this launch),
    skip with it only on an arch without clusters (specs_async.refused_cluster). A fact this GPU has no
    value for skips first, saying how to record it; a build problem is left to gpuprops.measure, which
    reports it as every fact does."""
    name = gpuprops.fact_name
    fact = gpuprops.fact(name)  # skips where this GPU's facts lack it
    try:
        reason = gpuprops.runner.cluster_refusal(spec)
    except measure.UncleanRegion:
        return
    if reason:
        skip, message = sa.refused_cluster(gpuprops.gpu.arch, spec, reason, name,
                                           fact.expected_text() if fact is not None else None)
        if skip:
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


@pytest.mark.fact(lambda wait: MBARRIER_FACT[wait])
@pytest.mark.parametrize("wait", sorted(sa.MBARRIER_WAITS))
def test_mbarrier_round_trip(gpuprops, wait, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, sa.mbarrier(wait), divisor=1)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one warp: mbarrier.arrive on a shared mbarrier expecting 32 arrivals (the warp's "
                          f"completes the phase), then {sa.MBARRIER_WAITS[wait][1]} in a loop until true; cycles "
                          "from the arrive's issue to the wait's return (SYNCS.ARRIVE.TRANS64.A1T0 -> "
                          "SYNCS.PHASECHK.TRANS64.TRYWAIT), pass 2 of 2 timed, a fresh barrier per pass")


@pytest.mark.fact("cp_async_{variant}_latency_cycles")
@pytest.mark.parametrize("variant", sorted(sa.CP_ASYNC))
def test_cp_async_latency(gpuprops, variant, benchmark):
    name = gpuprops.fact_name
    cg, size, opcode, hit = sa.CP_ASYNC[variant]
    if variant in sa.L2_COPIES:
        m = near_tier_latency(gpuprops, name, lambda k: sa.cp_async(variant, k), divisor=1)
        where = f"; {NEAR_TIER_TEXT}"
    else:
        m = gpuprops.measure(name, sa.cp_async(variant), divisor=1)
        where = ""
    per_warp = "lane l at 16 (l mod 8): one 128-byte line per warp" if cg else f"{32 * size} contiguous bytes per warp"
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one warp, one cp.async.{'cg' if cg else 'ca'} of {size} bytes per lane ({opcode}; "
                          f"{per_warp}) global -> shared, then commit_group + "
                          f"wait_group 0 (LDGDEPBAR, DEPBAR.LE SB0, 0x0); the source warmed by pass 1, so pass "
                          f"2 (timed) reads {hit}{where}")


@pytest.mark.fact(lambda cluster: f"dsmem_latency_cluster{cluster}_cycles")
@pytest.mark.parametrize("cluster", sa.CLUSTER_SIZES)
def test_dsmem_chase_latency(gpuprops, cluster, benchmark):
    name = gpuprops.fact_name
    spec = sa.dsmem_chase(cluster, 1)
    _require_clusters(gpuprops, spec)
    m = gpuprops.measure(name, spec, divisor=sa.DSMEM_UNROLL)
    gpuprops.plot_point("dsmem_latency", cluster=cluster, cycles=m.median)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{sa.CLUSTER_LAUNCH_CTAS // cluster} clusters of {cluster} CTAs, one warp each, one CTA per "
                          f"SM; every CTA chases {sa.DSMEM_UNROLL} dependent 8-byte generic loads (LD.E.64) through "
                          "the shared memory of the next rank (mapa addresses; 16 distinct words per hop); cycles "
                          f"per hop, median over the {sa.CLUSTER_LAUNCH_CTAS} CTAs (many SM pairs), pass 2 of 2 timed")


@pytest.mark.fact("dsmem_self_latency_cycles")
def test_dsmem_chase_own_shared_memory(gpuprops, benchmark):
    name = gpuprops.fact_name
    spec = sa.dsmem_chase(2, 0)
    _require_clusters(gpuprops, spec)
    m = gpuprops.measure(name, spec, divisor=sa.DSMEM_UNROLL)
    gpuprops.plot_point("dsmem_latency", cluster=None, cycles=m.median)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"as dsmem_latency_cluster2_cycles, every CTA chasing its own shared memory through "
                          f"the same generic loads (LD.E.64 of its mapa addresses), {sa.DSMEM_UNROLL} hops; cycles "
                          "per hop")


@pytest.mark.fact(lambda store: f"dsmem_{'store' if store else 'load'}_bytes_per_cycle")
@pytest.mark.parametrize("store", [False, True], ids=["load", "store"])
def test_dsmem_bandwidth(gpuprops, store, benchmark):
    name = gpuprops.fact_name
    spec = sa.dsmem_bandwidth(store)
    _require_clusters(gpuprops, spec)
    nbytes = sa.dsmem_bytes_per_block()
    m = gpuprops.measure(name, spec, divisor=1, mode="block_span", unit="B/clk",
                         transform=lambda cycles: nbytes / cycles)
    op = "stores" if store else "loads"
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one cluster of {sa.DSMEM_BW_CLUSTER} CTAs of 1024 threads on two SMs, each CTA {op} 16 bytes per "
                          f"thread per instruction ({sa.DSMEM_BW_OPCODE[store]}, volatile) to its neighbour's "
                          f"shared memory, {sa.DSMEM_BW_UNROLL} x {sa.DSMEM_BW_ITERS} per thread; bytes per cycle "
                          "of one CTA's span on its SM's clock, median over the CTAs"
                          + ("; stores still in flight at the stop read are not waited for" if store else ""))


@pytest.mark.fact(lambda cluster: f"cluster_barrier_cluster{cluster}_cycles")
@pytest.mark.parametrize("cluster", sa.CLUSTER_SIZES)
def test_cluster_barrier(gpuprops, cluster, benchmark):
    name = gpuprops.fact_name
    spec = sa.cluster_barrier(cluster)
    _require_clusters(gpuprops, spec)
    m = gpuprops.measure(name, spec, divisor=sa.CLUSTER_BARRIER_UNROLL)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{sa.CLUSTER_LAUNCH_CTAS // cluster} clusters of {cluster} CTAs, one warp each, one CTA per "
                          f"SM, {sa.CLUSTER_BARRIER_UNROLL} x barrier.cluster.arrive.relaxed.aligned + "
                          "barrier.cluster.wait.aligned (UCGABAR_ARV, UCGABAR_WAIT, CCTL.IVALL); cycles per barrier, "
                          "median over CTAs, pass 2 of 2 timed")


@pytest.mark.fact("cluster_barrier_release_cluster2_cycles")
def test_cluster_barrier_release(gpuprops, benchmark):
    name = gpuprops.fact_name
    spec = sa.cluster_barrier(2, relaxed=False)
    _require_clusters(gpuprops, spec)
    m = gpuprops.measure(name, spec, divisor=sa.CLUSTER_BARRIER_UNROLL)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"as cluster_barrier_cluster2_cycles with the default (release) arrive, "
                          f"{sa.CLUSTER_BARRIER_UNROLL} x barrier.cluster.arrive.aligned + barrier.cluster.wait."
                          "aligned (MEMBAR.ALL.GPU, ERRBAR, CGAERRBAR, UCGABAR_ARV, UCGABAR_WAIT, CCTL.IVALL): "
                          "cluster.sync() with nothing to release; cycles per barrier")


@pytest.mark.fact(lambda nbytes: f"cp_async_bulk_{KIB[nbytes]}_latency_cycles")
@pytest.mark.parametrize("nbytes", sa.BULK_BYTES)
def test_bulk_copy_latency(gpuprops, nbytes, benchmark):
    name = gpuprops.fact_name
    m = near_tier_latency(gpuprops, name, lambda k: sa.bulk_copy(nbytes, k), divisor=1, band=ALL_LINES)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one warp; lane 0 arms a fresh mbarrier with mbarrier.arrive.expect_tx {nbytes} and "
                          f"issues cp.async.bulk of {nbytes} contiguous bytes global -> shared (UBLKCP.S.G, in "
                          "ptxas's one-trip ELECT loop), then the warp's try_wait.parity loop until true; the "
                          f"source in L2 from pass 1, pass 2 timed; {ALL_LINES_TEXT}")


@pytest.mark.fact(lambda dim: f"tma_{dim}d_{KIB[sa.tma_bytes(dim)]}_latency_cycles")
@pytest.mark.parametrize("dim", sorted(sa.TMA_SHAPES))
def test_tma_tensor_latency(gpuprops, dim, benchmark):
    name = gpuprops.fact_name
    shape, box = sa.TMA_SHAPES[dim]
    opcode, _ = sa.BULK_COPIES[f"tma_{dim}d"]
    m = near_tier_latency(gpuprops, name, lambda k: sa.tma_tensor(dim, k), divisor=1, band=ALL_LINES)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"as the bulk copy, with cp.async.bulk.tensor.{dim}d.tile ({opcode}) of the {box} box "
                          f"at the origin of an fp32 tensor {shape} (innermost first; {sa.tma_bytes(dim)} bytes; "
                          "tensor map from cuTensorMapEncodeTiled, no swizzle, passed as a __grid_constant__ "
                          "parameter), the tensor starting at each line in turn")


STORE_FACT = {"written": "tma_2d_store_4k_latency_cycles", "source_read": "tma_2d_store_4k_source_read_cycles"}


@pytest.mark.fact(lambda wait: STORE_FACT[wait])
@pytest.mark.parametrize("wait", sorted(sa.TMA_STORE_WAITS))
def test_tma_store_latency(gpuprops, wait, benchmark):
    name = gpuprops.fact_name
    shape, box = sa.TMA_SHAPES[sa.TMA_STORE_DIM]
    ptx_wait, _ = sa.TMA_STORE_WAITS[wait]
    m = gpuprops.measure(name, sa.tma_store(wait), divisor=1)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one warp; lane 0 issues cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (UTMASTG.2D) "
                          f"of the {box} box of an fp32 tensor {shape} from shared memory (written and fenced for the "
                          f"async proxy before the start read) to the tensor's origin, cp.async.bulk.commit_group "
                          f"(UTMACMDFLUSH) and {ptx_wait} (DEPBAR.LE SB, 0x0{' + CCTL.IVALL' if wait == 'written' else ''}); "
                          "cycles of lane 0 from the issue to the wait's return, pass 2 of 2 timed (the lines in L2)")
