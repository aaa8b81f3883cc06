"""CPU tests of the L2 partition sweep (hwtests/specs_l2_partitions.py): how the sweep is read (given the
H100's sweep and planted wrong ones that must read otherwise or be refused), the footprints, the one
sweep behind the three facts, and the launch's shape."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuprops.stats import stop_reason

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import fact_tests as ft  # noqa: E402
import specs_caches as sc  # noqa: E402
import specs_l2_partitions as l2p  # noqa: E402

MIB = sc.MIB
#: H100 GPU-8c0bc4db (L2 50 MiB), driver 580.159.04, CUDA 13.0, 2026-11-27: footprint (MiB) -> cycles a hop,
#: the median of each point's launches (the sweep's probe, 2 MiB steps)
H100_MIB = {20: 287.1, 22: 287.7, 24: 295.9, 26: 395.4, 28: 491.0, 30: 528.8, 32: 537.1, 34: 531.3, 36: 538.5,
            38: 527.1, 40: 524.2, 42: 524.0, 44: 537.7, 46: 534.5, 48: 545.9, 50: 573.0, 52: 637.4, 54: 664.9,
            56: 679.0, 58: 695.2, 64: 690.3, 80: 683.9}
H100 = [(mib * 2, c) for mib, c in H100_MIB.items()]  # % of 50 MiB


def test_the_h100_sweep_reads_the_near_half_the_far_level_and_the_whole_l2():
    lv = l2p.levels(H100)
    assert lv.near == 287.7 and lv.dram == 690.3
    assert lv.far == pytest.approx(532.9) and lv.far_points == 10  # 60 .. 96 %, 524.0-545.9: their median
    # the share of hops still near: 1 up to 48 % (295.9, within 3 % of 287.7), then 52 % (395.4) and 56 % (491.0),
    # 0 from 60 % (528.8, within 3 % of 532.9); the area from 40 % on
    share52, share56 = (532.9 - 395.4) / (532.9 - 287.7), (532.9 - 491.0) / (532.9 - 287.7)
    assert lv.near_reach == pytest.approx(40 + 8 + 2 * (1 + share52) + 2 * (share52 + share56) + 2 * share56)
    # the share still at the far level: 1 up to 96 % (545.9, within 3 %), then 100 .. 108 %, 0 from 112 % (679.0)
    s100, s104, s108 = ((690.3 - c) / (690.3 - 532.9) for c in (573.0, 637.4, 664.9))
    assert lv.reach == pytest.approx(76 + 20 + 2 * (1 + s100) + 2 * (s100 + s104) + 2 * (s104 + s108) + 2 * s108)
    assert 52.9 < lv.near_reach < 53 and 102.9 < lv.reach < 103


def test_a_sharp_step_reads_where_it_is_and_no_one_point_decides_a_gradual_one():
    sharp = [(x, 290.0 if x <= 50 else 530.0 if x <= 100 else 690.0) for x in l2p.SHARES_PCT]
    lv = l2p.levels(sharp)
    assert lv.near_reach == pytest.approx(51.0) and lv.reach == pytest.approx(101.0)  # half-way into the next step
    # one transition point read 10 % off moves the read by a fraction of the grid's step, not a whole one
    bumped = [(x, c * 1.1 if x == 52 else c) for x, c in H100]
    assert abs(l2p.levels(bumped).near_reach - l2p.levels(H100).near_reach) < 1.0


def test_each_fact_reads_its_own_value_from_the_one_sweep_with_the_levels_beside_it():
    values = {f.name: f.read(H100) for f in l2p.FACTS}
    assert values[l2p.NEAR_FACT][0] == 52.93 and values[l2p.REACH_FACT][0] == 102.97
    assert values[l2p.FAR_FACT][0] == 532.9
    info = values[l2p.FAR_FACT][1]
    assert info == values[l2p.NEAR_FACT][1] and info["dram_cycles"] == 690.3 and info["near_hit_reach_pct"] == 52.93


def test_a_near_partition_smaller_by_4_percent_of_the_l2_reads_otherwise():
    """The curve moved 4 % of the L2 down the footprints on its near step reads a near reach ~4 lower."""
    moved = [(x - 4, c) for x, c in H100 if 44 < x < 60] + [(x, c) for x, c in H100 if x <= 40 or x >= 60]
    moved.append((56, 530.0))  # the far level where 56 % read on the way up
    assert l2p.levels(moved).near_reach == pytest.approx(l2p.levels(H100).near_reach - 4, abs=0.3)


def test_a_sweep_with_one_step_is_refused():
    """An L2 of one level (no far partition), as a GPU without partitions would read."""
    one = [(x, 290.0 if x <= 100 else 690.0) for x in l2p.SHARES_PCT]
    with pytest.raises(sc.SweepError, match="no level between the near one"):
        l2p.levels(one)


def test_a_tail_that_is_not_dram_yet_is_refused():
    short = [(x, c) for x, c in H100 if x <= 104]
    with pytest.raises(sc.SweepError, match="largest footprints are not one level"):
        l2p.levels(short)


def test_a_step_outside_its_window_is_refused():
    """A near partition past MID_PCT (the curve still near at 76 %), and a sweep missing the window's ends."""
    late = [(x, 290.0 if x <= 80 else 530.0 if x <= 100 else 690.0) for x in l2p.SHARES_PCT]
    with pytest.raises(sc.SweepError, match="from 30 % to 76 % the chase does not go from 290.0 to 530.0"):
        l2p.levels(late)
    with pytest.raises(sc.SweepError, match="no points at 40 % and 76 %"):
        l2p.step_at([(x, c) for x, c in H100 if x != 76], 287.7, 532.9, 40, 76)


def test_a_point_within_the_snap_band_of_a_level_is_on_it():
    assert l2p.share_at_low(295.0, 287.0, 530.0) == 1.0 and l2p.share_at_low(516.0, 287.0, 530.0) == 0.0
    assert l2p.share_at_low(408.5, 287.0, 530.0) == pytest.approx(0.5)
    assert l2p.share_at_low(700.0, 287.0, 530.0) == 0.0 and l2p.share_at_low(100.0, 287.0, 530.0) == 1.0


def test_footprints_are_whole_lines_of_the_gpus_l2():
    assert l2p.footprint_bytes(50 * MIB, 52) == 50 * MIB * 52 // 100 // 128 * 128
    assert l2p.footprint_bytes(60 * MIB, 140) == 84 * MIB
    assert l2p.footprint_bytes(1000, 1) == 256  # never fewer than two lines
    for bad in ((0, 50), (50 * MIB, 0), (-1, 10)):
        with pytest.raises(ValueError, match="expected positive numbers"):
            l2p.footprint_bytes(*bad)


def test_the_sweep_spans_both_steps_of_either_sku_with_fine_steps_around_them():
    xs = l2p.SHARES_PCT
    assert list(xs) == sorted(set(xs)) and xs[0] <= 40 and xs[-1] >= 120
    fine = [b - a for a, b in zip(xs, xs[1:]) if 46 <= a < 58 or 96 <= a < 106]
    assert fine and set(fine) == {2}


def test_the_three_facts_share_one_sweep_of_two_builds_the_near_step_over_placements():
    builds = {(k.source, tuple(sorted(k.defines.items()))) for f in l2p.FACTS for k in f.builds()}
    assert builds == {("l1_capacity_chase.cu", (("CACHE", 1), ("UNROLL", sc.CAP_UNROLL))),
                      ("l1_capacity_chase.cu", (("CACHE", 1), ("PLACEMENTS", 8), ("UNROLL", sc.CAP_UNROLL)))}
    for pct in (52, 30, 100):
        spec = l2p.share_chase(pct)
        assert spec.region == {"LDG.E.64.STRONG.GPU": sc.CAP_UNROLL} and (spec.grid, spec.block) == (1, 32)
    # the near step's footprints, each over 8 placements, a launch each (the point their median); the rest as
    # every sweep's point
    stepped = [x for x in l2p.SHARES_PCT if l2p.placements(x) > 1]
    assert stepped == [44, 46, 48, 50, 52, 54, 56, 58, 60, 64] and l2p.share_chase(52).defines["PLACEMENTS"] == 8
    assert "PLACEMENTS" not in l2p.share_chase(40).defines and "PLACEMENTS" not in l2p.share_chase(70).defines
    f = l2p.FACTS[0]
    assert all(f.stop(x) is ft.sweeps.SWEEP for x in l2p.SHARES_PCT if x not in stepped)
    rule = f.stop(52)
    for n in range(1, 8):
        assert stop_reason([300.0] * n, rule, 10.0) is None  # never fewer than one launch a placement
    assert stop_reason([300.0 + k for k in range(8)], rule, 0.0) is not None  # nor more
    assert "44 to 64 % each over 8 placements" in f.method and "the median of the 8 launches" in f.method
    assert {f.shared for f in l2p.FACTS} == {l2p.SWEEP} and {f.scope for f in l2p.FACTS} == {"gpu"}
    assert [f.unit for f in l2p.FACTS] == ["%", "%", "cycles"]


class SharedGpuprops:
    """The fixture's side a shared sweep uses: points read from the H100 sweep, counted."""

    def __init__(self):
        self.measured, self.plots = [], []
        self.runner = SimpleNamespace(session_sm_clock_mhz=lambda: 1980.0)
        self.gpu = SimpleNamespace(index=7)
        levels = dict(H100)
        self.cycles = lambda x: levels.get(x, levels[min(levels, key=lambda k: abs(k - x))])

    def measure(self, label, spec, *, divisor, stop):
        return SimpleNamespace(median=self.cycles(self._x))

    def plot_point(self, plot, **point):
        self.plots.append(plot)


def test_the_sweep_runs_once_for_its_three_facts_and_again_whole_when_one_is_confirmed(monkeypatch):
    g = SharedGpuprops()
    calls = []

    def sweep(gp, label, point, xs, divisor, stop):
        calls.append(label)
        return [(x, g.cycles(x)) for x in xs]
    monkeypatch.setattr(ft.sweeps, "sweep", sweep)
    monkeypatch.setattr(ft, "_SHARED_SWEEPS", {})
    ms = [ft.measure_sweep(g, f) for f in l2p.FACTS]
    assert calls == [l2p.SWEEP] and [m.name for m in ms] == [f.name for f in l2p.FACTS]
    assert ms[2].values[0] > 500 and 45 < ms[0].values[0] < 60 and 95 < ms[1].values[0] < 110
    assert g.plots == [l2p.SWEEP] * len(l2p.SHARES_PCT)  # plotted once, under the sweep's name
    ms[1].remeasure()
    assert calls == [l2p.SWEEP] * 2
    ft.measure_sweep(g, l2p.FACTS[0])  # the confirmation's fresh sweep is the one kept
    assert calls == [l2p.SWEEP] * 2


def test_an_unreadable_shared_sweep_is_swept_afresh_and_the_fresh_one_kept_for_the_other_facts(monkeypatch):
    g = SharedGpuprops()
    calls = []
    flat = [(x, 690.0) for x in l2p.SHARES_PCT]  # DRAM's level everywhere: no near level (a disturbed sweep)

    def sweep(gp, label, point, xs, divisor, stop):
        calls.append(label)
        return flat if len(calls) == 1 else [(x, g.cycles(x)) for x in xs]
    monkeypatch.setattr(ft.sweeps, "sweep", sweep)
    monkeypatch.setattr(ft, "_SHARED_SWEEPS", {})
    ms = [ft.measure_sweep(g, f) for f in l2p.FACTS]
    assert calls == [l2p.SWEEP] * 2  # the unreadable one, then one fresh sweep for all three facts
    assert "unreadable_sweeps" in ms[0].launch and "unreadable_sweeps" not in ms[1].launch
    assert 45 < ms[0].values[0] < 60 and ms[1].launch["sweep"] == ms[0].launch["sweep"]


def test_the_sweep_says_the_clock_state_its_points_met_and_its_facts_keep_it(monkeypatch):
    """The partition sweep's chases leave the SM (KernelSpec.clock_beside), so its cycles follow the clock's
    state: the clocks read beside its points (stats.clock_beside_info) go to each fact's launch info."""
    assert l2p.share_chase(40).clock_beside
    g = SharedGpuprops()
    n = len(l2p.SHARES_PCT)

    def measure(label, spec, *, divisor, stop):
        x = float(label.split()[-2])
        clock = 1980.0 if l2p.SHARES_PCT.index(x) < n // 3 else 1995.0
        return SimpleNamespace(median=g.cycles(x), launch={"clock_beside_mhz": clock})
    g.measure = measure
    monkeypatch.setattr(ft, "_SHARED_SWEEPS", {})
    ms = [ft.measure_sweep(g, f) for f in l2p.FACTS]
    assert {m.launch["clock_beside_mhz"] for m in ms} == {1995.0}
    assert ms[2].launch["clock_beside_range_mhz"] == [1980.0, 1995.0] and ms[2].values[0] > 500
