"""CPU tests of the sector and line sweeps (hwtests/specs_lines.py): the pair chase's layout followed
word by word, how a pair sweep and the line's capacities are read (given sweeps shaped as the L1 and
L2 are, and planted wrong ones that must read otherwise or be refused), and the launches' shapes."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import specs_caches as sc  # noqa: E402
import specs_lines as sl  # noqa: E402

KIB = sl.KIB


# ---------------------------------------------------------------------------------------------- layout

def test_pair_offsets_visit_each_line_at_its_start_then_at_the_offset():
    visit = sl.pair_offsets(8, 40, seed=3)
    assert visit.shape == (16,)
    starts, seconds = visit[0::2], visit[1::2]
    assert sorted(starts.tolist()) == [i * 128 for i in range(8)]
    assert (seconds - starts).tolist() == [40] * 8
    # a random order of lines, not the buffer's
    assert starts.tolist() != sorted(starts.tolist())


@pytest.mark.parametrize("offset", [0, 4, 12, 128, 136])
def test_pair_offsets_refuse_an_offset_outside_the_line_or_off_the_word(offset):
    with pytest.raises(ValueError, match="offset"):
        sl.pair_offsets(8, offset)


def test_a_pair_chase_needs_two_lines():
    with pytest.raises(ValueError, match="at least 2 lines"):
        sl.pair_offsets(1, 8)


def test_the_pair_cycle_followed_from_its_start_visits_every_node_in_pairs_and_comes_back():
    n, offset, base = 64, 32, 1 << 40
    words = np.zeros(n * 128 // 8, dtype=np.uint64)
    start = sl.fill_pair_cycle(np, words, base, n, offset, seed=1)
    seen, p = [], start
    for _ in range(2 * n):
        seen.append(p - base)
        p = int(words[(p - base) // 8])
    assert p == start
    assert len(set(seen)) == 2 * n
    assert all(b - a == offset and a % 128 == 0 for a, b in zip(seen[0::2], seen[1::2]))
    assert [b // 128 for b in seen[1::2]] != [a // 128 for a in seen[2::2]]  # each pair leaves for a new line


def test_the_pair_cycle_refuses_a_buffer_too_small_for_its_lines():
    with pytest.raises(ValueError, match="lines need"):
        sl.fill_pair_cycle(np, np.zeros(100, dtype=np.uint64), 0, 64, 8)


def test_pair_launches_chase_256_dependent_loads_of_their_level():
    l1 = sl.pair_fact_chase("l1_sector_bytes", 32)
    dram = sl.pair_fact_chase("l2_dram_fill_bytes", 64)
    assert (l1.source, l1.kernel, l1.defines) == ("global_chase.cu", "global_chase", {"CACHE": 0, "UNROLL": 256})
    assert l1.region == {"LDG.E.64.STRONG.SM": 256} and dram.region == {"LDG.E.64.STRONG.GPU": 256}
    assert sl.PAIR_L1_FOOTPRINT >= 32 * 256 * KIB and sl.PAIR_DRAM_FOOTPRINT >= 8 * 60 * 2**20
    with pytest.raises(ValueError, match="warm"):
        sl.pair_chase(0, sl.PAIR_L1_FOOTPRINT, 8, "kernel")
    with pytest.raises(ValueError, match="whole 128-byte lines"):
        sl.pair_chase(0, 1000, 8, "l2")


def test_line_chases_run_at_the_228_kib_carve_out_with_a_node_every_stride():
    spec = sl.line_chase(256, 64 * KIB)
    assert spec.shared_mem == 227 * KIB and spec.carveout == 100 and spec.defines["CACHE"] == 0
    assert all(f % max(sl.LINE_STRIDES) == 0 for f in sl.LINE_FOOTPRINTS)
    # twice the H100's 20 KiB L1 at this carve-out (the densest stride's capacity) lies in the window
    assert sl.LINE_FOOTPRINTS[-1] >= 2 * 2 * 20 * KIB


# ---------------------------------------------------------------------------------------------- pair sweeps

def sweep_of(levels: dict[int, float]):
    return sorted(levels.items())


L1_LIKE = {8: 151.0, 16: 152.5, 24: 150.8, 32: 281.0, 40: 283.0, 48: 279.9, 56: 280.4, 64: 282.2, 96: 281.7,
           120: 280.9}


def test_an_l1_like_pair_sweep_reads_a_32_byte_sector():
    value, info = sl.first_missed_offset(sweep_of(L1_LIKE))
    assert value == 32 and info["hit_cycles"] == pytest.approx(151.0) and info["miss_cycles"] == pytest.approx(281.0)
    assert info["sweep"]["32"] == 281.0


def test_a_fill_of_two_sectors_reads_64_and_a_planted_earlier_miss_reads_16():
    two = {d: (430.0 if d < 64 else 580.0) for d in sl.PAIR_OFFSETS}
    assert sl.first_missed_offset(sweep_of(two))[0] == 64
    planted = {**L1_LIKE, 16: 281.0, 24: 281.0}
    assert sl.first_missed_offset(sweep_of(planted))[0] == 16


def test_a_sweep_that_never_steps_reads_the_whole_line():
    value, info = sl.first_missed_offset(sweep_of({d: 150.0 + d / 100 for d in sl.PAIR_OFFSETS}))
    assert value == 128 and "none" in info["step"]


def test_a_pair_sweep_that_climbs_too_little_or_steps_twice_is_refused():
    small = {d: (150.0 if d < 32 else 168.0) for d in sl.PAIR_OFFSETS}  # 12 %: a step, but no hit turned miss
    with pytest.raises(sc.SweepError, match="under 1.2 x"):
        sl.first_missed_offset(sweep_of(small))
    ragged = {**L1_LIKE, 64: 150.0}  # a hit after the first miss
    with pytest.raises(sc.SweepError, match=r"hit again after the first miss at 32 B \(\[64\]\)"):
        sl.first_missed_offset(sweep_of(ragged))


# ---------------------------------------------------------------------------------------------- the line

def test_capacities_equal_to_128_and_doubled_at_256_read_a_128_byte_line():
    assert sl.line_bytes({64: 20 * KIB, 128: 20 * KIB, 256: 40 * KIB}) == 128
    assert sl.line_bytes({64: 20 * KIB, 128: 22 * KIB, 256: 42 * KIB}) == 128  # a grid step apart: one


def test_a_64_byte_line_reads_64_and_is_not_taken_for_128():
    assert sl.line_bytes({64: 20 * KIB, 128: 40 * KIB, 256: 80 * KIB}) == 64


def test_a_line_as_long_as_every_stride_or_a_capacity_that_does_not_double_is_refused():
    with pytest.raises(sc.SweepError, match="add a longer stride"):
        sl.line_bytes({64: 20 * KIB, 128: 20 * KIB, 256: 20 * KIB})
    with pytest.raises(sc.SweepError, match="not 40960 B"):
        sl.line_bytes({64: 20 * KIB, 128: 20 * KIB, 256: 30 * KIB})
    with pytest.raises(sc.SweepError, match="at least two"):
        sl.line_bytes({128: 20 * KIB})


def test_the_line_is_the_first_run_of_equal_capacities_not_a_later_return_to_it():
    # 64 and 128 differ: the line is 64, whatever 256 reads
    with pytest.raises(sc.SweepError, match="at stride 128"):
        sl.line_bytes({64: 20 * KIB, 128: 30 * KIB, 256: 20 * KIB})
