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
    out.update({f"hmma_ncu_ilp{i}": hmma(i, 1, HMMA_NCU_ITERS) for i in (1, 2, 3)})
    out.update({f"ffma_ilp{i}": ffma(i, 1) for i in (1, 8)})
    return out
