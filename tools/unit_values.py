"""Per-unit values of the GPU-scoped facts (memory system) in a set of reports, one row per report:
what docs/results.md's unit table is made from (with each sustained-clock stress's own rate over its
windows, stress_rate_ffma / stress_rate_tensor); then every verdict flagged as beyond the units measured
so far (a new sample for that fact's population: tools/population_fact.py recomputes its entry).
Usage: python3 tools/unit_values.py run1.json ..."""

import json
import sys

from tabulate import tabulate

from pytest_gpuprops import facts as gp_facts


def main(paths: list[str]) -> int:
    rows, names, beyond = [], set(), []
    for path in paths:
        data = json.load(open(path))
        beyond += [(path.rsplit("/", 1)[-1], v["fact"], v["status"], v["measured"], flag)
                   for v in data.get("facts", []) for flag in v.get("flags", []) if flag.startswith("beyond the units")]
        gpu = data.get("meta", {}).get("gpu", {})
        got = {v["fact"]: v["measured"] for v in data.get("facts", []) if v.get("gpu")
               and (v["fact"] in gp_facts.GPU_SCOPED or v["fact"].startswith(("dram_", "l2_")))}
        for v in data.get("facts", []):  # a stress's own rate, beside the rate facts it may one day replace
            rate = ((v.get("measurement") or {}).get("launch") or {}).get("rate_second_half")
            if v.get("gpu") and rate is not None:
                got[v["fact"].replace("sustained_sm_clock_", "stress_rate_").replace("_mhz", "")] = rate
        names |= set(got)
        rows.append((path.rsplit("/", 1)[-1], gpu.get("name", "?"), (gpu.get("uuid") or "?")[:12], got))
    cols = sorted(names)
    print(tabulate([[p, n, u, *(f"{g[c]:.2f}" if c in g and g[c] is not None else "-" for c in cols)]
                    for p, n, u, g in rows], headers=["report", "GPU", "UUID", *cols], disable_numparse=True))
    if beyond:
        print("\nnew samples (beyond the units measured so far):")
        for report, fact, status, measured, flag in beyond:
            print(f"  {report}: {fact} {status} at {measured:.3f}: {flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
