"""The mma.sync facts per input type (:data:`FACTS`, one pytest_gpuprops.factspec.FactSpec each), on
kernels/mma_sync.cu: the dense types beside HMMA.16816.F32 (bf16, tf32, s8, f16 accumulate: the
launch shape is specs.py's :func:`specs.mma`) and the 2:4 sparse ``mma.sp.sync`` m16n8k32 with f16
and bf16 inputs (:func:`mma_sp`, here). Per type three facts, each a counted loop of ITERS trips of
UNROLL x ILP instructions of one opcode:

* ``mma_<type>_dependent_cycles``: one chain, one warp; cycles per instruction;
* ``mma_<type>_single_warp_issue_cycles``: 8 independent chains, one warp;
* ``mma_<type>_smsp_cycles``: 8 chains x 4 warps per SM sub-partition, one block, over its span.

The GPU tests (test_mma_dtypes.py), the static region checks (test_static_mma.py), the session
prefetch and the docs' fact list are made from :data:`FACTS`. They are sm_90's (:data:`ARCH`: only its
facts file holds them; on sm_80 ptxas leaves the loop through a CALL.REL.NOINC the loop shape does not
allow, so the regions are checked for sm_90 only).

Why the sparse form: Luo et al. (arXiv 2402.13499, 2501.12084) measure sparse mma.sync on Hopper
beside the dense one; these facts give its dependent latency and issue interval on the same method
as the dense types here, so the two can be compared on one GPU."""

import specs

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.region_rules import LOOP, LOOP_CONTROL, Region, Shape

#: the throughput shapes: independent chains per warp, warps per SM sub-partition
ISSUE_ILP, SMSP_WARPS = 8, 4
SPAN = Statistic(mode="span")
#: a step of the region: one instruction of one chain; the region holds UNROLL x ILP of them (the loop
#: body, run ITERS times)
STEPS = ("UNROLL", "ILP")

#: the counted loop as ptxas lays kernels/mma_sync.cu out (NVRTC 13, sm_90): region_rules.LOOP's control
#: with the trip counter zeroed by MOV (not IMAD.MOV) after the start read, and the thread index for the
#: output's address read (S2R SR_TID.X) after the last step, before the stop read (:data:`TRAILING`);
#: the s8 chains add 4 IMAD.MOV register copies, 8 beside the unit with the loop's control, the most
MMA_LOOP = Shape("mma_loop", "the unit unrolled in a counted loop (loop control and the counter's MOV beside it)",
                 LOOP.order, LOOP_CONTROL | {"MOV"}, glue_max=8)
TRAILING = ("S2R",)
ARCH = "sm_90"

#: sparse dtype -> (kernels/mma_sync.cu DTYPE, SASS opcode (NVRTC 13, sm_80 .. sm_90), 32-bit word of
#: A/B elements equal to one)
MMA_SP_DTYPES = {
    "sp_f16_16832_f32": (5, "HMMA.SP.16832.F32", 0x3C003C00),
    "sp_bf16_16832_f32": (6, "HMMA.SP.16832.F32.BF16", 0x3F803F80),
}
#: the metadata word: every 4-bit group keeps elements 0 and 1 of its 4 (indices 0b00, 0b01): a valid
#: 2:4 pattern for f16 / bf16
SP_METADATA = 0x44444444
#: words per thread in the sparse kernel's input: A 4, B 4, metadata 1 (kernels/mma_sync.cu GP_WORDS)
SP_WORDS = 9


def _sp_inputs(cp, one: int):
    words = cp.full((32, SP_WORDS), one, dtype=cp.uint32)
    words[:, SP_WORDS - 1] = SP_METADATA
    return words.ravel()


def mma_sp(dtype: str, ilp: int, warps_per_smsp: int, unroll: int = specs.MMA_UNROLL,
           iters: int = specs.HMMA_ITERS) -> KernelSpec:
    """``ilp`` chains of the sparse ``dtype`` per warp, 128 x ``warps_per_smsp`` threads, as
    :func:`specs.mma` launches the dense types (16 trips of the unrolled body)."""
    code, _, one = MMA_SP_DTYPES[dtype]
    block = 128 * warps_per_smsp
    return KernelSpec("mma_sync.cu", "mma_sync", {"DTYPE": code, "ILP": ilp, "UNROLL": unroll, "ITERS": iters},
                      grid=1, block=block, args=lambda cp: (_sp_inputs(cp, one), cp.zeros(block, dtype=cp.uint32)))


def opcode(dtype: str) -> str:
    return (MMA_SP_DTYPES.get(dtype) or specs.MMA_DTYPES[dtype])[1]


def launch(dtype: str, ilp: int, warps_per_smsp: int) -> KernelSpec:
    """The launch of ``dtype`` (dense: specs.mma, sparse: :func:`mma_sp`); its region is the spec's."""
    if dtype in MMA_SP_DTYPES:
        return mma_sp(dtype, ilp, warps_per_smsp)
    return specs.mma(dtype, ilp, warps_per_smsp)


def instructions(ilp: int, warps: int = 1) -> int:
    """Instructions a launch times per warp x warps: UNROLL x ILP per trip, ITERS trips."""
    return specs.MMA_UNROLL * ilp * specs.HMMA_ITERS * warps


def _form(dtype: str) -> str:
    return f"{opcode(dtype)}{' (2:4 sparse A, metadata 0x44444444, selector 0)' if dtype in MMA_SP_DTYPES else ''}"


def _facts(dtype: str) -> list[FactSpec]:
    op, form, n = opcode(dtype), _form(dtype), instructions(1)
    region = Region((op,), MMA_LOOP, steps=STEPS, trailing=TRAILING)
    return [
        FactSpec(f"mma_{dtype}_dependent_cycles", lambda: launch(dtype, 1, 1), region, arch=ARCH,
                 divisor=instructions(1),
                 method=f"one chain of {n} dependent {form}, one warp; cycles per instruction"),
        FactSpec(f"mma_{dtype}_single_warp_issue_cycles", lambda: launch(dtype, ISSUE_ILP, 1), region, arch=ARCH,
                 divisor=instructions(ISSUE_ILP),
                 method=f"{ISSUE_ILP} independent chains x {n} {op}, one warp; cycles per instruction"),
        FactSpec(f"mma_{dtype}_smsp_cycles", lambda: launch(dtype, ISSUE_ILP, SMSP_WARPS), region, arch=ARCH,
                 divisor=instructions(ISSUE_ILP, SMSP_WARPS), statistic=SPAN,
                 method=f"{ISSUE_ILP} chains x {SMSP_WARPS} warps per SM sub-partition of {op}, one block; cycles per "
                        "instruction per sub-partition over the block's span"),
    ]


DENSE_FACTS: list[FactSpec] = [f for d in sorted(specs.MMA_DTYPES) for f in _facts(d)]
SPARSE_FACTS: list[FactSpec] = [f for d in sorted(MMA_SP_DTYPES) for f in _facts(d)]
#: every mma.sync fact of kernels/mma_sync.cu, declared once
FACTS: list[FactSpec] = [*DENSE_FACTS, *SPARSE_FACTS]
