"""Hopper's warpgroup MMA facts for f16 and bf16 inputs, f32 accumulate (:data:`FACTS`, one
pytest_gpuprops.factspec.FactSpec each): per N = 8 .. 256, input type and A source (shared memory
"ss" or registers "rs"), the latency of one wgmma.mma_async m64nNk16 and the cycles per instruction
per SM of a chain (kernels/wgmma.cu, launched by :func:`specs.wgmma`). The GPU tests (test_wgmma.py),
their static region checks (test_static_wgmma.py), the session prefetch and the docs' fact list are
made from these specs.

wgmma exists only on sm_90a: each fact is defined for the sm_90 GPUs (H100, H200; ``arch``) and its
build compiled for sm_90a (``build_arch``: an sm_90a cubin runs on them). The region: WARPGROUP.ARRIVE,
UNROLL HGMMA.64xNx16.F32[.BF16], WARPGROUP.DEPBAR.LE (region_rules.WARPGROUP_CHAIN). That the HGMMAs
are one accumulator chain is test_static_chains.py's (test_wgmma_hgmmas_are_one_accumulator_chain)."""

import specs

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.region_rules import WARPGROUP_CHAIN, Region

U = specs.WGMMA_UNROLL
THROUGHPUT_WARPGROUPS = 2
CASES = [(n, bf16, a_regs) for n in specs.WGMMA_N for bf16 in (False, True) for a_regs in (False, True)]


def case_id(n: int, bf16: bool, a_regs: bool) -> str:
    return f"m64n{n}k16_{'bf16' if bf16 else 'f16'}_{'rs' if a_regs else 'ss'}"


def _region(n: int, bf16: bool) -> Region:
    return Region((specs.wgmma_opcode(n, bf16),), WARPGROUP_CHAIN, steps="UNROLL")


def _latency(n: int, bf16: bool, a_regs: bool) -> FactSpec:
    return FactSpec(
        f"wgmma_{case_id(n, bf16, a_regs)}_latency_cycles", lambda: specs.wgmma(n, bf16, a_regs, unroll=1),
        _region(n, bf16), divisor=1, build_arch=specs.WGMMA_ARCH,
        method=f"one {specs.wgmma_opcode(n, bf16)} between wgmma.fence and commit_group + wait_group 0, "
               "one warpgroup; cycles from WARPGROUP.ARRIVE to the result, per warp")


def _per_sm(n: int, bf16: bool, a_regs: bool) -> FactSpec:
    return FactSpec(
        f"wgmma_{case_id(n, bf16, a_regs)}_sm_cycles",
        lambda: specs.wgmma(n, bf16, a_regs, unroll=U, warpgroups=THROUGHPUT_WARPGROUPS),
        _region(n, bf16), divisor=U * THROUGHPUT_WARPGROUPS, statistic=Statistic(mode="span"),
        build_arch=specs.WGMMA_ARCH,
        method=f"{U} {specs.wgmma_opcode(n, bf16)} on one accumulator chain per warpgroup, "
               f"{THROUGHPUT_WARPGROUPS} warpgroups in one block; cycles per instruction per SM over the "
               "block's span")


LATENCY: list[FactSpec] = [_latency(*c) for c in CASES]
PER_SM: list[FactSpec] = [_per_sm(*c) for c in CASES]
#: every f16 / bf16 wgmma fact, declared once
FACTS: list[FactSpec] = [*LATENCY, *PER_SM]
