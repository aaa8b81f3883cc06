"""The report files of a session: the JSON (the results layer's form, with the fleet's verdicts and
the link matrices) and its Markdown twin, written at the end of a run, and the "not finished" report
written at its start.

The Markdown holds the tables of :mod:`~pytest_gpuprops.report`; the JSON's form is
:mod:`~pytest_gpuprops.results`' (checked by :mod:`~pytest_gpuprops.report_schema` when read back).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .accepted_units import accepted, describe, describe_finding, findings_within_reach
from .assertions import Verdict
from .report import gpu_table, link_matrices, link_tables, summary_line, table


def markdown(verdicts: Iterable[Verdict], meta: dict, fleet: Iterable[Verdict] = ()) -> str:
    """The Markdown report: the run's GPU and tools, the summary line, every verdict's row, the per-GPU
    and link tables where there are several GPUs or pairs, and each verdict that did not pass whole."""
    vs, fleet = list(verdicts), list(fleet)
    head = [f"# gpuprops report: {meta.get('gpu', {}).get('name', 'no GPU')} ({meta.get('arch', '?')})", ""]
    for k in ("gpu", "compiler", "nvdisasm", "date"):
        if k in meta:
            val = meta[k]
            if isinstance(val, dict):
                val = ", ".join(f"{a}={b}" for a, b in val.items() if a in ("name", "driver_version",
                                                                             "cuda_driver_version", "cuda_runtime_version",
                                                                             "sm_count", "max_sm_clock_mhz"))
            head.append(f"- {k}: {val}")
    head += ["", summary_line(vs + fleet, meta.get("run")), "", table(vs, fmt="github"), ""]
    if len({str(v.gpu) for v in vs if v.gpu}) > 1:
        head += ["## Per GPU", "", gpu_table(vs, fmt="github"), ""]
    matrices = link_matrices(vs)
    if matrices:
        head += ["## Node links: GPU x GPU", "", link_tables(matrices, fmt="github"), ""]
    findings = findings_within_reach(vs)
    if findings:
        head += ["## Outside the SKU's population, within its reach (findings about their units, not red)", "",
                 *(f"- {describe_finding(v)}" for v in findings), ""]
    known = accepted(vs)
    if known:
        head += ["## Outside the SKU's population, accepted for their unit (not red)", "",
                 *(f"- {describe(v)}" for v in known), ""]
    failing = [v for v in vs + fleet if not v.ok]
    if failing:
        head += ["## Not passing", ""]
        for v in failing:
            head += ["```", v.message(), "```", ""]
    return "\n".join(head)


def write_running(path: str | Path, meta: dict) -> list[Path]:
    """At the start of a run: a report that says the run has not finished. The end of the run
    overwrites it; a run killed before then (SIGKILL, a timeout) leaves it, never a stale green one."""
    from .results import RUNNING, SessionResults
    return write_reports(path, SessionResults(), [], dict(meta, run=dict(RUNNING)))


def write_reports(path: str | Path, results, fleet: list[Verdict], meta: dict) -> list[Path]:
    """``path`` gets the JSON (the results layer's form, fleet verdicts included); a Markdown twin
    is written beside it (``.md``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = results.to_json(meta)
    data["fleet"] = [v.as_dict() for v in fleet]
    data["links"] = link_matrices(results.verdicts)
    p.write_text(json.dumps(data, indent=1, default=str))
    md = p.with_suffix(".md")
    md.write_text(markdown(results.verdicts, meta, fleet))
    return [p, md]
