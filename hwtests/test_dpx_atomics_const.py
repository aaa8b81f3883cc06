"""sm_90 (Hopper) facts: DPX min/max instructions, the constant cache, and 32-bit atomic adds.

* DPX (kernels/dpx_chain.cu): dependent latency and cycles per instruction per SM sub-partition of
  __vimax3_s32 (VIMNMX3), __viaddmax_s32 (VIADDMNMX), __vimin3_u32 (VIMNMX3.U32) and
  __viaddmax_s32_relu (VIADDMNMX.RELU), in the shapes of the ALU facts (test_alu_ops.py).
  __vibmax_s32 is no DPX instruction on sm_90 with NVRTC 13.5 but ISETP.GE.AND + SEL (the max) +
  SEL (the predicate as 0/1); its facts are named vibmax_s32_isetp_sel and count one such step.
* Constant cache (kernels/const_chase.cu): cycles per hop of a dependent LDC chase through a
  256-byte __constant__ table, warmed by a first pass.
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

import pytest
import specs_sync_units as su
from memory_levels import NEAR_TIER_TEXT, l2_line_offsets, near_tier_latency

from pytest_gpuprops import facts as gp_facts

pytestmark = [pytest.mark.gpu, pytest.mark.arch("sm_90")]
gp_facts.register_gpu_scoped(*(f"atom_global_add_{p}_near_latency_cycles" for p in su.ATOMIC_PATTERNS))
U = su.DPX_UNROLL
ILP, WARPS = su.DPX_THROUGHPUT_ILP, su.DPX_THROUGHPUT_WARPS
ATOM_THROUGHPUT = [(k, p) for k in su.ATOMIC_KINDS for p in su.ATOMIC_PATTERNS]
PATTERN = {"distinct": "every lane on its own word of one 128-byte line",
           "same_address": "all 32 lanes on one word"}
WHERE = {"atom_shared": "shared memory", "atom_global": "a global buffer of a few KiB (in L2)",
         "red_global": "a global buffer of a few KiB (in L2)"}


@pytest.mark.fact("dpx_{op}_latency_cycles")
@pytest.mark.parametrize("op", sorted(su.DPX_OPS))
def test_dpx_dependent_latency(gpuprops, op, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, su.dpx(op, 1, 1), divisor=U)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{U} dependent steps of {su.dpx_step(op)}, each reading the previous result and two "
                          f"registers set before the start read, one warp; cycles per step, pass "
                          f"{su.DPX_LATENCY_PASSES} of {su.DPX_LATENCY_PASSES} timed (instruction caches warm)")


@pytest.mark.fact("dpx_{op}_smsp_cycles")
@pytest.mark.parametrize("op", sorted(su.DPX_OPS))
def test_dpx_cycles_per_smsp(gpuprops, op, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, su.dpx(op, ILP, WARPS), divisor=U * ILP * WARPS, mode="span")
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{ILP} independent chains of {su.dpx_step(op)} x {WARPS} warps per SM sub-partition, "
                          "one block; cycles per step per sub-partition over the block's span")


@pytest.mark.fact("const_cache_hit_latency_cycles")
def test_const_cache_hit_latency(gpuprops, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, su.const_chase(), divisor=su.CONST_UNROLL)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{su.CONST_UNROLL} dependent LDC Rn, c[0x3][Rm] (each loaded word the next byte offset) "
                          "through a 64-word __constant__ table, one warp, every lane on the same word; cycles per "
                          f"hop, pass {su.CONST_PASSES} of {su.CONST_PASSES} timed (table in the constant cache)")


@pytest.mark.fact("atom_shared_add_{pattern}_latency_cycles")
@pytest.mark.parametrize("pattern", sorted(su.ATOMIC_PATTERNS))
def test_atomic_shared_add_latency(gpuprops, pattern, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, su.atomic_latency("atom_shared", pattern), divisor=su.ATOMIC_LATENCY_UNROLL)
    opcode = su.ATOMIC_KINDS["atom_shared"][2]
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{su.ATOMIC_LATENCY_UNROLL} {opcode} in one warp, each adding the value the previous "
                          f"one returned, at one address in {WHERE['atom_shared']}, {PATTERN[pattern]}; cycles per "
                          f"atomic, pass {su.ATOMIC_LATENCY_PASSES} of {su.ATOMIC_LATENCY_PASSES} timed")


# One line per run read 278.9, 312.97, 277.7 cycles (distinct) on the H200: the line's L2 partition,
# not noise. The lowest tier's latency is asserted; the slower tiers only reported.
@pytest.mark.fact("atom_global_add_{pattern}_near_latency_cycles")
@pytest.mark.parametrize("pattern", sorted(su.ATOMIC_PATTERNS))
def test_atomic_global_add_near_latency(gpuprops, pattern):
    name = gpuprops.fact_name
    m = near_tier_latency(gpuprops, name, lambda k: su.atomic_latency("atom_global", pattern, line=k),
                          divisor=su.ATOMIC_LATENCY_UNROLL)
    spread = {k: v for k, v in m.launch.items() if k.endswith("_over_lines_cycles")}  # p10 and p90
    gpuprops.plot_point(f"atom_global_add_{pattern}_latency_by_line", offsets=l2_line_offsets(),
                        cycles=m.launch["line_cycles"], **spread)
    opcode = su.ATOMIC_KINDS["atom_global"][2]
    gpuprops.check(name, m, method=(
        f"{su.ATOMIC_LATENCY_UNROLL} {opcode} in one warp, each adding the value the previous one returned, "
        f"{PATTERN[pattern]}; cycles per atomic, pass {su.ATOMIC_LATENCY_PASSES} of {su.ATOMIC_LATENCY_PASSES} "
        f"timed; {NEAR_TIER_TEXT}"))


@pytest.mark.fact("{kind}_add_{pattern}_sm_cycles")
@pytest.mark.parametrize("kind, pattern", ATOM_THROUGHPUT)
def test_atomic_add_sm_cycles(gpuprops, kind, pattern, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, su.atomic_throughput(kind, pattern), divisor=su.atomic_throughput_count(kind, pattern),
                         mode="span")
    opcode = su.ATOMIC_KINDS[kind][2]
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{su.ATOMIC_WARPS} warps in one block on one SM, each {su.atomic_iters(kind, pattern)} x "
                          f"{su.ATOMIC_UNROLL} x {su.ATOMIC_ILP} {opcode} on {su.ATOMIC_ILP} words of its own in "
                          f"{WHERE[kind]}, {PATTERN[pattern]}; SM cycles per warp-wide instruction (32 lane "
                          "operations) over the block's span")
