"""Static checks of the sm_90 DPX, constant-cache and atomic builds (hwtests/specs_sync_units.py),
without a GPU: every build the GPU tests launch is clean at both ends and holds what its fact
measures, as launched; each latency build is a true dependency chain; the latency builds time
their second pass while the throughput builds have one; every line of the global atomic latency is
that one build on its own line of the spread buffer; and a throughput build runs its ITERS trips."""

import re
from pathlib import Path

import memory_levels as ml
import pytest
import specs_sync_units as su

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.timing import build_for_timing

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
BUILDS = su.builds()
LATENCY = sorted(b for b, s in BUILDS.items() if s.defines.get("PASSES", 1) > 1)
_NAME = re.compile(r"\b([RP]\d+)\b")
#: operands an instruction writes, before its sources (ISETP: two predicates; ATOMG: a predicate
#: and the returned value); every other opcode here writes its first operand, or nothing (REDG)
_N_DESTS = {"ISETP": 2, "ATOMG": 2, "REDG": 0}


def launched(build_id: str) -> list[sass.Instruction]:
    """The build as it is launched: compiled for sm_90, patched for timing and checked."""
    spec = BUILDS[build_id]
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, su.ARCH, spec.defines).cubin, su.ARCH,
                       name=f"{spec.source} {spec.defines}")
    return build_for_timing(cubin, spec)[1]


def dests(i: sass.Instruction) -> set[str]:
    return {n for o in i.operands[:_N_DESTS.get(i.base_opcode, 1)] for n in _NAME.findall(o)}


def sources(i: sass.Instruction) -> set[str]:
    return {n for o in i.operands[_N_DESTS.get(i.base_opcode, 1):] for n in _NAME.findall(o)}


def steps(build_id: str) -> list[list[sass.Instruction]]:
    """The latency build's timed region cut into its chain steps (the opcodes one step emits), any
    trailing instruction the spec allows beside them left out."""
    spec = BUILDS[build_id]
    _, between, _ = sass.timed_region(launched(build_id))
    ins = [i for i in between if not sass.is_filler(i)]
    n = sum(spec.region.values())
    per_step = n // int(spec.defines["UNROLL"])
    assert len(ins) - n <= spec.region_other, [i.text for i in ins[n:]]
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


@pytest.mark.parametrize("build_id", sorted(BUILDS))
def test_build_is_clean_and_as_intended(build_id):
    """As launched on sm_90: clean at both ends, the intended opcodes and nothing else; a latency
    build loops back over its timed region once (the first pass warms the caches), a throughput
    build has no such branch (its warps would start a second pass out of step)."""
    spec = BUILDS[build_id]
    instrs = launched(build_id)
    assert sass.region_hazards(instrs) == []
    assert sass.region_mismatch(instrs, spec.region, spec.region_other) == []
    start, _, stop = sass.timed_region(instrs)
    back = [i for i in instrs if i.offset > stop.offset and i.base_opcode == "BRA"
            and int(i.operands[-1], 16) <= start.offset]
    assert len(back) == (1 if build_id in LATENCY else 0), [i.text for i in back]


@pytest.mark.parametrize("build_id", LATENCY)
def test_latency_chain_reads_only_the_previous_step(build_id):
    """Every value a step reads was written by the previous step (or earlier in its own step: ISETP
    -> SEL) or before the start read, and each step after the first reads the previous step's
    result: a true dependency chain, nothing folded, each step waiting on the one before."""
    chain = steps(build_id)
    assert len(chain) == BUILDS[build_id].defines["UNROLL"]
    for k, row in enumerate(writers(chain)):
        got = {w for srcs in row for w in srcs.values()}
        assert got <= {None, k - 1, k}, f"step {k}: {[i.text for i in chain[k]]} reads steps {got}"
        if k:
            assert k - 1 in got, f"step {k}: {[i.text for i in chain[k]]} does not read step {k - 1}"


def test_dpx_steps_are_the_named_opcodes():
    """The DPX latency chains, step by step, are the opcodes the facts name (no step merged into
    another: a two-input max chain would be)."""
    for op, (_, opcodes, _) in su.DPX_OPS.items():
        chain = steps(f"dpx_{op}_ilp1")
        assert [[i.opcode for i in s] for s in chain] == [list(opcodes)] * su.DPX_UNROLL, op


def test_const_chase_each_offset_is_the_previous_result():
    """LDC Rn, c[0x3][Rm], Rm the previous LDC's result: a register-indexed load from the user
    constant bank, not a kernel parameter (bank 0) and not an immediate address."""
    chain = [s[0] for s in steps("const_chase")]
    for prev, cur in zip(chain, chain[1:]):
        assert re.fullmatch(r"c\[0x3\]\[R\d+\]", cur.operands[1]), cur.text
        assert sources(cur) == dests(prev), f"{cur.text} does not load from {prev.text}'s result"


@pytest.mark.parametrize("build_id", [b for b in LATENCY if b.startswith("atom_")])
def test_atomic_chain_adds_the_previous_result_at_one_address(build_id):
    """Each atomic adds the value the previous one returned, at one address set before the start read."""
    chain = [s[0] for s in steps(build_id)]
    addresses = {next(o for o in i.operands if "[" in o) for i in chain}
    assert len(addresses) == 1, addresses
    for prev, cur in zip(chain, chain[1:]):
        data = _NAME.findall(cur.operands[-1])
        assert data and set(data) == dests(prev), f"{cur.text} does not add {prev.text}'s result"


@pytest.mark.parametrize("pattern", sorted(su.ATOMIC_PATTERNS))
def test_global_atomic_latency_lines_are_one_build_on_spread_lines(pattern):
    """Every line of the global latency chain launches the checked build (atom_global_<pattern>_latency),
    with ``buf`` a view of one zeroed 32 MiB buffer that starts at that line: 128-byte aligned lines,
    all distinct, a stride that is no power of two, spread over most of the buffer."""
    import numpy as np
    checked = BUILDS[f"atom_global_{pattern}_latency"]
    offsets = ml.l2_line_offsets()
    stride = ml.L2_LINE_STRIDE
    assert len(set(offsets)) == ml.L2_LINES >= 8 * ml.NEAR_BATCHES
    assert stride % 128 == 0 and stride & (stride - 1) != 0 and (stride // 128) % 2 == 1
    assert ml.L2_SPREAD_BYTES >= 4 << 20 and offsets[-1] + 128 <= ml.L2_SPREAD_BYTES
    assert offsets[-1] >= ml.L2_SPREAD_BYTES * 3 // 4  # the lines span the buffer, not a corner of it
    for k, offset in enumerate(offsets):
        spec = su.atomic_latency("atom_global", pattern, line=k)
        assert (spec.source, spec.kernel, spec.defines, spec.grid, spec.block, spec.region, spec.region_other) == (
            checked.source, checked.kernel, checked.defines, checked.grid, checked.block, checked.region,
            checked.region_other)
        lane_off, buf, out = spec.args(np)
        assert list(lane_off) == [su.ATOMIC_PATTERNS[pattern](lane) for lane in range(32)]
        base = buf.base
        assert base.nbytes == ml.L2_SPREAD_BYTES and not base.any()
        assert buf.__array_interface__["data"][0] - base.__array_interface__["data"][0] == offset, k
        assert buf.nbytes >= 128 and out.size >= 32
    with pytest.raises(ValueError):
        su.atomic_latency("atom_shared", pattern, line=1)


def _loop_compare(build_id: str) -> sass.Instruction:
    _, between, _ = sass.timed_region(launched(build_id))
    compares = [i for i in between if i.base_opcode == "ISETP"]
    assert len(compares) == 1, [i.text for i in compares]
    return compares[0]


@pytest.mark.parametrize("kind", sorted(su.ATOMIC_KINDS))
def test_throughput_builds_run_their_trips_and_differ_only_in_them(kind):
    """The trip counter is compared with the build's ITERS (16, or ATOMIC_ITERS_BY_SHAPE's), and the two
    address patterns' regions are the same instructions but for that compare: a longer shape times the
    same loop for more trips, so it measures the same cycles per warp-wide atomic."""
    regions = {}
    for pattern in su.ATOMIC_PATTERNS:
        build_id = f"{kind}_{pattern}_throughput"
        iters = BUILDS[build_id].defines["ITERS"]
        assert iters == su.ATOMIC_ITERS_BY_SHAPE.get((kind, pattern), su.ATOMIC_ITERS)
        assert su.atomic_throughput_count(kind, pattern) == su.ATOMIC_WARPS * su.ATOMIC_ILP * su.ATOMIC_UNROLL * iters
        cmp = _loop_compare(build_id)
        assert int(cmp.operands[-2], 16) == iters, cmp.text
        _, between, _ = sass.timed_region(launched(build_id))
        regions[pattern] = [i.text.replace(cmp.operands[-2], "ITERS") if i.offset == cmp.offset else i.text
                            for i in between]
    assert regions["distinct"] == regions["same_address"]


def test_recorded_throughput_facts_are_their_builds():
    """Each recorded atomic throughput fact's method ("each 16 x 8 x 8 <opcode>") is its build's ITERS x
    UNROLL x ILP and opcode: a build whose fact is recorded keeps the shape it was recorded with."""
    from pytest_gpuprops import facts as gp_facts
    facts = gp_facts.load_facts(su.ARCH)
    recorded = [(k, p) for k in su.ATOMIC_KINDS for p in su.ATOMIC_PATTERNS if f"{k}_add_{p}_sm_cycles" in facts]
    assert recorded  # atom_shared same_address, atom_global both (2026-11-24)
    for kind, pattern in recorded:
        d = BUILDS[f"{kind}_{pattern}_throughput"].defines
        shape = f"each {d['ITERS']} x {d['UNROLL']} x {d['ILP']} {su.ATOMIC_KINDS[kind][2]} "
        assert shape in facts[f"{kind}_add_{pattern}_sm_cycles"].method, (kind, pattern, shape)
