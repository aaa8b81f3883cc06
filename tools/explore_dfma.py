"""Device exploration for issue 10: why did the DFMA dependent latency move between runs?

Prints and writes raw numbers, asserts nothing. Per variant: UNROLL 128/512 dependent DFMAs, timed
on the first pass (cold instruction caches) or the second, inputs that overflow to inf after ~12
steps (the suite's 0.5..1) or stay finite (-0.5..-0.75: x*x+x tends to 0 from below), one warp on one
SM (grid 1, many launches) and one warp on each SM (grid = SM count, per-SM values by %smid).

    python3 tools/explore_dfma.py --out $OUT/dfma.json      # run it in several processes
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from pytest_gpuprops import measure
from pytest_gpuprops.measure import KernelSpec, Runner

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
PROBE = "../tools/probes/dfma_probe.cu"  # relative to kernels/, where the Runner finds clock_overhead.cu


def run_variant(runner, op, unroll, passes, data, grid, launches):
    cp = runner.cp
    dtype = cp.float64 if op == 1 else cp.float32
    lane = cp.arange(32)
    start = (0.5 + lane / 64) if data == "inf" else (-0.5 - lane / 128)
    spec = KernelSpec(PROBE, "dfma_probe", {"UNROLL": unroll, "PASSES": passes, "OP": op}, grid=grid,
                      block=32)
    cubin, _ = runner.build(spec)
    fn = runner.load(cubin, spec.kernel)
    sm = cp.zeros(grid, dtype=cp.uint32)
    args = (start.astype(dtype), cp.zeros(grid * 32, dtype=dtype), sm)
    ov = runner.clock_overhead()
    runner.launch_pairs(fn, spec, args)
    per_launch, per_sm = [], {}
    for _ in range(launches):
        pairs = runner.launch_pairs(fn, spec, args)
        vals = [(b - a - ov) / unroll for a, b in pairs.tolist()]
        sms = sm.get().tolist()
        per_launch.append(statistics.median(vals))
        for s, v in zip(sms, vals):
            per_sm.setdefault(int(s), []).append(v)
    return per_launch, {s: statistics.median(v) for s, v in sorted(per_sm.items())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    info = measure.gpu_info(0)
    runner = Runner(info, KERNELS)
    out = {"gpu": info.as_dict(), "overhead": runner.clock_overhead(), "sm_clock_mhz": runner.sm_clock_mhz(),
           "throttle": measure.throttle_reasons(info), "variants": []}
    n_sm = runner.cp.cuda.Device(info.index).attributes["MultiProcessorCount"]
    print(info.name, "SMs", n_sm, "overhead", out["overhead"], "clock", out["sm_clock_mhz"], flush=True)
    t = time.time()
    for op in (1, 2):
        for unroll in (128, 512):
            for passes in (1, 2):
                for data in ("inf", "finite"):
                    if op == 2 and data == "finite":
                        continue
                    one, _ = run_variant(runner, op, unroll, passes, data, 1, 30)
                    many, per_sm = run_variant(runner, op, unroll, passes, data, n_sm, 5)
                    sm_vals = list(per_sm.values())
                    row = dict(op="DFMA" if op == 1 else "FFMA", unroll=unroll, passes=passes, data=data,
                               grid1=one, grid_all=many, per_sm=per_sm)
                    out["variants"].append(row)
                    print(f"{row['op']} U{unroll:4d} P{passes} {data:6s}: grid1 med {statistics.median(one):.3f} "
                          f"[{min(one):.3f}..{max(one):.3f}]  all SMs med {statistics.median(sm_vals):.3f} "
                          f"[{min(sm_vals):.3f}..{max(sm_vals):.3f}] "
                          f"hist {sorted(set(round(v, 2) for v in sm_vals))[:12]}", flush=True)
    print(f"{time.time() - t:.1f} s", flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
