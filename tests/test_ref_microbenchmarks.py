"""The standalone reference microbenchmarks tools/bench_suite.py builds with nvcc and runs beside our
facts (tools/ref_lds_latency.cu, tools/ref_smem_bandwidth.cu): their kernels, compiled by NVRTC for
sm_90 (the host part is left out under __CUDACC_RTC__), time what their header says, and the
bench's table names files and tests that exist. Running them needs a GPU and nvcc."""

import re
from collections import Counter

from gp_testing import KERNELS, load_tool

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda

TOOLS = KERNELS.parent / "tools"
bs = load_tool("bench_suite")


def _region(name: str, cache_dir) -> list:
    cubin = sass.Cubin(compile_cuda(TOOLS / name, "sm_90", cache_dir=cache_dir).cubin, "sm_90", name=name)
    (kernel,) = cubin.kernels
    _, between, _ = sass.timed_region(cubin.instructions(kernel))
    return between


def _define(name: str, macro: str) -> int:
    return int(re.search(rf"^#define {macro} (\d+)$", (TOOLS / name).read_text(), re.M).group(1))


def test_the_lds_reference_times_one_chain_of_dependent_shared_loads_and_nothing_else(cache_dir):
    region = _region("ref_lds_latency.cu", cache_dir)
    assert [i.opcode for i in region] == ["LDS"] * _define("ref_lds_latency.cu", "CHASE") == ["LDS"] * 512
    # each load's address is the register the load before it wrote: one dependent chain
    pairs = [re.fullmatch(r"LDS (R\d+), \[(R\d+)\]", i.text).groups() for i in region]
    assert all(addr == prev_dest for (prev_dest, _), (_, addr) in zip(pairs, pairs[1:]))


def test_the_bandwidth_reference_times_a_loop_of_unrolled_128_bit_shared_loads(cache_dir):
    region = _region("ref_smem_bandwidth.cu", cache_dir)
    ops = Counter(i.opcode for i in region)
    assert ops["LDS.128"] == _define("ref_smem_bandwidth.cu", "UNROLL") == 32
    assert not {op for op in ops if op.startswith(("LDG", "STG", "STS", "LDS")) and op != "LDS.128"}
    assert region[-1].opcode == "BRA" and region[-1].predicate  # the ITERS loop's back edge


def test_every_reference_of_the_bench_exists_and_its_pattern_names_tests_of_the_suite(request):
    # this session's own collection when it holds them (as `pytest` does), else a collecting run
    collected = {item.nodeid for item in request.session.items}
    if not all(any(re.search(p, node) for node in collected) for _, _, p, _ in bs.SIDE_BY_SIDE):
        import subprocess
        import sys
        out = subprocess.run([sys.executable, "-m", "pytest", "hwtests/test_smem.py", "--collect-only", "-q", "-p",
                              "no:cacheprovider", "-m", "not static"], cwd=bs.ROOT, capture_output=True, text=True)
        collected = set(out.stdout.split())
    for label, source, pattern, _ in bs.SIDE_BY_SIDE:
        assert (bs.TOOLS / source).is_file(), source
        assert [node for node in collected if re.search(pattern, node)], f"{label}: no test matches {pattern}"
