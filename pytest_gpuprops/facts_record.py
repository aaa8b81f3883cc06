"""facts layer, record mode: a run's measured facts written as a facts file, with their provenance
and the tolerance a recorded fact gets; what is written is validated as a facts file is (it must
load again), and a file that exists is kept unless forced."""

from __future__ import annotations

import datetime as _dt
import math
import os
from pathlib import Path

from .facts import GPUS_KEY, Fact, FactsError, loads, split_by_scope


def provenance(gpu_name: str, driver: str, cuda: str, date: _dt.date | None = None) -> str:
    date = date or _dt.date.today()
    return f"measured on {gpu_name}, driver {driver}, CUDA {cuda}, {date.isoformat()}"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # numpy scalars
        v = v.item()
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            raise FactsError(f"cannot record a non-finite value {v}")
        return repr(round(v, 4) if isinstance(v, float) else v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_value(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    s = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'"{s}"'


def dumps(arch: str, facts: list[Fact], meta: dict | None = None) -> str:
    lines = [f"arch = {_toml_value(arch)}"]
    for k, v in (meta or {}).items():
        lines.append(f"{k} = {_toml_value(v)}")
    arch_facts, by_gpu = split_by_scope(facts, (meta or {}).get("gpu"))
    tables = [(f"[{f.name}]", f, f.scope == "gpu") for f in arch_facts]
    tables += [(f"[{GPUS_KEY}.{_toml_value(g)}.{f.name}]", f, False) for g, fs in by_gpu.items() for f in fs]
    for header, f, mark_scope in tables:
        lines += ["", header]
        if mark_scope:  # a GPU's fact with no GPU name to file it under
            lines.append('scope = "gpu"')
        if f.kind != "measured":
            lines.append(f"kind = {_toml_value(f.kind)}")
        if f.value is not None:
            lines.append(f"value = {_toml_value(f.value)}")
        if f.tolerance_abs or (f.kind == "measured" and not f.tolerance_rel):
            lines.append(f"tolerance_abs = {_toml_value(f.tolerance_abs)}")
        if f.tolerance_rel:
            lines.append(f"tolerance_rel = {_toml_value(f.tolerance_rel)}")
        if f.by_compiler:
            lines.append(f"by_compiler = {_toml_value(f.by_compiler)}")
        if f.units_range:
            lines.append(f"units_range = [{', '.join(_toml_value(v) for v in f.units_range)}]")
        if f.same_unit_tolerance_rel:
            lines.append(f"same_unit_tolerance_rel = {_toml_value(f.same_unit_tolerance_rel)}")
        for k in ("unit", "method", "source"):
            lines.append(f"{k} = {_toml_value(getattr(f, k))}")
    return "\n".join(lines) + "\n"


def write_facts(path: str | Path, arch: str, facts: list[Fact], *, force: bool = False, meta: dict | None = None) -> Path:
    """Write a facts file from recorded facts; refuses to overwrite unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise FactsError(f"{p} exists; pass --force to overwrite it (or choose another path)")
    text = dumps(arch, facts, meta)
    loads(text, p)  # what is written must load again
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p


def default_tolerance(unit: str, value: float, noise: float) -> tuple[float, float]:
    """Tolerance for a recorded fact: a latency in cycles within 0.5 cycle or 3 noise spreads,
    other quantities within 3 % or 3 noise spreads, whichever is wider."""
    spread = 3 * noise * abs(value)
    if unit == "cycles":
        return max(0.5, round(spread, 3)), 0.0
    return 0.0, max(0.03, round(3 * noise, 4))
