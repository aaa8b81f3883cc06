#!/usr/bin/env python3
"""Where an ncu profile's seconds go (docs/performance.md), on the GPU machine: the suite's own ncu
profile (test_tensorcore.py's three HMMA launches, its three metrics) run the way measure.NcuJob
runs it, but with the profiled process replaced by a copy of pytest_gpuprops.launch that prints the
time of each phase: Python started, CuPy imported, CUDA initialised (no context yet), the GPU's
lock taken, context made, modules loaded and arguments built, the launches done (under ncu's
replays), buffers released. A probe, not a test.

    python3 tools/probes/ncu_phases.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hwtests"))

TRACED = r'''
import sys, time
t = [("python started", time.time())]
import json
import cupy as cp
from pytest_gpuprops import launch
t.append(("cupy imported", time.time()))
job = json.loads(sys.argv[1])
cp.cuda.runtime.getDeviceCount()
t.append(("CUDA initialised", time.time()))
with launch.gpu_lock(job["lock"]):
    t.append(("lock taken", time.time()))
    L0 = job["launches"][0]
    cp.cuda.Device(L0.get("device", 0)).use()
    cp.cuda.Device().synchronize()
    t.append(("context made", time.time()))
    ready = [(cp.RawModule(path=L["cubin"]).get_function(L["kernel"]), L, launch.build_args(cp, L))
             for L in job["launches"]]
    cp.cuda.Device().synchronize()
    t.append(("modules loaded, arguments built", time.time()))
    for fn, L, args in ready:
        fn((L["grid"],), (L["block"],), args)
    cp.cuda.Device().synchronize()
    t.append(("launches profiled", time.time()))
    del ready, fn, args
    cp.get_default_memory_pool().free_all_blocks()
    cp.cuda.Device().synchronize()
    t.append(("released", time.time()))
print("PHASES " + json.dumps(t), file=sys.stderr)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    import test_tensorcore

    from pytest_gpuprops import measure
    info = measure.gpu_info(0)
    runner = measure.Runner(info, ROOT / "kernels")
    hmma_specs, metrics = test_tensorcore._hmma_profile_request()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(TRACED)
    for run in range(a.runs):
        cmd = measure._ncu_start(runner, hmma_specs, metrics)
        i = cmd.index("-m")
        cmd[i:i + 2] = [f.name]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        t_end = time.time()
        line = next((x for x in proc.stderr.splitlines() if x.startswith("PHASES ")), None)
        if proc.returncode != 0 or line is None:
            print(f"run {run}: ncu failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
            return 1
        phases = json.loads(line[len("PHASES "):])
        prev = t0
        print(f"run {run}: ncu took {t_end - t0:.2f} s")
        for name, t in phases:
            print(f"  {name:34s} +{t - t0:6.2f} s  ({t - prev:5.2f} s)")
            prev = t
        print(f"  {'ncu ended':34s} +{t_end - t0:6.2f} s  ({t_end - prev:5.2f} s)")
        lock_held = phases[-1][1] - dict(phases)["lock taken"]
        print(f"  the GPU's lock held {lock_held:.2f} s of {t_end - t0:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
