#!/usr/bin/env bash
# Where a GPU run's time goes (docs/performance.md), on the GPU machine, from the repository root:
#
#   OUT=<folder> bash tools/device_profile.sh
#
# 1. the GPU suite cold (a fresh, empty $GPUPROPS_CACHE_DIR): wall time, JUnit XML (per test: wall,
#    and the gpu_busy_s / gpu_launches properties the plugin records), every compile's seconds
#    (the cubin cache's metadata);
# 2. the same again, warm (every fact, the stresses included), with its report;
# 3. the micro-architecture facts warm (-m "not static and not validation") under cProfile, then
#    once more without it (its wall time);
# 4. one fact in a process of its own (-k ffma_latency), twice, once under cProfile, once under -X importtime.
# 5. the micro-architecture facts and the one fact again, with bytecode written and reused (twice);
# 6. WARM_RUNS more GPU suite runs (with reports), MICRO_RUNS more micro-architecture runs and
#    VALIDATION_RUNS more runs of the validation facts (the stresses), with reports (each default 0).
# SKIP_PROFILE=1 leaves out the cProfile run.
# Then tools/profile_gpu_run.py turns it into the tables docs/performance.md keeps: $OUT/profile.md,
# and everything in one archive, $OUT/profile.tgz.
set -u
FINAL=${OUT:-/tmp/gpuprops-profile}
OUT=$(mktemp -d)
mkdir -p "$FINAL"
export PYTHONUNBUFFERED=1
export GPUPROPS_CACHE_DIR=${GPUPROPS_CACHE_DIR:-$(mktemp -d)}
RUN="python3 -m pytest hwtests -p no:cacheprovider -q"
GPU='-m not static'
MICRO='not static and not validation'

timed() {  # timed <label> <log> <command...>: run it, then print label, exit status and wall seconds
  local label=$1 log=$2; shift 2
  local t0; t0=$(date +%s.%N)
  "$@" >"$log" 2>&1
  local rc=$?
  local s; s=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')")
  echo "$label: rc=$rc wall=$s s | $(grep -aE '[0-9]+ (passed|failed)' "$log" | tail -1)" | tee -a "$OUT/walls.txt"
  grep -a "^gpuprops prefetch:" "$log" | sed 's/^/    /' | tee -a "$OUT/walls.txt"
}

nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu --format=csv >"$OUT/gpu.csv" 2>&1
nproc >"$OUT/nproc.txt"
# whether this Python reuses bytecode, and whether the installed packages came with any
python3 - >"$OUT/bytecode.txt" 2>&1 <<'PY'
import os, sys, importlib.util
print("PYTHONDONTWRITEBYTECODE =", os.environ.get("PYTHONDONTWRITEBYTECODE"), "| sys.flags.dont_write_bytecode =",
      sys.flags.dont_write_bytecode)
for mod in ("_pytest", "pluggy", "numpy", "cupy", "hypothesis", "tabulate"):
    spec = importlib.util.find_spec(mod)
    if spec is None or not spec.origin:
        continue
    cache = importlib.util.cache_from_source(spec.origin)
    print(f"{mod}: {spec.origin} bytecode {'present' if os.path.exists(cache) else 'absent'}")
PY
timed "gpu suite cold" "$OUT/cold.log" $RUN -m "not static" --durations=0 --junitxml="$OUT/cold.xml" \
  --gpuprops-report "$OUT/cold.json"
python3 - "$GPUPROPS_CACHE_DIR" "$OUT/compile_seconds.json" <<'PY'
import json, pathlib, sys
rows = []
for meta in pathlib.Path(sys.argv[1]).rglob("*.json"):
    try:
        m = json.loads(meta.read_text())
    except (OSError, ValueError):
        continue
    if isinstance(m, dict) and "seconds" in m and "arch" in m:
        rows.append({"source": pathlib.Path(m["source"]).name, "arch": m["arch"], "options": m["options"],
                     "seconds": m["seconds"]})
json.dump(sorted(rows, key=lambda r: -r["seconds"]), open(sys.argv[2], "w"), indent=1)
PY
timed "gpu suite warm" "$OUT/warm.log" $RUN -m "not static" --durations=0 --junitxml="$OUT/warm.xml" \
  --gpuprops-report "$OUT/warm.json"
if [ -z "${SKIP_PROFILE:-}" ]; then
  timed "micro facts warm, cProfile" "$OUT/micro_prof.log" python3 -m cProfile -o "$OUT/micro.prof" -m pytest hwtests \
    -p no:cacheprovider -q -m "$MICRO" --junitxml="$OUT/micro_prof.xml"
fi
timed "micro facts warm" "$OUT/micro.log" $RUN -m "$MICRO" --durations=0 --junitxml="$OUT/micro.xml"
for i in 1 2; do
  timed "one fact process $i" "$OUT/one$i.log" $RUN -k ffma_latency
done
timed "one fact process, cProfile" "$OUT/one_prof.log" python3 -m cProfile -o "$OUT/one.prof" -m pytest hwtests \
  -p no:cacheprovider -q -k ffma_latency
timed "one fact process, -X importtime" "$OUT/one_importtime.log" python3 -X importtime -m pytest hwtests \
  -p no:cacheprovider -q -k ffma_latency
# the same with bytecode written and reused (where the environment sets PYTHONDONTWRITEBYTECODE, every
# process above compiles every module and pytest rewrites every test file from scratch)
for i in 1 2; do
  timed "micro facts warm, bytecode kept $i" "$OUT/micro_bc$i.log" env -u PYTHONDONTWRITEBYTECODE \
    PYTHONPYCACHEPREFIX="$OUT/pycache" $RUN -m "$MICRO"
  timed "one fact process, bytecode kept $i" "$OUT/one_bc$i.log" env -u PYTHONDONTWRITEBYTECODE \
    PYTHONPYCACHEPREFIX="$OUT/pycache" $RUN -k ffma_latency
done
for i in $(seq 1 "${WARM_RUNS:-0}"); do
  timed "gpu suite warm again $i" "$OUT/warm_again$i.log" $RUN -m "not static" --gpuprops-report "$OUT/warm_again$i.json"
done
for i in $(seq 1 "${MICRO_RUNS:-0}"); do
  timed "micro facts warm again $i" "$OUT/micro_again$i.log" $RUN -m "$MICRO"
done
for i in $(seq 1 "${VALIDATION_RUNS:-0}"); do
  timed "validation facts $i" "$OUT/validation$i.log" $RUN -m validation --gpuprops-report "$OUT/validation$i.json"
done
python3 tools/profile_gpu_run.py --dir "$OUT" >"$OUT/profile.md" 2>&1
cp "$OUT/profile.md" "$OUT/walls.txt" "$FINAL/"
rm -rf "$OUT/pycache"
tar -czf "$FINAL/profile.tgz" -C "$OUT" .
cat "$OUT/walls.txt"
