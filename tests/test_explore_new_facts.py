"""tools/explore_new_facts.py without a GPU: its plan covers every issue-10 fact the tests check, under
the names the tests give them."""

import re
from pathlib import Path

from gp_testing import load_tool

ROOT = Path(__file__).parent.parent


def test_plan_and_fact_names_match_the_tests():
    tool = load_tool("explore_new_facts")
    sizes = tool.ml.cache_sizes("sm_90", tool.NOMINAL_PROPS)
    items = tool.plan(sizes, "sm_90")
    sections = {s for s, _, _, _ in items}
    assert sections == {"alu", "mma", "chase", "hops", "sweep", "wgmma", "conflict"}
    assert "wgmma" not in {s for s, _, _, _ in tool.plan(sizes, "sm_89")}
    labels = [tool.label(s, k) for s, k, _, _ in items]
    assert len(labels) == len(set(labels))
    rows = [{"section": s, "key": k, "median": 1.0} for s, k, _, _ in items if s != "hops"]
    rows += [{"section": "hops", "key": k, "values": [float(i) for i in range(64)]} for s, k, _, _ in items if s == "hops"]
    facts = tool.facts_from(rows, sizes)
    assert all(v is not None for v in facts.values()), [k for k, v in facts.items() if v is None]
    # every fact name the new GPU tests check: literal ones read from their source, built ones as they build them
    names = set()
    for test in ("test_alu_ops", "test_mma_dtypes", "test_memory_hierarchy", "test_smem_conflicts", "test_wgmma"):
        names.update(re.findall(r'"([a-z0-9_]+_cycles)"', (ROOT / "hwtests" / f"{test}.py").read_text()))
    specs = tool.specs
    names.update(f"{op}_{w}_cycles" for op in specs.ALU_OPS for w in ("latency", "smsp"))
    names.update(f"mma_{d}_{w}_cycles" for d in specs.MMA_DTYPES for w in ("dependent", "single_warp_issue", "smsp"))
    names.update(f"{lv}_latency_p{q}_cycles" for lv in ("l2_hit", "dram") for q in (10, 90))
    names.update(f"wgmma_m64n{n}k16_{t}_{a}_{w}_cycles" for n in specs.WGMMA_N for t in ("f16", "bf16")
                 for a in ("ss", "rs") for w in ("latency", "sm"))
    assert len(names) == 14 + 12 + 3 + 4 + 1 + 48
    assert names <= set(facts), names - set(facts)
