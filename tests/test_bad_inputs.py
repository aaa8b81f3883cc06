"""Issue 12: every bad input gets a clear message, exit status 2 (the CLI) or a usage error (pytest),
and loses nothing; new archs compile, skip with the reason, and record.

CLI cases go through ``main([...])`` in-process; plugin cases through pytester in-process. Each
checks the message, the status, and that no file was written or changed."""

import hashlib
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest
from gp_testing import KERNELS, child_processes_outside_mutmut, fake_gpu_conftest

from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops import facts as F
from pytest_gpuprops import measure, sass
from pytest_gpuprops.cli import _offset, cubin_arch, main

REPO = KERNELS.parent


def run(capsys, *args):
    """(exit status, stdout, stderr) of ``gpuprops ARGS``."""
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` with its content hash: what 'nothing was written' compares."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(capsys, folder, *args, says):
    """Run a command that must be refused: exit 2, one message naming ``says``, no file touched."""
    before = snapshot(folder)
    status, out, err = run(capsys, *args)
    assert status == 2, (out, err)
    assert re.search(says, err), err
    assert err.startswith("gpuprops") and "Traceback" not in err
    assert snapshot(folder) == before
    return err


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, cache_dir):
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(cache_dir))


@pytest.fixture
def work(tmp_path, monkeypatch, cache_dir):
    """A folder with a kernel source, its header and the regbank cubin the README's patch uses."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "victim.cu").write_bytes((KERNELS / "ffma.cu").read_bytes())
    (tmp_path / "gpuprops.cuh").write_bytes((KERNELS / "gpuprops.cuh").read_bytes())
    rb = gp_compile.compile_cuda(KERNELS / "regbank_ffma.cu", "sm_90", cache_dir=cache_dir)
    (tmp_path / "rb.cubin").write_bytes(rb.cubin)
    return tmp_path


# ----------------------------------------------------------------------------------------------
# loses data or silently does the wrong thing


def test_compile_never_overwrites_its_source_or_a_header(capsys, work):
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", "-o", "victim.cu", says="would destroy it")
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", "-o", "./victim.cu", says="would destroy it")
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", "-o", "gpuprops.cuh",
            says="exists and is not a cubin; refusing to overwrite it")
    # an existing cubin may be replaced: that is what -o is for
    assert run(capsys, "compile", "victim.cu", "--arch", "sm_90", "-o", "rb.cubin")[0] == 0


def _control_at(path, offset):
    """The control code of the instruction at ``offset``, read from the bytes (no nvdisasm)."""
    text = sass.Cubin(Path(path).read_bytes(), "sm_90").text("regbank_ffma")
    return sass.ControlCode.decode(sass.split_words(text[offset:offset + 16])[1])


@pytest.mark.parametrize("at", ["480", "0480", "0x480", "0X480", "/*0480*/", " 0480 "])
def test_offsets_are_read_as_hex_in_every_spelling_nvdisasm_suggests(at):
    assert _offset(at) == 0x480


def test_patch_at_480_edits_the_instruction_printed_as_0480(capsys, work):
    assert _control_at(work / "rb.cubin", 0x480).stall != 2
    status, out, err = run(capsys, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "480", "--stall", "2",
                           "-o", "s.cubin")
    assert status == 0, err
    assert "/*0480*/" in out and "S02" in out
    assert _control_at(work / "s.cubin", 0x480).stall == 2
    assert _control_at(work / "s.cubin", 0x1E0) == _control_at(work / "rb.cubin", 0x1E0)  # decimal 480: untouched


@pytest.mark.parametrize("at, says", [("48", "not an instruction offset; instructions are 16 bytes"),
                                      ("zz", "in hex"), ("0x", "in hex"), ("-16", "in hex")])
def test_patch_offset_that_is_not_an_instruction(capsys, work, at, says):
    refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", at, "--stall", "2",
            "-o", "s.cubin", says=says)


def test_patch_that_changes_nothing_writes_nothing(capsys, work):
    stall = _control_at(work / "rb.cubin", 0x480).stall
    refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", "--stall", stall,
            "-o", "s.cubin", says="nothing to change: .* already reads as asked; s.cubin was not written")
    refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", "-o", "s.cubin",
            says="nothing to change: give at least one of --regs")
    refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", "--stall", "3",
            "-o", "rb.cubin", says="is the input rb.cubin; writing there would destroy it")


# ----------------------------------------------------------------------------------------------
# tracebacks that are now messages


def test_truncated_cubin_folder_and_missing_file(capsys, work):
    (work / "trunc.cubin").write_bytes((work / "rb.cubin").read_bytes()[:2000])
    refused(capsys, work, "sass", "trunc.cubin", says="trunc.cubin is not a complete cubin .*truncated or damaged")
    refused(capsys, work, "sass", ".", says="is a folder; give a .cubin file")
    refused(capsys, work, "sass", "nope.cubin", says="nope.cubin does not exist")
    refused(capsys, work, "sass", "victim.cu", says="not an ELF")
    refused(capsys, work, "patch", "trunc.cubin", "--at", "0480", "--stall", "1", "-o", "s.cubin",
            says="not a complete cubin")


def test_compile_a_folder_and_into_a_missing_folder(capsys, work):
    (work / "kernels").mkdir()
    refused(capsys, work, "compile", "kernels", "--arch", "sm_90", says="source kernels is a folder; give one CUDA .cu")
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", "-o", "/nonexistent/x",
            says="folder /nonexistent does not exist; create it first")
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", "-o", ".", says="is a folder; give a file name")
    refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", "--stall", "2",
            "-o", "/nonexistent/x", says="folder /nonexistent does not exist")
    refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", "--stall", "2",
            "-o", "victim.cu/x", says="victim.cu is a file, not a folder")


@pytest.mark.parametrize("args, says", [
    (["--stall", "abc"], r"argument --stall: takes an integer 0\.\.15, not 'abc'"),
    (["--stall", "16"], r"argument --stall: takes an integer 0\.\.15"),
    (["--wait-mask", "0x40"], r"argument --wait-mask: takes an integer 0\.\.63"),
    (["--read-barrier", "6"], r"argument --read-barrier: takes an integer 0\.\.5 or 'none'"),
    (["--regs", "R8,R10"], r"argument --regs: takes Ra,Rb,Rc or Rd,Ra,Rb,Rc"),
    (["--regs", "R8,X,R12"], r"argument --regs: takes registers like R8"),
    (["--regs", "R8,R10,R12", "--scratch", "banana"], r"argument --scratch: takes registers like R8 .*'banana'"),
    (["--reuse", "AD"], r"argument --reuse: takes slots A, B, C"),
    (["--yield", "maybe"], r"argument --yield: invalid choice"),
])
def test_patch_argument_errors_name_the_option_and_exit_2(capsys, work, args, says):
    err = refused(capsys, work, "patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", *args,
                  "-o", "s.cubin", says=says)
    assert "--help" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, says", [
    (["compile", "victim.cu"], "the following arguments are required: --arch"),
    (["compile", "victim.cu", "--arch", "sm_90", "-D", "A B=1"], "argument -D/--define: takes NAME=VALUE"),
    (["compile", "victim.cu", "--arch", "banana"], "'banana' is not an arch name; expected sm_NN"),
    (["compile", "victim.cu", "--arch", "sm_70"], "older than sm_75: nvdisasm 13"),
    (["compile", "victim.cu", "--arch", "sm_86a"], "'a' variants exist from sm_90 on"),
    (["compile", "victim.cu", "--arch", "sm_101"], "cannot compile for sm_101; it compiles for sm_75"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "the following arguments are required"),
    (["facts", "--arch", "banana"], "'banana' is not an arch name"),
    (["facts", "--arch", "sm_100"], "no facts recorded for sm_100 .*--gpuprops-record sm_100.toml"),
    (["facts", "--facts", "nope.toml"], "facts path nope.toml does not exist"),
])
def test_every_argument_error_exits_2_like_every_refusal(capsys, work, args, says):
    refused(capsys, work, *args, says=says)


def test_sass_into_a_closed_pipe_ends_quietly(work, monkeypatch):
    child_processes_outside_mutmut(monkeypatch)
    env = dict(os.environ)  # PYTHONPATH: this package first (child_processes_outside_mutmut), then the rest
    p = subprocess.Popen([sys.executable, "-m", "pytest_gpuprops.cli", "sass", "rb.cubin"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=work)
    first = p.stdout.readline()
    p.stdout.close()  # what `| head -1` does
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0
    assert first.startswith(b"// regbank_ffma") and err == ""


def test_nvdisasm_errors_name_the_users_file(capsys, work):
    data = bytearray((work / "rb.cubin").read_bytes())
    k = sass.Cubin(bytes(data), "sm_90").kernel("regbank_ffma")
    data[k.text_offset:k.text_offset + k.text_size] = b"\xff" * k.text_size
    (work / "garbage.cubin").write_bytes(data)
    err = refused(capsys, work, "sass", "garbage.cubin", says="nvdisasm .* failed on garbage.cubin")
    assert "/tmp/tmp" not in err and len(err.splitlines()) <= 4


def test_arch_suffix_is_shown(capsys, work):
    assert run(capsys, "compile", "victim.cu", "--arch", "sm_90a", "-o", "a.cubin")[0] == 0
    status, out, _ = run(capsys, "sass", "a.cubin")
    assert status == 0 and "(sm_90a)" in out.splitlines()[0]
    assert cubin_arch((work / "rb.cubin").read_bytes()) == "sm_90"


def test_version(capsys):
    from pytest_gpuprops import __version__
    status, out, _ = run(capsys, "--version")
    assert status == 0 and out.startswith(f"gpuprops {__version__}") and "nvdisasm" in out


# ----------------------------------------------------------------------------------------------
# the cubin cache


@pytest.mark.parametrize("junk", ["null", "[1, 2]", '"text"', '{"sha256": 5}', "{not json"])
def test_cache_entry_that_is_not_a_json_object_is_recompiled(tmp_path, junk):
    a = gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=tmp_path)
    a.path.with_suffix(".json").write_text(junk)
    b = gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=tmp_path)
    assert not b.cached and b.cubin == a.cubin
    assert gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=tmp_path).cached  # healed


def test_cache_dir_that_is_a_file(capsys, work, monkeypatch):
    (work / "afile").write_text("x")
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(work / "afile"))
    with pytest.raises(gp_compile.CacheError, match="GPUPROPS_CACHE_DIR.* is a file"):
        gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_80")
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", says="cubin cache .*afile \\(GPUPROPS_CACHE_DIR\\) is a file")
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(work / "afile" / "below"))
    refused(capsys, work, "compile", "victim.cu", "--arch", "sm_90", says="cannot be created: .*afile is a file")


def test_cache_files_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        c = gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_86", cache_dir=tmp_path / "shared")
    finally:
        os.umask(old)
    for p in (c.path, c.path.with_suffix(".json")):
        assert p.stat().st_mode & 0o777 == 0o644


def test_unwritable_cache_costs_only_the_caching(tmp_path, monkeypatch):
    def no_write(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(gp_compile.tempfile, "mkstemp", no_write)
    monkeypatch.setattr(gp_compile, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        c = gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_89", cache_dir=tmp_path / "ro")
    assert c.cubin[:4] == b"\x7fELF" and not c.cached


# ----------------------------------------------------------------------------------------------
# facts files


GOOD = {"value": 23.0, "tolerance_abs": 0.25, "unit": "cycles", "method": "m", "source": "s"}


def _toml(fact: dict, arch="sm_90") -> str:
    lines = [f'arch = "{arch}"', "[lds_latency_cycles]"]
    for k, v in fact.items():
        lines.append(f"{k} = {v}" if not isinstance(v, str) or v in ("nan", "inf", "-inf", "true")
                     or v.startswith("{") else f'{k} = "{v}"')
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("change, says", [
    ({"tolerance_abs": None}, "has no tolerance: give tolerance_abs"),
    ({"tolerance_abs": -5}, r"tolerance_abs = -5: expected a finite number >= 0"),
    ({"tolerance_abs": "nan"}, r"tolerance_abs = nan: expected a finite number >= 0"),
    ({"tolerance_rel": -0.1}, r"tolerance_rel = -0.1"),
    ({"value": "nan"}, r"value = nan: expected a finite number"),
    ({"value": "inf"}, r"value = inf: expected a finite number"),
    ({"value": "true"}, r"value = True: expected a finite number"),
    ({"value": None}, r"lacks value"),
    ({"tolerence_abs": 0.5}, r"unknown key\(s\) tolerence_abs"),
    ({"kind": "guessed"}, r"kind = 'guessed': expected \"measured\""),
    ({"kind": "static", "value": None, "tolerance_abs": None}, r"lacks by_compiler"),
    ({"kind": "static", "value": None, "tolerance_abs": None, "by_compiler": '{ "nvrtc 13.5" = "x" }'},
     r"by_compiler\['nvrtc 13.5'\] = 'x'"),
    ({"unit": ""}, r"unit must be a non-empty string"),
])
def test_malformed_fact_is_refused_naming_file_fact_and_problem(tmp_path, change, says):
    fact = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    p = tmp_path / "sm_90.toml"
    p.write_text(_toml(fact))
    with pytest.raises(F.FactsError, match=says) as e:
        F.load_file(p)
    assert str(p) in str(e.value) and "[lds_latency_cycles]" in str(e.value)


def test_exact_fact_says_so_and_records_round_trip(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text(_toml({**GOOD, "tolerance_abs": 0}))
    assert F.load_file(p)["lds_latency_cycles"].tolerance == 0
    exact = F.Fact(name="register_bank_count", arch="sm_90", unit="banks", method="m", source="s", value=2.0)
    F.write_facts(tmp_path / "rec.toml", "sm_90", [exact])
    assert "tolerance_abs = 0.0" in (tmp_path / "rec.toml").read_text()
    assert F.load_file(tmp_path / "rec.toml")["register_bank_count"].accepts(2.0)


def test_bad_arch_and_folders(tmp_path):
    (tmp_path / "sm_90.toml").write_text(_toml(GOOD, arch="banana"))
    with pytest.raises(F.FactsError, match="'banana' is not an arch name"):
        F.load_file(tmp_path / "sm_90.toml")
    (tmp_path / "sm_90.toml").write_text(_toml(GOOD, arch="sm_86"))
    with pytest.raises(F.FactsError, match="arch = 'sm_86', but the file is named sm_90.toml"):
        F.check_facts_path(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(F.FactsError, match="holds no sm_XX.toml"):
        F.check_facts_path(tmp_path / "empty")
    with pytest.raises(F.FactsError, match="does not exist"):
        F.check_facts_path(tmp_path / "nope.toml")
    with pytest.raises(F.MissingFacts, match="is for sm_86, not sm_80") as e:
        F.load_facts("sm_80", tmp_path / "sm_90.toml")
    assert "this GPU" not in str(e.value)


# ----------------------------------------------------------------------------------------------
# the plugin: options and files checked at start-up


FAKE_GPU = fake_gpu_conftest("ARCH")

FACT_TEST = '''
import pytest
from pytest_gpuprops.measure import Measurement

@pytest.mark.gpu
def test_lds(gpuprops):
    m = Measurement.given("lds", [23.0, 23.0, 23.0])
    m.remeasure = lambda: Measurement.given("lds", [23.0, 23.0, 23.0])
    gpuprops.check("lds_latency_cycles", m, method="given")
'''


def usage_error(pytester, *args, says):
    """A pytest run refused at start-up: usage-error status, the message, no test run, nothing written."""
    before = snapshot(pytester.path)
    r = pytester.runpytest_inprocess(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    err = r.stderr.str()
    assert re.search(says, err), err
    assert "Traceback" not in err and " passed" not in r.stdout.str()
    assert {k: v for k, v in snapshot(pytester.path).items() if not k.startswith(".")} == \
           {k: v for k, v in before.items() if not k.startswith(".")}
    return err


@pytest.fixture(scope="module")
def plots():
    """matplotlib imported before pytester starts: pytester drops the modules imported after it
    starts, and matplotlib's C extensions cannot be imported twice in one process."""
    from pytest_gpuprops import report
    try:
        report._plt()
    except report.PlotsUnavailable:
        pytest.skip("needs matplotlib")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(measure, "gpu_unavailable_reason", lambda index=0: "no CUDA driver or GPU (test)")


@pytest.mark.parametrize("args, says", [
    (["--gpuprops-noise", "-1"], "argument --gpuprops-noise: takes the relative standard deviation .* not '-1'"),
    (["--gpuprops-noise", "0"], "argument --gpuprops-noise: .*between 0 and 1"),
    (["--gpuprops-noise", "nan"], "argument --gpuprops-noise"),
    (["--gpuprops-budget", "0"], "argument --gpuprops-budget: takes the seconds .* > 0"),
    (["--gpuprops-budget", "inf"], "argument --gpuprops-budget"),
    (["--gpu", "-3"], "argument --gpu: takes a CUDA device index 0, 1, ..."),
    (["--gpu", "one"], "argument --gpu: takes a CUDA device index"),
    (["--gpuprops-facts", "/nope.toml"], "--gpuprops-facts: facts path /nope.toml does not exist"),
    (["--gpuprops-kernels", "nope"], "--gpuprops-kernels nope is not a folder"),
    (["--gpuprops-report", "test_x.py/r.json"], "--gpuprops-report test_x.py/r.json: test_x.py is a file"),
    (["--gpuprops-report", "."], "--gpuprops-report . is a folder"),
    (["--gpuprops-plots", "test_x.py"], "--gpuprops-plots test_x.py is a file"),
    (["--gpuprops-plots", "test_x.py/p"], "--gpuprops-plots test_x.py/p: test_x.py is a file"),
    (["--gpuprops-cache", "test_x.py"], r"cubin cache test_x.py \(the cache folder asked for"),
])
def test_bad_option_is_one_usage_error_before_any_test(pytester, no_gpu, plots, args, says):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    usage_error(pytester, *args, says=says)


def test_environment_pointing_at_the_wrong_thing(pytester, no_gpu, monkeypatch):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(pytester.path / "test_x.py"))
    usage_error(pytester, says=r"cubin cache .*test_x.py \(GPUPROPS_CACHE_DIR\) is a file")
    monkeypatch.delenv("GPUPROPS_CACHE_DIR")
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", "/nonexistent")
    usage_error(pytester, says="GPUPROPS_LOCK_DIR=/nonexistent is not a folder")
    monkeypatch.delenv("GPUPROPS_LOCK_DIR")
    monkeypatch.setenv("GPUPROPS_NVDISASM", "/nonexistent/nvdisasm")
    usage_error(pytester, says="GPUPROPS_NVDISASM=/nonexistent/nvdisasm is not an executable")


def test_malformed_facts_file_is_one_usage_error(pytester, no_gpu):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    (pytester.path / "bad.toml").write_text('arch = "sm_90"\n[x]\nvalue = 1\n[y\n')
    usage_error(pytester, "--gpuprops-facts", "bad.toml", says=r"--gpuprops-facts: cannot read facts file bad.toml: .*line 4")
    (pytester.path / "bad.toml").write_text(_toml({**GOOD, "tolerance_abs": -5}))
    err = usage_error(pytester, "--gpuprops-facts", "bad.toml", says=r"\[lds_latency_cycles\] tolerance_abs = -5")
    assert len(err.strip().splitlines()) <= 3


def test_record_without_a_gpu_is_refused_and_writes_nothing(pytester, no_gpu):
    pytester.makepyfile(FACT_TEST)
    usage_error(pytester, "--gpuprops-record", "sm_90.toml",
                says="--gpuprops-record measures facts on a GPU, and none can be used here: no CUDA driver or GPU")
    assert not (pytester.path / "sm_90.toml").exists()


def test_plots_with_nothing_to_plot_say_so(pytester, no_gpu, plots):
    pytester.makepyfile(FACT_TEST)
    r = pytester.runpytest_inprocess("--gpuprops-plots", "plots")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*gpuprops plots: nothing to plot, no PNG written to plots*GPU facts were skipped: "
                            "no CUDA driver or GPU (test)*"])


STATIC_TEST = '''
import pytest

@pytest.mark.static
def test_dep(gpuprops_static):
    gpuprops_static.check("sm_90", "dep_cycles", 23, "nvrtc 99.0")
'''

STATIC_FACTS = '''arch = "sm_90"
[dep_cycles]
kind = "static"
by_compiler = { "nvrtc 99.0" = 24 }
unit = "cycles"
method = "m"
source = "s"
'''


def test_failing_static_fact_reproduce_line_reproduces_it(pytester):
    pytester.makepyfile(STATIC_TEST)
    (pytester.path / "my facts.toml").write_text(STATIC_FACTS)
    r = pytester.runpytest_inprocess("--gpuprops-facts", "my facts.toml")
    r.assert_outcomes(failed=1)
    line = next(x for x in r.stdout.lines if "reproduce:" in x).split("reproduce:", 1)[1].strip()
    assert line == "pytest test_failing_static_fact_reproduce_line_reproduces_it.py::test_dep " \
                   "--gpuprops-facts 'my facts.toml'"
    again = shlex.split(line)
    assert again[0] == "pytest"
    pytester.runpytest_inprocess(*again[1:]).assert_outcomes(failed=1)


def test_static_fact_of_another_arch_says_which_not_this_gpu(pytester):
    pytester.makepyfile(STATIC_TEST.replace('"sm_90", "dep', '"sm_80", "dep'))
    (pytester.path / "f.toml").write_text(STATIC_FACTS)
    r = pytester.runpytest_inprocess("--gpuprops-facts", "f.toml", "-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*facts file f.toml is for sm_90, not sm_80*"])
    assert "this GPU" not in r.stdout.str()


# ----------------------------------------------------------------------------------------------
# new archs


@pytest.mark.parametrize("arch", ["sm_100", "sm_100a", "sm_100f", "sm_103", "sm_110", "sm_120", "sm_120f", "sm_121",
                                  "sm_90a", "100", "SM_120A"])
def test_archs_newer_than_the_facts_are_accepted(arch):
    assert gp_compile.check_arch(arch) == gp_compile.parse_arch(arch).lower()


@pytest.mark.parametrize("arch", ["sm_100", "sm_120a"])
def test_archs_newer_than_the_facts_compile_and_disassemble(arch, cache_dir):
    c = gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", arch, cache_dir=cache_dir)
    cubin = sass.Cubin(c.cubin, arch)
    start, between, stop = sass.timed_region(cubin.instructions("clock_overhead"))
    assert between == [] and cubin_arch(c.cubin) == arch


def _fake_cupy(monkeypatch, cc: str):
    class Device:
        def __init__(self, index):
            self.compute_capability = cc

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
                                                            Device=Device))
    monkeypatch.setitem(sys.modules, "cupy", fake)


@pytest.mark.parametrize("cc", ["100", "120", "90", "75"])
def test_gpu_of_an_arch_the_tools_know_is_usable(monkeypatch, cc):
    _fake_cupy(monkeypatch, cc)
    assert measure.gpu_unavailable_reason(0) is None


def test_gpu_of_an_arch_the_compiler_does_not_know_skips_with_the_reason(monkeypatch, pytester):
    _fake_cupy(monkeypatch, "101")
    reason = measure.gpu_unavailable_reason(0)
    assert reason.startswith("GPU 0 is sm_101, which cannot be compiled for here") and "nvrtc" in reason
    pytester.makepyfile(FACT_TEST)
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*SKIPPED*needs a GPU: GPU 0 is sm_101, which cannot be compiled for here*"])


def test_new_arch_skips_saying_how_to_record_and_records(pytester):
    pytester.makeconftest(FAKE_GPU.replace("ARCH", "sm_100"))
    pytester.makepyfile(FACT_TEST)
    r = pytester.runpytest_inprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*SKIPPED*no facts recorded for sm_100*--gpuprops-record sm_100.toml*"])
    rec = pytester.runpytest_inprocess("--gpuprops-record", "sm_100.toml")
    rec.assert_outcomes(passed=1)
    recorded = F.load_facts("sm_100", pytester.path / "sm_100.toml")
    assert recorded["lds_latency_cycles"].value == 23.0 and recorded["lds_latency_cycles"].tolerance > 0
    pytester.runpytest_inprocess("--gpuprops-facts", "sm_100.toml").assert_outcomes(passed=1)


def test_regbank_without_a_gpu_reports_the_skipped_facts(pytester, no_gpu):
    """What the README says `pytest hwtests -k regbank` prints on a machine without a GPU."""
    r = pytester.runpytest_inprocess(str(REPO / "hwtests"), "-k", "regbank", "-m", "gpu", "-p", "no:randomly")
    outcomes = r.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 4 and not outcomes.get("passed") and not outcomes.get("failed")
    r.stdout.fnmatch_lines([f"*SKIPPED [[]{outcomes['skipped']}[]] *needs a GPU: no CUDA driver or GPU (test)"])
