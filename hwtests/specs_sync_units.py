"""The sm_90 DPX, constant-cache and atomic facts (:data:`FACTS`, one pytest_gpuprops.factspec.FactSpec
each) and their launch shapes (kernels/dpx_chain.cu, kernels/const_chase.cu, kernels/atomic_ops.cu).
The GPU tests (test_dpx_atomics_const.py), the static region checks (test_static_dpx_atomics_const.py),
the session prefetch and the docs' fact list are made from :data:`FACTS`.

The opcodes are what NVRTC 13.5 emits for sm_90; on older archs the DPX intrinsics are emulated
with other instructions, so these facts are defined, checked and launched on sm_90 only."""

from memory_levels import L2_LINES_RESERVE, NEAR_TIER_TEXT, l2_line_offsets, line_by_line
from specs_async import sm_count

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.region_rules import INTERLEAVED, LOOP, Region

ARCH = "sm_90"

# ----------------------------------------------------------------------------------------------
# DPX: the shapes of specs.alu (kernels/alu_chain.cu)

DPX_UNROLL = 128
#: Passes of the latency shape (ILP 1): the second is timed, with the region in the instruction
#: caches; the throughput shapes run one (hwtests/specs.py, ALU_LATENCY_PASSES, says why).
DPX_LATENCY_PASSES = 2
DPX_THROUGHPUT_ILP, DPX_THROUGHPUT_WARPS = 8, 4  # 8 chains x 4 warps per SM sub-partition
#: op -> (kernels/dpx_chain.cu OP, the opcodes one chain step puts in the region). __vibmax_s32 is
#: no DPX instruction on sm_90 (a compare and two selects).
DPX_OPS = {
    "vimax3_s32": (1, ("VIMNMX3",)),
    "viaddmax_s32": (2, ("VIADDMNMX",)),
    "vibmax_s32_isetp_sel": (3, ("ISETP.GE.AND", "SEL", "SEL")),
    "vimin3_u32": (4, ("VIMNMX3.U32",)),
    "viaddmax_s32_relu": (5, ("VIADDMNMX.RELU",)),
}
#: op -> what ptxas puts after the latency chain's last step: __vibmax_s32's ends with one register
#: copy (IMAD.MOV.U32) so that the next pass starts from the same registers
DPX_LATENCY_TRAILING = {"vibmax_s32_isetp_sel": ("IMAD.MOV.U32",)}


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
    code, _ = DPX_OPS[op]
    block = 128 * warps_per_smsp
    passes = DPX_LATENCY_PASSES if ilp == 1 else 1
    return KernelSpec("dpx_chain.cu", "dpx_chain", {"OP": code, "ILP": ilp, "UNROLL": unroll, "PASSES": passes},
                      grid=1, block=block,
                      args=lambda cp: (cp.asarray(_dpx_inputs(ilp)), cp.zeros(2 * ilp * block, dtype=cp.int32)))


# ----------------------------------------------------------------------------------------------
# constant cache

CONST_UNROLL = 256  # hops per pass; the 64-word table is walked 4 times
CONST_PASSES = 2


def const_chase_args(cp, blocks: int = 1):  # pragma: no cover  (GPU only)
    """const_chase.cu's arguments: every lane's start (word 0), each thread's result, the blocks' turn."""
    return cp.zeros(32, dtype=cp.uint32), cp.zeros(32 * blocks, dtype=cp.uint32), cp.zeros(1, dtype=cp.uint32)


def const_chase(unroll: int = CONST_UNROLL) -> KernelSpec:
    return KernelSpec("const_chase.cu", "const_chase", {"UNROLL": unroll, "PASSES": CONST_PASSES}, grid=1, block=32,
                      args=const_chase_args)


#: the table of the level behind the constant L1 (2 KiB): 16 KiB, in the middle of that level's plateau
#: (3 KiB .. 64 KiB on H100 and H200, hwtests/test_cache_capacity.py)
CONST_L15_TABLE = 16 * 1024


def const_l15_chase() -> KernelSpec:
    """One warp on every SM (:func:`specs_async.sm_count` blocks), one block at a time (SERIAL), each
    chasing a table past the constant L1 after one untimed walk over it."""
    nodes = CONST_L15_TABLE // 4
    grid = sm_count()
    return KernelSpec("const_chase.cu", "const_chase",
                      {"NODES": nodes, "STRIDE": 17, "UNROLL": CONST_UNROLL, "PASSES": CONST_PASSES,
                       "WARM_HOPS": nodes, "SERIAL": 1}, grid=grid, block=32,
                      args=lambda cp: const_chase_args(cp, grid))


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
    space, ret, _ = ATOMIC_KINDS[kind]
    if not ret:
        raise ValueError(f"{kind} returns nothing: it has no dependent latency")
    if space == 0 and line:
        raise ValueError(f"{kind} works in shared memory: it has no global lines")
    args = _atomic_args(pattern, 1, 1) if space == 0 else _atomic_line_args(pattern, line)
    return KernelSpec("atomic_ops.cu", "atomic_ops",
                      {"SPACE": space, "RET": ret, "ILP": 1, "UNROLL": unroll, "ITERS": 1,
                       "PASSES": ATOMIC_LATENCY_PASSES},
                      grid=1, block=32, args=args, clock_beside=space != 0)


def atomic_throughput(kind: str, pattern: str) -> KernelSpec:
    space, ret, _ = ATOMIC_KINDS[kind]
    return KernelSpec("atomic_ops.cu", "atomic_ops",
                      {"SPACE": space, "RET": ret, "ILP": ATOMIC_ILP, "UNROLL": ATOMIC_UNROLL,
                       "ITERS": atomic_iters(kind, pattern), "PASSES": 1},
                      grid=1, block=32 * ATOMIC_WARPS, args=_atomic_args(pattern, ATOMIC_ILP, ATOMIC_WARPS))


def atomic_throughput_count(kind: str, pattern: str) -> int:
    """Warp-wide atomic instructions one block of :func:`atomic_throughput` runs in its span."""
    return ATOMIC_WARPS * ATOMIC_ILP * ATOMIC_UNROLL * atomic_iters(kind, pattern)


# ----------------------------------------------------------------------------------------------
# the facts

#: the DPX throughput facts' divisor: steps per SM sub-partition (UNROLL x ILP per warp, WARPS warps each)
DPX_SMSP_STEPS = DPX_UNROLL * DPX_THROUGHPUT_ILP * DPX_THROUGHPUT_WARPS
#: the DPX region's steps: UNROLL steps of each of the ILP chains (ILP 1 for the latency)
CHAIN_STEPS = ("UNROLL", "ILP")
PATTERN = {"distinct": "every lane on its own word of one 128-byte line",
           "same_address": "all 32 lanes on one word"}
WHERE = {"atom_shared": "shared memory", "atom_global": "a global buffer of a few KiB (in L2)",
         "red_global": "a global buffer of a few KiB (in L2)"}
#: the global atomic latency is an L2 latency: a fact of the GPU model (its section of the facts file)
GPU = "gpu"


def _dpx_facts() -> list[FactSpec]:
    u, ilp, warps = DPX_UNROLL, DPX_THROUGHPUT_ILP, DPX_THROUGHPUT_WARPS
    latency = [FactSpec(
        f"dpx_{op}_latency_cycles", lambda op=op: dpx(op, 1, 1),
        Region(DPX_OPS[op][1], steps=CHAIN_STEPS, trailing=DPX_LATENCY_TRAILING.get(op, ())),
        method=f"{u} dependent steps of {dpx_step(op)}, each reading the previous result and two "
               f"registers set before the start read, one warp; cycles per step, pass "
               f"{DPX_LATENCY_PASSES} of {DPX_LATENCY_PASSES} timed (instruction caches warm)")
        for op in sorted(DPX_OPS)]
    smsp = [FactSpec(
        f"dpx_{op}_smsp_cycles", lambda op=op: dpx(op, ilp, warps),
        Region(DPX_OPS[op][1], INTERLEAVED, steps=CHAIN_STEPS), divisor=DPX_SMSP_STEPS,
        statistic=Statistic(mode="span"),
        method=f"{ilp} independent chains of {dpx_step(op)} x {warps} warps per SM sub-partition, "
               "one block; cycles per step per sub-partition over the block's span")
        for op in sorted(DPX_OPS)]
    return latency + smsp


def _const_facts() -> list[FactSpec]:
    return [FactSpec(
        "const_cache_hit_latency_cycles", const_chase, Region(("LDC",), steps="UNROLL"),
        method=f"{CONST_UNROLL} dependent LDC Rn, c[0x3][Rm] (each loaded word the next byte offset) "
               "through a 64-word __constant__ table, one warp, every lane on the same word; cycles per "
               f"hop, pass {CONST_PASSES} of {CONST_PASSES} timed (table in the constant cache)"),
        FactSpec(
        "const_l15_hit_latency_cycles", const_l15_chase, Region(("LDC",), steps="UNROLL"),
        statistic=Statistic(mode="warp_min"),
        method=f"{CONST_UNROLL} dependent LDC Rn, c[0x3][Rm] through a {CONST_L15_TABLE // 1024} KiB __constant__ "
               "table (past the 2 KiB constant L1, in the level behind it), word stride 17, one warp on every SM "
               "(a block each), the blocks one at a time through a turn counter, each after one untimed walk "
               f"over the table; cycles per hop, pass {CONST_PASSES} of {CONST_PASSES} timed; the nearest SM's: "
               "that level's latency from an SM is set by where the SM lies (nine levels, 93 .. 111 cycles, "
               "over one H100's SMs)")]


def _by_line_plot(pattern: str):
    """The global atomic's latency on every line (and the spread over lines) as a report plot."""
    def plot(m):
        spread = {k: v for k, v in m.launch.items() if k.endswith("_over_lines_cycles")}  # p10 and p90
        return (f"atom_global_add_{pattern}_latency_by_line",
                {"offsets": l2_line_offsets(), "cycles": m.launch["line_cycles"], **spread})
    return plot


def _atomic_facts() -> list[FactSpec]:
    n, passes = ATOMIC_LATENCY_UNROLL, ATOMIC_LATENCY_PASSES
    shared = ATOMIC_KINDS["atom_shared"][2]
    out = [FactSpec(
        f"atom_shared_add_{pattern}_latency_cycles", lambda p=pattern: atomic_latency("atom_shared", p),
        Region((shared,), steps="UNROLL"),
        method=f"{n} {shared} in one warp, each adding the value the previous one returned, at one address in "
               f"{WHERE['atom_shared']}, {PATTERN[pattern]}; cycles per atomic, pass {passes} of {passes} timed")
        for pattern in sorted(ATOMIC_PATTERNS)]
    # One line per run read 278.9, 312.97, 277.7 cycles (distinct) on the H200: the line's L2 partition,
    # not noise. The lowest tier's latency is asserted; the slower tiers only reported.
    global_ = ATOMIC_KINDS["atom_global"][2]
    out += [FactSpec(
        f"atom_global_add_{pattern}_near_latency_cycles",
        lambda line, p=pattern: atomic_latency("atom_global", p, line=line), Region((global_,), steps="UNROLL"),
        statistic=Statistic(lines="near_tier"), scope=GPU, plot=_by_line_plot(pattern), reserve=L2_LINES_RESERVE,
        method=f"{n} {global_} in one warp, each adding the value the previous one returned, {PATTERN[pattern]}; "
               f"cycles per atomic, pass {passes} of {passes} timed; {NEAR_TIER_TEXT}")
        for pattern in sorted(ATOMIC_PATTERNS)]
    out += [FactSpec(
        f"{kind}_add_{pattern}_sm_cycles", lambda k=kind, p=pattern: atomic_throughput(k, p),
        Region((ATOMIC_KINDS[kind][2],), LOOP, steps=("ILP", "UNROLL")),
        divisor=atomic_throughput_count(kind, pattern), statistic=Statistic(mode="span"),
        method=f"{ATOMIC_WARPS} warps in one block on one SM, each {atomic_iters(kind, pattern)} x "
               f"{ATOMIC_UNROLL} x {ATOMIC_ILP} {ATOMIC_KINDS[kind][2]} on {ATOMIC_ILP} words of its own in "
               f"{WHERE[kind]}, {PATTERN[pattern]}; SM cycles per warp-wide instruction (32 lane "
               "operations) over the block's span")
        for kind in ATOMIC_KINDS for pattern in ATOMIC_PATTERNS]
    return out


#: every fact of the DPX, constant-cache and atomic units, declared once
FACTS: list[FactSpec] = [*_dpx_facts(), *_const_facts(), *_atomic_facts()]
