"""The assertion layer fed with given numbers: it must pass the right ones and fail planted wrong ones."""

import re

import pytest

from pytest_gpuprops import assertions as A
from pytest_gpuprops.facts import Fact, load_facts
from pytest_gpuprops.measure import Measurement

LDS = Fact(name="lds_latency_cycles", arch="sm_86", unit="cycles", method="pointer chase", source="seeds", value=23.0,
           tolerance_abs=0.5)


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
    assert A.bank_read_cycles(ra, rb, rc, A.reuse_mask(reuse)) == cycles


def test_four_banks_would_predict_differently():
    assert A.bank_read_cycles(8, 10, 16, 0, banks=4) == 2  # R8, R16 share bank 0 of 4; R10 is bank 2
    assert A.bank_read_cycles(8, 10, 16, 0, banks=2) == 3


def test_bank_count_inference_picks_the_generating_model():
    cases = [((a, b, c, 0), float(A.bank_read_cycles(a, b, c, 0, banks=2)))
             for a in range(8, 14) for b in range(8, 14) for c in (16, 17)]
    got = {n: A.explained_fraction(cases, banks=n, cycles_per_read=1.0, tolerance_rel=0.06) for n in (1, 2, 4)}
    assert got[2] == 1.0 and got[4] < 1.0 and got[1] < 1.0


def test_model_verdict_lists_the_cases_off_the_model():
    ok = A.evaluate_model("m", "sm_90", [("a", 2.0, 2.02), ("b", 1.0, 1.03)], tolerance_rel=0.06, unit="c",
                          method="x", source="y")
    bad = A.evaluate_model("m", "sm_90", [("a", 2.0, 2.02), ("b", 1.0, 1.5)], tolerance_rel=0.06, unit="c",
                           method="x", source="y")
    assert ok.status == A.PASS and bad.status == A.FAIL and "b: model 1.000 measured 1.500" in bad.measured_text


def test_hmma_issue_model_regimes():
    kw = dict(latency=24.0, issue_interval=6.0, pipe_interval=6.15)
    assert A.hmma_cycles_per_smsp(1, 1, **kw) == 24.0          # dependency bound
    assert A.hmma_cycles_per_smsp(8, 4, **kw) == 6.15          # pipe bound
    assert A.hmma_cycles_per_smsp(2, 1, **kw) == 12.0


def test_packaged_sm90_facts_carry_provenance():
    f = load_facts("sm_90")
    measured = [x for x in f.values() if x.kind == "measured"]
    assert len(measured) >= 15
    assert all(re.match(r"measured on NVIDIA H(100 80GB HBM3|200), driver \d+\.\d+\.\d+, CUDA \d+\.\d+", x.source)
               for x in measured), [x.source for x in measured]
    assert all(x.tolerance > 0 for x in measured if x.name != "register_bank_count")
