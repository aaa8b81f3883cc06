"""The compile cache key, checked by behaviour: a cubin is reused only when source, included headers,
defines, options, arch and compiler version all match. Tiny kernels written here compile in a
fraction of a second."""

import json
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from pytest_gpuprops import compile as C

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
