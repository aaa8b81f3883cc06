"""The session layer (session.py) checked against hand-written expectations: which GPU each xdist
worker measures, the per-GPU slots, info and runners, --gpuprops-gpus parsing, the session metadata,
and the verdict a failing or skipped test gets when it has none of its own. No GPU, no subprocess."""

import dataclasses
import json
import socket
import types

import pytest

from pytest_gpuprops import assertions, devices, measure, results, session

NODEID = "t.py::TestC::test_x[a b]"
REPRODUCE = "pytest 't.py::TestC::test_x[a b]'"


def _info(index: int) -> devices.GpuInfo:
    return devices.GpuInfo(index, f"Fake GPU {index}", "sm_90", 132, "580.0", "13.0", "13.0", f"0000:0{index}:00.0",
                           1980, f"GPU-{index}", "node1")


@pytest.fixture
def fake_gpus(monkeypatch):
    """Four visible GPUs; GPU 1 is unavailable ("planted: GPU 1 is busy"), the others are fine.
    Returns what was asked, in order: ("reason", index) and ("info", index) pairs."""
    asked = []

    def reason(index=0):
        asked.append(("reason", index))
        return "planted: GPU 1 is busy" if index == 1 else None

    def info(index=0):
        asked.append(("info", index))
        return _info(index)
    monkeypatch.setattr(devices, "gpu_unavailable_reason", reason)
    monkeypatch.setattr(devices, "gpu_info", info)
    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 4)
    return asked


def _state(pytester, *args, worker: str | None = None) -> session.GpuPropsState:
    """The session state of a command line, as pytest_configure makes it (options parsed, not
    configured: a configured config costs ~0.2 s to tear down)."""
    config = pytester.parseconfig(*args)
    if worker is not None:
        config.workerinput = {"workerid": worker}  # what xdist gives a worker's config
    return session.GpuPropsState(config)


def test_state_reads_the_output_options(pytester, fake_gpus):
    (pytester.path / "old.json").write_text(json.dumps(results.SessionResults().to_json({})))
    st = _state(pytester, "--gpuprops-record", "rec.toml", "--force", "--gpuprops-report", "out.json",
                "--gpuprops-compare", "old.json", "--gpuprops-plots", "plots", "--gpuprops-gpus", "0")
    assert st.record_path == "rec.toml" and st.force is True and st.report_path == "out.json"
    assert st.compare_path == "old.json" and st.plots_dir == "plots" and st.gpus_option == "0"
    assert st.results.verdicts == [] and st.fleet == [] and st.fleet_note == ""
    dflt = _state(pytester)
    assert dflt.record_path is None and dflt.force is False and dflt.report_path is None
    assert dflt.compare_path is None and dflt.plots_dir is None and dflt.gpus_option is None


# -- which GPU this process measures -----------------------------------------------------------
@pytest.mark.parametrize("worker, expected", [("gw0", 1), ("gw1", 3), ("gw2", -1), ("gw7", -1)])
def test_xdist_worker_k_measures_the_kth_listed_gpu(pytester, fake_gpus, worker, expected):
    st = _state(pytester, "--gpuprops-gpus", "1,3", worker=worker)
    assert st.worker_id == worker and st.gpus_option == "1,3"
    assert st.default_index() == expected


def test_a_worker_beyond_the_list_gets_no_gpu_and_says_why(pytester, fake_gpus):
    st = _state(pytester, "--gpuprops-gpus", "1,3", worker="gw2")
    s = st.slot()
    assert s.index == -1 and s.info is None
    assert s.unavailable == "xdist worker gw2 has no GPU of its own: --gpuprops-gpus lists 2; run with -n 2"
    assert st.gpu_reason() == s.unavailable
    assert ("reason", -1) not in fake_gpus and ("info", -1) not in fake_gpus  # no GPU -1 asked about
    with pytest.raises(pytest.skip.Exception, match=r"^needs a GPU: xdist worker gw2 has no GPU of its own"):
        st.info()


def test_a_worker_without_gpus_option_measures_the_gpu_of_dash_dash_gpu(pytester, fake_gpus):
    st = _state(pytester, "--gpu", "2", worker="gw1")
    assert st.worker_id == "gw1" and st.gpus_option is None
    assert st.default_index() == 2


def test_a_worker_id_without_a_number_measures_the_first_listed_gpu(pytester, fake_gpus):
    st = _state(pytester, "--gpuprops-gpus", "2,3", worker="gw")
    assert st.default_index() == 2


def test_without_xdist_the_first_listed_gpu_is_the_default(pytester, fake_gpus):
    st = _state(pytester, "--gpuprops-gpus", "2,3")
    assert st.worker_id is None
    assert st.gpu_list() == [2, 3] and st.default_index() == 2


def test_all_with_no_visible_gpu_falls_back_to_dash_dash_gpu(pytester, fake_gpus, monkeypatch):
    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 0)
    st = _state(pytester, "--gpu", "3", "--gpuprops-gpus", "all")
    assert st.gpu_list() == [] and st.default_index() == 3


def test_all_lists_every_visible_gpu(pytester, fake_gpus):
    st = _state(pytester, "--gpuprops-gpus", "all", worker="gw3")
    assert st.gpu_list() == [0, 1, 2, 3] and st.default_index() == 3


# -- slots, reasons, info and runners ------------------------------------------------------------
def test_a_fresh_slot_knows_its_index_and_nothing_else():
    s = session.GpuSlot(5)
    assert s.index == 5 and s.info is None and s.unavailable is None and s.runner is None


def test_slots_reasons_and_info_are_per_gpu(pytester, fake_gpus):
    st = _state(pytester)  # default GPU 0
    assert st.gpu_reason(1) == "planted: GPU 1 is busy"
    assert st.gpu_reason(0) is None and st.gpu_reason() is None
    busy, fine = st.slot(1), st.slot(2)
    assert busy.index == 1 and busy.info is None and busy.unavailable == "planted: GPU 1 is busy"
    assert fine.index == 2 and fine.unavailable is None and fine.info == _info(2)
    assert st.info(2) == _info(2) and st.info() == _info(0)
    with pytest.raises(pytest.skip.Exception) as exc:
        st.info(1)
    assert str(exc.value) == "needs a GPU: planted: GPU 1 is busy"
    # each GPU is looked at once, and never again: the slot is kept
    assert st.slot(1) is busy and st.slot(2) is fine
    assert fake_gpus.count(("reason", 1)) == 1 and fake_gpus.count(("info", 2)) == 1
    assert ("info", 1) not in fake_gpus


def test_a_gpu_whose_info_cannot_be_read_is_unavailable_with_that_message(pytester, fake_gpus, monkeypatch):
    def broken(index=0):
        raise devices.GpuUnavailable("planted: no device properties")
    monkeypatch.setattr(devices, "gpu_info", broken)
    st = _state(pytester)
    s = st.slot(2)
    assert s.info is None and s.unavailable == "planted: no device properties"
    with pytest.raises(pytest.skip.Exception) as exc:
        st.info(2)
    assert str(exc.value) == "needs a GPU: planted: no device properties"


class _RecordingRunner:
    made: list = []

    def __init__(self, info, kernels_dir, *, stop, cache_dir=None):
        self.args = (info, kernels_dir, stop, cache_dir)
        _RecordingRunner.made.append(self)


def test_runner_is_made_once_per_gpu_with_that_gpus_info(pytester, fake_gpus, monkeypatch, tmp_path):
    monkeypatch.setattr(_RecordingRunner, "made", [])
    monkeypatch.setattr(measure, "Runner", _RecordingRunner)
    kernels = tmp_path / "k"
    kernels.mkdir()
    st = _state(pytester, "--gpuprops-kernels", str(kernels), "--gpuprops-cache", str(tmp_path / "cubins"),
                "--gpuprops-noise", "0.05")
    r2 = st.runner(2)
    assert isinstance(r2, _RecordingRunner)
    info, kdir, stop, cache = r2.args
    assert info == _info(2) and info.index == 2
    assert kdir == kernels and stop is st.stop and stop.noise_target == 0.05 and cache == str(tmp_path / "cubins")
    assert st.slot(2).runner is r2 and st.slot(0).runner is None
    assert st.runner(2) is r2 and len(_RecordingRunner.made) == 1  # kept, not made again
    r0 = st.runner()
    assert r0 is not r2 and r0.args[0] == _info(0) and len(_RecordingRunner.made) == 2
    with pytest.raises(pytest.skip.Exception, match=r"^needs a GPU: planted: GPU 1 is busy$"):
        st.runner(1)
    assert len(_RecordingRunner.made) == 2 and st.slot(1).runner is None


def test_the_end_of_a_session_removes_each_runners_module_folder(pytester, fake_gpus, monkeypatch, tmp_path):
    """measure.Runner writes the cubins it loads into a gpuprops-mod-* folder of its own; the config's
    clean-up (every process's, xdist workers' too) removes them, and leaves the temporary folder's
    other entries alone (earlier runs left hundreds of them in /tmp)."""
    import sys
    import tempfile
    stand_in = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda i: types.SimpleNamespace(use=lambda: None)))
    monkeypatch.setitem(sys.modules, "cupy", stand_in)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = tmp_path / "gpuprops-mod-of-someone-else"
    other.mkdir()
    from gp_testing import KERNELS
    config = pytester.parseconfig("--gpuprops-kernels", str(KERNELS), "--gpuprops-cache", str(tmp_path / "cubins"))
    config._do_configure()
    try:
        from pytest_gpuprops import plugin
        st = config.stash[plugin._STATE]
        folders = [st.runner(i)._tmp for i in (0, 2)]
        assert len(set(folders)) == 2
        for f in folders:
            assert f.startswith(str(tmp_path / "gpuprops-mod-"))
            (tmp_path / f / "k.cubin").write_bytes(b"loaded")  # what Runner.load writes
    finally:
        config._ensure_unconfigure()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuprops-mod-of-someone-else"]
    st.close()  # again: nothing left to remove, no error
    assert other.is_dir()


# -- --gpuprops-gpus ---------------------------------------------------------------------------------
def _never():
    raise AssertionError("the visible GPUs are counted only for 'all'")


@pytest.mark.parametrize("text, expected", [("0,2,3", [0, 2, 3]), (" 1 , 0 ", [1, 0]), ("4,", [4]), ("7", [7])])
def test_parse_gpus_lists(text, expected):
    assert session.parse_gpus(text, _never) == expected


def test_parse_gpus_all_counts_the_visible_gpus():
    assert session.parse_gpus("all", lambda: 3) == [0, 1, 2]
    assert session.parse_gpus(" all ", lambda: 0) == []


@pytest.mark.parametrize("text, message", [
    ("a,b", "--gpuprops-gpus 'a,b': expected 'all' or GPU indices like 0,1,3"),
    ("0,x", "--gpuprops-gpus '0,x': expected 'all' or GPU indices like 0,1,3"),
    ("", "--gpuprops-gpus '': expected 'all' or distinct indices >= 0, like 0,1,3"),
    (" , ", "--gpuprops-gpus ' , ': expected 'all' or distinct indices >= 0, like 0,1,3"),
    ("-1", "--gpuprops-gpus '-1': expected 'all' or distinct indices >= 0, like 0,1,3"),  # negative alone
    ("0,0", "--gpuprops-gpus '0,0': expected 'all' or distinct indices >= 0, like 0,1,3"),  # repeated alone
    ("1,-2,1", "--gpuprops-gpus '1,-2,1': expected 'all' or distinct indices >= 0, like 0,1,3"),
])
def test_parse_gpus_refuses(text, message):
    with pytest.raises(pytest.UsageError) as exc:
        session.parse_gpus(text, _never)
    assert str(exc.value) == message


# -- the session's metadata ------------------------------------------------------------------------
@pytest.fixture
def quick_tools(monkeypatch):
    from pytest_gpuprops import compile as gp_compile
    from pytest_gpuprops import sass
    monkeypatch.setattr(gp_compile, "compiler_version", lambda *a: "nvrtc 9.9")
    monkeypatch.setattr(sass, "nvdisasm_version", lambda: "9.8")


def _v(arch, gpu, nodeid="t.py::test_a", status=assertions.PASS):
    return assertions.Verdict(fact="f", arch=arch, status=status, expected="1", measured=1.0, measured_text="1",
                              unit="c", method="m", source="s", nodeid=nodeid, gpu=gpu)


def test_meta_names_the_first_gpu_measured_here(pytestconfig, fake_gpus, quick_tools):
    st = session.GpuPropsState(pytestconfig)
    st.slot(1)  # unavailable: not the one named
    st.slot(3)
    st.slot(2)
    st.results.verdicts.append(_v("sm_80", {"index": 0, "name": "Other"}))
    meta = st.meta()
    assert meta["compiler"] == "nvrtc 9.9" and meta["nvdisasm"] == "9.8" and meta["host"] == socket.gethostname()
    assert meta["gpu"] == {"index": 3, "name": "Fake GPU 3", "arch": "sm_90", "sm_count": 132,
                           "driver_version": "580.0", "cuda_driver_version": "13.0", "cuda_runtime_version": "13.0",
                           "pci_bus_id": "0000:03:00.0", "max_sm_clock_mhz": 1980, "uuid": "GPU-3", "host": "node1",
                           "vbios_version": ""}
    assert meta["arch"] == "sm_90"
    assert meta["gpus"] == [{"index": 0, "name": "Other"}]


def test_meta_from_the_verdicts_alone(pytestconfig, quick_tools):
    # the main process of an xdist run measures nothing itself: the GPUs come from the workers' verdicts
    st = session.GpuPropsState(pytestconfig)
    st.results.verdicts += [_v("sm_70", None), _v("sm_90", {"index": 1, "name": "B"}),
                            _v("sm_90", {"name": "A", "index": 0}), _v("sm_90", {"name": "B", "index": 1})]
    meta = st.meta()
    assert meta["gpu"] == {"index": 0, "name": "A"} and meta["arch"] == "sm_90"
    assert meta["gpus"] == [{"index": 0, "name": "A"}, {"index": 1, "name": "B"}]  # one per GPU, in any key order
    empty = session.GpuPropsState(pytestconfig).meta()
    assert empty["gpus"] == [] and "gpu" not in empty and "arch" not in empty


# -- verdicts for tests that failed or skipped outside the verdict layer ---------------------------
def _report(outcome, longrepr, keywords=("gpu",), when="call", nodeid=NODEID, **extra):
    return pytest.TestReport(nodeid, ("t.py", 3, "TestC.test_x[a b]"), {k: 1 for k in keywords}, outcome,
                             longrepr, when, **extra)


def _outside(status, text, nodeid=NODEID, fact="test_x[a b]", reproduce=REPRODUCE):
    return {"fact": fact, "arch": "-", "status": status, "expected": "-", "measured": None, "measured_text": text,
            "unit": "", "method": "", "source": "", "kind": "test", "flags": [], "reproduce": reproduce,
            "nodeid": nodeid, "measurement": None, "attempts": [], "gpu": None, "tolerance": None, "scope": "arch",
            "same_unit_tolerance_rel": None, "units_range": None, "peer": None, "accepted_reading": None}


def _part(*verdicts):
    """A test's part as it rides on its report (plugin.pytest_runtest_makereport)."""
    return {"verdicts": [v.as_dict() for v in verdicts], "recorded": [], "plot_points": {}}


def _ingested(config, report):
    st = session.GpuPropsState(config)  # this run's options; only the results matter here
    st.ingest(report)
    return [dataclasses.asdict(v) for v in st.results.verdicts]


def test_skipped_gpu_test_with_a_tuple_longrepr(pytestconfig):
    got = _ingested(pytestconfig, _report("skipped", ("t.py", 3, "Skipped: needs a GPU: no CuPy")))
    assert got == [_outside("SKIPPED", "needs a GPU: no CuPy")]


def test_skipped_static_test_with_a_plain_longrepr(pytestconfig):
    got = _ingested(pytestconfig, _report("skipped", "Skipped: no nvdisasm", keywords=("static",)))
    assert got == [_outside("SKIPPED", "no nvdisasm")]
    # only the leading "Skipped: " goes, exactly as spelled; the rest is kept
    got = _ingested(pytestconfig, _report("skipped", ("t.py", 3, "skipped: why Skipped: ")))
    assert got == [_outside("SKIPPED", "skipped: why Skipped: ")]
    got = _ingested(pytestconfig, _report("skipped", ("t.py", 3, "SKIPPED: loud")))
    assert got == [_outside("SKIPPED", "SKIPPED: loud")]


def test_failed_test_first_nonblank_line_of_the_crash_message(pytestconfig):
    longrepr = types.SimpleNamespace(reprcrash=types.SimpleNamespace(
        message="\n   \nAssertionError: boom\nassert 1 == 2\n"))
    got = _ingested(pytestconfig, _report("failed", longrepr))
    assert got == [_outside("ERROR", "call failed: AssertionError: boom")]


def test_failed_setup_with_a_plain_longrepr(pytestconfig):
    got = _ingested(pytestconfig, _report("failed", "  \nfixture 'x' not found\n  more", when="setup", keywords=()))
    assert got == [_outside("ERROR", "setup failed: fixture 'x' not found")]


def test_failed_with_an_empty_message_says_the_outcome(pytestconfig):
    empty = types.SimpleNamespace(reprcrash=types.SimpleNamespace(message=" \n\t\n"))
    assert _ingested(pytestconfig, _report("failed", empty)) == [_outside("ERROR", "call failed: failed")]
    assert _ingested(pytestconfig, _report("failed", "", when="teardown")) == [_outside("ERROR", "teardown failed: failed")]


def test_a_nodeid_without_class_or_odd_characters(pytestconfig):
    got = _ingested(pytestconfig, _report("failed", "E", nodeid="t.py::test_y"))
    assert got == [_outside("ERROR", "call failed: E", nodeid="t.py::test_y", fact="test_y",
                            reproduce="pytest t.py::test_y")]


def test_skipped_test_that_is_neither_gpu_nor_static_adds_nothing(pytestconfig):
    assert _ingested(pytestconfig, _report("skipped", ("t.py", 3, "Skipped: x"), keywords=("slow",))) == []
    assert _ingested(pytestconfig, _report("passed", None)) == []


def test_a_test_with_its_own_verdict_gets_no_second_one(pytestconfig):
    st = session.GpuPropsState(pytestconfig)
    failing = _v("sm_90", {"index": 0}, nodeid=NODEID, status=assertions.FAIL)
    part = _part(failing)
    st.ingest(_report("failed", "AssertionError: fact does not hold", gpuprops_part=part))
    assert [dataclasses.asdict(v) for v in st.results.verdicts] == [dataclasses.asdict(failing)]
    # a skipped test with a verdict of its own (its SKIPPED verdict) gets none added either
    skipped = _v("sm_90", {"index": 0}, nodeid="t.py::test_s", status=assertions.SKIPPED)
    st.ingest(_report("skipped", ("t.py", 3, "Skipped: s"), nodeid="t.py::test_s",
                      gpuprops_part=_part(skipped)))
    assert len(st.results.verdicts) == 2


def test_a_failed_test_whose_own_verdicts_all_pass_still_shows_as_error(pytestconfig):
    st = session.GpuPropsState(pytestconfig)
    passing = _v("sm_90", {"index": 0}, nodeid=NODEID)
    elsewhere = _v("sm_90", {"index": 0}, nodeid="t.py::test_other", status=assertions.FAIL)
    st.results.verdicts.append(elsewhere)  # another test's failure does not count for this one
    st.ingest(_report("failed", "boom", gpuprops_part=_part(passing)))
    assert [dataclasses.asdict(v) for v in st.results.verdicts] == [
        dataclasses.asdict(elsewhere), dataclasses.asdict(passing), _outside("ERROR", "call failed: boom")]


class _Item:
    """What power_bound_first reads of a pytest item: its name and its markers."""

    def __init__(self, name: str, *markers: str):
        self.name, self.markers = name, set(markers)

    def get_closest_marker(self, name):
        return name if name in self.markers else None


def test_the_power_bound_tests_run_first_and_every_other_test_keeps_its_order():
    items = [_Item("lds"), _Item("health", "gpu", "validation"), _Item("regbank"), _Item("clock", "validation"),
             _Item("dram"), _Item("rate", "validation")]
    session.power_bound_first(items)
    assert [i.name for i in items] == ["health", "clock", "rate", "lds", "regbank", "dram"]


def test_the_whole_suite_collects_the_stresses_before_the_latency_facts(pytester, monkeypatch):
    """Through the plugin, on the real hwtests: every validation-marked test comes before every other
    one in the collected order (the order a run and each xdist worker keep)."""
    from gp_testing import collect_hwtests
    ret, ids, tail = collect_hwtests(pytester, monkeypatch, "-k", "sustained_sm_clock or lds_latency or health")
    stress = [n for n, i in enumerate(ids) if "test_throughput_and_clocks" in i or "test_health" in i]
    others = [n for n, i in enumerate(ids) if n not in stress]
    assert stress and others and max(stress) < min(others), tail
