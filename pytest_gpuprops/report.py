"""report layer: what a session found, as a terminal table, JSON, Markdown and plots.

Fed only with :class:`~pytest_gpuprops.assertions.Verdict` objects and plain numbers, so every
output can be produced (and tested) without a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tabulate import tabulate

from .assertions import Verdict

HEADERS = ["fact", "arch", "expected", "measured", "verdict"]


def _measured_cell(v: Verdict) -> str:
    if v.measured is None:
        return "-"
    m = v.measurement
    if m:
        return f"{v.measured:.3f} (±{m['noise']:.2%}, n={m['n']})"
    return v.measured_text.split("\n")[0]


def rows(verdicts: Iterable[Verdict]) -> list[list[str]]:
    return [[v.fact, v.arch, v.expected, _measured_cell(v), v.verdict_text] for v in verdicts]


def table(verdicts: Iterable[Verdict], fmt: str = "simple") -> str:
    return tabulate(rows(verdicts), headers=HEADERS, tablefmt=fmt, disable_numparse=True)


def to_json(verdicts: Iterable[Verdict], meta: dict) -> dict:
    vs = list(verdicts)
    return {"meta": meta, "summary": {s: sum(1 for v in vs if v.status == s) for s in sorted({v.status for v in vs})},
            "facts": [v.as_dict() for v in vs]}


def markdown(verdicts: Iterable[Verdict], meta: dict) -> str:
    vs = list(verdicts)
    head = [f"# gpuprops report: {meta.get('gpu', {}).get('name', 'no GPU')} ({meta.get('arch', '?')})", ""]
    for k in ("gpu", "compiler", "nvdisasm", "date"):
        if k in meta:
            val = meta[k]
            if isinstance(val, dict):
                val = ", ".join(f"{a}={b}" for a, b in val.items() if a in ("name", "driver_version",
                                                                             "cuda_driver_version", "cuda_runtime_version",
                                                                             "sm_count", "max_sm_clock_mhz"))
            head.append(f"- {k}: {val}")
    head += ["", table(vs, fmt="github"), ""]
    failing = [v for v in vs if not v.ok]
    if failing:
        head += ["## Not passing", ""]
        for v in failing:
            head += ["```", v.message(), "```", ""]
    return "\n".join(head)


def write_reports(path: str | Path, verdicts: list[Verdict], meta: dict) -> list[Path]:
    """``path`` gets the JSON; a Markdown twin is written beside it (``.md``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(to_json(verdicts, meta), indent=1, default=str))
    md = p.with_suffix(".md")
    md.write_text(markdown(verdicts, meta))
    return [p, md]


# ----------------------------------------------------------------------------------------------
# plots


class PlotsUnavailable(RuntimeError):
    pass


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotsUnavailable("--gpuprops-plots needs matplotlib: pip install 'pytest-gpuprops[plots]'") from exc
    return plt


def plot_hmma(points: list[dict], floor: float | None, path: Path, title: str) -> Path:
    """Cycles per HMMA per sub-partition against ILP, one line per warps-per-sub-partition count."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for w in sorted({p["warps"] for p in points}):
        pts = sorted((p["ilp"], p["cycles"]) for p in points if p["warps"] == w)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"{w} warp(s)/SMSP")
    if floor:
        ax.axhline(floor, color="k", ls="--", lw=1, label=f"pipe floor {floor:.2f}")
    ax.set_xlabel("independent HMMA chains per warp (ILP)")
    ax.set_ylabel("cycles per HMMA.16816.F32 per SMSP")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_regbank(cells: dict[tuple[int, int], float], rc: int, path: Path, title: str) -> Path:
    """Cycles per FFMA over (Ra, Rb) for a fixed Rc: the bank-conflict heat map."""
    plt = _plt()
    ras = sorted({a for a, _ in cells})
    rbs = sorted({b for _, b in cells})
    grid = [[cells.get((a, b), float("nan")) for b in rbs] for a in ras]
    fig, ax = plt.subplots(figsize=(6.4, 5.4))
    im = ax.imshow(grid, origin="lower", cmap="viridis")
    ax.set_xticks(range(len(rbs)), [f"R{b}" for b in rbs], rotation=90, fontsize=7)
    ax.set_yticks(range(len(ras)), [f"R{a}" for a in ras], fontsize=7)
    ax.set_xlabel("Rb")
    ax.set_ylabel("Ra")
    ax.set_title(f"{title}\nFFMA Rd, Ra, Rb, R{rc} (no reuse): cycles per FFMA")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_bandwidth(values: dict[str, float], peak: float, path: Path, title: str) -> Path:
    """Shared-memory bytes per cycle per SM for each access width, against the 128 B/clk peak."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    names = list(values)
    ax.bar(names, [values[n] for n in names], color="tab:blue")
    ax.axhline(peak, color="k", ls="--", lw=1, label=f"theory {peak:g} B/clk")
    ax.set_ylabel("bytes per cycle per SM")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
