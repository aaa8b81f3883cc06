"""The compile layer (compile.py): NVRTC/nvcc and the cubin cache. Real compiles of the repository's
kernels and of tiny kernels written here (the cache key by behaviour: a cubin is reused only when
source, included headers, defines, options, arch and compiler version all match); a stand-in
compiler for what compile_cuda hands the compiler and writes to disk; the cache's files (mode,
half-written entries, an unwritable cache) and every message in full."""

import builtins
import concurrent.futures
import errno
import json
import linecache
import os
import pathlib
import re
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from elftools.elf.elffile import ELFFile
from gp_testing import KERNELS

from pytest_gpuprops import compile as C
from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops.compile import ArchError, CompileError, check_arch, compile_cuda, compiler_version

# ----------------------------------------------------------------------------------------------
# the kernels of this repository


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
    """The figures go to the log (speed is a benchmark, not a test); the cache must hit. The cold
    compiles run on a thread per core, as the prefetch runs them (NVRTC releases the GIL): ~2 s
    on one thread on the 2-core machine."""
    sources = sorted(KERNELS.glob("*.cu"))
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        cold = list(pool.map(lambda s: compile_cuda(s, "sm_90", cache_dir=tmp_path), sources))
    t1 = time.perf_counter()
    warm = [compile_cuda(s, "sm_90", cache_dir=tmp_path) for s in sources]
    t2 = time.perf_counter()
    print(f"kernels/ for sm_90: cold {t1 - t0:.2f} s on {os.cpu_count() or 1} threads, warm {t2 - t1:.3f} s "
          f"({len(sources)} sources)")
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


# ----------------------------------------------------------------------------------------------
# the cache key, checked by behaviour; arch names; the compilers


KERNEL = '#include "consts.cuh"\nextern "C" __global__ void k(int* p) { p[threadIdx.x] = VALUE + EXTRA; }\n'


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "k.cu").write_text(KERNEL)
    (d / "consts.cuh").write_text('#pragma once\n#include "deeper.cuh"\n#define VALUE 7\n')
    (d / "deeper.cuh").write_text("#pragma once\n#define EXTRA 1\n")
    return d / "k.cu"


def _immediates(cubin):
    """The 32-bit words of the kernel's code: a changed constant shows up here."""
    elf = ELFFile(__import__("io").BytesIO(cubin))
    text = next(s for s in elf.iter_sections() if s.name.startswith(".text.")).data()
    return text


def test_second_compile_is_a_cache_hit_with_the_same_everything(src, tmp_path):
    a = C.compile_cuda(src, "sm_80", {"X": 1}, cache_dir=tmp_path / "c")
    b = C.compile_cuda(src, "sm_80", {"X": 1}, cache_dir=tmp_path / "c")
    assert (a.cached, b.cached) == (False, True) and a.cubin == b.cubin and a.path == b.path
    assert (b.arch, b.source_name, b.defines, b.compiler) == ("sm_80", "k.cu", (("X", "1"),), C.compiler_version())
    assert b.log == a.log


def test_an_edited_header_is_a_miss(src, tmp_path):
    cache = tmp_path / "c"
    a = C.compile_cuda(src, "sm_80", cache_dir=cache)
    (src.parent / "consts.cuh").write_text('#pragma once\n#include "deeper.cuh"\n#define VALUE 9\n')
    b = C.compile_cuda(src, "sm_80", cache_dir=cache)
    assert not b.cached and a.cubin != b.cubin


def test_an_edited_header_two_levels_down_is_a_miss(src, tmp_path):
    cache = tmp_path / "c"
    a = C.compile_cuda(src, "sm_80", cache_dir=cache)
    (src.parent / "deeper.cuh").write_text("#pragma once\n#define EXTRA 5\n")
    b = C.compile_cuda(src, "sm_80", cache_dir=cache)
    assert not b.cached and a.cubin != b.cubin


def test_an_edited_source_is_a_miss(src, tmp_path):
    cache = tmp_path / "c"
    a = C.compile_cuda(src, "sm_80", cache_dir=cache)
    src.write_text(KERNEL.replace("VALUE + EXTRA", "VALUE * EXTRA + 3"))
    b = C.compile_cuda(src, "sm_80", cache_dir=cache)
    assert not b.cached and a.cubin != b.cubin


def test_another_compiler_version_is_a_miss(src, tmp_path, monkeypatch):
    cache = tmp_path / "c"
    a = C.compile_cuda(src, "sm_80", cache_dir=cache)
    monkeypatch.setattr(C, "compiler_version", lambda backend="nvrtc": "nvrtc 99.9")
    b = C.compile_cuda(src, "sm_80", cache_dir=cache)
    assert not b.cached and b.compiler == "nvrtc 99.9" and b.path != a.path
    assert json.loads(b.path.with_suffix(".json").read_text())["compiler"] == "nvrtc 99.9"
    assert C.compile_cuda(src, "sm_80", cache_dir=cache).cached


def test_defines_are_in_the_key_in_any_order(src, tmp_path):
    cache = tmp_path / "c"
    a = C.compile_cuda(src, "sm_80", {"A": 1, "B": 2}, cache_dir=cache)
    assert C.compile_cuda(src, "sm_80", {"B": 2, "A": 1}, cache_dir=cache).cached
    assert C.compile_cuda(src, "sm_80", {"A": "1", "B": "2"}, cache_dir=cache).cached  # -DA=1 either way
    assert a.defines == (("A", "1"), ("B", "2"))
    for other in ({"A": 1}, {"A": 1, "B": 3}, {"A": 1, "C": 2}, {}):
        assert not C.compile_cuda(src, "sm_80", other, cache_dir=cache).cached


def test_a_define_changes_the_code(src, tmp_path):
    (src.parent / "consts.cuh").write_text('#pragma once\n#include "deeper.cuh"\n#ifndef VALUE\n#define VALUE 7\n#endif\n')
    a = C.compile_cuda(src, "sm_80", {"VALUE": 1000}, cache_dir=tmp_path / "c")
    b = C.compile_cuda(src, "sm_80", {"VALUE": 2000}, cache_dir=tmp_path / "c")
    assert (1001).to_bytes(4, "little") in _immediates(a.cubin) and (2001).to_bytes(4, "little") in _immediates(b.cubin)


def test_arch_and_options_are_in_the_key(src, tmp_path):
    cache = tmp_path / "c"
    a = C.compile_cuda(src, "sm_80", cache_dir=cache)
    b = C.compile_cuda(src, "sm_86", cache_dir=cache)
    assert not b.cached and b.path.name.startswith("k-sm_86-") and a.path.name.startswith("k-sm_80-")
    c = C.compile_cuda(src, "sm_80", options=("-lineinfo",), cache_dir=cache)
    assert not c.cached and c.path != a.path
    assert C.compile_cuda(src, "sm_80", options=("-lineinfo",), cache_dir=cache).cached


def test_the_same_tree_in_another_folder_shares_entries(src, tmp_path):
    cache = tmp_path / "c"
    C.compile_cuda(src, "sm_80", include_dirs=[src.parent], cache_dir=cache)
    other = tmp_path / "elsewhere"
    other.mkdir()
    for f in src.parent.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    assert C.compile_cuda(other / "k.cu", "sm_80", include_dirs=[other], cache_dir=cache).cached


def test_include_dirs_are_passed_to_the_compiler(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "far.cuh").write_text("#define FAR 3\n")
    s = tmp_path / "s.cu"
    s.write_text('#include "far.cuh"\nextern "C" __global__ void k(int* p) { p[0] = FAR; }\n')
    with pytest.raises(C.CompileError, match="far.cuh"):
        C.compile_cuda(s, "sm_80", cache_dir=tmp_path / "c")
    assert C.compile_cuda(s, "sm_80", include_dirs=[str(inc)], cache_dir=tmp_path / "c").cubin[:4] == b"\x7fELF"


def test_the_cache_entry_on_disk(src, tmp_path):
    c = C.compile_cuda(src, "sm_80", {"Z": 2}, options=("-lineinfo",), cache_dir=tmp_path / "c")
    assert c.path.parent == tmp_path / "c" and c.path.read_bytes() == c.cubin
    assert c.path.suffix == ".cubin" and len(c.path.stem.split("-")[-1]) == 32
    meta = json.loads(c.path.with_suffix(".json").read_text())
    assert meta["source"] == str(src) and meta["arch"] == "sm_80" and meta["compiler"] == C.compiler_version()
    assert meta["options"] == ["-arch=sm_80", "-std=c++17", "-DZ=2", "-lineinfo"]  # no -I: paths differ by checkout
    import hashlib
    assert meta["sha256"] == hashlib.sha256(c.cubin).hexdigest() and meta["seconds"] >= 0 and "log" in meta
    assert sorted(p.name for p in c.path.parent.iterdir()) == sorted([c.path.name, c.path.with_suffix(".json").name])


def test_a_cache_entry_whose_hash_does_not_match_is_recompiled(src, tmp_path):
    a = C.compile_cuda(src, "sm_80", cache_dir=tmp_path)
    meta = a.path.with_suffix(".json")
    m = json.loads(meta.read_text())
    meta.write_text(json.dumps({**m, "sha256": "0" * 64}))
    assert not C.compile_cuda(src, "sm_80", cache_dir=tmp_path).cached
    meta.write_text(json.dumps({k: v for k, v in m.items() if k != "sha256"}))
    assert not C.compile_cuda(src, "sm_80", cache_dir=tmp_path).cached
    meta.unlink()
    assert not C.compile_cuda(src, "sm_80", cache_dir=tmp_path).cached
    # an ELF that is not what was written is not trusted either
    a.path.write_bytes(b"\x7fELF" + a.cubin[4:-1])
    assert not C.compile_cuda(src, "sm_80", cache_dir=tmp_path).cached
    assert C.compile_cuda(src, "sm_80", cache_dir=tmp_path).cached


def test_a_cubin_that_is_not_an_elf_is_refused(src, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "_compile_nvrtc", lambda source, name, opts: (b"not an elf", ""))
    with pytest.raises(C.CompileError, match="nvrtc returned something that is not an ELF cubin for k.cu"):
        C.compile_cuda(src, "sm_80", cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_the_default_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "x"))
    assert C.default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("GPUPROPS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert C.default_cache_dir() == tmp_path / "xdg" / "gpuprops" / "cubins"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert C.default_cache_dir() == tmp_path / "home" / ".cache" / "gpuprops" / "cubins"


def test_the_default_cache_folder_is_used_without_cache_dir(src, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "dflt"))
    c = C.compile_cuda(src, "sm_80")
    assert c.path.parent == tmp_path / "dflt"


def test_options_in_order():
    assert C._options("sm_90", {"B": 2, "A": "x"}, [Path("/i1"), Path("/i2")], ("-G",)) == [
        "-arch=sm_90", "-std=c++17", "-I/i1", "-I/i2", "-DA=x", "-DB=2", "-G"]


def test_includes_followed_once_each_and_missing_ones_skipped(tmp_path):
    (tmp_path / "a.cuh").write_text('#include "b.cuh"\nA\n')
    (tmp_path / "b.cuh").write_text('  #  include "a.cuh"\n#include "missing.cuh"\n#include <system>\nB\n')
    (tmp_path / "m.cu").write_text('#include "a.cuh"\n#include "b.cuh"\nM\n')
    got = C._with_includes(tmp_path / "m.cu")
    assert got == ((tmp_path / "m.cu").read_bytes() + (tmp_path / "a.cuh").read_bytes()
                   + (tmp_path / "b.cuh").read_bytes())
    assert C._with_includes(tmp_path / "none.cu") == b""


def test_log_head_is_cut_after_fifteen_lines():
    log = "\n".join(f"line {i}" for i in range(20))
    assert C._head(log).splitlines() == [f"line {i}" for i in range(15)] + ["... (5 more lines)"]
    assert C._head("  a\nb  \n") == "a\nb"
    assert C._head(log, n=20) == log


@pytest.mark.parametrize("given, arch", [("sm_90", "sm_90"), ("compute_90", "sm_90"), (" SM_90A ", "sm_90a"),
                                         ("90a", "sm_90a"), ("75", "sm_75"), ("sm_89", "sm_89"), ("sm_87", "sm_87")])
def test_arch_spellings(given, arch):
    assert C.check_arch(given) == arch


@pytest.mark.parametrize("arch", ["sm_72", "sm_70", "sm_61", "sm_52", "sm_35", "compute_60"])
def test_archs_nvdisasm_cannot_read(arch):
    with pytest.raises(C.ArchError, match="older than sm_75: nvdisasm 13"):
        C.check_arch(arch)


_NOT_AN_ARCH = ("is not an arch name; expected sm_NN with an optional suffix: a (arch-specific, sm_90a and newer) "
                "or f (family, sm_100f and newer), e.g. sm_86, sm_90, sm_90a, sm_100, sm_120f")
_TOO_OLD = ("is older than sm_75: nvdisasm 13 (pip package nvidia-cuda-nvdisasm) refuses sm_70 and older, so its SASS "
            "cannot be read or verified. Use sm_75 or newer (tested: sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a).")


_ARCH_CASES = [
    ("sm_100", None),  # any sm_NN >= sm_75 that NVRTC compiles for is accepted
    ("sm_74", f"arch 'sm_74' {_TOO_OLD}"),
    ("sm_90b", f"'sm_90b' {_NOT_AN_ARCH}"),
    ("banana", f"'banana' {_NOT_AN_ARCH}"),
    ("sm_7", f"arch 'sm_7' {_TOO_OLD}"),
    ("sm_80a", "arch 'sm_80a': arch-specific 'a' variants exist from sm_90 on (sm_90a); use sm_80"),
    ("sm_90f", "arch 'sm_90f': family 'f' variants exist from sm_100 on (sm_100f); use sm_90"),
    ("sm_99", "arch 'sm_99': nvrtc 13.5 cannot compile for sm_99; it compiles for sm_75, sm_80, sm_86, sm_90, sm_100, "
              "sm_120 (with suffixes: sm_90a; sm_100a, sm_100f and newer). A newer NVRTC (pip install -U "
              "nvidia-cuda-nvrtc) may know it"),
]


@pytest.mark.parametrize("arch, message", _ARCH_CASES, ids=[arch for arch, _ in _ARCH_CASES])
def test_unknown_archs(monkeypatch, arch, message):
    """Names, old archs and misplaced suffixes are refused by form; a well-formed arch by whether this
    NVRTC compiles for it (here a stand-in NVRTC that knows the numbers below)."""
    monkeypatch.setattr(C, "nvrtc_arches", lambda: (70, 75, 80, 86, 90, 100, 120))
    monkeypatch.setattr(C, "compiler_version", lambda backend="nvrtc": "nvrtc 13.5")
    if message is None:
        assert C.check_arch(arch) == arch
        return
    with pytest.raises(C.ArchError) as e:
        C.check_arch(arch)
    assert str(e.value) == message


def test_compile_errors_name_the_options(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k() { undefined_call(); }\n')
    with pytest.raises(C.CompileError, match=r"NVRTC could not compile bad.cu with -arch=sm_80 -std=c\+\+17 "):
        C.compile_cuda(bad, "sm_80", cache_dir=tmp_path)


def test_nvcc_backend_without_nvcc(monkeypatch, src, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(C.CompileError, match="^backend 'nvcc' asked for but nvcc is not on PATH; use backend='nvrtc'$"):
        C.compiler_version("nvcc")
    with pytest.raises(C.CompileError, match="^backend 'nvcc' asked for but nvcc is not on PATH; use backend='nvrtc'$"):
        C._compile_nvcc(src, ["-arch=sm_80"])


def test_nvcc_backend_with_a_stand_in_nvcc(monkeypatch, src, tmp_path):
    """A stand-in nvcc that reports a version and copies a real cubin: the backend's plumbing."""
    real = C.compile_cuda(src, "sm_80", cache_dir=tmp_path / "real").cubin
    (tmp_path / "real.cubin").write_bytes(real)
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("Cuda compilation tools, release 12.9, V12.9.1")
    sys.exit(0)
assert args[0] == "-cubin" and args[-1].endswith(".cu"), args  # a cubin, of this source
if "BROKEN" in " ".join(args):
    sys.stderr.write("k.cu(1): error: planted\\n")
    sys.exit(1)
shutil.copy({str(tmp_path / "real.cubin")!r}, args[args.index("-o") + 1])
sys.stderr.write("a warning\\n")
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert C.compiler_version("nvcc") == "nvcc 12.9"
    c = C.compile_cuda(src, "sm_80", backend="nvcc", cache_dir=tmp_path / "c")
    assert c.cubin == real and c.compiler == "nvcc 12.9" and c.log == "a warning\n" and not c.cached
    assert C.compile_cuda(src, "sm_80", backend="nvcc", cache_dir=tmp_path / "c").cached
    # the backend is in the key: the same source through NVRTC is another entry
    assert not C.compile_cuda(src, "sm_80", cache_dir=tmp_path / "c").cached
    with pytest.raises(C.CompileError, match=rf"nvcc could not compile k.cu:\n\$ {fake} -cubin -arch=sm_80 -std=c\+\+17 "
                                             rf"-I\S+ -DBROKEN=1 -o \S+out.cubin {src}\nk.cu\(1\): error: planted"):
        C.compile_cuda(src, "sm_80", {"BROKEN": 1}, backend="nvcc", cache_dir=tmp_path / "c")


def test_nvrtc_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    monkeypatch.setitem(sys.modules, "cuda.nvrtc", None)
    with pytest.raises(C.CompileError, match=r"NVRTC is not importable: install cuda-bindings"):
        C.compiler_version()


class _FakeNvrtc:
    """NVRTC's calling convention (error code first) with planted failures."""

    def __init__(self, version_err=0, create_err=0, compile_err=0, cubin=b"\x7fELF fake",
                 log=b"  warning: \xff x\x00 \x00"):
        self.version_err, self.create_err, self.compile_err = version_err, create_err, compile_err
        self.cubin, self.log, self.calls = cubin, log, []

    def nvrtcVersion(self):
        return self.version_err, 13, 5

    def nvrtcCreateProgram(self, source, name, n, headers, names):
        assert (n, headers, names) == (0, [], [])  # no in-memory headers: includes come from -I
        self.calls.append(("create", source, name))
        return self.create_err, "prog"

    def nvrtcCompileProgram(self, prog, n, opts):
        self.calls.append(("compile", n, opts))
        return (self.compile_err,)

    def nvrtcGetProgramLogSize(self, prog):
        return 0, len(self.log)

    def nvrtcGetProgramLog(self, prog, buf):
        self.calls.append(("log", len(buf)))
        self.fill(buf, self.log)

    @staticmethod
    def fill(buf, data):
        """NVRTC writes into the caller's buffer; the caller passes an immutable bytes object, so
        the stand-in writes into it the way the C library does."""
        import ctypes
        ctypes.memmove(ctypes.c_char_p(buf), data, len(data))

    def nvrtcGetCUBINSize(self, prog):
        return 0, len(self.cubin)

    def nvrtcGetCUBIN(self, prog, buf):
        self.calls.append(("cubin", len(buf)))
        self.fill(buf, self.cubin)

    def nvrtcDestroyProgram(self, prog):
        self.calls.append(("destroy", prog))


def test_nvrtc_version_and_failures_through_a_stand_in(monkeypatch):
    fake = _FakeNvrtc()
    monkeypatch.setattr(C, "_nvrtc", lambda: fake)
    assert C.compiler_version() == "nvrtc 13.5"
    fake.version_err = 7
    with pytest.raises(C.CompileError, match="nvrtcVersion failed: 7"):
        C.compiler_version()
    fake.create_err = 3
    with pytest.raises(C.CompileError, match="nvrtcCreateProgram failed for k.cu: 3"):
        C._compile_nvrtc(b"src", "k.cu", ["-arch=sm_90"])
    fake.create_err, fake.cubin = 0, b""
    with pytest.raises(C.CompileError, match=r"^NVRTC produced no cubin for k.cu \(arch option -arch=compute_90\): a "
                                             "real arch such as sm_90 is needed, not a virtual compute_XX$"):
        C._compile_nvrtc(b"src", "k.cu", ["-arch=compute_90", "-std=c++17"])
    assert fake.calls[-1] == ("destroy", "prog")  # destroyed even when it fails
    fake.cubin = b"\x7fELF1234"
    data, log = C._compile_nvrtc(b"src", "k.cu", ["-arch=sm_90", "-DX=1"])
    assert data == b"\x7fELF1234" and log == "  warning: \ufffd x"
    assert len(data) == 8 and fake.calls[-5:] == [("create", b"src", b"k.cu"), ("compile", 2, [b"-arch=sm_90", b"-DX=1"]),
                                                  ("log", len(fake.log)), ("cubin", 8), ("destroy", "prog")]


def test_includes_are_found_in_a_source_that_is_not_utf8(tmp_path):
    (tmp_path / "a.cuh").write_text("A\n")
    (tmp_path / "m.cu").write_bytes(b'// caf\xe9 (latin-1)\n#include "a.cuh"\nM\n')
    assert C._with_includes(tmp_path / "m.cu") == (tmp_path / "m.cu").read_bytes() + b"A\n"


def test_a_cache_hit_returns_the_compilers_log(tmp_path):
    s = tmp_path / "w.cu"
    s.write_text('extern "C" __global__ void k(int* p) { int unused_variable; p[0] = 1; }\n')
    a = C.compile_cuda(s, "sm_80", cache_dir=tmp_path / "c")
    b = C.compile_cuda(s, "sm_80", cache_dir=tmp_path / "c")
    assert "unused_variable" in a.log and b.cached and b.log == a.log


# ----------------------------------------------------------------------------------------------
# a stand-in compiler: what compile_cuda hands over and writes


ELF = b"\x7fELF stand-in cubin"
ELF_SHA256 = "a336978560cb893115cc9cce7cb0e61bb846dde1aa0fe07f9d59e2fdb6fb92b7"  # sha256sum of ELF
N_KERNEL = 'extern "C" __global__ void k(int* p) { p[0] = N; }\n'
CACHE_HINT = ("not a folder; point GPUPROPS_CACHE_DIR (or --gpuprops-cache) at a folder, or unset it to use "
              "~/.cache/gpuprops/cubins")
UNWRITABLE = "compiling without caching. Set GPUPROPS_CACHE_DIR to a folder you can write."


@pytest.fixture
def n_src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "k.cu").write_text(N_KERNEL)
    return d / "k.cu"


@pytest.fixture
def stand_in(monkeypatch):
    """compile_cuda with a stand-in compiler (called with what NVRTC would get) and version."""
    calls = []

    def compile_nvrtc(source, name, opts):
        calls.append((source, name, opts))
        return ELF, "stand-in log XX"
    monkeypatch.setattr(C, "_compile_nvrtc", compile_nvrtc)
    monkeypatch.setattr(C, "compiler_version", lambda backend="nvrtc": "nvrtc 13.5")
    monkeypatch.setattr(C, "_WARNED", set())
    return calls


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _record_warnings():
    cm = warnings.catch_warnings(record=True)
    caught = cm.__enter__()
    warnings.simplefilter("always")
    return cm, caught


# ----------------------------------------------------------------------------------------------
# compile_cuda: what the compiler gets, what the entry holds, hits and misses


def test_a_miss_hands_the_source_over_and_writes_the_entry_in_full(n_src, tmp_path, stand_in, monkeypatch, umask_022):
    ticks = iter([10.0, 11.23456])
    monkeypatch.setattr(C, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    cache = tmp_path / "not" / "yet" / "cubins"  # its parents are made too
    c = C.compile_cuda(n_src, "sm_80", {"N": 4}, cache_dir=cache)
    assert stand_in == [(N_KERNEL.encode(), "k.cu", ["-arch=sm_80", "-std=c++17", f"-I{n_src.parent.resolve()}", "-DN=4"])]
    assert re.fullmatch(r"k-sm_80-[0-9a-f]{32}\.cubin", c.path.name) and c.path.parent == cache
    assert (c.cubin, c.arch, c.source_name, c.defines, c.compiler, c.log, c.cached) == (
        ELF, "sm_80", "k.cu", (("N", "4"),), "nvrtc 13.5", "stand-in log XX", False)
    meta = c.path.with_suffix(".json")
    assert sorted(p.name for p in cache.iterdir()) == [c.path.name, meta.name]
    assert c.path.read_bytes() == ELF
    assert meta.read_text() == f'''{{
 "source": "{n_src}",
 "arch": "sm_80",
 "options": [
  "-arch=sm_80",
  "-std=c++17",
  "-DN=4"
 ],
 "compiler": "nvrtc 13.5",
 "sha256": "{ELF_SHA256}",
 "log": "stand-in log XX",
 "seconds": 1.2346
}}'''
    assert c.path.stat().st_mode & 0o777 == 0o644 and meta.stat().st_mode & 0o777 == 0o644


def test_a_hit_reads_the_entry_and_compiles_nothing(n_src, tmp_path, stand_in):
    a = C.compile_cuda(n_src, "90", {"N": 1}, cache_dir=tmp_path / "c")
    b = C.compile_cuda(n_src, "sm_90", {"N": "1"}, cache_dir=tmp_path / "c")
    assert len(stand_in) == 1
    assert (b.cubin, b.path, b.arch, b.source_name, b.defines, b.compiler, b.log, b.cached) == (
        ELF, a.path, "sm_90", "k.cu", (("N", "1"),), "nvrtc 13.5", "stand-in log XX", True)


def test_a_cache_symlinked_to_nowhere_costs_only_the_caching(n_src, tmp_path, stand_in):
    """A cache that cannot be made (here a dangling link, as to an unmounted volume) is warned about once,
    at the line that asked for the compile; every compile then compiles."""
    cache = tmp_path / "cubins"
    cache.symlink_to(tmp_path / "unmounted" / "cubins")
    cm, caught = _record_warnings()
    try:
        line = _lineno_of_next_line()
        a = C.compile_cuda(n_src, "sm_80", cache_dir=cache)
        b = C.compile_cuda(n_src, "sm_80", cache_dir=cache)
    finally:
        cm.__exit__(None, None, None)
    assert (a.cubin, a.cached, b.cached, len(stand_in)) == (ELF, False, False, 2)
    assert [(w.category, str(w.message)) for w in caught] == [
        (RuntimeWarning, f"cubin cache {cache} cannot be written (File exists); {UNWRITABLE}")]
    where = (caught[0].filename, caught[0].lineno)
    assert "warnings.warn(" not in linecache.getline(*where)  # a caller's line, not the warning's own
    if hasattr(C.compile_cuda, "__wrapped__"):  # mutmut's trampolines add frames: the compile layer's caller
        assert where[0] == C.__file__
    else:
        assert where == (__file__, line)
    assert not (tmp_path / "unmounted").exists()


def _lineno_of_next_line():
    import inspect
    return inspect.currentframe().f_back.f_lineno + 1


def test_a_source_that_is_a_folder_or_unreadable_is_refused_in_full(n_src, tmp_path, stand_in, monkeypatch):
    with pytest.raises(C.CompileError) as e:
        C.compile_cuda(n_src.parent, "sm_80", cache_dir=tmp_path / "c")
    assert str(e.value) == f"kernel source {n_src.parent} is a folder; give one .cu file in it"
    real = pathlib.Path.read_bytes
    errors = {n_src: PermissionError(errno.EACCES, "Permission denied", str(n_src))}

    def read_bytes(self):
        if self in errors:
            raise errors[self]
        return real(self)
    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    with pytest.raises(C.CompileError) as e:
        C.compile_cuda(n_src, "sm_80", cache_dir=tmp_path / "c")
    assert str(e.value) == f"cannot read kernel source {n_src}: Permission denied"
    errors[n_src] = OSError("the disk went away")  # no strerror: the error itself
    with pytest.raises(C.CompileError) as e:
        C.compile_cuda(n_src, "sm_80", cache_dir=tmp_path / "c")
    assert str(e.value) == f"cannot read kernel source {n_src}: the disk went away"
    assert stand_in == [] and not (tmp_path / "c").exists()


# ----------------------------------------------------------------------------------------------
# the compiler's version and log, arch names


@pytest.mark.parametrize("out, version", [
    ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n", "nvcc 12.4"),
    ("nvcc: NVIDIA (R) Cuda compiler driver\nsome build without a release line\n", "nvcc unknown"),
    ("", "nvcc unknown"),
])
def test_nvcc_version_from_its_output(monkeypatch, out, version):
    runs = []

    def run(cmd, **kw):
        runs.append((cmd, kw))
        return SimpleNamespace(stdout=out, stderr="", returncode=0)
    monkeypatch.setattr(C, "shutil", SimpleNamespace(which=lambda name: f"/opt/cuda/bin/{name}"))
    monkeypatch.setattr(C, "subprocess", SimpleNamespace(run=run))
    assert C.compiler_version("nvcc") == version
    assert runs == [(["/opt/cuda/bin/nvcc", "--version"], {"capture_output": True, "text": True})]


def test_unknown_backend_is_refused_in_full():
    with pytest.raises(C.CompileError) as e:
        C.compiler_version("clang")
    assert str(e.value) == "unknown compiler backend 'clang'; expected 'nvrtc' or 'nvcc'"


def test_nvrtc_log_keeps_its_last_characters(monkeypatch):
    """Only the NUL padding and trailing blanks NVRTC leaves are cut, not a log's own last letters."""
    fake = _FakeNvrtc(log=b"k.cu(1): warning: variable XX\x00 \x00")
    monkeypatch.setattr(C, "_nvrtc", lambda: fake)
    assert C._compile_nvrtc(b"src", "k.cu", ["-arch=sm_90"]) == (b"\x7fELF fake", "k.cu(1): warning: variable XX")


@pytest.mark.parametrize("arch, message", [
    (90, "arch must be a string like 'sm_90', not 90"),
    (None, "arch must be a string like 'sm_90', not None"),
    (b"sm_90", "arch must be a string like 'sm_90', not b'sm_90'"),
])
def test_an_arch_that_is_not_a_string_is_refused_in_full(arch, message):
    with pytest.raises(C.ArchError) as e:
        C.parse_arch(arch)
    assert str(e.value) == message


@pytest.mark.parametrize("given, arch", [("sm_75", "sm_75"), ("100f", "sm_100f"), ("compute_100a", "sm_100a"),
                                         ("SM_120", "sm_120"), ("\tsm_90a\n", "sm_90a")])
def test_parse_arch_edges_accepted(given, arch):
    assert C.parse_arch(given) == arch


@pytest.mark.parametrize("given, message", [
    ("", "'' is not an arch name; expected "),
    ("sm_", "'sm_' is not an arch name; expected "),
    ("sm_90af", "'sm_90af' is not an arch name; expected "),
    ("sm90", "'sm90' is not an arch name; expected "),
    ("sm_74a", "arch 'sm_74a' is older than sm_75: "),
    ("sm_89a", "arch 'sm_89a': arch-specific 'a' variants exist from sm_90 on (sm_90a); use sm_89"),
    ("sm_99f", "arch 'sm_99f': family 'f' variants exist from sm_100 on (sm_100f); use sm_99"),
])
def test_parse_arch_edges_refused(given, message):
    with pytest.raises(C.ArchError) as e:
        C.parse_arch(given)
    assert str(e.value).startswith(message)


# ----------------------------------------------------------------------------------------------
# check_cache_dir: which setting named the folder


def test_a_default_cache_under_a_file_names_the_default(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUPROPS_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").write_text("not a folder")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(C.CacheError) as e:
        C.check_cache_dir()
    assert str(e.value) == (f"cubin cache {home}/.cache/gpuprops/cubins (the default cache folder) cannot be created: "
                            f"{home}/.cache is a file, {CACHE_HINT}")


def test_a_cache_that_is_a_file_names_the_setting(tmp_path, monkeypatch):
    f = tmp_path / "cubins"
    f.write_text("x")
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(f))
    with pytest.raises(C.CacheError) as e:
        C.check_cache_dir()
    assert str(e.value) == f"cubin cache {f} (GPUPROPS_CACHE_DIR) is a file, {CACHE_HINT}"
    with pytest.raises(C.CacheError) as e:
        C.check_cache_dir(f / "deeper")
    assert str(e.value) == (f"cubin cache {f}/deeper (the cache folder asked for (--gpuprops-cache)) cannot be "
                            f"created: {f} is a file, {CACHE_HINT}")
    assert C.check_cache_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b" and not (tmp_path / "a").exists()


# ----------------------------------------------------------------------------------------------
# _write_entry, _read_entry, _file_mode


def test_an_entry_is_written_where_its_parents_do_not_exist_yet(tmp_path, umask_022):
    cache = tmp_path / "a" / "b" / "cubins"
    C._write_entry(cache, [(cache / "k.cubin", ELF), (cache / "k.json", b"{}")])
    assert sorted(p.name for p in cache.iterdir()) == ["k.cubin", "k.json"]
    assert (cache / "k.cubin").read_bytes() == ELF and (cache / "k.json").read_bytes() == b"{}"
    assert (cache / "k.cubin").stat().st_mode & 0o777 == 0o644


def test_an_entry_never_passes_through_the_system_temporary_folder(tmp_path, monkeypatch):
    """The temporary file is made in the cache itself (a rename from another file system would not be
    atomic): a system temporary folder that does not exist changes nothing."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    monkeypatch.setattr(C, "_WARNED", set())
    cache = tmp_path / "c"
    cm, caught = _record_warnings()
    try:
        C._write_entry(cache, [(cache / "k.cubin", ELF)])
    finally:
        cm.__exit__(None, None, None)
    assert caught == [] and (cache / "k.cubin").read_bytes() == ELF
    assert [p.name for p in cache.iterdir()] == ["k.cubin"] and not (tmp_path / "no-such-tmp").exists()


def test_a_failed_rename_leaves_no_temporary_file_and_warns_in_full(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "_WARNED", set())
    cache = tmp_path / "c"
    (cache / "k.json").mkdir(parents=True)  # a folder where the entry's JSON goes
    cm, caught = _record_warnings()
    try:
        C._write_entry(cache, [(cache / "k.cubin", ELF), (cache / "k.json", b"{}")])
    finally:
        cm.__exit__(None, None, None)
    assert [str(w.message) for w in caught] == [f"cubin cache {cache} cannot be written (Is a directory); {UNWRITABLE}"]
    assert sorted(p.name for p in cache.iterdir()) == ["k.cubin", "k.json"]  # the first file, the folder, no .tmp
    assert (cache / "k.cubin").read_bytes() == ELF and list((cache / "k.json").iterdir()) == []


def test_a_temporary_file_removed_under_the_writer_is_only_warned_about(tmp_path, monkeypatch):
    """Another process (a cache clean-up) may remove the temporary file before the rename: the failed
    rename is warned about, the missing file to remove is no second error."""
    monkeypatch.setattr(C, "_WARNED", set())

    def replace(src, dst):
        os.unlink(src)
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "replace", replace)
    cache = tmp_path / "c"
    cm, caught = _record_warnings()
    try:
        C._write_entry(cache, [(cache / "k.cubin", ELF)])
    finally:
        cm.__exit__(None, None, None)
    assert [str(w.message) for w in caught] == [f"cubin cache {cache} cannot be written (Input/output error); {UNWRITABLE}"]
    assert list(cache.iterdir()) == []


def test_the_umask_is_read_without_changing_it(monkeypatch):
    """Where /proc says the umask, the process's umask is not flipped to read it (another thread making a
    file at that moment would get the wrong mode)."""
    old = os.umask(0o027)
    flips = []
    try:
        monkeypatch.setattr(os, "umask", lambda mask: flips.append(mask) or 0o022)
        mode = C._file_mode()
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert (mode, flips) == (0o640, [])


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o000, 0o666), (0o077, 0o600)])
def test_without_proc_the_mode_is_0666_less_the_umask(monkeypatch, umask, mode):
    real_open = open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc/"):
            raise OSError(errno.ENOENT, "No such file or directory")
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", no_proc)
    old = os.umask(umask)
    try:
        assert C._file_mode() == mode
        assert os.umask(old) == umask
    finally:
        os.umask(old)


def test_an_entry_whose_metadata_is_a_pipe_is_not_read(tmp_path):
    """Only regular files are read: a pipe in the cache (which would block a reader) is recompiled over,
    even when what it would say matches the cubin."""
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(ELF)
    os.mkfifo(meta)
    text = ('{"sha256": "%s", "log": "from the pipe"}' % ELF_SHA256).encode()

    def feed():
        fd = os.open(meta, os.O_WRONLY)  # waits for a reader
        os.write(fd, text)
        os.close(fd)
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        got = C._read_entry(cubin, meta)
    finally:
        fd = os.open(meta, os.O_RDWR)  # a reader that never waits: lets the feeder finish either way
        t.join()
        os.close(fd)
    assert got is None


def test_an_entry_read_back_in_full(tmp_path):
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(ELF)
    meta.write_text('{"sha256": "%s", "log": "ptxas info"}' % ELF_SHA256)
    assert C._read_entry(cubin, meta) == (ELF, "ptxas info")
    meta.write_text('{"sha256": "%s", "log": null}' % ELF_SHA256)
    assert C._read_entry(cubin, meta) == (ELF, "")
    meta.write_text('["%s"]' % ELF_SHA256)
    assert C._read_entry(cubin, meta) is None


# ----------------------------------------------------------------------------------------------
# the cubin cache's files and its failure messages


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)])
def test_cache_files_get_0666_less_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        assert gp_compile._file_mode() == mode
        gp_compile._write_entry(tmp_path / "c", [(tmp_path / "c" / "x.cubin", b"\x7fELF")])
    finally:
        os.umask(old)
    assert (tmp_path / "c" / "x.cubin").stat().st_mode & 0o777 == mode


def test_without_proc_the_umask_is_asked_and_restored(monkeypatch):
    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc/"):
            raise OSError("no /proc here")
        return real_open(path, *a, **k)
    monkeypatch.setattr(builtins, "open", no_proc)
    old = os.umask(0o027)
    try:
        assert gp_compile._file_mode() == 0o640
        assert os.umask(0o027) == 0o027  # still the caller's umask
    finally:
        os.umask(old)


def test_an_entry_with_one_half_missing_is_compiled_again(tmp_path):
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(b"\x7fELF" + bytes(60))
    assert gp_compile._read_entry(cubin, meta) is None
    cubin.unlink()
    meta.write_text('{"sha256": "0", "log": ""}')
    assert gp_compile._read_entry(cubin, meta) is None


def test_an_entry_without_a_log_reads_as_an_empty_log(tmp_path):
    import hashlib
    data = b"\x7fELF" + bytes(60)
    cubin, meta = tmp_path / "k.cubin", tmp_path / "k.json"
    cubin.write_bytes(data)
    meta.write_text('{"sha256": "%s"}' % hashlib.sha256(data).hexdigest())
    assert gp_compile._read_entry(cubin, meta) == (data, "")
    meta.write_text('{"sha256": "%s", "log": 7}' % hashlib.sha256(data).hexdigest())
    assert gp_compile._read_entry(cubin, meta) == (data, "")


def test_an_unwritable_cache_is_warned_about_once_in_full(tmp_path, monkeypatch):
    monkeypatch.setattr(gp_compile, "_WARNED", set())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = blocker / "cache"  # mkdir below a file: NotADirectoryError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp_compile._write_entry(cache, [(cache / "a.cubin", b"\x7fELF")])
        gp_compile._write_entry(cache, [(cache / "b.cubin", b"\x7fELF")])
    assert [str(w.message) for w in caught] == [
        f"cubin cache {cache} cannot be written (Not a directory); compiling without caching. Set "
        "GPUPROPS_CACHE_DIR to a folder you can write."]
    assert caught[0].category is RuntimeWarning and gp_compile._WARNED == {cache}


def test_missing_nvrtc_says_what_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_cuda(name, globals=None, locals=None, fromlist=(), level=0):
        if name.startswith("cuda"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, globals, locals, fromlist, level)
    monkeypatch.setattr(builtins, "__import__", no_cuda)
    with pytest.raises(gp_compile.CompileError) as e:
        gp_compile._nvrtc()
    assert str(e.value) == ("NVRTC is not importable: install cuda-bindings and nvidia-cuda-nvrtc "
                            "(pip install 'pytest-gpuprops[dev]' or '[cuda13]'), or pass backend='nvcc'")


def test_threads_asking_for_one_entry_at_once_compile_it_once(monkeypatch, tmp_path):
    """compile_cuda: a thread that asks for an entry another thread is compiling waits for that
    compile and reads its entry (the session's background builds and the test that needs one)."""
    calls = []

    def slow_nvrtc(source, name, opts):
        calls.append(name)
        time.sleep(0.3)
        return b"\x7fELF one", ""
    monkeypatch.setattr(C, "_compile_nvrtc", slow_nvrtc)
    got = []
    threads = [threading.Thread(target=lambda: got.append(compile_cuda(KERNELS / "ffma.cu", "sm_90", {"ILP": 1},
                                                                        cache_dir=tmp_path)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["ffma.cu"] and [g.cubin for g in got] == [b"\x7fELF one"] * 3
    assert sorted(g.cached for g in got) == [False, True, True] and not C._in_flight


def test_a_thread_waiting_for_a_compile_that_failed_compiles_and_reports_it_itself(monkeypatch, tmp_path):
    calls = []

    def failing_nvrtc(source, name, opts):
        calls.append(name)
        time.sleep(0.2)
        raise CompileError("ffma.cu(3): error: expected a ';'")
    monkeypatch.setattr(C, "_compile_nvrtc", failing_nvrtc)
    errors = []

    def ask():
        try:
            compile_cuda(KERNELS / "ffma.cu", "sm_90", {"ILP": 2}, cache_dir=tmp_path)
        except CompileError as exc:
            errors.append(str(exc))
    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 2 and errors == ["ffma.cu(3): error: expected a ';'"] * 2 and not C._in_flight
