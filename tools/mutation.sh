#!/usr/bin/env bash
# The mutation run over pytest_gpuprops/ (docs/testing.md), one module at a time:
#   tools/mutation.sh                 # every module
#   tools/mutation.sh sass compile    # just these
# Then: python tools/mutation_score.py [--survivors]; mutmut show <mutant>; mutmut browse.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each mutant's test run is a fresh pytest session: start it from a warm cubin cache (the seed is
# copied, never written, so a mutant of the compile layer cannot poison it).
seed=${GPUPROPS_TEST_CUBIN_SEED:-$PWD/.mutation-cubins}
if [ ! -d "$seed" ]; then
    tmp=$(mktemp -d)
    python -m pytest tests -q -p no:cacheprovider --basetemp="$tmp" -k "not plugin" >/dev/null
    cp -r "$tmp/cubins0" "$seed"
    rm -rf "$tmp"
fi
export GPUPROPS_TEST_CUBIN_SEED=$seed
modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=(assertions facts report measure compile sass cli plugin)
for m in "${modules[@]}"; do
    mutmut run --max-children "${MUTMUT_CHILDREN:-2}" "pytest_gpuprops.$m.*"
done
python tools/mutation_score.py
