"""The HMMA.16816.F32 facts measured by a launch each (:data:`FACTS`, one
pytest_gpuprops.factspec.FactSpec each): mma.sync m16n8k16 f16 -> f32's dependent latency, one warp's
issue interval and the sub-partition's pipe rate (kernels/hmma_16816.cu, launched by
:func:`specs.hmma`). The GPU tests (test_tensorcore.py), their static region checks
(test_static_tensorcore.py), the session prefetch and the docs' fact list are made from these specs.

Every build runs its 64-HMMA body specs.HMMA_ITERS = 16 times in a loop the ITERS define fixes
(region_rules.FIXED_TRIP_LOOP): the region's HMMAs are UNROLL x ILP, the divisor the HMMAs one warp
(or, for the pipe rate, one sub-partition's warps) runs, specs.hmma_count. After the loop's exit ptxas
puts at most one CALL.REL.NOINC (its loop exit on sm_80 .. sm_89), one S2R (sm_90) and one ULDC.64
(sm_86, sm_89) before the stop read: the spec's trailing opcodes.

Not here, hand-written tests still (their docstrings say why): the issue model over the ILP x warps
grid and the Nsight Compute tensor-pipe facts.

These facts hold on every arch whose facts file has them (``arch=None``), as the tests did before;
their regions are checked on every arch of factspec.STATIC_ARCHES."""

import specs

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.region_rules import FIXED_TRIP_LOOP, Region

OPCODE = "HMMA.16816.F32"
#: what ptxas puts between the loop's exit and the stop read, at most once each (NVRTC 13.5)
EPILOGUE = ("CALL.REL.NOINC", "S2R", "ULDC.64")
#: the throughput shape: independent accumulator chains per warp, warps per SM sub-partition
ILP, WARPS = 8, 4


def _region() -> Region:
    return Region((OPCODE,), FIXED_TRIP_LOOP, steps=("UNROLL", "ILP"), trailing=EPILOGUE)


FACTS: list[FactSpec] = [
    FactSpec("hmma_16816_f32_dependent_cycles", lambda: specs.hmma(1, 1), _region(), divisor=specs.hmma_count(1),
             arch=None,
             method="one accumulator chain of 64 x 16 dependent mma.sync m16n8k16, one warp; cycles per HMMA"),
    # where cycles per HMMA stop falling with ILP for one warp: the per-warp issue interval
    FactSpec("hmma_16816_f32_single_warp_issue_cycles", lambda: specs.hmma(ILP, 1), _region(),
             divisor=specs.hmma_count(ILP), arch=None,
             method="8 independent accumulator chains x 64 x 16 HMMA, one warp; cycles per HMMA"),
    FactSpec("hmma_16816_f32_smsp_cycles", lambda: specs.hmma(ILP, WARPS), _region(),
             divisor=specs.hmma_count(ILP) * WARPS, statistic=Statistic(mode="span"), arch=None,
             method="8 chains x 4 warps per SM sub-partition, one block, 64 x 16 HMMA per chain; cycles per "
                    "HMMA per sub-partition over the block's span"),
]
