"""The plugin's wiring checked against hand-written expectations: option values and start-up path checks
by their full messages, the end-of-run terminal sections line by line (facts, per GPU, fleet),
--gpuprops-compare at session end, xdist workers, plots and the record file. The older plugin tests run
these paths without checking what they produce, so a broken message or section went unnoticed."""

import argparse
import os
import types
from pathlib import Path

import pytest
from gp_testing import Terminal, fake_gpu_conftest
from test_plugin import FACT_TEST, FAKE_GPU
from test_trust import FLAKY_FACT, _on

from pytest_gpuprops import plugin, report, results

FAKE_GPUS = fake_gpu_conftest(count=2)

# the separators as pytest writes them 80 columns wide (the `columns80` fixture pins the width)
FACTS_SEP = "=" * 32 + " gpuprops facts " + "=" * 32
PER_GPU_SEP = "-" * 35 + " per GPU " + "-" * 36
FLEET_SEP = "=" * 19 + " gpuprops fleet: outliers and moved facts " + "=" * 19


@pytest.fixture
def columns80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


# -- option values ---------------------------------------------------------------------------


@pytest.mark.parametrize("parse, text, value", [
    (plugin._gpu_index, "0", 0), (plugin._gpu_index, "3", 3),
    (plugin._noise, "0.05", 0.05), (plugin._noise, "0.999", 0.999),
    (plugin._budget, "2.5", 2.5), (plugin._budget, "600", 600.0),
])
def test_option_values_in_range_are_kept(parse, text, value):
    got = parse(text)
    assert got == value and type(got) is type(value)


GPU_INDEX = "takes a CUDA device index 0, 1, ... (as nvidia-smi numbers them), not "
NOISE = "takes the relative standard deviation that ends a measurement, a number between 0 and 1 (0.01 = 1 %), not "
BUDGET = "takes the seconds one measurement may keep repeating, a number > 0 (default 2), not "


@pytest.mark.parametrize("parse, text, message", [
    (plugin._gpu_index, "-1", GPU_INDEX + "'-1'"),
    (plugin._gpu_index, "gpu1", GPU_INDEX + "'gpu1'"),
    (plugin._gpu_index, "1.5", GPU_INDEX + "'1.5'"),
    (plugin._noise, "0", NOISE + "'0'"),
    (plugin._noise, "1", NOISE + "'1'"),
    (plugin._noise, "1%", NOISE + "'1%'"),
    (plugin._budget, "0", BUDGET + "'0'"),
    (plugin._budget, "inf", BUDGET + "'inf'"),
    (plugin._budget, "-2", BUDGET + "'-2'"),
    (plugin._budget, "two", BUDGET + "'two'"),
])
def test_option_values_out_of_range_or_unreadable_get_one_message(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        parse(text)
    assert str(exc.value) == message


# -- paths named by options, checked at start-up -----------------------------------------------


def test_a_report_path_that_is_a_folder_is_refused_naming_a_file_to_give(tmp_path):
    with pytest.raises(pytest.UsageError) as exc:
        plugin._writable_file("--gpuprops-report", str(tmp_path))
    assert str(exc.value) == (f"--gpuprops-report {tmp_path} is a folder; give a file name "
                              f"(e.g. {tmp_path}/gpuprops.json)")


def test_an_existing_report_file_is_overwritten_without_force(tmp_path):
    old = tmp_path / "r.json"
    old.write_text("{}")
    assert plugin._writable_file("--gpuprops-report", str(old)) is None  # the report's default: overwrite


def test_a_file_in_the_way_of_the_folder_is_refused(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(pytest.UsageError) as exc:
        plugin._writable_dir("--gpuprops-plots", str(blocker / "sub" / "plots"))
    assert str(exc.value) == (f"--gpuprops-plots {blocker}/sub/plots: {blocker} is a file, not a folder; choose a "
                              "path in a folder")
    with pytest.raises(pytest.UsageError) as exc:
        plugin._writable_file("--gpuprops-report", str(blocker / "r.json"))
    assert str(exc.value) == (f"--gpuprops-report {blocker}/r.json: {blocker} is a file, not a folder; choose a "
                              "path in a folder")


@pytest.fixture
def read_only_folder(tmp_path, monkeypatch):
    """A folder with mode r-x (0o500). We run as root, which may write anywhere, so os.access answers
    for it as the folder's owner (not root) would: from the owner's permission bits."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    real_access = os.access

    def access_as_owner(path, mode, *a, **k):
        if Path(path) == ro:
            owner_bits = (os.stat(path).st_mode >> 6) & 0o7  # R_OK 4, W_OK 2, X_OK 1, F_OK 0
            return mode & ~owner_bits == 0
        return real_access(path, mode, *a, **k)
    monkeypatch.setattr(plugin.os, "access", access_as_owner)
    yield ro
    ro.chmod(0o700)


def test_a_folder_that_is_not_writable_is_refused(read_only_folder):
    ro = read_only_folder
    assert os.access(ro, os.R_OK | os.X_OK) and os.access(ro, os.F_OK)  # it exists and can be entered
    with pytest.raises(pytest.UsageError) as exc:
        plugin._writable_dir("--gpuprops-plots", str(ro / "new" / "plots"))
    assert str(exc.value) == (f"--gpuprops-plots {ro}/new/plots: folder {ro} is not writable; choose a path you "
                              "can write")
    # a file to write there names the file the option gave, not the folder
    with pytest.raises(pytest.UsageError) as exc:
        plugin._writable_file("--gpuprops-report", str(ro / "r.json"))
    assert str(exc.value) == (f"--gpuprops-report {ro}/r.json: folder {ro} is not writable; choose a path you "
                              "can write")
    # beside it, a folder that is writable passes
    assert plugin._writable_dir("--gpuprops-plots", str(ro.parent / "plots")) is None


# -- which GPU a test runs on --------------------------------------------------------------------


def test_item_gpu_is_the_gpu_parameter_of_the_test(pytester):
    items = pytester.getitems('''
        import pytest

        @pytest.mark.parametrize("gpuprops_gpu_index", [1, 0])
        def test_on_gpu(gpuprops_gpu_index):
            pass

        @pytest.mark.parametrize("n", [7])
        def test_other_parameter(n):
            pass

        def test_plain():
            pass
    ''')
    assert [(i.name, plugin._item_gpu(i)) for i in items] == [
        ("test_on_gpu[1]", 1), ("test_on_gpu[0]", 0), ("test_other_parameter[7]", None), ("test_plain", None)]


MIXED_ARCH_GPUS = FAKE_GPUS.replace('"sm_90", 132', '"sm_90" if index == 0 else "sm_80", 132')


def test_the_arch_marker_is_judged_on_the_gpu_the_test_runs_on(pytester):
    assert MIXED_ARCH_GPUS != FAKE_GPUS
    pytester.makeconftest(MIXED_ARCH_GPUS)  # GPU 0 is sm_90, GPU 1 is sm_80
    pytester.makepyfile('''
        import pytest

        @pytest.mark.gpu
        @pytest.mark.arch("sm_90")
        def test_hopper_only(gpu):
            assert gpu.arch == "sm_90"

        @pytest.mark.gpu
        @pytest.mark.arch(min="sm_86")
        def test_from_86(gpu):
            assert gpu.arch == "sm_90"
    ''')
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all")
    r.assert_outcomes(passed=2, skipped=2)  # each test passes on GPU 0 and is skipped on GPU 1, saying why
    lines = r.stdout.lines
    assert "test_hopper_only[gpu1]  -       -           fact is defined for sm_90; this GPU is sm_80  SKIPPED" in lines
    assert "test_from_86[gpu1]      -       -           fact needs sm_86 or newer; this GPU is sm_80  SKIPPED" in lines
    assert "gpuprops: 2 SKIPPED" in lines


# -- the end of the run: terminal sections -------------------------------------------------------


def test_one_gpu_gets_the_facts_table_and_the_fleet_note_but_no_per_gpu_table(pytester, columns80):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    r = pytester.runpytest_inprocess()
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([
        FACTS_SEP,
        "fact                arch    expected          measured              verdict",
        "------------------  ------  ----------------  --------------------  ---------",
        "lds_latency_cycles  sm_90   23 ± 0.25 cycles  23.000 (±0.00%, n=3)  PASS",
        "gpuprops: 1 PASS",
        "gpuprops outlier check: not run (1 GPU measured; it needs two or more)",
    ], consecutive=True)
    assert "per GPU" not in r.stdout.str() and "gpuprops fleet" not in r.stdout.str()


def test_compile_time_facts_alone_print_no_fleet_note(pytester, columns80):
    pytester.makepyfile('''
        import pytest

        @pytest.mark.static
        def test_dependent_spacing(gpuprops_static):
            gpuprops_static.check("sm_90", "hmma_16816_f32_dependent_issue_cycles", 24, "nvrtc 13.5")
    ''')
    r = pytester.runpytest_inprocess()
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([FACTS_SEP, "*hmma_16816_f32_dependent_issue_cycles*PASS", "gpuprops: 1 PASS"])
    assert "outlier check" not in r.stdout.str() and "per GPU" not in r.stdout.str()


def test_two_gpus_list_per_gpu_then_outliers_and_moved_facts_both_in_the_fleet(pytester, columns80, monkeypatch):
    monkeypatch.setattr("sys.dont_write_bytecode", True)  # the test file is rewritten between runs
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0))
    pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-report", "old.json").assert_outcomes(passed=2)
    # now GPU 1 reads 23.2: off GPU 0 (22.8) by 0.4 > 0.25, and moved by 0.4 since old.json
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0.4))
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--gpuprops-compare", "old.json")
    r.assert_outcomes(passed=2)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines([
        FACTS_SEP,
        "fact                arch    expected          measured              verdict",
        "------------------  ------  ----------------  --------------------  ---------",
        "lds_latency_cycles  sm_90   23 ± 0.25 cycles  22.800 (±0.00%, n=3)  PASS",
        "lds_latency_cycles  sm_90   23 ± 0.25 cycles  23.200 (±0.00%, n=3)  PASS",
        "gpuprops: 2 OUTLIER, 1 MOVED, 2 PASS",
        PER_GPU_SEP,
        "fact                test      node1:gpu0 Fake GPU (GPU-00000000)    node1:gpu1 Fake GPU (GPU-00000001)",
        "------------------  --------  ------------------------------------  ------------------------------------",
        "lds_latency_cycles  test_lds  22.800 PASS                           23.200 PASS",
        "gpuprops outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)",
        FLEET_SEP,
        "fact                arch    expected                          measured                                     "
        "                       verdict",
        "------------------  ------  --------------------------------  ---------------------------------------------"
        "---------------------  -------------------------------------------------------------------------------------"
        "------",
        "lds_latency_cycles  sm_90   peer median 23.200 ± 0.25 cycles  22.800 cycles on node1:gpu0 Fake GPU "
        "(GPU-00000000); peers: 23.200  OUTLIER (2 GPUs compared) (with two GPUs, both are flagged: a third tells "
        "which one is off)",
        "lds_latency_cycles  sm_90   peer median 22.800 ± 0.25 cycles  23.200 cycles on node1:gpu1 Fake GPU "
        "(GPU-00000001); peers: 22.800  OUTLIER (2 GPUs compared) (with two GPUs, both are flagged: a third tells "
        "which one is off)",
        "lds_latency_cycles  sm_90   baseline 22.800 ± 0.25 cycles     23.200 cycles on node1:gpu1 Fake GPU "
        "(GPU-00000001) (moved +0.400)  MOVED",
    ], consecutive=True)


def test_the_fleet_separator_is_red(pytester, columns80):
    pytester.makeconftest(FAKE_GPUS)
    pytester.makepyfile(FLAKY_FACT.format(values=[22.8], shift=0.4))
    r = pytester.runpytest_inprocess("--gpuprops-gpus", "all", "--color=yes")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    assert "\x1b[31m" + FLEET_SEP + "\x1b[0m" in r.stdout.lines
    assert FACTS_SEP in r.stdout.lines  # the facts separator is plain


def test_a_compare_report_gone_by_the_end_of_the_run_is_a_usage_error(pytester):
    (pytester.path / "old.json").write_text('{"facts": []}')  # a valid (empty) report at start-up ...
    pytester.makepyfile('''
        import os

        def test_removes_the_baseline():
            os.remove("old.json")  # ... gone when the session finishes
    ''')
    r = pytester.runpytest_inprocess("--gpuprops-compare", "old.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: --gpuprops-compare: cannot read report old.json: No such file or directory"])


def test_the_record_file_names_the_gpu_it_was_measured_on(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(FACT_TEST.replace("VALUE", "23.0"))
    r = pytester.runpytest_inprocess("--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["gpuprops recorded 1 facts to rec.toml"])
    assert (pytester.path / "rec.toml").read_text().splitlines()[:5] == [
        'arch = "sm_90"', 'gpu = "Fake GPU"', "", "[lds_latency_cycles]", "value = 23.0"]


# -- xdist workers leave the end of the run to the controller -----------------------------------


def _state_with_two_gpus_off_each_other(pytester, *args):
    config = pytester.parseconfig(*args)
    state = config.stash[plugin._STATE] = plugin.GpuPropsState(config)
    state.results.verdicts = [_on(0, 22.8), _on(1, 23.2)]  # outliers, were they judged
    return config, state


def test_an_xdist_worker_judges_no_fleet_and_reads_no_baseline(pytester):
    (pytester.path / "old.json").write_text('{"facts": []}')
    config, state = _state_with_two_gpus_off_each_other(pytester, "--gpuprops-compare", "old.json")
    (pytester.path / "old.json").unlink()  # a worker never reads it: no usage error from a worker
    state.worker_id = "gw0"
    session = types.SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == pytest.ExitCode.OK and state.fleet == [] and state.fleet_note == ""
    # the controller (no worker id) judges the same verdicts: two outliers, the run fails
    state.worker_id = None
    state.compare_path = None
    plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert [(v.status, v.gpu["index"]) for v in state.fleet] == [("OUTLIER", 0), ("OUTLIER", 1)]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_an_xdist_worker_writes_no_terminal_summary(pytester):
    config, state = _state_with_two_gpus_off_each_other(pytester)
    state.fleet_note = "outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"
    state.worker_id = "gw1"
    tr = Terminal()
    plugin.pytest_terminal_summary(tr, 0, config)
    assert tr.written == []
    state.worker_id = None  # the controller writes the sections
    plugin.pytest_terminal_summary(tr, 0, config)
    assert [w for w in tr.written if isinstance(w, tuple)] == [("=", "gpuprops facts"), ("-", "per GPU")]
    assert "gpuprops outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)" in tr.written


# -- plots ---------------------------------------------------------------------------------------


@pytest.fixture
def plot_calls(monkeypatch):
    calls = {}
    monkeypatch.setattr(report, "plot_hmma", lambda pts, path, title: calls.setdefault("hmma", (path, title)) and path)
    monkeypatch.setattr(report, "plot_regbank",
                        lambda cells, rc, path, title: calls.setdefault("regbank", (cells, rc, path, title)) and path)
    monkeypatch.setattr(report, "plot_bandwidth",
                        lambda vals, peak, path, title: calls.setdefault("bw", (vals, peak, path, title)) and path)
    return calls


def _plot_state(folder, **points):
    return types.SimpleNamespace(plots_dir=str(folder), results=results.SessionResults(plot_points=points))


def test_plots_go_to_a_new_nested_folder_or_an_existing_one(tmp_path, plot_calls):
    hmma = [{"ilp": 1, "warps": 1, "cycles": 24.0, "model": 24.0}]
    nested = tmp_path / "a" / "b" / "plots"
    assert plugin.write_plots(_plot_state(nested, hmma=hmma), {}) == [nested / "hmma_cycles_vs_ilp.png"]
    assert nested.is_dir()
    # a second run into the same folder
    plot_calls.clear()
    assert plugin.write_plots(_plot_state(nested, hmma=hmma), {}) == [nested / "hmma_cycles_vs_ilp.png"]


def test_the_regbank_heatmap_is_drawn_for_the_rc_with_most_cells_and_every_plot_gets_the_title(tmp_path,
                                                                                               plot_calls):
    regbank = [{"ra": 8, "rb": 10, "rc": 16, "cycles": 3.0}, {"ra": 9, "rb": 10, "rc": 16, "cycles": 2.0},
               {"ra": 8, "rb": 10, "rc": 40, "cycles": 1.0}]  # rc 16 has two cells, the higher rc 40 one
    bw = [{"label": "LDS.128", "bytes_per_cycle": 128.0}]
    out = tmp_path / "p"
    plugin.write_plots(_plot_state(out, regbank=regbank, smem_bandwidth=bw),
                       {"gpu": {"name": "Fake GPU"}, "arch": "sm_90"})
    assert plot_calls["regbank"] == ({(8, 10): 3.0, (9, 10): 2.0}, 16, out / "regbank_heatmap.png",
                                     "Fake GPU (sm_90)")
    assert plot_calls["bw"] == ({"LDS.128": 128.0}, 128.0, out / "smem_bandwidth.png", "Fake GPU (sm_90)")


# -- arch names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, number", [("sm_90a", 90), ("sm_100", 100), ("sm_120a", 120), ("compute_86", 86)])
def test_arch_number_reads_the_digits_after_the_underscore(arch, number):
    assert plugin._arch_number(arch) == number
