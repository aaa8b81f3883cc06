"""Per-unit values of the GPU-scoped facts (memory system) in a set of reports, one row per report:
what docs/results.md's unit table is made from. Usage: python3 tools/unit_values.py run1.json ..."""

import json
import sys

from tabulate import tabulate

from pytest_gpuprops import facts as gp_facts


def main(paths: list[str]) -> int:
    rows, names = [], set()
    for path in paths:
        data = json.load(open(path))
        gpu = data.get("meta", {}).get("gpu", {})
        got = {v["fact"]: v["measured"] for v in data.get("facts", []) if v.get("gpu")
               and (v["fact"] in gp_facts.GPU_SCOPED or v["fact"].startswith(("dram_", "l2_")))}
        names |= set(got)
        rows.append((path.rsplit("/", 1)[-1], gpu.get("name", "?"), (gpu.get("uuid") or "?")[:12], got))
    cols = sorted(names)
    print(tabulate([[p, n, u, *(f"{g[c]:.2f}" if c in g and g[c] is not None else "-" for c in cols)]
                    for p, n, u, g in rows], headers=["report", "GPU", "UUID", *cols], disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
