"""Warp shuffle, MUFU (ex2, rsqrt, sin), DFMA and IMAD: dependent latency and cycles per instruction
per SM sub-partition (kernels/alu_chain.cu), the FFMA facts' method per op.

sin.approx.f32 is FMUL.RZ (the argument times 1/(2 pi)) then MUFU.SIN on every arch here: its facts
are named mufu_sin_fmul_* and count one FMUL.RZ + one MUFU.SIN per step."""

import pytest
import specs

pytestmark = pytest.mark.gpu
U = specs.ALU_UNROLL
THROUGHPUT_ILP, THROUGHPUT_WARPS = 8, 4
STEP = {op: " + ".join(opcodes) for op, (_, _, opcodes) in specs.ALU_OPS.items()}


@pytest.mark.fact("{op}_latency_cycles")
@pytest.mark.parametrize("op", sorted(specs.ALU_OPS))
def test_alu_dependent_latency(gpuprops, op, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, specs.alu(op, 1, 1), divisor=U)
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{U} dependent steps of {STEP[op]}, each reading only the previous result, one warp; "
                          f"cycles per step, pass {specs.ALU_LATENCY_PASSES} of {specs.ALU_LATENCY_PASSES} timed "
                          "(instruction caches warm)")


@pytest.mark.fact("{op}_smsp_cycles")
@pytest.mark.parametrize("op", sorted(specs.ALU_OPS))
def test_alu_cycles_per_smsp(gpuprops, op, benchmark):
    name = gpuprops.fact_name
    m = gpuprops.measure(name, specs.alu(op, THROUGHPUT_ILP, THROUGHPUT_WARPS),
                         divisor=U * THROUGHPUT_ILP * THROUGHPUT_WARPS, mode="span")
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{THROUGHPUT_ILP} independent chains of {STEP[op]} x {THROUGHPUT_WARPS} warps per SM "
                          f"sub-partition, one block; cycles per step per sub-partition over the block's span")
