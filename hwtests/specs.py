"""Launch shapes of the fact kernels (kernels/*.cu), shared by the tests that use them.

Each spec says what its timed region must hold (``region``): the runner refuses a kernel whose
region, as launched, holds anything else or is not clean at both ends, and ``test_static.py``
checks the same for every spec of :func:`launched` on every arch, without a GPU.

Throughput kernels run one block on one SM; a block of 128 * W threads puts W warps on each of the
SM's four sub-partitions (warp w runs on sub-partition w % 4)."""

from pytest_gpuprops import sass
from pytest_gpuprops.measure import KernelSpec


def _u32(n):
    return lambda cp: (cp.zeros(n, dtype=cp.uint32),)


def clock_overhead() -> KernelSpec:
    return KernelSpec("clock_overhead.cu", "clock_overhead", region={})


def lds_chase(unroll: int) -> KernelSpec:
    return KernelSpec("smem_latency_ld.cu", "smem_latency_ld", {"UNROLL": unroll}, grid=1, block=32, args=_u32(64),
                      region={"LDS": unroll})


def sts_chain(unroll: int, then_lds: bool = False, chained: bool = True) -> KernelSpec:
    """UNROLL STS (0: none), each waiting on the previous one's read scoreboard, then optionally an LDS
    that waits on the last STS, as in the seeds' CuAssembler edits."""
    patch = (lambda cb, k: sass.chain_on_read_scoreboard(cb.instructions(k), ("STS", "LDS"))) if chained else None
    region = {"STS": unroll} if unroll else {}
    if then_lds:
        region["LDS"] = 1
    return KernelSpec("smem_latency_st.cu", "smem_latency_st", {"UNROLL": unroll, "THEN_LDS": int(then_lds)},
                      grid=1, block=32, args=_u32(64), patch=patch, region=region)


SMEM_ITERS = 64
_SMEM_OPCODE = {(1, False): "STS", (2, False): "STS.64", (4, False): "STS.128",
                (1, True): "LDS", (2, True): "LDS.64", (4, True): "LDS.128"}


def smem_bandwidth(vec: int, load: bool, unroll: int = 32) -> KernelSpec:
    return KernelSpec("smem_bandwidth.cu", "smem_bandwidth", {"VEC": vec, "LOAD": int(load), "UNROLL": unroll},
                      grid=1, block=1024, args=lambda cp: (cp.zeros(1024, dtype=cp.float32), cp.int32(SMEM_ITERS)),
                      region={_SMEM_OPCODE[vec, load]: unroll}, region_other=20)  # loop control, run once or per 32


def smem_bytes(vec: int, unroll: int = 32) -> int:
    return 1024 * vec * 4 * unroll * SMEM_ITERS


HMMA_UNROLL = 64


def hmma(ilp: int, warps_per_smsp: int, unroll: int = HMMA_UNROLL) -> KernelSpec:
    ones_f16 = 0x3C003C00  # two half-precision 1.0: finite products, no denormal paths
    return KernelSpec("hmma_16816.cu", "hmma_16816", {"ILP": ilp, "UNROLL": unroll}, grid=1,
                      block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(32 * 6, ones_f16, dtype=cp.uint32), cp.zeros(512, dtype=cp.float32)),
                      region={"HMMA.16816.F32": unroll * ilp})


FFMA_UNROLL = 256


def ffma(ilp: int, warps_per_smsp: int) -> KernelSpec:
    return KernelSpec("ffma.cu", "ffma", {"ILP": ilp, "UNROLL": FFMA_UNROLL}, grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(16, 0.5, dtype=cp.float32), cp.zeros(512, dtype=cp.float32)),
                      region={"FFMA": FFMA_UNROLL * ilp})


REGBANK_NFFMA, REGBANK_ITERS = 128, 64


def regbank(warps_per_smsp: int) -> KernelSpec:
    return KernelSpec("regbank_ffma.cu", "regbank_ffma", {"NFFMA": REGBANK_NFFMA}, grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(64 * 32, 0.5, dtype=cp.float32), cp.zeros(512 * 64, dtype=cp.float32),
                                       cp.int32(REGBANK_ITERS)),
                      region={"FFMA": REGBANK_NFFMA}, region_other=12)


def launched() -> dict[str, KernelSpec]:
    """Every kernel build the GPU suite launches, by a readable id (block size aside: it does not
    change the code). The register-bank variants are this kernel with FFMA operands patched."""
    out = {"clock_overhead": clock_overhead(), "regbank": regbank(4)}
    out.update({f"lds_chase_{u}": lds_chase(u) for u in (50, 500)})
    out.update({"sts_chain_50": sts_chain(50), "sts_then_lds": sts_chain(1, then_lds=True),
                "lds_alone": sts_chain(0, then_lds=True)})
    out.update({f"smem_{'lds' if ld else 'sts'}_vec{v}": smem_bandwidth(v, ld) for v in (1, 2, 4) for ld in (0, 1)})
    out.update({f"hmma_ilp{i}": hmma(i, 1) for i in range(1, 9)})
    out.update({f"ffma_ilp{i}": ffma(i, 1) for i in (1, 8)})
    out.update(issue10_launched())
    return out


# ----------------------------------------------------------------------------------------------
# Issue 10: ALU / SFU / shuffle chains, mma.sync per input type, the memory hierarchy by pointer
# chase, shared-memory bank conflicts.

ALU_UNROLL = 128
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
    code, dtype, opcodes = ALU_OPS[op]
    block = 128 * warps_per_smsp
    return KernelSpec("alu_chain.cu", "alu_chain", {"OP": code, "ILP": ilp, "UNROLL": unroll}, grid=1, block=block,
                      args=lambda cp: (cp.asarray(_alu_inputs(op, ilp)), cp.zeros(block, dtype=dtype)),
                      region={o: unroll * ilp for o in opcodes})


MMA_UNROLL = 64
#: dtype -> (kernels/mma_sync.cu DTYPE, SASS opcode, 32-bit word of A/B elements equal to one)
MMA_DTYPES = {
    "bf16_16816_f32": (1, "HMMA.16816.F32.BF16", 0x3F803F80),
    "tf32_1688_f32": (2, "HMMA.1688.F32.TF32", 0x3F800000),
    "s8_16832_s32": (3, "IMMA.16832.S8.S8", 0x01010101),
    "f16_16816_f16": (4, "HMMA.16816.F16", 0x3C003C00),
}


def mma(dtype: str, ilp: int, warps_per_smsp: int, unroll: int = MMA_UNROLL) -> KernelSpec:
    code, opcode, one = MMA_DTYPES[dtype]
    return KernelSpec("mma_sync.cu", "mma_sync", {"DTYPE": code, "ILP": ilp, "UNROLL": unroll}, grid=1,
                      block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(32 * 6, one, dtype=cp.uint32), cp.zeros(512, dtype=cp.uint32)),
                      region={opcode: unroll * ilp})


def issue10_launched() -> dict[str, KernelSpec]:
    """The issue-10 kernels' launched builds (latency and saturated shapes of each)."""
    out = {f"alu_{op}_ilp{i}": alu(op, i, 1) for op in ALU_OPS for i in (1, 8)}
    out.update({f"mma_{d}_ilp{i}": mma(d, i, 1) for d in MMA_DTYPES for i in (1, 8)})
    return out
