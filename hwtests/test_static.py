"""Static facts: what the encoding and the compiler's schedule say, checkable without a GPU."""

from pathlib import Path

import pytest
import specs
from schedule import issue_gaps

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.timing import build_for_timing

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
ARCHES = ["sm_80", "sm_86", "sm_89", "sm_90"]


def build(source: str, arch: str, **defines) -> list[sass.Instruction]:
    cubin = sass.Cubin(compile_cuda(KERNELS / source, arch, defines).cubin, arch)
    return cubin.instructions(source.split(".")[0])


# The seeds' control words (the original notes, tensor-core pipeline), decoded as docs/encoding.md says.
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


# Each kernel measures what its name says, and its timed region is clean at both ends, as launched:
# every build the GPU suite launches, patched for timing, on every arch (timing.build_for_timing
# refuses the build otherwise: an instruction waiting on a load issued before the start read, a
# result the stop read does not wait for, or an instruction the fact does not intend).
LAUNCHED = specs.launched()


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("spec_id", sorted(LAUNCHED))
def test_launched_region_is_clean_and_as_intended(arch, spec_id):
    spec = LAUNCHED[spec_id]
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, arch, spec.defines).cubin, arch, name=spec.source)
    _, instrs = build_for_timing(cubin, spec)  # raises UncleanRegion with the offending instructions
    assert sass.region_hazards(instrs) == []
    assert sass.region_mismatch(instrs, spec.region, spec.region_other) == []


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("unroll", [50, 500])
def test_lds_chase_each_address_is_the_previous_result(arch, unroll):
    _, region, _ = sass.timed_region(build("smem_latency_ld.cu", arch, UNROLL=unroll))
    for prev, cur in zip(region, region[1:]):
        assert cur.operands[1].strip("[]") == prev.operands[0]


@pytest.mark.parametrize("arch", ARCHES)
def test_ffma_chain_reads_one_register(arch):
    """FFMA Rd, Rx, Rx, Rx: one register read per FFMA, so no bank conflict adds to the latency."""
    _, region, _ = sass.timed_region(build("ffma.cu", arch, ILP=1, UNROLL=256))
    assert all(len({o.replace(".reuse", "") for o in i.operands[1:]}) == 1 for i in region)


# The compiler's schedule for mma.sync m16n8k16 chains, per arch and compiler version.
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.fact("hmma_16816_f32_dependent_issue_cycles")
def test_hmma_dependent_chain_issue_spacing(gpuprops_static, arch):
    from pytest_gpuprops.compile import compiler_version
    gaps = issue_gaps(build("hmma_16816.cu", arch, ILP=1, UNROLL=64), "HMMA.16816.F32")
    assert len(set(gaps)) == 1, f"dependent HMMAs are not evenly spaced: {sorted(set(gaps))}"
    gpuprops_static.check(arch, "hmma_16816_f32_dependent_issue_cycles", gaps[0], compiler_version())


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.fact("hmma_16816_f32_independent_issue_cycles")
def test_hmma_independent_min_issue_spacing(gpuprops_static, arch):
    from pytest_gpuprops.compile import compiler_version
    gaps = issue_gaps(build("hmma_16816.cu", arch, ILP=3, UNROLL=64), "HMMA.16816.F32")
    assert sum(gaps) / len(gaps) == pytest.approx(8, abs=0.2)  # 24 cycles per round of 3 chains
    gpuprops_static.check(arch, "hmma_16816_f32_independent_issue_cycles", min(gaps), compiler_version())
