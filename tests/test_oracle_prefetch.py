"""What the prefetch hands the compiler and the SASS reader, seen through stand-ins: every build's
source, arch, defines, include folders and cache folder reach compile_cuda unchanged, a lone build
is compiled too, an entry already in the copy folder is left alone, and a timing patch is the
spec's own edits followed by the clock edits. (Its success path with real builds is in
test_prefetch_fills_caches.py; its failure paths in test_oracle_cache_prefetch.py.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuprops import prefetch, sass


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
        return SimpleNamespace(cubin=b"cubin " + arch.encode(), path=path)

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
