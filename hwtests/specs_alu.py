"""The ALU facts (:data:`FACTS`, one pytest_gpuprops.factspec.FactSpec each): FFMA (kernels/ffma.cu,
:data:`FFMA_FACTS`) and the warp shuffles, MUFU, DFMA and IMAD (kernels/alu_chain.cu,
:data:`OP_FACTS`), each a dependent latency (one warp, one chain) and cycles per instruction per SM
sub-partition (8 chains x 4 warps per sub-partition, one block, over its span). The launch shapes are
specs.py's (:func:`specs.ffma`, :func:`specs.alu`); the GPU tests (test_alu.py, test_alu_ops.py), their
static region checks (test_static_alu.py), the session prefetch and the docs' fact list are made from
these specs.

These facts hold on every arch whose facts file has them (``arch=None``): the seeds' sm_86 values,
sm_89's and sm_90's measured ones; their regions are checked on every arch of
factspec.STATIC_ARCHES."""

import specs

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.region_rules import INTERLEAVED, Region

#: the throughput shape: independent chains per warp, warps per SM sub-partition
THROUGHPUT_ILP, THROUGHPUT_WARPS = 8, 4
SPAN = Statistic(mode="span")
#: one step of each chain: a register chain of UNROLL x ILP steps (ILP 1 for the latency)
STEPS = ("UNROLL", "ILP")


def step(op: str) -> str:
    """One chain step as SASS, for method texts: "MUFU.EX2", "FMUL.RZ + MUFU.SIN"."""
    return " + ".join(specs.ALU_OPS[op][2])


FFMA_FACTS: list[FactSpec] = [
    FactSpec("ffma_latency_cycles", lambda: specs.ffma(1, 1), Region(("FFMA",), steps=STEPS), arch=None,
             method="256 dependent FFMA Rx, Rx, Rx, Rx (one register read, no bank conflict), one warp"),
    # each launch lands on an SM whose instruction cache may be cold for the 32 KiB region (1.008-1.039 per
    # launch on H100s): the median of 5 moved 1.7 % between processes of one unit, of 41 it is steady
    FactSpec("ffma_smsp_cycles", lambda: specs.ffma(THROUGHPUT_ILP, THROUGHPUT_WARPS),
             Region(("FFMA",), INTERLEAVED, steps=STEPS),
             divisor=specs.FFMA_UNROLL * THROUGHPUT_ILP * THROUGHPUT_WARPS, statistic=SPAN, arch=None,
             min_launches=specs.FFMA_RATE_LAUNCHES,
             method="8 independent FFMA chains x 4 warps per SM sub-partition, one block; cycles per FFMA "
                    "per sub-partition over the block's span"),
]


def _op_facts() -> list[FactSpec]:
    u, passes = specs.ALU_UNROLL, specs.ALU_LATENCY_PASSES
    latency = [FactSpec(
        f"{op}_latency_cycles", lambda op=op: specs.alu(op, 1, 1), Region(specs.ALU_OPS[op][2], steps=STEPS),
        arch=None,
        method=f"{u} dependent steps of {step(op)}, each reading only the previous result, one warp; "
               f"cycles per step, pass {passes} of {passes} timed (instruction caches warm)")
        for op in sorted(specs.ALU_OPS)]
    smsp = [FactSpec(
        f"{op}_smsp_cycles", lambda op=op: specs.alu(op, THROUGHPUT_ILP, THROUGHPUT_WARPS),
        Region(specs.ALU_OPS[op][2], INTERLEAVED, steps=STEPS), divisor=u * THROUGHPUT_ILP * THROUGHPUT_WARPS,
        statistic=SPAN, arch=None,
        method=f"{THROUGHPUT_ILP} independent chains of {step(op)} x {THROUGHPUT_WARPS} warps per SM "
               f"sub-partition, one block; cycles per step per sub-partition over the block's span")
        for op in sorted(specs.ALU_OPS)]
    return latency + smsp


OP_FACTS: list[FactSpec] = _op_facts()
#: every ALU fact, declared once
FACTS: list[FactSpec] = [*FFMA_FACTS, *OP_FACTS]
