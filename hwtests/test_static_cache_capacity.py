"""Static checks of the cache-capacity sweeps (hwtests/test_cache_capacity.py), the sector and line
sweeps (test_cache_lines.py) and the L2 partition sweep (test_l2_partitions.py), without a GPU: the L1, pair
and TLB chases (l1_capacity_chase.cu, ld.global.ca and .cg) and the constant chase at the smallest,
a middle and the largest table of its sweep (const_chase.cu, WARM_HOPS) time their UNROLL dependent
loads and nothing else, as compiled for sm_90, each load's address the previous load's result."""

import re
from pathlib import Path

import pytest
import specs_caches as sc
import specs_l2_partitions as l2p
import specs_lines as sl

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda

pytestmark = pytest.mark.static
KIB, MIB = sc.KIB, sc.MIB
KERNELS = Path(__file__).parent.parent / "kernels"


STATIC_BUILDS = {
    "l1_ca": lambda: sc.l1_chase(sc.CARVEOUTS["smem0"], 128 * KIB),
    "tlb_cg": lambda: sc.tlb_chase(4 * MIB, 2 * MIB),
    # every build of the sector and line sweeps (factspec.SweepSpec.builds: one or two a sweep)
    **{f"{f.name}_{i}": (lambda f=f, i=i: f.builds()[i]) for f in sl.FACTS for i in range(len(f.builds()))},
    # the L2 partition sweep's builds: one placement, and the near step's PLACEMENTS=8
    **{f"l2_partition_chase_{i}": (lambda i=i: l2p.FACTS[0].builds()[i]) for i in range(len(l2p.FACTS[0].builds()))},
    **{f"const_{f}": (lambda f=f: sc.const_sweep_point(f)) for f in (sc.CONST_FOOTPRINTS[0], 4352,
                                                                     sc.CONST_FOOTPRINTS[-1])},
}


def _builds_of(item) -> list:
    """What a static test here compiles (the session prefetch batches it): (source, arch, defines)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "build" not in params:
        return []
    spec = STATIC_BUILDS[params["build"]]()
    return [(spec.source, "sm_90", spec.defines)]


def chase_problems(spec) -> list[str]:
    """What is wrong with ``spec``'s timed region as compiled for sm_90 (none where it holds): it must
    be the build's KernelSpec.region, UNROLL loads of one opcode and nothing else, each load's address
    the previous load's result."""
    cubin = sass.Cubin(compile_cuda(KERNELS / spec.source, "sm_90", spec.defines).cubin, "sm_90", name=spec.source)
    _, between, _ = sass.timed_region(cubin.instructions(spec.kernel))
    ins = [i for i in between if not sass.is_filler(i)]
    ((opcode, count),) = spec.region.items()
    if [i.opcode for i in ins] != [opcode] * count:
        other = sorted({i.opcode for i in ins} - {opcode})
        return [f"the region holds {len(ins)} instructions, not {count} x {opcode}; also {other}: "
                f"{[i.text for i in ins if i.opcode != opcode][:5]}"]
    problems = []
    for prev, cur in zip(ins, ins[1:]):
        dest = prev.operands[0].split(".")[0]
        if not re.search(rf"\b{dest}\b", cur.operands[1]):
            problems.append(f"{cur.text} does not load from {prev.text}'s result")
    return problems


@pytest.mark.parametrize("build", list(STATIC_BUILDS))
def test_sweep_build_times_only_its_dependent_chase(build):
    assert chase_problems(STATIC_BUILDS[build]()) == []


def test_a_planted_wrong_cache_operator_is_refused():
    """The L1 sweep's build checked as if it were the TLB's (.cg where it is .ca) does not hold."""
    import dataclasses
    spec = STATIC_BUILDS["l1_ca"]()
    planted = dataclasses.replace(spec, region={"LDG.E.64.STRONG.GPU": sc.CAP_UNROLL})
    (problem,) = chase_problems(planted)
    assert f"not {sc.CAP_UNROLL} x LDG.E.64.STRONG.GPU" in problem and "LDG.E.64.STRONG.SM" in problem
