"""What a person reads when a facts file is incomplete or a verdict is not a plain PASS/FAIL, how
--gpuprops-gpus without xdist orders the GPU tests, and what record mode writes at the end of a run
(including a controller that measured nothing itself), each against text written out by hand."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from gp_testing import Terminal, fake_gpu_conftest
from test_trust import _on

from pytest_gpuprops import assertions, facts, plugin

# -- a facts file that lacks something -------------------------------------------------------------

HEAD = 'arch = "sm_90"\n'
FULL = 'unit = "cycles"\nmethod = "m"\nsource = "s"\n'


def test_a_static_fact_needs_no_value_and_a_measured_one_no_compiler_table(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[dep]\nkind = "static"\nby_compiler = { "nvrtc 13.5" = 24 }\n' + FULL
                    + "\n[lds]\nvalue = 23\ntolerance_abs = 0.5\n" + FULL)
    parsed = facts.load_file(path)
    assert (parsed["dep"].kind, parsed["dep"].value, parsed["dep"].by_compiler) == ("static", None, {"nvrtc 13.5": 24})
    assert (parsed["lds"].kind, parsed["lds"].value, parsed["lds"].by_compiler) == ("measured", 23.0, {})


def test_a_fact_name_that_is_not_lower_snake_case_is_refused_in_a_gpu_section_too(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + "[LdsLatency]\nvalue = 23\ntolerance_abs = 0\n" + FULL)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == (f"{path}: fact name 'LdsLatency' must be lower_snake_case (a-z, 0-9, _)\n"
                              "  (see the facts TOML schema in README.md)")
    path.write_text(HEAD + '[gpus."NVIDIA H200".DramLatency]\nvalue = 670\ntolerance_abs = 20\n' + FULL)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == (f'{path}: fact [gpus."NVIDIA H200".DramLatency] name must be lower_snake_case '
                              "(a-z, 0-9, _)\n  (see the facts TOML schema in README.md)")


# -- verdicts that are neither PASS nor FAIL ------------------------------------------------------

def _verdict(status, text="23.500 cycles (min 23.4)"):
    return assertions.Verdict(fact="lds", arch="sm_90", status=status, expected="23 ± 0.25 cycles", measured=23.5,
                              measured_text=text, unit="cycles", method="m", source="s")


@pytest.mark.parametrize("status, head", [
    (assertions.ERROR, "fact lds on sm_90 errored:"),
    (assertions.UNSTABLE, "fact lds on sm_90 failed once but did not fail again when measured again:"),
    (assertions.SCHEDULE_CHANGED, "fact lds on sm_90 compiler schedule changed:"),
    (assertions.NOISY, "fact lds on sm_90 could not be measured reliably:"),
])
def test_each_status_opens_its_message_with_what_happened(status, head):
    assert _verdict(status).message().splitlines()[:3] == [head, "  expected: 23 ± 0.25 cycles",
                                                           "  measured: 23.500 cycles (min 23.4)"]


def test_a_confirmed_failure_lists_the_first_line_of_each_measurement():
    first = _verdict(assertions.FAIL, "0/2 cases within ±2% of the model\n            off the model: a; b")
    again = _verdict(assertions.FAIL, "1/2 cases within ±2% of the model\n            off the model: b")
    v = assertions.confirm(first, lambda: again)
    assert [a["measured_text"] for a in v.attempts] == ["0/2 cases within ±2% of the model",
                                                        "1/2 cases within ±2% of the model",
                                                        "1/2 cases within ±2% of the model"]


# -- --gpuprops-gpus without xdist: one GPU after another ------------------------------------------

TWO_TESTS = '''
import pytest

@pytest.mark.gpu
def test_a(gpuprops):
    pass

@pytest.mark.gpu
def test_b(gpuprops):
    pass
'''


def test_without_xdist_every_gpu_test_runs_once_per_gpu_one_gpu_after_another(pytester):
    pytester.makeconftest(fake_gpu_conftest(count=2))
    pytester.makepyfile(test_order=TWO_TESTS)
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "-v", "-p", "no:randomly")
    r.assert_outcomes(passed=4)
    ran = [ln.split(" ")[0] for ln in r.outlines if ln.startswith("test_order.py::")]
    assert ran == ["test_order.py::test_a[gpu0]", "test_order.py::test_b[gpu0]",
                   "test_order.py::test_a[gpu1]", "test_order.py::test_b[gpu1]"]


def test_one_gpu_listed_leaves_the_test_ids_as_they_are(pytester):
    pytester.makeconftest(fake_gpu_conftest(count=2))
    pytester.makepyfile(test_order=TWO_TESTS)
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "1", "-v", "-p", "no:randomly")
    r.assert_outcomes(passed=2)
    assert [ln.split(" ")[0] for ln in r.outlines if ln.startswith("test_order.py::")] == [
        "test_order.py::test_a", "test_order.py::test_b"]


# -- record mode at the end of the run -------------------------------------------------------------

def _recording_state(pytester, path):
    """A session state as pytest_configure makes it, recording to ``path`` (set here: the option
    itself asks for a GPU at start-up)."""
    config = pytester.parseconfig()
    state = config.stash[plugin._STATE] = plugin.GpuPropsState(config)
    state.record_path = str(path)
    return config, state


def test_record_mode_that_measured_nothing_says_so_in_yellow(pytester, tmp_path):
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert tr.lines == [("gpuprops record: nothing was measured, no file written", ["yellow"])]
    assert not (tmp_path / "r.toml").exists()


def test_a_record_that_cannot_be_written_is_said_in_red(pytester, tmp_path):
    (tmp_path / "r.toml").write_text("made during the run")
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    lds = facts.Fact(name="lds", arch="sm_90", unit="cycles", method="m", source="s", value=23.0)
    state.results.recorded["lds"] = lds
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert (f"gpuprops record: {tmp_path / 'r.toml'} exists; pass --force to overwrite it (or choose another path)",
            ["red"]) in tr.lines
    assert (tmp_path / "r.toml").read_text() == "made during the run"


def test_a_controller_that_measured_nothing_itself_names_the_gpu_of_the_workers_verdicts(pytester, tmp_path):
    """Under xdist the controller has no GPU of its own; the record's GPU is the one the verdicts came from."""
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    state.results.recorded["lds"] = facts.Fact(name="lds", arch="sm_90", unit="cycles", method="m", source="s",
                                               value=23.0)
    state.results.verdicts = [dataclasses.replace(_on(0, 23.0), gpu={**_on(0, 23.0).gpu, "name": "NVIDIA H200"})]
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert (f"gpuprops recorded 1 facts to {tmp_path / 'r.toml'}", []) in tr.lines
    assert (tmp_path / "r.toml").read_text().splitlines()[:2] == ['arch = "sm_90"', 'gpu = "NVIDIA H200"']


# -- option parsers, made afresh (the module's own are made at import) ------------------------------

def test_an_option_parser_keeps_accepted_values_and_refuses_the_rest_in_one_message():
    import argparse
    even = plugin._option_number(int, lambda v: v % 2 == 0, "an even number")
    assert even("4") == 4 and even("0") == 0
    for text in ("3", "four", ""):
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            even(text)
        assert str(exc.value) == f"takes an even number, not {text!r}"
    zero_ok = plugin._option_number(float, lambda v: v >= 0, "a number >= 0")
    assert zero_ok("0") == 0.0  # a value that is false is still a value


# -- which tests are parametrized per GPU --------------------------------------------------------------

class _Metafunc:
    def __init__(self, config, fixturenames):
        self.config, self.fixturenames, self.calls = config, fixturenames, []

    def parametrize(self, *args, **kw):
        self.calls.append((args, kw))


@pytest.mark.parametrize("worker, fixtures, parametrized", [
    (None, ["gpuprops_gpu_index"], True),
    ("gw0", ["gpuprops_gpu_index"], False),  # an xdist worker measures its own GPU: the tests stay as they are
    (None, ["tmp_path"], False),  # not a GPU test
])
def test_only_gpu_tests_outside_xdist_are_run_once_per_gpu(pytester, worker, fixtures, parametrized):
    config = pytester.parseconfig("--gpuprops-gpus", "0,1")
    state = config.stash[plugin._STATE] = plugin.GpuPropsState(config)
    state.worker_id = worker
    mf = _Metafunc(config, fixtures)
    plugin.pytest_generate_tests(mf)
    assert bool(mf.calls) is parametrized
    if parametrized:
        assert mf.calls[0][0] == ("gpuprops_gpu_index", [0, 1]) and mf.calls[0][1]["ids"] == ["gpu0", "gpu1"]


def test_plot_points_without_a_plots_folder_write_nothing(pytester, tmp_path, monkeypatch):
    config = pytester.parseconfig()
    state = config.stash[plugin._STATE] = plugin.GpuPropsState(config)
    state.results.plot_points = {"smem_bandwidth": [{"label": "LDS", "bytes_per_cycle": 128.0}]}
    monkeypatch.setattr(plugin, "write_plots", lambda *a: pytest.fail("plots written without --gpuprops-plots"))
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert tr.lines == []


def test_a_record_with_no_gpu_known_anywhere_says_so_in_its_header(pytester, tmp_path):
    config, state = _recording_state(pytester, tmp_path / "r.toml")
    state.results.recorded["lds"] = facts.Fact(name="lds", arch="sm_90", unit="cycles", method="m", source="s",
                                               value=23.0)
    plugin.pytest_terminal_summary(Terminal(), 0, config)
    assert (tmp_path / "r.toml").read_text().splitlines()[:2] == ['arch = "sm_90"', 'gpu = "?"']


# -- facts files: folders, GPU sections, a fresh Facts ----------------------------------------------

def test_a_facts_file_that_is_a_folder_says_so(tmp_path):
    (tmp_path / "sm_90.toml").mkdir()
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(tmp_path / "sm_90.toml")
    assert str(exc.value) == f"facts file {tmp_path / 'sm_90.toml'} is a folder; pass a .toml file or a folder of sm_XX.toml"


GPU_FACT = "value = 670\ntolerance_abs = 20\n" + FULL


def test_a_gpu_sections_facts_carry_their_name_arch_gpu_and_scope(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[gpus."NVIDIA H200".dram_latency_cycles]\n' + GPU_FACT)
    fact = facts.load_file(path).gpu_sections["NVIDIA H200"]["dram_latency_cycles"]
    assert fact == facts.Fact(name="dram_latency_cycles", arch="sm_90", unit="cycles", method="m", source="s",
                              value=670.0, tolerance_abs=20.0, scope="gpu", gpu="NVIDIA H200")


def test_every_problem_of_a_gpu_section_is_listed_on_its_own_line(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[gpus."H200".a]\nvalue = 1\ntolerance_abs = 0\n[gpus."H200".b]\nvalue = 2\n'
                    'tolerance_abs = 0\n')
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    lacks = "lacks unit, method, source; every fact needs a value, unit, method and source"
    assert str(exc.value) == (f'{path}: fact [gpus."H200".a] {lacks}\n  fact [gpus."H200".b] {lacks}\n'
                              "  (see the facts TOML schema in README.md)")


def test_two_sections_for_one_gpu_are_refused_naming_it(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[gpus."NVIDIA H200".l2]\n' + GPU_FACT + '[gpus."nvidia  h200".l2]\n' + GPU_FACT)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == f"{path}: two sections name the GPU 'nvidia  h200'"


def test_a_fresh_facts_set_has_no_gpu_and_no_sections(tmp_path):
    fresh = facts.Facts("sm_90", None, {}, {})
    assert fresh.gpu_sections == {} and fresh.gpu is None
    with pytest.raises(facts.MissingFacts) as exc:
        fresh.need("dram_latency_cycles")
    assert str(exc.value) == ("no fact 'dram_latency_cycles' for sm_90 in (no file); record it with --gpuprops-record "
                              "PATH on a sm_90 GPU, or add a [dram_latency_cycles] table")


def test_a_kernels_option_that_is_not_a_folder_is_a_usage_error(pytester):
    (pytester.path / "k.cu").write_text("")
    r = pytester.runpytest_inprocess("--gpuprops-kernels", "k.cu")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: --gpuprops-kernels k.cu is not a folder; give the folder that holds the kernel "
                            "sources (the repository's kernels/)"])


def test_every_problem_of_every_fact_is_listed_after_a_bad_name(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + "[BadName]\nvalue = 1\n\n[a]\nvalue = 1\ntolerance_abs = 0\ncolour = 1\nshade = 2\n"
                    + FULL + '\n[b]\nvalue = 2\ntolerance_abs = 0\nunit = "c"\nmethod = 5\nsource = "s"\n')
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    allowed = "value, tolerance_abs, tolerance_rel, unit, method, source, kind, scope"
    assert str(exc.value) == (f"{path}: \n  fact name 'BadName' must be lower_snake_case (a-z, 0-9, _)\n"
                              f"  fact [a] unknown key(s) colour, shade for a measured fact; allowed: {allowed}\n"
                              "  fact [b] method must be a non-empty string, not 5\n"
                              "  (see the facts TOML schema in README.md)")


def test_a_scope_that_is_neither_arch_nor_gpu_names_the_file(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[a]\nvalue = 1\ntolerance_abs = 0\nscope = "node"\n' + FULL)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == f'{path}: fact [a] has scope \'node\'; use "arch" or "gpu"'


@pytest.mark.parametrize("env, make, message", [
    ("GPUPROPS_LOCK_DIR", "file", "GPUPROPS_LOCK_DIR={p} is not a folder; point it at a folder every process "
     "measuring on this machine can write (default: the system temp folder)"),
    ("GPUPROPS_NVDISASM", "file", "GPUPROPS_NVDISASM={p} is not an executable file; point it at nvdisasm, or "
     "unset it to use the one from pip (nvidia-cuda-nvdisasm)"),
    ("GPUPROPS_NVDISASM", "folder", "GPUPROPS_NVDISASM={p} is not an executable file; point it at nvdisasm, or "
     "unset it to use the one from pip (nvidia-cuda-nvdisasm)"),
])
def test_an_environment_path_that_is_not_what_it_must_be_is_a_usage_error(pytester, monkeypatch, env, make, message):
    p = pytester.path / "thing"
    if make == "file":
        p.write_text("not a program")  # mode 0644: not executable, not a folder
    else:
        p.mkdir()
        p.chmod(0o755)  # executable, but a folder
    monkeypatch.setenv(env, str(p))
    r = pytester.runpytest_inprocess()
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message.format(p=p)}" in r.stderr.str()


def test_the_markdown_beside_the_report_is_checked_too(pytester):
    (pytester.path / "r.md").mkdir()
    r = pytester.runpytest_inprocess("--gpuprops-report", "r.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --gpuprops-report r.md is a folder; give a file name (e.g. r.md/gpuprops.json)" in r.stderr.str()


def test_a_compare_report_that_cannot_be_read_is_refused_at_start_up(pytester):
    r = pytester.runpytest_inprocess("--gpuprops-compare", "missing.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --gpuprops-compare: cannot read report missing.json: No such file or directory" in r.stderr.str()


def test_record_mode_asks_about_the_gpu_it_would_measure_and_refuses_without_it(pytester, monkeypatch):
    from pytest_gpuprops import measure
    monkeypatch.setattr(measure, "gpu_unavailable_reason", lambda index=0: f"GPU {index} is planted away")
    monkeypatch.setattr(measure, "visible_gpu_count", lambda: 2)  # GPU 1 is visible, only not usable
    r = pytester.runpytest_inprocess("--gpu", "1", "--gpuprops-record", "r.toml")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --gpuprops-record measures facts on a GPU, and none can be used here: GPU 1 is planted away. "
            "Nothing would be recorded; run it on the GPU whose facts you want") in r.stderr.str()
    assert not (pytester.path / "r.toml").exists()


def test_the_options_are_listed_under_their_own_heading_in_help(pytester):
    r = pytester.runpytest_inprocess("--help")
    lines = r.stdout.lines
    head = lines.index("GPU micro-architecture facts:")
    assert lines[head + 1].lstrip().startswith("--gpu=INDEX")


GOLDEN_OPTIONS = Path(__file__).parent / "golden" / "plugin_help.txt"


def _options_help(pytester, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    lines = pytester.runpytest_inprocess("--help").stdout.lines
    head = lines.index("GPU micro-architecture facts:")
    end = next(i for i in range(head + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    return "\n".join(lines[head:end]).rstrip() + "\n"


def test_the_options_help_is_the_golden_text(pytester, monkeypatch):
    """Every option's help as `pytest --help` prints it, 100 columns wide. After changing an option on
    purpose, write the section again and review the diff:
    COLUMNS=100 pytest --help | sed -n '/^GPU micro-architecture facts:/,/^$/p' | sed '$d' > tests/golden/plugin_help.txt
    """
    if not (3, 11) <= sys.version_info[:2] <= (3, 12):
        pytest.skip("tests/golden/plugin_help.txt is argparse's layout of Python 3.11/3.12")
    assert _options_help(pytester, monkeypatch) == GOLDEN_OPTIONS.read_text()
