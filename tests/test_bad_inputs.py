"""Issue 12: every bad input gets a clear message, exit status 2 (the CLI) or a usage error (pytest),
and loses nothing; new archs compile, skip with the reason, and record.

CLI cases go through ``main([...])`` in-process; plugin cases through pytester in-process. Each
checks the message, the status, and that no file was written or changed."""

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from gp_testing import KERNELS, child_processes_outside_mutmut, fake_gpu_conftest, ncu_stand_in

from pytest_gpuprops import baselines as B
from pytest_gpuprops import compile as gp_compile
from pytest_gpuprops import devices, facts_record, facts_schema, inputs, report, report_files, results, sass
from pytest_gpuprops import facts as F
from pytest_gpuprops import report_schema as RS
from pytest_gpuprops.cli import _offset, main
from pytest_gpuprops.cli import build_parser as cli_build_parser
from pytest_gpuprops.cli_sass import cubin_arch

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
    facts_record.write_facts(tmp_path / "rec.toml", "sm_90", [exact])
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
    assert "INTERNALERROR" not in r.stdout.str() + err
    # the interpreter's own bytecode of the modules collected (__pycache__, where bytecode is written)
    # is Python's, not the run's
    def written(snap):
        return {k: v for k, v in snap.items() if not k.startswith(".") and "__pycache__/" not in k}
    assert written(snapshot(pytester.path)) == written(before)
    return err


@pytest.fixture(scope="module")
def plots():
    """matplotlib imported before pytester starts: pytester drops the modules imported after it
    starts, and matplotlib's C extensions cannot be imported twice in one process."""
    from pytest_gpuprops import plots as gp_plots
    try:
        gp_plots._plt()
    except gp_plots.PlotsUnavailable:
        pytest.skip("needs matplotlib")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(devices, "gpu_unavailable_reason", lambda index=0: "no CUDA driver or GPU (test)")


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
    assert devices.gpu_unavailable_reason(0) is None


def test_gpu_of_an_arch_the_compiler_does_not_know_skips_with_the_reason(monkeypatch, pytester):
    _fake_cupy(monkeypatch, "101")
    reason = devices.gpu_unavailable_reason(0)
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


# ==============================================================================================
# Every input surface, by kind: a table of malformed values per surface, generated from the report
# schema (pytest_gpuprops/report_schema.py), the facts schema (facts_schema.KEYS, facts_schema.UNITS), the options'
# and commands' own types, the variables of docs/reference.md and what the cache holds. Each bad
# value must give one clear line and a non-zero exit, write nothing and never a traceback.
# ==============================================================================================

GPU0 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0bb9ba4f-707d-fcd0-df03-44403559829f",
        "pci_bus_id": "0000:00:06.0", "host": "n1"}


def good_report() -> dict:
    """A report with every part the schema describes filled in: a measured verdict (GPU, measurement,
    attempts, bands), a static one, a pair fact's (its peer GPU; the links matrix), a recorded fact, plot
    points, a fleet verdict and the run's meta."""
    from pytest_gpuprops.assertions import Verdict
    measured = Verdict(fact="lds_latency_cycles", arch="sm_90", status="FAIL", expected="23 ± 0.25 cycles",
                       measured=23.5, measured_text="23.500 cycles", unit="cycles", method="chase", source="s",
                       flags=["a flag"], reproduce="pytest x", nodeid="hwtests/test_smem.py::test_lds",
                       measurement={"values": [23.5], "median": 23.5, "noise": 0.0, "n": 1, "unit": "cycles"},
                       attempts=[{"measured": 23.5, "measured_text": "23.500 cycles", "status": "FAIL"}],
                       gpu=dict(GPU0), tolerance=0.25, same_unit_tolerance_rel=0.01, units_range=[22.9, 23.1])
    static = Verdict(fact="hmma_issue", arch="sm_90", status="PASS", expected="24 (nvrtc 13.5)", measured=24,
                     measured_text="24 cycles with nvrtc 13.5", unit="cycles", method="sass", source="s",
                     kind="static", nodeid="hwtests/test_static.py::test_hmma[sm_90]")
    # a pair fact (hwtests/test_node_links.py): its verdict names the peer, the report's links hold its matrix
    pair = dataclasses.replace(measured, fact="p2p_ce_copy_gbps", status="PASS", expected="396.853 ± 11.9 GB/s",
                               measured=397.69, measured_text="397.690 GB/s", unit="GB/s", attempts=[], flags=[],
                               nodeid="hwtests/test_node_links.py::test_copy_engine_rate[peer+1]", tolerance=11.9,
                               units_range=[395.87, 397.84], scope="gpu", peer=dict(GPU0, index=1, uuid="GPU-1"))
    fleet = dataclasses.replace(pair, status="OUTLIER", kind="fleet")
    recorded = F.Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="m", source="s", value=23.0,
                      tolerance_abs=0.25, units_range=(22.9, 23.1), same_unit_tolerance_rel=0.01)
    res = results.SessionResults([measured, static, pair], {recorded.name: recorded},
                                 {"hmma": [{"ilp": 1, "cycles": 2.0}]})
    meta = {"date": "2026-11-26T09:00:00", "host": "n1", "compiler": "nvrtc 13.5", "nvdisasm": "13.5",
            "gpu": dict(GPU0, arch="sm_90"), "arch": "sm_90", "gpus": [GPU0], "run": results.run_status(1, 2, 2),
            "baselines": {"store": "/x", "notes": []}}
    data = res.to_json(meta)
    data["fleet"] = [fleet.as_dict()]
    data["links"] = report.link_matrices(res.verdicts)
    return json.loads(json.dumps(data))


def _entries(spec, value, path=()):
    """(path, spec) of every entry of ``value`` that the schema describes, the root excepted."""
    if path:
        yield path, spec
    if isinstance(spec, RS.Obj) and isinstance(value, dict):
        for key, inner in spec.fields.items():
            if key in value:
                yield from _entries(inner, value[key], (*path, key))
    elif isinstance(spec, RS.ListOf) and isinstance(value, list) and value:
        # the first item that holds something (a links matrix's row starts with its empty diagonal cell)
        k = next((i for i, item in enumerate(value) if item is not None), 0)
        yield from _entries(spec.item, value[k], (*path, k))
    elif isinstance(spec, RS.MapOf) and isinstance(value, dict) and value:
        key = next(iter(value))
        yield from _entries(spec.item, value[key], (*path, key))


def _wrong_values(spec) -> list:
    """Values of the wrong type or outside what ``spec`` takes."""
    if isinstance(spec, RS.Any):
        return []
    if isinstance(spec, RS.Str):
        out = [5, ["x"], {"x": 1}, True]
    elif isinstance(spec, RS.Num):
        out = ["1", True, [1], float("nan"), float("inf")]
        out += [-1] if spec.at_least is not None else []
        out += [1.5] if spec.integer else []
    elif isinstance(spec, RS.Bool):
        out = ["true", 1]
    elif isinstance(spec, RS.OneOf):
        out = [f"NOT {spec.values[0]}", 5]
    elif isinstance(spec, RS.ListOf):
        out = [{"x": 1}, "x"] + ([[1.0, 2.0, 3.0]] if spec.length else [])
    else:  # Obj, MapOf
        out = [[], "x", 5]
    return out + ([] if spec.nullable else [None])


def _set(data, path, value):
    out = json.loads(json.dumps(data))
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


_DELETE = object()
GOOD_REPORT = good_report()
REPORT_CASES = [(path, value) for path, spec in _entries(RS.REPORT, GOOD_REPORT) for value in _wrong_values(spec)]
REPORT_CASES += [((*path, key), _DELETE) for path, spec in _entries(RS.REPORT, GOOD_REPORT)
                 if isinstance(spec, RS.Obj) for key in spec.required]


def _path_text(path) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def _names_the_entry(path) -> str:
    """A pattern the message must hold: every part of the entry's path, in order."""
    return ".*?".join(rf"\[{k}\]" if isinstance(k, int) else re.escape(str(k)) for k in path)


def test_the_schema_covers_every_part_the_plugin_writes():
    """The tables are generated from the schema: a key the plugin writes and the schema does not
    describe would go unchecked, so every one is described."""
    from pytest_gpuprops.assertions import Verdict
    assert {f.name for f in dataclasses.fields(Verdict)} | {"verdict"} == set(RS.VERDICT.fields)
    assert {f.name for f in dataclasses.fields(F.Fact)} == set(RS.RECORDED.fields)
    assert set(GOOD_REPORT) - {"schema"} == set(RS.REPORT.fields)
    assert set(results.run_status(0, 1, 1)) == set(RS.RUN.fields) and set(results.RUNNING) <= set(RS.RUN.fields)
    assert set(RS.STATUSES) >= {*__import__("pytest_gpuprops.assertions").assertions.NOT_OK, "PASS", "SKIPPED",
                                "RECORDED", *results.FLEET_STATUSES, results.UNITS_DIFFER}
    assert len(REPORT_CASES) > 150
    results.SessionResults.from_json(GOOD_REPORT, "good.json")  # the good report itself reads
    results.load(REPO / "docs" / "samples" / "h100_full_run.json")  # and so does a real one


@pytest.mark.parametrize("path, value", REPORT_CASES,
                         ids=[f"{_path_text(p)}={'deleted' if v is _DELETE else json.dumps(v)}" for p, v in REPORT_CASES])
def test_a_report_part_of_the_wrong_type_is_one_line_naming_file_and_entry(tmp_path, capsys, monkeypatch, path, value):
    """What merge, --gpuprops-compare/--gpuprops-baseline and the store read: each malformed part is
    refused, naming the file and the entry, with exit status 2 (1 is for facts that do not hold)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.json").write_text(json.dumps(GOOD_REPORT))
    (tmp_path / "bad.json").write_text(json.dumps(_set(GOOD_REPORT, path, value)))
    with pytest.raises(results.ResultsError) as e:
        results.load(tmp_path / "bad.json")
    message = str(e.value)
    assert message.startswith(str(tmp_path / "bad.json")) and "\n" not in message
    assert re.search(_names_the_entry(path), message), message
    assert ("lacks" if value is _DELETE else "expected") in message
    with pytest.raises(B.BaselineError, match=re.escape(str(tmp_path / "bad.json"))):
        B.from_report(tmp_path / "bad.json")
    err = refused(capsys, tmp_path, "merge", "good.json", "bad.json", says=r"^gpuprops merge: bad\.json: ")
    assert len(err.strip().splitlines()) == 1


def _blob(n=64) -> bytes:
    return bytes(range(256))[::7][:n] * 4


#: whole files that are not a report, what merge says of each
REPORT_FILES = [
    ("binary", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + _blob()), "is not a gpuprops report: it is not text"),
    ("empty", lambda p: p.write_text(""), "is not JSON"),
    ("truncated", lambda p: p.write_text(json.dumps(GOOD_REPORT)[:500]), "is not JSON"),
    ("null", lambda p: p.write_text("null"), "is not a gpuprops report"),
    ("a list", lambda p: p.write_text("[1, 2]"), "is not a gpuprops report"),
    ("a string", lambda p: p.write_text('"report"'), "is not a gpuprops report"),
    ("no facts", lambda p: p.write_text('{"meta": {}}'), "is not a gpuprops report"),
    ("another schema", lambda p: p.write_text(json.dumps(dict(GOOD_REPORT, schema="gpuprops-results/2"))),
     "it is of schema 'gpuprops-results/2'; expected \"schema\": \"gpuprops-results/1\""),
    ("a schema that is a number", lambda p: p.write_text(json.dumps(dict(GOOD_REPORT, schema=2))),
     "it is of schema the number 2"),
    ("a stored unit run", lambda p: p.write_text(json.dumps({"schema": B.SCHEMA, "meta": {}, "facts": []})),
     "it is a stored unit run"),
    ("a folder", lambda p: p.mkdir(), "is a folder"),
    ("missing", lambda p: None, "No such file or directory"),
]


@pytest.mark.parametrize("make, says", [(m, s) for _, m, s in REPORT_FILES], ids=[k for k, _, _ in REPORT_FILES])
def test_merge_of_a_file_that_is_not_a_report_exits_2_in_one_line(tmp_path, capsys, monkeypatch, make, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.json").write_text(json.dumps(GOOD_REPORT))
    make(tmp_path / "bad.json")
    err = refused(capsys, tmp_path, "merge", "good.json", "bad.json", says=re.escape(says))
    assert "bad.json" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("second", ["good.json", "./good.json", "copy.json", "reformatted.json"])
def test_merge_of_one_report_twice_or_a_copy_is_refused(tmp_path, capsys, monkeypatch, second):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.json").write_text(json.dumps(GOOD_REPORT))
    (tmp_path / "copy.json").write_text(json.dumps(GOOD_REPORT))
    (tmp_path / "reformatted.json").write_text(json.dumps(GOOD_REPORT, indent=4, sort_keys=True))
    err = refused(capsys, tmp_path, "merge", "good.json", second, says="counted twice. Give each node's report once")
    assert ("given twice" if "good" in second else "is a copy of good.json (the same run: n1") in err
    other = _set(GOOD_REPORT, ("meta", "date"), "2026-11-27T09:00:00")  # another run of the same node: merged
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert run(capsys, "merge", "good.json", "other.json")[0] == 1  # its FAIL and OUTLIER, not a refusal


def test_a_verdict_of_an_unknown_status_is_not_counted_as_passing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fine = _set(_set(GOOD_REPORT, ("facts", 0, "status"), "PASS"), ("fleet",), [])
    (tmp_path / "good.json").write_text(json.dumps(fine))
    assert run(capsys, "merge", "good.json")[0] == 0
    (tmp_path / "odd.json").write_text(json.dumps(_set(fine, ("facts", 0, "status"), "GREAT")))
    refused(capsys, tmp_path, "merge", "odd.json", says=r"odd\.json: facts\[0\] \(fact lds_latency_cycles\)\.status is "
            r"the string 'GREAT'; expected one of PASS, FAIL")


@pytest.mark.parametrize("path, value", [(("meta",), []), (("meta", "run"), "done"), (("facts", 0, "gpu"), ["n1"]),
                                         (("facts", 0, "measured"), "23.5"), (("facts", 0, "status"), "GREAT"),
                                         (("schema",), "gpuprops-results/2"), (("facts", 0), "not a verdict")],
                         ids=["meta", "meta.run", "gpu", "measured", "status", "schema", "verdict"])
def test_compare_with_a_malformed_report_is_one_usage_error(pytester, no_gpu, path, value):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    data = _set(GOOD_REPORT, path, value)
    (pytester.path / "old.json").write_text(json.dumps(data))
    for option in ("--gpuprops-compare", "--gpuprops-baseline"):
        err = usage_error(pytester, option, "old.json", says=f"{option}: old.json")
        assert len(err.strip().splitlines()) == 1


def test_compare_with_a_binary_file_is_one_usage_error(pytester, no_gpu):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    (pytester.path / "old.json").write_bytes(b"\x89PNG\r\n\x1a\n" + _blob())
    usage_error(pytester, "--gpuprops-compare", "old.json", says="old.json is not a gpuprops report: it is not text")


def test_a_malformed_run_in_the_store_is_never_a_baseline(tmp_path):
    """The store reads its runs through the same schema: a run with a part of the wrong type is
    named as unreadable and skipped, never a crash and never a baseline."""
    uuid = GPU0["uuid"]
    store = B.Store(tmp_path)
    ((_, path, _, _),) = store.save(results.SessionResults.from_json(
        _set(GOOD_REPORT, ("facts", 0, "status"), "PASS"), "r")[0].verdicts[:1], {"run": results.run_status(0, 1, 1)})
    assert len(store.runs(uuid)) == 1
    stored = json.loads(path.read_text())
    for part, value in ((("facts", 0, "gpu"), ["x"]), (("facts", 0, "status"), "GREAT"), (("meta",), [1]),
                        (("facts", 0, "measured"), "1"), (("red",), "lds")):
        path.write_text(json.dumps(_set(stored, part, value)))
        assert store.runs(uuid) == [] and store.read(uuid)[1] == [path]
        with pytest.raises(B.BaselineError, match=re.escape(str(path)) + ": " + _names_the_entry(part)):
            B.read_run(path)


# ----------------------------------------------------------------------------------------------
# what is already where the report goes


def _hand_written(p: Path):
    p.write_text("# My notes\n\nthings I wrote by hand\n")


#: what a user may already have where --gpuprops-report writes (PATH and PATH's .md twin)
EXISTING = [
    ("a CUDA source", "victim.cu", lambda p: p.write_text('extern "C" __global__ void k() {}\n')),
    ("a hand-written Markdown twin", "README.json", lambda p: _hand_written(p.with_suffix(".md"))),
    ("JSON that is not a report", "r.json", lambda p: p.write_text('{"mine": true}')),
    ("a report-shaped file without a schema", "r.json", lambda p: p.write_text('{"facts": []}')),
    ("a stored unit run", "r.json", lambda p: p.write_text(json.dumps({"schema": B.SCHEMA, "facts": []}))),
    ("a binary file", "r.json", lambda p: p.write_bytes(_blob())),
    ("an empty file", "r.json", lambda p: p.write_text("")),
]


@pytest.mark.parametrize("target, make", [(t, m) for _, t, m in EXISTING], ids=[k for k, _, _ in EXISTING])
def test_a_report_never_replaces_a_file_that_is_not_an_earlier_report(pytester, no_gpu, target, make):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    make(pytester.path / target)
    err = usage_error(pytester, "--gpuprops-report", target,
                      says=f"--gpuprops-report {re.escape(target)}: .* exists and is not a gpuprops report; refusing "
                           "to overwrite it. Choose another report path, or pass --force to replace it")
    assert len(err.strip().splitlines()) == 1
    # when the user means it
    r = pytester.runpytest_inprocess("--gpuprops-report", target, "--force")
    assert r.ret == pytest.ExitCode.OK, r.stderr.str()
    assert json.loads((pytester.path / target).read_text())["schema"] == results.SCHEMA
    assert (pytester.path / target).with_suffix(".md").read_text().startswith(inputs.MARKDOWN_HEAD)


def test_an_earlier_report_is_replaced_without_force(pytester, no_gpu):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    assert pytester.runpytest_inprocess("--gpuprops-report", "r.json").ret == pytest.ExitCode.OK
    first = (pytester.path / "r.json").read_text()
    assert report_files.markdown([], {}).startswith(inputs.MARKDOWN_HEAD)  # what tells the twin apart
    assert pytester.runpytest_inprocess("--gpuprops-report", "r.json").ret == pytest.ExitCode.OK
    assert json.loads((pytester.path / "r.json").read_text())["meta"]["date"] >= json.loads(first)["meta"]["date"]
    assert inputs.is_report_json(pytester.path / "r.json") and inputs.is_report_markdown(pytester.path / "r.md")


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["", "force"])
def test_a_read_only_report_is_refused_not_a_traceback(pytester, no_gpu, force):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    assert pytester.runpytest_inprocess("--gpuprops-report", "r.json").ret == pytest.ExitCode.OK
    for name in ("r.json", "r.md"):
        (pytester.path / name).chmod(0o444)
        usage_error(pytester, "--gpuprops-report", "r.json", *force,
                    says=rf"--gpuprops-report r.json: .* {name} exists and is read-only; it is not replaced")
        (pytester.path / name).chmod(0o644)


@pytest.mark.parametrize("args, says", [
    (["--gpuprops-report", "r.md"], "the JSON report and its Markdown twin would both be r.md"),
    (["--gpuprops-report", "r.json", "--gpuprops-record", "r.md"], "would write the same file"),
    (["--gpuprops-report", "r.json", "--gpuprops-record", "r.json"], "would write the same file"),
])
def test_the_files_one_run_writes_are_different_files(pytester, no_gpu, args, says):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    usage_error(pytester, *args, says=says)


def test_a_report_that_cannot_be_written_at_the_end_is_a_message_not_internalerror(pytester, no_gpu, monkeypatch):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")

    real = report_files.write_reports

    def disk_full(path, res, fleet, meta):
        if meta["run"]["status"] == "running":  # the report written at the start of the run goes in
            return real(path, res, fleet, meta)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(report_files, "write_reports", disk_full)
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json")
    assert "INTERNALERROR" not in r.stdout.str() + r.stderr.str()
    r.stdout.fnmatch_lines(["gpuprops report: could not write r.json (No space left on device); this run's "
                            "verdicts are in the table above only"])


def test_a_report_that_cannot_be_started_is_a_usage_error(pytester, no_gpu, monkeypatch):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(report_files, "write_running", refuse)
    usage_error(pytester, "--gpuprops-report", "r.json", says="--gpuprops-report r.json cannot be written: "
                "Permission denied; choose a path you can write")


# ----------------------------------------------------------------------------------------------
# pytest options, by the kind of value each takes


#: every option of the plugin that takes a value, by kind; a new option must be given a kind here
OPTION_KINDS = {
    "gpuprops_gpu": "index", "gpuprops_gpus": "gpu list", "gpuprops_noise": "fraction",
    "gpuprops_budget": "seconds", "gpuprops_facts": "facts to read", "gpuprops_compare": "report to read",
    "gpuprops_baseline": "baseline", "gpuprops_record": "file to write", "gpuprops_report": "file to write",
    "gpuprops_plots": "folder", "gpuprops_baselines": "folder", "gpuprops_cache": "folder",
    "gpuprops_kernels": "source folder", "gpuprops_population": "population rule",
}
FLAGS = {"gpuprops_baseline_accept", "gpuprops_force"}

#: the malformed values of each kind; "@..." names a thing made in the test folder
BAD_VALUES = {
    "index": ["", "-1", "x", "1.5"],
    "gpu list": ["", " ", "x", "0,0", "-1", "0,x"],
    "fraction": ["", "0", "1", "-1", "nan", "x"],
    "seconds": ["", "0", "-1", "inf", "nan", "x"],
    "facts to read": ["", "@missing", "@folder", "@binary", "@empty", "@text"],
    "report to read": ["", " ", "@missing", "@folder", "@binary", "@empty", "@text"],
    "baseline": ["", " ", "@missing", "@folder", "@binary", "@empty"],
    "file to write": ["", "@folder", "@under a file", "@text"],
    "folder": ["", "@file", "@under a file"],
    "source folder": ["", "@file", "@missing", "@empty folder"],
    "population rule": ["", "x", "Strict", "reach,strict"],
}


def _made(folder: Path, value: str) -> str:
    made = {"@missing": "missing.x", "@folder": "afolder", "@binary": "blob.bin", "@empty": "empty.txt",
            "@text": "notes.txt", "@under a file": "test_x.py/sub", "@file": "test_x.py", "@empty folder": "afolder"}
    (folder / "afolder").mkdir(exist_ok=True)
    (folder / "blob.bin").write_bytes(_blob())
    (folder / "empty.txt").write_text("")
    (folder / "notes.txt").write_text("my notes\n")
    return made.get(value, value)


def _plugin_options(pytester):
    """The plugin's options by dest, as one parsed command line has them: parsed once for the
    module's tests (a parse is ~30 ms, 66 tests asked for it)."""
    if not _OPTIONS:
        config = pytester.parseconfig()
        _OPTIONS.update({a.dest: a for a in config._parser.getgroup("gpuprops").options})
    return _OPTIONS


_OPTIONS: dict = {}


def test_every_option_has_a_kind_and_malformed_values(pytester):
    options = _plugin_options(pytester)
    assert set(options) == set(OPTION_KINDS) | FLAGS
    assert set(OPTION_KINDS.values()) == set(BAD_VALUES)


OPTION_CASES = [(dest, value) for dest, kind in OPTION_KINDS.items() for value in BAD_VALUES[kind]]


@pytest.mark.parametrize("dest, value", OPTION_CASES, ids=[f"{d}={v!r}" for d, v in OPTION_CASES])
def test_a_malformed_option_value_is_one_usage_error_naming_the_option(pytester, no_gpu, dest, value):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    arg = _plugin_options(pytester)[dest]
    name = max(arg.names(), key=len)
    err = usage_error(pytester, name, _made(pytester.path, value),
                      says="|".join(re.escape(n) for n in arg.names()))
    assert len([line for line in err.splitlines() if line.startswith("ERROR:")]) == 1


def test_accepting_a_run_that_is_not_stored_is_a_usage_error(pytester, no_gpu):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    usage_error(pytester, "--gpuprops-baseline-accept", "--gpuprops-baseline", "none",
                says="--gpuprops-baseline-accept with --gpuprops-baseline none: a run that is not stored")


# ----------------------------------------------------------------------------------------------
# environment variables, by the kind of value each takes


def _not_the_tool(folder: Path) -> str:
    p = folder / "impostor"
    p.write_text("#!/bin/sh\necho 'hello from something else'\n")
    p.chmod(0o755)
    return str(p)


def _not_executable(folder: Path) -> str:
    p = folder / "tool.txt"
    p.write_text("not a program")
    return str(p)


#: every variable of docs/reference.md (GPUPROPS_HYPOTHESIS_PROFILE is the repository's conftest.py's,
#: tested below) with values outside what it takes; callables make the thing in the test folder
BAD_ENV = {
    "GPUPROPS_CACHE_DIR": [lambda d: str(d / "test_x.py"), lambda d: str(d / "test_x.py" / "below")],
    "GPUPROPS_LOCK_DIR": [lambda d: str(d / "test_x.py"), lambda d: str(d / "missing")],
    "GPUPROPS_BASELINE_DIR": [lambda d: str(d / "test_x.py"), lambda d: str(d / "test_x.py" / "below")],
    "GPUPROPS_NVDISASM": [lambda d: str(d / "missing"), lambda d: str(d), _not_executable, _not_the_tool],
    "GPUPROPS_NCU": [lambda d: str(d / "missing"), lambda d: str(d), _not_executable, _not_the_tool],
    "GPUPROPS_FRESH_DRAWS": ["true", "yes", "2", " 1"],
    "GPUPROPS_PLANT_NO_PEER": ["true", "yes", "2", " 1"],
    "GPUPROPS_PLANT_SHIFT": ["garbage", "0:no_such_fact:1", "0:lds_latncy_cycles:1", "0:lds_latency_cycles:nan",
                             "0:lds_latency_cycles", "x:lds_latency_cycles:1"],
}
ENV_CASES = [(var, n, value) for var, values in BAD_ENV.items() for n, value in enumerate(values)]


def test_every_documented_variable_has_malformed_values():
    doc = (REPO / "docs" / "reference.md").read_text()
    section = doc.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(GPUPROPS_\w+)`", section, re.M))
    assert documented == set(BAD_ENV) | {"GPUPROPS_HYPOTHESIS_PROFILE"}


@pytest.mark.parametrize("var, n, value", ENV_CASES, ids=[f"{v}-{n}" for v, n, _ in ENV_CASES])
def test_a_malformed_variable_is_one_usage_error_naming_it(pytester, no_gpu, monkeypatch, var, n, value):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    monkeypatch.setenv(var, value(pytester.path) if callable(value) else value)
    err = usage_error(pytester, says=re.escape(var))
    assert len([line for line in err.splitlines() if line.startswith("ERROR:")]) == 1


@pytest.mark.parametrize("var, value", [("GPUPROPS_NVDISASM", lambda d: sass.find_nvdisasm()),
                                        ("GPUPROPS_NCU", lambda d: ncu_stand_in(d)), ("GPUPROPS_FRESH_DRAWS", "1"),
                                        ("GPUPROPS_FRESH_DRAWS", "0"), ("GPUPROPS_PLANT_SHIFT", "0:lds_latency_cycles:1")])
def test_a_variable_within_what_it_takes_starts_the_run(pytester, no_gpu, monkeypatch, var, value):
    monkeypatch.delenv("GPUPROPS_NVDISASM", raising=False)
    found = value(pytester.path) if callable(value) else value
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    monkeypatch.setenv(var, found)
    assert pytester.runpytest_inprocess().ret == pytest.ExitCode.OK


def test_an_unknown_hypothesis_profile_stops_the_repositorys_conftest_in_one_line(monkeypatch):
    child_processes_outside_mutmut(monkeypatch)
    env = dict(os.environ, GPUPROPS_HYPOTHESIS_PROFILE="fast")
    r = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "tests/test_cache.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["GPUPROPS_HYPOTHESIS_PROFILE='fast': expected default, ci or thorough "
                                             "(see docs/reference.md)"]


# ----------------------------------------------------------------------------------------------
# facts TOML, generated from the schema (facts_schema.KEYS) and the units in use (facts_schema.UNITS)

#: each key a fact table may hold, by the kind of value it takes
FACT_KEY_KINDS = {"value": "number", "tolerance_abs": "amount", "tolerance_rel": "amount", "unit": "text",
                  "method": "text", "source": "text", "kind": "choice", "scope": "choice", "units_range": "pair",
                  "same_unit_tolerance_rel": "fraction", "by_compiler": "table"}
#: TOML values outside each kind
BAD_TOML = {"number": ['"23"', "true", "[1]", "{ a = 1 }", "nan", "inf"],
            "amount": ["-1", '"0.5"', "nan", "true"],
            "text": ["5", '""', '"  "', '[ "a" ]', "true", "{ a = 1 }"],
            "choice": ['"banana"', "5"],
            "pair": ["[1]", "[23.1, 22.9]", '"22.9,23.1"', '[1, "x"]', "[1, 2]"],
            "fraction": ["0", "1", "-0.1", '"x"'],
            "table": ["5", '"x"', "{}", '{ "nvrtc 13.5" = "x" }', '{ "nvrtc 13.5" = nan }']}
STATIC_BASE = {"kind": '"static"', "by_compiler": '{ "nvrtc 13.5" = 24 }', "unit": '"cycles"', "method": '"m"',
               "source": '"s"'}
MEASURED_BASE = {"value": "23.0", "tolerance_abs": "0.25", "unit": '"cycles"', "method": '"m"', "source": '"s"'}


def test_every_fact_key_has_a_kind_and_malformed_values():
    assert set(FACT_KEY_KINDS) == set(facts_schema.KEYS["measured"]) | set(facts_schema.KEYS["static"])
    assert set(FACT_KEY_KINDS.values()) == set(BAD_TOML)


FACT_CASES = [(kind, key, bad) for kind, keys in facts_schema.KEYS.items() for key in keys
              for bad in BAD_TOML[FACT_KEY_KINDS[key]] if not (key == "kind" and kind == "static")]


@pytest.mark.parametrize("kind, key, bad", FACT_CASES, ids=[f"{k}-{key}={b}" for k, key, b in FACT_CASES])
def test_a_fact_key_of_the_wrong_kind_is_refused_naming_file_fact_and_key(tmp_path, kind, key, bad):
    table = dict(STATIC_BASE if kind == "static" else MEASURED_BASE, **{key: bad})
    p = tmp_path / "sm_90.toml"
    p.write_text('arch = "sm_90"\n[lds_latency_cycles]\n' + "".join(f"{k} = {v}\n" for k, v in table.items()))
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(p)
    assert str(p) in str(e.value) and "[lds_latency_cycles]" in str(e.value) and key in str(e.value)


#: every unit in use, misspelt as people do: another case, a letter dropped, a letter doubled
MISSPELT = sorted({(v, u) for u in facts_schema.UNITS if len(u) > 2
                   for v in (u.upper(), u.lower(), u[:-1], u + u[-1]) if v not in facts_schema.UNITS})


@pytest.mark.parametrize("unit, meant", MISSPELT, ids=[v for v, _ in MISSPELT])
def test_a_misspelt_unit_is_refused_with_the_one_meant(tmp_path, unit, meant):
    p = tmp_path / "sm_90.toml"
    p.write_text(_toml({**GOOD, "unit": unit}))
    with pytest.raises(F.FactsError, match=re.escape(f"unit = {unit!r}: did you mean ")):
        F.load_file(p)
    assert facts_schema.misspelt_unit(unit) == meant


def test_the_misspellings_real_users_make_are_caught_and_new_units_are_not():
    assert [facts_schema.misspelt_unit(u) for u in ("cyles", "cycle", "Cycles", "Mhz", "GB/sec", "TFLOPS", "b/clk")] == \
        ["cycles", "cycles", "cycles", "MHz", "GB/s", "TFLOP/s", "B/clk"]
    assert [facts_schema.misspelt_unit(u) for u in facts_schema.UNITS + ("widgets", "warps", "c", "u")] == [None] * (len(facts_schema.UNITS) + 4)


#: whole facts files that cannot be checked against, what each says
FACTS_FILES = [
    ("not UTF-8", lambda p: p.write_bytes(b'arch = "sm_90"\n# \xff\xfe caf\xe9\n'), r"is not UTF-8 text \(byte 0xff at offset 17\)"),
    ("empty", lambda p: p.write_text(""), "top-level key arch"),
    ("no facts", lambda p: p.write_text('arch = "sm_90"\ngpu = "x"\n'), "holds no facts"),
    ("no facts but an empty GPU section", lambda p: p.write_text('arch = "sm_90"\n[gpus."NVIDIA H200"]\n'), "holds no facts"),
    ("not TOML", lambda p: p.write_text('arch = "sm_90"\n[x\n'), "cannot read facts file"),
    ("binary", lambda p: p.write_bytes(_blob()), "is not UTF-8 text"),
    ("a misspelt unit", lambda p: p.write_text(_toml({**GOOD, "unit": "cyles"})), "did you mean 'cycles'"),
]


@pytest.mark.parametrize("make, says", [(m, s) for _, m, s in FACTS_FILES], ids=[k for k, _, _ in FACTS_FILES])
def test_a_facts_file_that_cannot_be_checked_against_is_refused_everywhere(pytester, capsys, no_gpu, make, says):
    p = pytester.path / "sm_90.toml"
    make(p)
    with pytest.raises(F.FactsError, match=says):
        F.check_facts_path(p)
    refused(capsys, pytester.path, "facts", "--facts", str(p), says=says)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    usage_error(pytester, "--gpuprops-facts", "sm_90.toml", says=f"--gpuprops-facts: .*{says}")


ARCH_TEST = '''
import pytest

@pytest.mark.static
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dep(gpuprops_static, arch):
    gpuprops_static.check(arch, "dep_cycles", 24, "nvrtc 99.0")
'''


def test_a_facts_file_for_none_of_the_selected_archs_is_a_usage_error(pytester, no_gpu):
    pytester.makepyfile(ARCH_TEST)
    (pytester.path / "f.toml").write_text(STATIC_FACTS.replace("sm_90", "sm_100"))
    usage_error(pytester, "--gpuprops-facts", "f.toml",
                says=r"--gpuprops-facts f.toml holds facts for sm_100, and the selected tests check sm_80, sm_90: no "
                     r"fact would be checked, every one would skip")
    pytester.makepyfile(test_gpu=FACT_TEST)  # with GPU facts selected, and no GPU: the line says why
    usage_error(pytester, "--gpuprops-facts", "f.toml",
                says=r"check sm_80, sm_90; no GPU can be used here \(no CUDA driver or GPU \(test\)\): no fact would")
    (pytester.path / "f.toml").write_text(STATIC_FACTS)  # one of them: the other skips, as before
    r = pytester.runpytest_inprocess("--gpuprops-facts", "f.toml")
    r.assert_outcomes(failed=0, passed=1, skipped=2)


def test_a_facts_file_for_another_gpu_is_a_usage_error(pytester):
    pytester.makeconftest(FAKE_GPU.replace("ARCH", "sm_90"))
    pytester.makepyfile(FACT_TEST)
    (pytester.path / "f.toml").write_text(_toml(GOOD, arch="sm_86"))
    usage_error(pytester, "--gpuprops-facts", "f.toml", says=r"holds facts for sm_86, and the selected tests check "
                r"sm_90 \(the GPU here is sm_90\)")


def test_under_xdist_a_facts_file_that_matched_nothing_fails_the_run_at_its_end(pytester, no_gpu, monkeypatch):
    """xdist's controller collects nothing itself: the run's end finds that every fact skipped for the
    facts file's arch, and the run is a usage error all the same."""
    child_processes_outside_mutmut(monkeypatch)  # the workers import this checkout, however it was installed
    pytester.makepyfile(ARCH_TEST)
    (pytester.path / "f.toml").write_text(STATIC_FACTS.replace("sm_90", "sm_100"))
    r = pytester.runpytest_subprocess("-n", "2", "--gpuprops-facts", "f.toml", "-p", "no:randomly")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stdout.fnmatch_lines(["gpuprops: usage error: --gpuprops-facts f.toml holds facts for sm_100, and the tests "
                            "that ran check sm_80, sm_90: no fact was checked, every one skipped.*"])


# ----------------------------------------------------------------------------------------------
# the gpuprops command: every argument that takes a value, generated from its parser

BASE_ARGS = {"compile": ["compile", "victim.cu", "--arch", "sm_90", "-o", "out.cubin"],
             "sass": ["sass", "rb.cubin", "--kernel", "regbank_ffma"],
             "patch": ["patch", "rb.cubin", "--kernel", "regbank_ffma", "--at", "0480", "--stall", "2", "-o", "s.cubin"],
             "facts": ["facts"], "merge": ["merge", "r.json"], "baselines": ["baselines", "--store", "store"]}
#: arguments for which '' is a value: --reuse '' clears the reuse flags
EMPTY_IS_A_VALUE = {("patch", "--reuse")}


def _cli_arguments():
    import argparse
    parser = cli_build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for cmd, p in sub.choices.items():
        for a in p._actions:
            if a.nargs == 0 or isinstance(a, argparse._HelpAction):
                continue
            yield cmd, (a.option_strings[-1] if a.option_strings else None), a.dest


CLI_CASES = [c for c in _cli_arguments() if (c[0], c[1]) not in EMPTY_IS_A_VALUE]


def test_every_command_has_base_arguments():
    assert {cmd for cmd, _, _ in CLI_CASES} == set(BASE_ARGS) and len(CLI_CASES) > 20


@pytest.mark.parametrize("cmd, option, dest", CLI_CASES, ids=[f"{c}-{o or d}" for c, o, d in CLI_CASES])
def test_an_empty_argument_is_refused_naming_it(capsys, work, cmd, option, dest):
    (work / "r.json").write_text(json.dumps(GOOD_REPORT))
    argv = list(BASE_ARGS[cmd])
    if option is None:
        argv[1] = ""
    elif option in argv:
        argv[argv.index(option) + 1] = ""
    else:
        argv += [option, ""]
    err = refused(capsys, work, *argv, says=re.escape(option or dest))
    assert len(err.strip().splitlines()) == 1


#: what each command reads, and files that are not what it takes
CLI_INPUTS = [(["compile", "{}", "--arch", "sm_90", "-o", "out.cubin"], "source"),
              (["sass", "{}"], "cubin"), (["patch", "{}", "--at", "0480", "--stall", "2", "-o", "s.cubin"], "cubin"),
              (["facts", "--facts", "{}"], "facts"), (["merge", "{}"], "report")]
INPUT_KINDS = {"missing": None, "folder": "dir", "empty": b"", "binary": b"\x89PNG\r\n\x1a\n" + _blob(),
               "text": b"hello\n", "no kernel": b"__device__ int counter;\n"}


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("argv, what", CLI_INPUTS, ids=[w if w != "cubin" else a[0] for a, w in CLI_INPUTS])
def test_a_command_given_a_file_that_is_not_what_it_reads_exits_2_in_one_line(capsys, work, argv, what, kind):
    target = work / f"input-{kind.replace(' ', '-')}"
    content = INPUT_KINDS[kind]
    if content == "dir":
        target.mkdir()
    elif content is not None:
        target.write_bytes(content)
    err = refused(capsys, work, *[a.format(target.name) for a in argv], says=re.escape(target.name))
    if what != "source":  # the compiler's own log follows its line
        assert len(err.strip().splitlines()) == 1


def test_a_source_with_no_kernel_compiles_to_nothing_and_says_why(capsys, work):
    (work / "none.cu").write_text("__device__ int counter;\n")
    refused(capsys, work, "compile", "none.cu", "--arch", "sm_90",
            says=r"none.cu defines no kernel \(no __global__ function\), so its cubin would hold no code to read or "
                 "patch; none.sm_90.cubin was not written")


# ----------------------------------------------------------------------------------------------
# the cache: every entry a run leaves, damaged in each way, is read as missing and written again


CORRUPTIONS = {"empty": lambda b: b"", "truncated": lambda b: b[:len(b) // 2], "binary": lambda b: _blob(),
               "null": lambda b: b"null", "wrong shape": lambda b: b'{"format": 1, "sha256": 5}\n[1, 2]',
               "one byte flipped": lambda b: b[:-1] + bytes([b[-1] ^ 1]) if b else b"x"}


def _cache_run(cache: Path):
    """What a run reads through the cache: a build, its SASS listing, nvdisasm's version."""
    sass.clear_memo()
    sass.listing._nvdisasm_identity_of.cache_clear()
    c = gp_compile.compile_cuda(KERNELS / "clock_overhead.cu", "sm_80", cache_dir=cache)
    cubin = sass.Cubin(c.cubin, "sm_80")
    return c.cubin, [i.line() for i in cubin.instructions("clock_overhead")], sass.nvdisasm_version()


class _RecordedNvdisasm:
    """nvdisasm for the damage cases, which are about the cache, not nvdisasm: each (arguments, input
    bytes) is run for real once and its output answered again from then on. A damaged listing entry
    still costs its case a read through ``sass.listing._run_nvdisasm`` (counted in ``runs``), but not
    nvdisasm's ~0.45 s start on this machine, once for each of the six damages."""

    def __init__(self):
        self.real, self.outputs, self.runs = sass.listing._run_nvdisasm, {}, 0

    def __call__(self, args, path):
        self.runs += 1
        key = (tuple(args), Path(path).read_bytes())
        if key not in self.outputs:
            self.outputs[key] = self.real(args, path)
        return self.outputs[key]


@pytest.fixture(scope="module")
def _healthy_cache(tmp_path_factory):
    """A cache root filled by one run from nothing, what that run read, and the nvdisasm that read it:
    each damage case starts from a copy of it (filling it is a compile and an nvdisasm run, ~0.5 s, the
    same for every case)."""
    folder = tmp_path_factory.mktemp("healthy_cache")
    nvdisasm = _RecordedNvdisasm()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPROPS_CACHE_DIR", str(folder))
        mp.setattr(sass.listing, "_run_nvdisasm", nvdisasm)
        want = _cache_run(folder)
    sass.clear_memo()
    assert nvdisasm.runs == 1  # the one listing read, from nothing
    return folder, want, nvdisasm


@pytest.mark.parametrize("damage", CORRUPTIONS)
def test_every_cache_entry_damaged_is_read_as_missing_and_healed(tmp_path, monkeypatch, damage, _healthy_cache):
    healthy, want, nvdisasm = _healthy_cache
    shutil.copytree(healthy, tmp_path, dirs_exist_ok=True)
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sass.listing, "_run_nvdisasm", nvdisasm)
    runs = nvdisasm.runs
    assert _cache_run(tmp_path) == want  # the copy reads as the run that filled it
    entries = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert {p.suffix for p in entries} >= {".cubin", ".json"} and len(entries) >= 4
    for entry in entries:
        good = entry.read_bytes()
        entry.write_bytes(CORRUPTIONS[damage](good))
        assert _cache_run(tmp_path) == want, entry
        assert _cache_run(tmp_path) == want  # and again, from what was written in its place
    # the damaged listing entry, and only it, was read again: once, then from what was written in its place
    assert nvdisasm.runs - runs == 1
    sass.clear_memo()
