"""summary: what a run says at its end on the controller: the facts' tables (whole, per GPU, the
node's GPU x GPU links), the usage and fleet notes, the baseline store's notes, and the files it
writes (the JSON report and its Markdown twin, a record-mode facts file, the plots), each said on the
terminal; and what an option asked for that the run could not give. plugin.py's
pytest_terminal_summary hands it the terminal writer."""

from __future__ import annotations

from pathlib import Path

from . import accepted_units, facts_record, plots, report, report_files, results
from . import facts as gp_facts
from .session import GpuPropsState


def write_summary(tr, state: GpuPropsState, verbose: int) -> None:
    """Everything the run says at its end, on the terminal writer ``tr`` (``verbose`` > 0: every row
    and cell whole)."""
    verdicts = state.results.verdicts
    if verdicts:
        tr.write_sep("=", "gpuprops facts")
        tr.write_line(report.terminal_table(verdicts, verbose))
        tr.write_line(report.summary_line(verdicts + state.fleet, state.run))
        findings = accepted_units.findings_within_reach(verdicts)
        if findings:
            tr.write_sep("-", "outside the SKU's population, within its reach (findings about their units, not red)",
                         yellow=True)
            for v in findings:
                tr.write_line(f"  {accepted_units.describe_finding(v)}", yellow=True)
        known = accepted_units.accepted(verdicts)
        if known:
            tr.write_sep("-", "outside the SKU's population, accepted for their unit (not red)", yellow=True)
            for v in known:
                tr.write_line(f"  {accepted_units.describe(v)}", yellow=True)
        if len({results.gpu_key(v) for v in verdicts if v.gpu}) > 1:
            tr.write_sep("-", "per GPU")
            tr.write_line(report.gpu_table(verdicts))
        matrices = report.link_matrices(verdicts)
        if matrices:
            tr.write_sep("-", "node links: GPU x GPU")
            tr.write_line(report.link_tables(matrices))
    elif state.run and results.incomplete_reason(state.run) and state.report_path:
        tr.write_line(report.summary_line([], state.run), red=True)
    if state.facts_note:
        tr.write_line(f"gpuprops: usage error: {state.facts_note}", red=True)
    if state.fleet_note and any(v.gpu for v in verdicts):
        tr.write_line(f"gpuprops {state.fleet_note}")
    for note in state.baseline_notes:
        tr.write_line(f"gpuprops baseline: {note}")
    for uuid, path, accepted, why in state.stored:
        tr.write_line(f"gpuprops baseline: {uuid[:12]}: this run stored as {path}; {why}",
                      **({} if accepted else {"yellow": True}))
    if state.fleet:
        red = bool(results.red(state.fleet))
        tr.write_sep("=", "gpuprops fleet: outliers, moved facts, units that differ", **({"red": True} if red else {}))
        tr.write_line(report.table(state.fleet))
    meta = run_meta(state)
    if state.report_path:
        try:
            for p in report_files.write_reports(state.report_path, state.results, state.fleet, meta):
                tr.write_line(f"gpuprops report: {p}")
        except OSError as exc:
            tr.write_line(f"gpuprops report: could not write {state.report_path} ({exc.strerror or exc}); this run's "
                          "verdicts are in the table above only", red=True)
    if state.record_path:
        info = state._info
        if state.results.recorded:
            arch = next(iter(state.results.recorded.values())).arch
            try:
                p = facts_record.write_facts(state.record_path, arch, list(state.results.recorded.values()),
                                         force=state.force, meta={"gpu": info.name if info else meta.get("gpu", {}).get("name", "?")})
                tr.write_line(f"gpuprops recorded {len(state.results.recorded)} facts to {p}")
            except gp_facts.FactsError as exc:
                tr.write_line(f"gpuprops record: {exc}", red=True)
        else:
            tr.write_line("gpuprops record: nothing was measured, no file written", yellow=True)
    if state.plots_dir and state.results.plot_points:
        for p in write_plots(state, meta):
            tr.write_line(f"gpuprops plot: {p}")



def run_meta(state: GpuPropsState) -> dict:
    """The report's header: the session's meta, how the run went, and what each unit was compared
    with and stored as in the baseline store."""
    meta = state.meta()
    if state.run is not None:
        meta["run"] = state.run
    meta["baselines"] = {"store": str(state.store.root), "choice": state.baseline_choice,
                         "notes": state.baseline_notes,
                         "compared_with": {u: [str(r.path) for r in b.runs] for u, b in state.baseline_of.items()},
                         "stored": [{"uuid": u, "path": str(p), "accepted": a, "why": w} for u, p, a, w in state.stored]}
    return meta


def write_plots(state: GpuPropsState, meta: dict) -> list[Path]:
    return plots.write_plots(state.results.plot_points, state.plots_dir, meta)


def plots_note(state: GpuPropsState) -> str | None:
    """Why --gpuprops-plots wrote nothing, where it did not; None where it did or was not asked."""
    if not state.plots_dir or state.results.plot_points:
        return None
    unavailable = next((s.unavailable for s in state._slots.values() if s.unavailable), None)
    why = f"; GPU facts were skipped: {unavailable}" if unavailable else ""
    return (f"gpuprops plots: nothing to plot, no PNG written to {state.plots_dir}: plots come from the HMMA, "
            f"register-bank and shared-memory bandwidth GPU facts, and none ran{why}")
