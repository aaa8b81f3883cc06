"""Launch shapes of the fact kernels (kernels/*.cu), shared by the tests that use them.

Throughput kernels run one block on one SM; a block of 128 * W threads puts W warps on each of the
SM's four sub-partitions (warp w runs on sub-partition w % 4)."""

from pytest_gpuprops import sass
from pytest_gpuprops.measure import KernelSpec


def _u32(n):
    return lambda cp: (cp.zeros(n, dtype=cp.uint32),)


def lds_chase(unroll: int) -> KernelSpec:
    return KernelSpec("smem_latency_ld.cu", "smem_latency_ld", {"UNROLL": unroll}, grid=1, block=32, args=_u32(64))


def sts_chain(unroll: int, then_lds: bool = False, chained: bool = True) -> KernelSpec:
    """UNROLL STS (0: none), each waiting on the previous one's read scoreboard, then optionally an LDS
    that waits on the last STS, as in the seeds' CuAssembler edits."""
    patch = (lambda cb, k: sass.chain_on_read_scoreboard(cb.instructions(k), ("STS", "LDS"))) if chained else None
    return KernelSpec("smem_latency_st.cu", "smem_latency_st", {"UNROLL": unroll, "THEN_LDS": int(then_lds)},
                      grid=1, block=32, args=_u32(64), patch=patch)


SMEM_ITERS = 64


def smem_bandwidth(vec: int, load: bool, unroll: int = 32) -> KernelSpec:
    return KernelSpec("smem_bandwidth.cu", "smem_bandwidth", {"VEC": vec, "LOAD": int(load), "UNROLL": unroll},
                      grid=1, block=1024, args=lambda cp: (cp.zeros(1024, dtype=cp.float32), cp.int32(SMEM_ITERS)))


def smem_bytes(vec: int, unroll: int = 32) -> int:
    return 1024 * vec * 4 * unroll * SMEM_ITERS


HMMA_UNROLL = 64


def hmma(ilp: int, warps_per_smsp: int) -> KernelSpec:
    ones_f16 = 0x3C003C00  # two half-precision 1.0: finite products, no denormal paths
    return KernelSpec("hmma_16816.cu", "hmma_16816", {"ILP": ilp, "UNROLL": HMMA_UNROLL}, grid=1,
                      block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(32 * 6, ones_f16, dtype=cp.uint32), cp.zeros(512, dtype=cp.float32)))


FFMA_UNROLL = 256


def ffma(ilp: int, warps_per_smsp: int) -> KernelSpec:
    return KernelSpec("ffma.cu", "ffma", {"ILP": ilp, "UNROLL": FFMA_UNROLL}, grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(16, 0.5, dtype=cp.float32), cp.zeros(512, dtype=cp.float32)))


REGBANK_NFFMA, REGBANK_ITERS = 128, 64


def regbank(warps_per_smsp: int) -> KernelSpec:
    return KernelSpec("regbank_ffma.cu", "regbank_ffma", {"NFFMA": REGBANK_NFFMA}, grid=1, block=128 * warps_per_smsp,
                      args=lambda cp: (cp.full(64 * 32, 0.5, dtype=cp.float32), cp.zeros(512 * 64, dtype=cp.float32),
                                       cp.int32(REGBANK_ITERS)))
