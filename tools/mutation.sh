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
    # the tests compile into the persistent cubin cache (tests/conftest.py cache_dir): warm it, then copy it
    python -m pytest tests -q -p no:cacheprovider -k "not plugin" >/dev/null || true
    cp -r "$(python -c 'from pytest_gpuprops.compile import default_cache_dir; print(default_cache_dir())')" "$seed"
fi
export GPUPROPS_TEST_CUBIN_SEED=$seed
# First pass: every mutant's session starts from the SASS listings the seed run read (hard links; see
# tests/conftest.py), so a mutant no longer pays for nvdisasm start-ups. A listing cache can only hide
# a kill (a mutant of code that runs on a cache miss), never make one. Only sass code runs on a
# listing-cache miss, so the survivors of sass are run again with no listings (second pass), and
# that result stands; a mutant elsewhere runs the same code either way.
listings=${GPUPROPS_TEST_LISTING_SEED:-$PWD/.mutation-listings}
if [ ! -d "$listings" ]; then
    python - "$listings" <<'PY'
import shutil, sys
from pytest_gpuprops.compile import default_cache_dir
shutil.copytree(default_cache_dir() / "sass", sys.argv[1], copy_function=shutil.copy2)
PY
fi
# mutmut copies a source file into mutants/ when the file's mutants are made, not the package's data: the
# facts files the tests read come over afresh every run
if [ -d mutants/pytest_gpuprops/facts ]; then cp pytest_gpuprops/facts/*.toml mutants/pytest_gpuprops/facts/; fi
modules=("$@")
[ ${#modules[@]} -eq 0 ] && modules=(cli results unit_compare session fixture cache prefetch plugin startup summary assertions facts facts_schema facts_record report confirmation measurement measure devices gpulock stats kernel_spec timing driver_launch nsight compile sass)
for m in "${modules[@]}"; do
    GPUPROPS_TEST_LISTING_SEED=$listings mutmut run --max-children "${MUTMUT_CHILDREN:-2}" "pytest_gpuprops.$m.*"
    survivors=""
    if [ "$m" = sass ]; then survivors=$(python tools/mutation_score.py --module "$m" --names); fi
    if [ -n "$survivors" ]; then
        # shellcheck disable=SC2086
        GPUPROPS_TEST_LISTING_SEED= mutmut run --max-children "${MUTMUT_CHILDREN:-2}" $survivors
    fi
done
python tools/mutation_score.py
