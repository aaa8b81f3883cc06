"""The assertion layer (assertions.py): verdicts for measured, static and model facts, and the
cost models. Given numbers that must pass and planted wrong ones that must fail, hand-worked numbers,
and exact texts."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pytest_gpuprops import assertions, confirmation
from pytest_gpuprops import assertions as A
from pytest_gpuprops import models as M
from pytest_gpuprops.facts import Fact, load_facts
from pytest_gpuprops.measure import Measurement

# ----------------------------------------------------------------------------------------------
# given numbers: the right ones pass, planted wrong ones fail


LDS = Fact(name="lds_latency_cycles", arch="sm_86", unit="cycles", method="pointer chase", source="seeds", value=23.0,
           tolerance_abs=0.5)


POPULATION = Fact(name="cluster_barrier_cluster8_cycles", arch="sm_90", unit="cycles", method="barrier",
                  source="units", value=68.9375, tolerance_abs=2.5, units_range=(66.9375, 70.9375))


@pytest.mark.parametrize("values, status, flag", [
    ([66.9375] * 3, A.PASS, None),        # a unit at the population's edge: inside, no flag
    ([66.5] * 3, A.PASS, "beyond the units measured so far (66.9375 .. 70.9375)"),  # inside the band: a new extreme
    ([71.2, 71.2, 71.3], A.PASS, "beyond the units measured so far (66.9375 .. 70.9375)"),
    # outside the band as well: a finding about the unit, said as such, never a new sample to widen by;
    # within 10 % of the units recorded (assertions.POPULATION_REACH) a PASS that says so, past it a FAIL
    ([65.0] * 3, A.PASS, "outside the SKU's recorded population: 65 against units 66.9375 .. 70.9375"),
    ([63.0] * 3, A.FAIL, "outside the SKU's recorded population: 63 against units 66.9375 .. 70.9375"),
])
def test_a_unit_beyond_the_units_measured_so_far_is_flagged(values, status, flag):
    v = A.evaluate(POPULATION, Measurement.given("barrier", values))
    assert v.status == status
    assert [f for f in v.flags if f.startswith(flag or "-")] == ([] if flag is None else [v.flags[-1]])
    assert ("beyond the units" in v.verdict_text) == (flag is not None and flag.startswith("beyond"))


def test_a_memory_latency_says_its_ns_at_the_clock_it_ran_at():
    import dataclasses
    dram = Fact(name="dram_latency_cycles", arch="sm_90", unit="cycles", method="chase", source="units", value=686.0,
                tolerance_abs=17.0, scope="gpu", gpu="NVIDIA H100 80GB HBM3")
    m = dataclasses.replace(Measurement.given("dram", [694.15, 694.15, 694.15]), sm_clock_mhz=1995.0)
    assert A.evaluate(dram, m).measured_text.endswith("SM clock 1995.0 MHz; 347.9 ns)")
    lds = dataclasses.replace(Measurement.given("lds", [23.0, 23.0, 23.0]), sm_clock_mhz=1980.0)
    assert A.evaluate(LDS, lds).measured_text.endswith("SM clock 1980.0 MHz)")  # an SM fact: cycles alone
    # the session clock's spin read above what the GPU can run (H100 GPU-fc77ac86: 2092 MHz against 1980): no
    # clock and no ns, the refused reading said instead; NVML-read facts have none at all
    refused = Measurement.given("dram", [694.15] * 3, launch={"session_clock_refused_mhz": 2092.0})
    text = A.evaluate(dram, refused).measured_text
    assert text.endswith("SM clock unknown: the session's clock spin read 2092.0 MHz, above what the GPU can run)")
    assert " ns)" not in text
    assert A.evaluate(LDS, Measurement.given("lds", [23.0] * 3)).measured_text.endswith("SM clock not read)")


def test_value_within_tolerance_passes():
    v = A.evaluate(LDS, Measurement.given("lds", [22.96, 22.96, 22.97]))
    assert v.status == A.PASS and v.ok
    A.raise_for(v)


def test_planted_wrong_expectation_fails_with_everything_a_person_needs():
    wrong = Fact(**{**LDS.__dict__, "value": 30.0})
    v = A.evaluate(wrong, Measurement.given("lds", [22.96] * 5), reproduce="pytest hwtests/test_smem.py::x")
    assert v.status == A.FAIL
    with pytest.raises(A.FactMismatch) as e:
        A.raise_for(v)
    msg = str(e.value)
    for part in ("lds_latency_cycles", "sm_86", "30 ± 0.5 cycles", "22.960", "n=5", "pointer chase", "seeds",
                 "reproduce: pytest hwtests/test_smem.py::x"):
        assert part in msg


def test_relative_tolerance_and_the_wider_of_two():
    f = Fact(name="bw", arch="sm_90", unit="B/clk", method="m", source="s", value=128.0, tolerance_rel=0.02,
             tolerance_abs=1.0)
    assert f.tolerance == pytest.approx(2.56)
    assert f.accepts(125.5) and not f.accepts(125.3)


def test_noise_that_never_settled_is_not_a_pass_even_inside_tolerance():
    m = Measurement.given("lds", [22.0, 24.0, 23.0, 22.5, 23.5], noise_target=0.005, stop_reason="time budget")
    v = A.evaluate(LDS, m)
    assert v.status == A.NOISY and "over target" in v.verdict_text
    with pytest.raises(A.NoisyMeasurement):
        A.raise_for(v)


def test_throttled_measurement_is_flagged_in_the_verdict():
    v = A.evaluate(LDS, Measurement.given("lds", [23.0] * 3, throttle=["sw_power_cap"]))
    assert v.status == A.PASS and "throttled: sw_power_cap" in v.verdict_text


CLOCK = Fact(name="sustained_sm_clock_ffma_mhz", arch="sm_90", unit="MHz", method="stress", source="measured",
             value=1980.0, tolerance_abs=20.0, scope="gpu")
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-7ef69811", "pci_bus_id": "0000:19:00.0",
        "host": "node7"}


def test_a_time_unit_fact_below_its_value_at_a_held_down_clock_is_throttled_not_failed():
    v = A.evaluate(CLOCK, Measurement.given("clk", [1755.0] * 5, unit="MHz", throttle=["sw_power_cap"]))
    assert v.status == A.THROTTLED and not v.ok and A.THROTTLED in A.NOT_OK
    v.gpu = H100
    with pytest.raises(A.FactMismatch) as e:
        A.raise_for(v)
    msg = str(e.value)
    for part in ("held down", "GPU 0 NVIDIA H100 80GB HBM3 (GPU-7ef69811) on node7", "1980 ± 20 MHz", "1755.000 MHz",
                 "throttled: sw_power_cap", "check:    nvidia-smi -q -d PERFORMANCE"):
        assert part in msg, part


def test_a_time_unit_fact_that_fails_at_full_clock_is_a_plain_failure_with_what_to_check():
    v = A.evaluate(CLOCK, Measurement.given("clk", [1755.0] * 5, unit="MHz"))
    assert v.status == A.FAIL and "check:" in v.message() and "GPU" not in v.message().split("\n")[1][:5]


@pytest.mark.parametrize("median", [1960.0, 2000.0])
def test_a_throttled_time_unit_fact_inside_its_tolerance_passes_flagged(median):
    v = A.evaluate(CLOCK, Measurement.given("clk", [median] * 5, unit="MHz", throttle=["hw_slowdown"]))
    assert v.status == A.PASS and "throttled: hw_slowdown" in v.verdict_text


def test_a_time_unit_fact_above_its_band_under_a_throttle_is_a_failure_not_throttled():
    """A fallen clock reads low: a rate above its band under sw_power_cap fails, the reasons as context."""
    v = A.evaluate(CLOCK, dataclasses.replace(Measurement.given("clk", [2010.0] * 5, unit="MHz",
                                                                throttle=["sw_power_cap"]), sm_clock_mhz=1620.0),
                   max_sm_clock_mhz=2100.0)
    assert v.status == A.FAIL and "sw_power_cap seen, but the reading is above the fact's value" in v.verdict_text
    low = A.evaluate(CLOCK, dataclasses.replace(Measurement.given("clk", [1930.0] * 5, unit="MHz",
                                                                  throttle=["sw_power_cap"]), sm_clock_mhz=1620.0),
                     max_sm_clock_mhz=2100.0)
    assert low.status == A.THROTTLED


def test_a_cycle_fact_is_never_excused_by_throttling():
    wrong = Fact(**{**LDS.__dict__, "value": 30.0})
    v = A.evaluate(wrong, Measurement.given("lds", [23.0] * 3, throttle=["sw_thermal_slowdown"]))
    assert v.status == A.FAIL and "check:" not in v.message()


def test_a_throttled_failure_is_confirmed_like_a_failure():
    first = A.evaluate(CLOCK, Measurement.given("clk", [1700.0] * 5, unit="MHz", throttle=["sw_power_cap"]))
    again = confirmation.confirm(first, lambda: A.evaluate(CLOCK, Measurement.given("clk", [1701.0] * 5, unit="MHz",
                                                                          throttle=["sw_power_cap"])))
    assert again.status == A.THROTTLED and "confirmed: failed 3 of 3" in again.verdict_text
    recovered = confirmation.confirm(first, lambda: A.evaluate(CLOCK, Measurement.given("clk", [1980.0] * 5, unit="MHz")))
    assert recovered.status == A.UNSTABLE


def test_static_fact_per_compiler_and_schedule_drift():
    f = Fact(name="dep", arch="sm_90", unit="cycles", method="m", source="s", kind="static",
             by_compiler={"nvrtc 13.5": 24})
    assert A.evaluate_static(f, 24, "nvrtc 13.5").status == A.PASS
    assert A.evaluate_static(f, 23, "nvrtc 13.5").status == A.FAIL  # same compiler: a real failure
    same = A.evaluate_static(f, 24, "nvrtc 13.9")
    assert same.status == A.PASS and "not recorded" in same.verdict_text
    drift = A.evaluate_static(f, 20, "nvrtc 13.9")
    assert drift.status == A.SCHEDULE_CHANGED and "nvrtc 13.5: 24" in drift.verdict_text
    with pytest.raises(A.ScheduleChanged, match="compiler schedule changed"):
        A.raise_for(drift)
    assert not issubclass(A.ScheduleChanged, A.FactMismatch)


# The seeds' register-bank table (the original sm_86 notes, register banks), as the model reads it.
@pytest.mark.parametrize("ra, rb, rc, reuse, cycles", [
    (8, 10, 16, "--", 3), (8, 10, 16, "-R", 2), (8, 10, 16, "R-", 2), (8, 10, 16, "RR", 1),
    (8, 8, 16, "--", 2), (8, 8, 16, "-R", 2), (8, 8, 16, "R-", 2), (8, 8, 16, "RR", 1),
    (9, 10, 16, "--", 2), (9, 10, 16, "-R", 1), (9, 10, 16, "R-", 2), (9, 10, 16, "RR", 1),
    (8, 9, 255, "--", 1), (1, 1, 1, "--", 1),
])
def test_bank_model_reads_the_seed_cases(ra, rb, rc, reuse, cycles):
    assert M.bank_read_cycles(ra, rb, rc, M.reuse_mask(reuse)) == cycles


def test_four_banks_would_predict_differently():
    assert M.bank_read_cycles(8, 10, 16, 0, banks=4) == 2  # R8, R16 share bank 0 of 4; R10 is bank 2
    assert M.bank_read_cycles(8, 10, 16, 0, banks=2) == 3


def test_bank_count_inference_picks_the_generating_model():
    cases = [((a, b, c, 0), float(M.bank_read_cycles(a, b, c, 0, banks=2)))
             for a in range(8, 14) for b in range(8, 14) for c in (16, 17)]
    got = {n: M.explained_fraction(cases, banks=n, cycles_per_read=1.0, tolerance_rel=0.06) for n in (1, 2, 4)}
    assert got[2] == 1.0 and got[4] < 1.0 and got[1] < 1.0


def test_model_verdict_lists_the_cases_off_the_model():
    ok = A.evaluate_model("m", "sm_90", [("a", 2.0, 2.02), ("b", 1.0, 1.03)], tolerance_rel=0.06, unit="c",
                          method="x", source="y")
    bad = A.evaluate_model("m", "sm_90", [("a", 2.0, 2.02), ("b", 1.0, 1.5)], tolerance_rel=0.06, unit="c",
                           method="x", source="y")
    assert ok.status == A.PASS and bad.status == A.FAIL and "b: model 1.000 measured 1.500" in bad.measured_text


def test_hmma_issue_model_regimes():
    kw = dict(latency=24.0, issue_interval=6.0, pipe_interval=6.15)
    assert M.hmma_cycles_per_smsp(1, 1, **kw) == 24.0          # dependency bound
    assert M.hmma_cycles_per_smsp(8, 4, **kw) == 6.15          # pipe bound
    assert M.hmma_cycles_per_smsp(2, 1, **kw) == 12.0


def test_packaged_sm90_facts_carry_provenance():
    f = load_facts("sm_90")
    measured = [x for x in f.values() if x.kind == "measured"]
    assert len(measured) >= 15
    assert all(re.match(r"measured on NVIDIA H(100 80GB HBM3|200), driver \d+\.\d+\.\d+, CUDA \d+\.\d+", x.source)
               for x in measured), [x.source for x in measured]
    # exact: counts and sizes the hardware defines (a bank count, the shared memory a block or an SM gets,
    # a cache's capacity, sector, fill or line read on its sweep's grid)
    exact = {"register_bank_count", "smem_max_per_block_bytes", "smem_max_per_sm_bytes", "const_l1_capacity_bytes",
             "l1_capacity_kib_smem0", "l1_capacity_kib_smem100", "l1_capacity_kib_smem228", "l1_sector_bytes",
             "l1_line_bytes", "l2_dram_fill_bytes"}
    assert all(x.tolerance > 0 for x in measured if x.name not in exact)
    assert all(x.tolerance == 0 for x in measured if x.name in exact)


STATIC = Fact(name="dep", arch="sm_90", unit="cycles", method="m", source="s", kind="static",
              by_compiler={"nvrtc 13.0": 20, "nvrtc 13.5": 24})


def _m(values, **kw):
    return Measurement.given("lds", values, **kw)


# ----------------------------------------------------------------------------------------------
# measured facts


@pytest.mark.parametrize("median, status", [(23.5, A.PASS), (22.5, A.PASS), (23.5001, A.FAIL), (22.4999, A.FAIL),
                                            (23.0, A.PASS)])
def test_tolerance_edges(median, status):
    assert A.evaluate(LDS, _m([median] * 3)).status == status


def test_measured_verdict_fields_and_text():
    m = _m([22.0, 23.0, 24.0], stop_reason="converged", noise_target=0.05, sm_clock_mhz=1755.0,
           throttle=["hw_slowdown", "sw_power_cap"])
    v = A.evaluate(LDS, m, reproduce="pytest x::y")
    assert (v.fact, v.arch, v.status, v.expected, v.measured) == ("lds_latency_cycles", "sm_86", A.PASS,
                                                                  "23 ± 0.5 cycles", 23.0)
    assert (v.unit, v.method, v.source, v.kind, v.reproduce) == ("cycles", "pointer chase", "seeds", "measured",
                                                                 "pytest x::y")
    # noise: std-dev 1 over mean 23 = 4.35 %
    assert v.measured_text == ("23.000 cycles (min 22.000, max 24.000, noise 4.35%, n=3, converged; "
                               "SM clock 1755.0 MHz)")
    assert v.flags == ["throttled: hw_slowdown+sw_power_cap"]
    assert v.verdict_text == "PASS (throttled: hw_slowdown+sw_power_cap)"
    assert v.measurement == m.as_dict() and v.nodeid == ""


def test_verdict_unit_is_the_facts_not_the_measurements():
    v = A.evaluate(LDS, _m([23.0], unit="ns"))
    assert v.unit == "cycles" and "23.000 ns" in v.measured_text


def test_noisy_is_noisy_inside_and_outside_the_tolerance_and_says_by_how_much():
    values = [9.0, 11.0, 9.0, 11.0, 10.0]  # noise 10 % exactly
    inside = Fact(**{**LDS.__dict__, "value": 10.0})
    for fact in (inside, LDS):
        v = A.evaluate(fact, _m(values, noise_target=0.01, stop_reason="time budget"))
        assert v.status == A.NOISY and not v.ok
        assert v.flags == ["noise 10.00% over target 1.00% (time budget)"]
    assert A.evaluate(inside, _m(values, noise_target=0.1)).status == A.PASS  # at the target: settled


def test_ok_per_status():
    def v(status):
        return A.Verdict("f", "sm_90", status, "e", 1.0, "t", "u", "m", "s")
    assert v(A.PASS).ok and v(A.RECORDED).ok
    assert not v(A.FAIL).ok and not v(A.NOISY).ok and not v(A.SCHEDULE_CHANGED).ok


def test_message_lines_exactly():
    v = A.Verdict("lds", "sm_90", A.FAIL, "23 ± 0.5 cycles", 30.0, "30.000 cycles", "cycles", "chase", "seeds",
                  flags=["throttled: a"], reproduce="pytest t.py::x")
    assert v.message().splitlines() == [
        "fact lds on sm_90 does not hold:",
        "  expected: 23 ± 0.5 cycles",
        "  measured: 30.000 cycles",
        "  flags:    throttled: a",
        "  method:   chase",
        "  source:   seeds",
        "  reproduce: pytest t.py::x",
    ]
    bare = A.Verdict("lds", "sm_90", A.NOISY, "e", None, "m", "u", "me", "so")
    assert bare.message().splitlines() == ["fact lds on sm_90 could not be measured reliably:", "  expected: e",
                                           "  measured: m", "  method:   me", "  source:   so"]
    changed = A.Verdict("lds", "sm_90", A.SCHEDULE_CHANGED, "e", 1.0, "m", "u", "me", "so")
    assert changed.message().startswith("fact lds on sm_90 compiler schedule changed:\n")
    assert A.Verdict("lds", "sm_90", A.PASS, "e", 1.0, "m", "u", "me", "so").message().startswith(
        "fact lds on sm_90 PASS:\n")


def test_as_dict_adds_the_verdict_text():
    v = A.Verdict("lds", "sm_90", A.PASS, "e", 1.0, "m", "u", "me", "so", flags=["x"])
    d = v.as_dict()
    assert d["verdict"] == "PASS (x)" and d["fact"] == "lds" and d["flags"] == ["x"] and d["status"] == A.PASS


def test_raise_for_each_status():
    def v(status):
        return A.Verdict("f", "sm_90", status, "e", 1.0, "t", "u", "m", "s")
    A.raise_for(v(A.PASS))
    A.raise_for(v(A.RECORDED))
    with pytest.raises(A.FactMismatch, match="does not hold"):
        A.raise_for(v(A.FAIL))
    with pytest.raises(A.NoisyMeasurement, match="could not be measured reliably"):
        A.raise_for(v(A.NOISY))
    with pytest.raises(A.ScheduleChanged, match="compiler schedule changed"):
        A.raise_for(v(A.SCHEDULE_CHANGED))


# ----------------------------------------------------------------------------------------------
# static facts


def test_static_recorded_compiler_must_match_exactly():
    ok = A.evaluate_static(STATIC, 24, "nvrtc 13.5", reproduce="r")
    assert ok.status == A.PASS and ok.flags == [] and ok.kind == "static" and ok.reproduce == "r"
    assert ok.measured == 24 and ok.measured_text == "24 cycles with nvrtc 13.5"
    assert ok.expected == "20 (nvrtc 13.0), 24 (nvrtc 13.5)"
    assert A.evaluate_static(STATIC, 24.0, "nvrtc 13.5").status == A.PASS
    assert A.evaluate_static(STATIC, 20, "nvrtc 13.0").status == A.PASS
    # a value another compiler produced is still a failure for this one
    for value, compiler in ((20, "nvrtc 13.5"), (24, "nvrtc 13.0"), (24.5, "nvrtc 13.5")):
        v = A.evaluate_static(STATIC, value, compiler)
        assert v.status == A.FAIL and not v.ok
        with pytest.raises(A.FactMismatch):
            A.raise_for(v)


def test_static_unrecorded_compiler_is_compared_with_the_last_recorded_one():
    same = A.evaluate_static(STATIC, 24, "nvrtc 13.9")
    assert same.status == A.PASS and same.flags == ["nvrtc 13.9 not recorded; same as nvrtc 13.5"]
    drift = A.evaluate_static(STATIC, 20, "nvrtc 13.9")  # the first compiler's value is not good enough
    assert drift.status == A.SCHEDULE_CHANGED and drift.flags == ["nvrtc 13.5: 24, nvrtc 13.9: 20"]
    assert drift.measured_text == "20 cycles with nvrtc 13.9"


# ----------------------------------------------------------------------------------------------
# model facts


def _model(cases, tol=0.25):
    return A.evaluate_model("m", "sm_90", cases, tolerance_rel=tol, unit="c", method="x", source="y", reproduce="r")


def test_model_tolerance_edges_both_ways():
    # model 2.0 +- 25 % = 0.5: 2.5 and 1.5 are in, just past them is out, on either side
    assert _model([("a", 2.0, 2.5)]).status == A.PASS
    assert _model([("a", 2.0, 1.5)]).status == A.PASS
    assert _model([("a", 2.0, 2.5001)]).status == A.FAIL
    assert _model([("a", 2.0, 1.4999)]).status == A.FAIL  # under-prediction is off the model too
    assert _model([("a", -2.0, -1.5)]).status == A.PASS  # relative to |model|


def test_model_verdict_text_and_fields():
    v = _model([("a", 2.0, 2.1), ("b", 1.0, 1.5), ("c", 4.0, 2.0)], tol=0.06)
    assert v.status == A.FAIL and v.measured == 1.0 and v.kind == "model" and v.expected == "model ± 6%"
    assert (v.fact, v.arch, v.unit, v.method, v.source, v.reproduce) == ("m", "sm_90", "c", "x", "y", "r")
    # relative deviations 5 %, 50 %, 50 %: the first of the worst is b
    assert v.measured_text == ("1/3 cases within ±6% of the model; worst b: model 1.000, measured 1.500"
                               "\n            off the model: b: model 1.000 measured 1.500; "
                               "c: model 4.000 measured 2.000")
    ok = _model([("a", 2.0, 2.1), ("b", 1.0, 1.01)], tol=0.06)
    assert ok.status == A.PASS and ok.measured == 2.0
    assert ok.measured_text == "2/2 cases within ±6% of the model; worst a: model 2.000, measured 2.100"


def test_model_verdict_lists_twelve_cases_off_the_model_and_counts_the_rest():
    cases = [(f"k{i}", 1.0, 2.0) for i in range(15)]
    text = _model(cases).measured_text
    assert text.count("model 1.000 measured 2.000") == 12 and "k11:" in text and "k12:" not in text
    assert text.endswith("; and 3 more")
    assert not _model(cases[:12]).measured_text.endswith("more")


def test_model_with_a_zero_prediction_does_not_divide_by_zero():
    v = _model([("zero", 0.0, 0.0), ("a", 2.0, 2.2)])
    assert v.status == A.PASS and "worst a" in v.measured_text


# ----------------------------------------------------------------------------------------------
# the register-bank model


@pytest.mark.parametrize("ra, rb, rc, reuse, banks, cycles", [
    (8, 10, 16, 0b100, 2, 2),   # C from the reuse cache: R8, R10 both in bank 0
    (8, 10, 17, 0b100, 2, 2),
    (8, 9, 17, 0b011, 2, 1),    # only R17 is read
    (255, 255, 255, 0, 2, 1),   # RZ reads nothing: at least one cycle
    (8, 8, 8, 0, 2, 1),         # one register named three times is read once
    (8, 8, 10, 0b001, 2, 2),    # A reused, B still reads R8: R8 and R10 in bank 0
    (8, 8, 10, 0b011, 2, 1),
    (3, 6, 9, 0, 3, 3),         # three banks: all in bank 0
    (3, 7, 11, 0, 3, 1),        # banks 0, 1, 2
    (3, 7, 11, 0, 4, 3),        # four banks: all in bank 3
    (1, 3, 5, 0b010, 2, 2),
])
def test_bank_model_by_hand(ra, rb, rc, reuse, banks, cycles):
    assert M.bank_read_cycles(ra, rb, rc, reuse, banks=banks) == cycles


def test_bank_model_default_is_two_banks_and_no_reuse():
    assert M.bank_read_cycles(8, 10, 16) == 3


@pytest.mark.parametrize("text, mask", [("", 0), ("--", 0), ("R-", 1), ("-R", 2), ("RR", 3), ("--R", 4), ("R-R", 5),
                                        ("RRR", 7)])
def test_reuse_notation(text, mask):
    assert M.reuse_mask(text) == mask


def test_reuse_notation_refuses_other_letters():
    with pytest.raises(ValueError, match=r"reuse notation 'Rx': use 'R' or '-'"):
        M.reuse_mask("Rx")


def test_explained_fraction_by_hand():
    cases = [((8, 10, 16, 0), 6.0),   # 3 reads x 2 cycles: hit
             ((8, 9, 16, 0), 4.0),    # 2 reads x 2: hit
             ((8, 9, 17, 3), 2.0),    # 1 read: hit
             ((8, 9, 17, 0), 5.0)]    # model 4, off by 1 > 0.05 * 5: miss
    assert M.explained_fraction(cases, banks=2, cycles_per_read=2.0, tolerance_rel=0.05) == 0.75
    assert M.explained_fraction(iter(cases), banks=2, cycles_per_read=2.0, tolerance_rel=0.05) == 0.75
    assert M.explained_fraction([], banks=2, cycles_per_read=1.0, tolerance_rel=0.1) == 0.0


def test_explained_fraction_tolerance_is_relative_to_the_measured_value():
    # measured 4, model 4.5: off by 0.5. 12 % of the measured 4 is 0.48 (miss); of the model 4.5 it is 0.54
    case = [((8, 9, 255, 0), 4.0)]
    assert M.explained_fraction(case, banks=2, cycles_per_read=4.5, tolerance_rel=0.12) == 0.0
    assert M.explained_fraction(case, banks=2, cycles_per_read=4.5, tolerance_rel=0.125) == 1.0  # 0.5 <= 0.5


# ----------------------------------------------------------------------------------------------
# the HMMA issue model: max(latency / (ilp * warps), issue / warps, pipe)

KW = dict(latency=24.0, issue_interval=6.0, pipe_interval=1.0)


@pytest.mark.parametrize("ilp, warps, cycles, regime", [
    (1, 1, 24.0, "dependency"),
    (2, 1, 12.0, "dependency"),
    (3, 2, 4.0, "dependency, two warps: 24 / 6"),
    (1, 3, 8.0, "dependency, three warps: 24 / 3"),
    (4, 1, 6.0, "dependency and issue meet"),
    (8, 1, 6.0, "issue bound: one warp issues one HMMA per 6 cycles"),
    (8, 2, 3.0, "issue bound, two warps: 6 / 2"),
    (16, 3, 2.0, "issue bound, three warps: 6 / 3 over 24 / 48"),
])
def test_hmma_model_regimes(ilp, warps, cycles, regime):
    assert M.hmma_cycles_per_smsp(ilp, warps, **KW) == cycles, regime


def test_hmma_model_pipe_floor():
    assert M.hmma_cycles_per_smsp(8, 4, latency=24.0, issue_interval=6.0, pipe_interval=2.5) == 2.5
    assert M.hmma_cycles_per_smsp(1, 1, latency=24.0, issue_interval=6.0, pipe_interval=30.0) == 30.0


def test_reproduce_is_empty_unless_given():
    assert A.evaluate(LDS, _m([23.0])).reproduce == ""
    assert A.evaluate_static(STATIC, 24, "nvrtc 13.5").reproduce == ""
    assert _model([("a", 1.0, 1.0)]).reproduce == "r"
    assert A.evaluate_model("m", "sm_90", [("a", 1.0, 1.0)], tolerance_rel=0.1, unit="c", method="x",
                            source="y").reproduce == ""


def test_static_verdict_fields():
    v = A.evaluate_static(STATIC, 20, "nvrtc 13.0")
    assert (v.fact, v.arch, v.unit, v.method, v.source, v.kind) == ("dep", "sm_90", "cycles", "m", "s", "static")


def test_model_worst_case_is_the_largest_relative_deviation():
    # a: 10 % over; b: 20 % under (the sum |2.2 + 2| / 2 would pick a)
    assert "worst b:" in _model([("a", 2.0, 2.2), ("b", 1.0, 0.8)]).measured_text
    # a measured zero is a 100 % deviation, not a case to skip
    assert "worst z:" in _model([("a", 2.0, 2.2), ("z", 1.0, 0.0)], tol=2.0).measured_text


def test_model_verdict_with_exactly_thirteen_cases_off():
    text = _model([(f"k{i}", 1.0, 2.0) for i in range(13)]).measured_text
    assert text.endswith("; and 1 more")


def test_message_joins_flags_with_commas():
    v = A.Verdict("f", "sm_90", A.FAIL, "e", 1.0, "t", "u", "m", "s", flags=["a", "b"])
    assert "  flags:    a, b" in v.message().splitlines()


# ----------------------------------------------------------------------------------------------
# verdicts that are neither PASS nor FAIL


# -- verdicts that are neither PASS nor FAIL ------------------------------------------------------

def _verdict(status, text="23.500 cycles (min 23.4)"):
    return assertions.Verdict(fact="lds", arch="sm_90", status=status, expected="23 ± 0.25 cycles", measured=23.5,
                              measured_text=text, unit="cycles", method="m", source="s")


@pytest.mark.parametrize("status, head", [
    (assertions.ERROR, "fact lds on sm_90 errored:"),
    (assertions.UNSTABLE, "fact lds on sm_90 failed once but did not fail again when measured again:"),
    (assertions.SCHEDULE_CHANGED, "fact lds on sm_90 compiler schedule changed:"),
    (assertions.NOISY, "fact lds on sm_90 could not be measured reliably:"),
])
def test_each_status_opens_its_message_with_what_happened(status, head):
    assert _verdict(status).message().splitlines()[:3] == [head, "  expected: 23 ± 0.25 cycles",
                                                           "  measured: 23.500 cycles (min 23.4)"]


def test_a_confirmed_failure_lists_the_first_line_of_each_measurement():
    first = _verdict(assertions.FAIL, "0/2 cases within ±2% of the model\n            off the model: a; b")
    again = _verdict(assertions.FAIL, "1/2 cases within ±2% of the model\n            off the model: b")
    v = confirmation.confirm(first, lambda: again)
    assert [a["measured_text"] for a in v.attempts] == ["0/2 cases within ±2% of the model",
                                                        "1/2 cases within ±2% of the model",
                                                        "1/2 cases within ±2% of the model"]


# ----------------------------------------------------------------------------------------------
# a passing reading off its unit's own baseline: measured again before the run's end compares it


def _lds(value: float, noise: float = 0.0) -> A.Verdict:
    return A.evaluate(LDS, Measurement.given("lds", [value * (1 - noise), value, value * (1 + noise)]))


def _off_baseline(base: float, band: float):
    """The unit compare's question, for one baseline reading: is this reading off it by more than ``band``?"""
    return lambda v: abs(v.measured - base) > band


def test_a_reading_on_its_baseline_is_not_measured_again():
    calls = []
    first = _lds(23.0)
    assert confirmation.confirm_move(first, _off_baseline(23.0, 0.23), lambda: calls.append(1)) is first and calls == []


def test_a_reading_moved_once_is_judged_by_the_median_of_three():
    """A transient (the L2 read's high state) moves one reading: the median is on the baseline."""
    again = iter([_lds(22.95), _lds(23.05)])
    v = confirmation.confirm_move(_lds(23.3), _off_baseline(23.0, 0.23), lambda: next(again))
    assert v.status == A.PASS and v.measured == pytest.approx(23.05)
    assert [a["measured"] for a in v.attempts] == pytest.approx([23.3, 22.95, 23.05])
    assert v.flags[-1] == (f"{confirmation.MEASURED_AGAIN_OFF_BASELINE} in 1 of 3 measurements (23.3, 22.95, 23.05 cycles): "
                           "the median judged")


def test_a_unit_that_changed_reads_moved_in_the_median_too():
    again = iter([_lds(23.28), _lds(23.32)])
    v = confirmation.confirm_move(_lds(23.3), _off_baseline(23.0, 0.23), lambda: next(again))
    assert v.measured == pytest.approx(23.3) and "in 3 of 3 measurements" in v.flags[-1]


def test_a_failing_or_unrepeatable_reading_is_left_to_its_own_rules():
    failing = _lds(24.0)  # outside the fact's band: confirm() measures it again, as a failure
    assert failing.status == A.FAIL
    assert confirmation.confirm_move(failing, _off_baseline(23.0, 0.23), lambda: pytest.fail("measured again")) is failing
    moved = _lds(23.3)
    assert confirmation.confirm_move(moved, _off_baseline(23.0, 0.23), None) is moved


def test_a_noisy_measurement_again_does_not_judge():
    """Measured again, a reading that never settled says nothing of the fact: the median of the rest, and
    with two left none is theirs to take, so the first reading stands (its move is compared as read)."""
    noisy = _lds(22.0, noise=0.2)
    assert noisy.status == A.NOISY
    again = iter([noisy, _lds(23.02)])
    v = confirmation.confirm_move(_lds(23.3), _off_baseline(23.0, 0.23), lambda: next(again))
    assert v.measured == pytest.approx(23.3) and len(v.attempts) == 3 and v.status == A.PASS
    assert v.flags[-1].endswith("2 settled, no median: the first stands")
    again = iter([noisy, _lds(23.02)])  # moved down: the first stands, not the other of the two
    v = confirmation.confirm_move(_lds(22.7), _off_baseline(23.0, 0.23), lambda: next(again))
    assert v.measured == pytest.approx(22.7) and v.flags[-1].endswith("2 settled, no median: the first stands")
    again = iter([noisy, _lds(23.01), _lds(22.99), noisy])
    v = confirmation.confirm_move(_lds(23.3), _off_baseline(23.0, 0.23), lambda: next(again), times=4)
    assert v.measured == pytest.approx(23.01) and v.flags[-1].endswith("the median judged")
    again = iter([_lds(23.28), _lds(23.0), _lds(23.01), _lds(22.99)])  # five settled: the third of them
    v = confirmation.confirm_move(_lds(23.3), _off_baseline(23.0, 0.23), lambda: next(again), times=4)
    assert v.measured == pytest.approx(23.01) and "in 2 of 5 measurements" in v.flags[-1]
