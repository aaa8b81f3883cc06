import pytest
from gp_testing import PATCH_ARCHES
from hypothesis import given
from hypothesis import strategies as st

from pytest_gpuprops import sass


@given(stall=st.integers(0, 15), y=st.booleans(), wb=st.one_of(st.none(), st.integers(0, 5)),
       rb=st.one_of(st.none(), st.integers(0, 5)), wait=st.integers(0, 63), reuse=st.integers(0, 15),
       low=st.integers(0, (1 << 41) - 1))
def test_control_code_encode_decode_round_trip(stall, y, wb, rb, wait, reuse, low):
    c = sass.ControlCode(stall, y, wb, rb, wait, reuse)
    hi = c.apply(low)
    assert sass.ControlCode.decode(hi) == c
    assert hi & ((1 << 41) - 1) == low  # the operand bits are untouched


def test_control_code_notation():
    c = sass.ControlCode(stall=4, yield_flag=False, write_barrier=None, read_barrier=0, wait_mask=0b1, reuse=0)
    assert str(c) == "[B0-----:R0:W-:-:S04]"


@pytest.mark.parametrize("arch", PATCH_ARCHES)
def test_instructions_match_the_elf_bytes_and_decode(build, arch):
    cubin = build("ffma.cu", arch, ILP=1, UNROLL=8)
    ins = cubin.instructions("ffma")
    text = cubin.text("ffma")
    assert len(ins) * 16 == len(text)
    assert [i.raw for i in ins] == [text[o:o + 16] for o in range(0, len(text), 16)]
    ffma = [i for i in ins if i.base_opcode == "FFMA"]
    assert len(ffma) == 8 and all(i.opcode_bits == sass.FFMA_RRRR_OPCODE for i in ffma)
    assert cubin.kernel("ffma").register_count > 0


def test_register_count_lives_twice_and_sm90_uses_nvinfo(build):
    sm86 = build("regbank_ffma.cu", "sm_86", NFFMA=8)
    sm90 = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    assert sm86.kernel().register_count == sm86.nvinfo_register_count() > 0
    assert sm90.kernel().register_count == sm90.nvinfo_register_count() > 0


def test_timed_region_needs_exactly_two_clock_reads(build):
    ins = build("clock_overhead.cu", "sm_90").instructions("clock_overhead")
    start, between, stop = sass.timed_region(ins)
    assert between == [] and "SR_CLOCKLO" in start.text  # two back-to-back reads: nothing between
    with pytest.raises(sass.SassError, match="exactly 2 clock reads"):
        sass.timed_region([i for i in ins if i is not stop])


def test_not_an_elf_and_not_a_cuda_elf_are_refused(tmp_path):
    with pytest.raises(sass.SassError, match="not an ELF"):
        sass.Cubin(b"hello world, not a cubin")
    import sys
    with pytest.raises(sass.SassError, match="not a CUDA cubin"):
        sass.Cubin(open(sys.executable, "rb").read())


def test_missing_kernel_names_the_ones_there(build):
    with pytest.raises(sass.SassError, match="has no kernel 'nope'.*ffma"):
        build("ffma.cu", "sm_90").kernel("nope")


def test_nvdisasm_missing_says_which_package_installs_it(monkeypatch, build):
    cubin = build("clock_overhead.cu", "sm_90")
    monkeypatch.setenv("GPUPROPS_NVDISASM", "/nonexistent/nvdisasm")
    with pytest.raises(sass.SassError, match="GPUPROPS_NVDISASM"):
        sass.Cubin(cubin.data, "sm_90").instructions()
    monkeypatch.delenv("GPUPROPS_NVDISASM")
    monkeypatch.setattr(sass.sys, "path", [])
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sass.glob, "glob", lambda pattern: [])
    with pytest.raises(sass.SassError, match="pip install nvidia-cuda-nvdisasm"):
        sass.find_nvdisasm()
