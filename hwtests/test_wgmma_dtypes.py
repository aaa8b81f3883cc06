"""Hopper's warpgroup MMA for every operand type beside f16/bf16 -> f32 (test_wgmma.py has those):
tf32 -> f32 (m64nNk8), e4m3 and e5m2 -> f32 (m64nNk32), s8 and u8 -> s32 (m64nNk32), f16 -> f16
(m64nNk16), and the 2:4 sparse wgmma.mma_async.sp f16 -> f32 (m64nNk32) and e4m3 -> f32 (m64nNk64);
A from shared memory (ss) or registers (rs). Per type: the latency of one instruction, the
cycles per instruction per SM of a chain, and how the FLOP rate follows a two-term model
(specs_wgmma_dtypes.model_cycles): the tensor cores' peak, or shared memory's bandwidth for the
operands read from it.

wgmma exists only on sm_90a: the kernel (kernels/wgmma_dtypes.cu) is compiled for sm_90a (an sm_90a
cubin runs on the sm_90 GPUs, H100 and H200) and the tests are skipped on other GPUs."""

from pathlib import Path

import pytest
import specs
import specs_wgmma_dtypes as wd

from pytest_gpuprops import prefetch, sass
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.timing import build_for_timing

pytestmark = [pytest.mark.gpu, pytest.mark.arch("sm_90")]
KERNELS = Path(__file__).parent.parent / "kernels"
WG = wd.THROUGHPUT_WARPGROUPS
LATENCY = [(d, n, r) for d in wd.DTYPES for n in wd.LATENCY_N for r in (False, True)]
THROUGHPUT = [(d, n, r) for d in wd.DTYPES for n in wd.THROUGHPUT_N for r in (False, True)]
#: first setting, to be reviewed against the first H100 / H200 run: the f16 / bf16 facts sit within
#: 0.8 % of the model (N = 8 .. 256 ss, 64 .. 256 rs; test_static_wgmma_dtypes.py checks it on the CPU)
MODEL_TOLERANCE = 0.02
#: the shared-memory bandwidth the model's second term uses: this arch's widest LDS fact (127.85 B/clk
#: on sm_90; the f16 ss wgmma facts at N = 8, 16, 32 imply 127.2)
SMEM_BANDWIDTH_FACT = "smem_lds_float4_bytes_per_cycle"


def case_id(dtype, n, a_regs) -> str:
    return f"{dtype}_{wd.shape(dtype, n)}_{'rs' if a_regs else 'ss'}"


def built(runner, spec):
    """``spec`` compiled for sm_90a and patched for timing (the runner compiles for the GPU's sm_90)."""
    compiled = compile_cuda(KERNELS / spec.source, specs.WGMMA_ARCH, spec.defines, cache_dir=runner.cache_dir)
    return build_for_timing(sass.Cubin(compiled.cubin, specs.WGMMA_ARCH, name=f"{spec.source} {spec.defines}"), spec)


#: where the session prefetch (hwtests/conftest.py) compiles what :func:`_specs_of` names
BUILD_ARCH = specs.WGMMA_ARCH


def _specs_of(item) -> list:
    name, params = item.originalname, getattr(getattr(item, "callspec", None), "params", {})
    if name == "test_wgmma_dtype_latency":
        return [wd.latency(params["dtype"], params["n"], params["a_regs"])]
    if name == "test_wgmma_dtype_cycles_per_sm":
        return [wd.throughput(params["dtype"], params["n"], params["a_regs"])]
    if name in ("test_wgmma_dense_flop_rate_follows_the_model", "test_wgmma_sparse_flop_rate_follows_the_model"):
        sparse = name.startswith("test_wgmma_sparse")
        return [s for _, _, s in _model_cases(sparse)]
    return []


@pytest.fixture(scope="module", autouse=True)
def _compiled_together(request):
    """Compile this module's selected builds in parallel and read them as patched for timing in one
    nvdisasm batch (hwtests/conftest.py does the same for test_wgmma.py); each test then builds from
    the caches exactly as without this. Runs only once a GPU test of the module is set up."""
    wanted = {}
    for item in request.session.items:
        if item.module is request.module:
            for s in _specs_of(item):
                wanted[prefetch.Build.of(KERNELS / s.source, specs.WGMMA_ARCH, s.defines)] = s
    cache = getattr(request.config.option, "gpuprops_cache", None)
    cubins = prefetch.builds(list(wanted), cache_dir=cache)
    prefetch.timing_patches((cubins[b], s) for b, s in wanted.items() if b in cubins)


@pytest.mark.fact(lambda dtype, n, a_regs: wd.fact_name(dtype, n, a_regs, "latency_cycles"))
@pytest.mark.parametrize("dtype, n, a_regs", LATENCY, ids=[case_id(*c) for c in LATENCY])
def test_wgmma_dtype_latency(gpuprops, dtype, n, a_regs, benchmark):
    name = gpuprops.fact_name
    spec = wd.latency(dtype, n, a_regs)
    m = gpuprops.measure(name, spec, divisor=1, built=built(gpuprops.runner, spec))
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"one {wd.opcode(dtype, n)} ({'A in registers' if a_regs else 'A in shared memory'}) "
                          "between wgmma.fence and commit_group + wait_group 0, one warpgroup; cycles from "
                          "WARPGROUP.ARRIVE to the result, per warp")


@pytest.mark.fact(lambda dtype, n, a_regs: wd.fact_name(dtype, n, a_regs, "sm_cycles"))
@pytest.mark.parametrize("dtype, n, a_regs", THROUGHPUT, ids=[case_id(*c) for c in THROUGHPUT])
def test_wgmma_dtype_cycles_per_sm(gpuprops, dtype, n, a_regs, benchmark):
    name = gpuprops.fact_name
    spec = wd.throughput(dtype, n, a_regs)
    u = wd.throughput_unroll(n)
    m = gpuprops.measure(name, spec, divisor=u * WG, mode="span", built=built(gpuprops.runner, spec))
    short, long = spec.lengths
    gpuprops.check(name, m, benchmark=benchmark,
                   method=f"{u} {wd.opcode(dtype, n)} ({'A in registers' if a_regs else 'A in shared memory'}) "
                          f"on one accumulator chain per warpgroup, {WG} warpgroups in one block, the chain run "
                          f"{short} and {long} times (a loop, one binary); cycles per instruction per SM: the "
                          f"difference of the block's spans over {long - short} x {u} x {WG} instructions (the "
                          "steady interval, the chain's fill, drain and start edges cancelled)")


def _model_cases(sparse: bool) -> list[tuple[str, tuple, object]]:
    """(label, (dtype, n, a_regs), spec) of every throughput build the model is checked on. Dense adds
    the f16 builds of test_wgmma.py (kernels/wgmma.cu, the same UNROLL 256 builds its facts use): ss
    at every N, where N < 64 is the shared-memory term; rs from N = 64 (below, rs has a floor of about
    13 cycles that the model does not hold)."""
    out = []
    if not sparse:
        for n in specs.WGMMA_N:
            for a_regs in (False, True):
                if a_regs and n < 64:
                    continue
                out.append((f"f16 m64n{n}k16 {'rs' if a_regs else 'ss'}", ("f16", n, a_regs),
                            specs.wgmma(n, False, a_regs, unroll=specs.WGMMA_UNROLL, warpgroups=WG)))
    for dtype in (wd.SPARSE if sparse else wd.DENSE):
        for n in wd.THROUGHPUT_N:
            for a_regs in (False, True):
                out.append((case_id(dtype, n, a_regs).replace("_m64", " m64").replace("_", " "), (dtype, n, a_regs),
                            wd.throughput(dtype, n, a_regs)))
    return out


def _check_model(gpuprops, name: str, sparse: bool):
    bw = gpuprops.expected(SMEM_BANDWIDTH_FACT)
    cases = _model_cases(sparse)

    def measure_all():
        got = []
        for label, (dtype, n, a_regs), spec in cases:
            u = spec.defines["UNROLL"]
            m = gpuprops.measure(f"wgmma {label}", spec, divisor=u * WG, mode="span", built=built(gpuprops.runner, spec))
            got.append((label, wd.model_flop_per_clk(dtype, n, a_regs, bw), wd.flop(dtype, n) / m.median))
        return got

    got = measure_all()
    for (_, (dtype, n, a_regs), _), (_, model, measured) in zip(cases, got):
        gpuprops.plot_point("wgmma_flop_per_clk", dtype=f"{dtype}{' sparse' if sparse else ''}", n=n,
                            operands="rs" if a_regs else "ss", measured=measured, model=model)
    gpuprops.check_model(
        name, got, tolerance_rel=MODEL_TOLERANCE, unit="FLOP/clk/SM", remeasure=measure_all,
        method=f"2 x 64 x N x K / cycles per instruction per SM ({WG} warpgroups, one accumulator chain each; "
               "the f16 / bf16 builds over the block's span, the other types the steady interval between two chain "
               "lengths) against 2 x 64 x N x K / max(2 x 64 x N x K / peak(type), operand bytes read from shared "
               f"memory / {bw} B/clk ({SMEM_BANDWIDTH_FACT})); operand bytes: B = N x 32 (sparse: N x 64), plus "
               f"A = 2048 for ss; N = {', '.join(map(str, wd.THROUGHPUT_N))}"
               + ("" if sparse else "; f16 ss also N = 8, 16, 32 (the bandwidth term)"),
        source=f"peak per clock per SM: {wd.PEAK_SOURCE} (tf32 2048, f16 / bf16 4096, fp8 and int8 8192; "
               "sparse twice its type); the bandwidth term fits the f16 ss wgmma facts at N = 8, 16, 32 "
               "(docs/results.md) and Luo et al.'s sparse wgmma m64n256 144 cycles ss vs 128 rs "
               "(docs/published_values.md)")


@pytest.mark.fact("wgmma_dense_flop_per_clk_model")
def test_wgmma_dense_flop_rate_follows_the_model(gpuprops):
    """Dense wgmma of every type: FLOP (int: OP) per clock per SM, 2 x 64 x N x K over the measured
    cycles per instruction per SM, against the model: the type's peak (tf32 half of f16, fp8 and int8
    twice), unless shared memory cannot deliver the operands that fast (ss at N < 64)."""
    _check_model(gpuprops, "wgmma_dense_flop_per_clk_model", sparse=False)


@pytest.mark.fact("wgmma_sparse_flop_per_clk_model")
def test_wgmma_sparse_flop_rate_follows_the_model(gpuprops):
    """Sparse wgmma (2:4, FLOP of the full K): twice the dense peak of its type with A in registers;
    with A in shared memory, B's doubled K makes shared memory the limit at every N: 16 + N / 2
    cycles per instruction, not N / 2."""
    _check_model(gpuprops, "wgmma_sparse_flop_per_clk_model", sparse=True)
