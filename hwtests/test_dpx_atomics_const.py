"""sm_90 (Hopper) facts: DPX min/max instructions, the constant cache, and 32-bit atomic adds.

Each fact is one spec of specs_sync_units.FACTS (its launch, region, statistic, divisor, scope and
method) and one test here; their timed regions are checked without a GPU by
test_static_dpx_atomics_const.py.

* DPX (kernels/dpx_chain.cu): dependent latency and cycles per instruction per SM sub-partition of
  __vimax3_s32 (VIMNMX3), __viaddmax_s32 (VIADDMNMX), __vimin3_u32 (VIMNMX3.U32) and
  __viaddmax_s32_relu (VIADDMNMX.RELU), in the shapes of the ALU facts (test_alu_ops.py).
  __vibmax_s32 is no DPX instruction on sm_90 with NVRTC 13.5 but ISETP.GE.AND + SEL (the max) +
  SEL (the predicate as 0/1); its facts are named vibmax_s32_isetp_sel and count one such step.
* Constant cache (kernels/const_chase.cu): cycles per hop of a dependent LDC chase through a
  256-byte __constant__ table, warmed by a first pass; and through a 16 KiB table (past the 2 KiB
  constant L1) from every SM, one at a time: the level behind the L1 from the nearest SM.
* Atomics (kernels/atomic_ops.cu): atom.shared.add.u32 (ATOMS.ADD), atom.global.add.u32
  (ATOMG.E.ADD.STRONG.GPU) and red.global.add.u32 (REDG.E.ADD.STRONG.GPU), each with every lane of a
  warp on its own word of one 128-byte line ("distinct") or all 32 lanes on one word
  ("same_address"). Latency: cycles per atomic of one warp's chain, each adding the value the
  previous one returned. Throughput: SM cycles per warp-wide atomic instruction (32 lane operations),
  one block of 32 warps on one SM; the throughput buffers are a few KiB. Global atomics are performed
  in L2 (hits), never in DRAM.
* Global atomic latency depends on which L2 partition owns the line (H100/H200: two; the far one
  costs ~34 cycles more per atomic), and one line lands in either, run to run. The chain runs on
  each of 64 lines spread over a 32 MiB buffer; the lines' latencies fall in tiers (the slice's
  distance), and the fact is the lowest tier's: the median of the lines within 8 % of the fastest
  line (atom_global_add_<pattern>_near_latency_cycles); the rest go to the report only (the
  measurement's launch info and a plot point), not asserted. An L2 latency, so a fact of the GPU
  model (its section of the facts file).
"""

import fact_tests
import pytest
import specs_sync_units as su

pytestmark = pytest.mark.gpu


@pytest.mark.fact(lambda fact: fact.name)
@pytest.mark.parametrize("fact", fact_tests.gpu_params(su.FACTS))
def test_fact(gpuprops, fact, benchmark):
    fact_tests.measure_and_check(gpuprops, fact, benchmark)
