"""The prefetch (prefetch.py). Seen through stand-ins: every build's source, arch, defines,
include folders and cache folder reach compile_cuda unchanged, a lone build is compiled too, an
entry already in the copy folder is left alone, and a timing patch is the spec's own edits followed
by the clock edits; a prefetch whose patches or SASS reads are refused plans nothing and lets the
tests report it themselves. Seen from outside: after it, compiling, reading SASS and patching for
timing the same builds start no compiler and no nvdisasm, and return what they return without it."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops import prefetch, sass
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.timing import build_for_timing

# ----------------------------------------------------------------------------------------------
# what the prefetch hands the compiler and the SASS reader


@pytest.fixture
def compiled(monkeypatch, tmp_path):
    """compile_cuda and Cubin replaced by recorders: what prefetch asks for, as it asks."""
    calls, made = [], []

    def compile_cuda(source, arch, defines, *, include_dirs=None, cache_dir=None):
        calls.append(dict(source=source, arch=arch, defines=defines, include_dirs=include_dirs, cache_dir=cache_dir))
        path = tmp_path / "cache" / f"{Path(source).stem}-{arch}.cubin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"cubin " + arch.encode())
        path.with_suffix(".json").write_text("{}")
        return SimpleNamespace(cubin=b"cubin " + arch.encode(), path=path, cached=arch == "sm_80")

    def cubin(data, arch=None, *, name=None):
        made.append(dict(data=data, arch=arch, name=name))
        return SimpleNamespace(data=data, arch=arch, name=name)

    monkeypatch.setattr(prefetch.gp_compile, "compile_cuda", compile_cuda)
    monkeypatch.setattr(prefetch.sass, "Cubin", cubin)
    return SimpleNamespace(calls=calls, made=made)


def test_every_part_of_a_build_reaches_the_compiler_unchanged(compiled, tmp_path):
    b = prefetch.Build.of("kernels/lds.cu", "sm_90a", {"UNROLL": 8, "ILP": 2}, include_dirs=["inc", Path("more")])
    assert b == prefetch.Build(Path("kernels/lds.cu"), "sm_90a", (("ILP", "2"), ("UNROLL", "8")),
                               (Path("inc"), Path("more")))
    cubins = prefetch.compile_all([b], cache_dir=tmp_path / "mine")
    assert compiled.calls == [dict(source=Path("kernels/lds.cu"), arch="sm_90a", defines={"ILP": "2", "UNROLL": "8"},
                                   include_dirs=[Path("inc"), Path("more")], cache_dir=tmp_path / "mine")]
    # a lone build is compiled too, and its cubin knows its arch and its source's name
    assert compiled.made == [dict(data=b"cubin sm_90a", arch="sm_90a", name="lds.cu")]
    assert list(cubins) == [b] and cubins[b].name == "lds.cu"


def test_builds_passes_the_cache_folder_on(compiled, tmp_path, monkeypatch):
    monkeypatch.setattr(prefetch.sass, "prefetch", lambda cubins: None)
    prefetch.builds([prefetch.Build.of("a.cu", "sm_80")], cache_dir=tmp_path / "mine")
    assert [c["cache_dir"] for c in compiled.calls] == [tmp_path / "mine"]


def test_many_builds_compile_on_a_pool_of_workers_and_one_build_on_the_caller(compiled, monkeypatch):
    pools = []
    real = prefetch.ThreadPoolExecutor

    def pool(n):
        pools.append(n)
        return real(n)

    monkeypatch.setattr(prefetch, "ThreadPoolExecutor", pool)
    monkeypatch.setattr(prefetch, "workers", lambda: 3)
    prefetch.compile_all([prefetch.Build.of("a.cu", "sm_80")])
    assert pools == []
    two = [prefetch.Build.of("a.cu", "sm_80"), prefetch.Build.of("b.cu", "sm_80")]
    assert list(prefetch.compile_all(two)) == two
    assert pools == [3]


@pytest.mark.parametrize("cpus, threads", [(None, 1), (1, 1), (2, 2), (16, 16), (17, 16), (128, 16)])
def test_compile_threads_follow_the_cores_up_to_sixteen(monkeypatch, cpus, threads):
    monkeypatch.setattr(prefetch.os, "cpu_count", lambda: cpus)
    assert prefetch.workers() == threads


def test_the_prefetch_counts_what_it_compiled_and_times_each_part(compiled, monkeypatch):
    """prefetch.timings: every build asked for, those the compiler made (not cache hits: sm_80 is
    a hit in the stand-in), and the summary line that says so."""
    monkeypatch.setattr(prefetch, "timings", prefetch.Timings())
    monkeypatch.setattr(prefetch, "workers", lambda: 4)
    monkeypatch.setattr(prefetch.sass, "prefetch", lambda cubins: 0)
    prefetch.builds([prefetch.Build.of(KERNELS / "ffma.cu", a) for a in ("sm_80", "sm_86", "sm_90")])
    prefetch.timing_patches([])
    t = prefetch.timings
    assert (t.builds, t.compiled) == (3, 2) and min(t.compile_s, t.sass_s, t.patches_s, t.compiler_s) >= 0
    assert t.line().startswith("3 builds (2 compiled, ") and "s of compiler time on 4 threads) in " in t.line()


def test_builds_beside_the_tests_compile_in_order_then_read_and_patch_at_a_lower_priority(compiled, monkeypatch):
    """prefetch.in_background: each job compiled in the order given, its SASS read and its timing
    patch read (where it has a spec), on daemon threads 10 nice levels below the caller's."""
    monkeypatch.setattr(prefetch, "timings", prefetch.Timings())
    read, patched, nice = [], [], []
    monkeypatch.setattr(prefetch.sass, "prefetch", lambda cubins: read.extend(c.arch for c in cubins))
    monkeypatch.setattr(prefetch, "_timing_patches", lambda pairs: patched.extend((c.arch, s) for c, s in pairs))
    lower = prefetch._lower_priority

    def lower_and_see():
        lower()
        nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    monkeypatch.setattr(prefetch, "_lower_priority", lower_and_see)
    jobs = [(prefetch.Build.of(KERNELS / "ffma.cu", a), "spec" if a == "sm_90" else None) for a in ("sm_90", "sm_86", "sm_80")]
    threads = prefetch.in_background(jobs, threads=1)
    for t in threads:
        t.join(10)
    assert len(threads) == 1 and threads[0].daemon and not threads[0].is_alive()
    assert [c["arch"] for c in compiled.calls] == read == ["sm_90", "sm_86", "sm_80"] and patched == [("sm_90", "spec")]
    assert nice == [min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)]
    t = prefetch.timings
    assert (t.background, t.background_done, t.background_compiled, t.compiled) == (3, 3, 2, 0)
    assert t.line().endswith("; 3 more beside the tests (3 finished, 2 of them compiled)")


def test_an_entry_already_in_the_copy_folder_is_left_as_it_is(compiled, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "a-sm_80.cubin").write_bytes(b"the session's own")
    prefetch.compile_all([prefetch.Build.of("a.cu", "sm_80")], copy_to=copy)
    assert (copy / "a-sm_80.cubin").read_bytes() == b"the session's own"
    assert (copy / "a-sm_80.json").read_text() == "{}"  # the missing half is filled in


def test_a_timing_patch_is_the_specs_edits_then_the_clock_edits(monkeypatch):
    asked = []

    class Cubin:
        def instructions(self, kernel):
            asked.append(("instructions", kernel))
            return ["instrs of " + kernel]

    spec_edit, clock_edit = sass.Edit(0x10, stall=2), sass.Edit(0x20, stall=1)

    def patch(cubin, kernel):
        asked.append(("patch", cubin, kernel))
        return iter([spec_edit])

    monkeypatch.setattr(sass, "timing_edits", lambda instrs: asked.append(("timing", instrs)) or [clock_edit])
    seen = []
    monkeypatch.setattr(sass, "prefetch_patches", lambda requests: seen.extend(requests) or len(requests))
    cubin = Cubin()
    spec = SimpleNamespace(kernel="lds_chain", patch=patch)
    assert prefetch.timing_patches([(cubin, spec)]) == 1
    assert seen == [(cubin, "lds_chain", [spec_edit, clock_edit], None)]
    assert asked == [("patch", cubin, "lds_chain"), ("instructions", "lds_chain"), ("timing", ["instrs of lds_chain"])]


# ----------------------------------------------------------------------------------------------
# refused patches and failed SASS reads


class _Spec:
    kernel = "k"

    def __init__(self, patch):
        self.patch = patch


def test_timing_patches_skip_a_refused_build_and_survive_a_failing_batch(monkeypatch):
    class Cubin:
        def instructions(self, kernel):
            return []

    def refuse(cubin, kernel):
        raise sass.PatchRefused("no")

    monkeypatch.setattr(sass, "timing_edits", lambda instrs: [sass.Edit(0x10, stall=1)])
    seen = []
    monkeypatch.setattr(sass, "prefetch_patches", lambda requests: seen.append(requests) or len(requests))
    ok, refused = Cubin(), Cubin()
    assert prefetch.timing_patches([(ok, _Spec(None)), (refused, _Spec(refuse))]) == 1
    assert [(r[0], r[1], r[3]) for r in seen[0]] == [(ok, "k", None)]
    # a refused build does not stop the builds after it
    assert prefetch.timing_patches([(refused, _Spec(refuse)), (ok, _Spec(None))]) == 1
    assert [(r[0], r[1], r[3]) for r in seen[1]] == [(ok, "k", None)]

    def failing(requests):
        raise sass.SassError("nvdisasm failed")
    monkeypatch.setattr(sass, "prefetch_patches", failing)
    assert prefetch.timing_patches([(ok, _Spec(None))]) == 0


def test_builds_leave_out_what_does_not_compile_and_survive_a_failing_sass_read(monkeypatch, tmp_path):
    def compile_cuda(source, arch, defines, include_dirs, cache_dir):
        raise RuntimeError("does not compile")

    monkeypatch.setattr(prefetch.gp_compile, "compile_cuda", compile_cuda)
    read = []
    monkeypatch.setattr(sass, "prefetch", lambda cubins: read.append(list(cubins)) or (_ for _ in ()).throw(
        sass.SassError("nvdisasm missing")))
    b = prefetch.Build.of(Path("k.cu"), "sm_90", {"N": 1})
    assert prefetch.builds([b, b], cache_dir=tmp_path) == {}
    assert read == [[]]


# ----------------------------------------------------------------------------------------------
# after the prefetch, nothing is compiled or read again


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
    monkeypatch.setattr(sass.listing.subprocess, "run", lambda cmd, *a, **k: calls.append(list(cmd)) or real(cmd, *a, **k))
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


# ----------------------------------------------------------------------------------------------
# the caches it fills, kept out of the garbage collector's way


@pytest.mark.parametrize("enabled", [True, False])
def test_what_the_prefetch_allocates_is_frozen_and_the_collector_is_left_as_found(enabled):
    import gc
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        frozen_before = gc.get_freeze_count()
        with prefetch.long_lived():
            assert not gc.isenabled()  # no collection walks the caches while they fill
            kept = [[n] for n in range(1000)]  # tracked containers, as the listings' objects are
        assert gc.get_freeze_count() >= frozen_before + len(kept)
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), prefetch.long_lived():
            raise RuntimeError("a failing prefetch")
        assert gc.isenabled() is enabled  # restored on the way out of an error too
    finally:  # left frozen: unfreezing would also hand this session's caches back to the collector
        (gc.enable if was else gc.disable)()
