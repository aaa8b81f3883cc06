"""Launch shapes of kernels/wgmma_dtypes.cu (Hopper wgmma for the operand types beside f16/bf16 -> f32,
which hwtests/specs.py :func:`~specs.wgmma` covers), and the throughput model they are checked
against. sm_90a only: compile for :data:`specs.WGMMA_ARCH`.

Every build holds, between the clock reads, WARPGROUP.ARRIVE, UNROLL copies of one xGMMA opcode on
one accumulator chain and WARPGROUP.DEPBAR.LE (:func:`spec` sets that as the region)."""

from pytest_gpuprops.kernel_spec import KernelSpec

#: dtype -> (DTYPE define, K, SASS opcode with {n} for N). The accumulator is f32 for tf32 and fp8,
#: s32 for s8 / u8 and f16 for f16_f16acc; sp_ types are ``wgmma.mma_async.sp`` with 2:4 metadata.
DTYPES = {
    "tf32": (0, 8, "HGMMA.64x{n}x8.F32.TF32"),
    "e4m3": (1, 32, "QGMMA.64x{n}x32.F32.E4M3.E4M3"),
    "e5m2": (2, 32, "QGMMA.64x{n}x32.F32.E5M2.E5M2"),
    "s8": (3, 32, "IGMMA.64x{n}x32.S8.S8"),
    "u8": (4, 32, "IGMMA.64x{n}x32.U8.U8"),
    "f16_f16acc": (5, 16, "HGMMA.64x{n}x16.F16"),
    "sp_f16": (6, 32, "HGMMA.SP.64x{n}x32.F32"),
    "sp_e4m3": (7, 64, "QGMMA.SP.64x{n}x64.F32.E4M3.E4M3"),
}
DENSE = tuple(d for d in DTYPES if not d.startswith("sp_"))
SPARSE = tuple(d for d in DTYPES if d.startswith("sp_"))
LATENCY_N = (64, 256)
THROUGHPUT_N = (64, 128, 256)
#: instructions per warpgroup in a throughput chain: UNROLL x N = 16384, so the 2-warpgroup span is
#: about 16 000 cycles at N / 2 cycles per instruction (the start skew that made 16 HGMMAs of N = 16,
#: ~500 cycles, 3.7 % noisy is then ~0.1 %), and each build compiles in about a second
THROUGHPUT_WORK = 16384
THROUGHPUT_WARPGROUPS = 2
#: a throughput measurement's launch pair (KernelSpec.lengths): the chain once and 5 times, so a value is the
#: steady interval over 4 x 16384 / N instructions a warpgroup, the chain's edges (fill, drain, the warpgroups'
#: start skew, 60-210 cycles a span, which differed between units and between launches of one unit) cancelled.
#: Fully unrolled chains of 2x and 4x the length read N / 2 for every dense shape and 16 + N / 2 for sparse ss
#: (H100 GPU-6d80a5f8), and so did this loop at 1 and 5 passes, within 0.03 cycles (H100 GPU-2a7e6836, three
#: processes; 2026-11-27)
THROUGHPUT_LENGTHS = (1, 5)
KERNEL = "wgmma_dtypes"
SOURCE = "wgmma_dtypes.cu"


def k_of(dtype: str) -> int:
    return DTYPES[dtype][1]


def opcode(dtype: str, n: int) -> str:
    """The SASS opcode ptxas emits for one wgmma of ``dtype`` and N (NVRTC 13, sm_90a)."""
    return DTYPES[dtype][2].format(n=n)


def shape(dtype: str, n: int) -> str:
    return f"m64n{n}k{k_of(dtype)}"


def fact_name(dtype: str, n: int, a_regs: bool, what: str) -> str:
    """``wgmma_<dtype>_m64n<N>k<K>_<ss|rs>_<what>``, what = latency_cycles or sm_cycles."""
    return f"wgmma_{dtype}_{shape(dtype, n)}_{'rs' if a_regs else 'ss'}_{what}"


def throughput_unroll(n: int) -> int:
    return THROUGHPUT_WORK // n


def spec(dtype: str, n: int, a_regs: bool, unroll: int, warpgroups: int = 1, repeated: bool = False) -> KernelSpec:
    """UNROLL wgmma of ``dtype`` m64nNkK on one accumulator chain per warpgroup, A from shared memory
    (descriptor) or registers; a block of 128 x ``warpgroups`` threads. ``repeated``: the chain in a loop
    whose count is the launch's last argument, measured at :data:`THROUGHPUT_LENGTHS`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    if n not in (64, 128, 256):
        raise ValueError(f"N must be 64, 128 or 256, not {n}")
    defines = {"DTYPE": DTYPES[dtype][0], "N": n, "A_REGS": int(a_regs), "UNROLL": unroll}
    if not repeated:
        return KernelSpec(SOURCE, KERNEL, defines, grid=1, block=128 * warpgroups,
                          args=lambda cp: (cp.zeros(1024, dtype=cp.float32), cp.int32(1)),
                          region={"WARPGROUP.ARRIVE": 1, opcode(dtype, n): unroll, "WARPGROUP.DEPBAR.LE": 1})
    # the chain in a loop (REPEATED): ptxas puts a WARPGROUP.ARRIVE at the top of each pass and, after the loop,
    # one more and a lone HGMMA.64x8x16.F16 before the wait (constant: both lengths hold them); the loop's
    # count (a register), its increment, compare and branch are the glue
    return KernelSpec(SOURCE, KERNEL, dict(defines, REPEATED=1), grid=1, block=128 * warpgroups,
                      args=lambda cp: (cp.zeros(1024, dtype=cp.float32),), lengths=THROUGHPUT_LENGTHS,
                      region={"WARPGROUP.ARRIVE": 3, opcode(dtype, n): unroll, "HGMMA.64x8x16.F16": 1,
                              "WARPGROUP.DEPBAR.LE": 1},
                      region_other=4)


def latency(dtype: str, n: int, a_regs: bool) -> KernelSpec:
    return spec(dtype, n, a_regs, 1)


def throughput(dtype: str, n: int, a_regs: bool) -> KernelSpec:
    return spec(dtype, n, a_regs, throughput_unroll(n), THROUGHPUT_WARPGROUPS, repeated=True)


def build_id(dtype: str, n: int, a_regs: bool, unroll: int) -> str:
    return f"wgmma_{dtype}_n{n}_{'rs' if a_regs else 'ss'}_u{unroll}"


def builds() -> dict[str, KernelSpec]:
    """Every build the GPU suite launches from kernels/wgmma_dtypes.cu: per type and ss / rs, UNROLL 1
    at each :data:`LATENCY_N` and :func:`throughput_unroll` at each :data:`THROUGHPUT_N`."""
    out = {}
    for dtype in DTYPES:
        for a_regs in (False, True):
            for n in LATENCY_N:
                out[build_id(dtype, n, a_regs, 1)] = latency(dtype, n, a_regs)
            for n in THROUGHPUT_N:
                out[build_id(dtype, n, a_regs, throughput_unroll(n))] = throughput(dtype, n, a_regs)
    return out


# -- the throughput model ----------------------------------------------------------------------------

#: Peak tensor FLOP (integer: OP) per clock per SM, H100 SXM5: NVIDIA's dense figures (half the "with
#: sparsity" ones) divided by 132 SMs x 1.83 GHz, the boost clock behind them: TF32 494.7 TFLOPS ->
#: 2048, FP16/BF16 with FP16 or FP32 accumulate 989.4 -> 4096, FP8 1978.9 -> 8192, INT8 1978.9 TOPS ->
#: 8192. Sparse: twice its type's dense figure, counting the FLOP of the full (dense) K.
PEAK_FLOP_PER_CLK = {"tf32": 2048, "f16": 4096, "bf16": 4096, "f16_f16acc": 4096, "e4m3": 8192, "e5m2": 8192,
                     "s8": 8192, "u8": 8192, "sp_f16": 8192, "sp_e4m3": 16384}
PEAK_SOURCE = ("NVIDIA H100 Tensor Core GPU datasheet / Hopper architecture whitepaper, H100 SXM5 peak tensor "
               "throughput (dense = half the 'with sparsity' figure): TF32 494.7, FP16 and BF16 989.4 TFLOPS (FP16 "
               "or FP32 accumulate), FP8 1978.9 TFLOPS, INT8 1978.9 TOPS, over 132 SMs x 1.83 GHz")
#: Bytes of K per row of A (dense or, sparse, as stored: half the elements) and of B.
A_ROW_BYTES = 32


def flop(dtype: str, n: int) -> int:
    """FLOP (integer: OP) of one m64nNkK instruction, 2 x 64 x N x K (sparse: the logical K)."""
    k = 16 if dtype in ("f16", "bf16") else k_of(dtype)
    return 2 * 64 * n * k


def smem_bytes(dtype: str, n: int, a_regs: bool) -> int:
    """Operand bytes one instruction reads from shared memory: B (N rows of K) and, for ss, A (64 rows)."""
    b_row = 64 if dtype.startswith("sp_") else 32
    return (0 if a_regs else 64 * A_ROW_BYTES) + n * b_row


def model_cycles(dtype: str, n: int, a_regs: bool, smem_bytes_per_clk: float) -> float:
    """Cycles per instruction per SM: the slower of the tensor cores at their peak rate and the
    operand reads at shared memory's bandwidth,

        max(2 * 64 * N * K / peak_flop_per_clk(dtype), smem_bytes(dtype, N, ss|rs) / smem_bytes_per_clk)

    For every dense type the peak term is N / 2 and the shared-memory one (2048 + 32 N) / 128 for ss:
    they meet at N = 64, and the f16 facts below it are the bandwidth term (N = 8, 16, 32: 18.1, 20.1,
    24.1 cycles). A sparse B has twice the bytes per row: ss (2048 + 64 N) / 128 = 16 + N / 2 is over
    the peak's N / 2 at every N, rs meets it. Not modelled: with A in registers and N < 64 a floor of
    about 13 cycles (f16 N = 8 and 16), so the model is asserted for N >= 64 there."""
    return max(flop(dtype, n) / PEAK_FLOP_PER_CLK[dtype], smem_bytes(dtype, n, a_regs) / smem_bytes_per_clk)


def model_flop_per_clk(dtype: str, n: int, a_regs: bool, smem_bytes_per_clk: float) -> float:
    return flop(dtype, n) / model_cycles(dtype, n, a_regs, smem_bytes_per_clk)
