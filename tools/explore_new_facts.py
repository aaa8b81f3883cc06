"""One-shot exploration of the issue-10 facts on a GPU: print every raw number, write them as JSON.

    python3 tools/explore_new_facts.py --out $OUT/new_facts.json        # on the GPU (about 1-2 min)
    python3 tools/explore_new_facts.py --dry-run --arch sm_90           # no GPU: compile and patch all

What it measures (the specs are hwtests/specs.py's, so the numbers are what the tests would see):
* ALU / SFU / shuffle (kernels/alu_chain.cu): per op, dependent latency (ILP 1, one warp, per-warp
  cycles per step) and cycles per step per SM sub-partition (ILP 8 x 4 warps per sub-partition, span);
* mma.sync per input type (kernels/mma_sync.cu): ILP 1..8 x warps 1..4 per sub-partition, cycles per
  instruction per sub-partition over the span, and per warp for one warp per sub-partition;
* pointer chase (kernels/global_chase.cu): L1 / L2 / DRAM latency with the footprints derived from
  the device's sizes, the per-hop distribution of L2 and DRAM hops (1024 single-hop launches each),
  and a latency-vs-footprint sweep from 4 KiB to 4 x L2 (two points per octave);
* bank conflicts (kernels/smem_conflict.cu): cycles per warp access for lane strides of 1..33
  elements of 1, 2 and 4 words, against the wavefront model (hwtests/smem_banks.py);
* on sm_90 GPUs, wgmma (kernels/wgmma.cu, built for sm_90a): N = 8 .. 256, f16 / bf16, A from
  shared memory or registers: one instruction's latency, a 16-long chain per warp, and cycles per
  instruction per SM with 2 and 4 warpgroups.

Every build is compiled and patched before the first launch, in parallel processes; the stop rule is
StopRule(noise_target=0.01, min_samples=3, max_samples=20, time_budget_s=0.3). No assertions: a
table on stdout, the JSON (with a "facts" map named as the tests name them) and, where matplotlib is
installed, plots beside the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "hwtests")]

import memory_levels as ml  # noqa: E402
import specs  # noqa: E402
from smem_banks import bank_wavefronts  # noqa: E402

from pytest_gpuprops.measure import KernelSpec, StopRule  # noqa: E402

KERNELS = ROOT / "kernels"
FAST = StopRule(noise_target=0.01, min_samples=3, max_samples=20, time_budget_s=0.3)
HOPS = 1024
MMA_ILPS, MMA_WARPS = range(1, 9), range(1, 5)
CONFLICT_STRIDES, CONFLICT_VECS = range(1, 34), (1, 2, 4)
#: sizes for --dry-run, where no device reports them (the builds do not depend on them)
NOMINAL_PROPS = {"l2CacheSize": 50 * ml.MIB, "sharedMemPerMultiprocessor": 228 * ml.KIB}


# ----------------------------------------------------------------------------------------------
# the plan: every measurement, as (section, key, spec, measure kwargs)


def plan(sizes: ml.CacheSizes, arch: str) -> list[tuple[str, dict, KernelSpec, dict]]:
    out = []
    for op in specs.ALU_OPS:
        out.append(("alu", {"op": op, "what": "latency"}, specs.alu(op, 1, 1), dict(divisor=specs.ALU_UNROLL)))
        out.append(("alu", {"op": op, "what": "smsp"}, specs.alu(op, 8, 4),
                    dict(divisor=specs.ALU_UNROLL * 8 * 4, mode="span")))
    for d in specs.MMA_DTYPES:
        for ilp in MMA_ILPS:
            for w in MMA_WARPS:
                spec = specs.mma(d, ilp, w)
                out.append(("mma", {"dtype": d, "ilp": ilp, "warps": w, "mode": "span"}, spec,
                            dict(divisor=specs.MMA_UNROLL * ilp * w, mode="span")))
                if w == 1:
                    out.append(("mma", {"dtype": d, "ilp": ilp, "warps": w, "mode": "warp"}, spec,
                                dict(divisor=specs.MMA_UNROLL * ilp)))
    for level in ml.LEVELS:
        out.append(("chase", {"level": level, "footprint": ml.footprint(level, sizes)},
                    specs.chase_level(level, sizes), dict(divisor=specs.CHASE_UNROLL)))
    for level in ("l2", "dram"):
        out.append(("hops", {"level": level, "footprint": ml.footprint(level, sizes)},
                    specs.chase_level(level, sizes, unroll=1),
                    dict(divisor=1, stop=StopRule(noise_target=0.0, min_samples=HOPS, max_samples=HOPS,
                                                  time_budget_s=120.0))))
    for f in ml.sweep_footprints(sizes):
        out.append(("sweep", {"footprint": f, "level": ml.level_of(f, sizes)}, specs.chase_sweep_point(f, sizes),
                    dict(divisor=specs.CHASE_UNROLL)))
    if arch == "sm_90":  # wgmma: sm_90a cubins, which run on sm_90 GPUs only
        for n in specs.WGMMA_N:
            for bf16 in (False, True):
                for a_regs in (False, True):
                    key = {"n": n, "dtype": "bf16" if bf16 else "f16", "a": "rs" if a_regs else "ss"}
                    out.append(("wgmma", dict(key, unroll=1, warpgroups=1, mode="warp"),
                                specs.wgmma(n, bf16, a_regs, unroll=1), dict(divisor=1)))
                    out.append(("wgmma", dict(key, unroll=specs.WGMMA_UNROLL, warpgroups=1, mode="warp"),
                                specs.wgmma(n, bf16, a_regs), dict(divisor=specs.WGMMA_UNROLL)))
                    for g in (2, 4):
                        out.append(("wgmma", dict(key, unroll=specs.WGMMA_UNROLL, warpgroups=g, mode="span"),
                                    specs.wgmma(n, bf16, a_regs, warpgroups=g),
                                    dict(divisor=specs.WGMMA_UNROLL * g, mode="span")))
    for vec in CONFLICT_VECS:
        for s in CONFLICT_STRIDES:
            out.append(("conflict", {"vec": vec, "stride_words": s * vec, "wavefronts": bank_wavefronts(s * vec, vec)},
                        specs.smem_conflict(vec, s * vec), dict(divisor=specs.conflict_accesses(), mode="span")))
    return out


def build_key(spec: KernelSpec) -> tuple:
    return spec.source, spec.kernel, tuple(sorted(spec.defines.items()))


def _build(job):
    """Compile and patch one build for timing (in a worker process); returns (key, built or error)."""
    key, spec, arch = job
    if spec.source == "wgmma.cu":
        arch = specs.WGMMA_ARCH
    from pytest_gpuprops import sass
    from pytest_gpuprops.compile import compile_cuda
    from pytest_gpuprops.measure import build_for_timing
    try:
        cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, arch, spec.defines).cubin, arch,
                           name=f"{spec.source} {spec.defines}")
        return key, build_for_timing(cubin, spec), None
    except Exception as exc:  # reported, and the measurements of this build are skipped
        return key, None, f"{type(exc).__name__}: {exc}"


def build_all(items, arch: str, workers: int) -> tuple[dict, dict]:
    jobs, seen = [], set()
    for _, _, spec, _ in items:
        k = build_key(spec)
        if k not in seen:
            seen.add(k)
            # what a worker needs, picklable: the launch arguments (closures) stay here
            jobs.append((k, dataclasses.replace(spec, args=None), arch))
    built, errors = {}, {}
    t0 = time.time()
    # spawn, not fork: the parent may hold a CUDA context, which a forked child must not inherit
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for key, result, err in pool.map(_build, jobs):
            if err:
                errors[key] = err
            else:
                built[key] = result
    print(f"built {len(built)} of {len(jobs)} kernel builds for {arch} in {time.time() - t0:.1f} s "
          f"({workers} processes)", flush=True)
    for key, err in errors.items():
        print(f"  BUILD FAILED {key}: {err}", flush=True)
    return built, errors


# ----------------------------------------------------------------------------------------------
# reading the results


def facts_from(rows: list[dict], sizes: ml.CacheSizes) -> dict:
    """The measured values under the names the tests give them."""
    f = {}

    def val(section, **key):
        for r in rows:
            if r["section"] == section and all(r["key"].get(k) == v for k, v in key.items()) and "median" in r:
                return r["median"]
        return None

    for op in specs.ALU_OPS:
        f[f"{op}_latency_cycles"] = val("alu", op=op, what="latency")
        f[f"{op}_smsp_cycles"] = val("alu", op=op, what="smsp")
    for d in specs.MMA_DTYPES:
        f[f"mma_{d}_dependent_cycles"] = val("mma", dtype=d, ilp=1, warps=1, mode="warp")
        f[f"mma_{d}_single_warp_issue_cycles"] = val("mma", dtype=d, ilp=8, warps=1, mode="warp")
        f[f"mma_{d}_smsp_cycles"] = val("mma", dtype=d, ilp=8, warps=4, mode="span")
    for level, name in (("l1", "l1_hit_latency_cycles"), ("l2", "l2_hit_latency_cycles"), ("dram", "dram_latency_cycles")):
        f[name] = val("chase", level=level)
    for r in rows:
        if r["section"] == "hops" and "values" in r:
            base = "l2_hit" if r["key"]["level"] == "l2" else "dram"
            for q in (10, 90):
                f[f"{base}_latency_p{q}_cycles"] = statistics.median(ml.batch_percentiles(r["values"], q, 8))
    f["smem_wavefront_cycles"] = val("conflict", vec=1, stride_words=1)
    for n in specs.WGMMA_N:
        for dt in ("f16", "bf16"):
            for src in ("ss", "rs"):
                case = f"wgmma_m64n{n}k16_{dt}_{src}"
                f[f"{case}_latency_cycles"] = val("wgmma", n=n, dtype=dt, a=src, unroll=1)
                f[f"{case}_sm_cycles"] = val("wgmma", n=n, dtype=dt, a=src, warpgroups=2)
    return {k: (round(v, 3) if v is not None else None) for k, v in f.items()}


def summaries(rows: list[dict], sizes: ml.CacheSizes) -> dict:
    out = {}
    for r in rows:
        if r["section"] == "hops" and "values" in r:
            v = r["values"]
            out[f"hops_{r['key']['level']}"] = {f"p{q}": round(ml.percentile(v, q), 1) for q in (1, 10, 25, 50, 75, 90, 99)}
    pts = [(r["key"]["footprint"], r["median"]) for r in rows if r["section"] == "sweep" and "median" in r]
    if pts:
        out["sweep_knees_bytes"] = dict(zip(("l1", "l2"), ml.capacity_knees(pts, sizes)))
    conf = [r for r in rows if r["section"] == "conflict" and "median" in r]
    base = next((r["median"] for r in conf if r["key"]["vec"] == 1 and r["key"]["stride_words"] == 1), None)
    if base:
        off = [dict(r["key"], cycles=round(r["median"], 3), model=round(r["key"]["wavefronts"] * base, 3))
               for r in conf if abs(r["median"] - r["key"]["wavefronts"] * base) > 0.08 * r["key"]["wavefronts"] * base]
        out["conflict_off_model_8pct"] = off
        out["conflict_cases"] = len(conf)
    return out


def plots(rows, sizes, outdir: Path, title: str) -> list[str]:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return []
    made = []
    pts = [(r["key"]["footprint"], r["median"]) for r in rows if r["section"] == "sweep" and "median" in r]
    if pts:
        made.append(str(ml.plot_sweep(pts, sizes, outdir / "chase_latency_vs_footprint.png", title)))
    hops = {r["key"]["level"]: r["values"] for r in rows if r["section"] == "hops" and "values" in r}
    if hops:
        made.append(str(ml.plot_hops(hops, outdir / "chase_per_hop.png", title)))
    return made


def label(section: str, key: dict) -> str:
    return section + " " + " ".join(f"{k}={v}" for k, v in key.items())


# ----------------------------------------------------------------------------------------------


def dry_run(arch: str, workers: int) -> int:
    """Compile and patch every build for ``arch``, and make every spec's arguments with numpy where
    they need no device (all but the chases, which lay out device addresses)."""
    import numpy as np
    sizes = ml.cache_sizes(arch, NOMINAL_PROPS)
    items = plan(sizes, arch)
    built, errors = build_all(items, arch, workers)
    bad_args = 0
    for section, key, spec, _ in items:
        if section in ("chase", "hops", "sweep") or spec.args is None:
            continue
        try:
            spec.args(np)
        except Exception as exc:
            bad_args += 1
            print(f"  ARGS FAILED {label(section, key)}: {type(exc).__name__}: {exc}")
    print(f"dry run for {arch}: {len(items)} measurements over {len(built) + len(errors)} builds; "
          f"{len(errors)} build failures, {bad_args} argument failures")
    return 1 if errors or bad_args else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "new_facts.json"))
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="build every spec for --arch, no GPU")
    ap.add_argument("--arch", default="sm_90", help="with --dry-run: the arch to build for")
    ap.add_argument("--only", default="", help="comma-separated sections: alu,mma,chase,hops,sweep,wgmma,conflict")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--budget-s", type=float, default=170.0,
                    help="skip what is left once this many seconds have passed (the JSON says what)")
    a = ap.parse_args(argv)
    if a.dry_run:
        return dry_run(a.arch, a.workers)

    from pytest_gpuprops import measure
    t_start = time.time()
    info = measure.gpu_info(a.gpu)
    import cupy
    sizes = ml.device_sizes(cupy, a.gpu, info.arch)
    print(info, "\n", sizes.as_dict(), flush=True)
    items = plan(sizes, info.arch)
    if a.only:
        keep = set(a.only.split(","))
        items = [it for it in items if it[0] in keep]
    built, errors = build_all(items, info.arch, a.workers)
    runner = measure.Runner(info, KERNELS, stop=FAST)
    out = {"gpu": info.as_dict(), "sizes": sizes.as_dict(), "overhead_cycles": runner.clock_overhead(),
           "sm_clock_mhz": runner.session_sm_clock_mhz(), "throttle": measure.throttle_reasons(info)[0],
           "stop_rule": vars(FAST) if hasattr(FAST, "__dict__") else str(FAST),
           "build_errors": {str(k): v for k, v in errors.items()}, "rows": []}
    print(f"clock overhead {out['overhead_cycles']} cycles, SM clock {out['sm_clock_mhz']:.0f} MHz", flush=True)
    outp = Path(a.out)
    outp.parent.mkdir(parents=True, exist_ok=True)
    section_now = None
    for section, key, spec, kw in items:
        if section != section_now:
            section_now = section
            outp.write_text(json.dumps(out, indent=1, default=str))  # what is done so far survives a timeout
            print(f"-- {section} ({time.time() - t_start:.0f} s)", flush=True)
        row = {"section": section, "key": key, "kernel": spec.source, "defines": spec.defines, "block": spec.block}
        bk = build_key(spec)
        if time.time() - t_start > a.budget_s:
            row["error"] = f"skipped: past the {a.budget_s:.0f} s budget"
            out["rows"].append(row)
            continue
        if bk not in built:
            row["error"] = errors.get(bk, "not built")
            out["rows"].append(row)
            continue
        try:
            m = runner.measure(label(section, key), spec, built=built[bk], **kw)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
            print(f"{label(section, key):60s} ERROR {row['error']}", flush=True)
            out["rows"].append(row)
            continue
        row.update(median=m.median, min=m.min, max=m.max, noise=m.noise, n=m.n, stop_reason=m.stop_reason,
                   throttle=m.throttle, sm_clock_mhz=m.sm_clock_mhz)
        if section == "hops":
            row["values"] = m.values
            extra = "  p10 %.1f  p50 %.1f  p90 %.1f" % tuple(ml.percentile(m.values, q) for q in (10, 50, 90))
        elif section == "conflict":
            extra = f"  model {key['wavefronts']} wavefronts"
        else:
            extra = ""
        out["rows"].append(row)
        print(f"{label(section, key):60s} {m.median:10.3f}  (min {m.min:.3f} max {m.max:.3f} noise {m.noise:.2%} "
              f"n={m.n} {m.stop_reason}){extra}", flush=True)
    out["facts"] = facts_from(out["rows"], sizes)
    out["summary"] = summaries(out["rows"], sizes)
    out["plots"] = plots(out["rows"], sizes, outp.parent, f"{info.name} ({info.arch})")
    out["elapsed_s"] = round(time.time() - t_start, 1)
    outp.write_text(json.dumps(out, indent=1, default=str))
    print("\nfacts (named as the tests name them):")
    for k, v in out["facts"].items():
        print(f"  {k:45s} {v}")
    print(json.dumps(out["summary"], indent=1, default=str))
    print(f"wrote {outp} in {out['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
