"""The prefetch's one job, seen from outside: after it, compiling, reading SASS and patching for
timing the same builds start no compiler and no nvdisasm, and what they return is what they return
without it. (Its failure paths are in test_oracle_cache_prefetch.py.)"""

import subprocess

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops import prefetch, sass
from pytest_gpuprops.measure import KernelSpec, build_for_timing


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "cache"))
    sass.clear_memo()
    yield tmp_path
    sass.clear_memo()


@pytest.fixture
def spawns(monkeypatch):
    calls = []
    real = subprocess.run
    monkeypatch.setattr(sass.subprocess, "run", lambda cmd, *a, **k: calls.append(list(cmd)) or real(cmd, *a, **k))
    return calls


SPECS = [KernelSpec("ffma.cu", "ffma", {"ILP": 1, "UNROLL": 8}, region={"FFMA": 8}),
         KernelSpec("smem_latency_ld.cu", "smem_latency_ld", {"UNROLL": 4}, region={"LDS": 4})]


def test_after_the_prefetch_builds_reads_and_timing_patches_start_nothing(fresh, spawns, monkeypatch):
    builds = [prefetch.Build.of(KERNELS / s.source, "sm_86", s.defines) for s in SPECS]
    cubins = prefetch.builds(builds + builds[:1], copy_to=fresh / "copy")  # a repeated build is compiled once
    assert list(cubins) == builds
    assert sorted(p.suffix for p in (fresh / "copy").iterdir()) == [".cubin", ".cubin", ".json", ".json"]
    assert prefetch.timing_patches((cubins[b], s) for b, s in zip(builds, SPECS)) == 2
    assert 1 <= sum(1 for c in spawns if "--version" not in c) <= 4  # batches, not one run per code

    # the same work again, in a new process's state: everything comes from the caches
    sass.clear_memo()
    spawns.clear()
    compiles = []
    monkeypatch.setattr(gp_compile, "_compile_nvrtc", lambda *a: compiles.append(a) or pytest.fail("compiled"))
    for b, spec in zip(builds, SPECS):
        cubin = sass.Cubin(gp_compile.compile_cuda(b.source, b.arch, dict(b.defines)).cubin, b.arch)
        cubin.instructions(spec.kernel)
        built, _ = build_for_timing(cubin, spec)
        assert built != cubin.data
    assert compiles == [] and [c for c in spawns if "--version" not in c] == []
