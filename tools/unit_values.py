"""Per-unit values of the GPU-scoped facts (memory system) in a set of reports, one row per report:
what docs/results.md's unit table is made from (with what each sustained-clock stress reports beside
its clock: the load's own rate over its windows, stress_rate_*, and the clock from 1 s to half the
stress, stress_early_mhz_*); then every verdict flagged as beyond the units measured
so far (a new sample for that fact's population: tools/population_fact.py recomputes its entry).
Usage: python3 tools/unit_values.py run1.json ..."""

import json
import sys

from tabulate import tabulate

from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops.assertions import BEYOND_UNITS


def main(paths: list[str]) -> int:
    rows, names, beyond = [], set(), []
    for path in paths:
        data = json.load(open(path))
        beyond += [(path.rsplit("/", 1)[-1], v["fact"], v["status"], v["measured"], flag)
                   for v in data.get("facts", []) for flag in v.get("flags", []) if flag.startswith(BEYOND_UNITS)]
        gpu = data.get("meta", {}).get("gpu", {})
        got = {v["fact"]: v["measured"] for v in data.get("facts", []) if v.get("gpu")
               and (v["fact"] in gp_facts.GPU_SCOPED or v["fact"].startswith(("dram_", "l2_")))}
        for v in data.get("facts", []):  # what a stress reports beside its clock, for shorter methods later
            launch = (v.get("measurement") or {}).get("launch") or {}
            load = v["fact"].replace("sustained_sm_clock_", "").replace("_mhz", "")
            if not v["fact"].startswith("sustained_sm_clock_"):
                continue
            for keys, column in ((("rate_sustained", "rate_second_half"), "stress_rate_"),
                                 (("early_sustained_mhz",), "stress_early_mhz_")):
                value = next((launch[k] for k in keys if launch.get(k) is not None), None)
                if v.get("gpu") and value is not None:
                    got[column + load] = value
        names |= set(got)
        rows.append((path.rsplit("/", 1)[-1], gpu.get("name", "?"), (gpu.get("uuid") or "?")[:12], got))
    cols = sorted(names)
    print(tabulate([[p, n, u, *(f"{g[c]:.2f}" if c in g and g[c] is not None else "-" for c in cols)]
                    for p, n, u, g in rows], headers=["report", "GPU", "UUID", *cols], disable_numparse=True))
    if beyond:
        print("\nnew samples (beyond the units measured so far):")
        for report, fact, status, measured, flag in beyond:
            print(f"  {report}: {fact} {status} at {measured:.3f}: {flag}")
        print("each joins its population with: python3 tools/population_fact.py --facts FACTS.toml "
              "[--gpu SKU] --fact NAME --reports <these reports> --write")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
