"""Static checks of the chain kernels (ALU ops, mma.sync dtypes, the global-memory chase, the
shared-memory conflict loads, wgmma; issue 10): each chain is a true dependency chain, as compiled,
on every arch (the launched builds' regions are checked by test_static.py through specs.launched())."""

import dataclasses
import re
import shutil
from pathlib import Path

import fact_tests as ft
import pytest
import specs
import specs_memory
import specs_wgmma

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.timing import build_for_timing

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
ARCHES = ["sm_80", "sm_86", "sm_89", "sm_90"]
_REG = re.compile(r"\bR(\d+)\b")


def region(source: str, kernel: str, arch: str, **defines) -> list[sass.Instruction]:
    cubin = sass.Cubin(compile_cuda(KERNELS / source, arch, defines).cubin, arch, name=source)
    _, between, _ = sass.timed_region(cubin.instructions(kernel))
    return [i for i in between if not sass.is_filler(i)]


def regs(operand: str) -> list[int]:
    return [int(r) for r in _REG.findall(operand)]


def dest(i: sass.Instruction) -> int:
    """The destination register: the first register operand (SHFL's first operand is a predicate)."""
    return next(r for o in i.operands for r in regs(o))


def sources(i: sass.Instruction) -> set[int]:
    first = True
    out = set()
    for o in i.operands:
        rs = regs(o)
        if rs and first:
            first = False
            continue
        out.update(rs)
    return out


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("op", sorted(specs.ALU_OPS))
def test_alu_chain_reads_only_the_previous_result(arch, op):
    """Each step's only register source is the previous step's result (DFMA: the pair it starts)."""
    code, _, opcodes = specs.ALU_OPS[op]
    ins = region("alu_chain.cu", "alu_chain", arch, OP=code, ILP=1, UNROLL=16)
    assert [i.opcode for i in ins] == list(opcodes) * 16
    for prev, cur in zip(ins, ins[1:]):
        assert sources(cur) == {dest(prev)}, f"{cur.text} does not read only {prev.text}'s result"


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", sorted(specs.MMA_DTYPES))
def test_mma_chain_accumulates_into_the_previous_result(arch, dtype):
    code, opcode, _ = specs.MMA_DTYPES[dtype]
    ins = region("mma_sync.cu", "mma_sync", arch, DTYPE=code, ILP=1, UNROLL=16)
    assert [i.opcode for i in ins] == [opcode] * 16
    for prev, cur in zip(ins, ins[1:]):
        assert regs(cur.operands[-1]) == [dest(prev)], f"{cur.text} does not accumulate into {prev.text}'s result"


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("cache", sorted(specs.CHASE_CACHE))
def test_chase_each_address_is_the_previous_result(arch, cache):
    define, opcode = specs.CHASE_CACHE[cache]
    ins = region("global_chase.cu", "global_chase", arch, CACHE=define, UNROLL=64)
    assert [i.opcode for i in ins] == [opcode] * 64
    for prev, cur in zip(ins, ins[1:]):
        address = cur.operands[1]  # desc[URx][Ry.64]
        assert regs(address) == [dest(prev)], f"{cur.text} does not load from {prev.text}'s result"


@pytest.mark.parametrize("arch", ARCHES)
def test_a_chase_that_reads_its_clock_times_the_same_region_between_two_timer_reads(arch):
    """TIMER=1 (specs.chase_level's long chases): the region is the same 64 dependent loads, and the
    %globaltimer reads are the instructions just before the start read and just after the stop read."""
    cubin = sass.Cubin(compile_cuda(KERNELS / "global_chase.cu", arch, {"CACHE": 1, "UNROLL": 64, "TIMER": 1}).cubin,
                       arch, name="global_chase.cu TIMER=1")
    ins = cubin.instructions("global_chase")
    start, between, stop = sass.timed_region(ins)
    assert [i.opcode for i in between if not sass.is_filler(i)] == ["LDG.E.64.STRONG.GPU"] * 64
    timers = [i for i in ins if "SR_GLOBALTIMER" in i.text]
    assert len(timers) == 2
    code = [i for i in ins if not sass.is_filler(i)]
    assert code[code.index(start) - 1] is timers[0] and code[code.index(stop) + 1] is timers[1]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("vec", [1, 2, 4])
def test_conflict_loads_all_read_one_address_register(arch, vec):
    """Every LDS of the loop reads the same address, set before the start read: the bank pattern is
    the lane stride alone."""
    ins = [i for i in region("smem_conflict.cu", "smem_conflict", arch, VEC=vec, UNROLL=32)
           if i.base_opcode == "LDS"]
    assert len(ins) == 32 and len({i.operands[1] for i in ins}) == 1


@pytest.mark.parametrize("fact", ft.static_params(specs_wgmma.FACTS))  # compiled for sm_90a, their build_arch
def test_wgmma_hgmmas_are_one_accumulator_chain(fact):
    """The timed region's UNROLL HGMMA.64xNx16.F32[.BF16] (its ARRIVE, HGMMAs and DEPBAR.LE as launched:
    the spec's region, test_static_wgmma.py) are one accumulator chain, the last arming the group."""
    hgmma = [i for i in ft.region(fact) if i.base_opcode == "HGMMA"]
    assert len(hgmma) == fact.steps()
    accumulate = [[o for o in i.operands if o != "gsb0"][-1] for i in hgmma]  # C, before the group flag
    for prev, cur, c in zip(hgmma, hgmma[1:], accumulate[1:]):
        assert regs(c) == [dest(prev)], f"{cur.text} does not accumulate into {prev.text}'s result"
    assert [i.operands[-1] == "gsb0" for i in hgmma] == [False] * (len(hgmma) - 1) + [True]  # the last arms the group


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("op", sorted(specs.ALU_OPS))
@pytest.mark.parametrize("ilp, warps, timed_pass", [(1, 1, "second"), (8, 4, "only")])
def test_alu_latency_shape_times_its_second_pass_and_throughput_shapes_their_only_one(arch, op, ilp, warps, timed_pass):
    """As launched: the dependent-latency build loops back over its timed region once (the first pass
    warms the instruction caches); a throughput build has no such branch, since a second pass would
    start its warps out of step (kernels/alu_chain.cu, hwtests/specs.py)."""
    spec = specs.alu(op, ilp, warps)
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, arch, spec.defines).cubin, arch, name=spec.source)
    ins = cubin.instructions(spec.kernel)
    start, _, stop = sass.timed_region(ins)
    back = [i for i in ins if i.offset > stop.offset and i.base_opcode == "BRA"
            and int(i.operands[-1], 16) <= start.offset]
    assert len(back) == (1 if timed_pass == "second" else 0), [i.text for i in back]


def _reference_hits(fact):
    """The one-line chase's L2-hit build a DRAM fact launches as each line's reference (not a fact)."""
    return dataclasses.replace(fact, name=f"{fact.name}_reference_hits", launch=lambda line: fact.launch(line, miss=False))


def unread_result(region_instrs: list[sass.Instruction], load_opcode: str) -> list[str]:
    """How the timed region fails to read its last ``load_opcode``'s result before the stop read (empty:
    an instruction after the load reads a register it wrote). A region that ends with the load leaves
    the stop read alone to wait for it: the DISCARD build of 2026-11-26 (CS2R, LDG, CS2R) read 2.0
    cycles a DRAM miss on the H100."""
    loads = [k for k, i in enumerate(region_instrs) if i.opcode == load_opcode]
    if not loads:
        return [f"no {load_opcode} in the region: " + "; ".join(i.text for i in region_instrs)]
    load = region_instrs[loads[-1]]
    written = set(range(dest(load), dest(load) + (2 if ".64" in load.opcode else 1)))
    readers = [i for i in region_instrs[loads[-1] + 1:] if sources(i) & written]
    return [] if readers else [f"nothing after {load.text} reads R{min(written)}..R{max(written)} before the stop "
                               "read: " + "; ".join(i.text for i in region_instrs)]


@pytest.mark.parametrize("fact", ft.static_params(specs_memory.FACTS))
def test_line_miss_region_is_its_load_then_the_read_of_its_value(fact):
    """As launched: the DRAM miss's region is its one ld.global.cg and the LOP3 that reads its value,
    clean at both ends (factspec rules, timing.build_for_timing); the read makes the region end when
    the miss is in. The region without the read (the build that read 2.0 cycles) is refused."""
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []
    body = ft.region(fact)
    assert [i.opcode for i in body] == [specs_memory.CG_LOAD, "LOP3.LUT"], [i.text for i in body]
    assert unread_result(body, specs_memory.CG_LOAD) == []
    unread = [i for i in body if i.opcode != "LOP3.LUT"]  # planted: the load alone, as first built
    assert unread_result(unread, specs_memory.CG_LOAD) != []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH (compile_cuda(backend='nvcc'))")
@pytest.mark.parametrize("fact", ft.static_params(specs_memory.FACTS))
def test_line_miss_reads_its_value_compiled_by_nvcc_too(fact):
    """The same region as nvcc's ptxas compiles it (nvcc 13.0 here, the device's NVRTC 13.0 release),
    launched as the GPU would: the load, then the read of its value."""
    spec = fact.build()
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, fact.arch, spec.defines, backend="nvcc").cubin, fact.arch,
                       name=f"{spec.source} nvcc")
    _, launched = build_for_timing(cubin, spec)
    _, between, _ = sass.timed_region(launched)
    body = [i for i in between if not sass.is_filler(i)]
    assert [i.opcode for i in body] == [specs_memory.CG_LOAD, "LOP3.LUT"], [i.text for i in body]
    assert unread_result(body, specs_memory.CG_LOAD) == []


@pytest.mark.parametrize("fact", ft.static_params(specs_memory.FACTS))
def test_line_reference_hits_are_one_chain_of_loads(fact):
    """The L2-hit build each line's miss is compared with: its ld.global.cg loads and nothing else, each
    hit's address the previous hit's result."""
    hits = _reference_hits(fact)
    assert ft.region_problems(hits) == []
    loads = ft.region(hits)
    assert [i.opcode for i in loads] == [specs_memory.CG_LOAD] * hits.build().defines["UNROLL"]
    for prev, cur in zip(loads, loads[1:]):
        assert regs(cur.operands[1]) == [dest(prev)], f"{cur.text} does not load from {prev.text}'s result"


@pytest.mark.parametrize("fact", ft.static_params(specs_memory.FACTS))
def test_line_miss_discards_the_line_then_fences_before_the_start_read(fact):
    """The DRAM build, as launched: the line is loaded (warm), dropped from L2 (discard.global.L2:
    CCTL.E.RML2) and fenced (MEMBAR) before the start read, and the timed load reads the discarded
    address's register, loaded before the discard (never the line's undefined contents)."""
    ins = [i for i in ft.launched(fact) if not sass.is_filler(i)]
    start, between, _ = sass.timed_region(ins)
    before = [i for i in ins if i.offset < start.offset]
    discard = [i for i in before if i.opcode.startswith("CCTL.E.RML2")]
    assert len(discard) == 1, [i.text for i in before]
    after = before[before.index(discard[0]):]
    assert any(i.base_opcode == "MEMBAR" for i in after), [i.text for i in after]
    (load,) = [i for i in between if i.opcode == specs_memory.CG_LOAD]
    assert regs(load.operands[1]) == regs(discard[0].operands[0])
