#!/usr/bin/env bash
# The validation facts (the stresses) run after run, planted shifts of the stress-read facts, then the
# GPU suite cold and warm, on the GPU machine from the repository root:
#
#   OUT=<folder> RUNS=3 bash tools/device_stress_check.sh
#
# Summary lines to stdout; logs and reports in $OUT/stress_check.tgz.
set -u
FINAL=${OUT:-/tmp/gpuprops-stress}
OUT=$(mktemp -d)
mkdir -p "$FINAL"
export PYTHONUNBUFFERED=1
RUN="python3 -m pytest hwtests -p no:cacheprovider -q"
FACTS=${FACTS:-pytest_gpuprops/facts/sm_90.toml}

timed() {  # timed <label> <log> <command...>
  local label=$1 log=$2; shift 2
  local t0; t0=$(date +%s.%N)
  "$@" >"$log" 2>&1
  local rc=$?
  echo "$label: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s | $(grep -a '^gpuprops: ' "$log" | tail -1) | $(grep -aE '[0-9]+ (passed|failed)' "$log" | tail -1)"
}

nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
for i in $(seq 1 "${RUNS:-3}"); do
  timed "validation $i" "$OUT/validation$i.log" $RUN -m validation --gpuprops-report "$OUT/validation$i.json"
done
for shift in "wgmma_bf16_dense_tflops:-5%" "sustained_sm_clock_tensor_mhz:-5%"; do
  name=${shift%%:*}
  value=$(python3 - "$FACTS" "$name" "${shift##*:}" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" <<'PY'
import sys, tomllib
facts = tomllib.load(open(sys.argv[1], "rb"))
print(f"{facts['gpus'][sys.argv[4]][sys.argv[2]]['value'] * float(sys.argv[3].rstrip('%')) / 100:+.3f}")
PY
)
  GPUPROPS_PLANT_SHIFT="0:$name:$value" timed "planted $name $value" "$OUT/planted_$name.log" \
    $RUN -m validation -k "$name" --gpuprops-facts "$FACTS"
  grep -a -m1 -A6 "does not hold" "$OUT/planted_$name.log"
done
timed "gpu suite cold" "$OUT/cold.log" $RUN -m "not static" --durations=15 --gpuprops-report "$OUT/cold.json"
timed "gpu suite warm" "$OUT/warm.log" $RUN -m "not static" --durations=15 --gpuprops-report "$OUT/warm.json"
grep -a -A8 "slowest" "$OUT/warm.log"
tar -czf "$FINAL/stress_check.tgz" -C "$OUT" .
