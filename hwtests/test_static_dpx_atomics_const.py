"""Static checks of the sm_90 DPX, constant-cache and atomic facts (hwtests/specs_sync_units.FACTS),
without a GPU: every fact's build, as the GPU test launches it, is clean at both ends and holds its
spec's region (the unit's exact counts, in order for a chain, only its shape's glue and trailing
opcodes beside them, a latency build's second pass timed and a throughput build's one pass:
pytest_gpuprops/factspec.py). Beside those rules, what these facts rely on: each latency build is a
true dependency chain, step by step the opcodes the fact names; every line of the global atomic
latency is that one build on its own line of the spread buffer; and a throughput build runs its
ITERS trips. Every test takes one fact, by its name, but the throughput trips (one atomic kind's
two facts)."""

import re

import fact_tests as ft
import memory_levels as ml
import pytest
import specs_sync_units as su

from pytest_gpuprops import sass

pytestmark = pytest.mark.static
FACTS = {f.name: f for f in su.FACTS}
LATENCY = [f for f in su.FACTS if f.build().defines.get("PASSES", 1) > 1]
_NAME = re.compile(r"\b([RP]\d+)\b")
#: operands an instruction writes, before its sources (ISETP: two predicates; ATOMG: a predicate
#: and the returned value); every other opcode here writes its first operand, or nothing (REDG)
_N_DESTS = {"ISETP": 2, "ATOMG": 2, "REDG": 0}


def _params(keep) -> list:
    return ft.static_params([f for f in su.FACTS if keep(f)])


def dests(i: sass.Instruction) -> set[str]:
    return {n for o in i.operands[:_N_DESTS.get(i.base_opcode, 1)] for n in _NAME.findall(o)}


def sources(i: sass.Instruction) -> set[str]:
    return {n for o in i.operands[_N_DESTS.get(i.base_opcode, 1):] for n in _NAME.findall(o)}


def steps(fact) -> list[list[sass.Instruction]]:
    """The latency fact's launched region cut into its chain steps (the unit's opcodes of one step),
    the trailing opcodes its region allows after the last step left out."""
    ins = ft.region(fact)
    n = sum(fact.region.counts(fact.build().defines).values())
    per_step = len(fact.region.unit)
    assert [i.opcode for i in ins[n:]] == list(fact.region.trailing)[:len(ins) - n], [i.text for i in ins[n:]]
    return [ins[k:k + per_step] for k in range(0, n, per_step)]


def writers(chain: list[list[sass.Instruction]]) -> list[list[dict[str, int | None]]]:
    """For each source of each instruction, the step whose instruction last wrote it (None: a register
    set before the start read), following the region in order."""
    last: dict[str, int] = {}
    out = []
    for k, step in enumerate(chain):
        row = []
        for i in step:
            row.append({r: last.get(r) for r in sources(i)})
            for r in dests(i):
                last[r] = k
        out.append(row)
    return out


@pytest.mark.parametrize("fact", ft.static_params(su.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    """As launched on sm_90: the spec's rules hold (region_rules.Region.problems: a latency build loops
    back over its timed region once, the first pass warming the caches; a throughput build has no
    such branch, its warps would start a second pass out of step), and the patched region is clean
    at both ends and holds the unit's exact counts (timing.build_for_timing)."""
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []


@pytest.mark.parametrize("fact", ft.static_params(LATENCY))
def test_latency_chain_reads_only_the_previous_step(fact):
    """Every value a step reads was written by the previous step (or earlier in its own step: ISETP
    -> SEL) or before the start read, and each step after the first reads the previous step's
    result: a true dependency chain, nothing folded, each step waiting on the one before."""
    chain = steps(fact)
    assert len(chain) == fact.steps()
    for k, row in enumerate(writers(chain)):
        got = {w for srcs in row for w in srcs.values()}
        assert got <= {None, k - 1, k}, f"step {k}: {[i.text for i in chain[k]]} reads steps {got}"
        if k:
            assert k - 1 in got, f"step {k}: {[i.text for i in chain[k]]} does not read step {k - 1}"


@pytest.mark.parametrize("fact", _params(lambda f: f.name.startswith("dpx_") and f in LATENCY))
def test_dpx_steps_are_the_named_opcodes(fact):
    """The DPX latency chains, step by step, are the opcodes the facts name (no step merged into
    another: a two-input max chain would be)."""
    op = fact.name[len("dpx_"):-len("_latency_cycles")]
    assert [[i.opcode for i in s] for s in steps(fact)] == [list(su.DPX_OPS[op][1])] * su.DPX_UNROLL


@pytest.mark.parametrize("fact", [FACTS["const_cache_hit_latency_cycles"]], ids=["const_cache_hit_latency_cycles"])
def test_const_chase_each_offset_is_the_previous_result(fact):
    """LDC Rn, c[0x3][Rm], Rm the previous LDC's result: a register-indexed load from the user
    constant bank, not a kernel parameter (bank 0) and not an immediate address."""
    chain = [s[0] for s in steps(fact)]
    for prev, cur in zip(chain, chain[1:]):
        assert re.fullmatch(r"c\[0x3\]\[R\d+\]", cur.operands[1]), cur.text
        assert sources(cur) == dests(prev), f"{cur.text} does not load from {prev.text}'s result"


@pytest.mark.parametrize("fact", _params(lambda f: f.name.startswith("atom_") and f in LATENCY))
def test_atomic_chain_adds_the_previous_result_at_one_address(fact):
    """Each atomic adds the value the previous one returned, at one address set before the start read."""
    chain = [s[0] for s in steps(fact)]
    addresses = {next(o for o in i.operands if "[" in o) for i in chain}
    assert len(addresses) == 1, addresses
    for prev, cur in zip(chain, chain[1:]):
        data = _NAME.findall(cur.operands[-1])
        assert data and set(data) == dests(prev), f"{cur.text} does not add {prev.text}'s result"


@pytest.mark.parametrize("fact", _params(lambda f: f.statistic.lines is not None))
def test_global_atomic_latency_lines_are_one_build_on_spread_lines(fact):
    """Every line of the global latency chain launches the checked build (the fact's build), with
    ``buf`` a view of one zeroed 32 MiB buffer that starts at that line: 128-byte aligned lines, all
    distinct, a stride that is no power of two, spread over most of the buffer."""
    import numpy as np
    checked = fact.build()
    pattern = fact.name[len("atom_global_add_"):-len("_near_latency_cycles")]
    offsets = ml.l2_line_offsets()
    stride = ml.L2_LINE_STRIDE
    assert len(set(offsets)) == ml.L2_LINES >= 8 * ml.NEAR_BATCHES
    assert stride % 128 == 0 and stride & (stride - 1) != 0 and (stride // 128) % 2 == 1
    assert ml.L2_SPREAD_BYTES >= 4 << 20 and offsets[-1] + 128 <= ml.L2_SPREAD_BYTES
    assert offsets[-1] >= ml.L2_SPREAD_BYTES * 3 // 4  # the lines span the buffer, not a corner of it
    fields = ("source", "kernel", "defines", "grid", "block", "region", "region_other", "region_check")
    for k, offset in enumerate(offsets):
        spec = fact.kernel(k)
        assert [getattr(spec, f) for f in fields] == [getattr(checked, f) for f in fields]
        lane_off, buf, out = ml.on_other_memory(lambda s=spec: s.args(np))  # a fresh buffer (the reserved one: tests/)
        assert list(lane_off) == [su.ATOMIC_PATTERNS[pattern](lane) for lane in range(32)]
        base = buf.base
        assert base.nbytes == ml.L2_SPREAD_BYTES and not base.any()
        assert buf.__array_interface__["data"][0] - base.__array_interface__["data"][0] == offset, k
        assert buf.nbytes >= 128 and out.size >= 32
    with pytest.raises(ValueError):
        su.atomic_latency("atom_shared", pattern, line=1)


def _loop_compare(fact) -> sass.Instruction:
    compares = [i for i in ft.region(fact) if i.base_opcode == "ISETP"]
    assert len(compares) == 1, [i.text for i in compares]
    return compares[0]


@pytest.mark.parametrize("kind", sorted(su.ATOMIC_KINDS))
def test_throughput_builds_run_their_trips_and_differ_only_in_them(kind):
    """The trip counter is compared with the build's ITERS (16, or ATOMIC_ITERS_BY_SHAPE's), and the two
    address patterns' regions are the same instructions but for that compare: a longer shape times the
    same loop for more trips, so it measures the same cycles per warp-wide atomic, and its divisor
    counts every trip."""
    regions = {}
    for pattern in su.ATOMIC_PATTERNS:
        fact = FACTS[f"{kind}_add_{pattern}_sm_cycles"]
        iters = fact.build().defines["ITERS"]
        assert iters == su.ATOMIC_ITERS_BY_SHAPE.get((kind, pattern), su.ATOMIC_ITERS)
        assert fact.per() == su.ATOMIC_WARPS * su.ATOMIC_ILP * su.ATOMIC_UNROLL * iters
        cmp = _loop_compare(fact)
        assert int(cmp.operands[-2], 16) == iters, cmp.text
        regions[pattern] = [i.text.replace(cmp.operands[-2], "ITERS") if i.offset == cmp.offset else i.text
                            for i in ft.region(fact)]
    assert regions["distinct"] == regions["same_address"]


def test_recorded_throughput_facts_are_their_builds():
    """Each recorded atomic throughput fact's method ("each 16 x 8 x 8 <opcode>") is its build's ITERS x
    UNROLL x ILP and opcode: a build whose fact is recorded keeps the shape it was recorded with."""
    from pytest_gpuprops import facts as gp_facts
    facts = gp_facts.load_facts(su.ARCH)
    recorded = [f for f in su.FACTS if f.name.endswith("_sm_cycles") and f.name in facts]
    assert recorded  # atom_shared same_address, atom_global both (2026-11-24)
    for fact in recorded:
        d = fact.build().defines
        shape = f"each {d['ITERS']} x {d['UNROLL']} x {d['ILP']} {fact.region.unit[0]} "
        assert shape in facts[fact.name].method, (fact.name, shape)
