"""CPU tests of the cache-capacity sweeps (hwtests/specs_caches.py): the footprint grids, the sm_90
carve-outs, the chase's layout, how a sweep is cut into plateaus and steps (given sweeps shaped as
the published Hopper measurements are, and planted wrong ones that must be refused), and the
carve-out hint a KernelSpec passes to the driver (pytest_gpuprops/driver_launch.py)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gp_testing import DeviceWords

from pytest_gpuprops import driver_launch
from pytest_gpuprops.kernel_spec import KernelSpec

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import specs_caches as sc  # noqa: E402

KIB, MIB = sc.KIB, sc.MIB


# ---------------------------------------------------------------------------------------------- grids

def test_linear_grid_includes_both_ends():
    assert sc.linear_grid(8, 20, 4) == [8, 12, 16, 20]
    assert sc.linear_grid(4, 4, 4) == [4]


@pytest.mark.parametrize("lo, hi, step", [(0, 8, 4), (6, 20, 4), (8, 22, 4), (8, 4, 4), (8, 16, 0)])
def test_linear_grid_refuses_ends_off_the_step(lo, hi, step):
    with pytest.raises(ValueError, match="grid"):
        sc.linear_grid(lo, hi, step)


def test_log_grid_doubles_every_per_octave_points_on_the_quantum():
    g = sc.log_grid(4 * MIB, 64 * MIB, 2, 2 * MIB)
    # 4, 5.66 -> 4 (dropped: repeats), 8, 11.3 -> 10, 16, 22.6 -> 22, 32, 45.3 -> 44, 64
    assert g == [m * MIB for m in (4, 8, 10, 16, 22, 32, 44, 64)]
    assert all(f % (2 * MIB) == 0 for f in g) and g == sorted(set(g))


def test_log_grid_ends_at_hi_even_off_the_octaves():
    assert sc.log_grid(64 * MIB, 96 * MIB, 1, 32 * MIB) == [64 * MIB, 96 * MIB]


@pytest.mark.parametrize("lo, hi, per_octave, quantum", [(MIB, 8 * MIB, 2, 2 * MIB), (4 * MIB, 9 * MIB, 2, 2 * MIB),
                                                          (4 * MIB, 8 * MIB, 0, 2 * MIB)])
def test_log_grid_refuses_what_is_off_the_quantum(lo, hi, per_octave, quantum):
    with pytest.raises(ValueError, match="log grid"):
        sc.log_grid(lo, hi, per_octave, quantum)


# ---------------------------------------------------------------------------------------------- carve-outs

@pytest.mark.parametrize("shared_mem, carveout", [(0, 8), (7 * KIB, 8), (7 * KIB + 1, 16), (99 * KIB, 100),
                                                  (99 * KIB + 1, 132), (227 * KIB, 228)])
def test_the_smallest_carveout_holds_the_block_and_its_reserved_kib(shared_mem, carveout):
    assert sc.smallest_carveout_kib(shared_mem) == carveout


def test_no_reserve_fits_carveout_zero_and_too_much_is_refused():
    assert sc.smallest_carveout_kib(0, reserved=0) == 0
    with pytest.raises(ValueError, match="exceed sm_90's largest carve-out, 228 KiB"):
        sc.smallest_carveout_kib(227 * KIB + 1)


def test_the_carveouts_launch_what_their_names_say():
    """smem100 and smem228 force their carve-out by their shared memory; smem0 takes none. (smem0's
    block still reserves 1 KiB, so its smallest carve-out is 8 KiB: the sweep says which it got.)"""
    c = sc.CARVEOUTS
    assert (c["smem100"].expected_smem_kib, c["smem100"].expected_l1_kib) == (100, 156)
    assert (c["smem228"].expected_smem_kib, c["smem228"].expected_l1_kib) == (228, 28)
    assert c["smem0"].shared_mem == 0 and c["smem0"].hint == 0 and c["smem228"].hint == 100
    for carve in c.values():
        fs = carve.footprints()
        lo, hi, step = carve.window_kib
        assert fs == sorted(set(fs)) and fs[-1] == hi * KIB and all(f % sc.LINE == 0 for f in fs)
        # the window brackets the expected L1 (and smem0's 256 KiB) with room for the miss level
        assert lo * KIB < carve.expected_l1_kib * KIB < hi * KIB - 3 * step * KIB
        assert fs[0] <= 12 * KIB  # L1 hits at any carve-out: the sweep's reference level
    assert c["smem0"].window_kib[1] * KIB > sc.L1_SMEM_KIB * KIB


def test_l1_chase_launch_carries_the_carveout_and_the_ca_chain():
    spec = sc.l1_chase(sc.CARVEOUTS["smem228"], 32 * KIB)
    assert (spec.source, spec.kernel, spec.shared_mem, spec.carveout) == \
        ("l1_capacity_chase.cu", "capacity_chase", 227 * KIB, 100)
    assert spec.defines == {"CACHE": 0, "UNROLL": sc.CAP_UNROLL}
    assert spec.region == {"LDG.E.64.STRONG.SM": sc.CAP_UNROLL}
    assert "carveout=100%" in spec.label()
    tlb = sc.capacity_chase(1, 8 * MIB, 2 * MIB)
    assert tlb.region == {"LDG.E.64.STRONG.GPU": sc.CAP_UNROLL} and tlb.carveout is None and tlb.shared_mem == 0
    with pytest.raises(ValueError, match="not a multiple of the stride"):
        sc.capacity_chase(1, 3 * MIB, 2 * MIB)


# ---------------------------------------------------------------------------------------------- the carve-out hint

@pytest.mark.parametrize("bad", [-1, 101])
def test_a_carveout_outside_0_to_100_percent_is_refused(bad):
    with pytest.raises(ValueError, match="carveout .*percent 0..100"):
        KernelSpec("k.cu", "k", carveout=bad)


def test_a_carveout_takes_the_ex_launch_and_none_does_not():
    assert driver_launch.needs_launch_ex(KernelSpec("k.cu", "k", carveout=0), ())
    assert not driver_launch.needs_launch_ex(KernelSpec("k.cu", "k"), ())


class _Driver:
    """The driver calls allow_launch makes, recorded; each answers ``err``."""

    def __init__(self, err=0):
        self.calls, self.err = [], err
        self.CUfunction_attribute = SimpleNamespace(
            CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT="carveout",
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dynamic",
            CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED="non_portable")

    def cuFuncSetAttribute(self, f, attr, value):
        self.calls.append((f, attr, value))
        return (self.err,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_INVALID_VALUE")

    def cuGetErrorString(self, err):
        return (0, b"invalid argument")


@pytest.mark.parametrize("carveout, shared_mem, calls", [
    (None, 0, []),
    (0, 0, [("f", "carveout", 0)]),
    (100, 227 * KIB, [("f", "max_dynamic", 227 * KIB), ("f", "carveout", 100)]),
])
def test_allow_launch_sets_the_carveout_hint_as_the_spec_says(carveout, shared_mem, calls):
    d = _Driver()
    driver_launch.allow_launch(d, "f", KernelSpec("k.cu", "k", carveout=carveout, shared_mem=shared_mem))
    assert d.calls == calls


def test_a_refused_carveout_is_a_launch_error_naming_it():
    with pytest.raises(driver_launch.KernelLaunchError, match="carve-out of 50 % .*CUDA_ERROR_INVALID_VALUE"):
        driver_launch.allow_launch(_Driver(err=1), "f", KernelSpec("k.cu", "k", carveout=50))


# ---------------------------------------------------------------------------------------------- the chase layout

# the last case wraps its skew round the block (100 x 4224 B past 256 KiB), as a TLB sweep's 600 pages of 2 MiB do,
# in a 25 MiB buffer rather than theirs of 1.2 GB (2 s of the CPU suite)
@pytest.mark.parametrize("n, stride, skew", [(2, 128, 0), (7, 128, 0), (40, 2 * MIB, 0), (40, 2 * MIB, sc.TLB_SKEW),
                                             (100, 256 * 1024, sc.TLB_SKEW)])
def test_fill_cycle_writes_one_cycle_through_every_node_and_nothing_else(n, stride, skew):
    base = 0x7F00_0000_0000
    words = np.full((n * stride) // 8 + 16, 0xDEAD, dtype=np.uint64)
    start = sc.fill_cycle(np, words, base, n, stride, seed=3, skew=skew)
    seen, p = [], start
    for _ in range(n):
        block, into = divmod(p - base, stride)
        assert into == block * skew % stride  # node i sits (i x skew) mod stride into its block
        seen.append(block)
        p = int(words[(p - base) // 8])
    assert p == start and sorted(seen) == list(range(n))
    # nothing else written: the n node words hold addresses (never 0xDEAD), and they are the only words
    # that are not 0xDEAD (counted, not masked: a mask and a copy of a large buffer cost seconds)
    nodes = (np.arange(n) * stride + np.arange(n) * skew % stride) // 8
    assert (words[nodes] != 0xDEAD).all()
    assert np.count_nonzero(words != 0xDEAD) == n


def test_few_pages_get_several_nodes_each_all_in_their_page():
    """2 blocks of 32 MiB, 128 nodes each, all in the block's first 2 MiB page, each on its own line."""
    n = sc.tlb_nodes_per_page(2)
    assert n == 128 and sc.tlb_nodes_per_page(256) == 1 and sc.tlb_nodes_per_page(100) == 3
    off = sc.node_offsets(2, 32 * MIB, sc.TLB_SKEW, n, within=2 * MIB)
    block, into = np.divmod(off, 32 * MIB)
    assert list(np.bincount(block)) == [n, n] and (into < 2 * MIB).all()
    assert len(set((off // sc.LINE).tolist())) == 2 * n
    spec = sc.tlb_chase(4 * MIB, 2 * MIB)
    assert spec.defines == {"CACHE": 1, "UNROLL": sc.CAP_UNROLL} and spec.region == {"LDG.E.64.STRONG.GPU": 256}


def test_fill_cycle_of_several_nodes_a_page_visits_them_all():
    words = np.zeros(3 * 2 * MIB // 8, dtype=np.uint64)
    start = sc.fill_cycle(np, words, 0, 3, 2 * MIB, skew=sc.TLB_SKEW, per_block=86)
    seen, p = set(), start
    for _ in range(3 * 86):
        seen.add(p)
        p = int(words[p // 8])
    assert p == start and seen == set(sc.node_offsets(3, 2 * MIB, sc.TLB_SKEW, 86).tolist())


@pytest.mark.parametrize("kw, match", [(dict(per_block=2, stride=2 * MIB, within=4 * MIB), "within"),
                                       (dict(per_block=20, stride=2048), "up to within"),
                                       (dict(per_block=0, stride=128), "nodes a block")])
def test_node_offsets_refuse_nodes_that_do_not_fit_their_block(kw, match):
    with pytest.raises(ValueError, match=match):
        sc.node_offsets(4, **kw)


def test_a_skew_spreads_page_aligned_nodes_over_lines_and_4k_blocks():
    words = np.zeros(64 * 2 * MIB // 8, dtype=np.uint64)
    sc.fill_cycle(np, words, 0, 64, 2 * MIB, skew=sc.TLB_SKEW)
    at = np.flatnonzero(words) * 8 % (2 * MIB)
    assert len(set(at % (4 * KIB))) > 16 and len(set(at // (4 * KIB))) > 16


@pytest.mark.parametrize("n, stride, match", [(1, 128, "at least 2 nodes"), (4, 12, "multiples of 8"),
                                              (9, 128, "the buffer has")])
def test_fill_cycle_refuses_a_layout_that_is_no_chase(n, stride, match):
    with pytest.raises(ValueError, match=match):
        sc.fill_cycle(np, np.zeros(128, dtype=np.uint64), 0, n, stride)


# ---------------------------------------------------------------------------------------------- constant table

def test_const_stride_is_coprime_so_the_table_is_one_cycle():
    assert sc.const_stride(64) == 17
    assert sc.const_stride(1088) == 19  # 1088 = 64 x 17
    assert sc.const_stride(255) == 19  # 3, 5 and 17 divide 255
    for f in sc.CONST_FOOTPRINTS:
        nodes, s = f // 4, sc.const_stride(f // 4)
        assert len({(i * s) % nodes for i in range(nodes)}) == nodes


def test_const_sweep_spans_the_bank_finely_where_a_first_level_sits():
    fs = sc.CONST_FOOTPRINTS
    assert fs[0] == 256 and fs[-1] == 64 * KIB and fs == sorted(set(fs))
    assert [b - a for a, b in zip(fs, fs[1:]) if b <= 4 * KIB] == [256] * 15
    spec = sc.const_sweep_point(4352)
    assert spec.defines == {"NODES": 1088, "STRIDE": 19, "UNROLL": sc.CAP_UNROLL, "PASSES": 2, "WARM_HOPS": 1088}
    assert spec.region == {"LDC": sc.CAP_UNROLL}


@pytest.mark.parametrize("bad", [4, 6, 64 * KIB + 4])
def test_const_sweep_point_refuses_a_table_past_the_bank_or_not_whole_words(bad):
    with pytest.raises(ValueError, match="constant table"):
        sc.const_sweep_point(bad)


# ---------------------------------------------------------------------------------------------- TLB grids

def test_tlb_buffer_is_half_the_free_memory_on_the_coarsest_stride():
    assert sc.tlb_buffer_bytes(79 * 1024 * MIB) == (79 * 512 * MIB) // (32 * MIB) * (32 * MIB)
    assert sc.tlb_buffer_bytes(1024 * 1024 * MIB) == sc.TLB_MAX_BYTES
    with pytest.raises(ValueError, match="fewer than two 32 MiB strides"):
        sc.tlb_buffer_bytes(100 * MIB)


def test_tlb_footprints_start_at_two_nodes_or_more_and_end_at_the_buffer():
    buf = sc.tlb_buffer_bytes(79 * 1024 * MIB)
    for stride, (lo, _) in sc.TLB_STRIDES.items():
        fs = sc.tlb_footprints(stride, buf)
        assert fs[0] == lo and fs[0] // stride >= 2 and fs[-1] == buf
        assert all(f % stride == 0 for f in fs) and fs == sorted(set(fs))
    assert sc.TLB_FACTS == {"tlb_no_step_to_half_memory_stride2m": 2 * MIB, "tlb_no_step_to_half_memory_stride32m": 32 * MIB}


def test_the_tlb_condition_holds_on_a_flat_sweep_and_fails_on_a_step():
    """The H100's sweep (276-279 cycles from 4 MiB to 40 GiB) holds; the same sweep with the L2-hit
    level stepping to a page walk's past 8 GiB does not, and says where; an unreadable sweep does not."""
    grid = sc.tlb_footprints(2 * MIB, 40256 * MIB)
    flat = [(f, 277.5 + (i % 3) - 1) for i, f in enumerate(grid)]
    holds, text = sc.tlb_flat(flat)
    assert holds and text.startswith("no step: 276.5 .. 278.5 cycles a hop over 4 MiB .. 40256 MiB")
    stepped = [(f, c if f <= 8192 * MIB else c + 420) for f, c in flat]
    holds, text = sc.tlb_flat(stepped)
    assert not holds and "1 step(s)" in text and "after 8192 MiB (278 -> 698 cycles)" in text
    holds, text = sc.tlb_flat([(f, 100.0 * (i + 1)) for i, f in enumerate(grid)])
    assert not holds and text.startswith("the sweep cannot be read")


# ---------------------------------------------------------------------------------------------- reading sweeps

def _l1_sweep(capacity_kib, hit=33.0, miss=260.0, lo=128, hi=288, step=4, ramp=0):
    """An L1 sweep as Hopper's reads: hits up to the capacity, then (``ramp`` points of a gradual rise,
    as a cache not strictly LRU gives) L2 hits."""
    pts = [(4 * KIB, hit + 0.1), (8 * KIB, hit), (12 * KIB, hit - 0.1)]
    for k in range(lo, hi + 1, step):
        over = (k - capacity_kib) // step
        c = hit if over <= 0 else (hit + (miss - hit) * min(1.0, over / (ramp + 1)))
        pts.append((k * KIB, c + 0.2 * (k % 3)))
    return pts


@pytest.mark.parametrize("capacity, ramp", [(256, 0), (240, 0), (256, 3), (200, 5)])
def test_l1_capacity_is_the_last_footprint_of_the_hit_plateau(capacity, ramp):
    s = sc.l1_capacity(_l1_sweep(capacity, ramp=ramp))
    assert (s.reach, s.above) == (capacity * KIB, (capacity + 4) * KIB)
    assert s.below_level == pytest.approx(33.0, abs=0.3) and s.above_level > 1.5 * s.below_level


def test_l1_capacity_at_the_largest_carveout():
    pts = _l1_sweep(28, lo=14, hi=64, step=2, ramp=1)
    assert sc.l1_capacity(pts).reach == 28 * KIB


def test_a_planted_wrong_capacity_is_not_what_the_sweep_reads():
    """The sweep of a 256 KiB L1 does not read as 240 KiB, nor one step off."""
    assert sc.l1_capacity(_l1_sweep(256)).reach not in (240 * KIB, 252 * KIB, 260 * KIB)


def test_a_sweep_that_never_leaves_l1_is_refused():
    with pytest.raises(sc.SweepError, match="never leaves the L1-hit level"):
        sc.l1_capacity(_l1_sweep(400))


def test_a_sweep_whose_rise_is_too_small_for_an_l2_hit_is_refused():
    with pytest.raises(sc.SweepError, match="never leaves the L1-hit level"):
        sc.l1_capacity(_l1_sweep(200, miss=40.0))


def test_a_sweep_that_falls_back_to_the_hit_level_is_refused():
    pts = _l1_sweep(200)
    pts = [(f, 33.0 if f >= 260 * KIB else c) for f, c in pts]  # L2 latency, then L1 hits again
    with pytest.raises(sc.SweepError, match="latency falls from 260.* a capacity sweep only climbs"):
        sc.l1_capacity(pts)


def test_a_sweep_without_a_hit_level_at_its_start_is_refused():
    pts = [(4 * KIB, 33.0), (8 * KIB, 60.0), (12 * KIB, 90.0)] + [(k * KIB, 260.0) for k in range(128, 160, 4)]
    with pytest.raises(sc.SweepError, match="not one L1-hit level"):
        sc.l1_capacity(pts)


@pytest.mark.parametrize("points, match", [([(4096, 30.0)], "at least 2"), ([(4096, 30.0), (4096, 31.0)], "twice"),
                                           ([(4096, 30.0), (8192, float("nan"))], "not positive"),
                                           ([(4096, 30.0), (8192, 0.0)], "not positive")])
def test_a_malformed_sweep_is_refused(points, match):
    with pytest.raises(sc.SweepError, match=match):
        sc.plateaus(points)


def test_plateaus_merge_a_slow_drift_and_skip_a_transition():
    pts = [(1, 100.0), (2, 103.0), (3, 106.0), (4, 108.5), (5, 150.0), (6, 200.0), (7, 201.0), (8, 202.0)]
    ps = sc.plateaus(pts)
    # 100..106 is one run; 108.5 starts another within 10 %: merged; 150 alone is the transition
    assert [(p.first, p.last, p.points) for p in ps] == [(1, 4, 4), (6, 8, 3)]
    assert ps[0].level == pytest.approx(104.5)


def _const_sweep(l1=2 * KIB, l15=None, hit=28.0, next_level=70.0, beyond=200.0):
    pts = []
    for f in sc.CONST_FOOTPRINTS:
        c = hit if f <= l1 else next_level if l15 is None or f <= l15 else beyond
        pts.append((f, c + 0.05 * (f % 3)))
    return pts


def test_const_levels_read_the_first_level_and_the_one_behind_it():
    levels = sc.const_levels(_const_sweep(2 * KIB, 32 * KIB))
    assert [(s.reach, s.above) for s in levels] == [(2 * KIB, 2 * KIB + 256), (32 * KIB, 36 * KIB)]
    assert levels[0].below_level == pytest.approx(28.0, abs=0.1)
    assert levels[0].above_level == pytest.approx(70.0, abs=0.1)


def test_const_levels_with_a_bank_inside_the_second_level_have_one_step():
    levels = sc.const_levels(_const_sweep(2 * KIB))
    assert len(levels) == 1 and levels[0].reach == 2 * KIB


def test_the_constant_facts_read_their_level_of_one_shared_sweep():
    l1, l15 = sc.CONST_FACTS
    assert (l1.name, l15.name) == ("const_l1_capacity_bytes", "const_l15_capacity_bytes")
    assert l1.shared == l15.shared == sc.CONST_SWEEP and l1.xs == l15.xs == tuple(sc.CONST_FOOTPRINTS)
    assert l1.point(4352).defines == sc.const_sweep_point(4352).defines and {f.unit for f in sc.CONST_FACTS} == {"bytes"}
    two = _const_sweep(2 * KIB, 32 * KIB)
    assert l1.read(two)[0] == 2 * KIB and l15.read(two)[0] == 32 * KIB
    info = l15.read(two)[1]
    assert [x["reach"] for x in info["steps"]] == [2 * KIB, 32 * KIB] and info["plateaus"][0]["first"] == 256
    assert l1.method.startswith(sc.CONST_METHOD) and l1.method.endswith("the first (constant L1 hit) plateau")
    # the H100's: the bank lies inside the second level, so the second capacity is no value here, not an error
    one = _const_sweep(2 * KIB)
    assert l1.read(one)[0] == 2 * KIB
    with pytest.raises(sc.NoSuchLevel, match="does not reach past level 2 .*the last at 2048 B; none after it up "
                                             "to 65536 B"):
        l15.read(one)


def test_a_flat_constant_sweep_is_refused():
    with pytest.raises(sc.SweepError, match="no step in the constant sweep"):
        sc.const_levels(_const_sweep(l1=64 * KIB))


def _tlb_sweep(reaches_mib, levels, stride=2 * MIB, buf=40 * 1024 * MIB):
    pts = []
    for f in sc.tlb_footprints(stride, buf):
        k = sum(f > r * MIB for r in reaches_mib)
        pts.append((f, levels[k] * (1 + 0.01 * ((f // stride) % 3 - 1))))
    return pts


def test_tlb_steps_read_each_level_s_reach_to_the_grid():
    pts = _tlb_sweep([32, 8192], [300.0, 420.0, 900.0])
    s = sc.tlb_steps(pts)
    grid = [f for f, _ in pts]
    assert [x.reach for x in s] == [max(f for f in grid if f <= 32 * MIB), max(f for f in grid if f <= 8192 * MIB)]
    assert [x.above for x in s] == [min(f for f in grid if f > 32 * MIB), min(f for f in grid if f > 8192 * MIB)]


def test_a_tlb_sweep_without_a_step_reads_none_and_a_noisy_start_is_refused():
    assert sc.tlb_steps(_tlb_sweep([], [300.0])) == []
    pts = _tlb_sweep([], [300.0])
    pts[0] = (pts[0][0], 200.0)
    pts[1] = (pts[1][0], 250.0)
    with pytest.raises(sc.SweepError, match="smallest footprints are not one level"):
        sc.tlb_steps(pts)


def test_the_sweep_table_says_each_point():
    assert sc.table([(8 * KIB, 33.04), (4 * KIB, 33.0)], KIB, "KiB") == "4 KiB: 33.0, 8 KiB: 33.0"


def test_a_sweep_of_numpy_numbers_reads_as_one_of_python_numbers():
    pts = _l1_sweep(256)
    arr = [(np.int64(f), np.float64(c)) for f, c in pts]
    assert sc.l1_capacity(arr) == sc.l1_capacity(pts)


def test_each_carveouts_fact_reads_its_sweep_with_the_carveout_beside_it():
    """The L1 facts are sweep specs: each carve-out's points, its value the L1-hit plateau's last footprint in
    KiB, the driver's readback of the carve-out reported beside it (never deciding the fact)."""
    by_name = {f.name: f for f in sc.L1_FACTS}
    assert set(by_name) == {sc.l1_fact(c) for c in sc.CARVEOUTS} and {f.unit for f in sc.L1_FACTS} == {"KiB"}
    assert sc.FACTS == sc.L1_FACTS + sc.CONST_FACTS
    fact = by_name["l1_capacity_kib_smem228"]
    c = sc.CARVEOUTS["smem228"]
    assert fact.xs == tuple(c.footprints()) and fact.report is sc.carveout_readback
    assert fact.point(32 * KIB).shared_mem == c.shared_mem and fact.point(32 * KIB).carveout == c.hint
    value, info = fact.read(_l1_sweep(20, lo=14, hi=64, step=2))
    assert value == 20.0 and info["knee_kib"] == 20.0 and info["next_kib"] == 22.0
    assert (info["carveout_kib_implied"], info["l1_kib_expected"], info["grid_step_kib"]) == (228, 28, 2)
    assert info["plateaus"][0]["first"] == 4 * KIB  # the small footprints and the window up to 20 KiB: one level
    assert "227 KiB of dynamic shared memory and PREFERRED_SHARED_MEMORY_CARVEOUT = 100 %" in fact.method
    with pytest.raises(sc.SweepError, match="never leaves the L1-hit level"):
        fact.read([(f, 33.0) for f in c.footprints()])


def _stand_in_cupy(made):
    def empty(n, dtype):
        made.append(np.zeros(n, dtype=dtype).view(DeviceWords))
        return made[-1]
    return SimpleNamespace(empty=empty, asarray=np.asarray, zeros=np.zeros, uint64=np.uint64, int32=np.int32,
                           cuda=SimpleNamespace(runtime=SimpleNamespace(deviceSynchronize=lambda: None)))


@pytest.mark.parametrize("placements", [1, 3])
def test_a_chase_over_placements_lays_one_cycle_a_slice_each_starting_where_its_launch_begins(placements):
    """l1_capacity_chase.cu PLACEMENTS=K: launch n walks from start[n mod K]; each cycle must stay in its own
    slice of the buffer and visit every line of it."""
    made = []
    footprint, stride = 64 * sc.LINE, sc.LINE
    spec = sc.capacity_chase(1, footprint, stride, placements=placements)
    words, starts, out, hops = spec.args(_stand_in_cupy(made))
    assert words is made[0] and words.size == placements * footprint // 8 and int(hops) == 64
    assert out.size == (1 if placements == 1 else 2) and not out.any()  # out[1]: the launch counter, from 0
    assert spec.defines == {"CACHE": 1, "UNROLL": sc.CAP_UNROLL, **({"PLACEMENTS": 3} if placements > 1 else {})}
    assert len(starts) == placements
    orders = []
    for k, start in enumerate(int(s) for s in starts):
        lo, hi = DeviceWords.BASE + k * footprint, DeviceWords.BASE + (k + 1) * footprint
        seen, p = [], start
        for _ in range(64):
            assert lo <= p < hi and (p - lo) % stride == 0, f"cycle {k} left its slice at {p:#x}"
            seen.append(p)
            p = int(words[(p - DeviceWords.BASE) // 8])
        assert p == start and sorted(seen) == list(range(lo, hi, stride))  # one cycle through every line
        orders.append([(q - lo) // stride for q in seen])
    assert len({tuple(o) for o in orders}) == placements  # a seed each: not one order shifted


def test_placements_below_one_or_past_a_given_buffer_are_refused():
    with pytest.raises(ValueError, match="0 placements: expected 1 or more"):
        sc.capacity_chase(1, 64 * sc.LINE, sc.LINE, placements=0)
    footprint = 64 * sc.LINE
    short = np.zeros(2 * footprint // 8 - 1, dtype=np.uint64).view(DeviceWords)  # one word short of 2 slices
    with pytest.raises(ValueError, match=f"2 placements of {footprint} bytes need {2 * footprint} bytes; the buffer "
                                         f"has {2 * footprint - 8}"):
        sc.capacity_chase(1, footprint, sc.LINE, placements=2, buffer=short).args(_stand_in_cupy([]))


def test_placements_in_a_given_buffer_take_its_first_slices_and_allocate_nothing():
    """A sweep's reserved buffer, larger than one point needs: the point's K cycles lie in its first K slices."""
    footprint, made = 64 * sc.LINE, []
    big = np.zeros(5 * footprint // 8, dtype=np.uint64).view(DeviceWords)
    words, starts, _, _ = sc.capacity_chase(1, footprint, sc.LINE, placements=3, buffer=big).args(_stand_in_cupy(made))
    assert words is big and made == []
    for k, start in enumerate(int(s) for s in starts):
        assert DeviceWords.BASE + k * footprint <= start < DeviceWords.BASE + (k + 1) * footprint
    assert not big[3 * footprint // 8:].any()  # nothing written past the third slice
