"""The physical ceilings (ceilings.py) and the guard assertions.evaluate applies with them: a rate above
its ceiling at the clock read beside it, or a clock above the GPU's maximum, is ERROR, flagged as a
physically impossible reading, whatever the fact's band says. The readings are the H100's that
tests/test_physical_ceilings.py took out of sm_90.toml (pytest_gpuprops/facts/sm_90.toml sources)."""

import pytest

from pytest_gpuprops import assertions, ceilings, confirmation
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.measure import Measurement

BF16 = "wgmma_bf16_dense_tflops"


def _reading(name, unit, value, clock, *, sms=132, arch="sm_90", top=1980):
    return ceilings.impossible_reading(name, unit, value, arch=arch, sms=sms, clock_mhz=clock, max_sm_clock_mhz=top)


def test_a_rate_above_its_ceiling_at_its_own_clock_is_named_with_the_numbers():
    # H100 GPU-7ebe9dba: 893.6 TFLOP/s of dense bf16 beside a 1617 MHz clock (132 x 4096 x 1617 MHz = 874.3)
    assert _reading(BF16, "TFLOP/s", 893.6, 1617.0) == [
        "physically impossible reading: the rate and its clock disagree: 893.6 TFLOP/s is 102.21 % of 874.267, the "
        "ceiling of 132 SMs x 4096 FLOP/clk at the 1617 MHz read beside it"]
    assert _reading(BF16, "TFLOP/s", 874.2, 1617.0) == []  # under the ceiling, by 0.1 TFLOP/s
    # e4m3 at 8192 FLOP/clk: the sample run's 1691.8 TFLOP/s beside 1545 MHz (ceiling 1670.7)
    assert "101.26 % of 1670.68" in _reading("wgmma_e4m3_dense_tflops", "TFLOP/s", 1691.8, 1545.0)[0]


def test_the_ceiling_follows_the_arch_and_what_bounds_the_rate():
    # FFMA: 256 FLOP/clk per SM on sm_90, 128 on sm_80: 35 TFLOP/s on 108 SMs at 1410 MHz passes one, not the other
    assert _reading("ffma_fp32_tflops", "TFLOP/s", 35.0, 1410.0, sms=108) == []
    assert "35 TFLOP/s is 179.56 % of 19.4918, the ceiling of 108 SMs x 128 FLOP/clk" in \
        _reading("ffma_fp32_tflops", "TFLOP/s", 35.0, 1410.0, sms=108, arch="sm_80")[0]
    # SM bytes: 128 B/clk per SM (33454.1 GB/s for 132 SMs at 1980 MHz); a DRAM rate is nowhere near it
    assert _reading("l2_read_gbps", "GB/s", 34000.0, 1980.0)[0].endswith(
        "34000 GB/s is 101.63 % of 33454.1, the ceiling of 132 SMs x 128 B/clk at the 1980 MHz read beside it")
    assert _reading("dram_read_gbps", "GB/s", 3067.1, 1922.9) == []
    # not bounded by SM work, or not known: nothing checked
    assert _reading("p2p_ce_copy_gbps", "GB/s", 1e6, 1980.0) == []  # a copy engine's rate
    assert _reading("a_new_rate_tflops", "TFLOP/s", 1e6, 1980.0) == []  # no RATES entry
    assert _reading(BF16, "TFLOP/s", 1e6, 1980.0, arch="sm_75") == []  # no per-clock width for the arch
    assert _reading(BF16, "TFLOP/s", 1e6, 1980.0, sms=None) == []
    assert _reading(BF16, "TFLOP/s", 1e6, None) == []


def test_a_clock_above_the_maximum_is_impossible_beyond_its_reading_width():
    # two 15 MHz steps over the H100's 1980 cannot be; one step (1995.08, GPU-e146a6d1 against host time) can
    assert _reading("sustained_sm_clock_ffma_mhz", "MHz", 2010.0, None) == [
        "physically impossible reading: a clock above the GPU's maximum: 2010.0 MHz, over the 1980 MHz NVML reports "
        "(+ 16.0 MHz: one clock step and the reading width)"]
    assert _reading("sustained_sm_clock_ffma_mhz", "MHz", 1995.08, None) == []
    # the FFMA rate's own launches read the 1995 state as 1995.5-1995.6 (H100 GPU-88a21ba7, 2026-11-26)
    assert _reading("ffma_fp32_tflops", "TFLOP/s", 66.51, 1995.6) == []
    assert _reading("sustained_sm_clock_ffma_mhz", "MHz", 1996.0, None) == []
    assert _reading("sustained_sm_clock_ffma_mhz", "MHz", 1996.01, None) != []
    assert _reading("sustained_sm_clock_ffma_mhz", "MHz", 5000.0, None, top=None) == []  # the maximum unknown
    # a rate's own clock above the maximum: the sample run's DRAM read kernel clock of 2010 MHz
    assert _reading("dram_read_gbps", "GB/s", 3067.1, 2010.0) == [
        "physically impossible reading: a clock above the GPU's maximum: the SM clock read beside the rate, 2010.0 "
        "MHz, is over the 1980 MHz NVML reports (+ 16.0 MHz: one clock step and the reading width)"]


# -- the guard in assertions.evaluate ------------------------------------------------------------------

#: the H100 bf16 fact as it stood before 2026-11-26: 869.9 +- 3.49 %, its population 846.2-893.6
FACT = Fact(name=BF16, arch="sm_90", unit="TFLOP/s", method="m", source="s", value=869.9225, tolerance_rel=0.0349,
            scope="gpu", units_range=(846.245, 893.6))


def _rate(value, clock, sms=132):
    m = Measurement.given(BF16, [value] * 5, unit="TFLOP/s", sm_clock_mhz=clock, launch={"sm_count": sms})
    return m


def test_an_impossible_rate_inside_its_band_is_an_error_not_a_pass():
    v = assertions.evaluate(FACT, _rate(893.6, 1617.0), max_sm_clock_mhz=1980)
    assert v.status == assertions.ERROR and v.status in assertions.NOT_OK
    assert v.flags[0].startswith(assertions.IMPOSSIBLE_RATE + ": 893.6 TFLOP/s is 102.21 % of 874.267")
    assert v.verdict_text.startswith("ERROR (physically impossible reading: the rate and its clock disagree")
    text = v.message()
    assert text.startswith(f"fact {BF16} on sm_90 gave a physically impossible reading:")
    assert f"  check:    {assertions.IMPOSSIBLE_HINT}" in text
    with pytest.raises(assertions.ImpossibleReading, match="gave a physically impossible reading"):
        assertions.raise_for(v)
    # measured again and impossible again: the ERROR stands, with every measurement listed
    again = confirmation.confirm(v, lambda: assertions.evaluate(FACT, _rate(893.0, 1617.0), max_sm_clock_mhz=1980))
    assert again.status == assertions.ERROR and [a["measured"] for a in again.attempts] == [893.6, 893.0, 893.0]
    assert again.flags[-1] == "confirmed: impossible in 3 of 3 measurements"
    # the same rate at the clock it could run at passes its band; the same clock with a possible rate too
    assert assertions.evaluate(FACT, _rate(893.6, 1660.0), max_sm_clock_mhz=1980).status == assertions.PASS
    assert assertions.evaluate(FACT, _rate(870.0, 1617.0), max_sm_clock_mhz=1980).status == assertions.PASS


def test_an_impossible_rate_outside_its_band_is_an_error_too_and_keeps_its_other_flags():
    m = _rate(960.0, 1617.0)
    m.throttle = ["sw_power_cap"]
    v = assertions.evaluate(FACT, m, max_sm_clock_mhz=1980)
    assert v.status == assertions.ERROR
    assert len(v.flags) == 3 and v.flags[0].startswith(assertions.IMPOSSIBLE_RATE + ": 960 TFLOP/s is 109.81 %")
    assert v.flags[1].startswith("clock-event reasons sw_power_cap seen, but the reading is above the fact's value")
    assert v.flags[2].startswith(assertions.OFF_POPULATION)


def test_a_clock_fact_above_the_maximum_is_an_error():
    clock = Fact(name="sustained_sm_clock_ffma_mhz", arch="sm_90", unit="MHz", method="m", source="s", value=1987.4,
                 tolerance_rel=0.03, scope="gpu")
    m = Measurement.given(clock.name, [2010.0] * 5, unit="MHz", sm_clock_mhz=2010.0)
    v = assertions.evaluate(clock, m, max_sm_clock_mhz=1980)
    assert v.status == assertions.ERROR and v.flags[0].startswith(assertions.IMPOSSIBLE_CLOCK)
    # without the maximum (a GPU NVML does not describe) there is nothing to hold it to: its band decides
    assert assertions.evaluate(clock, m).status == assertions.PASS


FFMA = Fact(name="ffma_fp32_tflops", arch="sm_90", unit="TFLOP/s", method="m", source="s", value=66.3308,
            tolerance_rel=0.03, scope="gpu", units_range=(65.9859, 66.6758))


def _ffma(values, clock=1980.5):
    return assertions.evaluate(FFMA, Measurement.given(FFMA.name, values, unit="TFLOP/s", sm_clock_mhz=clock,
                                                       launch={"sm_count": 132}), max_sm_clock_mhz=1980)


def test_a_rate_sample_above_the_ceiling_at_the_maximum_clock_makes_the_measurement_impossible():
    # H100 GPU-aba34808, 2026-11-26: the first FFMA measurement of a warm process, samples 63.9-69.4 TFLOP/s at
    # 1980.5 MHz; 132 SMs x 256 FLOP/clk at 1996 MHz (1980 + one step + the reading width) is 67.449
    v = _ffma([65.9, 66.0, 69.429, 63.912, 65.95])
    assert v.status == assertions.ERROR
    assert v.flags[0] == ("physically impossible reading: a sample above the ceiling at the GPU's maximum clock: its "
                          "largest sample, 69.429 TFLOP/s, is 102.94 % of 67.4488, the ceiling of 132 SMs x 256 "
                          "FLOP/clk at 1996 MHz (NVML's maximum + 16.0 MHz)")
    assert _ffma([65.9, 66.0, 67.44, 65.95, 66.0]).status == assertions.PASS  # just under it: possible
    # the sample check needs the SM count and the maximum, as the median's does
    m = Measurement.given(FFMA.name, [69.4] + [66.0] * 4, unit="TFLOP/s", sm_clock_mhz=1980.5, noise_target=0.05)
    assert assertions.evaluate(FFMA, m, max_sm_clock_mhz=1980).status == assertions.PASS
    m.launch = {"sm_count": 132}
    assert assertions.evaluate(FFMA, m, max_sm_clock_mhz=1980).status == assertions.ERROR


def test_an_impossible_first_measurement_is_discarded_and_the_next_ones_judge_the_fact():
    first = _ffma([67.5, 67.6, 67.57, 68.39, 66.73], clock=2029.3)  # GPU-aba34808's ERROR of 2026-11-26
    assert first.status == assertions.ERROR
    again = iter([_ffma([66.03] * 5), _ffma([65.94] * 5)])
    v = confirmation.confirm(first, lambda: next(again))
    assert v.status == assertions.PASS and v.measured == 66.03
    assert [a["status"] for a in v.attempts] == ["ERROR", "PASS", "PASS"]
    # the discarded one keeps its values (and, from a GPU, its per-repeat kernel clocks and events against the host's)
    assert v.attempts[0]["values"] == [67.5, 67.6, 67.57, 68.39, 66.73] and "values" not in v.attempts[1]
    assert v.flags[-1].startswith("first measurement discarded, physically impossible: physically impossible reading: "
                                  "a clock above the GPU's maximum: the SM clock read beside the rate, 2029.3 MHz")
    assert v.flags[-1].endswith("(67.570 TFLOP/s (min 66.730, max 68.390, noise 0.87%, n=5, converged; SM clock "
                                "2029.3 MHz)); judged on the 2 after it")
    # the new measurements are judged by the usual rule: both fail, confirmed; one of two passes, UNSTABLE
    low = iter([_ffma([55.0] * 5), _ffma([55.1] * 5)])
    failed = confirmation.confirm(first, lambda: next(low))
    assert failed.status == assertions.FAIL and failed.measured == 55.0
    assert "confirmed: failed 2 of 3 measurements" in failed.flags
    mixed = iter([_ffma([55.0] * 5), _ffma([66.0] * 5)])
    assert confirmation.confirm(first, lambda: next(mixed)).status == assertions.UNSTABLE
    # impossible again in any new measurement: the ERROR stands
    twice = iter([_ffma([66.0] * 5), _ffma([69.0] * 5)])
    stands = confirmation.confirm(first, lambda: next(twice))
    assert stands.status == assertions.ERROR and stands.flags[-1] == "confirmed: impossible in 2 of 3 measurements"


def test_the_summary_line_counts_the_verdicts_judged_after_a_discarded_measurement():
    from pytest_gpuprops import report
    again = iter([_ffma([66.03] * 5), _ffma([65.94] * 5)])
    v = confirmation.confirm(_ffma([67.57] * 5, clock=2029.3), lambda: next(again))
    assert report.summary_line([v, _ffma([66.0] * 5)]) == (
        "gpuprops: 2 PASS; 1 judged after a noisy or impossible first measurement was discarded (ffma_fp32_tflops: "
        "the verdicts say why)")


def test_a_clock_above_what_the_gpu_can_run_is_no_clock():
    # the session clock's spin on the H100s of 2026-11-26 night: 1980-2092 MHz, their kernels' clocks 1980
    assert ceilings.possible_clock(2092.0, 1980) is None and ceilings.possible_clock(1996.1, 1980) is None
    assert ceilings.possible_clock(1995.6, 1980) == 1995.6  # one 15 MHz step above NVML's maximum is real
    assert ceilings.possible_clock(1965.0, 1980) == 1965.0 and ceilings.possible_clock(2500.0, None) == 2500.0
    assert ceilings.possible_clock(None, 1980) is None
