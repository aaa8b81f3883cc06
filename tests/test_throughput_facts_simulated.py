"""hwtests/test_throughput_and_clocks.py recorded and checked end to end through the plugin on a
simulated GPU (test_throughput.SimGpu behind a stand-in cupy module): every fact recorded, checked
against its recording, and planted readings that cannot be (a clock above the maximum, a rate above
its ceiling at its own clock) reported as ERROR."""

import json
import re
from types import SimpleNamespace

import pytest
from gp_testing import KERNELS
from test_throughput import SimGpu, ffma_cycles_per_trip, wgmma_cycles_per_trip

from pytest_gpuprops import ceilings
from pytest_gpuprops.facts import tomllib


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))


class SimCupy(SimGpu):
    """What measure.Runner and the hwtests file use of the cupy module, on a simulated GPU: 132 SMs at
    1755 MHz, a 1 MiB L2 and 64 MiB free (so the DRAM buffers are 16 MiB of host memory), every kernel
    of the loaded cubins simulated: the FFMA and wgmma stresses at EFFICIENCY of the SMs' peak FLOP per
    clock, a stream kernel's loop trip in 20 us. ``PLANTED`` (kernel -> {"efficiency", "mhz"}) gives a
    kernel another efficiency or clock: a test plants an impossible reading with it."""

    ARGS = {"stress_ffma": (3, 1), "stress_wgmma": (3, 1), "stream_read": (4, None), "stream_read_cg": (4, None),
            "stream_copy": (4, None), "stream_write": (4, None)}
    EFFICIENCY = 0.98
    PLANTED: dict = {}

    def sim_kernel(self, name: str):
        plant = self.PLANTED.get(name, {})
        efficiency = plant.get("efficiency", self.EFFICIENCY)
        # e4m3 does twice bf16's FLOPs at twice its FLOP per clock: the same cycles, whichever dtype was compiled
        cycles = {"stress_ffma": lambda: ffma_cycles_per_trip(self.sms, efficiency),
                  "stress_wgmma": lambda: wgmma_cycles_per_trip(self.sms, efficiency)}.get(name, lambda: None)()
        return self.kernel(*self.ARGS[name], cycles_per_scale=cycles, mhz=plant.get("mhz"))

    def __init__(self):
        super().__init__(132, 1755.0, 20_000.0, real_s_per_launch=0.001)
        sim = self

        class Device:
            def __init__(self, index):
                self.index = index

            def use(self):
                return self

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class runtime:
            getDeviceCount = staticmethod(lambda: 1)
            getDeviceProperties = staticmethod(lambda i: {"maxThreadsPerMultiProcessor": 2048, "l2CacheSize": 2**20})
            memGetInfo = staticmethod(lambda: (64 * 2**20, 80 * 2**30))

        self.cuda.Device, self.cuda.runtime = Device, runtime
        self.RawModule = lambda path: SimpleNamespace(get_function=sim.sim_kernel)

    @staticmethod
    def get_default_memory_pool():
        return SimpleNamespace(free_all_blocks=lambda: None)


SIM_CONFTEST = '''
import sys
import pytest
import test_throughput_facts_simulated
from pytest_gpuprops import devices

_mp = pytest.MonkeyPatch()

def pytest_configure(config):
    _mp.setitem(sys.modules, "cupy", test_throughput_facts_simulated.SimCupy())
    _mp.setattr(devices, "gpu_unavailable_reason", lambda index=0: None)
    _mp.setattr(devices, "visible_gpu_count", lambda: 1)
    _mp.setattr(devices, "gpu_info", lambda index=0: devices.GpuInfo(
        index, "NVIDIA H100 80GB HBM3", "sm_90", 132, "580.0", "13.0", "13.0", "0000:01:00.0", 1980,
        "GPU-00000000-0000-0000-0000-000000000000", "node1"))

def pytest_unconfigure(config):
    _mp.undo()

@pytest.fixture(autouse=True, scope="module")
def _short(request):  # module scope: before the module's tensor stress fixture runs
    mp = pytest.MonkeyPatch()
    mp.setattr(request.module, "STRESS_S", 0.04)
    mp.setattr(request.module, "TENSOR_STRESS_S", 0.06)
    # simulated seconds (launches of 50 ms): 5 windows after 0.25 s need 10 launches of the ~40 a busy host makes
    mp.setattr(request.module, "TENSOR_SUSTAINED_FROM_S", 0.25)
    mp.setattr(request.module, "TENSOR_PREHEAT_S", 0.0)
    mp.setattr(request.module, "TENSOR_LAUNCHES", 5)  # each simulated launch sleeps 1 ms
    stress = request.module.tp.stress_clock  # a simulated GPU has no idle clock to wait 0.25 s for
    mp.setattr(request.module.tp, "stress_clock", lambda *a, **kw: stress(*a, **{"idle_s": 0.01, **kw}))
    yield
    mp.undo()
'''


def test_the_validation_facts_record_and_check_on_a_simulated_gpu(pytester, kernel_cache, monkeypatch):
    pytester.makeconftest(SIM_CONFTEST)
    pytester.makepyfile(test_tp=(KERNELS.parent / "hwtests" / "test_throughput_and_clocks.py").read_text())
    # the packaged file without the H100's time-unit facts: recorded afresh, method and all (a fact the
    # facts file has keeps its reviewed method in a recording)
    packaged = (KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text()
    blocks = re.split(r"(?m)^(?=\[)", packaged)
    time_unit = re.compile(r'^\[gpus\."NVIDIA H100 80GB HBM3"\.\w+_(mhz|tflops|gbps)\]')
    (pytester.path / "sm_90.toml").write_text("".join(b for b in blocks if not time_unit.match(b)))
    common = ["-p", "no:randomly", "-p", "no:cacheprovider", "--gpuprops-kernels", str(KERNELS),
              "--gpuprops-facts", str(pytester.path / "sm_90.toml"), "--gpuprops-cache", str(kernel_cache)]
    r = pytester.runpytest_inprocess(*common, "--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=9)
    facts = tomllib.loads((pytester.path / "rec.toml").read_text())["gpus"]["NVIDIA H100 80GB HBM3"]
    assert sorted(facts) == sorted(["sustained_sm_clock_ffma_mhz", "sustained_sm_clock_tensor_mhz", "ffma_fp32_tflops",
                                    "wgmma_bf16_dense_tflops", "wgmma_e4m3_dense_tflops", "dram_read_gbps",
                                    "dram_write_gbps", "dram_copy_gbps", "l2_read_gbps"])
    assert facts["sustained_sm_clock_ffma_mhz"]["value"] == pytest.approx(1755.0, abs=0.01)
    assert facts["sustained_sm_clock_ffma_mhz"]["unit"] == "MHz"
    assert "of the H100 SXM5 80GB's 1980 MHz max SM clock" in facts["sustained_sm_clock_tensor_mhz"]["method"]
    # the compute kernels at 98 % of 132 SMs x their FLOP per clock at 1755 MHz, read at that clock
    at_1755 = {k: ceilings.RATES[f].ceiling("TFLOP/s", "sm_90", 132, 1755.0) for k, f in
               (("ffma", "ffma_fp32_tflops"), ("bf16", "wgmma_bf16_dense_tflops"), ("e4m3", "wgmma_e4m3_dense_tflops"))}
    assert facts["ffma_fp32_tflops"]["value"] == pytest.approx(0.98 * at_1755["ffma"], abs=1e-3)
    assert "SM clock 1755.0 MHz (clock64 / %globaltimer per block over every launch of the median-rate repeat" in \
        facts["ffma_fp32_tflops"]["method"]
    # the bf16 rate is the tensor stress's own: its windows' rates, at the clock of the median-rate window
    bf16 = facts["wgmma_bf16_dense_tflops"]
    assert bf16["value"] == pytest.approx(0.98 * at_1755["bf16"], rel=1e-6)
    assert "the load of the sustained-clock stress" in bf16["method"] and "median of the windows" in bf16["method"]
    assert "SM clock 1755.0 MHz (clock64 / %globaltimer over the median-rate window's own launches" in bf16["method"]
    assert facts["wgmma_e4m3_dense_tflops"]["value"] == pytest.approx(0.98 * at_1755["e4m3"], abs=1e-3)
    assert facts["wgmma_e4m3_dense_tflops"]["unit"] == "TFLOP/s"
    assert "of the H100 SXM5 80GB datasheet's 1978.9 TFLOP/s" in facts["wgmma_e4m3_dense_tflops"]["method"]
    assert facts["dram_copy_gbps"]["value"] == pytest.approx(2 * 16 * 2**20 / 20e-6 / 1e9, abs=1e-3)
    assert "two 16 MiB buffers" in facts["dram_copy_gbps"]["method"]
    assert facts["dram_write_gbps"]["value"] == pytest.approx(16 * 2**20 / 20e-6 / 1e9, abs=1e-3)
    r = pytester.runpytest_inprocess(*common, "--gpuprops-facts", "rec.toml")
    r.assert_outcomes(passed=9)
    # planted: the FFMA kernel reads 2011 MHz, two clock steps over the 1980 MHz maximum (one, 1995, is real), and
    # the wgmma does 102 % of 4096 FLOP per SM per clock at its own clock: each reading that cannot be is
    # ERROR, flagged, and its test fails, whatever its band says; the rest pass as before
    monkeypatch.setattr(SimCupy, "PLANTED", {"stress_ffma": {"mhz": 2011.0}, "stress_wgmma": {"efficiency": 1.02}})
    r = pytester.runpytest_inprocess(*common, "--gpuprops-facts", "rec.toml", "--gpuprops-report", "planted.json")
    r.assert_outcomes(passed=5, failed=4)
    verdicts = {v["fact"]: v for v in json.loads((pytester.path / "planted.json").read_text())["facts"]}
    flagged = {name: (v["status"], v["flags"][0].split(": ")[1]) for name, v in verdicts.items() if v["status"] != "PASS"}
    assert flagged == {"sustained_sm_clock_ffma_mhz": ("ERROR", "a clock above the GPU's maximum"),
                       "ffma_fp32_tflops": ("ERROR", "a clock above the GPU's maximum"),
                       "wgmma_bf16_dense_tflops": ("ERROR", "the rate and its clock disagree"),
                       "wgmma_e4m3_dense_tflops": ("ERROR", "the rate and its clock disagree")}
    assert "102.00 % of" in verdicts["wgmma_bf16_dense_tflops"]["flags"][0]
    assert "2011.0 MHz, over the 1980 MHz NVML reports" in verdicts["sustained_sm_clock_ffma_mhz"]["flags"][0]
    assert "gave a physically impossible reading" in r.stdout.str()
