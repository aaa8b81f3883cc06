"""The measure layer (measure.py) without a GPU: the per-launch value from clock pairs, the
noise, the stop rule and what a Measurement reports (every expected number worked out by hand in the
comment beside it); and the CPU side of the ncu path: ncu's CSV as it prints it read back into
per-launch values, and a spec's arguments encoded for the launcher (with a stand-in CuPy module)."""

import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from gp_testing import child_processes_outside_mutmut

from pytest_gpuprops import measure
from pytest_gpuprops.measure import (
    KernelSpec,
    Measurement,
    NcuUnavailable,
    StopRule,
    launch_value,
    lowest_tier,
    relative_noise,
    stop_reason,
)

# ----------------------------------------------------------------------------------------------
# launch_value

# three warps; stop - start = 200, 220, 240 cycles; 20 cycles of clock-read overhead; 10 per item
PAIRS = [(100, 300), (110, 330), (120, 360)]


def test_warp_mode_is_the_median_of_per_warp_values():
    value, per_warp = launch_value(PAIRS, 20.0, 10.0, "warp")
    assert per_warp == [18.0, 20.0, 22.0]  # (200-20)/10, (220-20)/10, (240-20)/10
    assert value == 20.0


def test_warp_mode_median_of_an_even_count_is_the_mean_of_the_middle_two():
    value, per_warp = launch_value([(0, 100), (0, 140), (0, 400), (0, 60)], 0.0, 2.0, "warp")
    assert per_warp == [50.0, 70.0, 200.0, 30.0]
    assert value == 60.0  # (50 + 70) / 2, neither median_low nor median_high


def test_span_mode_runs_from_the_first_start_to_the_last_stop():
    # the earliest start (100) is not the first warp's, the latest stop (420) not the last warp's
    pairs = [(130, 300), (100, 420), (120, 360)]
    value, per_warp = launch_value(pairs, 20.0, 10.0, "span")
    assert value == 30.0  # (420 - 100 - 20) / 10
    assert per_warp == [15.0, 30.0, 22.0]  # (170-20)/10, (320-20)/10, (240-20)/10


def test_values_are_floats_and_the_overhead_is_subtracted_before_dividing():
    value, per_warp = launch_value([(0, 10)], 0.5, 4.0, "warp")
    assert value == 2.375 and isinstance(value, float)  # (10 - 0.5) / 4
    value, _ = launch_value([(7, 17)], 0.5, 4.0, "span")
    assert value == 2.375


def test_a_single_warp_gives_the_same_value_in_both_modes():
    assert launch_value([(1000, 1480)], 30.0, 3.0, "warp")[0] == 150.0
    assert launch_value([(1000, 1480)], 30.0, 3.0, "span")[0] == 150.0


def test_lowest_tier_is_the_values_within_8_percent_of_the_smallest():
    assert lowest_tier([270.0, 305.0, 451.0, 268.0, 283.0, 312.0, 290.0]) == [270.0, 268.0, 283.0]  # to 289.44
    assert lowest_tier([300.0, 310.0, 323.0, 325.0]) == [300.0, 310.0, 323.0]  # 324 is the edge
    assert lowest_tier([]) == []



    with pytest.raises(ValueError, match="no clock pairs"):
        launch_value([], 0.0, 1.0, "warp")
    with pytest.raises(ValueError, match="'warp', 'span'.*'mean'"):
        launch_value(PAIRS, 0.0, 1.0, "mean")


# ----------------------------------------------------------------------------------------------
# relative_noise


@pytest.mark.parametrize("values, noise", [
    ([], 0.0),
    ([5.0], 0.0),
    ([1.0, 2.0, 3.0], 0.5),            # mean 2, sample std-dev 1
    ([-1.0, -2.0, -3.0], 0.5),         # relative to |mean|
    ([1.0, 3.0], math.sqrt(2) / 2),    # sample (n-1) std-dev sqrt(2), not the population's 1
    ([9.0, 11.0, 9.0, 11.0, 10.0], 0.1),  # sum of squares 4 over n-1 = 4: std-dev 1, mean 10
    ([7.0, 7.0, 7.0], 0.0),
])
def test_relative_noise_by_hand(values, noise):
    assert relative_noise(values) == pytest.approx(noise, abs=1e-15)


def test_relative_noise_of_values_around_zero_is_infinite():
    assert relative_noise([1.0, -1.0]) == math.inf


# ----------------------------------------------------------------------------------------------
# stop_reason

RULE = StopRule(noise_target=0.01, min_samples=5, max_samples=8, time_budget_s=2.0)
FLAT = [100.0] * 8
NOISY = [90.0, 110.0] * 4  # noise ~0.107, far over 1 %


def test_the_default_rule():
    assert StopRule() == StopRule(noise_target=0.01, min_samples=5, max_samples=100, time_budget_s=2.0)


def test_below_the_minimum_count_it_goes_on_however_settled_or_late():
    for n in range(1, 5):
        assert stop_reason(FLAT[:n], RULE, 0.0) is None
        assert stop_reason(FLAT[:n], RULE, 1000.0) is None


def test_converged_at_the_minimum_count():
    assert stop_reason(FLAT[:5], RULE, 0.0) == "converged"


def test_noise_exactly_at_the_target_converges():
    values = [9.0, 11.0, 9.0, 11.0, 10.0]  # noise 0.1 exactly (see above)
    assert stop_reason(values, StopRule(0.1, 5, 8, 2.0), 0.0) == "converged"
    assert stop_reason(values, StopRule(0.0999, 5, 8, 2.0), 0.0) is None


def test_time_budget_only_once_it_is_exceeded():
    assert stop_reason(NOISY[:5], RULE, 1.0) is None
    assert stop_reason(NOISY[:5], RULE, 2.0) is None  # spent, not exceeded
    assert stop_reason(NOISY[:5], RULE, 2.001) == "time budget"


def test_sample_cap_at_the_maximum_count():
    assert stop_reason(NOISY[:7], RULE, 0.0) is None
    assert stop_reason(NOISY[:8], RULE, 0.0) == "sample cap"
    assert stop_reason(NOISY + [90.0], RULE, 0.0) == "sample cap"


def test_converged_wins_over_the_budget_and_the_budget_over_the_cap():
    assert stop_reason(FLAT, RULE, 100.0) == "converged"
    assert stop_reason(NOISY, RULE, 100.0) == "time budget"


def test_a_cap_below_the_minimum_still_stops():
    rule = StopRule(noise_target=0.01, min_samples=5, max_samples=3, time_budget_s=2.0)
    assert stop_reason(FLAT[:2], rule, 0.0) is None
    assert stop_reason(FLAT[:3], rule, 0.0) == "sample cap"  # settled, but under the minimum count


def _loop(launches, rule):
    """What Runner.measure does with its launches, here with hand-made clock pairs."""
    values, reason = [], None
    for pairs in launches:
        values.append(launch_value(pairs, 0.0, 10.0, "warp")[0])
        reason = stop_reason(values, rule, 0.0)
        if reason:
            break
    return values, reason


def test_a_measurement_loop_that_converges():
    # 1000/10, median(1000, 1020)/10 = 101, 100: mean 100.33, std-dev 0.577, noise 0.58 % <= 5 %
    launches = [[(0, 1000)], [(0, 1000), (0, 1020)], [(0, 1000)], [(0, 5000)]]
    assert _loop(launches, StopRule(0.05, 3, 6, 1.0)) == ([100.0, 101.0, 100.0], "converged")


def test_a_measurement_loop_that_hits_the_cap():
    # 100.5, 120, then 100s: the 120 keeps the noise over 5 % (7.7 % with six values) until the cap
    launches = [[(0, 1000), (0, 1010)], [(0, 1200)]] + [[(0, 1000)]] * 6
    values, reason = _loop(launches, StopRule(0.05, 3, 6, 1.0))
    assert values == [100.5, 120.0, 100.0, 100.0, 100.0, 100.0] and reason == "sample cap"


# ----------------------------------------------------------------------------------------------
# Measurement


def _m(values, **kw):
    return Measurement.given("x", values, **kw)


def test_measurement_statistics():
    m = _m([3.0, 1.0, 2.0, 10.0])
    assert (m.n, m.median, m.min, m.max) == (4, 2.5, 1.0, 10.0)
    assert m.noise == pytest.approx(relative_noise([3.0, 1.0, 2.0, 10.0]))


def test_settled_is_noise_at_or_under_the_target():
    values = [9.0, 11.0, 9.0, 11.0, 10.0]
    assert _m(values, noise_target=0.1).settled
    assert not _m(values, noise_target=0.0999).settled
    assert _m([5.0], noise_target=0.0).settled


def test_given_defaults():
    m = Measurement.given("lds", [1.0])
    assert (m.name, m.unit, m.stop_reason, m.noise_target, m.overhead_cycles) == ("lds", "cycles", "converged", 0.01, 0.0)
    assert (m.sm_clock_mhz, m.throttle, m.kernel, m.launch, m.per_warp) == (None, [], "(given)", {}, [])
    assert Measurement.given("bw", [1.0], unit="B/clk", stop_reason="sample cap").unit == "B/clk"


def test_as_dict_carries_the_statistics_and_copies_the_lists():
    m = _m([9.0, 11.0, 9.0, 11.0, 10.0], per_warp=[1.0, 2.0], launch={"grid": 1}, throttle=["hw_slowdown"])
    m.remeasure = lambda: m
    d = m.as_dict()
    assert "remeasure" not in d
    assert (d["median"], d["min"], d["max"], d["n"]) == (10.0, 9.0, 11.0, 5)
    assert d["noise"] == pytest.approx(0.1)
    assert d["values"] == m.values and d["values"] is not m.values
    assert d["per_warp"] == [1.0, 2.0] and d["per_warp"] is not m.per_warp
    assert d["launch"] == {"grid": 1} and d["launch"] is not m.launch
    assert d["throttle"] == ["hw_slowdown"] and d["name"] == "x" and d["stop_reason"] == "converged"


# ----------------------------------------------------------------------------------------------
# small helpers around the GPU


def test_kernel_spec_label_and_defaults():
    s = measure.KernelSpec("ffma.cu", "ffma", {"ILP": 2}, grid=3, block=64)
    assert s.label() == "ffma from ffma.cu {'ILP': 2} grid=3 block=64"
    d = measure.KernelSpec("a.cu", "a")
    assert (d.defines, d.grid, d.block, d.args, d.patch, d.region, d.region_other) == ({}, 1, 32, None, None, None, 0)


def test_driver_version_numbers():
    assert measure._ver(13000) == "13.0"
    assert measure._ver(12040) == "12.4"
    assert measure._ver(11080) == "11.8"


def test_gpu_info_as_dict():
    info = measure.GpuInfo(1, "G", "sm_90", 132, "580.1", "13.0", "13.1", "0000:01:00.0", 1980)
    assert info.as_dict() == {"index": 1, "name": "G", "arch": "sm_90", "sm_count": 132, "driver_version": "580.1",
                              "cuda_driver_version": "13.0", "cuda_runtime_version": "13.1",
                              "pci_bus_id": "0000:01:00.0", "max_sm_clock_mhz": 1980, "uuid": "", "host": "",
                              "vbios_version": ""}
    node = measure.GpuInfo(2, "G", "sm_90", 132, "580.1", "13.0", "13.1", "0000:02:00.0", None, "GPU-abc", "node1")
    assert node.as_dict()["uuid"] == "GPU-abc" and node.as_dict()["host"] == "node1"
    # what a verdict carries to say which GPU measured it
    assert node.identity() == {"index": 2, "name": "G", "uuid": "GPU-abc", "pci_bus_id": "0000:02:00.0",
                               "host": "node1", "driver_version": "580.1", "cuda_driver_version": "13.0",
                               "cuda_runtime_version": "13.1", "vbios_version": "", "max_sm_clock_mhz": None}


def _fake_cupy(monkeypatch, count, cc="90"):
    """A stand-in CuPy that sees ``count`` GPUs, each of compute capability ``cc`` (as CuPy spells it)."""
    rt = types.SimpleNamespace()
    if isinstance(count, Exception):
        def get():
            raise count
        rt.getDeviceCount = get
    else:
        rt.getDeviceCount = lambda: count
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=rt, Device=lambda index: types.SimpleNamespace(compute_capability=cc))
    monkeypatch.setitem(sys.modules, "cupy", fake)


def test_gpu_unavailable_reasons(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    r = measure.gpu_unavailable_reason()
    assert r.startswith("CuPy is not importable (ModuleNotFoundError") and r.endswith("install pytest-gpuprops[cuda13] or [cuda12]")
    _fake_cupy(monkeypatch, RuntimeError("cudaErrorNoDevice\nsecond line"))
    assert measure.gpu_unavailable_reason() == "no CUDA driver or GPU (RuntimeError: cudaErrorNoDevice)"
    _fake_cupy(monkeypatch, RuntimeError(""))
    assert measure.gpu_unavailable_reason() == "no CUDA driver or GPU (RuntimeError: )"
    _fake_cupy(monkeypatch, 0)
    assert measure.gpu_unavailable_reason() == "no CUDA GPU visible"
    _fake_cupy(monkeypatch, 2)
    assert measure.gpu_unavailable_reason(2) == "--gpu 2 asked for but only 2 GPU(s) are visible"
    assert measure.gpu_unavailable_reason(1) is None
    assert measure.gpu_unavailable_reason() is None
    # a GPU nothing can be compiled for here: every fact would skip with this
    _fake_cupy(monkeypatch, 1, cc="70")
    assert measure.gpu_unavailable_reason() == (
        "GPU 0 is sm_70, which cannot be compiled for here: arch 'sm_70' is older than sm_75: nvdisasm 13 (pip "
        "package nvidia-cuda-nvdisasm) refuses sm_70 and older, so its SASS cannot be read or verified. Use sm_75 or "
        "newer (tested: sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a).")


def test_gpu_lock_is_a_file_lock_per_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    lock = measure.gpu_lock(3, timeout=7.0)
    assert lock.lock_file == str(tmp_path / "gpuprops-gpu3.lock") and lock.timeout == 7.0
    assert measure.gpu_lock(0).timeout == 600.0
    with lock:
        assert (tmp_path / "gpuprops-gpu3.lock").exists()


def test_ncu_is_found_from_the_environment_or_reported_missing(monkeypatch):
    monkeypatch.setenv("GPUPROPS_NCU", "/opt/x/ncu")
    assert measure.find_ncu() == "/opt/x/ncu" and measure.ncu_unavailable_reason() is None
    monkeypatch.delenv("GPUPROPS_NCU")
    monkeypatch.setenv("PATH", "/nonexistent")
    import glob
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    assert measure.find_ncu() is None
    assert "Nsight Compute (ncu) is not on PATH" in measure.ncu_unavailable_reason()
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/usr/local/cuda-12/bin/ncu", "/usr/local/cuda-13/bin/ncu"]
                        if pattern.startswith("/usr/local") else [])
    assert measure.find_ncu() == "/usr/local/cuda-13/bin/ncu"  # the newest


def test_measurement_summary():
    m = _m([9.0, 11.0, 9.0, 11.0, 10.0], stop_reason="time budget", unit="B/clk")
    assert m.summary() == "10.000 B/clk (min 9.000, max 11.000, noise 10.00%, n=5, time budget)"


def test_build_for_timing_applies_the_specs_own_edits(build):
    from pytest_gpuprops import sass
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    spec = measure.KernelSpec("regbank_ffma.cu", "regbank_ffma",
                              patch=lambda c, k: sass.ffma_operand_edits(c.instructions(k), 8, 10, 16, 0b001))
    data, ins = measure.build_for_timing(cubin, spec)
    start, region, stop = sass.timed_region(ins)
    ffma = [i for i in region if i.base_opcode == "FFMA"]
    assert len(ffma) == 8 and all(i.operands[1:] == ["R8.reuse", "R10", "R16"] for i in ffma)
    assert start.control.wait_mask == stop.control.wait_mask == 0x3F
    assert sass.Cubin(data, "sm_90").instructions("regbank_ffma") == ins


def test_the_default_gpu_is_index_0(monkeypatch):
    _fake_cupy(monkeypatch, 1)
    assert measure.gpu_unavailable_reason() is None
    assert measure.gpu_unavailable_reason(1) == "--gpu 1 asked for but only 1 GPU(s) are visible"


def test_exact_messages():
    with pytest.raises(ValueError, match="^no clock pairs: the launch had no warps$"):
        launch_value([], 0.0, 1.0, "warp")


def test_ncu_search_order(monkeypatch, tmp_path):
    import glob
    monkeypatch.delenv("GPUPROPS_NCU", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text("")
    (bin_dir / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert measure.find_ncu() == str(bin_dir / "ncu")
    monkeypatch.setenv("PATH", "/nonexistent")
    opt = ["/opt/nvidia/nsight-compute/2025.1/ncu", "/opt/nvidia/nsight-compute/2026.3/ncu"]
    monkeypatch.setattr(glob, "glob", lambda p: opt if p == "/opt/nvidia/nsight-compute/*/ncu" else ["/usr/x/ncu"])
    assert measure.find_ncu() == "/opt/nvidia/nsight-compute/2026.3/ncu"  # the newest Nsight Compute
    assert measure.ncu_unavailable_reason() is None
    monkeypatch.setattr(glob, "glob", lambda p: [])
    assert measure.ncu_unavailable_reason() == "Nsight Compute (ncu) is not on PATH (set GPUPROPS_NCU to its path)"


def test_gpu_lock_defaults_to_the_temp_folder(monkeypatch):
    import tempfile
    monkeypatch.delenv("GPUPROPS_LOCK_DIR", raising=False)
    assert measure.gpu_lock(0).lock_file == str(Path(tempfile.gettempdir()) / "gpuprops-gpu0.lock")


TWO_TIMED = """#include "gpuprops.cuh"
extern "C" __global__ void first(unsigned long long* c, float* o) {
    float x = o[threadIdx.x];
    unsigned long long t0 = gp_clock();
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x));
    unsigned long long t1 = gp_clock();
    o[threadIdx.x] = x;
    gp_record(c, t0, t1);
}
extern "C" __global__ void second(unsigned long long* c, float* o) {
    float x = o[threadIdx.x], y = o[threadIdx.x + 32];
    unsigned long long t0 = gp_clock();
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(x));
    asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(y));
    unsigned long long t1 = gp_clock();
    o[threadIdx.x] = x + y;
    gp_record(c, t0, t1);
}
"""


def test_timing_build_of_one_kernel_among_two(tmp_path, cache_dir):
    from gp_testing import KERNELS

    from pytest_gpuprops import sass
    from pytest_gpuprops.compile import compile_cuda
    src = tmp_path / "two_timed.cu"
    src.write_text(TWO_TIMED)
    cubin = sass.Cubin(compile_cuda(src, "sm_90", include_dirs=[KERNELS], cache_dir=cache_dir).cubin, "sm_90")
    data, ins = measure.patched_for_timing(cubin, "second", [])
    assert sass.region_opcodes(ins) == {"FFMA": 2}
    assert sass.Cubin(data, "sm_90").instructions("second") == ins
    asked = []
    spec = measure.KernelSpec("two_timed.cu", "second", region={"FFMA": 3, "HMMA.16816.F32": 1},
                              patch=lambda c, k: asked.append(k) or [])
    with pytest.raises(measure.UncleanRegion) as e:
        measure.build_for_timing(cubin, spec)
    assert asked == ["second"]
    assert str(e.value) == (f"{spec.label()} on sm_90: the timed region does not hold what the fact measures:\n"
                            "  FFMA: 2 in the region, intended 3\n  HMMA.16816.F32: 0 in the region, intended 1")


def test_region_other_allows_loop_control(build):
    from pytest_gpuprops import sass
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    ins = cubin.instructions("regbank_ffma")
    counts = sass.region_opcodes(ins)
    intended = {op: n for op, n in counts.items() if op == "FFMA" or op.startswith("LD")}  # LDC: the trip count
    others = sum(n for op, n in counts.items() if op not in intended)
    assert intended["FFMA"] == 8 and others >= 2
    spec = measure.KernelSpec("regbank_ffma.cu", "regbank_ffma", region=intended, region_other=others)
    measure.build_for_timing(cubin, spec)
    tight = measure.KernelSpec("regbank_ffma.cu", "regbank_ffma", region=intended, region_other=others - 1)
    with pytest.raises(measure.UncleanRegion, match=rf"measures:\n  {others} other instructions \(.*\); at most "
                                                    rf"{others - 1} intended$"):
        measure.build_for_timing(cubin, tight)


@pytest.mark.parametrize("raw, uuid", [
    (bytes(range(16)), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"),
    (bytes(range(17)), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"),  # CUDA's field: the first 16 bytes
    ("".join(map(chr, range(0xF0, 0x100))), "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff"),  # bytes read as a str
    (b"\x01\x02", ""), (b"", ""), (None, ""),
])
def test_cuda_uuid_bytes_are_spelled_as_nvidia_smi_spells_them(raw, uuid):
    assert measure._uuid(raw) == uuid


# ----------------------------------------------------------------------------------------------
# ncu's CSV read back, and a spec's arguments for the launcher process


PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
INST = "smsp__inst_executed.sum"
HEADER = '"ID","Process ID","Process Name","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def row(launch_id, metric, value):
    return f'"{launch_id}","4242","python3","hmma_16816","Command line profiler metrics","{metric}","","{value}"\n'


def test_rows_become_one_dict_per_launch_in_id_order():
    body = HEADER + row(1, PIPE, "49.72") + row(0, PIPE, "24.99") + row(0, INST, "1,024") + row(1, INST, "2,048") \
        + row(0, "some__other_metric", "7")
    assert measure.parse_ncu_csv(body, [PIPE, INST], 2) == [{PIPE: 24.99, INST: 1024.0}, {PIPE: 49.72, INST: 2048.0}]


def test_a_value_that_is_not_a_number_is_refused_by_name():
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(HEADER + row(0, PIPE, "n/a"), [PIPE], 1)
    assert str(e.value) == f"ncu printed 'n/a' for {PIPE}; expected a number"


@pytest.mark.parametrize("launches, expected", [(2, "ncu profiled 1 launches, expected 2"),
                                                (0, "ncu profiled 1 launches, expected 0")])
def test_the_launch_count_must_match(launches, expected):
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(HEADER + row(0, PIPE, "25"), [PIPE], launches)
    assert str(e.value) == expected


def test_rows_of_other_metrics_before_the_asked_ones_are_passed_over():
    body = HEADER + row(0, "some__other_metric", "7") + row(0, PIPE, "25") + row(1, "launch__grid_size", "1") \
        + row(1, PIPE, "50")
    assert measure.parse_ncu_csv(body, [PIPE], 2) == [{PIPE: 25.0}, {PIPE: 50.0}]


def test_every_metric_missing_for_a_launch_is_named():
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(HEADER + row(0, "some__other_metric", "7"), [PIPE, INST], 1)
    assert str(e.value) == "ncu profiled 0 launches, expected 1"
    body = HEADER + row(0, PIPE, "25") + row(1, PIPE, "50") + row(1, INST, "1") + row(1, "launch__grid_size", "1")
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(body, [PIPE, INST, "launch__grid_size"], 2)
    assert str(e.value) == f"ncu did not report {INST}, launch__grid_size for launch 0 on this GPU"


def test_a_metric_missing_for_one_launch_is_named():
    body = HEADER + row(0, PIPE, "25") + row(0, INST, "1") + row(1, PIPE, "50")
    with pytest.raises(NcuUnavailable) as e:
        measure.parse_ncu_csv(body, [PIPE, INST], 2)
    assert str(e.value) == f"ncu did not report {INST} for launch 1 on this GPU"


class _FakeArray:
    def __init__(self, values, dtype):
        self._values, self.dtype = list(values), types.SimpleNamespace(str=dtype)

    def get(self):
        values = self._values
        return types.SimpleNamespace(ravel=lambda: types.SimpleNamespace(tolist=lambda: list(values)))


class _FakeScalar:
    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


class int32(_FakeScalar):  # noqa: N801 -- the type name is what encode_args records
    pass


@pytest.fixture
def fake_cupy(monkeypatch):
    cp = types.ModuleType("cupy")
    cp.ndarray = _FakeArray
    cp.array = _FakeArray
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp


def test_arguments_are_encoded_as_values_fills_and_scalars(fake_cupy):
    spec = KernelSpec("k.cu", "k", args=lambda cp: (cp.array([1, 2, 3], "<u4"), cp.array([0.5] * 4, "<f4"),
                                                     cp.array([], "<u4"), cp.array([9], "<i8"), int32(64), 7))
    assert measure.encode_args(spec) == [
        {"array": "<u4", "values": [1, 2, 3]},
        {"array": "<f4", "fill": 0.5, "size": 4},
        {"array": "<u4", "values": []},
        {"array": "<i8", "fill": 9, "size": 1},
        {"scalar": "int32", "value": 64},
        {"scalar": "int", "value": 7},
    ]


def test_a_spec_without_arguments_encodes_to_nothing():
    assert measure.encode_args(KernelSpec("k.cu", "k")) == []


def test_without_cupy_no_gpu_is_visible(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert measure.visible_gpu_count() == 0


def test_the_visible_gpu_count_is_the_drivers(fake_cupy):
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 3))
    assert measure.visible_gpu_count() == 3


def test_a_gpu_the_compiler_cannot_build_for_is_named_by_its_own_arch(fake_cupy):
    """GPU 1 is the new one; GPU 0 (the default index) is not asked about."""
    arches = {0: "90", 1: "999"}
    fake_cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 2),
                                           Device=lambda i: types.SimpleNamespace(compute_capability=arches[i]))
    reason = measure.gpu_unavailable_reason(1)
    assert reason.startswith("GPU 1 is sm_999, which cannot be compiled for here: ")
    assert measure.gpu_unavailable_reason(0) is None


def test_an_ncu_profile_started_ahead_leaves_the_gpu_lock_to_the_profiled_process(monkeypatch, tmp_path):
    """measure.NcuJob: ncu starts in the background without the GPU's lock (the process it profiles
    takes it around its launches: pytest_gpuprops.launch), result() waits for the profile, and ncu's
    failure reaches the test that asks."""
    import threading
    from types import SimpleNamespace

    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    release = threading.Event()
    monkeypatch.setattr(measure, "_ncu_start", lambda runner, specs, metrics: ["ncu", metrics])

    def finish(cmd, metrics, launches, timeout_s):
        assert cmd == ["ncu", metrics]
        release.wait(10)
        if metrics == ["gone"]:
            raise measure.NcuUnavailable("counters gone")
        return [{"a": float(n)} for n in range(launches)]
    monkeypatch.setattr(measure, "_ncu_finish", finish)
    runner = SimpleNamespace(info=SimpleNamespace(index=3))
    specs = [measure.KernelSpec("x.cu", "k"), measure.KernelSpec("x.cu", "k2")]
    job = measure.NcuJob(runner, specs, ["a"])
    assert job.key == measure.ncu_key(specs, ["a"]) != measure.ncu_key(specs[:1], ["a"])
    with measure.gpu_lock(3, timeout=0.5):  # free while ncu starts: measurements go on beside it
        assert job._thread.is_alive()
    release.set()
    assert job.result() == [{"a": 0.0}, {"a": 1.0}]
    failing = measure.NcuJob(runner, specs, ["gone"])
    with pytest.raises(measure.NcuUnavailable, match="counters gone"):
        failing.result()


def test_the_process_ncu_profiles_is_told_the_gpus_lock_and_its_launches(monkeypatch, tmp_path):
    """measure._ncu_start names GPU ``index``'s lock file (measure.gpu_lock's) in the job it hands
    pytest_gpuprops.launch, beside one launch per spec, its cubin written where the runner keeps files."""
    from types import SimpleNamespace

    from pytest_gpuprops import launch
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "find_ncu", lambda: "/opt/ncu")
    runner = SimpleNamespace(info=SimpleNamespace(index=2), _tmp=str(tmp_path),
                             build=lambda spec: (spec.kernel.encode(), []))
    cmd = measure._ncu_start(runner, [measure.KernelSpec("x.cu", "k", grid=2, block=64),
                                      measure.KernelSpec("x.cu", "k2")], ["m1", "m2"])
    assert cmd[:8] == ["/opt/ncu", "--clock-control", "none", "--csv", "--print-units", "base", "--metrics", "m1,m2"]
    assert cmd[cmd.index("-k") + 1] == "regex:^(k|k2)$" and cmd[-2:-1] == ["pytest_gpuprops.launch"]
    lock, launches = launch.parse(cmd[-1])
    assert lock == str(tmp_path / "gpuprops-gpu2.lock") == measure.gpu_lock(2).lock_file
    assert [(L["kernel"], L["grid"], L["block"], L["device"]) for L in launches] == [("k", 2, 64, 2), ("k2", 1, 32, 2)]
    assert [Path(L["cubin"]).read_bytes() for L in launches] == [b"k", b"k2"]


def test_the_profiled_process_waits_for_the_gpus_lock(monkeypatch, tmp_path):
    """pytest_gpuprops.launch takes the lock named in its job before anything else: while this
    process holds GPU 0's lock it waits, and it ends once the lock is free."""
    child_processes_outside_mutmut(monkeypatch)
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    job = json.dumps({"lock": str(measure.gpu_lock_path(0)), "launches": []})
    with measure.gpu_lock(0):
        proc = subprocess.Popen([sys.executable, "-m", "pytest_gpuprops.launch", job], env=os.environ.copy())
        time.sleep(1.0)
        assert proc.poll() is None, "the profiled process went on while another held the GPU's lock"
    assert proc.wait(timeout=30) == 0


def test_a_launch_job_is_read_with_or_without_a_lock():
    from pytest_gpuprops import launch
    one = {"cubin": "x.cubin", "kernel": "k", "grid": 1, "block": 32}
    assert launch.parse(json.dumps({"lock": "/l", "launches": [one]})) == ("/l", [one])
    assert launch.parse(json.dumps([one, one])) == (None, [one, one])
    assert launch.parse(json.dumps(one)) == (None, [one])


def test_a_gpus_lock_is_one_object_per_file_and_timeout(monkeypatch, tmp_path):
    """The session takes the lock once per measurement: the same FileLock each time (reentrant in
    this thread), another for another folder or timeout."""
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))
    assert measure.gpu_lock(1) is measure.gpu_lock(1) is not measure.gpu_lock(1, timeout=5.0)
    with measure.gpu_lock(1), measure.gpu_lock(1):
        pass
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path / "other"))
    assert measure.gpu_lock(1).lock_file == str(tmp_path / "other" / "gpuprops-gpu1.lock")


def test_a_build_for_timing_is_made_once_per_input_and_a_refusal_every_time(monkeypatch):
    """measure.build_for_timing keeps what it made for the same bytes, kernel, edits and region; a
    different input is built again, and a region that does not hold is refused on every ask."""
    from types import SimpleNamespace
    calls = []

    def patched(cubin, kernel, edits):
        calls.append((cubin.data, kernel))
        return b"patched" + cubin.data, ["instructions"]
    monkeypatch.setattr(measure, "patched_for_timing", patched)
    monkeypatch.setattr(measure.sass, "region_mismatch", lambda instrs, region, other: ["wrong"] if region.get("X") else [])
    cubin = SimpleNamespace(data=b"cubin-1", arch="sm_90")
    spec = measure.KernelSpec("x.cu", "k", region={"FFMA": 8})
    first = measure.build_for_timing(cubin, spec)
    assert measure.build_for_timing(cubin, spec) == first == (b"patchedcubin-1", ["instructions"])
    assert len(calls) == 1
    measure.build_for_timing(SimpleNamespace(data=b"cubin-2", arch="sm_90"), spec)
    measure.build_for_timing(cubin, measure.KernelSpec("x.cu", "k", region={"FFMA": 9}))
    assert len(calls) == 3
    bad = measure.KernelSpec("x.cu", "k", region={"X": 1})
    for _ in range(2):
        with pytest.raises(measure.UncleanRegion, match="wrong"):
            measure.build_for_timing(cubin, bad)
    assert len(calls) == 5
