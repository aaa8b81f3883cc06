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
import shutil

import fact_tests as ft
import pytest
import specs_async as sa

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.timing import build_for_timing

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
    """The chases and barriers: a CTA on every SM (specs_async.cluster_chase_ctas), the bandwidth sweep:
    CLUSTER_LAUNCH_CTAS CTAs, in whole clusters of the size the fact's name says, every size of CLUSTER_SIZES for each kind; the bandwidth at one size: one
    cluster of two 1024-thread CTAs; no other fact launches clusters."""
    sizes: dict[str, set] = {}
    for name, f in FACTS.items():
        spec = f.build()
        named = re.search(r"_cluster(\d+)(_|$)", name)
        if named:
            assert spec.cluster == int(named.group(1)), name
            sizes.setdefault(name[:named.start()] + name[named.end(1):], set()).add(spec.cluster)
        if spec.kernel in ("dsmem_chase", "cluster_barrier"):
            assert spec.grid == sa.cluster_chase_ctas(spec.cluster) and spec.grid % spec.cluster == 0, name
            assert sa.sm_count() - spec.cluster < spec.grid <= sa.sm_count(), name
        elif spec.kernel == "dsmem_bandwidth" and named:
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


def _uniform_base(operand: str) -> int:
    """[UR12] -> 12."""
    return int(re.fullmatch(r"\[UR(\d+)\]", operand).group(1))


#: what may write the row register in the loop: the walk's add and its wrap (a select, or an add under a compare)
WALK_OPCODES = frozenset({"IADD3", "VIADD", "IMAD", "SEL"})


def tma_stream_copy_problems(ins: list, stages: int) -> list[str]:
    """How one trip of the TMA stream's loop (``ins``: the region) breaks what the fact relies on: one ELECT,
    straight line (no ELECT loop's BRA.U.ANY, no vote), the arm on the elected lane only, the copy issued once
    (unpredicated, uniform); its tensor map address (the second operand's two uniform registers) and its
    column (the third of the first's) from registers set before the start read, its row (the fourth) from one
    that only the walk to the next box changes in the loop (adds, compares' selects: WALK_OPCODES); its barrier
    (the second of the first's) the one the trip armed, and the try_wait on another stage's (where there are
    several)."""
    problems = []
    elects = [i for i in ins if i.base_opcode == "ELECT"]
    looped = [i.text for i in ins if i.opcode.startswith(("BRA.U", "VOTE"))]
    if len(elects) != 1 or looped:
        return [f"not one straight-line ELECT: {[i.text for i in elects]}, loops or votes {looped}"]
    elected = elects[0].operands[0]
    arm = next(i for i in ins if i.opcode == "SYNCS.ARRIVE.TRANS64")
    copy = next(i for i in ins if i.opcode == "UTMALDG.2D")
    wait = next(i for i in ins if i.opcode == "SYNCS.PHASECHK.TRANS64.TRYWAIT")
    if arm.predicate != f"@{elected}":
        problems.append(f"the arm ({arm.text}) is not on the elected lane ({elects[0].text}) only")
    if copy.predicate:
        problems.append(f"the copy is predicated ({copy.text}): not issued once per trip")
    written = {r for i in ins if i.operands for r in _REG.findall(i.operands[0])}
    moved = {i.operands[0]: _REG.findall(i.operands[-1])[0] for i in ins
             if i.base_opcode == "R2UR" and _REG.findall(i.operands[-1])}
    desc, tmap = (_uniform_base(o) for o in copy.operands[:2])
    pinned = {f"UR{r}" for r in (tmap, tmap + 1, desc + 2)}
    unpinned = sorted(u for u in pinned if u not in moved or moved[u] in written)
    if unpinned:
        problems.append(f"the copy's map address or coordinates ({unpinned}) are not from registers set before the "
                        f"start read: {sorted(moved.items())}")
    row = moved.get(f"UR{desc + 3}")
    walked = [i.text for i in ins if i.operands and _REG.findall(i.operands[0])[:1] == [row]
              and i.base_opcode not in WALK_OPCODES]
    if row is None or walked:
        problems.append(f"the copy's row (UR{desc + 3}) is not a register that only the walk to the next box "
                        f"changes: R{row}, written by {walked}")
    armed = _REG.findall(next(o for o in arm.operands if "[" in o))
    waited = _REG.findall(next(o for o in wait.operands if "[" in o))
    if moved.get(f"UR{desc + 1}") != armed[0]:
        problems.append(f"the copy does not complete on the barrier the trip armed ({arm.text}; {copy.text})")
    if stages > 1 and _last_write(ins, armed[0], arm.offset) is _last_write(ins, waited[0], wait.offset):
        problems.append(f"the try_wait ({wait.text}) is on the barrier the trip armed ({arm.text}), not the next stage's")
    return problems


def _last_write(ins: list, reg: str, before: int):
    """The instruction of ``ins`` that last wrote R``reg`` before offset ``before`` (None: set before the region)."""
    return next((i for i in reversed(ins) if i.offset < before and i.operands
                 and _REG.findall(i.operands[0])[:1] == [reg]), None)


@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_issues_each_copy_once_from_pinned_operands(fact):
    """One trip: the elected lane's arm, the copy issued once, straight line, from the pinned tensor map and
    box row, on the barrier the trip armed; the try_wait on the next stage's."""
    assert tma_stream_copy_problems(ft.region(fact), sa.tma_stream_shape(_box(fact))["stages"]) == []


def _box(fact) -> int:
    return int(re.search(r"_box(\d+)k_", fact.name).group(1)) * 1024


def _nvcc():
    return pytest.mark.skipif(shutil.which("nvcc") is None,
                              reason="nvcc is not on PATH: the nvcc build (a CUDA toolkit's, as on the GPU machine) is "
                                     "checked where one is installed")


@_nvcc()
@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_region_holds_with_nvcc_too(fact):
    """The same rules on nvcc's build (backend='nvcc'): another compiler than the NVRTC the static checks use
    (the GPU machine's NVRTC 13.0 laid the old lane-0 loop out with an LDC.64 and a per-trip VOTEU.ALL that
    NVRTC 13.5 did not), so the region holds the unit and its glue whichever compiles it."""
    spec = fact.build()
    arch = fact.compile_arch()
    cubin = sass.Cubin(compile_cuda(ft.KERNELS / spec.source, arch, spec.defines, backend="nvcc").cubin, arch,
                       name=f"nvcc {spec.source} {spec.defines}")
    instrs = cubin.instructions(spec.kernel)
    assert fact.region.problems(instrs, spec.defines) == []
    launched = build_for_timing(cubin, spec)[1]
    assert sass.region_hazards(list(launched)) == []
    _, between, _ = sass.timed_region(list(launched))
    region = [i for i in between if not sass.is_filler(i)]
    assert tma_stream_copy_problems(region, sa.tma_stream_shape(_box(fact))["stages"]) == []


def test_tma_stream_facts_cover_every_box_and_blocks_per_sm():
    names = {f.name for f in sa.FACTS if _stream(f)}
    assert names == {sa.tma_stream_fact_name(b, n) for b in sa.TMA_STREAM_BOXES for n in sa.TMA_STREAM_BLOCKS_PER_SM
                     if (b, n) not in sa.TMA_STREAM_NOT_FACTS} and len(names) == 5
    assert all(FACTS[n].scope == "gpu" for n in names)
    # the L2-bound boxes in time (each warp's %globaltimer span recorded), the loop-bound one per SM cycle
    for name in names:
        fact, l2_bound = FACTS[name], _box(FACTS[name]) in sa.TMA_STREAM_L2_BOUND
        assert (fact.unit, fact.statistic.mode, fact.build().timer) == (
            ("GB/s/SM", "block_span_ns", True) if l2_bound else ("B/clk", "block_span", False)), name
        assert ("gbps_per_sm" in name) == l2_bound and ("%globaltimer" in fact.method) == l2_bound
    assert sa.tma_stream_fact_name(4096, 1) == "tma_2d_load_gbps_per_sm_box4k_blocks1"
    assert sa.tma_stream_fact_name(1024, 1) == "tma_2d_load_bytes_per_cycle_box1k_blocks1"


@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_shared_memory_places_that_many_blocks_on_an_sm(fact):
    """The dynamic shared memory (plus under 2 KiB of static and the 1 KiB sm_90 reserves per block) lets
    the named number of blocks on one SM's 228 KiB (the largest carve-out, asked for) and not one more, so
    grid = SMs x blocks puts exactly that many on every SM; every warp's ring fits in it."""
    spec = fact.build()
    blocks = int(fact.name.rsplit("blocks", 1)[1])
    per_sm, reserved, static = 228 * 1024, 1024, 2048
    low, high = spec.shared_mem + reserved, spec.shared_mem + reserved + static
    assert blocks * high <= per_sm < (blocks + 1) * low, (fact.name, spec.shared_mem)
    sh = sa.tma_stream_shape(_box(fact))
    assert spec.grid == sa.sm_count() * blocks and spec.block == 32 * sh["issuers"] and spec.carveout == 100
    assert spec.defines == {"STAGES": sh["stages"], "ISSUERS": sh["issuers"],
                            **({"TIMER": 1} if _box(fact) in sa.TMA_STREAM_L2_BOUND else {})}
    assert sh["ring_bytes"] <= spec.shared_mem


def test_tma_stream_shape_and_bytes_counted():
    """64 KiB in flight per block for every box, over TMA_STREAM_ISSUERS warps; each warp's trips are whole
    rounds of its ring; the bytes counted are those of all trips of every warp but its last stages - 1."""
    for box, (rows, stages) in sa.TMA_STREAM_BOXES.items():
        sh = sa.tma_stream_shape(box)
        assert sh["box"] == (32, rows) and rows * 128 == box and sh["stage_bytes"] == box
        assert sh["issuers"] == sa.TMA_STREAM_ISSUERS == 4
        assert sh["ring_bytes"] == 64 * 1024 == sh["warp_ring_bytes"] * 4 and sh["trips"] % stages == 0
        assert sh["trips"] * box * sh["issuers"] == sa.TMA_STREAM_BYTES
        assert sa.tma_stream_waited_bytes(box) == sa.TMA_STREAM_BYTES - 4 * (stages - 1) * box
    assert sa.tma_stream_waited_bytes(1024) == 4 * (2048 - 15) * 1024
    assert sa.tma_stream_waited_bytes(16384) == sa.TMA_STREAM_BYTES  # one stage a warp: every copy waited for
    with pytest.raises(ValueError, match="expected one of"):
        sa.tma_stream_shape(2048)
    with pytest.raises(ValueError, match="blocks per SM"):
        sa.tma_stream(4096, 3)


def _visits(walks: list[int], tensor_rows: int, k: int, trips: int) -> list[int]:
    """The rows warp ``k`` copies over ``trips`` trips, as the kernel's loop steps them."""
    y, step, out = walks[2 * k], walks[2 * k + 1], []
    for _ in range(trips):
        out.append(y)
        y += step
        y -= tensor_rows if y >= tensor_rows else 0
    return out


def test_tma_stream_walks_start_every_warp_on_a_box_of_its_own():
    walks, rows = sa.tma_stream_walks(3, 1024, "own")  # 4 warps a block, boxes of 8 rows
    assert walks[0::2] == [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88] and set(walks[1::2]) == {0}
    assert rows == 96 and _visits(walks, rows, 5, 3) == [40, 40, 40]
    convoy, _ = sa.tma_stream_walks(3, 1024, "convoy")
    assert _visits(convoy, rows, 11, 3) == [88, 0, 8]  # round to the first box after the last
    big, rows = sa.tma_stream_walks(264, 16384)
    assert len(set(big[0::2])) == 264 * 4 and big[-2] == (264 * 4 - 1) * 128 and rows == 264 * 4 * 128


@pytest.mark.parametrize("grid,box", [(3, 1024), (132, 4096), (264, 4096), (132, 16384), (264, 16384)])
def test_tma_stream_scatter_walk_visits_every_box_once_a_round_on_strides_of_its_own(grid, box):
    """Each warp's stride is coprime with the boxes (every box once a round, each a whole box, under the
    tensor: the kernel's one subtraction wraps it), and the warps' strides differ, so no two warps follow
    one another box by box (the convoy walk's warp k + 1 is a trip behind warp k on the same box)."""
    walks, rows = sa.tma_stream_walks(grid, box)
    per_box = sa.tma_stream_shape(box)["box"][1]
    boxes = rows // per_box
    for k in range(boxes):
        seen = _visits(walks, rows, k, boxes)
        assert sorted(seen) == list(range(0, rows, per_box)), k
        assert 0 < walks[2 * k + 1] < rows and walks[2 * k + 1] % per_box == 0
    strides = walks[1::2]
    assert len(set(strides)) > boxes // 4
    with pytest.raises(ValueError, match="expected one of"):
        sa.tma_stream_walks(grid, box, "random")


def _planted(instrs: list, at: int, text: str) -> list:
    """``instrs`` with the instruction at offset ``at`` read as ``text`` (same encoding words)."""
    return [dataclasses.replace(i, text=text) if i.offset == at else i for i in instrs]


@pytest.mark.parametrize("fact", _facts(_stream))
def test_tma_stream_region_refuses_a_copy_more_or_no_wait(fact):
    """Planted: the same build against a region expecting one more copy a trip, or the wait left out, or
    one less glue instruction, or as an elected_copy, breaks the rules; the build with a glue instruction
    read as the NVRTC 13.0 build's constant-bank reload (LDC.64 of the map's parameter) or its per-trip
    vote (VOTEU.ALL), or as a second ELECT (an ELECT loop's), is refused; the spec's own region holds."""
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
    elected = sa.Region(unit, sa.ELECTED_COPY)
    assert any("nor the glue of a elected_copy region" in p for p in elected.problems(instrs, spec.defines))
    _, between, _ = sass.timed_region(instrs)
    glue_at = next(i.offset for i in between if i.base_opcode == "SEL")
    ldc = fact.region.problems(_planted(instrs, glue_at, "LDC.64 R12, c[0x0][0x198]"), spec.defines)
    assert any("memory accesses the fact does not intend: LDC.64" in p for p in ldc), ldc
    vote = fact.region.problems(_planted(instrs, glue_at, "VOTEU.ALL UP0, P0"), spec.defines)
    assert any("copy_ring region" in p and "VOTEU.ALL" in p for p in vote), vote
    region = [i for i in between if not sass.is_filler(i)]
    stages = sa.tma_stream_shape(_box(fact))["stages"]
    assert tma_stream_copy_problems(region, stages) == []
    twice = _planted(region, glue_at, "ELECT P1, URZ, PT")
    assert any("not one straight-line ELECT" in p for p in tma_stream_copy_problems(twice, stages))
    # the row the copy reads, written in the loop by a load instead of the walk's add and wrap
    copy = next(i for i in region if i.opcode == "UTMALDG.2D")
    row_ur = f"UR{_uniform_base(copy.operands[0]) + 3}"
    row = next(_REG.findall(i.operands[-1])[0] for i in region if i.base_opcode == "R2UR" and i.operands[0] == row_ur)
    walk = next(i for i in region if i.operands and _REG.findall(i.operands[0])[:1] == [row])
    loaded = tma_stream_copy_problems(_planted(region, walk.offset, f"LDS R{row}, [R2]"), stages)
    assert any("not a register that only the walk" in p for p in loaded), loaded
    arm = next(i for i in region if i.opcode == "SYNCS.ARRIVE.TRANS64")
    every_lane = _planted(region, arm.offset, arm.text.split(None, 1)[1])
    assert any("not on the elected lane" in p for p in tma_stream_copy_problems(every_lane, stages))


def test_dsmem_bandwidth_takes_whole_clusters_only():
    spec = sa.dsmem_bandwidth(False, 4, 64)
    assert (spec.grid, spec.cluster, spec.block) == (64, 4, 1024)
    with pytest.raises(ValueError, match="whole clusters"):
        sa.dsmem_bandwidth(True, 16, 40)
