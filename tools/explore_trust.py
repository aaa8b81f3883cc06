"""Device exploration for the trust work (clean regions, HMMA issue model, ncu utilisation).

Prints and writes raw numbers, asserts nothing: what the facts and the model are derived from.

    python3 tools/explore_trust.py --out $OUT/explore.json
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hwtests"))
import specs  # noqa: E402

from pytest_gpuprops import measure  # noqa: E402
from pytest_gpuprops.measure import Runner, StopRule  # noqa: E402

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def hmma_spec(ilp, warps, iters, align, unroll=specs.HMMA_UNROLL, grid=1):
    s = specs.hmma(ilp, warps, unroll)
    s.defines.update(ITERS=iters, ALIGN=align)
    s.grid = grid
    s.region_other = 0 if iters == 1 else 12
    return s


def raw(runner, spec, launches=7):
    cubin, _ = runner.build(spec)
    fn = runner.load(cubin, spec.kernel)
    args = spec.args(runner.cp)
    runner.launch_pairs(fn, spec, args)
    return [runner.launch_pairs(fn, spec, args).tolist() for _ in range(launches)]


def hmma_grid(runner, out):
    ov = runner.clock_overhead()
    rows = []
    for iters, align in ((1, 0), (1, 1), (16, 1), (16, 0)):
        for warps in (1, 2, 3, 4):
            for ilp in range(1, 9):
                if iters == 16 and align == 0 and ilp > 2:
                    continue
                spec = hmma_spec(ilp, warps, iters, align)
                n = ilp * specs.HMMA_UNROLL * iters
                launches = raw(runner, spec)
                spans = [(max(b for _, b in p) - min(a for a, _ in p) - ov) / (n * warps) for p in launches]
                per_warp = [statistics.fmean((b - a - ov) / n for a, b in p) for p in launches]
                skew = [max(a for a, _ in p) - min(a for a, _ in p) for p in launches]
                row = dict(iters=iters, align=align, ilp=ilp, warps=warps, span=statistics.median(spans),
                           span_min=min(spans), span_max=max(spans), per_warp=statistics.median(per_warp),
                           start_skew=statistics.median(skew))
                rows.append(row)
                print(f"HMMA iters={iters:2d} align={align} ILP{ilp} W{warps}: span/HMMA/SMSP {row['span']:.3f} "
                      f"[{row['span_min']:.3f}..{row['span_max']:.3f}] per-warp/HMMA {row['per_warp']:.3f} "
                      f"skew {row['start_skew']}", flush=True)
    out["hmma_grid"] = rows


def ncu_runs(runner, out):
    """The tensor pipe under ncu at ILP 1-4, long and short kernels, one block and one per SM: one ncu
    process for all of them (measure.ncu_metrics, as the suite's own ncu facts)."""
    metrics = ["smsp__pipe_tensor_op_hmma_cycles_active.sum", "smsp__inst_executed_pipe_tensor_op_hmma.sum",
               "smsp__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
               "smsp__cycles_active.avg", "sm__cycles_elapsed.avg", "gpu__time_duration.sum"]
    labels = [dict(ilp=ilp, grid=grid, iters=iters, block=128) for ilp in (1, 2, 3, 4)
              for grid, iters in ((1, 2000), (runner.info.sm_count, 2000), (1, 1))]
    t = time.time()
    got = measure.ncu_metrics(runner, [hmma_spec(lab["ilp"], 1, lab["iters"], 0, grid=lab["grid"]) for lab in labels],
                              metrics, timeout_s=400)
    print(f"ncu: {time.time() - t:.1f} s")
    out["ncu"] = [dict(lab, **g) for lab, g in zip(labels, got)]
    for row in out["ncu"]:
        print("NCU", row, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-ncu", action="store_true")
    a = ap.parse_args()
    info = measure.gpu_info(0)
    out = {"gpu": info.as_dict()}
    runner = Runner(info, KERNELS, stop=StopRule(noise_target=0.005, min_samples=5, max_samples=30, time_budget_s=0.5))
    out["overhead"] = runner.clock_overhead()
    out["sm_clock_mhz"] = runner.sm_clock_mhz()
    out["throttle"] = measure.throttle_reasons(info)
    print(info, "overhead", out["overhead"], "clock", out["sm_clock_mhz"], out["throttle"], flush=True)
    t = time.time()
    for label, spec, div, mode in [("ffma_latency", specs.ffma(1, 1), specs.FFMA_UNROLL, "warp"),
                                   ("ffma_smsp", specs.ffma(8, 4), specs.FFMA_UNROLL * 32, "span"),
                                   ("lds_50", specs.lds_chase(50), 50, "warp"),
                                   ("lds_500", specs.lds_chase(500), 500, "warp"),
                                   ("sts_50", specs.sts_chain(50), 50, "warp"),
                                   ("sts_then_lds", specs.sts_chain(1, then_lds=True), 1, "warp"),
                                   ("lds_alone", specs.sts_chain(0, then_lds=True), 1, "warp"),
                                   ("hmma_dep", specs.hmma(1, 1), specs.HMMA_UNROLL, "warp"),
                                   ("hmma_ilp8_w1", specs.hmma(8, 1), 8 * specs.HMMA_UNROLL, "warp")]:
        m = runner.measure(label, spec, divisor=div, mode=mode)
        out[label] = m.as_dict()
        print(f"{label:14s} {m.summary()}", flush=True)
    print(f"facts: {time.time() - t:.1f} s", flush=True)
    t = time.time()
    hmma_grid(runner, out)
    print(f"grid: {time.time() - t:.1f} s", flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    if not a.skip_ncu and measure.find_ncu():
        ncu_runs(runner, out)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
