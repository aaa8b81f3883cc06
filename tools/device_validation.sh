#!/usr/bin/env bash
# The device-machine run behind docs/results.md: the fact suite cold and warm, two stored
# pytest-benchmark runs compared, and two planted changes that must fail. Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/gpuprops-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUPROPS_CACHE_DIR=/tmp/gpuprops-cold-cache
B="--benchmark-storage=file://.bench-device --benchmark-columns=median,min,max,rounds"
rm -rf .bench-device "$GPUPROPS_CACHE_DIR"
echo "== run 1 (cold cache)"; /usr/bin/time -f "run1 wall %e s" python3 -m pytest hwtests -m "not static" -p no:cacheprovider -q \
  --gpuprops-report "$OUT/report.json" --gpuprops-plots "$OUT" --benchmark-save=driver_a $B 2>&1 | tee "$OUT/run1.log" | tail -45
echo "== run 2 (warm cache), compared with run 1"; /usr/bin/time -f "run2 wall %e s" python3 -m pytest hwtests -m "not static" -p no:cacheprovider -q \
  --benchmark-save=driver_b --benchmark-compare=0001 --benchmark-compare-fail=median:5% $B 2>&1 | tee "$OUT/run2.log" | tail -30
echo "== planted: lds_latency_cycles moved by 20 % in a copy of the facts"
sed 's/^value = 23.0$/value = 27.6/' pytest_gpuprops/facts/sm_90.toml > /tmp/planted.toml
python3 -m pytest hwtests -k "lds_latency" -p no:cacheprovider -q --gpuprops-facts /tmp/planted.toml 2>&1 | tee "$OUT/planted_fact.log" | grep -E "does not hold|expected:|measured:|passed|failed" | head -8
echo "== planted: baseline 0001 edited (lds medians x 0.8)"
python3 - <<'PY'
import glob, json
p = sorted(glob.glob(".bench-device/*/0001_*.json"))[0]
d = json.load(open(p))
for b in d["benchmarks"]:
    if "lds_latency" in b["name"]:
        for k in ("median", "min", "max", "mean"):
            b["stats"][k] *= 0.8
json.dump(d, open(p, "w"))
PY
python3 -m pytest hwtests -k "lds_latency" -p no:cacheprovider -q --benchmark-compare=0001 --benchmark-compare-fail=median:5% $B 2>&1 | tee "$OUT/planted_baseline.log" | tail -12
echo "== static facts on the device's NVRTC"; python3 -m pytest hwtests -m static -p no:cacheprovider -q -n 8 2>&1 | tail -4
cp .bench-device/*/0002_*.json "$OUT/" 2>/dev/null; ls .bench-device/*
