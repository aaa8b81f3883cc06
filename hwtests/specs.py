"""Launch shapes of the fact kernels (kernels/*.cu), shared by the tests that use them.

Each spec says what its timed region must hold (``region``): the runner refuses a kernel whose
region, as launched, holds anything else or is not clean at both ends, and ``test_static.py``
checks the same for every spec of :func:`launched` on every arch, without a GPU.

Throughput kernels run one block on one SM; a block of 128 * W threads puts W warps on each of the
SM's four sub-partitions (warp w runs on sub-partition w % 4)."""

import os

from pytest_gpuprops import sass
from pytest_gpuprops.kernel_spec import KernelSpec

#: GPU tests that draw their cases with hypothesis draw the same ones on every run (``derandomize``):
#: runs, GPUs and drivers then compare case for case, and a warm run finds every drawn patch already
#: verified in the cache instead of running nvdisasm on 200 new variants. GPUPROPS_FRESH_DRAWS=1 draws
#: new cases (hypothesis then keeps a failing one in its example database for the next run).
SAME_DRAWS = os.environ.get("GPUPROPS_FRESH_DRAWS", "") != "1"


def _u32(n):
    return lambda cp: (cp.zeros(n, dtype=cp.uint32),)


def clock_overhead() -> KernelSpec:
    return KernelSpec("clock_overhead.cu", "clock_overhead", region={})


def lds_chase(unroll: int) -> KernelSpec:
    return KernelSpec("smem_latency_ld.cu", "smem_latency_ld", {"UNROLL": unroll}, grid=1, block=32, args=_u32(64),
                      region={"LDS": unroll})


def sts_chain(unroll: int, then_lds: bool = False, chained: bool = True) -> KernelSpec:
    """UNROLL STS (0: none), each waiting on the previous one's read scoreboard, then optionally an LDS
    that waits on the last STS, as in the seeds' CuAssembler edits (the shared-memory facts' launch:
    specs_smem.py says what the region holds)."""
    patch = (lambda cb, k: sass.chain_on_read_scoreboard(cb.instructions(k), ("STS", "LDS"))) if chained else None
    return KernelSpec("smem_latency_st.cu", "smem_latency_st", {"UNROLL": unroll, "THEN_LDS": int(then_lds)},
                      grid=1, block=32, args=_u32(64), patch=patch)


SMEM_ITERS = 64


def smem_bandwidth(vec: int, load: bool, unroll: int = 32) -> KernelSpec:
    """The shared-memory bandwidth facts' launch (specs_smem.py says what the region holds)."""
    return KernelSpec("smem_bandwidth.cu", "smem_bandwidth", {"VEC": vec, "LOAD": int(load), "UNROLL": unroll},
                      grid=1, block=1024, args=lambda cp: (cp.zeros(1024, dtype=cp.float32), cp.int32(SMEM_ITERS)))


def smem_bytes(vec: int, unroll: int = 32) -> int:
    return 1024 * vec * 4 * unroll * SMEM_ITERS


L1_BW_UNROLL, L1_BW_ITERS, L1_BW_STRIDE = 32, 64, 1024
#: kernels/l1_bandwidth.cu: two LOP3 per load fold its four words into one register (and one makes
#: the trip's half, it & 1); loop control: the counter, the half's address, the compare and branch,
#: YIELD, BSSY/BSYNC: 9 with NVRTC 13.5, 10 with the device's NVRTC (CUDA 13.0 image, 2026-11-25),
#: which sets the trip counter to 0 after the start read (IMAD.MOV.U32), once, not per trip
L1_BW_LOOP = 10


def l1_bandwidth() -> KernelSpec:
    """One 1024-thread block loading 16 bytes per thread per instruction from lines in its SM's L1."""
    footprint = 2 * (16384 + (L1_BW_UNROLL - 1) * L1_BW_STRIDE)
    return KernelSpec("l1_bandwidth.cu", "l1_bandwidth", {"UNROLL": L1_BW_UNROLL, "STRIDE": L1_BW_STRIDE},
                      grid=1, block=1024,
                      args=lambda cp: (cp.zeros(footprint // 4, dtype=cp.uint32), cp.zeros(1024, dtype=cp.uint32),
                                       cp.int32(L1_BW_ITERS)),
                      region={"LDG.E.128.STRONG.SM": L1_BW_UNROLL, "LOP3.LUT": 2 * L1_BW_UNROLL + 1},
                      region_other=L1_BW_LOOP)


def l1_bytes() -> int:
    """Bytes the block of :func:`l1_bandwidth` loads in its timed region."""
    return 1024 * 16 * L1_BW_UNROLL * L1_BW_ITERS


HMMA_UNROLL = 64
#: loop trips of the unrolled HMMA body: long enough that the block's start skew (up to ~230 cycles
#: for 16 warps, measured on the H100) is under 1 % of the span. With one trip of 64 HMMAs it was
#: 13 % at ILP 1 x 4 warps: the "knee loss" the first issue model was widened for.
HMMA_ITERS = 16
#: a kernel Nsight Compute can profile with its launch overhead under 1 %: 128 000 HMMA per warp
HMMA_NCU_ITERS = 2000


def hmma(ilp: int, warps_per_smsp: int, iters: int = HMMA_ITERS, grid: int = 1) -> KernelSpec:
    ones_f16 = 0x3C003C00  # two half-precision 1.0: finite products, no denormal paths
    return KernelSpec("hmma_16816.cu", "hmma_16816", {"ILP": ilp, "UNROLL": HMMA_UNROLL, "ITERS": iters}, grid=grid,
                      block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(32 * 6, ones_f16, dtype=cp.uint32),
                                       cp.zeros(grid * 128 * warps_per_smsp, dtype=cp.float32)),
                      region={"HMMA.16816.F32": HMMA_UNROLL * ilp}, region_other=0 if iters == 1 else 12)


def hmma_count(ilp: int, iters: int = HMMA_ITERS) -> int:
    """HMMAs one warp runs in the timed region of :func:`hmma`."""
    return HMMA_UNROLL * ilp * iters


FFMA_UNROLL = 256
#: launches behind the FFMA issue rate's median (its launches differ by where the code is fetched)
FFMA_RATE_LAUNCHES = 41


def ffma(ilp: int, warps_per_smsp: int) -> KernelSpec:
    """FFMA chains (the ALU facts' launch: specs_alu.py says what the region holds)."""
    return KernelSpec("ffma.cu", "ffma", {"ILP": ilp, "UNROLL": FFMA_UNROLL}, grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(16, 0.5, dtype=cp.float32), cp.zeros(512, dtype=cp.float32)))


REGBANK_NFFMA, REGBANK_ITERS = 128, 64


def regbank(warps_per_smsp: int) -> KernelSpec:
    return KernelSpec("regbank_ffma.cu", "regbank_ffma", {"NFFMA": REGBANK_NFFMA}, grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(64 * 32, 0.5, dtype=cp.float32), cp.zeros(512 * 64, dtype=cp.float32),
                                       cp.int32(REGBANK_ITERS)),
                      region={"FFMA": REGBANK_NFFMA}, region_other=12)


def launched() -> dict[str, KernelSpec]:
    """Every kernel build the GPU suite launches, by a readable id (block size aside: it does not
    change the code). The register-bank variants are this kernel with FFMA operands patched."""
    out = {"clock_overhead": clock_overhead()}
    for builds in launched_by_file().values():
        out.update(builds)
    return out


def launched_by_file() -> dict[str, dict[str, KernelSpec]]:
    """The builds each GPU test file that shares them launches, by :func:`launched`'s ids: a
    selection (``-k lds_latency``) prefetches its files' builds only (hwtests/conftest.py). A test
    file not named here gets every launched build; a build a file's tests launch but this leaves out
    is compiled by the test itself, and the run's prefetch line counts it."""
    return {
        "test_mma_dtypes.py": {f"mma_{d}_ilp{i}": mma(d, i, 1) for d in MMA_DTYPES for i in range(1, 9)},
        "test_tensorcore.py": {**{f"hmma_ilp{i}": hmma(i, 1) for i in range(1, 9)},
                               **{f"hmma_ncu_ilp{i}": hmma(i, 1, HMMA_NCU_ITERS) for i in (1, 2, 3)}},
        "test_regbank.py": {"regbank": regbank(4)},
        # the hand-written tests' builds (the specs' builds come from specs_smem.FACTS)
        "test_smem.py": {**{f"lds_chase_{u}": lds_chase(u) for u in (50, 500)}, "l1_bandwidth": l1_bandwidth()},
        "test_memory_hierarchy.py": {f"chase_{c}_u{u}": global_chase(c, 16384, unroll=u)
                                     for c in CHASE_CACHE for u in (1, CHASE_UNROLL)},
        "test_smem_conflicts.py": {f"smem_conflict_vec{v}": smem_conflict(v, v) for v in (1, 2, 4)},
        "test_health.py": {},  # NVML readings: no kernel
    }


# ----------------------------------------------------------------------------------------------
# ALU / SFU / shuffle chains, mma.sync per input type, the memory hierarchy by pointer
# chase, shared-memory bank conflicts.

ALU_UNROLL = 128
#: Passes of the chain in the dependent-latency shape (ILP 1): the second is timed, with the region in
#: the instruction caches (kernels/alu_chain.cu). The throughput shapes (ILP > 1, many warps) run one
#: pass: the first warp's fetches warm the caches for the rest, and a second pass would start with the
#: warps out of step, so the block's span would take in the tail of their first pass (measured on the
#: H100: MUFU.EX2 8.00 -> 8.68, SHFL 4.02 -> 4.33, IMAD 2.02 -> 2.51 cycles per instruction).
ALU_LATENCY_PASSES = 2
#: op -> (kernels/alu_chain.cu OP, element type, the opcodes one chain step puts in the region)
ALU_OPS = {
    "shfl_bfly": (1, "uint32", ("SHFL.BFLY",)),
    "shfl_idx": (2, "uint32", ("SHFL.IDX",)),
    "mufu_ex2": (3, "float32", ("MUFU.EX2",)),
    "mufu_rsq": (4, "float32", ("MUFU.RSQ",)),
    "mufu_sin_fmul": (5, "float32", ("FMUL.RZ", "MUFU.SIN")),  # sin.approx: FMUL.RZ by 1/(2 pi), then MUFU.SIN
    "dfma": (6, "float64", ("DFMA",)),
    "imad": (7, "uint32", ("IMAD",)),
}


def _alu_inputs(op: str, ilp: int):
    """32 * ILP start values (lane l of chain j starts from in[32 j + l]): lane numbers for SHFL.IDX
    (each step reads the lane its value names), else values that differ per lane and chain."""
    import numpy as np
    _, dtype, _ = ALU_OPS[op]
    lane, chain = np.arange(32), np.arange(ilp)[:, None]
    if op == "shfl_idx":
        return ((lane + 1 + chain) % 32).astype(np.uint32).ravel()
    if dtype == "uint32":
        return (lane * 7 + chain * 3 + 1).astype(np.uint32).ravel()
    return (0.5 + lane / 64 + chain / 16).astype(dtype).ravel()


def alu(op: str, ilp: int, warps_per_smsp: int, unroll: int = ALU_UNROLL) -> KernelSpec:
    """``op``'s chains (the ALU facts' launch: specs_alu.py says what the region holds)."""
    code, dtype, _ = ALU_OPS[op]
    block = 128 * warps_per_smsp
    passes = ALU_LATENCY_PASSES if ilp == 1 else 1
    return KernelSpec("alu_chain.cu", "alu_chain", {"OP": code, "ILP": ilp, "UNROLL": unroll, "PASSES": passes},
                      grid=1, block=block,
                      args=lambda cp: (cp.asarray(_alu_inputs(op, ilp)), cp.zeros(block, dtype=dtype)))


MMA_UNROLL = 64
#: dtype -> (kernels/mma_sync.cu DTYPE, SASS opcode, 32-bit word of A/B elements equal to one)
MMA_DTYPES = {
    "bf16_16816_f32": (1, "HMMA.16816.F32.BF16", 0x3F803F80),
    "tf32_1688_f32": (2, "HMMA.1688.F32.TF32", 0x3F800000),
    "s8_16832_s32": (3, "IMMA.16832.S8.S8", 0x01010101),
    "f16_16816_f16": (4, "HMMA.16816.F16", 0x3C003C00),
}


def mma(dtype: str, ilp: int, warps_per_smsp: int, unroll: int = MMA_UNROLL, iters: int = HMMA_ITERS) -> KernelSpec:
    """As :func:`hmma`: 16 trips of the unrolled body, so start skew and the unawaited last
    instruction of a chain are under 1 % of what is timed."""
    code, opcode, one = MMA_DTYPES[dtype]
    return KernelSpec("mma_sync.cu", "mma_sync", {"DTYPE": code, "ILP": ilp, "UNROLL": unroll, "ITERS": iters},
                      grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(32 * 6, one, dtype=cp.uint32),
                                       cp.zeros(128 * warps_per_smsp, dtype=cp.uint32)),
                      region={opcode: unroll * ilp}, region_other=0 if iters == 1 else 12)


CHASE_UNROLL = 1024  # a launch's mean over 1024 random hops: DRAM hops vary hop to hop
#: kernels/global_chase.cu CACHE -> (define, the load's SASS on sm_80 .. sm_90)
CHASE_CACHE = {"ca": (0, "LDG.E.64.STRONG.SM"), "cg": (1, "LDG.E.64.STRONG.GPU")}


def global_chase(cache: str, footprint: int, *, unroll: int = CHASE_UNROLL, warm: str = "none",
                 evict_bytes: int = 0, seed: int = 0, timer: bool = False) -> KernelSpec:
    """A pointer chase over ``footprint`` bytes (one node per 128-byte line, one random cycle).

    ``warm``: "kernel" walks the whole cycle before the start read in every launch (L1); "l2" reads
    the buffer once on the host side after laying it out (L2 keeps it across launches); "evict"
    writes ``evict_bytes`` of another buffer after laying it out, so the chase starts cold (DRAM);
    "none" does neither. Launches go on where the last one stopped (see the kernel). ``timer``: built
    with TIMER=1, each launch also says the SM clock it ran at (the launch info's region_clock_mhz). A
    chase past L1 (``cache`` "cg") reads the clock beside its launches (KernelSpec.clock_beside)."""
    import memory_levels
    define, opcode = CHASE_CACHE[cache]
    if warm not in ("none", "kernel", "l2", "evict"):
        raise ValueError(f"warm must be none, kernel, l2 or evict, not {warm!r}")
    nodes = footprint // memory_levels.NODE_STRIDE

    def args(cp):
        chain = cp.zeros(footprint // 8, dtype=cp.uint64)
        start = memory_levels.fill_chain(cp, chain, chain.data.ptr, seed=seed)
        cursor = cp.full(1, start, dtype=cp.uint64)
        if warm == "l2":
            int(chain.sum())  # every line read once: in L2 when the chase starts
        elif warm == "evict":
            junk = cp.empty(evict_bytes // 4, dtype=cp.uint32)
            junk.fill(1)  # 4 x L2 of writes: the chain's lines leave L2
            del junk
        cp.cuda.runtime.deviceSynchronize()
        return chain, cursor, cp.int32(nodes if warm == "kernel" else 0)

    defines = {"CACHE": define, "UNROLL": unroll, **({"TIMER": 1} if timer else {})}
    return KernelSpec("global_chase.cu", "global_chase", defines, grid=1, block=32, args=args, region={opcode: unroll},
                      clock_beside=cache == "cg")


#: a chase launch of at least this many hops also reads %globaltimer around its region (TIMER=1): 256 L2 hits
#: take ~35 us, which the timer's 32 ns ticks read to 0.1 %, against the 0.76 % between an H100's 1980 and
#: 1995 MHz; a launch of one hop (the per-hop distributions) is too short to say its clock
REGION_CLOCK_MIN_UNROLL = 256


def chase_level(level: str, sizes, *, unroll: int = CHASE_UNROLL) -> KernelSpec:
    """The chase that measures ``level`` ("l1", "l2", "dram") on a device of ``sizes``
    (memory_levels.CacheSizes): its footprint is derived from them and checked; a launch of many hops
    reads the clock it ran at beside its cycles (:data:`REGION_CLOCK_MIN_UNROLL`)."""
    import memory_levels
    f = memory_levels.footprint(level, sizes)
    timer = unroll >= REGION_CLOCK_MIN_UNROLL
    if level == "l1":
        return global_chase("ca", f, unroll=unroll, warm="kernel", timer=timer)
    if level == "l2":
        return global_chase("cg", f, unroll=unroll, warm="l2", timer=timer)
    return global_chase("cg", f, unroll=unroll, warm="evict", evict_bytes=4 * sizes.l2_bytes, timer=timer)


def chase_sweep_point(footprint: int, sizes, *, unroll: int = CHASE_UNROLL) -> KernelSpec:
    """One point of the latency-vs-footprint sweep: ld.global.ca, warmed in the kernel up to 4 x the
    largest L1 (so the L1 knee shows), by a host-side read beyond (L2, partly where it overflows)."""
    warm = "kernel" if footprint <= 4 * sizes.l1_max_bytes else "l2"
    return global_chase("ca", footprint, unroll=unroll, warm=warm)


CONFLICT_UNROLL, CONFLICT_ITERS, CONFLICT_WARPS = 32, 64, 32
_LDS_OPCODE = {1: "LDS", 2: "LDS.64", 4: "LDS.128"}


def smem_conflict(vec: int, stride_words: int, unroll: int = CONFLICT_UNROLL) -> KernelSpec:
    """LDS of ``vec`` words where lane l reads from word l * stride_words; 1024 threads, one block.
    Divide the span by :func:`conflict_accesses` for cycles per warp access per SM."""
    import smem_banks
    smem_banks.check_access(stride_words, vec)
    return KernelSpec("smem_conflict.cu", "smem_conflict", {"VEC": vec, "UNROLL": unroll}, grid=1,
                      block=32 * CONFLICT_WARPS,
                      args=lambda cp: (cp.zeros(1024, dtype=cp.float32), cp.int32(stride_words), cp.int32(CONFLICT_ITERS)),
                      region={_LDS_OPCODE[vec]: unroll}, region_other=20)  # loop control, as smem_bandwidth


def conflict_accesses(unroll: int = CONFLICT_UNROLL) -> int:
    return CONFLICT_WARPS * unroll * CONFLICT_ITERS


WGMMA_N = (8, 16, 32, 64, 128, 256)
WGMMA_UNROLL = 256  # throughput chains: 16 HGMMAs of N=16 (~500 cycles) were 3.7 % noisy from start skew
WGMMA_ARCH = "sm_90a"  # wgmma exists only there; an sm_90a cubin runs on an sm_90 GPU (H100, H200)


def wgmma_opcode(n: int, bf16: bool) -> str:
    return f"HGMMA.64x{n}x16.F32" + (".BF16" if bf16 else "")


def wgmma(n: int, bf16: bool, a_regs: bool, unroll: int = WGMMA_UNROLL, warpgroups: int = 1) -> KernelSpec:
    """UNROLL wgmma.mma_async m64nNk16 (f16 or bf16 in, f32 accumulate) in one accumulator chain per
    warpgroup, A from shared memory (descriptor) or registers; compile for :data:`WGMMA_ARCH` (the wgmma
    facts' launch: specs_wgmma.py says what the region holds and compiles it there)."""
    if n not in WGMMA_N:
        raise ValueError(f"N must be one of {WGMMA_N}, not {n}")
    return KernelSpec("wgmma.cu", "wgmma", {"N": n, "BF16": int(bf16), "A_REGS": int(a_regs), "UNROLL": unroll},
                      grid=1, block=128 * warpgroups, args=lambda cp: (cp.zeros(1024, dtype=cp.float32),))
