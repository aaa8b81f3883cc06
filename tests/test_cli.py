"""The ``gpuprops`` command (cli.py) and its user contract, each expected value written out by hand.

Oracles:

* the help of ``gpuprops`` and of each command: a golden text file, ``tests/golden/cli_help.txt``
  (the help is the CLI's documentation; how to regenerate it is in the test's docstring);
* refusals: the whole message line on stderr (exit status 2), compared for equality;
* boundaries: the last accepted and the first refused value of every bounded option, the oldest arch
  ``gpuprops sass`` reads (sm_75; an older cubin is made by editing the ELF flags of an sm_75 one),
  the arch range ``cubin_arch`` reads from the flags, and the truncation of nvdisasm's messages after
  three lines;
* outputs: ``--version``, ``gpuprops facts`` and ``gpuprops merge`` compared line by line with
  tables written here; ``gpuprops sass``/``patch`` on a two-kernel cubin checked against kernels
  whose code is told apart by a constant written in each (0x1111, 0x2222); the README's commands
  run as written.

Where a test replaces a part (the patcher, nvdisasm's version, stdout), it says what it plants; the
CLI's own code always runs."""

import io
import json
import os
import socket
import struct
import sys
import tempfile
from pathlib import Path

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import __version__, cli, results, sass
from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops.cli import cubin_arch, main

# ----------------------------------------------------------------------------------------------
# the commands end to end, and the README's commands as written


def test_compile_then_sass_prints_the_seeds_notation(tmp_path, capsys):
    out = tmp_path / "h.cubin"
    assert main(["compile", str(KERNELS / "hmma_16816.cu"), "--arch", "sm_86", "-D", "ILP=1", "-o", str(out)]) == 0
    assert main(["sass", str(out)]) == 0
    text = capsys.readouterr().out
    hmma = [line for line in text.splitlines() if "HMMA.16816.F32" in line]
    assert len(hmma) == 64
    assert all(line.startswith("[B") and ":S" in line and "/* 0x" in line for line in hmma)


def test_patch_prints_before_and_after(tmp_path, capsys):
    cub = tmp_path / "r.cubin"
    main(["compile", str(KERNELS / "regbank_ffma.cu"), "--arch", "sm_90", "-D", "NFFMA=8", "-o", str(cub)])
    main(["sass", str(cub)])
    line = next(x for x in capsys.readouterr().out.splitlines() if " FFMA " in x)
    off = "0x" + line.split("/*")[1].split("*/")[0]
    rd = line.split("FFMA ")[1].split(",")[0]
    rc = main(["patch", str(cub), "--at", off, "--regs", "R8,R10,R12", "--reuse", "A", "--stall", "1",
               "--scratch", rd, "-o", str(tmp_path / "p.cubin")])
    out = capsys.readouterr().out
    assert rc == 0 and "+ [B" in out and f"FFMA {rd}, R8.reuse, R10, R12" in out
    assert main(["patch", str(cub), "--at", off, "--regs", "R250,R1,R2", "-o", str(tmp_path / "q.cubin")]) == 2
    assert "refused" in capsys.readouterr().err and not (tmp_path / "q.cubin").exists()


def test_facts_lists_every_arch(capsys):
    assert main(["facts"]) == 0
    out = capsys.readouterr().out
    assert "# sm_90" in out and "lds_latency_cycles" in out and "# sm_86" in out


def test_errors_are_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "x.cubin"
    bad.write_bytes(b"nope")
    assert main(["sass", str(bad)]) == 2
    assert "not an ELF" in capsys.readouterr().err
    assert main(["compile", str(KERNELS / "ffma.cu"), "--arch", "sm_70"]) == 2
    assert "nvdisasm" in capsys.readouterr().err


def _readme_block(heading: str, lang: str = "bash") -> str:
    text = (KERNELS.parent / "README.md").read_text()
    section = text.split(heading, 1)[1]
    return section.split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def test_readme_gpuprops_commands_run_as_written(tmp_path, monkeypatch, capsys, cache_dir):
    import shlex

    from pytest_gpuprops.compile import compiler_version
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(cache_dir))
    (tmp_path / "kernels").symlink_to(KERNELS)
    lines = [x for x in _readme_block("## The `gpuprops` command").splitlines() if x.strip()]
    assert len(lines) >= 5
    for line in lines:
        args = shlex.split(line.split("  #")[0])
        assert args[0] == "gpuprops"
        assert main(args[1:]) == 0, line
    out = capsys.readouterr().out
    if compiler_version() == "nvrtc 13.5":  # the README's sample lines are from NVRTC 13.5
        section = (KERNELS.parent / "README.md").read_text().split("## The `gpuprops` command", 1)[1]
        samples = [x for x in section.splitlines() if x.startswith(("[B", "- [B", "+ [B", "wrote "))]
        assert len(samples) == 4 and all(s in out for s in samples)


def test_readme_failure_recipe_fails_as_shown(pytester, tmp_path):
    recipe = _readme_block("## What a failure looks like").splitlines()
    assert recipe[0].startswith("sed 's/\"nvrtc 13.5\" = 24 }/\"nvrtc 13.5\" = 20 }/'")
    from pytest_gpuprops.compile import compiler_version
    if compiler_version() != "nvrtc 13.5":  # another compiler reads the planted file as a changed schedule
        pytest.skip(f"the README's recipe plants the nvrtc 13.5 entry; this compiler is {compiler_version()}")
    planted = tmp_path / "planted.toml"
    facts = (KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text()
    planted.write_text(facts.replace('"nvrtc 13.5" = 24 }', '"nvrtc 13.5" = 20 }'))
    r = pytester.runpytest_inprocess(str(KERNELS.parent / "hwtests" / "test_static.py"), "-k",
                                     "dependent_chain and sm_90", "--gpuprops-facts", str(planted),
                                     "-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fact hmma_16816_f32_dependent_issue_cycles on sm_90 does not hold:*",
                            "*expected: 20 (nvrtc 13.5)*",
                            f"*reproduce: pytest 'hwtests/test_static.py::test_hmma_dependent_chain_issue_spacing"
                            f"[[]sm_90[]]' --gpuprops-facts {planted}"])


# ----------------------------------------------------------------------------------------------
# what each patch option turns into (the patcher replaced by a recorder, so no
# nvdisasm runs), and the printed output of compile, sass and facts


class _EmptyCubin:
    def kernel(self, name=None):
        return _Kernel()

    def instructions(self, kernel=None):
        return []


#: What the stand-in patcher reports: one instruction whose words changed.
BEFORE = sass.Instruction(0x10, "FFMA R1, R2, R3, R4", 0x1, 0x2)
AFTER = sass.Instruction(0x10, "FFMA R1, R8, R10, R12", 0x3, 0x4)


@pytest.fixture
def patch_run(monkeypatch):
    """Run ``gpuprops patch`` with the cubin loader and the patcher replaced (no file is read, no
    nvdisasm runs): returns (exit code, edits, scratch); edits is None where the patcher was not called."""
    seen = {}

    def fake_patch(cubin, kernel, edits, *, scratch=None):
        seen.update(kernel=kernel, edits=edits, scratch=scratch)
        if seen.get("refuse"):
            raise sass.PatchRefused("planted refusal")
        return sass.PatchResult(b"\x7fELF-patched", kernel, [(BEFORE, AFTER)])

    monkeypatch.setattr(cli, "_load_cubin", lambda path: _EmptyCubin())
    monkeypatch.setattr(sass, "patch", fake_patch)

    def run(tmp_path, *args, refuse=False):
        seen.clear()
        seen["refuse"] = refuse
        rc = cli.main(["patch", "in.cubin", "-o", str(tmp_path / "out.cubin"), *args])
        return rc, seen.get("edits"), seen.get("scratch")
    return run


def test_patch_options_become_edits(patch_run, tmp_path, capsys):
    # offsets are hex, as nvdisasm prints them: 0x480, 0490 and /*04a0*/ name three instructions
    rc, edits, scratch = patch_run(tmp_path, "--at", "0x480", "0490", "/*04a0*/", "--regs", "R8,r10,RZ", "--reuse",
                                  "a-B", "--stall", "0x3", "--wait-mask", "0x21", "--read-barrier", "none",
                                  "--write-barrier", "2", "--scratch", "R5,R6")
    assert rc == 0
    assert edits == [sass.Edit(off, regs=(None, 8, 10, sass.RZ), reuse=0b011, yield_flag=False, stall=3, wait_mask=0x21,
                               read_barrier=None, write_barrier=2) for off in (0x480, 0x490, 0x4A0)]
    assert scratch == {5, 6}
    assert (tmp_path / "out.cubin").read_bytes() == b"\x7fELF-patched"
    assert capsys.readouterr().out == (f"- {BEFORE.line()}\n+ {AFTER.line()}\n"
                                       f"wrote {tmp_path / 'out.cubin'} (verified by disassembly)\n")
    # a decimal offset is read as hex: 1168 is 0x1168, not an instruction boundary
    rc, edits, _ = patch_run(tmp_path, "--at", "1168", "--stall", "1")
    assert rc == 2 and edits is None
    assert capsys.readouterr().err == ("gpuprops patch: argument --at: 1168 (0x1168) is not an instruction offset; "
                                       "instructions are 16 bytes, so offsets end in 0 in hex (0480, 0490, ...) "
                                       "(see 'gpuprops patch --help')\n")


def test_patch_four_registers_and_explicit_yield(patch_run, tmp_path, capsys):
    _, edits, scratch = patch_run(tmp_path, "--at", "0x10", "--regs", "R1,R2,R3,R4", "--reuse", "C", "--yield", "on")
    assert edits == [sass.Edit(0x10, regs=(1, 2, 3, 4), reuse=0b100, yield_flag=True)] and scratch is None
    _, edits, _ = patch_run(tmp_path, "--at", "0x10", "--yield", "off")
    assert edits == [sass.Edit(0x10, yield_flag=False)]
    _, edits, _ = patch_run(tmp_path, "--at", "0x10", "--reuse", "")
    assert edits == [sass.Edit(0x10, reuse=0)]  # clearing reuse leaves yield as it is
    capsys.readouterr()
    # no field to change: refused before any cubin is read, nothing written
    rc, edits, _ = patch_run(tmp_path, "--at", "0x20")
    assert rc == 2 and edits is None
    assert capsys.readouterr().err == ("gpuprops patch: nothing to change: give at least one of --regs, --reuse, "
                                       "--stall, --yield, --wait-mask, --read-barrier, --write-barrier\n")


@pytest.mark.parametrize("args, message", [
    (["--regs", "R1,R2"], "argument --regs: takes Ra,Rb,Rc or Rd,Ra,Rb,Rc (3 or 4 registers), not 'R1,R2'"),
    (["--regs", "R1,X2,R3"], "argument --regs: takes registers like R8 or RZ (R0..R254), not 'X2'"),
    (["--regs", "R1,Rx,R3"], "argument --regs: takes registers like R8 or RZ (R0..R254), not 'Rx'"),  # as typed
    (["--reuse", "AD"], "argument --reuse: takes slots A, B, C (e.g. AB; '' clears them), not 'AD'"),
])
def test_patch_option_errors(patch_run, tmp_path, capsys, args, message):
    """A bad option value is a refusal: exit 2, one line on stderr naming the option, the patcher
    never called and nothing written."""
    rc, edits, _ = patch_run(tmp_path, "--at", "0x10", *args)
    assert rc == 2 and edits is None and not (tmp_path / "out.cubin").exists()
    assert capsys.readouterr().err == f"gpuprops patch: {message} (see 'gpuprops patch --help')\n"


def test_a_refused_patch_exits_2_and_writes_nothing(patch_run, tmp_path, capsys):
    rc, _, _ = patch_run(tmp_path, "--at", "0x10", "--stall", "1", refuse=True)
    assert rc == 2 and not (tmp_path / "out.cubin").exists()
    assert capsys.readouterr().err == "gpuprops patch: refused: planted refusal; nothing was written\n"


def test_defines(capsys):
    # each -D is parsed on its own (cli._define); compile makes them a dict
    assert [cli._define(t) for t in ("ILP=2", "FLAG", "X=a=b")] == [("ILP", "2"), ("FLAG", "1"), ("X", "a=b")]
    parser = cli.build_parser()
    a = parser.parse_args(["compile", "k.cu", "--arch", "sm_90", "-D", "ILP=2", "-D", "FLAG", "-D", "X=a=b"])
    assert dict(a.define) == {"ILP": "2", "FLAG": "1", "X": "a=b"}
    assert parser.parse_args(["compile", "k.cu", "--arch", "sm_90"]).define is None
    assert cli.main(["compile", "k.cu", "--arch", "sm_90", "-D", "1X=2"]) == 2
    assert capsys.readouterr().err == ("gpuprops compile: argument -D/--define: takes NAME=VALUE (or NAME) with NAME a "
                                       "C identifier, not '1X=2' (see 'gpuprops compile --help')\n")


def test_registers():
    assert [cli._reg(t) for t in ("R0", " r12 ", "RZ", "rz")] == [0, 12, sass.RZ, sass.RZ]


def test_compile_names_the_output_after_source_and_arch(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["compile", str(KERNELS / "clock_overhead.cu"), "--arch", "90"]) == 0
    out = tmp_path / "clock_overhead.sm_90.cubin"
    first = capsys.readouterr().out
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert first == (f"clock_overhead.sm_90.cubin: {out.stat().st_size} bytes, sm_90, "
                     f"nvrtc {first.split('nvrtc ')[1].split(',')[0]}, compiled\n")
    assert cli.main(["compile", str(KERNELS / "clock_overhead.cu"), "--arch", "sm_90", "-D", "X=1", "-D", "Y",
                     "-o", "o.cubin"]) == 0
    assert capsys.readouterr().out.endswith(", compiled\n")
    assert cli.main(["compile", str(KERNELS / "clock_overhead.cu"), "--arch", "sm_90", "-D", "X=1", "-D", "Y",
                     "-o", "o.cubin"]) == 0
    assert capsys.readouterr().out.endswith(", cached\n")


def test_sass_prints_a_header_and_one_line_per_instruction(build, tmp_path, capsys):
    cubin = build("clock_overhead.cu", "sm_90")
    p = tmp_path / "c.cubin"
    p.write_bytes(cubin.data)
    assert cli.main(["sass", str(p), "--kernel", "clock_overhead"]) == 0
    lines = capsys.readouterr().out.splitlines()
    regs = cubin.kernel().register_count
    assert lines[0] == (f"// clock_overhead: {regs} registers (sm_90); control code "
                        "[B<wait mask>:R<read sb>:W<write sb>:<Y = yield>:S<stall>]; offsets in hex")
    assert lines[1:] == [i.line() for i in cubin.instructions()]


def test_facts_lists_one_arch_from_a_file(tmp_path, capsys):
    f = tmp_path / "sm_90.toml"
    f.write_text('arch = "sm_90"\n[lds]\nvalue = 30\ntolerance_abs = 0.5\nunit = "cycles"\nmethod = "chase"\n'
                 'source = "by hand"\n')
    assert cli.main(["facts", "--arch", "sm_90", "--facts", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# sm_90: {f}"
    header = out[1].split()
    assert header == ["fact", "expected", "kind", "method", "source"]
    assert out[3].split() == ["lds", "30", "±", "0.5", "cycles", "measured", "chase", "by", "hand"]


GPU_FACTS = """arch = "sm_90"

[lds]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "by hand"

[gpus."NVIDIA H200".dram_read_gbps]
value = 4549.0
tolerance_rel = 0.03
units_range = [4486.0, 4612.0]
unit = "GB/s"
method = "stream read"
source = "four units"
"""


def test_facts_lists_each_gpu_section_after_the_arch_with_the_units_so_far(tmp_path, capsys):
    f = tmp_path / "sm_90.toml"
    f.write_text(GPU_FACTS)
    assert cli.main(["facts", "--facts", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# sm_90: {f}" and out[3].split()[0] == "lds"
    assert out[5] == f"# sm_90, GPU NVIDIA H200 (adds to and overrides the arch's for that GPU): {f}"
    assert out[6].split() == ["fact", "expected", "units", "so", "far", "kind", "method", "source"]
    assert out[8].split() == ["dram_read_gbps", "4549", "±", "136", "GB/s", "4486", "..", "4612", "measured", "stream",
                              "read", "four", "units"]


def test_facts_for_one_gpu_and_one_fact_whole(tmp_path, capsys):
    f = tmp_path / "sm_90.toml"
    f.write_text(GPU_FACTS)
    assert cli.main(["facts", "--facts", str(f), "--gpu", "nvidia  h200"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# sm_90 for nvidia  h200: {f}"
    assert {line.split()[0] for line in out[3:5]} == {"lds", "dram_read_gbps"}  # the arch's and the GPU's
    assert cli.main(["facts", "--facts", str(f), "--fact", "dram_read_gbps"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"# dram_read_gbps (sm_90, GPU NVIDIA H200): {f}",
        "expected:    4549 ± 136 GB/s",
        "units so far: 4486 .. 4612 (a unit beyond is flagged as a new sample)",
        "kind:        measured", "method:      stream read", "source:      four units", ""]
    assert refusal(capsys, "facts", "--facts", str(f), "--gpu", "NVIDIA B200") == (
        "gpuprops facts: no facts file here has a section for the GPU 'NVIDIA B200' (sections: NVIDIA H200); its "
        "arch's facts alone: gpuprops facts --arch sm_XX")
    assert refusal(capsys, "facts", "--facts", str(f), "--fact", "no_such") == (
        f"gpuprops facts: no fact 'no_such' in {f}; gpuprops facts lists them")


def test_facts_error_is_one_line(tmp_path, capsys):
    assert cli.main(["facts", "--arch", "sm_90", "--facts", str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err == (f"gpuprops facts: facts path {tmp_path / 'none.toml'} does not exist; pass a "
                                       "facts .toml file or a folder of sm_XX.toml (gpuprops facts lists the packaged "
                                       "ones)\n")


# ----------------------------------------------------------------------------------------------
# the user contract


GOLDEN_HELP = Path(__file__).parent / "golden" / "cli_help.txt"

TWO_KERNELS = ('extern "C" __global__ void alpha(int* p) { p[threadIdx.x] = 0x1111; }\n'
               'extern "C" __global__ void beta(int* p) { p[threadIdx.x] = 0x2222; }\n')
NO_KERNEL = "__device__ int counter;\n"
MAKE_CUBIN = "make one with: gpuprops compile kernels/regbank_ffma.cu --arch sm_90 -o rb.cubin"
E_FLAGS = 48  # offset of e_flags in an ELF64 header


def run(capsys, *args):
    """(exit status, stdout, stderr) of ``gpuprops ARGS``, in-process."""
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def refusal(capsys, *args) -> str:
    """Run a command that must be refused: exit 2, nothing on stdout, one message on stderr (returned
    without its trailing newline)."""
    status, out, err = run(capsys, *args)
    assert (status, out) == (2, ""), (status, out, err)
    assert err.endswith("\n")
    return err[:-1]


def with_flags(data: bytes, flags: int) -> bytes:
    b = bytearray(data)
    b[E_FLAGS:E_FLAGS + 4] = struct.pack("<I", flags)
    return bytes(b)


def sm_in_flags(data: bytes, sm: int) -> bytes:
    """The cubin with the SM number in e_flags bits 8..15 (CUDA 12.8+ ABI) replaced by ``sm``."""
    flags = struct.unpack_from("<I", data, E_FLAGS)[0]
    return with_flags(data, (flags & ~0xFF00) | (sm << 8))


@pytest.fixture(scope="module")
def cubins(tmp_path_factory, cache_dir):
    """Bytes of tiny cubins: two kernels (alpha, beta) for sm_90 and sm_75, and one with no kernel."""
    src = tmp_path_factory.mktemp("tiny-src")
    (src / "two.cu").write_text(TWO_KERNELS)
    (src / "none.cu").write_text(NO_KERNEL)
    return {"two90": gp_compile.compile_cuda(src / "two.cu", "sm_90", cache_dir=cache_dir).cubin,
            "two75": gp_compile.compile_cuda(src / "two.cu", "sm_75", cache_dir=cache_dir).cubin,
            "none90": gp_compile.compile_cuda(src / "none.cu", "sm_90", cache_dir=cache_dir).cubin}


@pytest.fixture
def work(tmp_path, monkeypatch, cache_dir, cubins):
    """The working folder: two.cu (source) and two.cubin (its sm_90 cubin); caches are the session's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(cache_dir))
    (tmp_path / "two.cu").write_text(TWO_KERNELS)
    (tmp_path / "two.cubin").write_bytes(cubins["two90"])
    return tmp_path


# ----------------------------------------------------------------------------------------------
# help


def test_help_of_gpuprops_and_each_command_matches_the_golden_file(capsys, monkeypatch):
    """``gpuprops --help`` and ``gpuprops CMD --help`` for every command, at 100 columns.

    The golden file holds argparse's layout of Python 3.11/3.12 (3.10 names the options section
    differently, 3.13 prints ``-o, --output OUTPUT``). After an intended change of the help,
    regenerate it from the repository root and read the diff:

        for c in "" compile sass patch facts merge baselines; do echo "=== gpuprops ${c:+$c }--help";
            COLUMNS=100 python -m pytest_gpuprops.cli $c --help; done > tests/golden/cli_help.txt
    """
    if not (3, 11) <= sys.version_info[:2] <= (3, 12):
        pytest.skip("tests/golden/cli_help.txt is argparse's layout of Python 3.11/3.12; regenerate it (see "
                    "this test's docstring) to compare on this Python")
    monkeypatch.setenv("COLUMNS", "100")
    got = ""
    for cmd in ["", "compile", "sass", "patch", "facts", "merge", "baselines"]:
        status, out, err = run(capsys, *([cmd] if cmd else []), "--help")
        assert (status, err) == (0, "")
        got += f"=== gpuprops {cmd + ' ' if cmd else ''}--help\n{out}"
    assert got == GOLDEN_HELP.read_text()


def test_no_command_names_the_commands_it_takes(capsys):
    assert refusal(capsys) == ("gpuprops: the following arguments are required: {compile,sass,patch,facts,merge,baselines} "
                               "(see 'gpuprops --help')")


def test_version_lists_package_compiler_and_nvdisasm(capsys, monkeypatch):
    """nvdisasm's version and place, and the compiler's version, are planted: the line layout is checked."""
    monkeypatch.setattr(gp_compile, "compiler_version", lambda: "nvrtc 99.1")
    monkeypatch.setattr(sass, "nvdisasm_version", lambda: "13.9")
    monkeypatch.setattr(sass, "find_nvdisasm", lambda: "/opt/cuda/bin/nvdisasm")
    assert run(capsys, "--version") == (0, f"gpuprops {__version__}\ncompiler: nvrtc 99.1\n"
                                           "nvdisasm: 13.9 (/opt/cuda/bin/nvdisasm)\n", "")


def test_version_says_which_tool_is_unavailable_and_why(capsys, monkeypatch):
    def missing():
        raise gp_compile.CompileError("NVRTC is not importable: install cuda-bindings")
    monkeypatch.setattr(gp_compile, "compiler_version", missing)
    monkeypatch.setattr(sass, "nvdisasm_version", lambda: "13.9")
    monkeypatch.setattr(sass, "find_nvdisasm", lambda: "/opt/cuda/bin/nvdisasm")
    assert run(capsys, "--version") == (0, f"gpuprops {__version__}\n"
                                           "compiler: unavailable (NVRTC is not importable: install cuda-bindings)\n"
                                           "nvdisasm: 13.9 (/opt/cuda/bin/nvdisasm)\n", "")


# ----------------------------------------------------------------------------------------------
# patch options, read by the CLI: the patcher replaced by a recorder (no nvdisasm runs)


class _Kernel:
    name = "k"


class _FakeCubin:
    """What ``_load_cubin`` returns in the recorded runs; ``instructions`` may raise a planted error."""

    error = None

    def kernel(self, name=None):
        return _Kernel()

    def instructions(self, kernel=None):
        if self.error:
            raise self.error
        return []


I10 = sass.Instruction(0x10, "FFMA R1, R2, R3, R4", 0x1, 0x2)
I10_AFTER = sass.Instruction(0x10, "FFMA R1, R8, R10, R12", 0x3, 0x4)
I20 = sass.Instruction(0x20, "FFMA R5, R6, R7, R8", 0x5, 0x6)
I30 = sass.Instruction(0x30, "FFMA R9, R6, R7, R8", 0x7, 0x8)


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """``gpuprops patch in.cubin -o out.cubin ARGS`` with the cubin loader and the patcher replaced:
    ``rec(*args, changed=[(before, after)], refuse=None)`` -> exit status; ``rec.edits`` holds the
    edits the patcher was given (None: it was not called)."""
    fake = _FakeCubin()

    class Rec:
        edits = None
        scratch = None
        changed = [(I10, I10_AFTER)]
        refuse = None
        cubin = fake
        out = tmp_path / "out.cubin"

        def __call__(self, *args, changed=None, refuse=None):
            self.edits = self.scratch = None
            self.changed = changed if changed is not None else [(I10, I10_AFTER)]
            self.refuse = refuse
            return main(["patch", "in.cubin", "-o", str(self.out), *[str(a) for a in args]])

    rec = Rec()

    def fake_patch(cubin, kernel, edits, *, scratch=None):
        assert kernel == "k"
        rec.edits, rec.scratch = edits, scratch
        if rec.refuse:
            raise sass.PatchRefused(rec.refuse)
        return sass.PatchResult(b"\x7fELF-patched", kernel, rec.changed)

    monkeypatch.setattr(cli, "_load_cubin", lambda path: fake)
    monkeypatch.setattr(sass, "patch", fake_patch)
    return rec


@pytest.mark.parametrize("option, value, field, expected", [
    ("--stall", "0", "stall", 0), ("--stall", "15", "stall", 15),
    ("--wait-mask", "0", "wait_mask", 0), ("--wait-mask", "0x3f", "wait_mask", 0x3F),
    ("--read-barrier", "0", "read_barrier", 0), ("--read-barrier", "5", "read_barrier", 5),
    ("--read-barrier", "none", "read_barrier", None), ("--read-barrier", "NONE", "read_barrier", None),
    ("--write-barrier", "0", "write_barrier", 0), ("--write-barrier", "5", "write_barrier", 5),
    ("--write-barrier", "none", "write_barrier", None), ("--write-barrier", " None ", "write_barrier", None),
    ("--yield", "ON", "yield_flag", True), ("--yield", "Off", "yield_flag", False),
])
def test_bounded_options_accept_both_ends_and_none_alone(recorded, option, value, field, expected):
    """Each range is inclusive; 'none' for a barrier is a value to set (it alone is a patch); --yield
    takes on/off in any case."""
    assert recorded("--at", "0x10", option, value) == 0
    assert recorded.edits == [sass.Edit(0x10, **{field: expected})]


@pytest.mark.parametrize("option, value, says", [
    ("--stall", "-1", "takes an integer 0..15, not '-1'"),
    ("--stall", "16", "takes an integer 0..15, not '16'"),
    ("--wait-mask", "-1", "takes an integer 0..63, not '-1'"),
    ("--wait-mask", "0x40", "takes an integer 0..63, not '0x40'"),
    ("--read-barrier", "-1", "takes an integer 0..5 or 'none', not '-1'"),
    ("--read-barrier", "6", "takes an integer 0..5 or 'none', not '6'"),
    ("--write-barrier", "-1", "takes an integer 0..5 or 'none', not '-1'"),
    ("--write-barrier", "6", "takes an integer 0..5 or 'none', not '6'"),
    ("--write-barrier", "nothing", "takes an integer 0..5 or 'none', not 'nothing'"),
])
def test_bounded_options_refuse_one_past_each_end(recorded, capsys, option, value, says):
    assert recorded("--at", "0x10", option, value) == 2 and recorded.edits is None
    assert capsys.readouterr() == ("", f"gpuprops patch: argument {option}: {says} (see 'gpuprops patch --help')\n")
    assert not recorded.out.exists()


@pytest.mark.parametrize("regs, expected", [
    ("R254,R0,RZ", (None, 254, 0, sass.RZ)),
    ("R1,R254,R2,R3", (1, 254, 2, 3)),
])
def test_r254_is_the_highest_register_accepted(recorded, regs, expected):
    assert recorded("--at", "0x10", "--regs", regs, "--scratch", "R254,R7") == 0
    assert recorded.edits == [sass.Edit(0x10, regs=expected)] and recorded.scratch == {254, 7}


@pytest.mark.parametrize("option, value", [("--regs", "R255,R1,R2"), ("--scratch", "R255")])
def test_r255_is_refused(recorded, capsys, option, value):
    assert recorded("--at", "0x10", "--stall", "1", option, value) == 2 and recorded.edits is None
    assert capsys.readouterr().err == (f"gpuprops patch: argument {option}: takes registers like R8 or RZ (R0..R254), "
                                       "not 'R255' (see 'gpuprops patch --help')\n")


@pytest.mark.parametrize("letters, mask", [("A", 0b001), ("B", 0b010), ("C", 0b100), ("AC", 0b101), ("bc", 0b110),
                                           ("A-B-C", 0b111), ("CBA", 0b111)])
def test_reuse_letters_set_their_slots_and_clear_yield(recorded, letters, mask):
    assert recorded("--at", "0x10", "--reuse", letters) == 0
    assert recorded.edits == [sass.Edit(0x10, reuse=mask, yield_flag=False)]


@pytest.mark.parametrize("letters", ["X", "D", "AX"])
def test_reuse_refuses_a_letter_that_is_not_a_slot(recorded, capsys, letters):
    assert recorded("--at", "0x10", "--reuse", letters) == 2 and recorded.edits is None
    assert capsys.readouterr().err == (f"gpuprops patch: argument --reuse: takes slots A, B, C (e.g. AB; '' clears "
                                       f"them), not '{letters}' (see 'gpuprops patch --help')\n")


@pytest.mark.parametrize("at, offset", [("/*0480*/", 0x480), ("/* 0480 */", 0x480), ("/*1480*/", 0x1480),
                                        ("1480", 0x1480), ("0X1480", 0x1480)])
def test_offsets_in_nvdisasm_comments_are_read_whole(recorded, at, offset):
    assert recorded("--at", at, "--stall", "1") == 0
    assert recorded.edits == [sass.Edit(offset, stall=1)]


@pytest.mark.parametrize("at", ["/*0480", "0480*/", "/**/"])
def test_half_a_comment_is_not_an_offset(recorded, capsys, at):
    assert recorded("--at", at, "--stall", "1") == 2 and recorded.edits is None
    assert capsys.readouterr().err == ("gpuprops patch: argument --at: takes instruction offsets in hex, as 'gpuprops "
                                       f"sass' prints them (/*0480*/ -> 0480 or 0x480), not '{at}' "
                                       "(see 'gpuprops patch --help')\n")


@pytest.mark.parametrize("args, missing", [
    (["in.cubin", "--stall", "1", "-o", "out.cubin"], "--at"),
    (["in.cubin", "--at", "0x10", "--stall", "1"], "-o/--output"),
    (["in.cubin", "--stall", "1"], "--at, -o/--output"),
])
def test_patch_requires_at_and_output(recorded, capsys, args, missing):
    assert main(["patch", *args]) == 2 and recorded.edits is None
    assert capsys.readouterr().err == (f"gpuprops patch: the following arguments are required: {missing} "
                                       "(see 'gpuprops patch --help')\n")


def test_patch_prints_changed_and_lists_offsets_already_as_asked(recorded, capsys):
    assert recorded("--at", "0x10", "0x20", "0x30", "--stall", "1",
                    changed=[(I10, I10_AFTER), (I20, I20), (I30, I30)]) == 0
    assert capsys.readouterr() == (f"- {I10.line()}\n+ {I10_AFTER.line()}\n"
                                   "unchanged (already as asked): 0020, 0030\n"
                                   f"wrote {recorded.out} (verified by disassembly)\n", "")
    assert recorded.out.read_bytes() == b"\x7fELF-patched"


def test_patch_that_changes_nothing_names_every_offset(recorded, capsys):
    assert recorded("--at", "0x20", "0x30", "--stall", "1", changed=[(I20, I20), (I30, I30)]) == 2
    assert capsys.readouterr() == ("", f"gpuprops patch: nothing to change: k at 0020, 0030 already reads as asked; "
                                       f"{recorded.out} was not written\n")
    assert not recorded.out.exists()


def _tmp_cubin(name="tmpk3_x9.cubin"):
    return f"{tempfile.gettempdir().rstrip('/')}/{name}"


def test_patch_refusal_names_the_users_file_not_the_temporary_copy(recorded, capsys):
    assert recorded("--at", "0x10", "--stall", "1", refuse=f"nvdisasm failed on {_tmp_cubin()}: bad opcode") == 2
    assert capsys.readouterr().err == ("gpuprops patch: refused: nvdisasm failed on in.cubin (patched): bad opcode; "
                                       "nothing was written\n")
    assert not recorded.out.exists()


@pytest.mark.parametrize("n, shown", [
    (3, "line 1 in.cubin (patched)\nline 2\nline 3"),
    (4, "line 1 in.cubin (patched)\nline 2\nline 3\n... and 1 more lines like these"),
    (6, "line 1 in.cubin (patched)\nline 2\nline 3\n... and 3 more lines like these"),
])
def test_nvdisasm_messages_are_cut_after_three_lines(recorded, capsys, n, shown):
    message = "\n".join([f"line 1 {_tmp_cubin()}"] + [f"line {i}" for i in range(2, n + 1)])
    assert recorded("--at", "0x10", "--stall", "1", refuse=message) == 2
    assert capsys.readouterr().err == f"gpuprops patch: refused: {shown}; nothing was written\n"


@pytest.mark.parametrize("tmpdir", ["/", "{tmp_path}/scratchX"])
def test_temporary_copies_are_recognised_in_any_temp_folder(recorded, capsys, monkeypatch, tmp_path, tmpdir):
    """$TMPDIR may be / (temporary files /tmpXXXX.cubin) or a folder whose name ends in any letter."""
    tmpdir = tmpdir.format(tmp_path=tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", tmpdir)
    path = os.path.join(tmpdir, "tmpab_12.cubin")
    assert recorded("--at", "0x10", "--stall", "1", refuse=f"nvdisasm failed on {path}") == 2
    assert capsys.readouterr().err == "gpuprops patch: refused: nvdisasm failed on in.cubin (patched); nothing was written\n"


def test_nvdisasm_error_before_patching_names_the_users_file(recorded, capsys):
    """The cubin's SASS is read before the patch: nvdisasm's failure there names in.cubin."""
    recorded.cubin.error = sass.SassError(f"nvdisasm 13.9 failed on {_tmp_cubin()}: nvdisasm fatal : bad input")
    assert recorded("--at", "0x10", "--stall", "1") == 2 and recorded.edits is None
    assert capsys.readouterr().err == "gpuprops patch: nvdisasm 13.9 failed on in.cubin: nvdisasm fatal : bad input\n"


# ----------------------------------------------------------------------------------------------
# compile


def test_define_takes_lowercase_and_underscore_names():
    a = cli.build_parser().parse_args(["compile", "k.cu", "--arch", "sm_90", "-D", "ilp=2", "-D", "_x", "-D", "Zz9=a"])
    assert dict(a.define) == {"ilp": "2", "_x": "1", "Zz9": "a"}


def test_compile_backend_nvrtc_is_accepted_and_named(capsys, work, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "fresh-cache"))
    compiler = gp_compile.compiler_version()
    assert compiler.startswith("nvrtc ")
    status, out, err = run(capsys, "compile", "two.cu", "--arch", "sm_90", "--backend", "nvrtc", "-o", "r.cubin")
    size = (work / "r.cubin").stat().st_size
    assert (status, out, err) == (0, f"r.cubin: {size} bytes, sm_90, {compiler}, compiled\n", "")


def test_compile_backend_nvcc_runs_nvcc(capsys, work, tmp_path, monkeypatch):
    """A stand-in nvcc on PATH (as in test_compile.py) that writes a fixed 64-byte ELF."""
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
if args == ["--version"]:
    print("Cuda compilation tools, release 12.9, V12.9.1")
    sys.exit(0)
with open(args[args.index("-o") + 1], "wb") as f:
    f.write(b"\\x7fELF" + bytes(60))
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path / "nvcc-cache"))
    assert run(capsys, "compile", "two.cu", "--arch", "sm_90", "--backend", "nvcc", "-o", "n.cubin") == (
        0, "n.cubin: 64 bytes, sm_90, nvcc 12.9, compiled\n", "")
    assert (work / "n.cubin").read_bytes() == b"\x7fELF" + bytes(60)


def test_compile_refuses_an_unknown_backend(capsys, work):
    # argparse quotes the choices up to Python 3.12.7 and not after: both spellings, nothing else
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "--backend", "clang", "-o", "c.cubin") in (
        "gpuprops compile: argument --backend: invalid choice: 'clang' (choose from 'nvrtc', 'nvcc') "
        "(see 'gpuprops compile --help')",
        "gpuprops compile: argument --backend: invalid choice: 'clang' (choose from nvrtc, nvcc) "
        "(see 'gpuprops compile --help')")
    assert not (work / "c.cubin").exists()


# ----------------------------------------------------------------------------------------------
# the output file


def test_output_that_is_a_hard_link_to_the_source_is_the_source(capsys, work):
    os.link(work / "two.cu", work / "link.cu")
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "link.cu") == (
        "gpuprops compile: -o link.cu is the input two.cu; writing there would destroy it. Choose another output "
        "name (e.g. -o two.out.cubin)")
    assert (work / "link.cu").read_text() == TWO_KERNELS


def test_output_that_is_a_folder(capsys, work):
    (work / "outdir").mkdir()
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "outdir") == (
        "gpuprops compile: -o outdir is a folder; give a file name (e.g. -o outdir/out.cubin)")


def test_output_that_exists_and_is_not_a_cubin(capsys, work):
    (work / "notes.txt").write_text("keep me")
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "notes.txt") == (
        "gpuprops compile: -o notes.txt exists and is not a cubin; refusing to overwrite it. Choose another output "
        "name, or remove the file first")
    assert (work / "notes.txt").read_text() == "keep me"


def test_output_that_exists_and_cannot_be_read(capsys, work):
    """A Unix socket exists but cannot be opened (ENXIO), whoever runs the test."""
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("out.sock")
        assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "out.sock") == (
            "gpuprops compile: -o out.sock exists and cannot be read (No such device or address); choose another "
            "output name")


def test_output_in_a_folder_that_is_not_writable(capsys, work, monkeypatch):
    """os.access answers for ro/ as it does for a user without write permission on it (root may write
    anywhere, so the answer is planted)."""
    (work / "ro").mkdir()
    real_access = os.access

    def access(path, mode, *a, **k):
        if Path(path) == Path("ro"):
            return not mode & os.W_OK
        return real_access(path, mode, *a, **k)
    monkeypatch.setattr(os, "access", access)
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "ro/x.cubin") == (
        "gpuprops compile: -o ro/x.cubin: folder ro is not writable; choose an output in a folder you can write")
    assert list((work / "ro").iterdir()) == []


def test_output_whose_temporary_file_cannot_be_made_is_not_written(capsys, work):
    """The output is written through a temporary file beside it (sub/.x.cubin.tmp<pid>); a folder of
    that name planted there makes the write fail: the message says why and nothing is left behind."""
    (work / "sub").mkdir()
    planted = work / "sub" / f".x.cubin.tmp{os.getpid()}"
    planted.mkdir()
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "sub/x.cubin") == (
        "gpuprops compile: cannot write sub/x.cubin: File exists; nothing was written")
    assert sorted(p.name for p in (work / "sub").iterdir()) == [planted.name]
    assert sorted(p.name for p in work.iterdir()) == ["sub", "two.cu", "two.cubin"]


# ----------------------------------------------------------------------------------------------
# input cubins


def test_missing_cubin(capsys, work):
    assert refusal(capsys, "sass", "nope.cubin") == (
        f"gpuprops sass: cubin nope.cubin does not exist; give a .cubin file ({MAKE_CUBIN})")


def test_cubin_that_cannot_be_read(capsys, work):
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("in.sock")
        assert refusal(capsys, "sass", "in.sock") == "gpuprops sass: cannot read cubin in.sock: No such device or address"


def test_truncated_cubin(capsys, work, cubins):
    (work / "cut.cubin").write_bytes(cubins["two90"][:100])
    shoff = struct.unpack_from("<Q", cubins["two90"], 40)[0]  # e_shoff: where the section headers start
    assert refusal(capsys, "sass", "cut.cubin") == (
        f"gpuprops sass: cut.cubin is not a complete cubin (100 bytes; its ELF cannot be read: Reading section 0 at "
        f"offset {shoff} past EOF 100); it may be truncated or damaged: compile it again")


def test_sm_75_is_the_oldest_cubin_read(capsys, work, cubins):
    (work / "t75.cubin").write_bytes(cubins["two75"])
    status, out, err = run(capsys, "sass", "t75.cubin", "--kernel", "alpha")
    assert (status, err) == (0, "")
    regs = sass.Cubin(cubins["two75"], "sm_75").kernel("alpha").register_count
    assert out.splitlines()[0] == _header("alpha", regs, "sm_75")
    assert any("MOV R5, 0x1111 ;" in x or "/* 0x00001111" in x for x in out.splitlines()[1:])


@pytest.mark.parametrize("flags, arch", [
    ("sm74", "sm_74"),     # one below the oldest, SM in bits 8..15
    ("sm70", "sm_70"),
    ("sm30", "sm_30"),     # the oldest SM number the flags are read as
    (0x46, "sm_70"),       # older ABI: SM in bits 0..7
])
def test_older_cubins_are_refused_naming_their_arch(capsys, work, cubins, flags, arch):
    data = sm_in_flags(cubins["two75"], int(flags[2:])) if isinstance(flags, str) else with_flags(cubins["two75"], flags)
    (work / "old.cubin").write_bytes(data)
    for cmd in (["sass", "old.cubin"], ["patch", "old.cubin", "--at", "0", "--stall", "1", "-o", "p.cubin"]):
        assert refusal(capsys, *cmd) == (
            f"gpuprops {cmd[0]}: old.cubin is an {arch} cubin; nvdisasm 13 reads sm_75 and newer only, so its SASS "
            "cannot be printed or patched. Compile it for sm_75 or newer")
    assert not (work / "p.cubin").exists()


@pytest.mark.parametrize("sm, arch", [(29, None), (30, "sm_30"), (250, "sm_250"), (251, None)])
def test_cubin_arch_reads_sm_30_to_250_from_the_flags(cubins, sm, arch):
    # bits 0..7 of an NVRTC cubin's flags (0x04) are no SM number: only bits 8..15 can name one here
    assert cubin_arch(sm_in_flags(cubins["two90"], sm)) == arch


def test_cubin_arch_without_the_toolkit_note_is_the_flags_arch(cubins):
    data = cubins["two90"]
    assert data.count(b".note.nv.tkinfo") == 2  # the section's name, in .shstrtab and .strtab
    assert cubin_arch(data.replace(b".note.nv.tkinfo", b".note.nv.tkinfX")) == "sm_90"


def test_cubin_arch_with_a_note_that_names_no_arch_is_the_flags_arch(cubins):
    data = cubins["two90"]
    assert data.count(b"-arch sm_90") == 1
    assert cubin_arch(data.replace(b"-arch sm_90", b"-ARCH sm_90")) == "sm_90"


def test_cubin_arch_takes_the_suffix_only_from_a_note_of_the_same_sm(cubins):
    data = cubins["two90"].replace(b"-arch sm_90 ", b"-arch sm_90a")
    assert cubin_arch(data) == "sm_90a"
    assert cubin_arch(sm_in_flags(data, 89)) == "sm_89"


def test_cubin_with_no_kernel(capsys, work, cubins):
    (work / "none.cubin").write_bytes(cubins["none90"])
    assert refusal(capsys, "sass", "none.cubin") == "gpuprops sass: none.cubin holds no kernels (no .text.<name> section)"


def test_unknown_kernel_is_refused_naming_the_cubin_file(capsys, work):
    assert refusal(capsys, "sass", "two.cubin", "--kernel", "gamma") == (
        "gpuprops sass: two.cubin has no kernel 'gamma'; it has ['alpha', 'beta']")


# ----------------------------------------------------------------------------------------------
# two kernels in one cubin: each command works on the kernel it was asked for


def _sections(out: str) -> dict:
    """``gpuprops sass`` output -> {kernel: [its header, its instruction lines]}."""
    sections: dict = {}
    for line in out.splitlines():
        if line.startswith("// "):
            current = line[3:].split(":")[0]
            sections[current] = [line]
        else:
            sections[current].append(line)
    return sections


def _header(name, regs, arch="sm_90"):
    return (f"// {name}: {regs} registers ({arch}); control code "
            "[B<wait mask>:R<read sb>:W<write sb>:<Y = yield>:S<stall>]; offsets in hex")


def test_sass_prints_every_kernel_in_name_order(capsys, work, cubins):
    status, out, err = run(capsys, "sass", "two.cubin")
    assert (status, err) == (0, "")
    got = _sections(out)
    assert list(got) == ["alpha", "beta"]
    c = sass.Cubin(cubins["two90"], "sm_90")
    for name, mine, other in (("alpha", "00001111", "00002222"), ("beta", "00002222", "00001111")):
        assert got[name][0] == _header(name, c.kernel(name).register_count)
        assert got[name][1:] == [i.line() for i in c.instructions(name)]
        assert any(f"/* 0x{mine}" in x for x in got[name]) and not any(f"/* 0x{other}" in x for x in got[name])


def test_sass_kernel_prints_that_kernel_only(capsys, work):
    status, out, err = run(capsys, "sass", "two.cubin", "--kernel", "beta")
    assert (status, err) == (0, "")
    got = _sections(out)
    assert list(got) == ["beta"] and any("/* 0x00002222" in x for x in got["beta"])


def test_patch_edits_the_kernel_asked_for_and_leaves_the_other(capsys, work, cubins):
    before = sass.Cubin(cubins["two90"], "sm_90")
    first = before.instructions("beta")[0]
    assert first.offset == 0 and first.control.stall != 7
    status, out, err = run(capsys, "patch", "two.cubin", "--kernel", "beta", "--at", "0000", "--stall", "7",
                           "-o", "p.cubin")
    assert (status, err) == (0, "")
    minus, plus, wrote = out.splitlines()
    assert minus == f"- {first.line()}" and wrote == "wrote p.cubin (verified by disassembly)"
    assert plus.startswith("+ [") and "S07]  /*0000*/  " + first.text + " ;" in plus
    after = sass.Cubin((work / "p.cubin").read_bytes(), "sm_90")
    word = after.text("beta")[:16]
    assert sass.ControlCode.decode(sass.split_words(word)[1]).stall == 7
    assert after.text("alpha") == before.text("alpha") and after.text("beta")[16:] == before.text("beta")[16:]


# ----------------------------------------------------------------------------------------------
# facts


SM80 = """arch = "sm_80"
[lds]
value = 30
tolerance_abs = 0.5
unit = "cycles"
method = "chase"
source = "2024"
"""

LONG_METHOD = "pointer chase over a 64 KiB ring of shared memory, one thread, clock64 around 256 loads"
LONG_SOURCE = "measured by hand on an RTX 3060 with the driver of that day; copied from the notes of 2021"
SM90 = f"""arch = "sm_90"
[lds]
value = 23
tolerance_abs = 0.25
unit = "cycles"
method = "{LONG_METHOD}"
source = "{LONG_SOURCE}"
"""


@pytest.fixture
def facts_dir(tmp_path):
    d = tmp_path / "facts"
    d.mkdir()
    (d / "sm_80.toml").write_text(SM80)
    (d / "sm_90.toml").write_text(SM90)
    return d


def test_facts_table_cuts_method_at_60_and_source_at_70_characters(capsys, facts_dir):
    assert LONG_METHOD[:60] == "pointer chase over a 64 KiB ring of shared memory, one threa"
    assert LONG_SOURCE[:70] == "measured by hand on an RTX 3060 with the driver of that day; copied fr"
    status, out, err = run(capsys, "facts", "--facts", facts_dir)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"# sm_80: {facts_dir / 'sm_80.toml'}",
        "fact    expected         kind      method    source",
        "------  ---------------  --------  --------  --------",
        "lds     30 ± 0.5 cycles  measured  chase     2024",
        "",
        f"# sm_90: {facts_dir / 'sm_90.toml'}",
        "fact    expected          kind      method                                                        source",
        "------  ----------------  --------  ------------------------------------------------------------  "
        "----------------------------------------------------------------------",
        "lds     23 ± 0.25 cycles  measured  pointer chase over a 64 KiB ring of shared memory, one threa  "
        "measured by hand on an RTX 3060 with the driver of that day; copied fr",
        "",
    ]


def test_facts_for_an_arch_the_folder_lacks_lists_what_it_has(capsys, facts_dir):
    assert refusal(capsys, "facts", "--arch", "sm_86", "--facts", facts_dir) == (
        f"gpuprops facts: {facts_dir} has no facts for sm_86 (it has sm_80, sm_90)")


# ----------------------------------------------------------------------------------------------
# merge


def _verdict(fact, status, measured, gpu, nodeid="hwtests/test_smem.py::test_lds_latency[50]"):
    return {"fact": fact, "arch": "sm_90", "status": status, "expected": "23 ± 0.25 cycles", "measured": measured,
            "measured_text": "-" if measured is None else f"{measured} cycles", "unit": "cycles", "method": "m",
            "source": "s", "kind": "measured" if gpu else "static", "nodeid": nodeid, "gpu": gpu,
            "tolerance": 0.25 if gpu else None}


def _report(path, facts, meta):
    """A report as the plugin writes it at the end of a run that finished: its meta says so (a report
    without a complete ``run`` entry is INCOMPLETE to merge)."""
    meta = dict(meta, run=results.run_status(0, len(facts), len(facts)))
    path.write_text(json.dumps({"schema": "gpuprops-results/1", "meta": meta, "facts": facts}))
    return path.name


STATIC_PASS = _verdict("hmma_issue", "PASS", None, None, "hwtests/test_static.py::test_hmma")
STATIC_FAIL = _verdict("hmma_issue", "FAIL", None, None, "hwtests/test_static.py::test_hmma")


def test_merge_names_each_gpu_by_its_host_the_reports_host_or_the_file(capsys, tmp_path, monkeypatch):
    """A GPU's own host stays; a GPU without one gets its report's meta host, or the report's file name."""
    monkeypatch.chdir(tmp_path)
    a = _report(tmp_path / "a.json", [_verdict("lds", "PASS", 23.0, {"index": 0, "name": "H100"}),
                                      _verdict("lds", "PASS", 23.1, {"index": 1, "name": "H100", "host": "n9"}),
                                      STATIC_PASS], {"host": "nodeA"})
    b = _report(tmp_path / "b.json", [_verdict("lds", "PASS", 23.05, {"index": 0, "name": "H200"})], {})
    status, out, err = run(capsys, "merge", a, b)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "fact    test                  nodeA:gpu0 H100    n9:gpu1 H100    b.json:gpu0 H200",
        "------  --------------------  -----------------  --------------  ------------------",
        "lds     test_lds_latency[50]  23.000 PASS        23.100 PASS     23.050 PASS",
        "gpuprops: 4 PASS",
        "gpuprops outlier check: 3 GPUs, 1 facts compared, 0 outlier(s)",
    ]


def test_merge_exits_1_for_a_failing_fact_without_outliers(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = _report(tmp_path / "a.json", [_verdict("lds", "PASS", 23.0, {"index": 0, "name": "H100"}),
                                      _verdict("lds", "PASS", 23.0, {"index": 1, "name": "H100"}), STATIC_FAIL],
                {"host": "nodeA"})
    status, out, err = run(capsys, "merge", a)
    assert (status, err) == (1, "")
    assert out.splitlines()[-2:] == ["gpuprops: 1 FAIL, 2 PASS",
                                     "gpuprops outlier check: 2 GPUs, 1 facts compared, 0 outlier(s)"]


def test_merge_of_reports_without_gpu_measurements_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = _report(tmp_path / "a.json", [STATIC_PASS], {"host": "nodeA"})
    b = _report(tmp_path / "b.json", [STATIC_FAIL], {})
    assert refusal(capsys, "merge", a, b) == (
        "gpuprops merge: no GPU measurements in a.json, b.json: merge needs reports of GPU runs "
        "(pytest hwtests --gpuprops-report PATH on each node)")


# ----------------------------------------------------------------------------------------------
# a reader that stops reading (gpuprops facts | head)


class _ClosedPipe:
    """sys.stdout whose reader is gone: every write is a BrokenPipeError; ``fileno`` gives ``fd`` or
    raises the given error."""

    def __init__(self, fd=None, error=None):
        self.fd, self.error = fd, error

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass

    def fileno(self):
        if self.error:
            raise self.error
        return self.fd


def test_closed_pipe_ends_quietly_and_points_stdout_at_devnull(tmp_path, monkeypatch, facts_dir):
    sink = tmp_path / "stdout"
    fd = os.open(sink, os.O_WRONLY | os.O_CREAT)
    try:
        monkeypatch.setattr(sys, "stdout", _ClosedPipe(fd))
        assert main(["facts", "--facts", str(facts_dir)]) == 0
        os.write(fd, b"the interpreter's last flush")  # lands in /dev/null now
    finally:
        os.close(fd)
    assert sink.read_bytes() == b""


@pytest.mark.parametrize("error", [ValueError("I/O operation on closed file"), OSError(9, "Bad file descriptor"),
                                   io.UnsupportedOperation("fileno")])
def test_closed_pipe_without_a_usable_descriptor_still_ends_quietly(monkeypatch, facts_dir, error):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe(error=error))
    assert main(["facts", "--facts", str(facts_dir)]) == 0


def test_a_patch_nvdisasm_cannot_read_back_is_refused_naming_the_users_file(capsys, work):
    """nvdisasm 13 does not accept stall 13 on the LDC that starts beta on sm_90: the edit cannot be
    verified, so it is refused with the user's file name and nothing is written (it used to escape
    as an nvdisasm error naming a temporary file)."""
    status, out, err = run(capsys, "patch", "two.cubin", "--kernel", "beta", "--at", "0000", "--stall", "13",
                           "-o", "p.cubin")
    if status == 0:
        pytest.skip("this nvdisasm reads stall 13 on that LDC; nothing to refuse")
    assert status == 2 and out == ""
    assert err.startswith("gpuprops patch: refused: the patched code of beta cannot be read back, so the edit "
                          "cannot be verified (")
    assert err.rstrip().endswith("; nothing was written") and "/tmp" not in err and "two.cubin (patched)" in err
    assert not (work / "p.cubin").exists()
