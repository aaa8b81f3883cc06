"""The method text of the throughput and sustained-clock facts (throughput_text.py), from given
measurements: the datasheet fractions, what a launch does, how it was timed, and the clocks."""

from pytest_gpuprops import datasheets, throughput_text, workloads
from pytest_gpuprops.measure import Measurement

H100 = datasheets.datasheet_for("NVIDIA H100 80GB HBM3")


def test_fraction_text_against_the_datasheet_and_the_clock_it_ran_at():
    text = throughput_text.fraction_text("wgmma_bf16", 494.7, "sm_90", 132, 1830.0, H100)
    assert text == ("0.500 of the H100 SXM5 80GB datasheet's 989.4 TFLOP/s (which implies 1830 MHz); 0.500 of 132 "
                    "SMs x 4096 FLOP/cycle at the 1830 MHz it ran at (989.4 TFLOP/s)")
    assert throughput_text.fraction_text("dram_read", 3015.0, "sm_90", 132, 1980.0, H100) == \
        "0.900 of the H100 SXM5 80GB datasheet's 3350 GB/s"
    assert throughput_text.fraction_text("l2_read", 9000.0, "sm_90", 132, 1980.0, H100) == ""  # no datasheet L2 figure
    assert throughput_text.fraction_text("ffma", 12.0, "sm_86", 28, 1800.0, None) == (
        "no datasheet tabulated for this GPU (datasheets.DATASHEETS); 0.930 of 28 SMs x 256 FLOP/cycle at the 1800 "
        "MHz it ran at (12.9 TFLOP/s)")
    assert throughput_text.fraction_text("ffma", 12.0, "sm_75", 40, 1800.0, None) == \
        "no datasheet tabulated for this GPU (datasheets.DATASHEETS)"


def _rate(kind: str, value: float, **launch) -> Measurement:
    base = {"kind": kind, "kernel": "stress_wgmma", "source": "stress_ffma.cu", "defines": {}, "grid": 132,
            "block": 256, "launches": 4, "launch_s": 0.0051, "nvml_mhz": 1755.0}
    base.update(launch)
    return Measurement.given("x", [value] * 5, unit="TFLOP/s", sm_clock_mhz=1755.0, launch=base)


def test_rate_method_states_shape_timing_clock_and_fractions():
    text = throughput_text.rate_method(_rate("wgmma_bf16", 900.0), "sm_90", 132, H100)
    for part in ("stress_wgmma (stress_ffma.cu) on every SM: grid 132 x 256 threads",
                 "wgmma m64n256k16 bf16", "launches of ~5.1 ms, 4 back to back", "median of 5 repeats",
                 "SM clock 1755.0 MHz (clock64 / %globaltimer per block over every launch of the median-rate repeat; "
                 "NVML 1755.0 MHz)", "0.910 of the H100 SXM5 80GB datasheet's 989.4 TFLOP/s",
                 "0.948 of 132 SMs x 4096 FLOP/cycle at the 1755 MHz"):
        assert part in text, (part, text)
    mem = throughput_text.rate_method(_rate("dram_copy", 3000.0, buffer_bytes=2**30, kernel="stream_copy"), "sm_90", 132, H100)
    assert "two 1024 MiB buffers; bytes read + written" in mem and "0.896 of the H100" in mem


def test_clock_method_states_the_stress_and_both_clocks():
    launch = {"kernel": "stress_ffma", "source": "stress_ffma.cu", "kind": "ffma", "sms_covered": 132, "grid": 528,
              "block": 512, "launch_s": 0.05, "duration_s": 2.0, "idle_s": 0.25, "samples": 9, "bin_s": 0.01,
              "period_s": 0.05, "idle_mhz": 345.0,
              "kernel_clock": {"min_mhz": 1965.0, "ramp_s": 0.015},
              "nvml_clock": {"sustained_mhz": 1980.0, "min_mhz": 1980.0, "ramp_s": 0.05}}
    m = Measurement.given("c", [1980.0] * 5, unit="MHz", throttle=["sw_power_cap"], launch=launch)
    text = throughput_text.clock_method(m, H100)
    for part in ("stress_ffma (stress_ffma.cu, ffma) on all 132 SMs, grid 528 x 512", "two deep for 2 s after 0.25 s idle",
                 "(1980 MHz; min 1965, ramp to 95 % 0.015 s)", "NVML every 50 ms: sustained 1980.0 MHz",
                 "idle 345.0 MHz", "throttle reasons: sw_power_cap", "1.000 of the H100 SXM5 80GB's 1980 MHz"):
        assert part in text, (part, text)
    launch["kernel_clock"]["ramp_s"] = None
    assert "ramp to 95 % never" in throughput_text.clock_method(m, None)


def test_rate_method_of_a_placed_rate_states_the_windows_their_timing_and_spread():
    layout = workloads.l2_placements(50 * 2**20)
    launch = {"kind": "l2_read", "kernel": "stream_read_cg", "source": "stream_bandwidth.cu", "defines": {},
              "grid": 1056, "block": 256, "launches": 1, "launch_s": 0.00101, "nvml_mhz": 1980.0,
              "buffer_bytes": layout.window_bytes, "placements": layout.count, "stride_bytes": layout.stride_bytes,
              "region_bytes": layout.region_bytes, "page_bytes": layout.page_bytes,
              "placement_lowest": 7045.2, "placement_highest": 7446.8, "placement_spread": 0.0553,
              "placement_noise": 0.0121}
    m = Measurement.given("l2_read_gbps", [7250.0] * 6, unit="GB/s", sm_clock_mhz=1980.0, launch=launch)
    text = throughput_text.rate_method(m, "sm_90", 132, H100)
    assert text == (
        "stream_read_cg (stream_bandwidth.cu) on every SM: grid 1056 x 256 threads, 16-byte ld.global.cg "
        "(LDG.E.128.STRONG.GPU) over a 12.5 MiB window (L2 / 4), read again and again, in each of 64 such windows "
        "14 MiB apart in one 896.5 MiB allocation, each from a 2 MiB page boundary on pages of its own: the same "
        "reads in 64 placements of the lines among the L2 slices and partitions; per repeat, every window in turn: "
        "one untimed launch that reads it once, then 1 launch of ~1.0 ms between CUDA events; a repeat's value is "
        "the mean of the 64 windows' rates, median of 6 repeats; the windows' rates (each the median over repeats) "
        "7045.2-7446.8 GB/s, 5.53 % apart (relative std 1.21 %); SM clock 1980.0 MHz (clock64 / %globaltimer per "
        "block over every timed launch of the median-rate repeat, the mean of the middle two's for an even count; "
        "NVML 1980.0 MHz)")
    # without placements (a recording's older launch): the one buffer, as before
    one = throughput_text.rate_method(Measurement.given("l2_read_gbps", [7250.0] * 5, unit="GB/s", launch=dict(
        launch, placements=None, buffer_bytes=13_107_200)), "sm_90", 132, H100)
    assert "over a 12.5 MiB buffer (L2 / 4), read again and again; launches of ~1.0 ms, 1 back to back" in one


def test_stress_rate_method_states_the_clock_of_the_median_rate_window():
    launch = {"kind": "wgmma_bf16", "kernel": "stress_wgmma", "source": "stress_ffma.cu", "defines": {}, "grid": 132,
              "block": 256, "launch_s": 0.0557, "duration_s": 6.0, "idle_s": 0.25, "sustained_from_s": 1.0,
              "stress_sustained_mhz": 1588.9}
    m = Measurement.given("wgmma_bf16_dense_tflops", [855.5, 850.0, 860.0, 858.0, 852.0], unit="TFLOP/s",
                          sm_clock_mhz=1592.4, launch=launch)
    text = throughput_text.stress_rate_method(m, "sm_90", 132, H100)
    for part in ("its rate in each of the 5 windows of 1 s to 6 s", "median of the windows; SM clock 1592.4 MHz "
                 "(clock64 / %globaltimer over the median-rate window's own launches; the stress's sustained clock "
                 "1588.9 MHz)", "0.994 of 132 SMs x 4096 FLOP/cycle at the 1592 MHz it ran at (861.0 TFLOP/s)"):
        assert part in text, (part, text)
    even = Measurement.given("wgmma_bf16_dense_tflops", [855.5, 850.0, 860.0, 858.0], unit="TFLOP/s",
                             sm_clock_mhz=1592.4, launch=launch)
    assert "own launches, the mean of the middle two's for an even count; the stress's" in \
        throughput_text.stress_rate_method(even, "sm_90", 132, H100)
