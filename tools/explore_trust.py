"""Device exploration for the trust work (clean regions, HMMA issue model, ncu utilisation).

Prints and writes raw numbers, asserts nothing: what the facts and the model are derived from.

    python3 tools/explore_trust.py --out $OUT/explore.json
"""

import argparse
import json
import os
import statistics
import subprocess
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


def ncu_child(argv):
    import cupy as cp
    launches = json.loads(argv[0])
    for L in launches:
        fn = cp.RawModule(path=L["cubin"]).get_function(L["kernel"])
        n_warps = L["grid"] * L["block"] // 32
        ones = cp.full(32 * 6, 0x3C003C00, dtype=cp.uint32)
        fn((L["grid"],), (L["block"],), (cp.zeros(2 * n_warps, dtype=cp.uint64), ones,
                                         cp.zeros(L["grid"] * L["block"], dtype=cp.float32)))
        cp.cuda.Device().synchronize()


def ncu_runs(runner, out, tmp):
    metrics = ["smsp__pipe_tensor_op_hmma_cycles_active.sum", "smsp__inst_executed_pipe_tensor_op_hmma.sum",
               "smsp__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
               "smsp__cycles_active.avg", "sm__cycles_elapsed.avg", "gpu__time_duration.sum"]
    launches, labels = [], []
    for ilp in (1, 2, 3, 4):
        for grid, iters in ((1, 2000), (runner.info.sm_count, 2000), (1, 1)):
            spec = hmma_spec(ilp, 1, iters, 0, grid=grid)
            cubin, _ = runner.build(spec)
            path = os.path.join(tmp, f"hmma_ilp{ilp}_g{grid}_i{iters}.cubin")
            Path(path).write_bytes(cubin)
            launches.append(dict(cubin=path, kernel="hmma_16816", grid=grid, block=128))
            labels.append(dict(ilp=ilp, grid=grid, iters=iters, block=128))
    cmd = [measure.find_ncu(), "--clock-control", "none", "--csv", "--print-units", "base", "--metrics",
           ",".join(metrics), sys.executable, __file__, "ncu-child", json.dumps(launches)]
    t = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    print(f"ncu: {time.time() - t:.1f} s, rc {proc.returncode}")
    import csv
    import io
    text = proc.stdout
    body = text[text.index('"ID"'):] if '"ID"' in text else text
    res = {}
    for row in csv.DictReader(io.StringIO(body)):
        try:
            res.setdefault(int(row["ID"]), {})[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            pass
    rows = []
    for i, lab in enumerate(labels):
        r = dict(lab, **res.get(i, {}))
        rows.append(r)
        print("NCU", r, flush=True)
    out["ncu"] = rows
    if not res:
        print(proc.stdout[-3000:], proc.stderr[-3000:])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ncu-child":
        return ncu_child(sys.argv[2:])
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
        ncu_runs(runner, out, runner._tmp)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
