"""Static facts: what the encoding and the compiler's schedule say, checkable without a GPU."""

from pathlib import Path

import pytest
from schedule import issue_gaps, region_opcodes

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
ARCHES = ["sm_80", "sm_86", "sm_89", "sm_90"]


def build(source: str, arch: str, **defines) -> list[sass.Instruction]:
    cubin = sass.Cubin(compile_cuda(KERNELS / source, arch, defines).cubin, arch)
    return cubin.instructions(source.split(".")[0])


# The seeds' control words (seeds/tensorcore_pipeline.md), decoded as DESIGN.md says.
@pytest.mark.parametrize("hi, stall, text", [
    (0x020F5E0000001804, 15, "[B-----5:R-:W5:Y:S15]"),  # HMMA in the dependent chain
    (0x000FD20000000000, 9, "[B------:R-:W-:Y:S09]"),   # the NOP after it: 15 + 9 = 24
    (0x060F700000001804, 8, "[B-----5:R-:W5:-:S08]"),   # HMMA R4, R12.reuse, ... (reuse A)
    (0x000FC20000000000, 1, "[B------:R-:W-:Y:S01]"),
])
def test_seed_control_words_decode(hi, stall, text):
    c = sass.ControlCode.decode(hi)
    assert c.stall == stall
    assert str(c) == text
    assert c.apply(hi) == hi


@pytest.mark.parametrize("hi, reuse", [
    (0x060F700000001804, 0b001),  # HMMA R4, R12.reuse, R16, R4
    (0x0C0F700000001804, 0b011),  # HMMA R4, R16.reuse, R2.reuse, R4
    (0x0E0F700000001808, 0b011),  # HMMA R8, R16.reuse, R2.reuse, R8
])
def test_seed_reuse_flags_match_the_printed_reuse(hi, reuse):
    assert sass.ControlCode.decode(hi).reuse == reuse


@pytest.mark.parametrize("arch", ["sm_75", *ARCHES])
def test_every_kernel_control_code_round_trips(arch):
    for src in sorted(KERNELS.glob("*.cu")):
        if src.name == "hmma_16816.cu" and arch == "sm_75":
            continue  # mma.m16n8k16 needs sm_80
        cubin = sass.Cubin(compile_cuda(src, arch).cubin, arch)
        for k in cubin.kernels:
            for ins in cubin.instructions(k):
                c = ins.control
                assert c.apply(ins.hi) == ins.hi, (src.name, ins.line())
                assert sass.ControlCode.decode(c.apply(0)) == c


# Each kernel measures what its name says: between the two clock reads, exactly the chain.
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("unroll", [50, 500])
def test_lds_chase_region_is_only_dependent_lds(arch, unroll):
    ins = build("smem_latency_ld.cu", arch, UNROLL=unroll)
    assert region_opcodes(ins) == {"LDS": unroll}
    _, region, _ = sass.timed_region(ins)
    for prev, cur in zip(region, region[1:]):  # each address is the previous load's result
        assert cur.operands[1].strip("[]") == prev.operands[0]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("ilp", [1, 2, 3, 8])
def test_hmma_region_is_ilp_times_unroll_hmma(arch, ilp):
    assert region_opcodes(build("hmma_16816.cu", arch, ILP=ilp, UNROLL=64)) == {"HMMA.16816.F32": 64 * ilp}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("ilp", [1, 4, 8])
def test_ffma_region_is_ilp_times_unroll_ffma(arch, ilp):
    ins = build("ffma.cu", arch, ILP=ilp, UNROLL=256)
    assert region_opcodes(ins) == {"FFMA": 256 * ilp}
    _, region, _ = sass.timed_region(ins)
    # FFMA Rd, Rx, Rx, Rx: one register read per FFMA, so no bank conflict
    assert all(len({o.replace(".reuse", "") for o in i.operands[1:]}) == 1 for i in region)


@pytest.mark.parametrize("arch", ARCHES)
def test_sts_region_is_only_sts(arch):
    assert region_opcodes(build("smem_latency_st.cu", arch, UNROLL=50)) == {"STS": 50}


@pytest.mark.parametrize("arch", ARCHES)
def test_regbank_loop_is_ffma_and_loop_control(arch):
    ops = region_opcodes(build("regbank_ffma.cu", arch, NFFMA=128))
    assert ops.pop("FFMA") == 128
    # loop set-up and control only: a few instructions per 128 FFMAs, no memory access
    assert sum(ops.values()) <= 12, ops
    assert not any(op.startswith(("LD", "ST", "ATOM", "RED")) for op in ops), ops


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("vec, load, opcode", [(1, 0, "STS"), (2, 0, "STS.64"), (4, 0, "STS.128"),
                                               (1, 1, "LDS"), (2, 1, "LDS.64"), (4, 1, "LDS.128")])
def test_smem_bandwidth_loop_has_unroll_accesses_of_the_width(arch, vec, load, opcode):
    assert region_opcodes(build("smem_bandwidth.cu", arch, VEC=vec, LOAD=load, UNROLL=32))[opcode] == 32


# The compiler's schedule for mma.sync m16n8k16 chains, per arch and compiler version.
@pytest.mark.parametrize("arch", ARCHES)
def test_hmma_dependent_chain_issue_spacing(gpuprops_static, arch):
    from pytest_gpuprops.compile import compiler_version
    gaps = issue_gaps(build("hmma_16816.cu", arch, ILP=1, UNROLL=64), "HMMA.16816.F32")
    assert len(set(gaps)) == 1, f"dependent HMMAs are not evenly spaced: {sorted(set(gaps))}"
    gpuprops_static.check(arch, "hmma_16816_f32_dependent_issue_cycles", gaps[0], compiler_version())


@pytest.mark.parametrize("arch", ARCHES)
def test_hmma_independent_min_issue_spacing(gpuprops_static, arch):
    from pytest_gpuprops.compile import compiler_version
    gaps = issue_gaps(build("hmma_16816.cu", arch, ILP=3, UNROLL=64), "HMMA.16816.F32")
    assert sum(gaps) / len(gaps) == pytest.approx(8, abs=0.2)  # 24 cycles per round of 3 chains
    gpuprops_static.check(arch, "hmma_16816_f32_independent_issue_cycles", min(gaps), compiler_version())
