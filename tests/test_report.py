"""The terminal's tables (report.py) read back: the whole table parsed into rows and compared cell
by cell, whole table lines (per GPU, terminal, compact, GPU x GPU links) against hand-written
expectations; and a pair verdict named and compared across a fleet."""

import dataclasses

import pytest
from test_results import STATIC

from pytest_gpuprops import report
from pytest_gpuprops.assertions import FAIL, NOISY, PASS, Verdict, evaluate
from pytest_gpuprops.facts import Fact
from pytest_gpuprops.measure import Measurement

LDS = Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="chase", source="seeds", value=23.0,
           tolerance_abs=0.25)


def _verdicts():
    passing = evaluate(LDS, Measurement.given("lds", [23.0, 23.0, 23.01]))      # noise 0.025 %
    failing = evaluate(LDS, Measurement.given("lds", [30.0, 30.0, 30.0]))
    static = Verdict("dep_spacing", "sm_86", PASS, "24 (nvrtc 13.5)", 24.0, "24 cycles with nvrtc 13.5\nsecond",
                     "cycles", "sass", "compiled", kind="static", flags=["nvrtc 13.9 not recorded; same as nvrtc 13.5"])
    unmeasured = Verdict("noisy_one", "sm_80", NOISY, "1 ± 0.1 x", None, "n/a", "x", "m", "s")
    return [passing, failing, static, unmeasured]


EXPECTED_ROWS = [
    ["lds_latency_cycles", "sm_90", "23 ± 0.25 cycles", "23.000 (±0.03%, n=3)", "PASS"],
    ["lds_latency_cycles", "sm_90", "23 ± 0.25 cycles", "30.000 (±0.00%, n=3)", "FAIL"],
    ["dep_spacing", "sm_86", "24 (nvrtc 13.5)", "24 cycles with nvrtc 13.5",
     "PASS (nvrtc 13.9 not recorded; same as nvrtc 13.5)"],
    ["noisy_one", "sm_80", "1 ± 0.1 x", "-", "NOISY"],
]


def _parse_simple(text):
    """tabulate's "simple" format: columns are the runs of dashes under the header."""
    lines = text.splitlines()
    rule = lines[1]
    spans, start = [], None
    for i, ch in enumerate(rule + " "):
        if ch == "-" and start is None:
            start = i
        elif ch != "-" and start is not None:
            spans.append((start, i))
            start = None
    spans[-1] = (spans[-1][0], None)  # the last column may run past its rule
    cut = [[line[a:b].strip() for a, b in spans] for line in lines]
    return cut[0], cut[2:]


def _parse_github(text):
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    assert set(rows[1][0]) <= set("-:")
    return rows[0], rows[2:]


def test_rows_cell_by_cell():
    assert report.rows(_verdicts()) == EXPECTED_ROWS


def test_terminal_table_reads_back_cell_by_cell():
    header, rows = _parse_simple(report.table(_verdicts()))
    assert header == ["fact", "arch", "expected", "measured", "verdict"] == report.HEADERS
    assert rows == EXPECTED_ROWS


def test_numbers_are_not_reformatted():
    v = Verdict("f", "sm_90", PASS, "0.10", 1.0, "1.50", "u", "m", "s")
    header, rows = _parse_simple(report.table([v]))
    assert rows == [["f", "sm_90", "0.10", "1.50", "PASS"]]


def test_table_default_format_is_simple():
    vs = _verdicts()
    assert report.table(vs) == report.table(vs, fmt="simple")
    assert report.table(vs, fmt="github").startswith("| fact")


# -- the measured cell, the terminal table ---------------------------------------------------

G0 = {"index": 0, "name": "H100", "host": "n7"}
G1 = {"index": 1, "name": "H100", "host": "n7"}


def _test_error(text):
    """A test that failed outside the verdict layer (session._outside_verdict's shape)."""
    return Verdict("test_launch", "-", "ERROR", "-", None, text, "", "", "", kind="test",
                   nodeid="hwtests/t.py::test_launch")


TEXT_72 = "call failed: " + "x" * 59
TEXT_73 = "call failed: " + "x" * 60


def test_a_test_error_cell_is_its_first_line_up_to_72_characters():
    assert (len(TEXT_72), len(TEXT_73)) == (72, 73)
    vs = [_test_error(TEXT_72), _test_error(TEXT_73), _test_error("setup failed: no GPU\n  and a second line"),
          _test_error("call failed: boom")]
    assert report.rows(vs) == [
        ["test_launch", "-", "-", "call failed: " + "x" * 59, "ERROR"],
        ["test_launch", "-", "-", "call failed: " + "x" * 58 + "…", "ERROR"],
        ["test_launch", "-", "-", "setup failed: no GPU", "ERROR"],
        ["test_launch", "-", "-", "call failed: boom", "ERROR"],
    ]


FLEET = Verdict("lds_latency_cycles", "sm_90", "OUTLIER", "peer median 23.000 ± 0.25 cycles", 30.0,
                "30.000 cycles on n7:gpu0 H100; peers: 23.000\nsecond line", "cycles", "chase", "seeds",
                kind="fleet", flags=["3 GPUs compared"], measurement={"noise": 0.0001, "n": 3}, gpu=G0,
                tolerance=0.25)
MOVED = dataclasses.replace(FLEET, status="MOVED", kind="baseline", expected="baseline 23.000 ± 0.25 cycles",
                            measured_text="30.000 cycles on n7:gpu0 H100 (moved +7.000)\nsecond line", flags=[])


def test_a_fleet_cell_is_the_first_line_of_its_text_even_with_a_measurement():
    assert report.rows([FLEET, MOVED]) == [
        ["lds_latency_cycles", "sm_90", "peer median 23.000 ± 0.25 cycles",
         "30.000 cycles on n7:gpu0 H100; peers: 23.000", "OUTLIER (3 GPUs compared)"],
        ["lds_latency_cycles", "sm_90", "baseline 23.000 ± 0.25 cycles",
         "30.000 cycles on n7:gpu0 H100 (moved +7.000)", "MOVED"],
    ]


def test_terminal_table_exactly():
    assert report.table([FLEET, _test_error("setup failed: no GPU\n  and a second line")]).split("\n") == [
        "fact                arch    expected                          measured                                      verdict",
        "------------------  ------  --------------------------------  --------------------------------------------  -------------------------",
        "lds_latency_cycles  sm_90   peer median 23.000 ± 0.25 cycles  30.000 cycles on n7:gpu0 H100; peers: 23.000  OUTLIER (3 GPUs compared)",
        "test_launch         -       -                                 setup failed: no GPU                          ERROR",
    ]


# -- the per-GPU table ------------------------------------------------------------------------


def _on(gpu, fact, node, measured, status="PASS", flags=(), text="x"):
    return Verdict(fact, "sm_90", status, "23 ± 0.25 cycles", measured, text, "cycles", "m", "s",
                   flags=list(flags), nodeid=node, gpu=gpu, tolerance=0.25)


def test_gpu_table_exactly():
    vs = [_on(G0, "lds_latency_cycles", "hwtests/test_smem.py::TestLds::test_latency[gpu0]", 23.0),
          _on(G1, "lds_latency_cycles", "hwtests/test_smem.py::TestLds::test_latency[gpu1]", 23.5, "FAIL",
              ["confirmed: failed 3 of 3 measurements"]),
          STATIC,  # compiled, not measured on a GPU: not in the per-GPU table
          _on(G0, "l2_hit_rate", "hwtests/test_l2.py::test_hit[gpu0]", 5.0),
          _on(G1, "dram_bw", "hwtests/test_dram.py::test_bw[gpu1]", None, "ERROR")]
    assert report.gpu_table(vs).split("\n") == [
        "fact                test          n7:gpu0 H100    n7:gpu1 H100",
        "------------------  ------------  --------------  ---------------------------------------------------",
        "lds_latency_cycles  test_latency  23.000 PASS     23.500 FAIL (confirmed: failed 3 of 3 measurements)",
        "l2_hit_rate         test_hit      5.000 PASS      -",
        "dram_bw             test_bw       -               ERROR",
    ]


# -- the terminal's default table: grouped, attention first, within 120 columns -----------------


def _at(node, fact="lds_latency_cycles", status=PASS, measured=23.0, **kw):
    base = dict(fact=fact, arch="sm_90", status=status, expected="23 ± 0.25 cycles", measured=measured,
                measured_text=f"{measured} cycles (min 22.9, max 23.1, noise 0.10%, n=5, converged)", unit="cycles",
                method="m", source="s", nodeid=node, measurement={"noise": 0.001, "n": 5})
    base.update(kw)
    return Verdict(**base)


def _skipped_test(node, reason):
    return Verdict(node.split("::")[-1], "-", "SKIPPED", "-", None, reason, "", "", "", kind="test", nodeid=node)


@pytest.mark.parametrize("node, expected", [
    ("hwtests/test_async_units.py::test_cp_async_latency[cg16]", "async units"),
    ("hwtests/test_wgmma.py::test_latency[m64n8k16]", "wgmma"),
    ("hwtests/test_wgmma_dtypes.py::test_rate", "wgmma"),
    ("hwtests/test_throughput_and_clocks.py::test_ffma", "clocks & throughput"),
    ("hwtests/test_health.py::test_health[health_ecc_mode]", "health"),
    ("hwtests/test_smem.py::test_lds", "shared memory"),
    ("hwtests/test_smem_conflicts.py::test_model", "shared memory"),
    ("hwtests/test_memory_hierarchy.py::test_l2", "memory hierarchy"),
    ("hwtests/test_regbank.py::test_seed_cases", "register banks"),
    ("hwtests/test_static.py::test_hmma_dependent_chain_issue_spacing[sm_80]", "static (SASS)"),
    ("hwtests/test_static_async_units.py::test_clean[x]", "static (SASS)"),
    ("hwtests/test_alu_ops.py::test_latency[shfl]", "ALU"),
    ("hwtests/test_mma_dtypes.py::test_model", "tensor cores (mma.sync)"),
    ("hwtests/test_tensorcore.py::test_model", "tensor cores (mma.sync)"),
    ("hwtests/test_dpx_atomics_const.py::test_dpx", "DPX, atomics & constant cache"),
    ("tests/test_new_unit.py::test_x", "new unit"),  # no area: the file's name
    ("test_lds.py::test_lds[gpu0]", "lds"),
])
def test_the_area_of_a_verdict_is_its_test_file_s(node, expected):
    assert report.area(_at(node)) == expected


def test_a_verdict_without_a_test_goes_by_its_fact_s_name():
    assert report.area(_at("", fact="wgmma_m64n8k16_f16_ss_latency_cycles")) == "wgmma"
    assert report.area(_at("", fact="health_ecc_mode")) == "health"
    assert report.area(_at("", fact="lds_latency_cycles")) == "other"


def test_compact_table_exactly():
    smem = "hwtests/test_smem.py::test_lds"
    vs = [
        _at(smem),
        _at("hwtests/test_alu.py::test_ffma", fact="ffma_latency_cycles", expected="3.984 ± 0.05 cycles",
            measured=3.984375),
        _at(smem, fact="sts_latency_cycles", status=FAIL, measured=30.0, flags=["confirmed: failed 3 of 3 measurements"],
            attempts=[{"measured": 30.0, "measured_text": "30", "status": FAIL}] * 3),
        _skipped_test("hwtests/test_static.py::test_spacing[sm_80]", "facts file x.toml is for sm_90, not sm_80"),
        _skipped_test("hwtests/test_static.py::test_other[sm_80]", "facts file x.toml is for sm_90, not sm_80"),
        _skipped_test("hwtests/test_static.py::test_spacing[sm_86]", "facts file x.toml is for sm_90, not sm_86"),
        Verdict("hmma_dep", "sm_90", PASS, "24 (nvrtc 13.5)", 24.0, "24 cycles with nvrtc 13.0", "cycles", "m", "s",
                kind="static", flags=["nvrtc 13.0 not recorded; same as nvrtc 13.5"],
                nodeid="hwtests/test_static.py::test_spacing[sm_90]"),
        Verdict("regbank_model", "sm_90", PASS, "model ± 6%", 26.0, "26/26 cases within ±6% of the model; worst R8: "
                "model 1.000, measured 1.044", "cycles", "m", "s", kind="model", nodeid="hwtests/test_regbank.py::t"),
    ]
    assert report.compact_table(vs).split("\n") == [
        "all facts for sm_90; -v shows noise, n, attempts, whole verdicts and each skipped test",
        "  fact                 expected             measured         verdict",
        "  -------------------  -------------------  ---------------  --------------------------------------------------",
        "shared memory — 2: 1 FAIL, 1 PASS",  # the group with a failure first, the failure first in it
        "  sts_latency_cycles   23 ± 0.25 cycles     30.000           FAIL (confirmed: failed 3 of 3 measurements)",
        "  lds_latency_cycles   23 ± 0.25 cycles     23.000           PASS",
        "ALU — 1: 1 PASS",  # then the groups in the order of the run
        "  ffma_latency_cycles  3.984 ± 0.05 cycles  3.984            PASS",
        "static (SASS) — 4: 1 PASS, 3 SKIPPED",  # the skipped tests counted per reason, not listed
        "  hmma_dep             24 (nvrtc 13.5)      24 (nvrtc 13.0)  PASS (nvrtc 13.0 not recorded; same as nvrtc 13.5)",
        "  2 skipped: facts file x.toml is for sm_90, not sm_80",
        "  1 skipped: facts file x.toml is for sm_90, not sm_86",
        "register banks — 1: 1 PASS",
        "  regbank_model        model ± 6%           26/26 cases      PASS",
    ]


def test_terminal_table_is_the_whole_table_with_v():
    vs = _verdicts()
    assert report.terminal_table(vs, verbose=1) == report.table(vs) == report.terminal_table(vs, verbose=2)
    assert report.terminal_table(vs) == report.compact_table(vs) == report.terminal_table(vs, verbose=-1)


LONG = "a very long text, " * 20


def _long_verdicts():
    """Every cell too long: names, expectations, measured texts, flags, test files and skip reasons."""
    long_file = "hwtests/test_" + "x" * 150 + ".py"
    return [
        _at("hwtests/test_smem.py::t", fact="f" * 200, expected=LONG, status=FAIL, flags=[LONG, LONG]),
        _at("hwtests/test_smem.py::t", fact="lds_latency_cycles", status="UNSTABLE", flags=[LONG]),
        Verdict("test_" + "y" * 150, "-", "ERROR", "-", None, "call failed: " + LONG, "", "", "", kind="test",
                nodeid=long_file + "::test_y"),
        Verdict("m", "sm_90", PASS, "model ± 2%", 3.0, "3/3 cases" + LONG, "", "", "", kind="model",
                nodeid="hwtests/test_wgmma.py::t"),
        Verdict("health_x", "sm_90", "SCHEDULE CHANGED", LONG, 1.0, LONG, "", "", "", kind="health",
                nodeid="hwtests/test_health.py::t"),
        _skipped_test(long_file + "::test_z", "skipped because " + LONG),
        _at("", fact="lds_latency_cycles", status="OUTLIER", kind="fleet", expected="peer median " + LONG,
            measured_text="30.000 cycles on n7:gpu0 H100; peers: " + LONG, gpu=G0),
    ]


@pytest.mark.parametrize("second_arch", [False, True])
def test_no_line_of_the_compact_table_is_wider_than_120(second_arch):
    vs = _long_verdicts()
    if second_arch:
        vs.append(dataclasses.replace(vs[1], arch="sm_100a_with_a_long_arch_name"))
    text = report.compact_table(vs)
    lines = text.split("\n")
    assert max(len(line) for line in lines) <= 120 == report.TERMINAL_WIDTH
    assert max(len(line) for line in report.table(vs).split("\n")) > 300  # -v: every cell whole
    assert "…" in text
    header = next(n for n, line in enumerate(lines) if line.lstrip().startswith("fact "))
    assert ("arch" in lines[header].split()) == second_arch  # one arch: said once, not in a column
    rows = [line for line in lines[header + 2:] if " — " not in line and " skipped: " not in line]
    assert len(rows) == len(vs) - 1  # the skipped test is counted, not listed
    # each row keeps its whole status, whatever is shortened before it
    statuses = ["FAIL", "UNSTABLE", "OUTLIER", "ERROR", "PASS", "SCHEDULE CHANGED", "SKIPPED"]
    assert all(any(s in r for s in statuses) for r in rows)


def test_a_fact_name_stays_whole_while_other_cells_are_shortened():
    name = "atom_global_add_same_address_near_latency_cycles"
    vs = [_at("hwtests/test_dpx_atomics_const.py::t", fact=name, expected=LONG, flags=[LONG])]
    (row,) = [line for line in report.compact_table(vs).split("\n") if name in line]
    assert row.startswith("  " + name + "  ") and len(row) == 120 and row.endswith("…")


def test_groups_that_need_attention_come_first_rows_in_status_order():
    vs = [_at("hwtests/test_alu.py::a"),
          _at("hwtests/test_smem.py::b", status="NOISY"),
          _at("hwtests/test_smem.py::c"),
          _at("hwtests/test_smem.py::d", status="UNSTABLE"),
          _at("hwtests/test_health.py::e", status="THROTTLED"),
          _skipped_test("hwtests/test_static.py::f[sm_80]", "why"),
          Verdict("test_g", "-", "ERROR", "-", None, "call failed: boom", "", "", "", kind="test",
                  nodeid="hwtests/test_regbank.py::test_g"),
          _at("hwtests/test_wgmma.py::h", status=FAIL)]
    lines = report.compact_table(vs).split("\n")
    headings = [line for line in lines if " — " in line]
    assert headings == ["wgmma — 1: 1 FAIL", "health — 1: 1 THROTTLED", "shared memory — 3: 1 UNSTABLE, 1 NOISY, 1 PASS",
                        "register banks — 1: 1 ERROR", "ALU — 1: 1 PASS", "static (SASS) — 1: 1 SKIPPED"]
    smem = lines[lines.index(headings[2]) + 1:lines.index(headings[3])]
    assert [r.split()[-1] for r in smem] == ["UNSTABLE", "NOISY", "PASS"]
    assert lines[-1] == "  1 skipped: why"
    assert "call failed: boom" in lines[lines.index(headings[3]) + 1]


def test_several_archs_keep_the_arch_column():
    vs = [_at("hwtests/test_static.py::a[sm_80]", arch="sm_80"), _at("hwtests/test_static.py::a[sm_90]")]
    lines = report.compact_table(vs).split("\n")
    assert lines[0].split() == ["fact", "arch", "expected", "measured", "verdict"]
    assert [line.split()[1] for line in lines[3:]] == ["sm_80", "sm_90"]
    assert not any("all facts for" in line for line in lines)


def test_only_skipped_tests_print_no_header():
    vs = [_skipped_test("hwtests/test_wgmma.py::a", "needs a GPU"), _skipped_test("hwtests/test_wgmma.py::b", "needs a GPU")]
    assert report.compact_table(vs).split("\n") == ["wgmma — 2: 2 SKIPPED", "  2 skipped: needs a GPU"]


# ----------------------------------------------------------------------------------------------
# pair facts (hwtests/test_node_links.py): the GPU x GPU matrix, the pair named, the fleet rule per pair
# Readings are the H100 ones recorded in pytest_gpuprops/facts/sm_90.toml (their source strings):
# p2p_ce_copy_gbps 9f007e6c->1559a37f 397.69, 1559a37f->9f007e6c 397.84; per-SM p2p latencies 847.59 ns.

H100_NAME = "NVIDIA H100 80GB HBM3"
# the node of the recorded copy-engine readings; the UUIDs' first group as recorded, the rest zeros
P0 = {"index": 0, "name": H100_NAME, "uuid": "GPU-9f007e6c-0000-0000-0000-000000000000", "host": "n7"}
P1 = {"index": 1, "name": H100_NAME, "uuid": "GPU-1559a37f-0000-0000-0000-000000000000", "host": "n7"}
LINKS_HEAD = "row: the GPU that issued, column: its peer"


def _pair(src, dst, measured, status=PASS, fact="p2p_ce_copy_gbps", unit="GB/s", test="test_copy_engine_rate"):
    """A pair test's verdict as FactChecker._finish leaves it: ``gpu`` issued the work, ``peer`` is the
    other end of the link."""
    return Verdict(fact, "sm_90", status, "396.853 ± 11.9 GB/s", measured, f"{measured} {unit}", unit, "m", "s",
                   nodeid=f"hwtests/test_node_links.py::{test}[gpu{src['index']}-peer+1]", gpu=src, peer=dst,
                   tolerance=11.9, scope="gpu")


def test_link_matrices_of_two_gpus_each_way():
    vs = [_pair(P0, P1, 397.69), _pair(P1, P0, 397.84),
          _on(G0, "lds_latency_cycles", "hwtests/test_smem.py::test_lds[gpu0]", 23.0)]  # no peer: no matrix
    labels = ["n7:gpu0 (GPU-9f007e6c)", "n7:gpu1 (GPU-1559a37f)"]
    assert report.link_matrices(vs) == {"p2p_ce_copy_gbps": {
        "unit": "GB/s", "gpus": labels,
        "cells": [[None, {"value": 397.69, "status": "PASS"}],
                  [{"value": 397.84, "status": "PASS"}, None]]}}
    assert report.link_tables(report.link_matrices(vs)).split("\n") == [
        f"p2p_ce_copy_gbps (GB/s; {LINKS_HEAD})",
        "                        n7:gpu0 (GPU-9f007e6c)    n7:gpu1 (GPU-1559a37f)",
        "----------------------  ------------------------  ------------------------",
        "n7:gpu0 (GPU-9f007e6c)  x                         397.7",
        "n7:gpu1 (GPU-1559a37f)  397.8                     x",
    ]


def test_no_pair_verdict_no_matrix():
    assert report.link_matrices(_verdicts()) == {} and report.link_tables({}) == ""
    # a peer without the GPU that issued (never written so) is not placed either
    assert report.link_matrices([dataclasses.replace(_pair(P0, P1, 397.69), gpu=None)]) == {}


def _n7(index):
    return {"index": index, "name": "H100", "host": "n7"}


def _three_gpus():
    """Three GPUs, pairs measured in any order: one FAIL, one ERROR without a value, cells missing,
    GPU 10 after GPU 2 (by number, not as text), and a second pair fact with its own GPUs."""
    return [_pair(_n7(10), _n7(2), 357.8, FAIL), _pair(_n7(2), _n7(10), 397.69),
            _pair(_n7(0), _n7(2), None, "ERROR"),
            _pair(_n7(0), _n7(2), 847.59, fact="p2p_latency_ns", unit="ns", test="test_peer_latency")]


def test_link_matrices_with_missing_cells_and_statuses():
    m = report.link_matrices(_three_gpus())
    assert list(m) == ["p2p_ce_copy_gbps", "p2p_latency_ns"]  # by fact name
    assert m["p2p_ce_copy_gbps"] == {"unit": "GB/s", "gpus": ["n7:gpu0", "n7:gpu2", "n7:gpu10"], "cells": [
        [None, {"value": None, "status": "ERROR"}, None],
        [None, None, {"value": 397.69, "status": "PASS"}],
        [None, {"value": 357.8, "status": "FAIL"}, None]]}
    assert m["p2p_latency_ns"] == {"unit": "ns", "gpus": ["n7:gpu0", "n7:gpu2"],
                                   "cells": [[None, {"value": 847.59, "status": "PASS"}], [None, None]]}


def test_link_tables_show_what_is_not_pass_the_diagonal_and_what_was_not_measured():
    assert report.link_tables(report.link_matrices(_three_gpus())).split("\n") == [
        f"p2p_ce_copy_gbps (GB/s; {LINKS_HEAD})",
        "          n7:gpu0    n7:gpu2     n7:gpu10",
        "--------  ---------  ----------  ----------",
        "n7:gpu0   x          - ERROR     -",
        "n7:gpu2   -          x           397.7",
        "n7:gpu10  -          357.8 FAIL  x",
        "",
        f"p2p_latency_ns (ns; {LINKS_HEAD})",
        "         n7:gpu0    n7:gpu2",
        "-------  ---------  ---------",
        "n7:gpu0  x          847.6",
        "n7:gpu2  -          x",
    ]


def test_link_matrices_order_gpus_by_host_then_index():
    b0, b1 = {"index": 0, "name": "H100", "host": "n8"}, {"index": 1, "name": "H100", "host": "n8"}
    vs = [_pair(b1, b0, 397.0), _pair(_n7(1), _n7(0), 397.5), _pair({"index": 3, "name": "H100"}, b0, 396.0)]
    assert report.link_matrices(vs)["p2p_ce_copy_gbps"]["gpus"] == ["gpu3", "n7:gpu0", "n7:gpu1", "n8:gpu0",
                                                                     "n8:gpu1"]


def test_a_pair_verdict_names_both_gpus():
    from pytest_gpuprops import results
    v = _pair(P0, P1, 357.8, FAIL)
    assert v.gpu_text == (f"GPU 0 {H100_NAME} (GPU-9f007e6c-0000-0000-0000-000000000000) on n7 -> peer GPU 1 "
                          "(GPU-1559a37f-0000-0000-0000-000000000000)")
    assert f"  GPU:      {v.gpu_text}" in v.message().split("\n")
    assert results.gpu_label(v) == f"n7:gpu0 {H100_NAME} (GPU-9f007e6c) -> gpu1 (GPU-1559a37f)"
    # a peer known by its PCI bus id only, or by nothing
    bus = dataclasses.replace(v, peer={"index": 1, "pci_bus_id": "0000:2A:00.0"})
    assert bus.gpu_text.endswith(" on n7 -> peer GPU 1 (0000:2A:00.0)")
    assert results.gpu_label(bus) == f"n7:gpu0 {H100_NAME} (GPU-9f007e6c) -> gpu1"
    assert dataclasses.replace(v, peer={}).gpu_text == dataclasses.replace(v, peer=None).gpu_text  # no pair
    assert dataclasses.replace(v, peer={"index": 3}).gpu_text.endswith("-> peer GPU 3 (no UUID)")
    # a verdict of one GPU names one GPU, as before
    assert results.gpu_label(dataclasses.replace(v, peer=None)) == f"n7:gpu0 {H100_NAME} (GPU-9f007e6c)"


# the fleet rule per pair: the same pair test on two GPUs is one case (results.case_key drops gpuN),
# so GPU 0 -> 1 is compared with GPU 1 -> 0. Latencies of the one-SM method (2026-11-26, three nodes):
# 9f007e6c->1559a37f 850.00, 90ad244b->357002be 796.86 ns; its band: 823.892 ± 27.4 ns, units 796.71 .. 851.07.

def _latency(src, dst, measured, status=PASS):
    return dataclasses.replace(_pair(src, dst, measured, status, fact="p2p_latency_ns", unit="ns",
                                     test="test_peer_latency"),
                               expected="823.892 ± 27.4 ns", tolerance=27.4, units_range=[796.71, 851.07])


def test_two_directions_apart_by_what_the_units_recorded_show_differ_but_are_not_outliers():
    from pytest_gpuprops import results
    out, note = results.outliers([_latency(P0, P1, 850.0), _latency(P1, P0, 797.2)])
    assert note == ("outlier check: 2 GPUs, 1 facts compared, 0 outlier(s), 2 fact(s) where units differ inside "
                    "the SKU's band (not red)")
    assert [(o.status, o.kind, o.peer["index"]) for o in out] == [("UNITS DIFFER", "fleet", 1),
                                                                   ("UNITS DIFFER", "fleet", 0)]
    first = out[0]
    assert first.expected == "peer median 797.200 ± 27.4 ns"
    assert first.measured_text == (f"850.000 ns on n7:gpu0 {H100_NAME} (GPU-9f007e6c) -> gpu1 (GPU-1559a37f) "
                                   "(6.6% off); peers: 797.200")
    assert first.flags == ["2 GPUs compared", "inside the SKU's band, and no further apart than the units recorded "
                           "(796.71 .. 851.07): the units' own spread"]


def test_a_direction_past_what_the_units_recorded_is_an_outlier_both_flagged():
    """The same pair with the reverse direction planted at 780 ns: below its band and 70 ns off the
    other direction, more than the units recorded (54.36 ns apart)."""
    from pytest_gpuprops import results
    out, note = results.outliers([_latency(P0, P1, 850.0), _latency(P1, P0, 780.0, FAIL)])
    assert note == "outlier check: 2 GPUs, 1 facts compared, 2 outlier(s)"
    assert [(o.status, o.measured) for o in out] == [("OUTLIER", 850.0), ("OUTLIER", 780.0)]
    assert out[0].flags == ["2 GPUs compared", "more than 5% off its peers",
                            "with two GPUs, both are flagged: a third tells which one is off"]
    # within the band's tolerance of each other: nothing to report, whichever GPU issued
    assert results.outliers([_latency(P0, P1, 850.0), _latency(P1, P0, 830.0)])[0] == []
