"""Validation facts in time units, per GPU model: the SM clock the GPU sustains under a whole-GPU
load, and what all its SMs do per second (FFMA, dense bf16 and e4m3 wgmma, DRAM read and copy, L2
read). pytest_gpuprops/throughput.py measures them (its docstring has the method); the kernels are
kernels/stress_ffma.cu and kernels/stream_bandwidth.cu, and hwtests/test_static_throughput.py checks
without a GPU that their loops hold what these facts count.

They depend on the SKU (SM count, clocks, power limit, memory), not only on the arch: record mode
files them under the GPU's section. The file should take under 10 s on one GPU (two stresses of 2 s
after 0.25 s idle, six throughput measurements of 0.1 to 0.6 s each, each with a short calibration;
not yet timed on a GPU): `pytest hwtests -m validation`."""

from types import SimpleNamespace

import pytest

from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import throughput as tp
from pytest_gpuprops.compile import compile_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.validation]
WGMMA_ARCH = "sm_90a"
STRESS_S = 2.0
#: A dense tensor-core load reaches the H100 SXM's power limit, and the capped clock cycles: ~1650 MHz
#: with a dip to ~1400 MHz about once a second (H100 GPU-7ebe9dba, 2026-11-25, three runs). So the
#: tensor stress runs 10 s (its second half: 5 windows of 1 s, each a whole cycle; with 2 s, windows
#: of 0.2 s read 4.7 % apart), and the tensor rates are measured after 1 s of the load, in repeats
#: of ~1 s (50 launches of ~20 ms; repeats of 80 ms read 1.4-3.3 % apart).
TENSOR_STRESS_S = 10.0
TENSOR_PREHEAT_S = 1.0
TENSOR_LAUNCHES = 50
#: five ~1 s repeats (the usual 0.6 s budget would end it after one)
TENSOR_STOP = tp.StopRule(noise_target=0.01, min_samples=5, max_samples=8, time_budget_s=5.0)
CLOCK_FACTS = {"ffma": "sustained_sm_clock_ffma_mhz", "tensor": "sustained_sm_clock_tensor_mhz"}
RATE_FACTS = {"ffma": "ffma_fp32_tflops", "wgmma_bf16": "wgmma_bf16_dense_tflops",
              "wgmma_e4m3": "wgmma_e4m3_dense_tflops", "dram_read": "dram_read_gbps",
              "dram_copy": "dram_copy_gbps", "dram_write": "dram_write_gbps", "l2_read": "l2_read_gbps"}
gp_facts.register_gpu_scoped(*CLOCK_FACTS.values(), *RATE_FACTS.values())


@pytest.fixture(scope="module")
def device(gpu):
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(gpu.index)
    return SimpleNamespace(max_threads_per_sm=int(props["maxThreadsPerMultiProcessor"]),
                           l2_bytes=int(props["l2CacheSize"]), sheet=tp.datasheet_for(gpu.name))


class _Buffers:
    """The stream kernels' buffers, allocated on first use and freed with the module."""

    def __init__(self, cupy, index: int, l2_bytes: int):
        self.cp, self.index, self.l2_bytes = cupy, index, l2_bytes
        self._dram = self._l2 = None

    def dram(self):
        if self._dram is None:
            with self.cp.cuda.Device(self.index):
                nbytes = tp.dram_buffer_bytes(self.l2_bytes, self.cp.cuda.runtime.memGetInfo()[0])
                n = nbytes // 4
                self._dram = (nbytes, self.cp.zeros(n, dtype=self.cp.uint32), self.cp.zeros(n, dtype=self.cp.uint32))
        return self._dram

    def l2(self):
        if self._l2 is None:
            with self.cp.cuda.Device(self.index):
                nbytes = tp.l2_buffer_bytes(self.l2_bytes)
                self._l2 = (nbytes, self.cp.zeros(nbytes // 4, dtype=self.cp.uint32))
        return self._l2

    def free(self):
        self._dram = self._l2 = None
        self.cp.get_default_memory_pool().free_all_blocks()


@pytest.fixture(scope="module")
def buffers(gpu, device):
    import cupy
    b = _Buffers(cupy, gpu.index, device.l2_bytes)
    yield b
    b.free()


def load(gpuprops, source: str, kernel: str, defines: dict, arch: str | None = None):
    """The kernel compiled for the GPU's arch (or ``arch``: sm_90a for wgmma) and loaded; not patched
    (nothing here is a clock-pair region: launches are timed with CUDA events)."""
    runner = gpuprops.runner
    if arch is None:
        cubin = runner.compile(source, defines).cubin
    else:
        cubin = compile_cuda(runner.kernels_dir / source, arch, defines, cache_dir=runner.cache_dir).cubin
    return runner.load(cubin, kernel)


def ffma(gpuprops, gpu, device):
    import cupy
    fn = load(gpuprops, "stress_ffma.cu", "stress_ffma", tp.FFMA_DEFINES)
    return tp.ffma_workload(cupy, fn, sms=gpu.sm_count, max_threads_per_sm=device.max_threads_per_sm)


def wgmma(gpuprops, gpu, dtype: str):
    import cupy
    fn = load(gpuprops, "stress_ffma.cu", "stress_wgmma", tp.wgmma_defines(dtype), arch=WGMMA_ARCH)
    return tp.wgmma_workload(cupy, fn, dtype, sms=gpu.sm_count)


def on_every_sm(m, gpu) -> None:
    covered = m.launch.get("sms_covered")
    if covered != gpu.sm_count:
        pytest.fail(f"{m.kernel} ran on {covered} of the {gpu.sm_count} SMs: a whole-GPU stress must load every SM",
                    pytrace=False)


def plot_clock(gpuprops, load: str, m) -> None:
    """The clock over the stress, kernel-side bins and NVML samples, for the report's plot."""
    gpuprops.plot_point("sustained_clock", load=load, series=m.launch["series_mhz"], sustained=m.median,
                        throttle=list(m.throttle))


@pytest.mark.fact(CLOCK_FACTS["ffma"])
def test_sustained_sm_clock_under_ffma(gpuprops, gpu, device):
    """FFMA chains on every SM, every thread slot filled, for 2 s."""
    import cupy
    name = gpuprops.fact_name
    m = tp.stress_clock(cupy, ffma(gpuprops, gpu, device), name=name, info=gpu, duration_s=STRESS_S)
    on_every_sm(m, gpu)
    plot_clock(gpuprops, "FFMA", m)
    gpuprops.check(name, m, method=tp.clock_method(m, device.sheet))


@pytest.mark.arch("sm_90")
@pytest.mark.fact(CLOCK_FACTS["tensor"])
def test_sustained_sm_clock_under_tensor_load(gpuprops, gpu, device):
    """Dense bf16 wgmma m64n256k16 chains, two warpgroups on every SM, for 2 s."""
    import cupy
    name = gpuprops.fact_name
    m = tp.stress_clock(cupy, wgmma(gpuprops, gpu, "bf16"), name=name, info=gpu, duration_s=TENSOR_STRESS_S)
    on_every_sm(m, gpu)
    plot_clock(gpuprops, "bf16 wgmma", m)
    gpuprops.check(name, m, method=tp.clock_method(m, device.sheet))


@pytest.mark.fact(RATE_FACTS["ffma"])
def test_ffma_tflops(gpuprops, gpu, device):
    import cupy
    name = gpuprops.fact_name
    m = tp.measure_rate(cupy, ffma(gpuprops, gpu, device), name=name, info=gpu)
    gpuprops.check(name, m, method=tp.rate_method(m, gpu.arch, gpu.sm_count, device.sheet))


@pytest.mark.arch("sm_90")
@pytest.mark.fact(lambda dtype: RATE_FACTS[f"wgmma_{dtype}"])
@pytest.mark.parametrize("dtype", list(tp.WGMMA_DTYPES))
def test_wgmma_dense_tflops(gpuprops, gpu, device, dtype):
    import cupy
    name = gpuprops.fact_name
    m = tp.measure_rate(cupy, wgmma(gpuprops, gpu, dtype), name=name, info=gpu, target_launch_s=0.02,
                        launches=TENSOR_LAUNCHES, preheat_s=TENSOR_PREHEAT_S, stop=TENSOR_STOP)
    gpuprops.check(name, m, method=tp.rate_method(m, gpu.arch, gpu.sm_count, device.sheet))


@pytest.mark.fact(lambda kind: RATE_FACTS[kind])
@pytest.mark.parametrize("kind", ["dram_read", "dram_write", "dram_copy", "l2_read"])
def test_memory_bandwidth(gpuprops, gpu, device, buffers, kind):
    import cupy
    name = gpuprops.fact_name
    fn = load(gpuprops, "stream_bandwidth.cu", tp.STREAM_KERNELS[kind], tp.STREAM_DEFINES)
    if kind == "l2_read":
        nbytes, src = buffers.l2()
        dst = None
    else:
        nbytes, src, dst = buffers.dram()
    wl = tp.stream_workload(cupy, fn, kind, sms=gpu.sm_count, max_threads_per_sm=device.max_threads_per_sm,
                            nbytes=nbytes, src=src, dst=dst)
    m = tp.measure_rate(cupy, wl, name=name, info=gpu, target_launch_s=0.002, launches=8)
    gpuprops.check(name, m, method=tp.rate_method(m, gpu.arch, gpu.sm_count, device.sheet))
