"""The fixture layer (fixture.py) fed given numbers, with stand-in requests and session state:
the command a verdict prints to run the fact again, the planted shift a validation run uses to prove
a failure is caught, and what FactChecker measures, checks, records and hands to the report. And
from a row of the facts table to a rerun: every fact a test checks is declared on it
(``@pytest.mark.fact``), so ``pytest -k <fact name>`` selects that test; a check of an undeclared
fact is refused. Expected values are written out by hand."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest
from gp_testing import fake_gpu_conftest

from pytest_gpuprops import (
    accepted_units,
    assertions,
    baselines,
    devices,
    driver_launch,
    measure,
    results,
    timing,
)
from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops.fixture import (
    MOVE_CONFIRM_BUDGET_S,
    FactChecker,
    UndeclaredFact,
    _pending,
    check_declared,
    declared_facts,
    planted_shift,
    reproduce_command,
)
from pytest_gpuprops.kernel_spec import KernelSpec


def _config(**options):
    opt = dict(gpuprops_gpu=0, gpuprops_facts=None, gpuprops_kernels=None, gpuprops_noise=0.01, gpuprops_budget=2.0)
    opt.update(options)
    return SimpleNamespace(option=SimpleNamespace(**opt))


# -- the reproduce command ---------------------------------------------------------------------------

def test_a_default_run_reproduces_as_plain_pytest_of_the_node():
    assert reproduce_command(_config(), "t.py::test_a") == "pytest t.py::test_a"
    assert reproduce_command(_config(), "t.py::test_a", gpu=True) == "pytest t.py::test_a"


def test_a_static_fact_names_only_the_facts_file_whatever_the_gpu_options():
    cfg = _config(gpuprops_gpu=3, gpuprops_facts="my facts.toml", gpuprops_kernels="k", gpuprops_noise=0.05,
                  gpuprops_budget=7.0)
    assert reproduce_command(cfg, "t.py::test_a[x y]") == "pytest 't.py::test_a[x y]' --gpuprops-facts 'my facts.toml'"
    assert reproduce_command(cfg, "t.py::test_a", index=2) == "pytest t.py::test_a --gpuprops-facts 'my facts.toml'"


def test_a_gpu_fact_names_the_device_kernels_and_stop_rule_that_differ_from_the_defaults():
    cfg = _config(gpuprops_gpu=3, gpuprops_facts="f.toml", gpuprops_kernels="kern", gpuprops_noise=0.05,
                  gpuprops_budget=7.0)
    assert reproduce_command(cfg, "t.py::test_a", gpu=True) == (
        "pytest t.py::test_a --gpu 3 --gpuprops-facts f.toml --gpuprops-kernels kern --gpuprops-noise 0.05 "
        "--gpuprops-budget 7")
    # the GPU the fact ran on wins over --gpu (a --gpuprops-gpus run); GPU 0 is pytest's default
    assert reproduce_command(cfg, "t.py::test_a", gpu=True, index=2).startswith("pytest t.py::test_a --gpu 2 ")
    assert reproduce_command(cfg, "t.py::test_a", gpu=True, index=0).startswith("pytest t.py::test_a --gpuprops-facts")
    assert reproduce_command(_config(gpuprops_noise=0.2), "n", gpu=True) == "pytest n --gpuprops-noise 0.2"
    assert reproduce_command(_config(gpuprops_budget=0.5), "n", gpu=True) == "pytest n --gpuprops-budget 0.5"
    assert reproduce_command(_config(gpuprops_kernels="kern"), "n", gpu=True) == "pytest n --gpuprops-kernels kern"


# -- the planted shift -------------------------------------------------------------------------------

def _given(values, again=None, **kw):
    m = measure.Measurement.given("lds", values, **kw)
    m.remeasure = again
    return m


def test_without_a_plant_the_measurement_is_handed_back_untouched(monkeypatch):
    monkeypatch.delenv("GPUPROPS_PLANT_SHIFT", raising=False)
    m = _given([23.0] * 5)
    assert planted_shift(m, "lds", 0) is m
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", "")
    assert planted_shift(m, "lds", 0) is m


@pytest.mark.parametrize("plant", ["1:lds:5", "0:other:5", "1:other:5"])
def test_a_plant_for_another_gpu_or_fact_changes_nothing(monkeypatch, plant):
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", plant)
    m = _given([23.0] * 5)
    assert planted_shift(m, "lds", 0) is m


def test_a_plant_shifts_every_value_says_so_and_shifts_the_remeasurements_too(monkeypatch):
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", "2:lds:-2.5")
    again = _given([30.0, 31.0])
    m = _given([23.0, 24.0, 25.0], again=lambda: again)
    shifted = planted_shift(m, "lds", 2)
    assert shifted.values == [20.5, 21.5, 22.5] and shifted.kernel == "(given) (planted -2.5)"
    assert (shifted.name, shifted.unit, shifted.stop_reason) == ("lds", "cycles", "converged")
    assert m.values == [23.0, 24.0, 25.0]  # the original is not changed
    second = shifted.remeasure()
    assert second.values == [27.5, 28.5] and second.kernel == "(given) (planted -2.5)"
    assert second.remeasure is None  # the re-measurement had no re-measurement of its own
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", "0:lds:5")
    assert planted_shift(_given([1.0]), "lds", 0).kernel == "(given) (planted +5)"
    assert planted_shift(_given([1.0]), "lds", 0).remeasure is None


@pytest.mark.parametrize("plant", ["x", "0:lds", "a:lds:1", "0:lds:x", "0:lds:1:2", "0 lds 5", "-1:lds:1", "0::1",
                                   "0:lds:nan", "0:lds:inf"])
def test_a_malformed_plant_is_a_usage_error_that_shows_the_form(monkeypatch, plant):
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", plant)
    with pytest.raises(pytest.UsageError) as exc:
        planted_shift(_given([1.0]), "lds", 0)
    assert str(exc.value) == (f"GPUPROPS_PLANT_SHIFT={plant!r}: expected <gpu index>:<fact>:<delta>, e.g. "
                              "0:lds_latency_cycles:1.15 (a test-only shift of one GPU's measurement of one fact); "
                              "unset it for a real run")


# -- FactChecker, with a stand-in request and session state --------------------------------------------

GPU = devices.GpuInfo(2, "Fake GPU", "sm_99", 132, "580.0", "13.0", "13.0", "0000:02:00.0", 1980, "GPU-2", "node1")
LDS = gp_facts.Fact(name="lds", arch="sm_99", unit="cycles", method="chain", source="seed", value=23.0,
                    tolerance_abs=0.5)


class _Runner:
    def __init__(self, result=None, error=None):
        self.calls, self.result, self.error = [], result, error

    def measure(self, name, spec, **kw):
        self.calls.append((name, spec, kw))
        if self.error:
            raise self.error
        return self.result


class _State:
    def __init__(self, runner=None, facts_path=None, record_path=None):
        self._runner, self.facts_path, self.record_path = runner, facts_path, record_path
        self.strict_population = False  # --gpuprops-population reach
        self.results = results.SessionResults()
        self.asked = []
        #: no unit baseline: an outside-the-population FAIL stays one (tests/test_accepted_units.py has the rest)
        self.accepted = accepted_units.AcceptedUnits(None, baselines.NONE)
        #: nor a baseline to move off (the checks against one are below and in tests/test_baselines.py)
        self.unit_baselines = accepted_units.UnitBaselines(None, baselines.NONE)
        self.move_confirm_s = {}

    def info(self, index):
        self.asked.append(index)
        return GPU

    def runner(self, index):
        self.asked.append(index)
        return self._runner


def _outcome(call) -> BaseException:
    """What pytest.fail / pytest.skip raised inside ``call``, caught whichever it is (a skip where a
    failure is expected would otherwise skip the test instead of failing it)."""
    try:
        call()
    except (pytest.fail.Exception, pytest.skip.Exception) as exc:
        return exc
    raise AssertionError("neither failed nor skipped")


def _checker(facts=None, *, state=None, **options):
    node = SimpleNamespace(nodeid="t.py::test_fact", stash=pytest.Stash(), user_properties=[])
    request = SimpleNamespace(config=_config(**options), node=node,
                              getfixturevalue=lambda name: {"gpu_facts": facts}[name])
    return FactChecker(request, state or _State(), 2), node


def _facts(*fs):
    return gp_facts.Facts("sm_99", None, {f.name: f for f in fs}, {})


def test_measure_hands_name_spec_and_options_to_this_gpus_runner():
    m = _given([23.0])
    state = _State(_Runner(m))
    checker, _ = _checker(state=state)
    spec = KernelSpec("x.cu", "k")
    assert checker.measure("lds", spec, divisor=4, warps=2) is m
    assert state._runner.calls == [("lds", spec, {"divisor": 4, "warps": 2})] and state.asked == [2]


def test_an_unclean_region_fails_on_an_arch_with_facts_and_skips_on_a_new_one(tmp_path):
    (tmp_path / "f.toml").write_text('arch = "sm_99"\n[lds]\nvalue = 23\ntolerance_abs = 0.5\nunit = "cycles"\n'
                                     'method = "m"\nsource = "s"\n')
    unclean = timing.UncleanRegion("LDCU in the region")
    known, _ = _checker(state=_State(_Runner(error=unclean), facts_path=str(tmp_path / "f.toml")))
    failed = _outcome(lambda: known.measure("lds", KernelSpec("x.cu", "k")))
    assert type(failed) is pytest.fail.Exception and failed.msg == "LDCU in the region" and failed.pytrace is False
    new, _ = _checker(state=_State(_Runner(error=unclean)))  # sm_99 has no packaged facts
    skipped = _outcome(lambda: new.measure("lds", KernelSpec("x.cu", "k")))
    assert type(skipped) is pytest.skip.Exception
    assert skipped.msg == "the method of this fact does not hold on sm_99 yet: LDCU in the region"


def test_a_launch_error_fails_the_test_with_its_message_and_no_traceback():
    checker, _ = _checker(state=_State(_Runner(error=driver_launch.KernelLaunchError("k: illegal address"))))
    failed = _outcome(lambda: checker.measure("lds", KernelSpec("x.cu", "k")))
    assert type(failed) is pytest.fail.Exception and failed.msg == "k: illegal address" and failed.pytrace is False


def test_a_passing_check_is_kept_on_the_checker_the_item_and_the_junit_properties():
    checker, node = _checker(_facts(LDS), gpuprops_facts="f.toml")
    v = checker.check("lds", _given([23.0] * 5, again=lambda: _given([23.0] * 5)))
    assert v.status == assertions.PASS and checker.verdicts == [v]
    assert v.nodeid == "t.py::test_fact" and v.gpu == GPU.identity()
    assert v.reproduce == "pytest t.py::test_fact --gpu 2 --gpuprops-facts f.toml"
    assert _pending(node)["verdicts"] == [v.as_dict()] and _pending(node)["recorded"] == []
    assert node.user_properties == [("gpuprops:lds", "23.0 cycles PASS")]


class _Baseline:
    """A unit baseline of 23.0 with a 1 % same-unit band, as the checker asks it (accepted_units.UnitBaselines)."""

    def __init__(self):
        self.asked = []

    def moved(self, v):
        self.asked.append((v.nodeid, v.gpu["uuid"], v.measured))
        return abs(v.measured - 23.0) > 0.23


def test_a_reading_off_its_units_baseline_is_measured_twice_more_and_the_median_judges():
    state = _State()
    state.unit_baselines = _Baseline()
    checker, _ = _checker(_facts(LDS), state=state)
    again = iter([23.05, 22.98])
    v = checker.check("lds", _given([23.4] * 5, again=lambda: _given([next(again)] * 5)))
    assert v.status == assertions.PASS and v.measured == 23.05 and checker.verdicts == [v]
    assert "off its unit's baseline in 1 of 3 measurements" in v.flags[-1]
    # asked as the run's end names the reading: this test, this GPU
    assert state.unit_baselines.asked[0] == ("t.py::test_fact", "GPU-2", 23.4)
    assert 0 < state.move_confirm_s["GPU-2"] < 0.5  # the seconds it took, from none


def test_a_moved_reading_whose_measuring_again_is_skipped_stands_and_is_not_skipped():
    """A move must not hide behind a skip (ncu errors while measuring again, as in the FAIL path): the reading
    is kept as read, flagged, and the run's end compares it."""
    state = _State()
    state.unit_baselines = _Baseline()
    checker, _ = _checker(_facts(LDS), state=state)
    v = checker.check("lds", _given([23.4] * 5, again=lambda: pytest.skip("ncu: ERR_NVGPUCTRPERM")))
    assert v.status == assertions.PASS and v.measured == 23.4 and checker.verdicts == [v]
    assert v.flags[-1] == ("off its unit's baseline, not measured again (ncu: ERR_NVGPUCTRPERM): compared with the "
                           "baseline as read")


def test_a_gpu_without_a_uuid_keeps_its_move_budget_by_its_index(monkeypatch):
    state = _State()
    state.unit_baselines = _Baseline()
    monkeypatch.setattr(state, "info", lambda index: dataclasses.replace(GPU, uuid=""))
    checker, _ = _checker(_facts(LDS), state=state)
    checker.check("lds", _given([23.4] * 5, again=lambda: _given([23.0] * 5)))
    assert list(state.move_confirm_s) == ["2"]


def test_past_its_budget_a_units_moved_readings_are_compared_as_read(monkeypatch):
    """A unit that changed moves every reading: past MOVE_CONFIRM_BUDGET_S in a process they are not measured
    again, so its run is at most that much longer."""
    state = _State()
    state.unit_baselines = _Baseline()
    state.move_confirm_s["GPU-2"] = MOVE_CONFIRM_BUDGET_S
    checker, _ = _checker(_facts(LDS), state=state)
    v = checker.check("lds", _given([23.4] * 5, again=lambda: pytest.fail("measured again past the budget")))
    assert v.measured == 23.4 and v.attempts == [] and state.unit_baselines.asked == []


def test_the_planted_shift_reaches_the_check_for_this_fact_on_this_gpu(monkeypatch):
    monkeypatch.setenv("GPUPROPS_PLANT_SHIFT", "2:lds:5")
    checker, _ = _checker(_facts(LDS))
    with pytest.raises(assertions.FactMismatch):
        checker.check("lds", _given([23.0] * 5, again=lambda: _given([23.0] * 5)))
    assert checker.verdicts[0].measured == 28.0 and checker.verdicts[0].measurement["kernel"] == "(given) (planted +5)"


def test_a_failure_that_passes_when_measured_again_is_unstable_and_lists_every_attempt():
    checker, _ = _checker(_facts(LDS))
    again = iter([_given([23.0] * 5), _given([30.0] * 5)])  # a failure is measured twice more
    with pytest.raises(assertions.UnstableMeasurement):
        checker.check("lds", _given([30.0] * 5), remeasure=lambda: next(again))
    v = checker.verdicts[0]
    assert v.status == assertions.UNSTABLE and [a["measured"] for a in v.attempts] == [30.0, 23.0, 30.0]
    # without a remeasure of its own, the measurement's own repeat is used
    checker, _ = _checker(_facts(LDS))
    with pytest.raises(assertions.FactMismatch):
        checker.check("lds", _given([30.0] * 5, again=lambda: _given([31.0] * 5)))
    assert [a["measured"] for a in checker.verdicts[0].attempts] == [30.0, 31.0, 31.0]


def test_a_model_check_carries_its_unit_method_source_and_command_and_is_measured_again():
    checker, node = _checker(_facts(LDS))
    v = checker.check_model("bank_model", [("a", 10.0, 10.1)], tolerance_rel=0.02, unit="cycles",
                            method="pairs of FFMA", source="seed 2", remeasure=lambda: [("a", 10.0, 10.1)])
    assert (v.status, v.arch, v.unit, v.method, v.source) == (assertions.PASS, "sm_99", "cycles", "pairs of FFMA", "seed 2")
    assert v.reproduce == "pytest t.py::test_fact --gpu 2" and checker.verdicts == [v]
    asked = []
    with pytest.raises(assertions.UnstableMeasurement):
        checker.check_model("bank_model", [("a", 10.0, 12.0)], tolerance_rel=0.02, unit="cycles", method="m",
                            source="s", remeasure=lambda *a: asked.append(a) or [("a", 10.0, 10.0)])
    assert asked == [(), ()] and checker.verdicts[1].status == assertions.UNSTABLE
    assert [a["measured"] for a in checker.verdicts[1].attempts] == [0.0, 1.0, 1.0]  # cases on the model


def test_record_mode_writes_the_fact_with_its_unit_method_rounded_value_and_default_tolerance():
    state = _State(record_path="r.toml")
    checker, node = _checker(None, state=state)
    v = checker.check("bw", _given([100.12345] * 5), method="streaming STS", unit="bytes/cycle")
    today = dt.date.today().isoformat()
    want = gp_facts.Fact(name="bw", arch="sm_99", unit="bytes/cycle", method="streaming STS",
                         source=f"measured on Fake GPU, driver 580.0, CUDA 13.0, {today}", value=100.123,
                         tolerance_abs=0.0, tolerance_rel=0.03)
    assert state.results.recorded == {"bw": want} and v.status == assertions.RECORDED
    assert _pending(node)["recorded"] == [dict(want.__dict__)]
    # a latency in cycles gets the 0.5-cycle floor; no method given: the kernel and launch name it
    checker.check("lat", _given([23.12355] * 5, launch={"warps": 1}))
    lat = state.results.recorded["lat"]
    assert (lat.unit, lat.value, lat.tolerance_abs, lat.tolerance_rel) == ("cycles", 23.124, 0.5, 0.0)
    assert lat.method == "(given) {'warps': 1}"


def test_a_noisy_measurement_in_record_mode_says_noisy_not_recorded():
    checker, _ = _checker(None, state=_State(record_path="r.toml"))
    with pytest.raises(assertions.NoisyMeasurement):
        checker.check("lat", _given([10.0, 20.0, 30.0, 40.0, 50.0]))
    assert checker.verdicts[0].status == assertions.NOISY


def test_an_impossible_reading_in_record_mode_is_an_error_not_a_recording():
    """A clock above the GPU's maximum (NVML's 1980 MHz + one 15 MHz step + 0.5) cannot be recorded as a fact
    silently."""
    checker, _ = _checker(None, state=_State(record_path="r.toml"))
    with pytest.raises(assertions.ImpossibleReading, match="gave a physically impossible reading"):
        checker.check("sustained_sm_clock_ffma_mhz", _given([2011.0] * 5, unit="MHz"))
    assert checker.verdicts[0].status == assertions.ERROR
    assert checker.verdicts[0].flags == ["physically impossible reading: a clock above the GPU's maximum: 2011.0 MHz, "
                                         "over the 1980 MHz NVML reports (+ 16.0 MHz: one clock step and the reading "
                                         "width)"]
    assert checker.check("sustained_sm_clock_tensor_mhz", _given([1980.4] * 5, unit="MHz")).status == assertions.RECORDED


def test_expected_reads_the_facts_file_outside_record_mode_even_after_a_recording():
    state = _State()
    state.results.recorded["lds"] = gp_facts.Fact(name="lds", arch="sm_99", unit="cycles", method="m", source="s",
                                                  value=99.0)
    checker, _ = _checker(_facts(LDS), state=state)
    assert checker.expected("lds") == 23.0
    state.record_path = "r.toml"
    assert checker.expected("lds") == 99.0


def test_no_facts_for_the_arch_skips_saying_how_to_record_them():
    checker, _ = _checker(None)
    with pytest.raises(pytest.skip.Exception) as skipped:
        checker.fact("lds")
    assert skipped.value.msg == "no facts for sm_99: record them with --gpuprops-record sm_99.toml"


# ----------------------------------------------------------------------------------------------
# declared facts: from a row of the facts table to a rerun


HWTESTS = Path(__file__).parent.parent / "hwtests"
CHECKS = {"check", "check_model", "check_condition"}


def _checks_a_fact(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CHECKS
               and isinstance(n.func.value, ast.Name) and n.func.value.id in ("gpuprops", "gpuprops_static")
               for n in ast.walk(fn))


def _declares(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "fact"
               for d in fn.decorator_list)


def test_every_hwtests_fact_test_declares_its_facts():
    undeclared = [f"{path.name}::{fn.name}" for path in sorted(HWTESTS.glob("test_*.py"))
                  for fn in ast.parse(path.read_text()).body
                  if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_") and _checks_a_fact(fn)
                  and not _declares(fn)]
    assert undeclared == []


FACT_TESTS = '''
import pytest
from pytest_gpuprops.measure import Measurement

LEVEL = {"l1": "l1_hit_latency_cycles", "dram": "dram_latency_cycles"}


@pytest.mark.gpu
@pytest.mark.fact(lambda level: LEVEL[level])
@pytest.mark.parametrize("level", ["l1", "dram"])
def test_chase_latency(gpuprops, level):
    m = Measurement.given("x", [1.0])
    m.remeasure = lambda: Measurement.given("x", [1.0])
    gpuprops.check(gpuprops.fact_name, m, method="given")


@pytest.mark.gpu
@pytest.mark.fact("{op}_latency_cycles")
@pytest.mark.parametrize("op", ["imad", "dfma"])
def test_alu(gpuprops, op):
    m = Measurement.given("x", [1.0])
    m.remeasure = lambda: Measurement.given("x", [1.0])
    gpuprops.check("imad_latency_cycles", m, method="given")
'''


@pytest.mark.parametrize("fact, selected", [
    ("l1_hit_latency_cycles", ["test_chase_latency[l1]"]),
    ("dram_latency_cycles", ["test_chase_latency[dram]"]),
    ("dfma_latency_cycles", ["test_alu[dfma]"]),
    ("latency_cycles and not chase", ["test_alu[imad]", "test_alu[dfma]"]),
])
def test_k_with_a_fact_name_selects_the_test_that_checks_it(pytester, fact, selected):
    pytester.makepyfile(test_facts=FACT_TESTS)
    r = pytester.runpytest_inprocess("--co", "-q", "-k", fact, "-p", "no:randomly")
    assert [ln.split("::")[-1] for ln in r.stdout.lines if "::" in ln] == selected


def test_a_check_of_a_fact_its_test_does_not_declare_is_refused(pytester):
    """test_alu[dfma] checks imad_latency_cycles: `-k imad` would miss the dfma case."""
    pytester.makeconftest(fake_gpu_conftest("sm_99"))
    pytester.makepyfile(test_facts=FACT_TESTS)
    r = pytester.runpytest_inprocess("-k", "test_alu", "-p", "no:randomly", "--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["E *UndeclaredFact: test_facts.py::test_alu[[]dfma[]] checks fact imad_latency_cycles "
                            "but declares [[]'dfma_latency_cycles'[]]: add @pytest.mark.fact('imad_latency_cycles')*"])


def test_declared_facts_fill_templates_and_call_functions_with_the_parameters():
    class Item:
        nodeid = "t.py::test_x[a-2]"
        callspec = type("C", (), {"params": {"op": "a", "n": 2}})()

        def iter_markers(self, name):
            return [pytest.mark.fact("{op}_n{n}", lambda n: f"x{n * 2}").mark]
    assert declared_facts(Item()) == ["a_n2", "x4"]
    check_declared(Item(), "x4")
    with pytest.raises(UndeclaredFact, match=r"checks fact y but declares \['a_n2', 'x4'\]"):
        check_declared(Item(), "y")
