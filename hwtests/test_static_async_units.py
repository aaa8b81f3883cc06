"""Static checks of the sm_90 asynchronous-unit builds (hwtests/specs_async.py), without a GPU: every
build the GPU tests launch is clean at both ends and holds what its fact measures, as launched; the
asynchronous operation and its wait sit in the region in that order; a wait loop's retries run out
of line and come back into the region (so they are timed); the DSMEM chase is a true chain and the
bandwidth loop touches one pinned address per thread; each latency build times its second pass."""

import functools
import re
from pathlib import Path

import pytest
import specs_async as sa

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.measure import build_for_timing

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
BUILDS = sa.builds()
_REG = re.compile(r"\bR(\d+)\b")
#: build -> the opcodes that must follow one another in its region (others may sit between)
ORDER = {
    "mbarrier_parity": ["SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA"],
    "mbarrier_token": ["SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA"],
    **{f"cp_async_{v}": [op, "LDGDEPBAR", "DEPBAR.LE"] for v, (_, _, op, _) in sa.CP_ASYNC.items()},
    "dsmem_chase": ["LD.E.64"] * sa.DSMEM_UNROLL,
    "dsmem_load_bandwidth": ["LD.E.128.STRONG.SYS"] * sa.DSMEM_BW_UNROLL + ["BRA"],
    "dsmem_store_bandwidth": ["ST.E.128.STRONG.SYS"] * sa.DSMEM_BW_UNROLL + ["BRA"],
    "cluster_barrier_relaxed": list(sa.CLUSTER_BARRIER_STEP[True]) * sa.CLUSTER_BARRIER_UNROLL,
    "cluster_barrier_release": list(sa.CLUSTER_BARRIER_STEP[False]) * sa.CLUSTER_BARRIER_UNROLL,
    **{b: ["SYNCS.ARRIVE.TRANS64", "ELECT", sa.BULK_COPIES[b if b != "bulk_copy" else "bulk"][0], "BRA.U.ANY",
           "SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA"] for b in ("bulk_copy", "tma_1d", "tma_2d")},
    "tma_store_written": ["UTMASTG.2D", "UTMACMDFLUSH", "DEPBAR.LE", "CCTL.IVALL", "BSYNC"],
    "tma_store_source_read": ["UTMASTG.2D", "UTMACMDFLUSH", "DEPBAR.LE", "BSYNC"],
}
WAIT_LOOPS = sorted(b for b in BUILDS if b.startswith(("mbarrier_", "bulk_", "tma_")) and "store" not in b)
TWO_PASSES = sorted(b for b, s in BUILDS.items() if s.defines.get("PASSES") == 2)


@functools.lru_cache(maxsize=None)
def launched(build_id: str) -> tuple[sass.Instruction, ...]:
    """The build as it is launched: compiled for sm_90, patched for timing and checked."""
    spec = BUILDS[build_id]
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, sa.ARCH, spec.defines).cubin, sa.ARCH,
                       name=f"{spec.source} {spec.defines}")
    return tuple(build_for_timing(cubin, spec)[1])


def region(build_id: str) -> list[sass.Instruction]:
    _, between, _ = sass.timed_region(list(launched(build_id)))
    return [i for i in between if not sass.is_filler(i)]


def is_subsequence(wanted: list[str], got: list[str]) -> bool:
    it = iter(got)
    return all(any(g == w for g in it) for w in wanted)


def test_every_build_has_its_order_and_few_builds():
    assert sorted(ORDER) == sorted(BUILDS) and len(BUILDS) < 20


@pytest.mark.parametrize("build_id", sorted(BUILDS))
def test_build_is_clean_and_as_intended(build_id):
    """As launched on sm_90: clean at both ends, the intended opcodes (the asynchronous operation and
    its wait) in order, and nothing else beyond the spec's allowance."""
    spec = BUILDS[build_id]
    instrs = list(launched(build_id))
    assert sass.region_hazards(instrs) == []
    assert sass.region_mismatch(instrs, spec.region, spec.region_other) == []
    got = [i.opcode for i in region(build_id)]
    assert is_subsequence(ORDER[build_id], got), got


@pytest.mark.parametrize("build_id", TWO_PASSES)
def test_latency_build_times_its_second_pass(build_id):
    """The pass loop branches back over the whole timed region once the stop read is taken."""
    instrs = list(launched(build_id))
    start, _, stop = sass.timed_region(instrs)
    back = [i for i in instrs if i.offset > stop.offset and i.base_opcode == "BRA" and i.predicate
            and int(i.operands[-1], 16) <= start.offset]
    assert len(back) == 1, [i.text for i in back]


def _target(i: sass.Instruction) -> int:
    return int(i.operands[-1], 16)


@pytest.mark.parametrize("build_id", WAIT_LOOPS)
def test_wait_retries_run_out_of_line_and_return_into_the_region(build_id):
    """try_wait's false branch leaves the region for ptxas's retry loop ([YIELD,] TRYWAIT, branch) after
    the kernel's EXIT, which returns to the region, at the latest to the stop read: every retry is
    timed."""
    instrs = list(launched(build_id))
    start, between, stop = sass.timed_region(instrs)
    waits = [i for i in between if i.opcode == "SYNCS.PHASECHK.TRANS64.TRYWAIT"]
    assert len(waits) == 1
    after = [i for i in between if i.offset > waits[0].offset and i.base_opcode == "BRA"]
    assert after and after[0].predicate == "@!P0" and _target(after[0]) > stop.offset, [i.text for i in after]
    retry = [i for i in instrs if i.offset >= _target(after[0])]
    out = next(k for k, i in enumerate(retry) if i.base_opcode == "BRA" and not i.predicate)
    loop = retry[:out + 1]
    ops = [i.opcode for i in loop if not sass.is_filler(i) and i.opcode != "YIELD"]  # the mbarrier's has one
    assert ops == ["SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA", "BRA"], ops
    assert any(_target(i) == loop[0].offset for i in loop if i.predicate == "@!P0")  # retries until true
    assert start.offset < _target(loop[-1]) <= stop.offset  # then back into the region


@pytest.mark.parametrize("wait", sorted(sa.MBARRIER_WAITS))
def test_token_wait_reads_the_arrive_result_and_parity_wait_does_not(wait):
    """Token: the arrive writes the state (a register pair) and the try_wait waits on that write and
    reads its phase half. Parity: the arrive returns nothing (RZ, no write scoreboard), so the
    try_wait does not wait for it."""
    arrive, trywait = [i for i in region(f"mbarrier_{wait}") if i.base_opcode == "SYNCS"]
    if wait == "token":
        state = int(_REG.findall(arrive.operands[0])[0])
        assert arrive.control.write_barrier is not None
        assert trywait.control.wait_mask >> arrive.control.write_barrier & 1
        assert _REG.findall(trywait.operands[-1]) == [str(state + 1)]
    else:
        assert arrive.operands[0] == "RZ" and arrive.control.write_barrier is None


@pytest.mark.parametrize("variant", sorted(sa.CP_ASYNC))
def test_cp_async_waits_for_every_group(variant):
    """wait_group 0: the DEPBAR waits until the copy-group counter the LDGDEPBAR counts on is 0."""
    ins = region(f"cp_async_{variant}")
    depbar = next(i for i in ins if i.base_opcode == "LDGDEPBAR")
    wait = next(i for i in ins if i.opcode == "DEPBAR.LE")
    assert depbar.control.write_barrier == 0 and wait.operands == ["SB0", "0x0"], (depbar.line(), wait.text)


@pytest.mark.parametrize("wait", sorted(sa.TMA_STORE_WAITS))
def test_tma_store_waits_for_its_bulk_group(wait):
    """The store's commit (UTMACMDFLUSH) counts on scoreboard 0 (its read barrier; the store's own is 1)
    and the wait is a DEPBAR until that scoreboard is 0, inside
    the branch only lane 0 takes (lane 0's clock pair is recorded): the region ends when lane 0's bulk
    group is done."""
    ins = region(f"tma_store_{wait}")
    flush = next(i for i in ins if i.opcode == "UTMACMDFLUSH")
    depbar = next(i for i in ins if i.opcode == "DEPBAR.LE")
    assert flush.control.read_barrier == 0 and depbar.operands == ["SB0", "0x0"], (flush.line(), depbar.text)
    skip = next(i for i in ins if i.base_opcode == "BRA")
    assert skip.predicate and skip.offset < flush.offset < depbar.offset < _target(skip)


def test_dsmem_chase_each_address_is_the_previous_result():
    chain = region("dsmem_chase")
    assert len(chain) == sa.DSMEM_UNROLL
    for prev, cur in zip(chain, chain[1:]):
        dest = int(_REG.findall(prev.operands[0])[0])
        assert _REG.findall(cur.operands[1]) == [str(dest)], f"{cur.text} does not load from {prev.text}'s result"


@pytest.mark.parametrize("store", [False, True], ids=["load", "store"])
def test_dsmem_bandwidth_loop_touches_one_pinned_address(store):
    """Every access of the loop uses one address register pair, set before the start read; the loop
    branches back once per trip of DSMEM_BW_UNROLL accesses."""
    build = f"dsmem_{'store' if store else 'load'}_bandwidth"
    ins = region(build)
    access = [i for i in ins if i.opcode == sa.DSMEM_BW_OPCODE[store]]
    addresses = {next(o for o in i.operands if "[" in o) for i in access}
    assert len(access) == sa.DSMEM_BW_UNROLL and len(addresses) == 1, addresses
    reg = _REG.findall(addresses.pop())[0]
    assert not any(_REG.findall(i.operands[0])[:1] == [reg] for i in ins if i.operands and i not in access)
    back = [i for i in ins if i.base_opcode == "BRA" and _target(i) < access[0].offset + 16]
    assert len(back) == 1 and back[0].offset > access[-1].offset


def test_cluster_specs_launch_whole_clusters():
    for k in sa.CLUSTER_SIZES:
        for spec in (sa.dsmem_chase(k, 1), sa.cluster_barrier(k), sa.cluster_barrier(k, relaxed=False)):
            assert spec.cluster == k and spec.grid == sa.CLUSTER_LAUNCH_CTAS and spec.grid % k == 0
    for store in (False, True):
        spec = sa.dsmem_bandwidth(store)
        assert spec.cluster == spec.grid == sa.DSMEM_BW_CLUSTER and spec.block == 1024
    assert all(s.cluster is None for b, s in BUILDS.items() if not b.startswith(("dsmem_", "cluster_")))


def test_cluster_ctas_cannot_share_an_sm():
    """Each cluster CTA asks for more than half an SM's shared memory (228 KiB on sm_90, at most 227 KiB
    per CTA), so a cluster's neighbour is always another SM."""
    per_sm, per_cta = 228 * 1024, 227 * 1024
    for b, spec in BUILDS.items():
        if spec.cluster is not None:
            assert per_sm // 2 < spec.shared_mem <= per_cta - 48 * 1024, b  # with room for the static arrays
