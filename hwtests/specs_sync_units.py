"""Launch shapes of the sm_90 DPX, constant-cache and atomic kernels (kernels/dpx_chain.cu,
kernels/const_chase.cu, kernels/atomic_ops.cu), shared by test_dpx_atomics_const.py and its static
checks (test_static_dpx_atomics_const.py, which checks every build of :func:`builds` on sm_90).

The opcodes are what NVRTC 13.5 emits for sm_90; on older archs the DPX intrinsics are emulated
with other instructions, so these builds are checked and launched on sm_90 only."""

from collections import Counter

from memory_levels import line_by_line

from pytest_gpuprops.kernel_spec import KernelSpec

ARCH = "sm_90"

# ----------------------------------------------------------------------------------------------
# DPX: the shapes of specs.alu (kernels/alu_chain.cu)

DPX_UNROLL = 128
#: Passes of the latency shape (ILP 1): the second is timed, with the region in the instruction
#: caches; the throughput shapes run one (hwtests/specs.py, ALU_LATENCY_PASSES, says why).
DPX_LATENCY_PASSES = 2
DPX_THROUGHPUT_ILP, DPX_THROUGHPUT_WARPS = 8, 4  # 8 chains x 4 warps per SM sub-partition
#: op -> (kernels/dpx_chain.cu OP, the opcodes one chain step puts in the region, other
#: instructions the region may hold). __vibmax_s32 is no DPX instruction on sm_90 (a compare and
#: two selects), and its latency build ends with one register copy (IMAD.MOV.U32) ptxas puts
#: after the last step so that the next pass starts from the same registers.
DPX_OPS = {
    "vimax3_s32": (1, ("VIMNMX3",), 0),
    "viaddmax_s32": (2, ("VIADDMNMX",), 0),
    "vibmax_s32_isetp_sel": (3, ("ISETP.GE.AND", "SEL", "SEL"), 1),
    "vimin3_u32": (4, ("VIMNMX3.U32",), 0),
    "viaddmax_s32_relu": (5, ("VIADDMNMX.RELU",), 0),
}


def dpx_step(op: str) -> str:
    """One chain step as SASS, for method texts: "VIMNMX3", "ISETP.GE.AND + SEL + SEL"."""
    return " + ".join(DPX_OPS[op][1])


def _dpx_inputs(ilp: int):
    """32 * ILP start values (lane l of chain j starts from in[32 j + l]), then b and c per lane."""
    import numpy as np
    lane, chain = np.arange(32), np.arange(ilp)[:, None]
    start = (lane * 7 + chain * 3 + 1).ravel()
    return np.concatenate([start, np.ones(32), lane * 5 + 2]).astype(np.int32)


def dpx(op: str, ilp: int, warps_per_smsp: int, unroll: int = DPX_UNROLL) -> KernelSpec:
    code, opcodes, other = DPX_OPS[op]
    block = 128 * warps_per_smsp
    passes = DPX_LATENCY_PASSES if ilp == 1 else 1
    return KernelSpec("dpx_chain.cu", "dpx_chain", {"OP": code, "ILP": ilp, "UNROLL": unroll, "PASSES": passes},
                      grid=1, block=block,
                      args=lambda cp: (cp.asarray(_dpx_inputs(ilp)), cp.zeros(2 * ilp * block, dtype=cp.int32)),
                      region={o: n * unroll * ilp for o, n in Counter(opcodes).items()},
                      region_other=other if ilp == 1 else 0)


# ----------------------------------------------------------------------------------------------
# constant cache

CONST_UNROLL = 256  # hops per pass; the 64-word table is walked 4 times
CONST_PASSES = 2


def const_chase(unroll: int = CONST_UNROLL) -> KernelSpec:
    return KernelSpec("const_chase.cu", "const_chase", {"UNROLL": unroll, "PASSES": CONST_PASSES}, grid=1, block=32,
                      args=lambda cp: (cp.zeros(32, dtype=cp.uint32), cp.zeros(32, dtype=cp.uint32)),
                      region={"LDC": unroll})


# ----------------------------------------------------------------------------------------------
# atomics

#: kind -> (kernels/atomic_ops.cu SPACE, RET, SASS opcode)
ATOMIC_KINDS = {
    "atom_shared": (0, 1, "ATOMS.ADD"),
    "atom_global": (1, 1, "ATOMG.E.ADD.STRONG.GPU"),
    "red_global": (1, 0, "REDG.E.ADD.STRONG.GPU"),
}
#: address pattern -> the byte offset of lane l inside its 128-byte group of words
ATOMIC_PATTERNS = {"distinct": lambda lane: 4 * lane, "same_address": lambda lane: 0}
ATOMIC_LATENCY_UNROLL = 64
ATOMIC_LATENCY_PASSES = 2
#: throughput: 8 chains x 8 steps per loop trip, 16 trips, 32 warps (one block of 1024 on one SM)
ATOMIC_ILP, ATOMIC_UNROLL, ATOMIC_ITERS, ATOMIC_WARPS = 8, 8, 16, 32
#: (kind, pattern) -> loop trips where a shape needs more than ATOMIC_ITERS. atom_shared distinct:
#: 16 trips (1024 atomics per warp, ~37k cycles per block) spread 1.4-2.4 % from launch to launch on
#: the H200 (2026-11-24; how the 32 warps interleave moves the block's span); 8 x the trips leave that
#: spread under 1 % whether it is a fixed tail (/ 8) or grows with the work (/ sqrt(8)). The same code
#: with another trip count, so the same quantity: cycles per warp-wide ATOMS.ADD per SM. The other
#: shapes keep 16 (their facts are recorded with it).
ATOMIC_ITERS_BY_SHAPE = {("atom_shared", "distinct"): 128}
ATOMIC_LOOP_CONTROL = 4  # the trip counter's init, increment and compare, and the branch back

#: Global atomic latency, line by line: a global atomic is performed in the L2 slice that owns its line,
#: and a line in the far partition costs ~34 cycles more per atomic (H200, 2026-11-24: 278.9, 312.97,
#: 277.7 cycles in three runs, one line each, each steady to 0.02 %). So the chain runs line by line
#: (memory_levels.near_tier_latency: L2_LINES lines, the lowest tier asserted).
def atomic_iters(kind: str, pattern: str) -> int:
    """Loop trips of the throughput shape of ``kind`` x ``pattern``."""
    return ATOMIC_ITERS_BY_SHAPE.get((kind, pattern), ATOMIC_ITERS)


def _lane_offsets(pattern: str):
    import numpy as np
    return np.array([ATOMIC_PATTERNS[pattern](lane) for lane in range(32)], dtype=np.uint32)


def _atomic_args(pattern: str, ilp: int, warps: int):
    lane_off = _lane_offsets(pattern)
    return lambda cp: (cp.asarray(lane_off), cp.zeros(warps * ilp * 32, dtype=cp.uint32),
                       cp.zeros(warps * 32 * ilp, dtype=cp.uint32))


def _atomic_line_args(pattern: str, line: int):
    """One warp's arguments with ``buf`` starting at line ``line`` of memory_levels.l2_line_offsets()
    (the kernel's chain works on buf's first 128-byte line)."""
    lane_off = _lane_offsets(pattern)
    return lambda cp: (cp.asarray(lane_off), line_by_line(cp, line), cp.zeros(32, dtype=cp.uint32))


def atomic_latency(kind: str, pattern: str, unroll: int = ATOMIC_LATENCY_UNROLL, line: int = 0) -> KernelSpec:
    """One warp, one chain of ``unroll`` atomics, each adding the value the previous one returned.
    Global: on line ``line`` of memory_levels.l2_line_offsets() (every line is the same build; the line is
    the ``buf`` argument)."""
    space, ret, opcode = ATOMIC_KINDS[kind]
    if not ret:
        raise ValueError(f"{kind} returns nothing: it has no dependent latency")
    if space == 0 and line:
        raise ValueError(f"{kind} works in shared memory: it has no global lines")
    args = _atomic_args(pattern, 1, 1) if space == 0 else _atomic_line_args(pattern, line)
    return KernelSpec("atomic_ops.cu", "atomic_ops",
                      {"SPACE": space, "RET": ret, "ILP": 1, "UNROLL": unroll, "ITERS": 1,
                       "PASSES": ATOMIC_LATENCY_PASSES},
                      grid=1, block=32, args=args, region={opcode: unroll})


def atomic_throughput(kind: str, pattern: str) -> KernelSpec:
    space, ret, opcode = ATOMIC_KINDS[kind]
    return KernelSpec("atomic_ops.cu", "atomic_ops",
                      {"SPACE": space, "RET": ret, "ILP": ATOMIC_ILP, "UNROLL": ATOMIC_UNROLL,
                       "ITERS": atomic_iters(kind, pattern), "PASSES": 1},
                      grid=1, block=32 * ATOMIC_WARPS, args=_atomic_args(pattern, ATOMIC_ILP, ATOMIC_WARPS),
                      region={opcode: ATOMIC_ILP * ATOMIC_UNROLL}, region_other=ATOMIC_LOOP_CONTROL)


def atomic_throughput_count(kind: str, pattern: str) -> int:
    """Warp-wide atomic instructions one block of :func:`atomic_throughput` runs in its span."""
    return ATOMIC_WARPS * ATOMIC_ILP * ATOMIC_UNROLL * atomic_iters(kind, pattern)


def builds() -> dict[str, KernelSpec]:
    """Every build the GPU tests of test_dpx_atomics_const.py launch, by a readable id. The two
    address patterns of an atomic are the same code (the pattern is data), but for the trip count of
    the throughput shapes in ATOMIC_ITERS_BY_SHAPE; the lines of the global latency chain are one
    build (the line is data: :func:`atomic_latency` with any ``line`` compiles the same)."""
    out = {f"dpx_{op}_ilp{i}": dpx(op, i, 1 if i == 1 else DPX_THROUGHPUT_WARPS)
           for op in DPX_OPS for i in (1, DPX_THROUGHPUT_ILP)}
    out["const_chase"] = const_chase()
    for pattern in ATOMIC_PATTERNS:
        out.update({f"{k}_{pattern}_latency": atomic_latency(k, pattern) for k in ("atom_shared", "atom_global")})
        out.update({f"{k}_{pattern}_throughput": atomic_throughput(k, pattern) for k in ATOMIC_KINDS})
    return out
