"""The ``gpuprops`` command (cli.py: parsing and dispatch) and its user contract, each expected value
written out by hand. Each command's own tests are beside its module (test_cli_sass.py,
test_cli_facts.py, test_cli_runs.py, test_cli_files.py); the helpers and fixtures they share are here.

Oracles here:

* the help of ``gpuprops`` and of each command: a golden text file, ``tests/golden/cli_help.txt``
  (the help is the CLI's documentation; how to regenerate it is in the test's docstring);
* refusals: the whole message line on stderr (exit status 2), compared for equality;
* boundaries: the last accepted and the first refused value of every bounded option (the patcher
  replaced by a recorder, so each option is read as the edit it becomes);
* outputs: ``--version`` compared line by line; the README's commands run as written; a reader that
  stops reading (``gpuprops facts | head``) ends the command quietly.

Where a test replaces a part (the patcher, nvdisasm's version, stdout), it says what it plants; the
CLI's own code always runs."""

import io
import os
import struct
import sys
from pathlib import Path

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import __version__, cli, cli_sass, sass
from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops.cli import main

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

    monkeypatch.setattr(cli_sass, "_load_cubin", lambda path: fake)
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


# ----------------------------------------------------------------------------------------------
# compile's -D, parsed


def test_define_takes_lowercase_and_underscore_names():
    a = cli.build_parser().parse_args(["compile", "k.cu", "--arch", "sm_90", "-D", "ilp=2", "-D", "_x", "-D", "Zz9=a"])
    assert dict(a.define) == {"ilp": "2", "_x": "1", "Zz9": "a"}


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
