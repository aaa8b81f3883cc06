"""hwtests/test_throughput_and_clocks.py recorded and checked end to end through the plugin on a
simulated GPU (test_throughput.SimGpu behind a stand-in cupy module, NVML's energy counter simulated):
every fact recorded, checked against its recording, and planted readings that cannot be (a clock
above the maximum, a rate above its ceiling at its own clock) reported as ERROR. The stresses the file
runs are logged beside its tests: one tensor stress gives the tensor clock, the bf16 rate and the
random-operand power, and the zero-operand stress runs after every other test of the file (and of the
order `pytest hwtests` collects)."""

import json
import re
import time
from types import SimpleNamespace

import pytest
from gp_testing import KERNELS, collect_hwtests
from test_throughput import SimGpu, ffma_cycles_per_trip, wgmma_cycles_per_trip

from pytest_gpuprops import ceilings, workloads
from pytest_gpuprops.facts import tomllib


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))


def l2_read_cycles_per_pass(sms: int, bytes_per_sm_cycle: float = 64.0) -> float:
    """The simulated L2 read's pass over its one-chunk window (the 2 MiB L2's quarter): every block its
    512 KiB chunk, at ``bytes_per_sm_cycle`` into every SM (half the 128 B/clk ceiling)."""
    chunk16 = workloads.L2_CHUNK_BYTES // workloads.VEC_BYTES
    grid = workloads.l2_read_grid(chunk16, sms, 2048)
    return workloads.l2_read_bytes(chunk16, grid, 1) / (sms * bytes_per_sm_cycle)


class SimCupy(SimGpu):
    """What measure.Runner and the hwtests file use of the cupy module, on a simulated GPU: 132 SMs at
    1755 MHz, a 2 MiB L2 and 64 MiB free (so the DRAM buffers are 16 MiB of host memory), every kernel
    of the loaded cubins simulated: the FFMA and wgmma stresses at EFFICIENCY of the SMs' peak FLOP per
    clock, the L2 read at 64 B/clk a SM, a DRAM stream kernel's loop trip in 400 us. ``PLANTED`` (kernel -> {"efficiency", "mhz"}) gives a
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
                  "stress_wgmma": lambda: wgmma_cycles_per_trip(self.sms, efficiency),
                  "stream_read_cg": lambda: l2_read_cycles_per_pass(self.sms)}.get(name, lambda: None)()
        # the L2 read's launches: a tenth of the stresses' real millisecond each (the DRAM stream kernels write
        # no stamps and take no real time: a trip of 400 us makes 5 launches of a repeat's 2 ms, not 100)
        real_s = 0.0001 if name.startswith("stream_") else None
        return self.kernel(*self.ARGS[name], cycles_per_scale=cycles, mhz=plant.get("mhz"), real_s=real_s)

    def __init__(self):
        super().__init__(132, 1755.0, 400_000.0, real_s_per_launch=0.001)
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
            getDeviceProperties = staticmethod(lambda i: {"maxThreadsPerMultiProcessor": 2048, "l2CacheSize": 2 * 2**20})
            memGetInfo = staticmethod(lambda: (64 * 2**20, 80 * 2**30))

        self.cuda.Device, self.cuda.runtime = Device, runtime
        self.RawModule = lambda path: SimpleNamespace(get_function=sim.sim_kernel)

    @staticmethod
    def get_default_memory_pool():
        return SimpleNamespace(free_all_blocks=lambda: None)


#: what the simulated run did, in order: ("stress", workload kind) at each stress_clock call, ("test",
#: name) as each test's call starts; the conftest below appends, a test reads and clears it
EVENTS: list[tuple[str, str]] = []
#: the simulated GPU's power under each stress (W): the random-operand stress at an H100 SXM's 700 W
#: limit, the zero-operand one under it
SIM_WATTS = {"wgmma_bf16": 700.0, "wgmma_bf16_zero": 310.0, "ffma": 500.0}


def sim_energy_reader(info):
    """NVML's (total energy mJ, power mW) stand-in: the energy of SIM_WATTS[the kind of the stress last
    started], summed over real time, read in whole mJ (it moves at each read of a busy simulated GPU)."""
    state = {"t": time.monotonic(), "mj": 1_000_000.0}

    def read():
        kind = next((k for e, k in reversed(EVENTS) if e == "stress"), "ffma")
        t = time.monotonic()
        state["mj"] += SIM_WATTS[kind] * (t - state["t"]) * 1e3
        state["t"] = t
        return int(state["mj"]), round(SIM_WATTS[kind] * 1e3)
    return read


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

def pytest_runtest_call(item):
    test_throughput_facts_simulated.EVENTS.append(("test", item.name))

@pytest.fixture(autouse=True, scope="module")
def _short(request):  # module scope: before the module's tensor stress fixture runs
    mp = pytest.MonkeyPatch()
    mp.setattr(request.module, "STRESS_S", 0.04)
    # the clock's windows are in simulated seconds (launches of 50 ms, each 1 ms of real time), the power's in
    # real ones (the simulated energy counter read every 2 ms, not NVML's 10): 5 windows of 0.05 s after 0.05 s
    # hold ~25 energy samples each (a sampler thread held off by a busy host still leaves two or more in each);
    # seven such stresses run
    mp.setattr(request.module, "TENSOR_STRESS_S", 0.3)
    mp.setattr(request.module, "TENSOR_SUSTAINED_FROM_S", 0.05)
    mp.setattr(request.module.gp_power, "nvml_energy_reader", test_throughput_facts_simulated.sim_energy_reader)
    energy_stress = request.module.gp_power.energy_stress
    mp.setattr(request.module.gp_power, "energy_stress", lambda *a, **kw: energy_stress(*a, **{"period_s": 0.002, **kw}))
    mp.setattr(request.module, "TENSOR_PREHEAT_S", 0.0)
    mp.setattr(request.module, "FFMA_PREHEAT_S", 0.02)  # the preheat's loop runs; its length is the GPU's
    mp.setattr(request.module, "L2_READ_PREHEAT_S", 0.02)
    mp.setattr(request.module, "TENSOR_LAUNCHES", 5)  # each simulated launch sleeps 1 ms
    stress = request.module.tp.stress_clock  # a simulated GPU has no idle clock to wait 0.25 s for
    def logged(cp, wl, **kw):
        test_throughput_facts_simulated.EVENTS.append(("stress", wl.kind))
        return stress(cp, wl, **{"idle_s": 0.01, **kw})
    mp.setattr(request.module.tp, "stress_clock", logged)
    yield
    mp.undo()
'''


POWER_FACTS = ["wgmma_bf16_random_operand_power_w", "sustained_sm_clock_tensor_zero_operand_mhz",
               "wgmma_bf16_zero_operand_power_w"]
#: the tests that read the tensor stress (pseudo-random operands), and those of the zero-operand stress
TENSOR_TESTS = ["test_sustained_sm_clock_under_tensor_load", "test_wgmma_bf16_dense_tflops_under_the_tensor_stress",
                "test_wgmma_dense_tflops[e4m3]", "test_tensor_stress_power_with_random_operands"]
ZERO_TESTS = ["test_sustained_sm_clock_with_zero_operands", "test_tensor_stress_power_with_zero_operands"]
#: the -k that selects the zero-operand facts alone (by their names: pytest_gpuprops.plugin adds them as keywords)
ZERO_SELECTION = "sustained_sm_clock_tensor_zero_operand_mhz or wgmma_bf16_zero_operand_power"


def simulated_run(pytester, kernel_cache):
    """The hwtests file and the simulated GPU's conftest in ``pytester``; the command line's common part.
    The packaged facts file goes without the H100's time-unit and power facts: recorded afresh, method
    and all (a fact the facts file has keeps its reviewed method in a recording)."""
    pytester.makeconftest(SIM_CONFTEST)
    pytester.makepyfile(test_tp=(KERNELS.parent / "hwtests" / "test_throughput_and_clocks.py").read_text())
    packaged = (KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text()
    blocks = re.split(r"(?m)^(?=\[)", packaged)
    recorded_here = re.compile(r'^\[gpus\."NVIDIA H100 80GB HBM3"\.(\w+_(mhz|tflops|gbps)|' + "|".join(POWER_FACTS) + r")\]")
    (pytester.path / "sm_90.toml").write_text("".join(b for b in blocks if not recorded_here.match(b)))
    EVENTS.clear()
    return ["-p", "no:randomly", "-p", "no:cacheprovider", "--gpuprops-kernels", str(KERNELS),
            "--gpuprops-facts", str(pytester.path / "sm_90.toml"), "--gpuprops-cache", str(kernel_cache)]


def test_the_validation_facts_record_and_check_on_a_simulated_gpu(pytester, kernel_cache, monkeypatch):
    common = simulated_run(pytester, kernel_cache)
    # the GPU's temperature, reading by reading (then 45 degrees C on): the FFMA stress's start and end, the tensor
    # stress's, the zero-operand stress's cool-down (at most 3 above the tensor stress's start: 48), its start and end.
    # Only the stresses' own reader is patched: the cool-down reads through it, not NVML on its own
    from pytest_gpuprops import throughput
    temperatures = iter([45, 47, 45, 50, 48, 48, 51])
    monkeypatch.setattr(throughput, "gpu_temperature_c", lambda info: next(temperatures, 45))
    r = pytester.runpytest_inprocess(*common, "--gpuprops-record", "rec.toml", "--gpuprops-report", "rec.json")
    r.assert_outcomes(passed=12)
    facts = tomllib.loads((pytester.path / "rec.toml").read_text())["gpus"]["NVIDIA H100 80GB HBM3"]
    assert sorted(facts) == sorted(["sustained_sm_clock_ffma_mhz", "sustained_sm_clock_tensor_mhz", "ffma_fp32_tflops",
                                    "wgmma_bf16_dense_tflops", "wgmma_e4m3_dense_tflops", "dram_read_gbps",
                                    "dram_write_gbps", "dram_copy_gbps", "l2_read_gbps", *POWER_FACTS])
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
    assert facts["dram_copy_gbps"]["value"] == pytest.approx(2 * 16 * 2**20 / 400e-6 / 1e9, abs=1e-3)
    assert "two 16 MiB buffers" in facts["dram_copy_gbps"]["method"]
    assert facts["dram_write_gbps"]["value"] == pytest.approx(16 * 2**20 / 400e-6 / 1e9, abs=1e-3)
    # the L2 read over 15 repeats after untimed ones: a high state of under ~0.7 s stays out of their median,
    # the one after idle out of the timed repeats
    assert "median of 15 repeats" in facts["l2_read_gbps"]["method"]
    assert facts["l2_read_gbps"]["method"].count("after 0.02 s of untimed repeats, per repeat") == 1
    # the powers: the simulated counter's 700 W under the tensor stress and 310 W under the zero-operand one
    assert facts["wgmma_bf16_random_operand_power_w"]["value"] == pytest.approx(700.0, rel=0.02)
    assert facts["wgmma_bf16_zero_operand_power_w"]["value"] == pytest.approx(310.0, rel=0.02)
    for name in ("sustained_sm_clock_tensor_mhz", "wgmma_bf16_dense_tflops", "wgmma_bf16_random_operand_power_w"):
        assert "gives sustained_sm_clock_tensor_mhz, wgmma_bf16_dense_tflops and wgmma_bf16_random_operand_power_w " \
               "from the same launches; the zero-operand stress runs after it" in facts[name]["method"], name
    for name in POWER_FACTS[1:]:
        assert "the zero-operand stress runs after the tensor stress and after every other fact" in facts[name]["method"]
    # one tensor stress: the random-operand power reads the windows of the clock fact's own stress (the
    # same window clocks), and no other stress ran on pseudo-random tiles
    stresses = [k for e, k in EVENTS if e == "stress"]
    assert stresses == ["ffma", "wgmma_bf16", "wgmma_bf16_zero"]
    measured = {v["fact"]: v["measurement"] for v in json.loads((pytester.path / "rec.json").read_text())["facts"]}
    clock, random_power = measured["sustained_sm_clock_tensor_mhz"], measured["wgmma_bf16_random_operand_power_w"]
    # (launch_s: the stress's real time over its launch count, a float no other stress repeats)
    same_stress = ("kind", "launches", "launch_s", "scale")
    assert random_power["launch"]["window_clock_mhz"] == pytest.approx(clock["values"], abs=0.05)
    assert [random_power["launch"][k] for k in same_stress] == [clock["launch"][k] for k in same_stress]
    assert [measured["wgmma_bf16_dense_tflops"]["launch"][k] for k in same_stress] == [clock["launch"][k] for k in same_stress]
    assert clock["launch"]["kind"] == "wgmma_bf16"
    zero, zero_clock = measured["wgmma_bf16_zero_operand_power_w"], measured["sustained_sm_clock_tensor_zero_operand_mhz"]
    assert zero["launch"]["window_clock_mhz"] == pytest.approx(zero_clock["values"], abs=0.05)
    assert [zero["launch"][k] for k in same_stress] == [zero_clock["launch"][k] for k in same_stress]
    assert zero["launch"]["kind"] == "wgmma_bf16_zero" and zero["launch"]["launch_s"] != clock["launch"]["launch_s"]
    # the zero-operand stress started from the tensor stress's thermal state: 3 degrees C above its 45 at most
    assert clock["launch"]["temperature_c"] == [45, 50] and "settled_start" not in clock["launch"]
    assert zero_clock["launch"]["settled_start"] == dict(at_most_c=48, waited_s=0.0, temperature_c=48, reached=True)
    assert zero_clock["launch"]["temperature_c"] == [48, 51]
    assert "cooled to 3 degrees C above the tensor stress's start temperature" in facts[POWER_FACTS[2]]["method"]
    # the zero-operand stress after every test of the tensor stress and every other test of the file
    order = [k if e == "test" else f"stress {k}" for e, k in EVENTS]
    at = order.index("stress wgmma_bf16_zero")
    assert order.index("stress wgmma_bf16") < order.index(TENSOR_TESTS[0]) and set(TENSOR_TESTS) <= set(order[:at])
    assert order[at + 1:] == ZERO_TESTS and len([o for o in order[:at] if not o.startswith("stress ")]) == 10
    EVENTS.clear()
    r = pytester.runpytest_inprocess(*common, "--gpuprops-facts", "rec.toml")
    r.assert_outcomes(passed=12)
    # planted: the FFMA kernel reads 2011 MHz, two clock steps over the 1980 MHz maximum (one, 1995, is real), and
    # the wgmma does 102 % of 4096 FLOP per SM per clock at its own clock: each reading that cannot be is
    # ERROR, flagged, and its test fails, whatever its band says; the rest pass as before
    # (the zero-operand stress's two facts, which plant nothing, are left out: they passed above)
    monkeypatch.setattr(SimCupy, "PLANTED", {"stress_ffma": {"mhz": 2011.0}, "stress_wgmma": {"efficiency": 1.02}})
    r = pytester.runpytest_inprocess(*common, "--gpuprops-facts", "rec.toml", "--gpuprops-report", "planted.json",
                                     "-k", f"not ({ZERO_SELECTION})")
    r.assert_outcomes(passed=6, failed=4, deselected=2)
    verdicts = {v["fact"]: v for v in json.loads((pytester.path / "planted.json").read_text())["facts"]}
    flagged = {name: (v["status"], v["flags"][0].split(": ")[1]) for name, v in verdicts.items() if v["status"] != "PASS"}
    assert flagged == {"sustained_sm_clock_ffma_mhz": ("ERROR", "a clock above the GPU's maximum"),
                       "ffma_fp32_tflops": ("ERROR", "a clock above the GPU's maximum"),
                       "wgmma_bf16_dense_tflops": ("ERROR", "the rate and its clock disagree"),
                       "wgmma_e4m3_dense_tflops": ("ERROR", "the rate and its clock disagree")}
    assert "102.00 % of" in verdicts["wgmma_bf16_dense_tflops"]["flags"][0]
    assert "2011.0 MHz, over the 1980 MHz NVML reports" in verdicts["sustained_sm_clock_ffma_mhz"]["flags"][0]
    assert "gave a physically impossible reading" in r.stdout.str()


def test_a_selection_of_the_zero_operand_facts_runs_the_tensor_stress_first(pytester, kernel_cache):
    """-k of the zero-operand facts alone: the zero-operand stress asks for the tensor stress, so the
    random one still runs first (once)."""
    common = simulated_run(pytester, kernel_cache)
    r = pytester.runpytest_inprocess(*common, "--gpuprops-record", "rec.toml", "-k", ZERO_SELECTION)
    r.assert_outcomes(passed=2)
    assert EVENTS == [("stress", "wgmma_bf16"), ("stress", "wgmma_bf16_zero"), *(("test", t) for t in ZERO_TESTS)]
    EVENTS.clear()


def test_pytest_collects_every_tensor_stress_fact_before_the_zero_operand_stress(pytester, monkeypatch):
    """The order `pytest hwtests --collect-only` gives (the order tests run in, on each GPU): every
    test of a tensor-stress fact, and every other test of test_throughput_and_clocks.py, before the
    first test that uses the zero-operand stress; those are the file's last."""
    hwtests = KERNELS.parent / "hwtests"
    ret, ids, tail = collect_hwtests(pytester, monkeypatch)
    assert ret == 0 and ids, tail
    file_ids = [i.split("::", 1)[1] for i in ids if i.startswith("hwtests/test_throughput_and_clocks.py::")]
    assert file_ids[-len(ZERO_TESTS):] == ZERO_TESTS and set(TENSOR_TESTS) <= set(file_ids[:-len(ZERO_TESTS)])
    first_zero = ids.index(f"hwtests/test_throughput_and_clocks.py::{ZERO_TESTS[0]}")
    # the files that run a whole-GPU load (a stress or a rate on every SM): every test of theirs but the
    # zero-operand ones is collected before it
    loads = re.compile(r"\b(stress_clock|energy_stress|stress_rate|measure_rate|measure_placed_rate)\(")
    load_files = {f"hwtests/{f.name}" for f in hwtests.glob("test_*.py") if loads.search(f.read_text())}
    assert "hwtests/test_throughput_and_clocks.py" in load_files
    after = [i for i in ids[first_zero:] if i.split("::")[0] in load_files]
    assert after == [f"hwtests/test_throughput_and_clocks.py::{t}" for t in ZERO_TESTS], after
