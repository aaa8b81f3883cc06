import time

import pytest
from gp_testing import KERNELS

from pytest_gpuprops.compile import ArchError, CompileError, check_arch, compile_cuda, compiler_version


def test_compiles_to_a_cubin_without_a_gpu(cache_dir):
    c = compile_cuda(KERNELS / "ffma.cu", "sm_90", {"ILP": 2}, cache_dir=cache_dir)
    assert c.cubin[:4] == b"\x7fELF" and c.arch == "sm_90"
    assert c.compiler.startswith("nvrtc 13.")


def test_cache_hit_returns_the_same_bytes_and_a_changed_define_misses(tmp_path):
    a = compile_cuda(KERNELS / "ffma.cu", "sm_86", {"ILP": 1}, cache_dir=tmp_path)
    b = compile_cuda(KERNELS / "ffma.cu", "sm_86", {"ILP": 1}, cache_dir=tmp_path)
    c = compile_cuda(KERNELS / "ffma.cu", "sm_86", {"ILP": 2}, cache_dir=tmp_path)
    assert (a.cached, b.cached, c.cached) == (False, True, False)
    assert a.cubin == b.cubin != c.cubin


def test_whole_kernel_set_cold_and_warm(tmp_path, capsys):
    """The figures go to the log (speed is a benchmark, not a test); the cache must hit."""
    sources = sorted(KERNELS.glob("*.cu"))
    t0 = time.perf_counter()
    cold = [compile_cuda(s, "sm_90", cache_dir=tmp_path) for s in sources]
    t1 = time.perf_counter()
    warm = [compile_cuda(s, "sm_90", cache_dir=tmp_path) for s in sources]
    t2 = time.perf_counter()
    print(f"kernels/ for sm_90: cold {t1 - t0:.2f} s, warm {t2 - t1:.3f} s ({len(sources)} sources)")
    assert not any(c.cached for c in cold) and all(w.cached for w in warm)


def test_corrupt_cache_entry_is_recompiled_not_trusted(tmp_path):
    a = compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=tmp_path)
    a.path.write_bytes(b"garbage")
    b = compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=tmp_path)
    assert not b.cached and b.cubin == a.cubin
    b.path.with_suffix(".json").write_text("{not json")
    assert not compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=tmp_path).cached


@pytest.mark.parametrize("arch", ["sm_70", "sm_60", "compute_70"])
def test_old_arch_is_refused_naming_nvdisasm(arch):
    with pytest.raises(ArchError, match="nvdisasm"):
        check_arch(arch)


def test_unknown_arch_lists_the_supported_ones():
    with pytest.raises(ArchError, match="sm_90a"):
        check_arch("sm_999")
    assert check_arch("90") == "sm_90" and check_arch("SM_86") == "sm_86"


def test_compile_error_shows_the_compiler_log_with_the_line(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k() {\n  int x = undefined_name;\n}\n')
    with pytest.raises(CompileError) as e:
        compile_cuda(bad, "sm_90", cache_dir=tmp_path)
    assert "bad.cu(2)" in str(e.value) and "undefined_name" in str(e.value)


def test_missing_source_and_bad_backend_are_clear(tmp_path):
    with pytest.raises(CompileError, match="does not exist"):
        compile_cuda(tmp_path / "nope.cu", "sm_90")
    with pytest.raises(CompileError, match="unknown compiler backend"):
        compiler_version("clang")
