#!/usr/bin/env bash
# Small selections, this tree against another on the same machine, interleaved (docs/performance.md):
# accel-sim's five facts as one pytest process cold (an empty cache) and warm, and one fact warm.
#
#   BASE=<folder of an exported commit> RUNS=2 OUT=<folder> bash tools/probes/selection_pairs.sh
#
# Each line: label, exit status, wall seconds, pytest's summary, the prefetch line. Logs in $OUT.
set -u
BASE=${BASE:-.baseline}
RUNS=${RUNS:-2}
OUT=${OUT:-/tmp/selection-pairs}
mkdir -p "$OUT"
HERE=$(pwd)
FIVE=("hwtests/test_smem.py::test_lds_latency[500]" "hwtests/test_smem.py::test_smem_bandwidth[1-float-lds]"
      "hwtests/test_memory_hierarchy.py::test_chase_latency[l1]"
      "hwtests/test_memory_hierarchy.py::test_chase_per_hop_distribution[l2-10]"
      "hwtests/test_memory_hierarchy.py::test_chase_latency[dram]")
CACHES=$(mktemp -d)

timed() {  # timed <label> <tree> <cache folder> <pytest args...>
  local label=$1 tree=$2 cache=$3; shift 3
  local log="$OUT/$label.log" t0 rc
  t0=$(date +%s.%N)
  (cd "$tree" && GPUPROPS_CACHE_DIR="$cache" python3 -m pytest -p no:cacheprovider -q "$@" >"$log" 2>&1)
  rc=$?
  echo "$label rc=$rc wall=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')") s |" \
       "$(grep -aE '[0-9]+ (passed|failed|skipped)' "$log" | tail -1) | $(grep -a '^gpuprops prefetch:' "$log")" \
       | tee -a "$OUT/pairs.txt"
}

for tree in new base; do  # one warm cache per tree for the one-fact runs
  dir=$HERE; [ $tree = base ] && dir=$BASE
  timed "$tree-one-fact-warmup" "$dir" "$CACHES/$tree-one" hwtests -k ffma_latency
done
for r in $(seq "$RUNS"); do
  for tree in new base; do
    dir=$HERE; [ $tree = base ] && dir=$BASE
    timed "$tree-five-cold-$r" "$dir" "$CACHES/$tree-five-$r" "${FIVE[@]}"
    timed "$tree-five-warm-$r" "$dir" "$CACHES/$tree-five-$r" "${FIVE[@]}"
    timed "$tree-one-fact-$r" "$dir" "$CACHES/$tree-one" hwtests -k ffma_latency
  done
done
rm -rf "$CACHES"
