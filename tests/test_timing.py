"""A kernel built for timing (timing.py) from real cubins: the spec's own edits beside the clock-read
waits, one kernel of two patched, a region that does not hold what the fact measures refused by
what it holds, loop control allowed as asked, a region check run on the compiled kernel before the
spec's patch, and one build per input."""

import pytest

from pytest_gpuprops import timing
from pytest_gpuprops.kernel_spec import KernelSpec


def test_build_for_timing_applies_the_specs_own_edits(build):
    from pytest_gpuprops import sass
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    spec = KernelSpec("regbank_ffma.cu", "regbank_ffma",
                              patch=lambda c, k: sass.ffma_operand_edits(c.instructions(k), 8, 10, 16, 0b001))
    data, ins = timing.build_for_timing(cubin, spec)
    start, region, stop = sass.timed_region(ins)
    ffma = [i for i in region if i.base_opcode == "FFMA"]
    assert len(ffma) == 8 and all(i.operands[1:] == ["R8.reuse", "R10", "R16"] for i in ffma)
    assert start.control.wait_mask == stop.control.wait_mask == 0x3F
    assert sass.Cubin(data, "sm_90").instructions("regbank_ffma") == ins


TWO_TIMED = """#include "gpuprops.cuh"
extern "C" __global__ void first(unsigned long long* c, float* o) {
    float x = o[threadIdx.x];
    unsigned long long t0 = gp_clock();
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x));
    unsigned long long t1 = gp_clock();
    o[threadIdx.x] = x;
    gp_record(c, t0, t1);
}
extern "C" __global__ void second(unsigned long long* c, float* o) {
    float x = o[threadIdx.x], y = o[threadIdx.x + 32];
    unsigned long long t0 = gp_clock();
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x));
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(y));
    unsigned long long t1 = gp_clock();
    o[threadIdx.x] = x + y;
    gp_record(c, t0, t1);
}
"""


def test_timing_build_of_one_kernel_among_two(tmp_path, cache_dir):
    from gp_testing import KERNELS

    from pytest_gpuprops import sass
    from pytest_gpuprops.compile import compile_cuda
    src = tmp_path / "two_timed.cu"
    src.write_text(TWO_TIMED)
    cubin = sass.Cubin(compile_cuda(src, "sm_90", include_dirs=[KERNELS], cache_dir=cache_dir).cubin, "sm_90")
    data, ins = timing.patched_for_timing(cubin, "second", [])
    assert sass.region_opcodes(ins) == {"FFMA": 2}
    assert sass.Cubin(data, "sm_90").instructions("second") == ins
    asked = []
    spec = KernelSpec("two_timed.cu", "second", region={"FFMA": 3, "HMMA.16816.F32": 1},
                              patch=lambda c, k: asked.append(k) or [])
    with pytest.raises(timing.UncleanRegion) as e:
        timing.build_for_timing(cubin, spec)
    assert asked == ["second"]
    assert str(e.value) == (f"{spec.label()} on sm_90: the timed region does not hold what the fact measures:\n"
                            "  FFMA: 2 in the region, intended 3\n  HMMA.16816.F32: 0 in the region, intended 1")


def test_region_other_allows_loop_control(build):
    from pytest_gpuprops import sass
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    ins = cubin.instructions("regbank_ffma")
    counts = sass.region_opcodes(ins)
    intended = {op: n for op, n in counts.items() if op == "FFMA" or op.startswith("LD")}  # LDC: the trip count
    others = sum(n for op, n in counts.items() if op not in intended)
    assert intended["FFMA"] == 8 and others >= 2
    spec = KernelSpec("regbank_ffma.cu", "regbank_ffma", region=intended, region_other=others)
    timing.build_for_timing(cubin, spec)
    tight = KernelSpec("regbank_ffma.cu", "regbank_ffma", region=intended, region_other=others - 1)
    with pytest.raises(timing.UncleanRegion, match=rf"measures:\n  {others} other instructions \(.*\); at most "
                                                    rf"{others - 1} intended$"):
        timing.build_for_timing(cubin, tight)


def test_a_build_for_timing_is_made_once_per_input_and_a_refusal_every_time(monkeypatch):
    """timing.build_for_timing keeps what it made for the same bytes, kernel, edits and region; a
    different input is built again, and a region that does not hold is refused on every ask."""
    from types import SimpleNamespace
    calls = []

    def patched(cubin, kernel, edits):
        calls.append((cubin.data, kernel))
        return b"patched" + cubin.data, ["instructions"]
    monkeypatch.setattr(timing, "patched_for_timing", patched)
    monkeypatch.setattr(timing.sass, "region_mismatch", lambda instrs, region, other: ["wrong"] if region.get("X") else [])
    cubin = SimpleNamespace(data=b"cubin-1", arch="sm_90")
    spec = KernelSpec("x.cu", "k", region={"FFMA": 8})
    first = timing.build_for_timing(cubin, spec)
    assert timing.build_for_timing(cubin, spec) == first == (b"patchedcubin-1", ["instructions"])
    assert len(calls) == 1
    timing.build_for_timing(SimpleNamespace(data=b"cubin-2", arch="sm_90"), spec)
    timing.build_for_timing(cubin, KernelSpec("x.cu", "k", region={"FFMA": 9}))
    assert len(calls) == 3
    bad = KernelSpec("x.cu", "k", region={"X": 1})
    for _ in range(2):
        with pytest.raises(timing.UncleanRegion, match="wrong"):
            timing.build_for_timing(cubin, bad)
    assert len(calls) == 5


def test_a_region_check_sees_the_compiled_kernel_and_refuses_before_the_patch(build):
    """KernelSpec.region_check runs on the kernel's compiled instructions before the spec's patch is
    asked for edits: problems refuse the build (every time, the check's ``fact`` named where it has
    one), none build it as without a check."""
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    compiled = cubin.instructions("regbank_ffma")
    seen, asked = [], []

    def patch(c, k):
        asked.append(k)
        return []

    def check(instrs):
        seen.append(list(instrs))
        return ["FFMA: not a chain"] if len(seen) > 1 else []
    spec = KernelSpec("regbank_ffma.cu", "regbank_ffma", patch=patch, region_check=check)
    data, ins = timing.build_for_timing(cubin, spec)
    assert seen == [compiled] and asked == ["regbank_ffma"] and data
    for _ in range(2):
        with pytest.raises(timing.UncleanRegion) as e:
            timing.build_for_timing(cubin, spec)
        assert str(e.value) == (f"{spec.label()} on sm_90: the timed region does not hold what the fact measures:\n"
                                "  FFMA: not a chain")
    assert asked == ["regbank_ffma"] and len(seen) == 3

    class Named:
        fact = "ffma_chain_cycles"

        def __call__(self, instrs):
            return ["wrong", "also wrong"]
    with pytest.raises(timing.UncleanRegion, match=r"does not hold what ffma_chain_cycles measures:\n  wrong\n  also wrong$"):
        timing.build_for_timing(cubin, KernelSpec("regbank_ffma.cu", "regbank_ffma", region_check=Named()))
