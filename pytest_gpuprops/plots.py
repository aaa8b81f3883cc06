"""The run's plots (matplotlib, an optional dependency): cycles per HMMA against ILP, the register-bank
heat map, shared-memory bandwidth, the DSMEM chase against the cluster size, wgmma's rate against N
and the SM clock under stress, each drawn from a session's plot points (a report JSON's
"plot_points", or a live session's).

Without matplotlib every plot raises :class:`PlotsUnavailable`, which says how to install it.
"""

from __future__ import annotations

from pathlib import Path


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


def _save(fig, ax, path: Path, title: str, *, legend_size: int = 8, legend_columns: int = 1) -> Path:
    """The finish every line plot shares: title, legend, a light grid, saved at 110 dpi and closed."""
    plt = _plt()
    ax.set_title(title)
    ax.legend(fontsize=legend_size, ncol=legend_columns)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_hmma(points: list[dict], path: Path, title: str) -> Path:
    """Cycles per HMMA per sub-partition against ILP, one line per warps-per-sub-partition count,
    each with the issue model's curve (points carry ``model``) dashed beside it."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for n, w in enumerate(sorted({p["warps"] for p in points})):
        pts = sorted((p["ilp"], p["cycles"], p.get("model")) for p in points if p["warps"] == w)
        color = f"C{n}"
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker="o", color=color, label=f"{w} warp(s)/SMSP")
        if all(m is not None for _, _, m in pts):
            ax.plot([x for x, _, _ in pts], [m for _, _, m in pts], ls="--", lw=1, color=color)
    ax.plot([], [], ls="--", color="k", lw=1, label="model max(L/(ILP·W), i/W, p)")
    ax.set_xlabel("independent HMMA chains per warp (ILP)")
    ax.set_ylabel("cycles per HMMA.16816.F32 per SMSP")
    ax.set_yscale("log")
    return _save(fig, ax, path, title, legend_size=8)


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


def plot_dsmem(points: list[dict], path: Path, title: str) -> Path:
    """Cycles per hop of the distributed-shared-memory chase against the cluster size, with the same
    chase through the CTA's own shared memory (points with ``cluster`` None) as a line."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    remote = sorted((p["cluster"], p["cycles"]) for p in points if p.get("cluster") is not None)
    if remote:
        ax.plot([c for c, _ in remote], [y for _, y in remote], marker="o", label="neighbour CTA's shared memory")
        ax.set_xscale("log", base=2)
        ax.set_xticks([c for c, _ in remote], [str(c) for c, _ in remote])
    for p in points:
        if p.get("cluster") is None:
            ax.axhline(p["cycles"], color="k", ls="--", lw=1, label=f"own shared memory ({p['cycles']:.1f})")
    ax.set_xlabel("CTAs per cluster")
    ax.set_ylabel("cycles per dependent 8-byte load")
    ax.set_ylim(bottom=0)
    return _save(fig, ax, path, title, legend_size=8)


def plot_wgmma_rate(points: list[dict], path: Path, title: str) -> Path:
    """FLOP (OP) per clock per SM against N, one colour per type (ss solid, rs dotted), each with the
    model's value dashed: what the wgmma model facts assert, case by case."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    dtypes = sorted({p["dtype"] for p in points})
    for k, dtype in enumerate(dtypes):
        color = f"C{k % 10}"
        for operands, style in (("ss", "-"), ("rs", ":")):
            pts = sorted((p["n"], p["measured"], p["model"]) for p in points
                         if p["dtype"] == dtype and p["operands"] == operands)
            if not pts:
                continue
            ax.plot([n for n, _, _ in pts], [y for _, y, _ in pts], marker="o", ms=3, ls=style, color=color,
                    label=f"{dtype} {operands}")
            ax.plot([n for n, _, _ in pts], [m for _, _, m in pts], ls="--", lw=0.8, color=color)
    ax.plot([], [], ls="--", color="k", lw=0.8, label="model")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("N (wgmma m64nNk*)")
    ax.set_ylabel("FLOP (OP) per clock per SM")
    return _save(fig, ax, path, title, legend_size=6, legend_columns=2)


def plot_clock(points: list[dict], path: Path, title: str) -> Path:
    """The SM clock over each whole-GPU stress (kernel-side bins), with its sustained value dashed and
    the throttle reasons NVML reported in the legend."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    for k, p in enumerate(points):
        color = f"C{k % 10}"
        series = p.get("series") or []
        why = f"; {'+'.join(p['throttle'])}" if p.get("throttle") else ""
        ax.plot([t for t, _ in series], [mhz for _, mhz in series], lw=1, color=color,
                label=f"{p['load']} (sustained {p['sustained']:.0f} MHz{why})")
        ax.axhline(p["sustained"], color=color, ls="--", lw=0.8)
    ax.set_xlabel("seconds since the first launch")
    ax.set_ylabel("SM clock, MHz (clock64 / %globaltimer, 10 ms bins)")
    return _save(fig, ax, path, title, legend_size=8)


def write_plots(points: dict[str, list[dict]], out_dir: str | Path, meta: dict) -> list[Path]:
    """Every plot the run's points allow (a report JSON's "plot_points", or a live session's), into
    ``out_dir``; the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{meta.get('gpu', {}).get('name', '?')} ({meta.get('arch', '?')})"
    made = []
    if points.get("hmma"):
        made.append(plot_hmma(points["hmma"], out / "hmma_cycles_vs_ilp.png", title))
    if points.get("regbank"):
        by_rc: dict[int, dict] = {}
        for p in points["regbank"]:
            by_rc.setdefault(p["rc"], {})[(p["ra"], p["rb"])] = p["cycles"]
        rc, cells = max(by_rc.items(), key=lambda kv: len(kv[1]))
        made.append(plot_regbank(cells, rc, out / "regbank_heatmap.png", title))
    if points.get("smem_bandwidth"):
        vals = {p["label"]: p["bytes_per_cycle"] for p in points["smem_bandwidth"]}
        made.append(plot_bandwidth(vals, 128.0, out / "smem_bandwidth.png", title))
    if points.get("dsmem_latency"):
        made.append(plot_dsmem(points["dsmem_latency"], out / "dsmem_latency_vs_cluster_size.png", title))
    if points.get("wgmma_flop_per_clk"):
        made.append(plot_wgmma_rate(points["wgmma_flop_per_clk"], out / "wgmma_flop_per_clk_vs_n.png", title))
    if points.get("sustained_clock"):
        made.append(plot_clock(points["sustained_clock"], out / "sm_clock_under_stress.png", title))
    return made
