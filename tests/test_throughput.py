"""pytest_gpuprops.throughput without a GPU: the arithmetic of what one launch does, the SM clock from
kernel stamps, clock series and their summary, the datasheet table and the method text, with given
numbers; the NVML sampler with a given reader; and the launch loops (measure_rate, stress_clock) on a
simulated GPU whose clock, speed and SMs are given, so every number they return is known."""

import re
import time
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from gp_testing import KERNELS

from pytest_gpuprops import measure, sass
from pytest_gpuprops import throughput as tp
from pytest_gpuprops.facts import tomllib
from pytest_gpuprops.measure import Measurement

# ----------------------------------------------------------------------------------------------
# datasheets


def test_datasheet_lookup_by_cuda_name_case_and_spacing_aside():
    assert tp.datasheet_for("NVIDIA H100 80GB HBM3").sku == "H100 SXM5 80GB"
    assert tp.datasheet_for("nvidia  h200").dram_gbps == 4800.0
    assert tp.datasheet_for("NVIDIA H100 PCIe").sms == 114
    assert tp.datasheet_for("NVIDIA GeForce RTX 4090") is None


def test_h100_and_h200_share_compute_and_differ_in_memory():
    h100, h200 = tp.datasheet_for("NVIDIA H100 80GB HBM3"), tp.datasheet_for("NVIDIA H200")
    assert (h100.bf16_dense_tflops, h100.fp8_dense_tflops, h100.fp32_tflops) == (989.4, 1978.9, 67.0)
    assert (h200.bf16_dense_tflops, h200.fp8_dense_tflops, h200.fp32_tflops) == (989.4, 1978.9, 67.0)
    assert (h100.dram_gbps, h200.dram_gbps) == (3350.0, 4800.0)
    assert all(d.source for d in tp.DATASHEETS.values())


@pytest.mark.parametrize("peak, rate, mhz", [
    (989.4, 4096, 1830.0),   # H100 SXM5 dense bf16: 132 SMs x 4096 FLOP/cycle at 1830 MHz
    (1978.9, 8192, 1830.0),  # dense e4m3
    (67.0, 256, 1982.8),     # FP32: 132 x 128 FFMA lanes x 2 at ~1980 MHz
])
def test_implied_clock_of_the_h100_sxm_datasheet(peak, rate, mhz):
    assert tp.implied_clock_mhz(peak, 132, rate) == pytest.approx(mhz, abs=0.1)


def test_clock_peak_is_sms_times_rate_times_clock():
    assert tp.clock_peak_tflops(132, 4096, 1755) == pytest.approx(948.88, abs=0.01)
    assert tp.clock_peak_tflops(132, 256, 1980) == pytest.approx(66.91, abs=0.01)


# ----------------------------------------------------------------------------------------------
# what one launch does


def test_ffma_flops_per_launch():
    # 528 blocks of 512 threads, 8 samples x 100 trips of 64 x 8 FFMAs, 2 FLOPs each
    assert tp.ffma_flops(528, 512, 8, 100, 64, 8) == 2 * 528 * 512 * 8 * 100 * 512 == 221_459_251_200


def test_wgmma_flops_per_launch():
    # 132 SMs x 2 warpgroups x 8 x 10 x 16 instructions of m64n256k16 (524 288 FLOPs each)
    assert tp.wgmma_flops(132, 2, 8, 10, 16, 256, 16) == 132 * 2 * 8 * 10 * 16 * 524_288 == 177_167_400_960
    assert tp.wgmma_flops(1, 1, 1, 1, 1, 256, 32) == 2 * tp.wgmma_flops(1, 1, 1, 1, 1, 256, 16)


@pytest.mark.parametrize("kind, expected", [("dram_read", 48_000), ("l2_read", 48_000), ("dram_copy", 96_000),
                                            ("dram_write", 48_000)])
def test_stream_bytes_count_reads_and_for_a_copy_writes(kind, expected):
    assert tp.stream_bytes(kind, 1000, 3) == expected


def test_stream_bytes_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="dram_read"):
        tp.stream_bytes("smem_read", 1, 1)


def test_buffer_sizes():
    l2 = 50 * 2**20
    assert tp.dram_buffer_bytes(l2, 80 * 2**30) == 2**30  # 8 x L2 = 400 MiB < 1 GiB
    assert tp.dram_buffer_bytes(200 * 2**20, 80 * 2**30) == 1600 * 2**20  # 8 x L2 > 1 GiB
    assert tp.dram_buffer_bytes(l2, 2 * 2**30 + 7) == 2**29 + 0  # a quarter of free memory, whole vectors
    assert tp.dram_buffer_bytes(l2, 2**30) % 16 == 0
    with pytest.raises(ValueError, match="4 x the"):
        tp.dram_buffer_bytes(l2, 4 * l2)
    assert tp.l2_buffer_bytes(52_428_800) == 13_107_200
    assert tp.l2_buffer_bytes(1000) == 240


MiB = 2**20


def _pages(start: int, nbytes: int, page: int = tp.PAGE_BYTES) -> set[int]:
    return set(range(start // page, (start + nbytes - 1) // page + 1))


def test_l2_placements_put_each_window_on_pages_of_its_own():
    h100 = tp.l2_placements(50 * MiB)  # the H100's 50 MiB L2: 12.5 MiB windows, 14 MiB apart
    assert (h100.window_bytes, h100.stride_bytes, h100.count) == (12.5 * MiB, 14 * MiB, tp.L2_PLACEMENTS)
    assert h100.region_bytes == (tp.L2_PLACEMENTS - 1) * 14 * MiB + 12.5 * MiB + 2 * MiB  # 896.5 MiB
    h200 = tp.l2_placements(60 * MiB)  # 15 MiB windows: one page of room between them
    assert (h200.window_bytes, h200.stride_bytes) == (15 * MiB, 16 * MiB)
    # an allocation that does not start on a page: the first window starts at the next page boundary
    base = 7 * tp.PAGE_BYTES + 4096
    offsets = h100.offsets(base)
    assert offsets[0] == tp.PAGE_BYTES - 4096 and (base + offsets[0]) % tp.PAGE_BYTES == 0
    assert [b - a for a, b in zip(offsets, offsets[1:])] == [14 * MiB] * (tp.L2_PLACEMENTS - 1)
    assert offsets[-1] + h100.window_bytes <= h100.region_bytes  # every window inside the allocation
    seen: set[int] = set()
    for off in offsets:  # no page holds lines of two windows
        pages = _pages(base + off, h100.window_bytes)
        assert len(pages) == 7 and not pages & seen
        seen |= pages
    assert h100.offsets(0)[0] == 0 and h100.offsets(tp.PAGE_BYTES)[0] == 0


def test_l2_placements_fit_a_quarter_of_free_memory():
    # 16 MiB of windows 12.5 MiB + 14 MiB apart and a page of room: a quarter of 256 MiB holds 4 of them
    assert tp.l2_placements(50 * MiB, free_bytes=256 * MiB).count == 4
    assert tp.l2_placements(50 * MiB, free_bytes=256 * MiB).region_bytes <= 64 * MiB
    assert tp.l2_placements(50 * MiB, free_bytes=80 * 2**30).count == tp.L2_PLACEMENTS
    assert tp.l2_placements(50 * MiB, free_bytes=1 * MiB).count == 1  # always one window, as before
    small = tp.l2_placements(3 * MiB, count=8)  # an RTX 3060's 3 MiB L2: 0.75 MiB windows, a page each
    assert (small.window_bytes, small.stride_bytes, small.region_bytes) == (0.75 * MiB, 2 * MiB, 16.75 * MiB)
    with pytest.raises(ValueError, match="no quarter"):
        tp.l2_placements(32)


def test_a_placed_rate_is_the_mean_of_its_windows_and_the_summary_their_spread():
    assert tp.placement_value([7000.0, 7200.0, 7400.0, 7800.0]) == pytest.approx(7350.0)
    with pytest.raises(ValueError):
        tp.placement_value([])
    # three repeats of four windows: each window steady to 0.1 %, the windows 4.3 % apart
    rates = [[7300.0, 7000.0, 7150.0, 7200.0],
             [7310.0, 7007.0, 7150.0, 7190.0],
             [7305.0, 7001.0, 7143.0, 7205.0]]
    s = tp.placement_summary(rates)
    assert s["per_window"] == [7305.0, 7001.0, 7150.0, 7200.0]  # each window's median over the repeats
    assert s["mean"] == pytest.approx(7164.0)
    assert (s["lowest"], s["highest"]) == (7001.0, 7305.0)
    assert s["spread"] == pytest.approx(304.0 / 7164.0)
    assert s["noise"] == pytest.approx(np.std([7305.0, 7001.0, 7150.0, 7200.0], ddof=1) / 7164.0)
    # the repeats' values: one mean each, and these are what the stop rule and the median see
    assert [tp.placement_value(r) for r in rates] == pytest.approx([7162.5, 7164.25, 7163.5])
    with pytest.raises(ValueError, match="all 4 windows"):
        tp.placement_summary([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0]])
    with pytest.raises(ValueError):
        tp.placement_summary([])


def test_one_unlucky_placement_moves_the_mean_by_its_share_only():
    # what the 64 windows are for: one buffer that reads 6 % low moves a single-buffer fact by 6 %, and
    # the mean of 64 windows by 6 % / 64
    lucky = [7400.0] * tp.L2_PLACEMENTS
    unlucky = [7400.0 * 0.94] + [7400.0] * (tp.L2_PLACEMENTS - 1)
    moved = tp.placement_value(unlucky) / tp.placement_value(lucky) - 1
    assert moved == pytest.approx(-0.06 / tp.L2_PLACEMENTS)
    assert abs(moved) < 0.001


@pytest.mark.parametrize("threads, block, n", [(2048, 512, 4), (1536, 512, 3), (1536, 256, 6), (1024, 2048, 1)])
def test_blocks_per_sm(threads, block, n):
    assert tp.blocks_per_sm(threads, block) == n


def test_per_second_units():
    assert tp.per_second(1e12, 0.5, "TFLOP/s") == 2.0
    assert tp.per_second(3.35e9, 1.0, "GB/s") == pytest.approx(3.35)
    with pytest.raises(ValueError):
        tp.per_second(1.0, 0.0, "GB/s")


def test_scale_for_a_target_launch_length():
    assert tp.scale_for(100, 0.001, 0.005) == 500
    assert tp.scale_for(3, 0.004, 0.005) == 4  # rounded
    assert tp.scale_for(1, 10.0, 0.005) == 1  # never below one trip
    assert tp.scale_for(2**30, 1e-9, 1.0) == tp.MAX_SCALE  # an int32 argument
    with pytest.raises(ValueError):
        tp.scale_for(1, 0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# the clock from stamps


STAMPS = [  # two blocks, three (clock64, globaltimer) stamps each
    [(1000, 10_000), (1_981_000, 1_010_000), (3_961_000, 2_010_000)],  # 1980 MHz, then 1980 MHz
    [(0, 20_000), (1_500_000, 1_020_000), (1_500_000, 1_020_000)],     # 1500 MHz, then no time passed
]


def test_block_intervals_leave_out_intervals_without_elapsed_time():
    assert tp.block_intervals(STAMPS) == [(10_000, 1_010_000, 1_980_000), (1_010_000, 2_010_000, 1_980_000),
                                          (20_000, 1_020_000, 1_500_000)]


def test_stamps_out_of_order_are_an_error():
    with pytest.raises(ValueError, match="block 0: stamp 1"):
        tp.block_intervals([[(5, 100), (4, 200)]])
    with pytest.raises(ValueError, match="before stamp"):
        tp.block_intervals([[(5, 100), (6, 99)]])


def test_clock_mhz_is_all_cycles_over_all_nanoseconds():
    assert tp.clock_mhz(tp.block_intervals(STAMPS)) == pytest.approx((2 * 1_980_000 + 1_500_000) / 3_000_000 * 1e3)
    assert tp.clock_mhz([(0, 1_000_000, 1_755_000)]) == pytest.approx(1755.0)
    with pytest.raises(ValueError, match="unknown"):
        tp.clock_mhz([])


def test_clock_series_bins_intervals_by_their_midpoint():
    intervals = [(0, 4_000_000, 4_000_000),             # mid 2 ms -> bin 0, 1000 MHz
                 (4_000_000, 8_000_000, 6_000_000),     # mid 6 ms -> bin 0, 1500 MHz
                 (10_000_000, 14_000_000, 8_000_000),   # mid 12 ms -> bin 1, 2000 MHz
                 (30_000_000, 31_000_000, 1_900_000)]   # mid 30.5 ms -> bin 3, 1900 MHz
    series = tp.clock_series(intervals, t0_ns=0, bin_ns=10_000_000)
    assert series == [(0.005, pytest.approx(1250.0)), (0.015, pytest.approx(2000.0)), (0.035, pytest.approx(1900.0))]
    assert tp.clock_series(intervals, t0_ns=-5_000_000, bin_ns=10_000_000)[0] == (0.005, pytest.approx(1000.0))
    with pytest.raises(ValueError):
        tp.clock_series(intervals, t0_ns=0, bin_ns=0)


def test_second_half_and_window_means():
    series = [(t / 10, 1000 + t) for t in range(11)]  # 0 .. 1 s
    assert [t for t, _ in tp.second_half(series)] == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert tp.second_half([]) == []
    assert tp.window_means([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 5) == [1.5, 3.5, 5.5, 7.5, 9.5]
    assert tp.window_means([3, 1], 5) == [3.0, 1.0]
    assert tp.window_means([], 5) == []
    assert tp.window_means([5, 1, 9, 7, 3, 8, 3], 2) == [5.5, pytest.approx(14 / 3)]  # [5, 1, 9, 7], [3, 8, 3]
    # a plateau with a dip: the mean counts the dip's time, a median would not
    assert tp.window_means([1650, 1650, 1650, 1400, 1400], 1) == [1550.0]


def test_the_sustained_clock_from_a_given_time_on():
    # 0-6 s: 1000 MHz for the first second (the cap settling), then 1600 MHz
    series = [(t / 100, 1000.0 if t < 100 else 1600.0) for t in range(601)]
    assert tp.summarize_clock(series, from_s=1.0).windows_mhz == [1600.0] * 5
    assert tp.summarize_clock(series).sustained_mhz == 1600.0  # the second half, 3-6 s
    assert tp.summarize_clock(series, from_s=0.0).windows_mhz[0] < 1600.0  # the first window takes in the settling
    with pytest.raises(ValueError, match="before its sustained part"):
        tp.summarize_clock(series, from_s=7.0)


def test_ramp_time_is_the_first_point_at_95_percent():
    series = [(0.005, 1000.0), (0.015, 1500.0), (0.025, 1880.0), (0.035, 1890.0), (0.045, 1700.0)]
    assert tp.ramp_time_s(series, 1980.0) == 0.035  # 0.95 x 1980 = 1881
    assert tp.ramp_time_s(series, 1980.0, frac=0.75) == 0.015
    assert tp.ramp_time_s(series, 3000.0) is None


def test_summarize_clock_ramp_then_a_dip_under_load():
    # 0.2 s: 1000 MHz ramping over the first 30 ms, then 1980 with one 1800 dip at 150 ms
    series = [(t / 1000, 1000.0 + 980 * min(1.0, t / 30)) for t in range(5, 200, 10)]
    series = [(t, 1800.0 if abs(t - 0.155) < 1e-9 else mhz) for t, mhz in series]
    s = tp.summarize_clock(series)
    assert s.sustained_mhz == 1980.0
    assert s.ramp_s == 0.035  # the first bin at >= 1881 MHz (25 ms: 1816.7, 35 ms: 1980)
    assert s.min_mhz == 1800.0  # the dip, after the ramp
    assert s.start_mhz == pytest.approx(1000 + 980 * 5 / 30)
    assert len(s.windows_mhz) == 5 and s.points == 20
    assert s.as_dict()["ramp_s"] == 0.035


def test_summarize_clock_that_never_ramps_takes_its_minimum_from_the_second_half():
    s = tp.summarize_clock([(0.0, 100.0), (1.0, 1000.0), (2.0, 900.0), (3.0, 1100.0)])
    assert s.sustained_mhz == 1000.0 and s.ramp_s == 1.0 and s.min_mhz == 900.0
    with pytest.raises(ValueError):
        tp.summarize_clock([])


# ----------------------------------------------------------------------------------------------
# the NVML sampler


def test_clock_sampler_reads_in_a_thread_and_counts_time_from_the_mark():
    reads = iter([([], 345), (["sw_power_cap"], 1755), (["sw_power_cap", "hw_slowdown"], 1650)] + [([], 1980)] * 10_000)
    with tp.ClockSampler(lambda: next(reads), period_s=0.002) as s:
        time.sleep(0.03)
        t0 = s.mark()
        time.sleep(0.03)
    assert len(s.samples) >= 5
    assert s.reasons() == ["hw_slowdown", "sw_power_cap"]
    assert s.reasons(0.0) == []  # the throttled samples came before the mark
    assert [m for _, m in s.series()][:3] == [345.0, 1755.0, 1650.0]
    late = s.series(0.0)
    assert late and all(t >= 0 and m == 1980.0 for t, m in late)
    assert s.t0 == t0


def test_clock_sampler_survives_a_reader_that_fails():
    def broken():
        raise RuntimeError("NVML gone")
    with tp.ClockSampler(broken, period_s=0.001) as s:
        time.sleep(0.01)
    assert s.samples == [] and s.series() == [] and s.reasons() == []


def test_clock_sampler_keeps_samples_without_a_clock_for_their_reasons():
    with tp.ClockSampler(lambda: (["sw_thermal_slowdown"], None), period_s=0.001) as s:
        time.sleep(0.005)
    assert s.series() == [] and s.reasons() == ["sw_thermal_slowdown"]


# ----------------------------------------------------------------------------------------------
# SASS loops


def _ins(offset: int, text: str) -> sass.Instruction:
    return sass.Instruction(offset, text, 0, 0)


def test_innermost_loop_holding_an_opcode():
    instrs = [_ins(0x00, "MOV R1, RZ"), _ins(0x10, "FFMA R2, R2, R3, R4"), _ins(0x20, "IADD3 R5, R5, 0x1, RZ"),
              _ins(0x30, "FFMA R2, R2, R3, R4"), _ins(0x40, "@!P0 BRA 0x30"), _ins(0x50, "@!P1 BRA 0x10"),
              _ins(0x60, "LDG.E.128 R8, desc[UR4][R2.64]"), _ins(0x70, "BRA 0x80"), _ins(0x80, "EXIT"),
              _ins(0x90, "BRA 0x90")]
    assert [i.offset for i in tp.innermost_loop(instrs, "FFMA")] == [0x30, 0x40]
    assert [i.offset for i in tp.innermost_loop(instrs, "IADD3")] == [0x10, 0x20, 0x30, 0x40, 0x50]
    assert tp.innermost_loop(instrs, "LDG") == []  # forward branches and a self-loop are no loop around it
    assert tp.opcode_counts(instrs[:5] + [_ins(0xa0, "NOP")]) == {"MOV": 1, "FFMA": 2, "IADD3": 1, "BRA": 1}


# ----------------------------------------------------------------------------------------------
# method text


H100 = tp.datasheet_for("NVIDIA H100 80GB HBM3")


def test_fraction_text_against_the_datasheet_and_the_clock_it_ran_at():
    text = tp.fraction_text("wgmma_bf16", 494.7, "sm_90", 132, 1830.0, H100)
    assert text == ("0.500 of the H100 SXM5 80GB datasheet's 989.4 TFLOP/s (which implies 1830 MHz); 0.500 of 132 "
                    "SMs x 4096 FLOP/cycle at the 1830 MHz it ran at (989.4 TFLOP/s)")
    assert tp.fraction_text("dram_read", 3015.0, "sm_90", 132, 1980.0, H100) == \
        "0.900 of the H100 SXM5 80GB datasheet's 3350 GB/s"
    assert tp.fraction_text("l2_read", 9000.0, "sm_90", 132, 1980.0, H100) == ""  # no datasheet L2 figure
    assert tp.fraction_text("ffma", 12.0, "sm_86", 28, 1800.0, None) == (
        "no datasheet tabulated for this GPU (throughput.DATASHEETS); 0.930 of 28 SMs x 256 FLOP/cycle at the 1800 "
        "MHz it ran at (12.9 TFLOP/s)")
    assert tp.fraction_text("ffma", 12.0, "sm_75", 40, 1800.0, None) == \
        "no datasheet tabulated for this GPU (throughput.DATASHEETS)"


def _rate(kind: str, value: float, **launch) -> Measurement:
    base = {"kind": kind, "kernel": "stress_wgmma", "source": "stress_ffma.cu", "defines": {}, "grid": 132,
            "block": 256, "launches": 4, "launch_s": 0.0051, "nvml_mhz": 1755.0}
    base.update(launch)
    return Measurement.given("x", [value] * 5, unit="TFLOP/s", sm_clock_mhz=1755.0, launch=base)


def test_rate_method_states_shape_timing_clock_and_fractions():
    text = tp.rate_method(_rate("wgmma_bf16", 900.0), "sm_90", 132, H100)
    for part in ("stress_wgmma (stress_ffma.cu) on every SM: grid 132 x 256 threads",
                 "wgmma m64n256k16 bf16", "launches of ~5.1 ms, 4 back to back", "median of 5 repeats",
                 "SM clock 1755.0 MHz", "NVML 1755.0 MHz", "0.910 of the H100 SXM5 80GB datasheet's 989.4 TFLOP/s",
                 "0.948 of 132 SMs x 4096 FLOP/cycle at the 1755 MHz"):
        assert part in text, (part, text)
    mem = tp.rate_method(_rate("dram_copy", 3000.0, buffer_bytes=2**30, kernel="stream_copy"), "sm_90", 132, H100)
    assert "two 1024 MiB buffers; bytes read + written" in mem and "0.896 of the H100" in mem


def test_clock_method_states_the_stress_and_both_clocks():
    launch = {"kernel": "stress_ffma", "source": "stress_ffma.cu", "kind": "ffma", "sms_covered": 132, "grid": 528,
              "block": 512, "launch_s": 0.05, "duration_s": 2.0, "idle_s": 0.25, "samples": 9, "bin_s": 0.01,
              "period_s": 0.05, "idle_mhz": 345.0,
              "kernel_clock": {"min_mhz": 1965.0, "ramp_s": 0.015},
              "nvml_clock": {"sustained_mhz": 1980.0, "min_mhz": 1980.0, "ramp_s": 0.05}}
    m = Measurement.given("c", [1980.0] * 5, unit="MHz", throttle=["sw_power_cap"], launch=launch)
    text = tp.clock_method(m, H100)
    for part in ("stress_ffma (stress_ffma.cu, ffma) on all 132 SMs, grid 528 x 512", "two deep for 2 s after 0.25 s idle",
                 "(1980 MHz; min 1965, ramp to 95 % 0.015 s)", "NVML every 50 ms: sustained 1980.0 MHz",
                 "idle 345.0 MHz", "throttle reasons: sw_power_cap", "1.000 of the H100 SXM5 80GB's 1980 MHz"):
        assert part in text, (part, text)
    launch["kernel_clock"]["ramp_s"] = None
    assert "ramp to 95 % never" in tp.clock_method(m, None)


# ----------------------------------------------------------------------------------------------
# workloads, and the launch loops on a simulated GPU


class _Array:
    def __init__(self, a):
        self.a = a

    def get(self):
        return self.a.copy()

    @property
    def nbytes(self):
        return self.a.nbytes

    def __getitem__(self, i):
        return _Array(self.a[i])  # a view, as CuPy's


class _Event:
    def __init__(self, gpu):
        self.gpu, self.t, self.done = gpu, None, True

    def record(self):
        self.t = self.gpu.now_ns


class SimGpu:
    """Kernels that finish at once in real time and write the stamps a GPU at a given clock would:
    ``ns_per_scale`` nanoseconds per loop trip, the clock ramping from ``idle_mhz`` to ``mhz`` over
    ``ramp_ns`` after each idle spell (100 ms of real time without a launch)."""

    def __init__(self, sms: int, mhz: float, ns_per_scale: float, *, idle_mhz: float = 1000.0, ramp_ns: float = 0.0,
                 real_s_per_launch: float = 0.0):
        self.sms, self.mhz, self.ns_per_scale, self.idle_mhz, self.ramp_ns = sms, mhz, ns_per_scale, idle_mhz, ramp_ns
        self.real_s_per_launch = real_s_per_launch
        self.now_ns, self.cycles, self.ramp_from, self.last_real, self.launches = 1_000_000_000, 0.0, 0, -1e9, 0
        self.int32, self.float32, self.uint32, self.uint64 = np.int32, np.float32, np.uint32, np.uint64
        gpu = self

        class cuda:
            @staticmethod
            def Event():
                return _Event(gpu)

            @staticmethod
            def get_elapsed_time(a, b):
                return (b.t - a.t) / 1e6

        self.cuda = cuda

    def zeros(self, n, dtype):
        return _Array(np.zeros(n, dtype=dtype))

    def clock_at(self, t_ns: float) -> float:
        if self.ramp_ns <= 0:
            return self.mhz
        return self.idle_mhz + (self.mhz - self.idle_mhz) * min(1.0, (t_ns - self.ramp_from) / self.ramp_ns)

    def kernel(self, scale_arg: int, smids_arg: int | None):
        def run(grid, block, args):
            if time.monotonic() - self.last_real > 0.1:
                self.ramp_from = self.now_ns  # woke from idle: the clock ramps again
            self.last_real = time.monotonic()
            stamps = args[0].a.reshape(grid[0], -1, 2)
            dur = int(args[scale_arg]) * self.ns_per_scale
            n = stamps.shape[1]
            t = [self.now_ns + dur * k / (n - 1) for k in range(n)]
            c = [self.cycles]
            for k in range(1, n):
                c.append(c[-1] + self.clock_at(t[k - 1]) * (t[k] - t[k - 1]) / 1e3)
            stamps[:, :, 0] = np.array(c, dtype=np.uint64)
            stamps[:, :, 1] = np.array(t, dtype=np.uint64)
            if smids_arg is not None:
                args[smids_arg].a[:] = np.arange(grid[0]) % self.sms
            self.now_ns, self.cycles, self.launches = t[-1], c[-1], self.launches + 1
            if self.real_s_per_launch:
                time.sleep(self.real_s_per_launch)
        return run


INFO = measure.GpuInfo(0, "NVIDIA H100 80GB HBM3", "sm_90", 4, "580.0", "13.0", "13.0", "0000:00:00.0", 1980)


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(tmp_path))


def test_workloads_launch_what_they_count():
    wl = tp.ffma_workload(np, None, sms=132, max_threads_per_sm=2048)
    assert (wl.grid, wl.block, wl.stamps_per_block, wl.unit) == (528, 512, 9, "TFLOP/s")
    assert wl.work(100) == tp.ffma_flops(528, 512, 8, 100, 64, 8)
    args = wl.args("stamps", 7)
    assert args[0] == "stamps" and args[3] == 7 and args[3].dtype == np.int32 and (args[4], args[5]) == (-1.0, 0.5)
    w = tp.wgmma_workload(np, None, "e4m3", sms=132)
    assert (w.grid, w.block, w.defines["WGMMA_DTYPE"], w.work(1)) == (132, 256, 1, tp.wgmma_flops(132, 2, 8, 1, 16, 256, 32))
    c = tp.stream_workload(np, None, "dram_copy", sms=132, max_threads_per_sm=2048, nbytes=16 * 1000 + 5)
    assert (c.grid, c.block, c.stamps_per_block, c.work(2), c.describe()["buffer_bytes"]) == (1056, 256, 2, 64_000, 16_000)
    src, dst = np.zeros(4), np.ones(4)
    r = tp.stream_workload(np, None, "l2_read", sms=2, max_threads_per_sm=1024, nbytes=64, src=src)
    assert r.kernel == "stream_read_cg" and r.args("st", 3)[1] is src and r.args("st", 3)[3] == 4
    assert tp.stream_workload(np, None, "dram_copy", sms=2, max_threads_per_sm=1024, nbytes=64, src=src,
                              dst=dst).args("st", 1)[2] is dst


def test_measure_rate_on_a_simulated_gpu():
    # 4 SMs; a trip of the FFMA loop takes 10 us everywhere: FLOPs per trip / 10 us
    wl_probe = tp.ffma_workload(np, None, sms=4, max_threads_per_sm=2048)
    gpu = SimGpu(4, 1755.0, 10_000.0)
    wl = tp.ffma_workload(gpu, gpu.kernel(3, 1), sms=4, max_threads_per_sm=2048)
    m = tp.measure_rate(gpu, wl, name="ffma_fp32_tflops", info=INFO, read=lambda: (["sw_power_cap"], 1755),
                        period_s=0.001)
    expected = wl_probe.work(1) / 10e-6 / 1e12
    assert m.median == pytest.approx(expected) and m.unit == "TFLOP/s"
    assert (m.stop_reason, m.n) == ("converged", 5)
    assert m.sm_clock_mhz == pytest.approx(1755.0)
    assert m.throttle == ["sw_power_cap"]
    ln = m.launch
    assert ln["scale"] == 500 and ln["launches"] == 4 and ln["launch_s"] == pytest.approx(0.005)  # 5 ms of 10 us trips
    assert ln["work_per_launch"] == wl.work(500) and ln["nvml_mhz"] == 1755.0
    again = m.remeasure()
    assert again.median == pytest.approx(expected) and again.name == "ffma_fp32_tflops"


def test_measure_rate_of_a_stream_kernel_counts_bytes():
    gpu = SimGpu(2, 1980.0, 1_000.0)  # one pass over the buffer: 1 us
    wl = tp.stream_workload(gpu, gpu.kernel(4, None), "dram_copy", sms=2, max_threads_per_sm=1024, nbytes=1_600_000)
    m = tp.measure_rate(gpu, wl, name="dram_copy_gbps", info=INFO, target_launch_s=0.002, launches=8,
                        read=lambda: ([], None), period_s=0.001)
    assert m.median == pytest.approx(2 * 1_600_000 / 1e-6 / 1e9)  # read + written per microsecond
    assert m.unit == "GB/s" and m.launch["scale"] == 2000 and m.launch["nvml_mhz"] is None
    assert m.sm_clock_mhz == pytest.approx(1980.0)


def test_l2_placement_workloads_read_each_window_into_one_sink():
    layout = tp.l2_placements(4 * MiB, count=3)  # 1 MiB windows, 2 MiB apart
    region = _Array(np.zeros(layout.region_bytes // 4, dtype=np.uint32))
    wls = tp.l2_placement_workloads(np, None, layout, region, sms=2, max_threads_per_sm=1024)
    assert len(wls) == 3 and {wl.kernel for wl in wls} == {"stream_read_cg"}
    srcs = [wl.args("st", 5)[1].a for wl in wls]
    base = region.a.__array_interface__["data"][0]
    assert [a.__array_interface__["data"][0] - base for a in srcs] == [0, 2 * MiB, 4 * MiB]  # views, not copies
    assert all(a.nbytes == MiB for a in srcs)
    assert len({id(wl.args("st", 5)[2]) for wl in wls}) == 1  # one sink for all
    assert [wl.work(5) for wl in wls] == [5 * MiB] * 3 and wls[0].args("st", 5)[3] == MiB // 16
    d = wls[1].describe()
    assert (d["buffer_bytes"], d["window_offset"], d["placements"], d["stride_bytes"], d["region_bytes"]) == \
        (MiB, 2 * MiB, 3, 2 * MiB, layout.region_bytes)
    # a device allocation off a page boundary: the windows start on the next one
    odd = SimpleNamespace(nbytes=layout.region_bytes, data=SimpleNamespace(ptr=tp.PAGE_BYTES - 256))
    assert tp.device_ptr(odd) == tp.PAGE_BYTES - 256 and tp.device_ptr(region) == 0
    with pytest.raises(ValueError, match="the windows need"):
        tp.l2_placement_workloads(np, None, layout, _Array(np.zeros(16, dtype=np.uint32)), sms=2, max_threads_per_sm=1024)


class PlacedSim(SimGpu):
    """The simulated GPU with a read that takes ``slow[k]`` times as long in window k of ``region``."""

    def __init__(self, region_of, slow: Sequence[float], stride: int, **kw):
        super().__init__(2, 1980.0, 1_000.0, **kw)  # one read of a window: 1 us at speed 1
        self.region_of, self.slow, self.stride = region_of, list(slow), stride
        self.reads = []  # (window, scale) of every launch

    def kernel(self, scale_arg: int, smids_arg: int | None):
        base = super().kernel(scale_arg, smids_arg)

        def run(grid, block, args):
            at = args[1].a.__array_interface__["data"][0] - self.region_of().a.__array_interface__["data"][0]
            k = at // self.stride
            self.reads.append((k, int(args[scale_arg])))
            ns, self.ns_per_scale = self.ns_per_scale, self.ns_per_scale * self.slow[k]
            try:
                base(grid, block, args)
            finally:
                self.ns_per_scale = ns
        return run


def test_measure_placed_rate_on_a_simulated_gpu_is_the_mean_of_the_windows():
    layout = tp.l2_placements(4 * MiB, count=4)  # 1 MiB windows
    slow = [1.0, 1.02, 0.98, 1.05]  # window k reads 1 MiB in slow[k] us
    gpu = PlacedSim(lambda: region, slow, layout.stride_bytes)
    region = gpu.zeros(layout.region_bytes // 4, dtype=np.uint32)
    wls = tp.l2_placement_workloads(gpu, gpu.kernel(4, None), layout, region, sms=2, max_threads_per_sm=1024)
    m = tp.measure_placed_rate(gpu, wls, name="l2_read_gbps", info=INFO, target_launch_s=0.001, launches=1,
                               read=lambda: ([], 1980), period_s=0.001)
    window_gbps = [MiB / (f * 1e-6) / 1e9 for f in slow]
    assert m.unit == "GB/s" and (m.stop_reason, m.n) == ("converged", 5)
    assert m.median == pytest.approx(sum(window_gbps) / 4)  # the mean of the windows' rates
    assert m.values == pytest.approx([sum(window_gbps) / 4] * 5) and m.sm_clock_mhz == pytest.approx(1980.0)
    ln = m.launch
    assert ln["placements"] == 4 and ln["window_offsets"] == [0, 2 * MiB, 4 * MiB, 6 * MiB]
    assert ln["placement_rates"] == pytest.approx(window_gbps, abs=0.05)
    assert ln["placement_lowest"] == pytest.approx(min(window_gbps), abs=0.05)
    assert ln["placement_highest"] == pytest.approx(max(window_gbps), abs=0.05)
    assert ln["placement_spread"] == pytest.approx((max(window_gbps) - min(window_gbps)) / (sum(window_gbps) / 4),
                                                   abs=1e-5)
    assert ln["scale"] == 1000 and ln["launches"] == 1 and "window_offset" not in ln
    assert ln["launch_s"] == pytest.approx(1.01e-3)  # over every window's launches: 0.98, 1.0, 1.02, 1.05 ms
    assert ln["buffer_bytes"] == MiB and ln["nvml_mhz"] == 1980.0
    # every repeat: each window in turn, a read of it once (scale 1, untimed), then the timed launch
    repeats = gpu.reads[-5 * 8:]
    assert repeats == [(k, s) for _ in range(5) for k in range(4) for s in (1, 1000)]
    again = m.remeasure()
    assert again.median == pytest.approx(m.median) and again.launch["placements"] == 4
    with pytest.raises(ValueError, match="no placements"):
        tp.measure_placed_rate(gpu, [], name="l2_read_gbps", info=INFO)


def test_rate_method_of_a_placed_rate_states_the_windows_their_timing_and_spread():
    layout = tp.l2_placements(50 * MiB)
    launch = {"kind": "l2_read", "kernel": "stream_read_cg", "source": "stream_bandwidth.cu", "defines": {},
              "grid": 1056, "block": 256, "launches": 1, "launch_s": 0.00101, "nvml_mhz": 1980.0,
              "buffer_bytes": layout.window_bytes, "placements": layout.count, "stride_bytes": layout.stride_bytes,
              "region_bytes": layout.region_bytes, "page_bytes": layout.page_bytes,
              "placement_lowest": 7045.2, "placement_highest": 7446.8, "placement_spread": 0.0553,
              "placement_noise": 0.0121}
    m = Measurement.given("l2_read_gbps", [7250.0] * 6, unit="GB/s", sm_clock_mhz=1980.0, launch=launch)
    text = tp.rate_method(m, "sm_90", 132, H100)
    assert text == (
        "stream_read_cg (stream_bandwidth.cu) on every SM: grid 1056 x 256 threads, 16-byte ld.global.cg "
        "(LDG.E.128.STRONG.GPU) over a 12.5 MiB window (L2 / 4), read again and again, in each of 64 such windows "
        "14 MiB apart in one 896.5 MiB allocation, each from a 2 MiB page boundary on pages of its own: the same "
        "reads in 64 placements of the lines among the L2 slices and partitions; per repeat, every window in turn: "
        "one untimed launch that reads it once, then 1 launch of ~1.0 ms between CUDA events; a repeat's value is "
        "the mean of the 64 windows' rates, median of 6 repeats; the windows' rates (each the median over repeats) "
        "7045.2-7446.8 GB/s, 5.53 % apart (relative std 1.21 %); SM clock 1980.0 MHz (clock64 / %globaltimer per "
        "block; NVML 1980.0 MHz)")
    # without placements (a recording's older launch): the one buffer, as before
    one = tp.rate_method(Measurement.given("l2_read_gbps", [7250.0] * 5, unit="GB/s", launch=dict(
        launch, placements=None, buffer_bytes=13_107_200)), "sm_90", 132, H100)
    assert "over a 12.5 MiB buffer (L2 / 4), read again and again; launches of ~1.0 ms, 1 back to back" in one


def test_stress_clock_on_a_simulated_gpu_finds_sustained_ramp_and_every_sm():
    # 50 ms launches (10 us trips); the clock ramps 1000 -> 1980 MHz over 40 ms after the idle spell
    gpu = SimGpu(4, 1980.0, 10_000.0, ramp_ns=40e6, real_s_per_launch=0.004)
    wl = tp.wgmma_workload(gpu, gpu.kernel(3, 1), "bf16", sms=4)
    m = tp.stress_clock(gpu, wl, name="sustained_sm_clock_tensor_mhz", info=INFO, duration_s=0.15, idle_s=0.15,
                        read=lambda: (["sw_power_cap"], 1980), period_s=0.005)
    assert m.unit == "MHz" and m.median == pytest.approx(1980.0) and m.noise < 1e-6
    assert m.stop_reason == "time budget" and m.noise_target == tp.CLOCK_NOISE
    k = m.launch["kernel_clock"]
    assert k["start_mhz"] < 1100  # the first bin is the idle clock waking up
    # 95 % of 1980 is reached 38.4 ms into the ramp; the stamps are 6.25 ms apart, the bins 10 ms wide
    assert 0.03 <= k["ramp_s"] <= 0.05
    assert k["min_mhz"] >= 0.95 * 1980
    assert m.launch["sms_covered"] == 4 and m.launch["launches"] >= 5
    assert m.throttle == ["sw_power_cap"] and m.launch["nvml_clock"]["sustained_mhz"] == 1980.0
    assert m.launch["idle_mhz"] == 1980.0 and m.sm_clock_mhz == pytest.approx(1980.0)
    assert m.launch["series_mhz"][-1][1] == pytest.approx(1980.0)
    assert m.remeasure().median == pytest.approx(1980.0)
    # the load's own rate over the second half: every launch's work over its simulated time (10 us a trip)
    expected = tp.per_second(wl.work(m.launch["scale"]), m.launch["scale"] * 10e-6, "TFLOP/s")
    assert m.launch["rate_unit"] == "TFLOP/s" and m.launch["rate_sustained"] == pytest.approx(expected, rel=1e-3)
    assert f"the load's own rate over those windows {m.launch['rate_sustained']:g} TFLOP/s (reported)" in \
        tp.clock_method(m, None)


def test_early_sustained_is_the_same_statistic_from_one_second_to_half_the_stress_on():
    # a 10-s stress: 1650 MHz from 1 s to 6 s, 1600 MHz after (a slower thermal drift)
    series = [(t / 100, 1980.0 if t < 10 else 1650.0 if t < 600 else 1600.0) for t in range(1000)]
    assert tp.early_sustained(series, 10.0) == pytest.approx(1650.0)
    assert tp.summarize_clock(series).sustained_mhz == pytest.approx(1600.0)
    assert tp.early_sustained(series[:500], 10.0) is None  # the series ends before 6 s
    # a 2-s stress: 1 s to 2 s, the second half itself
    short = [(t / 100, 1980.0) for t in range(201)]
    assert tp.early_sustained(short, 2.0) == pytest.approx(1980.0)


def test_sustained_rate_takes_the_launches_that_started_in_the_sustained_part():
    # four launches of 1 s of work each: 0-1, 1-2, 2-3 and 3-5 s (the last one slower)
    spans = [(0, 10**9), (10**9, 2 * 10**9), (2 * 10**9, 3 * 10**9), (3 * 10**9, 5 * 10**9)]
    # the second half starts at 2.5 s: only the last launch, 1e12 FLOP over 2 s
    assert tp.sustained_rate(spans, 1e12, "TFLOP/s") == pytest.approx(0.5)
    assert tp.sustained_rate(spans[:3], 1e12, "TFLOP/s") == pytest.approx(1.0)  # from 1.5 s: the third
    # from 1 s on: three launches over 1-5 s
    assert tp.sustained_rate(spans, 1e12, "TFLOP/s", from_s=1.0) == pytest.approx(0.75)
    assert tp.sustained_rate(spans[:1], 1e12, "TFLOP/s") is None
    assert tp.sustained_rate([(0, 0), (0, 0)], 1e12, "TFLOP/s") is None


def test_window_rates_split_the_second_half_into_equal_windows():
    # twenty launches of 1 s of work each, back to back over 0-20 s; the ones from 15 s on take 2 s
    spans = [(k * 10**9, (k + 1) * 10**9) for k in range(15)] + [(15 * 10**9 + 2 * k * 10**9, 17 * 10**9 + 2 * k * 10**9)
                                                                  for k in range(5)]
    # 0-25 s: the second half is 12.5-25 s, five windows of 2.5 s: launches started at 13, 14 | 15, 17 | 19 | 21 | 23
    assert tp.window_rates(spans, 1e12, "TFLOP/s") == pytest.approx([1.0, 0.5, 0.5, 0.5, 0.5])
    assert tp.window_rates(spans, 1e12, "TFLOP/s", windows=1) == pytest.approx([7 / 12])  # 7 launches, 13-25 s
    assert tp.window_rates(spans[:1], 1e12, "TFLOP/s") == []
    # from 10 s on: 10-25 s in windows of 3 s: 10, 11, 12 | 13, 14, 15 | 17 | 19, 21 | 23
    assert tp.window_rates(spans, 1e12, "TFLOP/s", from_s=10.0) == pytest.approx([1.0, 3 / 4, 1 / 2, 2 / 4, 1 / 2])
    # a window no launch started in: no rates at all, rather than a median over fewer windows
    assert tp.window_rates([(0, 10**9), (10**9, 10 * 10**9)], 1e12, "TFLOP/s") == []


def test_a_rate_read_from_a_stress_is_its_windows_and_measured_again_by_a_new_stress():
    launch = {"kernel": "stress_wgmma", "source": "stress_ffma.cu", "kind": "wgmma_bf16", "grid": 132, "block": 256,
              "defines": {"UNROLL": 16}, "launch_s": 0.05, "duration_s": 10.0, "idle_s": 0.25, "rate_unit": "TFLOP/s",
              "rate_windows": [860.0, 858.0, 861.0, 859.0, 862.0]}
    clock = Measurement.given("sustained_sm_clock_tensor_mhz", [1600.0, 1590.0, 1610.0, 1600.0, 1600.0], unit="MHz",
                              throttle=["sw_power_cap"], launch=launch)
    again = Measurement.given("sustained_sm_clock_tensor_mhz", [1500.0] * 5, unit="MHz",
                              launch=dict(launch, rate_windows=[800.0] * 5))
    clock.remeasure = lambda: again
    r = tp.stress_rate(clock, "wgmma_bf16_dense_tflops")
    assert (r.name, r.unit, r.values, r.median, r.sm_clock_mhz) == ("wgmma_bf16_dense_tflops", "TFLOP/s",
                                                                   [860.0, 858.0, 861.0, 859.0, 862.0], 860.0, 1600.0)
    assert r.throttle == ["sw_power_cap"] and r.remeasure().median == 800.0
    text = tp.stress_rate_method(r, "sm_90", 132, H100)
    for part in ("stress_wgmma (stress_ffma.cu) on every SM: grid 132 x 256", "two deep for 10 s after 0.25 s idle",
                 "each of the 5 windows of the second half", "SM clock 1600.0 MHz", "989.4"):
        assert part in text, (part, text)
    with pytest.raises(measure.KernelLaunchError, match="too few launches to read its rate"):
        tp.stress_rate(Measurement.given("c", [1600.0], unit="MHz", launch=dict(launch, rate_windows=[860.0])), "x")


def test_stress_clock_keeps_every_launch_when_launches_outnumber_the_first_stamp_buffer():
    # 10 ms launches for 0.1 s: 8 x 10 + 8 = 88 rows of stamps up front; hundreds of launches of 0.2 ms real time
    gpu = SimGpu(2, 1410.0, 1_000.0, real_s_per_launch=0.0002)
    wl = tp.ffma_workload(gpu, gpu.kernel(3, 1), sms=2, max_threads_per_sm=1024)
    m = tp.stress_clock(gpu, wl, name="sustained_sm_clock_ffma_mhz", info=INFO, duration_s=0.1, launch_s=0.01,
                        idle_s=0.0, bin_s=0.001, read=lambda: ([], None), period_s=0.01)
    n = m.launch["launches"]
    assert n > 8 * 10 + 8, n
    # every launch's stamps were read: the series spans all of them (10 ms of GPU time each)
    assert m.launch["series_mhz"][-1][0] == pytest.approx(n * 0.01, abs=0.002)
    assert m.median == pytest.approx(1410.0) and m.launch["nvml_clock"] is None and m.launch["idle_mhz"] is None
    assert m.launch["sms_covered"] == 2 and m.throttle == []


# ----------------------------------------------------------------------------------------------
# hwtests/test_throughput_and_clocks.py end to end on the simulated GPU: record the facts, then check them


class SimCupy(SimGpu):
    """What measure.Runner and the hwtests file use of the cupy module, on a simulated GPU: 132 SMs,
    a 1 MiB L2 and 64 MiB free (so the DRAM buffers are 16 MiB of host memory), every kernel of the
    loaded cubins simulated (one loop trip: 20 us)."""

    ARGS = {"stress_ffma": (3, 1), "stress_wgmma": (3, 1), "stream_read": (4, None), "stream_read_cg": (4, None),
            "stream_copy": (4, None), "stream_write": (4, None)}

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
        self.RawModule = lambda path: SimpleNamespace(get_function=lambda name: sim.kernel(*sim.ARGS[name]))

    @staticmethod
    def get_default_memory_pool():
        return SimpleNamespace(free_all_blocks=lambda: None)


SIM_CONFTEST = '''
import sys
import pytest
import test_throughput
from pytest_gpuprops import measure

_mp = pytest.MonkeyPatch()

def pytest_configure(config):
    _mp.setitem(sys.modules, "cupy", test_throughput.SimCupy())
    _mp.setattr(measure, "gpu_unavailable_reason", lambda index=0: None)
    _mp.setattr(measure, "visible_gpu_count", lambda: 1)
    _mp.setattr(measure, "gpu_info", lambda index=0: measure.GpuInfo(
        index, "NVIDIA H100 80GB HBM3", "sm_90", 132, "580.0", "13.0", "13.0", "0000:01:00.0", 1980,
        "GPU-00000000-0000-0000-0000-000000000000", "node1"))

def pytest_unconfigure(config):
    _mp.undo()

@pytest.fixture(autouse=True, scope="module")
def _short(request):  # module scope: before the module's tensor stress fixture runs
    mp = pytest.MonkeyPatch()
    mp.setattr(request.module, "STRESS_S", 0.04)
    mp.setattr(request.module, "TENSOR_STRESS_S", 0.04)
    mp.setattr(request.module, "TENSOR_PREHEAT_S", 0.0)
    mp.setattr(request.module, "TENSOR_LAUNCHES", 5)  # each simulated launch sleeps 1 ms
    stress = request.module.tp.stress_clock  # a simulated GPU has no idle clock to wait 0.25 s for
    mp.setattr(request.module.tp, "stress_clock", lambda *a, **kw: stress(*a, **{"idle_s": 0.01, **kw}))
    yield
    mp.undo()
'''


def test_the_validation_facts_record_and_check_on_a_simulated_gpu(pytester, kernel_cache):
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
    # one loop trip every 20 us: FLOPs (bytes) of one trip / 20 us
    assert facts["ffma_fp32_tflops"]["value"] == pytest.approx(tp.ffma_flops(528, 512, 8, 1, 64, 8) / 20e-6 / 1e12,
                                                               abs=1e-3)
    # the bf16 rate is the tensor stress's own: its windows' rates, one loop trip every 20 us
    bf16 = facts["wgmma_bf16_dense_tflops"]
    assert bf16["value"] == pytest.approx(tp.wgmma_workload(np, None, "bf16", sms=132).work(1) / 20e-6 / 1e12, rel=1e-6)
    assert "the load of the sustained-clock stress" in bf16["method"] and "median of the windows" in bf16["method"]
    assert facts["wgmma_e4m3_dense_tflops"]["unit"] == "TFLOP/s"
    assert "of the H100 SXM5 80GB datasheet's 1978.9 TFLOP/s" in facts["wgmma_e4m3_dense_tflops"]["method"]
    assert facts["dram_copy_gbps"]["value"] == pytest.approx(2 * 16 * 2**20 / 20e-6 / 1e9, abs=1e-3)
    assert "two 16 MiB buffers" in facts["dram_copy_gbps"]["method"]
    assert facts["dram_write_gbps"]["value"] == pytest.approx(16 * 2**20 / 20e-6 / 1e9, abs=1e-3)
    r = pytester.runpytest_inprocess(*common, "--gpuprops-facts", "rec.toml")
    r.assert_outcomes(passed=9)
