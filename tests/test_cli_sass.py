"""``gpuprops compile``, ``sass`` and ``patch`` (cli_sass.py), each expected value written out by hand:
each patch option as the edit the patcher is given (the patcher replaced by a recorder), what patch
prints, the output named after source and arch, the compile backends, the oldest cubin read (sm_75;
older ones made by editing an sm_75 cubin's ELF flags) and the arch range ``cubin_arch`` reads, and a
two-kernel cubin whose kernels are told apart by a constant written in each (0x1111, 0x2222)."""

import os
import socket
import struct
import sys
import tempfile

import pytest
import test_cli
from gp_testing import KERNELS
from test_cli import (
    I10,
    I10_AFTER,
    I20,
    I30,
    MAKE_CUBIN,
    _Kernel,
    refusal,
    run,
    sm_in_flags,
    with_flags,
)

from pytest_gpuprops import cli, cli_sass, sass
from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops.cli_sass import cubin_arch

#: the fixtures shared with test_cli.py (the working folder and its cubins, the recorded patcher)
cubins, work, recorded = test_cli.cubins, test_cli.work, test_cli.recorded

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

    monkeypatch.setattr(cli_sass, "_load_cubin", lambda path: _EmptyCubin())
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


# ----------------------------------------------------------------------------------------------
# what patch prints, and the user's file named in nvdisasm's messages


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
