"""session layer: per-session state of the plugin: options, the GPUs (made lazily), and the
session's results, fed test by test from the reports (this process's or an xdist worker's), and the
run's end on the controller (how it went, the fleet and baseline verdicts, the run stored)."""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from pathlib import Path

import pytest

from . import accepted_units, assertions, baselines, devices, inputs, measure, nsight, results, stats


def power_bound_first(items: list) -> None:
    """The tests marked ``validation`` (health, sustained clocks, rates in time units) run first, the
    others after in their order: under its power cap a GPU's sustained clock follows the thermal state a
    stress starts from, and a stress that came after the suite's other facts started from the heat they
    left (the tensor stress read 1514.7-1539.2 MHz in whole-suite runs on four H100s of two-GPU nodes,
    1593.5 / 1608.9 on two of them run alone, 2026-11-26). First, each starts from the state the GPU
    was in when the run began, as in ``pytest hwtests -m validation``."""
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("validation") is None)


class GpuSlot:
    """One GPU of the session: its info (or why it cannot be used) and its runner, made lazily."""

    def __init__(self, index: int):
        self.index = index
        self.info: devices.GpuInfo | None = None
        self.unavailable: str | None = None
        self.runner: measure.Runner | None = None


class GpuPropsState:
    """Per-session state: options, the GPUs (lazily), and the session's results."""

    def __init__(self, config: pytest.Config):
        self.config = config
        opt = config.option
        self.gpu_index: int = opt.gpuprops_gpu or 0
        self.gpus_option: str | None = getattr(opt, "gpuprops_gpus", None)
        self.facts_path = opt.gpuprops_facts
        self.record_path = opt.gpuprops_record
        #: every reading outside the band of a fact that differs by unit fails (assertions.POPULATION_REACH)
        self.strict_population = getattr(opt, "gpuprops_population", "reach") == "strict"
        self.force = opt.gpuprops_force
        self.report_path = opt.gpuprops_report
        self.compare_path = getattr(opt, "gpuprops_compare", None)
        #: what each unit is compared with: baselines.LAST (the store), baselines.NONE, or a file
        self.baseline_choice: str = self.compare_path or getattr(opt, "gpuprops_baseline", None) or baselines.LAST
        self.baseline_option = "--gpuprops-compare" if self.compare_path else "--gpuprops-baseline"
        self.baseline_accept: bool = bool(getattr(opt, "gpuprops_baseline_accept", False))
        self.store = baselines.Store(getattr(opt, "gpuprops_baselines", None) or baselines.default_dir())
        self.baseline_of: dict[str, baselines.Baseline] = {}
        #: the readings each unit's baseline accepted outside its SKU's population (read where checked)
        self.accepted = accepted_units.AcceptedUnits(self.store, self.baseline_choice)
        #: each unit's baseline readings as its checks see them, and the seconds each unit's checks spent measuring
        #: again readings that moved off them (fixture.MOVE_CONFIRM_BUDGET_S)
        self.unit_baselines = accepted_units.UnitBaselines(self.store, self.baseline_choice)
        self.move_confirm_s: dict[str, float] = {}
        self.baseline_notes: list[str] = []
        self.stored: list[tuple] = []
        self.plots_dir = opt.gpuprops_plots
        root = Path(str(config.rootpath))
        self.kernels_dir = Path(opt.gpuprops_kernels) if opt.gpuprops_kernels else root / "kernels"
        self.stop = stats.StopRule(noise_target=opt.gpuprops_noise, time_budget_s=opt.gpuprops_budget)
        self.results = results.SessionResults()
        self.fleet: list[assertions.Verdict] = []
        self.fleet_note = ""
        self.worker_id: str | None = getattr(config, "workerinput", {}).get("workerid")
        self._slots: dict[int, GpuSlot] = {}
        self._gpu_list: list[int] | None = None
        #: how the run went: tests selected (every worker's, under xdist) and tests that finished (their
        #: teardown reported); results.run_status() at the session's end
        self.selected = 0
        self.finished = 0
        self.run: dict | None = None
        #: why the run is a usage error after all, found at its end (inputs.facts_matched_nothing)
        self.facts_note: str | None = None
        #: ncu profiles started ahead of their tests (nsight.NcuJob), by nsight.ncu_key
        self._ncu_jobs: dict[tuple, nsight.NcuJob] = {}

    # -- which GPUs ----------------------------------------------------------------------------
    def gpu_list(self) -> list[int]:
        """The GPUs to measure: --gpuprops-gpus (all, or a list), else the one of --gpu."""
        if self._gpu_list is None:
            self._gpu_list = parse_gpus(self.gpus_option, devices.visible_gpu_count) if self.gpus_option \
                else [self.gpu_index]
        return self._gpu_list

    def default_index(self) -> int:
        """This process's GPU: under xdist with --gpuprops-gpus, worker gwK measures the K-th GPU."""
        gpus = self.gpu_list()
        if self.worker_id and self.gpus_option:
            k = int(self.worker_id.lstrip("gw") or 0)
            return gpus[k] if k < len(gpus) else -1
        return gpus[0] if gpus else self.gpu_index

    def slot(self, index: int | None = None) -> GpuSlot:
        index = self.default_index() if index is None else index
        if index not in self._slots:
            s = GpuSlot(index)
            if index < 0:
                s.unavailable = (f"xdist worker {self.worker_id} has no GPU of its own: --gpuprops-gpus lists "
                                 f"{len(self.gpu_list())}; run with -n {len(self.gpu_list())}")
            else:
                s.unavailable = devices.gpu_unavailable_reason(index)
            if s.unavailable is None:
                try:
                    s.info = devices.gpu_info(index)
                except devices.GpuUnavailable as exc:
                    s.unavailable = str(exc)
            self._slots[index] = s
        return self._slots[index]

    def gpu_reason(self, index: int | None = None) -> str | None:
        return self.slot(index).unavailable

    def info(self, index: int | None = None) -> devices.GpuInfo:
        s = self.slot(index)
        if s.unavailable:
            pytest.skip(f"needs a GPU: {s.unavailable}")
        return s.info  # type: ignore[return-value]

    def runner(self, index: int | None = None) -> measure.Runner:
        s = self.slot(index)
        if s.runner is None:
            s.runner = measure.Runner(self.info(index), self.kernels_dir, stop=self.stop,
                                      cache_dir=self.config.option.gpuprops_cache)
        return s.runner

    def close(self) -> None:
        """The session's end: each runner's folder of the cubins it loaded (``gpuprops-mod-*``; the
        driver read each file when it loaded it) goes with it, not left in the temporary folder."""
        for s in self._slots.values():
            close = getattr(s.runner, "close", None)  # a stand-in runner has none
            if callable(close):
                close()

    def start_ncu(self, specs, metrics: list[str], index: int | None = None) -> bool:
        """Start the ncu profile a selected test will ask for now, in the background (nsight.NcuJob);
        False where there is no GPU or ncu cannot profile here (the test then says why itself)."""
        if self.gpu_reason(index) or nsight.ncu_unavailable_reason():
            return False
        job = nsight.NcuJob(self.runner(index), specs, metrics)
        self._ncu_jobs[job.key] = job
        return True

    def ncu_profile(self, specs, metrics: list[str], index: int | None = None) -> list[dict[str, float]]:
        """The metrics of one launch of each spec under ncu: from the job started ahead for exactly
        these specs and metrics (once: a second ask profiles again), else profiled now."""
        job = self._ncu_jobs.pop(nsight.ncu_key(specs, metrics), None)
        if job is not None:
            return job.result()
        return nsight.ncu_metrics(self.runner(index), specs, metrics)

    def gpu_busy(self) -> tuple[float, int]:
        """Kernel seconds and launches timed so far by this process's runners (measure.Runner)."""
        runners = [s.runner for s in self._slots.values() if s.runner is not None]
        return (sum(getattr(r, "gpu_busy_s", 0.0) for r in runners),  # a stand-in runner may keep neither
                sum(getattr(r, "launches", 0) for r in runners))

    @property
    def _info(self) -> devices.GpuInfo | None:
        """The first GPU measured in this process (for the report's header and record mode)."""
        return next((s.info for s in self._slots.values() if s.info is not None), None)

    def meta(self) -> dict:
        import socket

        from . import compile as gp_compile
        from . import sass
        meta = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "host": socket.gethostname()}
        try:
            meta["compiler"] = gp_compile.compiler_version()
        except Exception as exc:  # no NVRTC: the report still says so
            meta["compiler"] = f"unavailable ({exc})"
        try:
            meta["nvdisasm"] = sass.nvdisasm_version()
        except Exception as exc:
            meta["nvdisasm"] = f"unavailable ({exc})"
        gpus = {json.dumps(v.gpu, sort_keys=True) for v in self.results.verdicts if v.gpu}
        if self._info is not None:
            meta["gpu"] = self._info.as_dict()
            meta["arch"] = self._info.arch
        elif gpus:
            first = json.loads(sorted(gpus)[0])
            meta["gpu"] = first
            meta["arch"] = next((v.arch for v in self.results.verdicts if v.gpu), "?")
        meta["gpus"] = [json.loads(g) for g in sorted(gpus)]
        return meta

    # -- results -------------------------------------------------------------------------------
    def ingest(self, report: pytest.TestReport) -> None:
        """Take a test's verdicts from its report (this process's, or an xdist worker's), and make
        sure a failing or skipped fact test shows in the table even without a verdict of its own."""
        part = getattr(report, "gpuprops_part", None)
        if part:
            self.results.add(part)
        mine = [v for v in self.results.verdicts if v.nodeid == report.nodeid]
        if report.failed and not any(v.status in assertions.NOT_OK for v in mine):
            self.results.verdicts.append(_outside_verdict(report, assertions.ERROR))
        elif report.skipped and not mine and ("gpu" in report.keywords or "static" in report.keywords):
            self.results.verdicts.append(_outside_verdict(report, assertions.SKIPPED))


    # -- the end of the run ----------------------------------------------------------------------
    def finish(self, exitstatus: int, collect_only: bool) -> int:
        """The run's end on the controller: whether --gpuprops-facts matched nothing (what the collection
        check cannot see under xdist), how the run went, the fleet's outliers and each unit's MOVED
        facts against its baseline, and this run stored as each unit's latest. Returns the session's
        exit status: a usage error, or a failure where selected tests did not run or the fleet is red."""
        verdicts = self.results.verdicts
        status = exitstatus
        if self.facts_path and not self.record_path:
            self.facts_note = inputs.facts_matched_nothing(self.facts_path, verdicts)
            if self.facts_note:
                status = exitstatus = pytest.ExitCode.USAGE_ERROR
        if not collect_only:  # --co runs nothing, so nothing is missing
            self.run = results.run_status(int(exitstatus), self.selected, self.finished)
            if not self.run["complete"] and exitstatus == pytest.ExitCode.OK:
                status = pytest.ExitCode.TESTS_FAILED  # selected tests did not run: not a green run
        meta = {**self.meta(), "run": self.run}
        self.fleet, self.fleet_note = results.outliers(verdicts)
        self.fleet += self.compare_with_baselines(verdicts, meta)
        if results.red(self.fleet) and status == pytest.ExitCode.OK:
            status = pytest.ExitCode.TESTS_FAILED
        if self.run is not None and not self.record_path and self.baseline_choice != baselines.NONE:
            try:
                self.stored = self.store.save(verdicts + self.fleet, meta, accept=self.baseline_accept)
            except OSError as exc:
                self.baseline_notes.append(f"could not store this run in {self.store.root}: {exc}")
        return status

    def compare_with_baselines(self, verdicts: list, meta: dict) -> list:
        """MOVED verdicts against each unit's baseline (baselines.compare_units); what each unit was
        compared with is kept for the summary and the report."""
        try:
            moved, notes, self.baseline_of = baselines.compare_units(self.store, self.baseline_choice, verdicts,
                                                                     meta)
        except baselines.BaselineError as exc:
            raise pytest.UsageError(f"{self.baseline_option}: {exc}") from exc
        self.baseline_notes += notes
        return moved


def compile_only(nodeid: str) -> bool:
    """A compile-time fact's test: they live in ``test_static*.py`` files (a convention the plugin's
    own tests check), so the controller can tell them from a node id alone."""
    return nodeid.partition("::")[0].rsplit("/", 1)[-1].startswith("test_static")


def parse_gpus(text: str, count) -> list[int]:
    """``all`` or ``0,2,3`` -> GPU indices; ``count()`` is how many are visible."""
    if text.strip() == "all":
        n = count()
        return list(range(n))
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise pytest.UsageError(f"--gpuprops-gpus {text!r}: expected 'all' or GPU indices like 0,1,3") from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise pytest.UsageError(f"--gpuprops-gpus {text!r}: expected 'all' or distinct indices >= 0, like 0,1,3")
    return gpus


def _outside_verdict(report: pytest.TestReport, status: str) -> assertions.Verdict:
    """A verdict for a test that failed, errored or skipped outside the verdict layer."""
    if status == assertions.SKIPPED:
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        text = text.removeprefix("Skipped: ")
    else:
        crash = getattr(report.longrepr, "reprcrash", None)
        lines = [ln for ln in (crash.message if crash is not None else str(report.longrepr)).splitlines() if ln.strip()]
        text = f"{report.when} failed: {lines[0] if lines else report.outcome}"
    name = report.nodeid.split("::")[-1]
    return assertions.Verdict(fact=name, arch="-", status=status, expected="-", measured=None, measured_text=text,
                              unit="", method="", source="", kind="test",
                              reproduce=f"pytest {shlex.quote(report.nodeid)}", nodeid=report.nodeid)
