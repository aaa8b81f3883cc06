"""``gpuprops merge`` and ``gpuprops baselines``: the runs a fleet stored, read back: the nodes'
reports as one table with the outliers across them, and each unit's runs in the baseline store."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .cli_files import Refused


def cmd_merge(a) -> int:
    """The fleet's reports (one per node, or per run) as one table, with the outliers across them."""
    from . import report, results
    verdicts = []
    incomplete = []
    seen: dict[str, str] = {}
    for path in a.reports:
        try:
            data = results.read_json(Path(path))
            res, meta = results.SessionResults.from_json(data, path)
        except results.ResultsError as exc:
            raise Refused(str(exc)) from None
        same = seen.setdefault(hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest(), path)
        if same != path or a.reports.count(path) > 1:
            again = (f"{path} is given twice" if same == path or os.path.samefile(same, path) else
                     f"{path} is a copy of {same} (the same run: {meta.get('host', '?')}, {meta.get('date', '?')})")
            raise Refused(f"{again}; its GPUs would be counted twice. Give each node's report once")
        why = results.incomplete_reason(meta.get("run"))
        if why:
            incomplete.append(f"{path} ({meta.get('host', '?')}): {why}")
        for v in res.verdicts:
            if v.gpu is not None and not v.gpu.get("host"):
                v.gpu = dict(v.gpu, host=meta.get("host") or path)
        verdicts += res.verdicts
    measured = [v for v in verdicts if v.gpu is not None]
    if incomplete:
        print(f"gpuprops merge: {len(incomplete)} of {len(a.reports)} node(s) INCOMPLETE, not counted as passed:")
        for line in incomplete:
            print(f"  {line}")
        if not measured:
            return 1
    if not measured:
        raise Refused(f"no GPU measurements in {', '.join(a.reports)}: merge needs reports of GPU runs "
                      "(pytest hwtests --gpuprops-report PATH on each node)")
    print(report.gpu_table(measured))
    print(report.summary_line(verdicts))
    outliers, note = results.outliers(measured)
    print(f"gpuprops {note}")
    if outliers:
        print(report.table(outliers))
    return 1 if outliers or incomplete or results.red(verdicts) else 0


def cmd_baselines(a) -> int:
    """The baseline store as a person reads it: each unit, its runs (newest first), whether each was
    accepted, its driver and VBIOS, and the facts it lends; one unit's runs with --unit."""
    from tabulate import tabulate

    from . import baselines
    store = baselines.Store(a.store or baselines.default_dir())
    units = store.units()
    if a.unit:
        units = [u for u in units if u.startswith(a.unit)]
        if not units:
            raise Refused(f"no unit {a.unit!r} in the baseline store {store.root} (units: "
                          f"{', '.join(u[:12] for u in store.units()) or 'none'})")
    if not units:
        print(f"baseline store {store.root}: no unit has run yet (pytest hwtests keeps each GPU's runs here)")
        return 0
    print(f"baseline store {store.root}: {len(units)} unit(s)")
    for uuid in units:
        runs, bad = store.read(uuid)
        base = store.baseline(uuid, runs)
        lent = {id(v) for v in base.verdicts}
        rows = [(r.date, r.meta.get("host", "?"), "yes" if r.accepted else "no", r.meta.get("driver_version", "?"),
                 r.meta.get("vbios_version") or "?", len(r.verdicts), sum(id(v) in lent for v in r.verdicts),
                 r.path.name) for r in (runs if a.unit else runs[:5])]
        name = runs[0].meta.get("name", "?") if runs else "?"
        print(f"\n{uuid} ({name}): {len(runs)} run(s){'' if a.unit or len(runs) <= 5 else ', the newest 5'}; "
              f"baseline: {base.describe()}")
        print(tabulate(rows, headers=["date", "host", "accepted", "driver", "VBIOS", "facts", "in the baseline",
                                      "file"]))
        for path in bad:
            print(f"  not a unit run, never a baseline: {path}")
    return 0
