"""fixture layer: the objects the ``gpuprops`` and ``gpuprops_static`` fixtures hand to a test.

A :class:`FactChecker` measures kernels and checks them against this GPU's facts; a
:class:`StaticChecker` checks compile-time facts. What a test finds (verdicts, recorded facts, plot
points) waits on its item until the test's report carries it (plugin.pytest_runtest_makereport).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from typing import TYPE_CHECKING

import pytest

from . import assertions, confirmation, devices, driver_launch, facts_record, measure, nsight, timing
from . import facts as gp_facts
from .kernel_spec import KernelSpec
from .measurement import Measurement

if TYPE_CHECKING:
    from .session import GpuPropsState

_PART = pytest.StashKey[dict]()
#: the seconds a unit's checks may spend in one process measuring again readings that moved off its own baseline
#: (confirmation.confirm_move): a transient moves a reading or two a run, each measured twice more (a whole-GPU
#: stress 6 s a time, most facts well under a second); a unit that changed moves them all, and once this budget is
#: spent its readings are compared as read, so a changed unit's run is this much longer and the last confirmation
#: it began (at most two of its longest measurement: two zero-operand stresses, each after its cool-down)
MOVE_CONFIRM_BUDGET_S = 30.0


def _pending(item: pytest.Item) -> dict:
    """What a test found and has not yet handed to its report: verdicts, recorded facts, plot points."""
    if _PART not in item.stash:
        item.stash[_PART] = {"verdicts": [], "recorded": [], "plot_points": {}}
    return item.stash[_PART]


def reproduce_command(config: pytest.Config, nodeid: str, *, gpu: bool = False, index: int | None = None) -> str:
    """The command that runs one fact again as this session ran it: the facts it was checked
    against and, for GPU facts, the device, kernels and stop rule when they are not the defaults."""
    opt = config.option
    args = ["pytest", nodeid]
    index = opt.gpuprops_gpu if index is None else index
    if gpu and index:
        args += ["--gpu", str(index)]
    if opt.gpuprops_facts:
        args += ["--gpuprops-facts", str(opt.gpuprops_facts)]
    if gpu:
        if opt.gpuprops_kernels:
            args += ["--gpuprops-kernels", str(opt.gpuprops_kernels)]
        if opt.gpuprops_noise != 0.01:
            args += ["--gpuprops-noise", f"{opt.gpuprops_noise:g}"]
        if opt.gpuprops_budget != 2.0:
            args += ["--gpuprops-budget", f"{opt.gpuprops_budget:g}"]
    return " ".join(shlex.quote(a) for a in args)


def declared_facts(item) -> list[str]:
    """The fact names an item's ``fact`` markers declare, with its parameters filled in (``-k`` matches
    them, and a check of a fact its test does not declare is refused)."""
    import inspect
    params = dict(getattr(getattr(item, "callspec", None), "params", {}))
    names = []
    for marker in item.iter_markers("fact"):
        for arg in marker.args:
            if callable(arg):
                wanted = inspect.signature(arg).parameters
                names.append(str(arg(**{k: v for k, v in params.items() if k in wanted})))
            else:
                names.append(str(arg).format(**params))
    return names


def check_declared(node, fact: str) -> None:
    """A test checks only the facts it declares with ``@pytest.mark.fact``, so ``-k <fact>`` finds it."""
    declared = declared_facts(node) if hasattr(node, "iter_markers") else []
    if declared and fact not in declared:  # hwtests declare every fact (a test of the plugin checks that)
        raise UndeclaredFact(f"{node.nodeid} checks fact {fact} but declares {declared}: add "
                             f"@pytest.mark.fact({fact!r}) (or a template of the test's parameters) so that "
                             f"`pytest -k {fact}` selects it")


class UndeclaredFact(TypeError):
    """A test checked a fact it does not declare (``@pytest.mark.fact``)."""


class CannotConfirm(TypeError):
    """A GPU fact checked without a way to measure it again: its failure could not be confirmed."""


def confirm(first: assertions.Verdict, measure_again) -> assertions.Verdict:
    """:func:`confirmation.confirm`, where confirming a failure never ends in a skip: a measurement of a
    failing fact that was skipped while being measured again (``pytest.skip`` in ``measure_again``,
    as the ``ncu`` fixture does when Nsight Compute errors) or whose ncu errored leaves the failure
    standing, unconfirmed, with the reason in its flags. A real failure does not hide behind a skip;
    a skip before the first measurement (no GPU, no ncu at all) is not touched."""
    try:
        return confirmation.confirm(first, measure_again)
    except (pytest.skip.Exception, nsight.NcuUnavailable) as exc:
        unconfirmed = dataclasses.replace(first)
        unconfirmed.flags = [*first.flags, not_confirmed(exc)]
        return unconfirmed


def not_measured_again(exc: BaseException) -> str:
    """The flag of a reading off its unit's baseline whose measuring again stopped with ``exc`` (a skip, an
    ncu error): it is compared as read, never skipped, so a move cannot hide behind a skip."""
    reason = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
    return (f"{confirmation.MEASURED_AGAIN_OFF_BASELINE}, not measured again ({reason}): compared with the baseline "
            "as read")


def not_confirmed(exc: BaseException) -> str:
    """The flag of a failure whose confirmation stopped with ``exc`` (a skip, or an ncu error): what
    stopped it and what to do."""
    ncu = next((e for e in (exc, exc.__context__) if isinstance(e, nsight.NcuUnavailable)), None)
    if ncu is not None:
        return (f"not confirmed: measuring it again failed because Nsight Compute (ncu) errored: {ncu}; the first "
                "measurement failed, so this is reported as a failure, not skipped: check ncu (GPUPROPS_NCU, "
                "ncu --version, permission to read the GPU's counters: ERR_NVGPUCTRPERM) and run the reproduce "
                "command again")
    reason = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
    return (f"not confirmed: measuring it again was skipped ({reason}); the first measurement failed, so this is "
            "reported as a failure, not skipped: fix what made it skip and run the reproduce command again")


class FactChecker:
    """The per-test handle: measure, then check against this arch's fact, recording the verdict."""

    def __init__(self, request: pytest.FixtureRequest, state: GpuPropsState, index: int):
        self._request = request
        self._state = state
        self._index = index
        self.verdicts: list[assertions.Verdict] = []
        #: a pair test's peer GPU index: its verdicts name the pair (Verdict.peer)
        self.peer_index: int | None = None

    # -- measuring -------------------------------------------------------------------------------
    @property
    def gpu(self) -> devices.GpuInfo:
        return self._state.info(self._index)

    @property
    def runner(self) -> measure.Runner:
        return self._state.runner(self._index)

    def measure(self, name: str, spec: KernelSpec, **kw) -> Measurement:
        try:
            return self.runner.measure(name, spec, **kw)
        except timing.UncleanRegion as exc:
            if self._known_arch():
                pytest.fail(str(exc), pytrace=False)
            # a new arch: the compiler emits something else in the region, so this fact's method does
            # not hold there as it is; say so instead of measuring the wrong thing
            pytest.skip(f"the method of this fact does not hold on {self.gpu.arch} yet: {exc}")
        except driver_launch.KernelLaunchError as exc:
            pytest.fail(str(exc), pytrace=False)

    def _known_arch(self) -> bool:
        try:
            gp_facts.load_facts(self.gpu.arch, self._state.facts_path)
        except gp_facts.MissingFacts:
            return False
        return True

    # -- checking --------------------------------------------------------------------------------
    def reproduce(self) -> str:
        return reproduce_command(self._request.config, self._request.node.nodeid, gpu=True, index=self._index)

    def fact(self, name: str) -> gp_facts.Fact | None:
        facts = self._request.getfixturevalue("gpu_facts")
        if facts is None or name not in facts:
            if self._state.record_path:
                return None
            if facts is None:
                pytest.skip(f"no facts for {self.gpu.arch}: record them with --gpuprops-record {self.gpu.arch}.toml")
            try:
                facts.need(name)
            except gp_facts.MissingFacts as exc:  # not yet recorded for this arch or GPU: say how
                pytest.skip(str(exc))
        return facts[name]

    def expected(self, name: str) -> float:
        """A fact's value for model tests: from the facts file, or (record mode) from this session."""
        fact = self.fact(name)
        if name in self._state.results.recorded and (fact is None or self._state.record_path):
            return float(self._state.results.recorded[name].value)
        if fact is None:
            pytest.skip(f"needs fact {name}: record it first (its own test runs earlier in this session)")
        return float(fact.value)

    @property
    def fact_name(self) -> str:
        """The one fact this test declares (``@pytest.mark.fact``), its parameters filled in."""
        names = declared_facts(self._request.node)
        if len(names) != 1:
            raise UndeclaredFact(f"{self._request.node.nodeid} declares {names or 'no fact'}; fact_name needs "
                                 "exactly one @pytest.mark.fact")
        return names[0]

    def _identify(self, v: assertions.Verdict) -> assertions.Verdict:
        """``v`` named as the run's end names it: this test, this GPU, a pair fact's peer."""
        v.nodeid = self._request.node.nodeid
        v.gpu = self.gpu.identity()
        if self.peer_index is not None:
            v.peer = self._state.info(self.peer_index).identity()
        return v

    def _moved(self, v: assertions.Verdict) -> bool:
        return self._state.unit_baselines.moved(self._identify(dataclasses.replace(v)))

    def _confirm_move(self, v: assertions.Verdict, measure_again) -> assertions.Verdict:
        """confirmation.confirm_move, within this unit's MOVE_CONFIRM_BUDGET_S: a unit whose readings keep moving
        has changed, and measuring each again would only make its run longer."""
        uuid = self.gpu.uuid or str(self._index)
        spent = self._state.move_confirm_s.get(uuid, 0.0)
        if spent >= MOVE_CONFIRM_BUDGET_S:
            return v
        started = time.monotonic()
        try:
            return confirmation.confirm_move(v, self._moved, measure_again)
        except (pytest.skip.Exception, nsight.NcuUnavailable) as exc:  # the reading stands, compared as read
            return dataclasses.replace(v, flags=[*v.flags, not_measured_again(exc)])
        finally:
            self._state.move_confirm_s[uuid] = spent + time.monotonic() - started

    def _finish(self, v: assertions.Verdict) -> assertions.Verdict:
        check_declared(self._request.node, v.fact)
        self._identify(v)
        if not self._state.record_path:  # outside the SKU's population, and accepted for this unit: not red
            v = self._state.accepted.judge(v)
        self.verdicts.append(v)
        _pending(self._request.node)["verdicts"].append(v.as_dict())
        self._request.node.user_properties.append((f"gpuprops:{v.fact}", f"{v.measured} {v.unit} {v.verdict_text}"))
        assertions.raise_for(v)
        return v

    def check(self, name: str, m: Measurement, *, method: str = "", unit: str | None = None,
              benchmark=None, remeasure=None) -> assertions.Verdict:
        """Assert measurement ``m`` against fact ``name`` of this arch (or record it in record mode).

        A measurement outside its tolerance is measured again (``remeasure``, default: the
        measurement's own fresh-launch repeat) before the verdict: FAIL only if it fails every time,
        UNSTABLE if it does not; still FAIL, unconfirmed, if measuring it again skipped or its ncu
        errored (:func:`confirm`). Pass pytest-benchmark's ``benchmark`` fixture to store the
        per-launch values (in cycles) for --benchmark-save / --benchmark-compare.
        """
        m = planted_shift(m, name, self._index)
        if benchmark is not None:
            store_in_benchmark(benchmark, m, self.gpu)
        fact = self.fact(name)
        if fact is None or self._state.record_path:
            return self._finish(self._record(name, m, method, unit or m.unit, fact))
        again = remeasure or m.remeasure
        if again is None:
            raise CannotConfirm(f"fact {name}: its measurement cannot be repeated (a Measurement.given without "
                                "remeasure=), so a failure could not be confirmed; pass remeasure=<a function that "
                                "measures it again with fresh launches>")
        top, strict = self.gpu.max_sm_clock_mhz, self._state.strict_population
        first = assertions.evaluate(fact, m, reproduce=self.reproduce(), max_sm_clock_mhz=top, strict_population=strict)

        def measure_again():
            return assertions.evaluate(fact, again(), reproduce=self.reproduce(), max_sm_clock_mhz=top,
                                       strict_population=strict)
        return self._finish(self._confirm_move(confirm(first, measure_again), measure_again))

    def _record(self, name, m, method, unit, old):
        tol_abs, tol_rel = facts_record.default_tolerance(unit, m.reading, m.noise)
        if old is not None:  # keep the reviewed tolerance and method of an existing fact
            tol_abs, tol_rel, method = old.tolerance_abs, old.tolerance_rel, old.method
        info = self.gpu
        fact = gp_facts.Fact(name=name, arch=info.arch, unit=unit, method=method or f"{m.kernel} {m.launch}",
                             source=facts_record.provenance(info.name, info.driver_version, info.cuda_driver_version),
                             value=round(m.reading, 3), tolerance_abs=tol_abs, tolerance_rel=tol_rel)
        self._state.results.recorded[name] = fact
        _pending(self._request.node)["recorded"].append(dataclasses.asdict(fact))
        v = assertions.evaluate(fact, m, max_sm_clock_mhz=info.max_sm_clock_mhz)
        v.status = assertions.RECORDED if v.status not in (assertions.NOISY, assertions.ERROR) else v.status
        return v

    def check_model(self, name: str, cases, *, tolerance_rel: float, unit: str, method: str, source: str,
                    remeasure):
        """Assert that every (label, predicted, measured) case is within ``tolerance_rel`` of the
        model. A failure is measured again with ``remeasure() -> cases`` before it is reported."""
        def evaluate(cs):
            return assertions.evaluate_model(name, self.gpu.arch, cs, tolerance_rel=tolerance_rel, unit=unit,
                                             method=method, source=source, reproduce=self.reproduce())
        if remeasure is None:
            raise CannotConfirm(f"model {name}: pass remeasure=<a function that measures the cases again>, so a "
                                "failure can be confirmed")
        return self._finish(confirm(evaluate(cases), lambda: evaluate(remeasure())))

    def check_condition(self, name: str, judge, *, method: str, source: str):
        """Assert a property of a whole measurement (a sweep's knees, a curve's shape): ``judge() ->
        (holds, what was measured)`` measures afresh on every call. A property that does not hold is
        judged twice more, with fresh measurements, before it is reported, like every other fact."""
        def evaluate():
            holds, text = judge()
            return assertions.evaluate_condition(name, self.gpu.arch, holds, text, method=method, source=source,
                                                 reproduce=self.reproduce())
        return self._finish(confirm(evaluate(), evaluate))

    def plot_point(self, plot: str, **point) -> None:
        """One point of ``plot`` for the report, with the UUID of the GPU it was measured on (a run over a node's
        GPUs keeps every GPU's points in one list)."""
        point.setdefault("gpu", getattr(self.gpu, "uuid", "") or f"GPU {getattr(self.gpu, 'index', '?')}")
        _pending(self._request.node)["plot_points"].setdefault(plot, []).append(point)


def parse_plant_shift(text: str | None) -> tuple[int, str, float] | None:
    """``GPUPROPS_PLANT_SHIFT``'s value as (gpu index, fact, delta); None when unset. Checked at
    start-up (startup.check_options), so a typo is one usage error, not an error in every test."""
    if not text:
        return None
    parts = text.split(":")
    try:
        index, name, delta = int(parts[0]), parts[1], float(parts[2])
        if len(parts) != 3 or index < 0 or not name or delta != delta or abs(delta) == float("inf"):
            raise ValueError
    except (ValueError, IndexError):
        raise pytest.UsageError(f"GPUPROPS_PLANT_SHIFT={text!r}: expected <gpu index>:<fact>:<delta>, e.g. "
                                "0:lds_latency_cycles:1.15 (a test-only shift of one GPU's measurement of one "
                                "fact); unset it for a real run") from None
    return index, name, delta


def planted_shift(m: Measurement, fact: str, gpu_index: int) -> Measurement:
    """Test-only: ``GPUPROPS_PLANT_SHIFT="<gpu index>:<fact>:<delta>"`` adds delta to one GPU's
    measurement of one fact (and to its re-measurements), to check on real hardware that an
    outlier or a moved fact is flagged. The verdict says it was planted."""
    plant = parse_plant_shift(os.environ.get("GPUPROPS_PLANT_SHIFT"))
    if plant is None:
        return m
    index, name, delta = plant
    if index != gpu_index or name != fact:
        return m
    again = m.remeasure
    shifted = dataclasses.replace(m, values=[v + delta for v in m.values], kernel=f"{m.kernel} (planted {delta:+g})")
    shifted.remeasure = (lambda: planted_shift(again(), fact, gpu_index)) if again else None
    return shifted


class StaticChecker:
    """Checks compile-time facts (no GPU) against an arch's facts file, per compiler version."""

    def __init__(self, request: pytest.FixtureRequest, state: GpuPropsState):
        self._request = request
        self._state = state

    def check(self, arch: str, name: str, value: float, compiler: str) -> assertions.Verdict:
        try:
            fact = gp_facts.load_facts(arch, self._state.facts_path).need(name)
        except gp_facts.MissingFacts as exc:
            pytest.skip(str(exc))
        check_declared(self._request.node, name)
        v = assertions.evaluate_static(fact, value, compiler,
                                       reproduce=reproduce_command(self._request.config, self._request.node.nodeid))
        v.nodeid = self._request.node.nodeid
        _pending(self._request.node)["verdicts"].append(v.as_dict())
        self._request.node.user_properties.append((f"gpuprops:{name}", f"{value} {fact.unit} {v.verdict_text}"))
        assertions.raise_for(v)
        return v


def store_in_benchmark(benchmark, m: Measurement, info: devices.GpuInfo) -> None:
    """Store ``m``'s per-launch values (cycles, not seconds) as this test's benchmark stats.

    pytest-benchmark times callables with its timer; here the "timer" is a cycle counter that a
    replay of the recorded values advances, so its statistics, --benchmark-save and
    --benchmark-compare-fail work on cycles. Disabled under xdist, like pytest-benchmark itself.
    """
    values = iter(m.values)
    clock = [0.0]

    def replay():
        clock[0] += next(values)

    benchmark._timer = lambda: clock[0]
    benchmark.extra_info.update(unit=m.unit, gpu=info.name, arch=info.arch, stop_reason=m.stop_reason,
                                noise=m.noise, sm_clock_mhz=m.sm_clock_mhz)
    benchmark.pedantic(replay, rounds=len(m.values), iterations=1, warmup_rounds=0)
