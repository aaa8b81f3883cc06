"""The gpuprops command: what each option turns into (the patcher replaced by a recorder, so no
nvdisasm runs), and the printed output of compile, sass and facts."""

import pytest
from gp_testing import KERNELS

from pytest_gpuprops import cli, sass


class _Kernel:
    name = "k"


class _FakeCubin:
    def kernel(self, name=None):
        return _Kernel()

    def instructions(self, kernel=None):
        return []


#: What the stand-in patcher reports: one instruction whose words changed.
BEFORE = sass.Instruction(0x10, "FFMA R1, R2, R3, R4", 0x1, 0x2)
AFTER = sass.Instruction(0x10, "FFMA R1, R8, R10, R12", 0x3, 0x4)


@pytest.fixture
def recorded(monkeypatch):
    """Run ``gpuprops patch`` with the cubin loader and the patcher replaced (no file is read, no
    nvdisasm runs): returns (exit code, edits, scratch); edits is None where the patcher was not called."""
    seen = {}

    def fake_patch(cubin, kernel, edits, *, scratch=None):
        seen.update(kernel=kernel, edits=edits, scratch=scratch)
        if seen.get("refuse"):
            raise sass.PatchRefused("planted refusal")
        return sass.PatchResult(b"\x7fELF-patched", kernel, [(BEFORE, AFTER)])

    monkeypatch.setattr(cli, "_load_cubin", lambda path: _FakeCubin())
    monkeypatch.setattr(sass, "patch", fake_patch)

    def run(tmp_path, *args, refuse=False):
        seen.clear()
        seen["refuse"] = refuse
        rc = cli.main(["patch", "in.cubin", "-o", str(tmp_path / "out.cubin"), *args])
        return rc, seen.get("edits"), seen.get("scratch")
    return run


def test_patch_options_become_edits(recorded, tmp_path, capsys):
    # offsets are hex, as nvdisasm prints them: 0x480, 0490 and /*04a0*/ name three instructions
    rc, edits, scratch = recorded(tmp_path, "--at", "0x480", "0490", "/*04a0*/", "--regs", "R8,r10,RZ", "--reuse",
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
    rc, edits, _ = recorded(tmp_path, "--at", "1168", "--stall", "1")
    assert rc == 2 and edits is None
    assert capsys.readouterr().err == ("gpuprops patch: argument --at: 1168 (0x1168) is not an instruction offset; "
                                       "instructions are 16 bytes, so offsets end in 0 in hex (0480, 0490, ...) "
                                       "(see 'gpuprops patch --help')\n")


def test_patch_four_registers_and_explicit_yield(recorded, tmp_path, capsys):
    _, edits, scratch = recorded(tmp_path, "--at", "0x10", "--regs", "R1,R2,R3,R4", "--reuse", "C", "--yield", "on")
    assert edits == [sass.Edit(0x10, regs=(1, 2, 3, 4), reuse=0b100, yield_flag=True)] and scratch is None
    _, edits, _ = recorded(tmp_path, "--at", "0x10", "--yield", "off")
    assert edits == [sass.Edit(0x10, yield_flag=False)]
    _, edits, _ = recorded(tmp_path, "--at", "0x10", "--reuse", "")
    assert edits == [sass.Edit(0x10, reuse=0)]  # clearing reuse leaves yield as it is
    capsys.readouterr()
    # no field to change: refused before any cubin is read, nothing written
    rc, edits, _ = recorded(tmp_path, "--at", "0x20")
    assert rc == 2 and edits is None
    assert capsys.readouterr().err == ("gpuprops patch: nothing to change: give at least one of --regs, --reuse, "
                                       "--stall, --yield, --wait-mask, --read-barrier, --write-barrier\n")


@pytest.mark.parametrize("args, message", [
    (["--regs", "R1,R2"], "argument --regs: takes Ra,Rb,Rc or Rd,Ra,Rb,Rc (3 or 4 registers), not 'R1,R2'"),
    (["--regs", "R1,X2,R3"], "argument --regs: takes registers like R8 or RZ (R0..R254), not 'X2'"),
    (["--regs", "R1,Rx,R3"], "argument --regs: takes registers like R8 or RZ (R0..R254), not 'Rx'"),  # as typed
    (["--reuse", "AD"], "argument --reuse: takes slots A, B, C (e.g. AB; '' clears them), not 'AD'"),
])
def test_patch_option_errors(recorded, tmp_path, capsys, args, message):
    """A bad option value is a refusal: exit 2, one line on stderr naming the option, the patcher
    never called and nothing written."""
    rc, edits, _ = recorded(tmp_path, "--at", "0x10", *args)
    assert rc == 2 and edits is None and not (tmp_path / "out.cubin").exists()
    assert capsys.readouterr().err == f"gpuprops patch: {message} (see 'gpuprops patch --help')\n"


def test_a_refused_patch_exits_2_and_writes_nothing(recorded, tmp_path, capsys):
    rc, _, _ = recorded(tmp_path, "--at", "0x10", "--stall", "1", refuse=True)
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


def test_facts_error_is_one_line(tmp_path, capsys):
    assert cli.main(["facts", "--arch", "sm_90", "--facts", str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err == (f"gpuprops facts: facts path {tmp_path / 'none.toml'} does not exist; pass a "
                                       "facts .toml file or a folder of sm_XX.toml (gpuprops facts lists the packaged "
                                       "ones)\n")
