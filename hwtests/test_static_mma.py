"""Static checks of the mma.sync facts (hwtests/specs_mma.FACTS), without a GPU, on sm_90: every fact's
build, as the GPU test launches it, is clean at both ends and holds its spec's region (the type's one
opcode UNROLL x ILP times in the counted loop, only the loop's control beside it:
pytest_gpuprops/factspec.py). Beside those rules, what the sparse facts rely on: the 2:4 sparse form
compiles to HMMA.SP.16832 with its metadata register and sparsity selector 0, a dependent chain
accumulates into the previous result, and a region that holds the dense opcode instead is refused.
That the dense chains accumulate into the previous result is test_static_chains.py's."""

import dataclasses
import re

import fact_tests as ft
import pytest
import specs_mma as sm

from pytest_gpuprops import sass
from pytest_gpuprops.region_rules import Region

pytestmark = pytest.mark.static
FACTS = {f.name: f for f in sm.FACTS}
_REG = re.compile(r"\bR(\d+)\b")


def regs(operand: str) -> list[int]:
    return [int(r) for r in _REG.findall(operand)]


def _sparse(keep=lambda f: True) -> list:
    return ft.static_params([f for f in sm.SPARSE_FACTS if keep(f)])


@pytest.mark.parametrize("fact", ft.static_params(sm.FACTS))
def test_region_holds_what_the_fact_measures(fact):
    """As launched on sm_90: the spec's rules hold (region_rules.Region.problems), and the patched region
    is clean at both ends and holds the unit's exact counts (timing.build_for_timing)."""
    assert ft.region_problems(fact) == []
    assert sass.region_hazards(list(ft.launched(fact))) == []


@pytest.mark.parametrize("fact", _sparse())
def test_sparse_mma_reads_one_metadata_register_and_selector_zero(fact):
    """Every HMMA.SP of the region: D, A, B, C, the metadata register E and the selector 0x0; E is one
    register for the whole region (set before the start read), not recomputed in the loop."""
    mma = [i for i in ft.region(fact) if i.opcode.startswith("HMMA.SP.")]
    defines = fact.build().defines
    assert {i.opcode for i in mma} == {fact.region.unit[0]}
    assert len(mma) == defines["UNROLL"] * defines["ILP"]
    assert {len(i.operands) for i in mma} == {6}, mma[0].text
    assert {i.operands[-1] for i in mma} == {"0x0"}, mma[0].text
    meta = {tuple(regs(i.operands[4])) for i in mma}
    assert len(meta) == 1 and len(meta.pop()) == 1, f"not one metadata register: {[i.text for i in mma[:2]]}"


@pytest.mark.parametrize("fact", _sparse(lambda f: f.name.endswith("_dependent_cycles")))
def test_sparse_dependent_chain_accumulates_into_the_previous_result(fact):
    """The latency chain is a true chain: each HMMA.SP's C is the previous one's D (one register
    quadruple, in place)."""
    mma = [i for i in ft.region(fact) if i.opcode.startswith("HMMA.SP.")]
    assert len(mma) == fact.build().defines["UNROLL"]
    for prev, cur in zip(mma, mma[1:]):
        assert regs(cur.operands[3]) == regs(prev.operands[0]), f"{cur.text} does not accumulate into {prev.text}"


@pytest.mark.parametrize("fact", _sparse(lambda f: f.name.endswith("_single_warp_issue_cycles")))
def test_sparse_issue_chains_are_independent(fact):
    """The issue-interval build: ILP distinct accumulators, each instruction accumulating in place."""
    mma = [i for i in ft.region(fact) if i.opcode.startswith("HMMA.SP.")]
    assert all(regs(i.operands[3]) == regs(i.operands[0]) for i in mma)
    assert len({tuple(regs(i.operands[0])) for i in mma}) == fact.build().defines["ILP"]


def test_dense_opcode_in_a_sparse_region_is_refused():
    """A planted wrong expectation: the sparse f16 build checked against the dense m16n8k16 opcode
    fails, naming what the region holds instead."""
    fact = FACTS["mma_sp_f16_16832_f32_dependent_cycles"]
    planted = dataclasses.replace(fact, region=Region(("HMMA.16816.F32",), sm.MMA_LOOP, steps=sm.STEPS,
                                                      trailing=sm.TRAILING))
    problems = ft.region_problems(planted)
    assert problems and any("HMMA.SP.16832.F32" in p for p in problems), problems


def test_every_type_has_its_three_facts():
    """Dense and sparse: a dependent latency, a one-warp issue interval and a per-sub-partition rate each,
    names in one pattern (mma_<type>_<what>), divisors the instructions the launch times."""
    types = sorted(sm.MMA_SP_DTYPES) + sorted(sm.specs.MMA_DTYPES)
    whats = ("dependent_cycles", "single_warp_issue_cycles", "smsp_cycles")
    assert sorted(FACTS) == sorted(f"mma_{t}_{w}" for t in types for w in whats)
    sp = FACTS["mma_sp_bf16_16832_f32_smsp_cycles"]
    assert sp.per() == 64 * 8 * 16 * 4 and sp.statistic.mode == "span"
    assert FACTS["mma_sp_f16_16832_f32_dependent_cycles"].per() == 64 * 16
    assert sp.build().defines["DTYPE"] == 6 and sp.build().block == 512
