"""Static checks of the sm_90 asynchronous units' facts (hwtests/specs_async.FACTS), without a GPU: every
fact's build, as the GPU test launches it, is clean at both ends and holds its spec's region (the unit's
opcodes in order, only its shape's glue beside them, its second pass timed, a try_wait's retries out of
line and back into the region: pytest_gpuprops/factspec.py). Beside those rules, what one unit's
facts rely on: the token wait reads the arrive's result, cp.async and the TMA store wait for their
group, the visible TMA store polls every row from pinned addresses and waits for its group only after
the stop read, the DSMEM chase is a true chain, the bandwidth loop touches one pinned address per thread,
the cluster launches keep every CTA on its own SM, and the TMA stream reads pinned rows into the stage it
armed with as many blocks per SM as its name says (with its pure functions: the ring's shape, the bytes
counted, the rows). Every test takes one fact, by its name."""

import dataclasses
import re

import fact_tests as ft
import pytest
import specs_async as sa

from pytest_gpuprops import sass

pytestmark = pytest.mark.static
FACTS = {f.name: f for f in sa.FACTS}
_REG = re.compile(r"\bR(\d+)\b")


def _facts(keep) -> list:
    return ft.static_params([f for f in sa.FACTS if keep(f)])


def _kernel(name: str):
    return lambda f: f.build().kernel == name


@pytest.mark.parametrize("fact", ft.static_params(sa.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    """As launched on sm_90: the spec's rules hold (region_rules.Region.problems), and the patched region
    is clean at both ends and holds the unit's exact counts (timing.build_for_timing)."""
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []


def _target(i: sass.Instruction) -> int:
    return int(i.operands[-1], 16)


@pytest.mark.parametrize("fact", _facts(_kernel("mbarrier_roundtrip")))
def test_token_wait_reads_the_arrive_result_and_parity_wait_does_not(fact):
    """Token: the arrive writes the state (a register pair) and the try_wait waits on that write and
    reads its phase half. Parity: the arrive returns nothing (RZ, no write scoreboard), so the
    try_wait does not wait for it."""
    arrive, trywait = [i for i in ft.region(fact) if i.base_opcode == "SYNCS"]
    if fact.build().defines["TOKEN"]:
        state = int(_REG.findall(arrive.operands[0])[0])
        assert arrive.control.write_barrier is not None
        assert trywait.control.wait_mask >> arrive.control.write_barrier & 1
        assert _REG.findall(trywait.operands[-1]) == [str(state + 1)]
    else:
        assert arrive.operands[0] == "RZ" and arrive.control.write_barrier is None


@pytest.mark.parametrize("fact", _facts(_kernel("cp_async_latency")))
def test_cp_async_waits_for_every_group(fact):
    """wait_group 0: the DEPBAR waits until the copy-group counter the LDGDEPBAR counts on is 0."""
    ins = ft.region(fact)
    depbar = next(i for i in ins if i.base_opcode == "LDGDEPBAR")
    wait = next(i for i in ins if i.opcode == "DEPBAR.LE")
    assert depbar.control.write_barrier == 0 and wait.operands == ["SB0", "0x0"], (depbar.line(), wait.text)


def _store(visible: bool):
    return lambda f: f.build().kernel == "tma_store" and bool(f.build().defines.get("STORE_VISIBLE")) == visible


@pytest.mark.parametrize("fact", _facts(_store(visible=False)))
def test_tma_store_waits_for_its_bulk_group(fact):
    """The store's commit (UTMACMDFLUSH) counts on scoreboard 0 (its read barrier; the store's own is 1)
    and the wait is a DEPBAR until that scoreboard is 0, inside the branch only lane 0 takes (lane 0's
    clock pair is recorded): the region ends when lane 0's bulk group is done."""
    ins = ft.region(fact)
    flush = next(i for i in ins if i.opcode == "UTMACMDFLUSH")
    depbar = next(i for i in ins if i.opcode == "DEPBAR.LE")
    assert flush.control.read_barrier == 0 and depbar.operands == ["SB0", "0x0"], (flush.line(), depbar.text)
    skip = next(i for i in ins if i.base_opcode == "BRA")
    assert skip.predicate and skip.offset < flush.offset < depbar.offset < _target(skip)


@pytest.mark.parametrize("fact", _facts(_store(visible=True)))
def test_tma_store_polls_every_row_from_pinned_addresses_and_waits_after_the_stop(fact):
    """The visible store's poll: one strong load per lane (L2, not L1) from an address set before the
    start read, compared with a value set before it (nothing computed in the loop), the warp's vote on
    that compare, the branch back to the load while the vote is false; the store's bulk group is waited
    for (DEPBAR on the commit's scoreboard) only after the stop read, on lane 0's path, before the
    next pass writes the source again."""
    instrs = list(ft.launched(fact))
    start, _, stop = sass.timed_region(instrs)
    ins = ft.region(fact)
    load = next(i for i in ins if i.opcode == "LDG.E.STRONG.GPU")
    compare = next(i for i in ins if i.base_opcode == "ISETP")
    vote = next(i for i in ins if i.opcode == "VOTE.ALL")
    written = {r for i in ins if i.operands for r in _REG.findall(i.operands[0])}
    address = _REG.findall(next(o for o in load.operands if "[" in o))
    assert address and not set(address) & written and int(address[0]) + 1 not in {int(r) for r in written}, load.text
    loaded = _REG.findall(load.operands[0])[0]
    others = [r for o in compare.operands[1:] for r in _REG.findall(o)]
    assert loaded in others and not (set(others) - {loaded}) & written, compare.text
    assert compare.operands[0] in vote.text
    flush = next(i for i in ins if i.opcode == "UTMACMDFLUSH")
    after = [i for i in instrs if i.offset > stop.offset]
    depbar = next(i for i in after if i.opcode == "DEPBAR.LE")
    assert depbar.operands == [f"SB{flush.control.read_barrier}", "0x0"], depbar.text
    skip = next(i for i in after if i.base_opcode == "BRA")
    assert skip.predicate and skip.offset < depbar.offset < _target(skip), (skip.text, depbar.text)


@pytest.mark.parametrize("fact", _facts(_kernel("dsmem_chase")))
def test_dsmem_chase_each_address_is_the_previous_result(fact):
    chain = ft.region(fact)
    assert len(chain) == sa.DSMEM_UNROLL
    for prev, cur in zip(chain, chain[1:]):
        dest = int(_REG.findall(prev.operands[0])[0])
        assert _REG.findall(cur.operands[1]) == [str(dest)], f"{cur.text} does not load from {prev.text}'s result"


@pytest.mark.parametrize("fact", _facts(_kernel("dsmem_bandwidth")))
def test_dsmem_bandwidth_loop_touches_one_pinned_address(fact):
    """Every access of the loop uses one address register pair, set before the start read; the loop
    branches back once per trip of DSMEM_BW_UNROLL accesses."""
    ins = ft.region(fact)
    access = [i for i in ins if i.opcode in fact.region.unit]
    addresses = {next(o for o in i.operands if "[" in o) for i in access}
    assert len(access) == sa.DSMEM_BW_UNROLL and len(addresses) == 1, addresses
    reg = _REG.findall(addresses.pop())[0]
    assert not any(_REG.findall(i.operands[0])[:1] == [reg] for i in ins if i.operands and i not in access)
    back = [i for i in ins if i.base_opcode == "BRA" and _target(i) < access[0].offset + 16]
    assert len(back) == 1 and back[0].offset > access[-1].offset


def test_cluster_facts_launch_whole_clusters():
    """The chases, barriers and the bandwidth sweep: CLUSTER_LAUNCH_CTAS CTAs in whole clusters of the
    size the fact's name says, every size of CLUSTER_SIZES for each kind; the bandwidth at one size: one
    cluster of two 1024-thread CTAs; no other fact launches clusters."""
    sizes: dict[str, set] = {}
    for name, f in FACTS.items():
        spec = f.build()
        named = re.search(r"_cluster(\d+)(_|$)", name)
        if named:
            assert spec.cluster == int(named.group(1)), name
            sizes.setdefault(name[:named.start()] + name[named.end(1):], set()).add(spec.cluster)
        if spec.kernel in ("dsmem_chase", "cluster_barrier") or (spec.kernel == "dsmem_bandwidth" and named):
            assert spec.grid == sa.CLUSTER_LAUNCH_CTAS and spec.grid % spec.cluster == 0, name
        elif spec.kernel == "dsmem_bandwidth":
            assert spec.cluster == spec.grid == sa.DSMEM_BW_CLUSTER and spec.block == 1024, name
        else:
            assert spec.cluster is None, name
    swept = {kind: s for kind, s in sizes.items() if len(s) > 1}
    assert set(swept) == {"dsmem_latency_cycles", "cluster_barrier_cycles", "dsmem_load_bytes_per_cycle",
                          "dsmem_store_bytes_per_cycle"}, sorted(swept)
    assert all(s == set(sa.CLUSTER_SIZES) for s in swept.values()), swept


def test_cluster_ctas_cannot_share_an_sm():
    """Each cluster CTA asks for more than half an SM's shared memory (228 KiB on sm_90, at most 227 KiB
    per CTA), so a cluster's neighbour is always another SM."""
    per_sm, per_cta = 228 * 1024, 227 * 1024
    for name, f in FACTS.items():
        spec = f.build()
        if spec.cluster is not None:
            assert per_sm // 2 < spec.shared_mem <= per_cta - 48 * 1024, name  # with room for the static arrays


# ----------------------------------------------------------------------------------------------
# TMA throughput (tma_stream): the ring, the blocks per SM, the bytes counted


def _stream(f) -> bool:
    return f.build().kernel == "tma_stream"


@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_copies_read_pinned_rows_into_the_armed_stage(fact):
    """Each copy's box row is a register set before the start read (nothing computes it in the region), and
    every copy completes on the barrier the trip armed and the try_wait is not on (the next stage's)."""
    ins = ft.region(fact)
    copies = sa.tma_stream_shape(_box(fact))["copies"]
    written = {r for i in ins if i.operands for r in _REG.findall(i.operands[0])}
    sources = [_REG.findall(i.operands[-1]) for i in ins if i.base_opcode == "R2UR"]
    pinned = {r[0] for r in sources if r and r[0] not in written}
    assert len(pinned) == copies, (pinned, [i.text for i in ins if i.base_opcode == "R2UR"])
    arm = next(i for i in ins if i.opcode == "SYNCS.ARRIVE.TRANS64")
    wait = next(i for i in ins if i.opcode == "SYNCS.PHASECHK.TRANS64.TRYWAIT")
    armed = _REG.findall(next(o for o in arm.operands if "[" in o))
    waited = _REG.findall(next(o for o in wait.operands if "[" in o))
    assert armed and waited and armed != waited, (arm.text, wait.text)
    barrier = {r[0] for r in sources if r and r[0] == armed[0]}
    assert barrier == {armed[0]}, "the copies do not complete on the barrier the trip armed"


def _box(fact) -> int:
    return int(re.search(r"_box(\d+)k_", fact.name).group(1)) * 1024


def test_tma_stream_facts_cover_every_box_and_blocks_per_sm():
    names = {f.name for f in sa.FACTS if _stream(f)}
    assert names == {f"tma_2d_load_bytes_per_cycle_box{sa.KIB_NAME[b]}_blocks{n}"
                     for b in sa.TMA_STREAM_BOXES for n in sa.TMA_STREAM_BLOCKS_PER_SM}
    assert all(FACTS[n].scope == "gpu" and FACTS[n].unit == "B/clk" for n in names)


@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_shared_memory_places_that_many_blocks_on_an_sm(fact):
    """The dynamic shared memory (plus under 1 KiB of static and the 1 KiB sm_90 reserves per block) lets
    the named number of blocks on one SM's 228 KiB (the largest carve-out, asked for) and not one more, so
    grid = SMs x blocks puts exactly that many on every SM; the ring fits in it."""
    spec = fact.build()
    blocks = int(fact.name.rsplit("blocks", 1)[1])
    per_sm, reserved, static = 228 * 1024, 1024, 1024
    low, high = spec.shared_mem + reserved, spec.shared_mem + reserved + static
    assert blocks * high <= per_sm < (blocks + 1) * low, (fact.name, spec.shared_mem)
    assert spec.grid == sa.sm_count() * blocks and spec.block == 32 and spec.carveout == 100
    assert sa.tma_stream_shape(_box(fact))["ring_bytes"] <= spec.shared_mem


def test_tma_stream_shape_and_bytes_counted():
    """64 KiB in flight per block for every box; the trips are whole rounds of the ring; the bytes
    counted are those of all trips but the last stages - 1 (their waits come after the stop read)."""
    for box, (rows, copies, stages) in sa.TMA_STREAM_BOXES.items():
        sh = sa.tma_stream_shape(box)
        assert sh["box"] == (32, rows) and rows * 128 == box
        assert sh["ring_bytes"] == 64 * 1024 and sh["trips"] % stages == 0
        assert sh["trips"] * sh["stage_bytes"] == sa.TMA_STREAM_BYTES
        assert sa.tma_stream_waited_bytes(box) == sa.TMA_STREAM_BYTES - (stages - 1) * copies * box
    assert sa.tma_stream_waited_bytes(16384) == (512 - 3) * 16384
    with pytest.raises(ValueError, match="expected one of"):
        sa.tma_stream_shape(2048)
    with pytest.raises(ValueError, match="blocks per SM"):
        sa.tma_stream(4096, 3)


def test_tma_stream_rows_give_every_copy_a_box_of_its_own():
    rows = sa.tma_stream_rows(3, 1024)  # 4 copies a stage, boxes of 8 rows
    assert rows == [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88]
    big = sa.tma_stream_rows(264, 16384)
    assert len(set(big)) == len(big) == 264 and big[-1] == 263 * 128


@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_region_refuses_a_copy_more_or_no_wait(fact):
    """Planted: the same build against a region expecting one more copy a trip, or the wait left out,
    breaks the rules; the spec's own region holds."""
    cubin, spec = ft.compiled(fact)
    instrs = cubin.instructions(spec.kernel)
    unit = fact.region.unit
    more = sa.Region(unit[:-1] + (sa.TMA_STREAM_OPCODES[1], unit[-1]), sa.COPY_RING)
    no_wait = sa.Region(unit[:-1], sa.COPY_RING)
    assert fact.region.problems(instrs, spec.defines) == []
    assert any("UTMALDG.2D" in p for p in more.problems(instrs, spec.defines))
    assert any("TRYWAIT" in p for p in no_wait.problems(instrs, spec.defines))
    glue = len([i for i in ft.region(fact) if i.opcode not in unit])
    tight = sa.Region(unit, dataclasses.replace(sa.COPY_RING, glue_max=glue - 1))
    assert any(f"{glue} other instructions" in p for p in tight.problems(instrs, spec.defines))
    elected = sa.Region(unit[:1] + unit[-2:], sa.ELECTED_COPY)
    assert any("nor the glue of a elected_copy region" in p for p in elected.problems(instrs, spec.defines))


def test_dsmem_bandwidth_takes_whole_clusters_only():
    spec = sa.dsmem_bandwidth(False, 4, 64)
    assert (spec.grid, spec.cluster, spec.block) == (64, 4, 1024)
    with pytest.raises(ValueError, match="whole clusters"):
        sa.dsmem_bandwidth(True, 16, 40)
