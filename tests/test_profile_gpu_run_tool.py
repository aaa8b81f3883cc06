"""tools/profile_gpu_run.py: the tables docs/performance.md keeps, made from a folder shaped like
tools/device_profile.sh's (JUnit XML with the plugin's gpu_busy_s / gpu_launches properties, the
cold run's compile record, a cProfile file, an -X importtime log), fed given numbers: no GPU."""

import cProfile
import json

from gp_testing import load_tool

pg = load_tool("profile_gpu_run")

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="hwtests.test_alu" name="test_ffma_latency" time="0.250">
  <properties><property name="gpu_busy_s" value="0.050"/><property name="gpu_launches" value="100"/></properties>
</testcase>
<testcase classname="hwtests.test_alu" name="test_imad" time="0.750">
  <properties><property name="gpu_busy_s" value="0.150"/><property name="gpu_launches" value="300"/></properties>
</testcase>
<testcase classname="hwtests.test_smem" name="test_lds_latency[500]" time="2.000">
  <properties><property name="gpu_busy_s" value="0.500"/><property name="gpu_launches" value="50"/></properties>
  <failure message="fact does not hold"/>
</testcase>
<testcase classname="hwtests.test_smem" name="test_skipped" time="0.001"><skipped message="no fact"/></testcase>
<testcase classname="hwtests.test_health" name="test_health[ecc]" time="0.100"/>
</testsuite></testsuites>
"""


def _rows(table: str) -> list[list]:
    """A GitHub table's body rows, numbers read as numbers (tabulate prints 2.000 as 2)."""
    def cell(c):
        c = c.strip()
        try:
            return int(c) if c.isdigit() else float(c)
        except ValueError:
            return c
    return [[cell(c) for c in line.split("|")[1:-1]] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| -")][1:]


def _folder(tmp_path):
    (tmp_path / "warm.xml").write_text(JUNIT)
    (tmp_path / "nproc.txt").write_text("16\n")
    (tmp_path / "walls.txt").write_text("gpu suite warm rc=0 wall=26.90 s\n")
    (tmp_path / "compile_seconds.json").write_text(json.dumps([
        {"source": "wgmma.cu", "arch": "sm_90a", "options": ["-DN=256", "-DA_REGS=1", "--std=c++17"], "seconds": 26.4},
        {"source": "wgmma.cu", "arch": "sm_90a", "options": ["-DN=128"], "seconds": 10.0},
        {"source": "ffma.cu", "arch": "sm_90", "options": ["-DILP=1"], "seconds": 0.6}]))
    (tmp_path / "one_importtime.log").write_text(
        "import time: self [us] | cumulative | imported package\n"
        "import time:       100 |     250000 | cupy\n"
        "import time:        50 |      40000 |   cupy._core\n"  # nested: not a top-level import
        "import time:        20 |    1050000 | pytest_gpuprops\n"
        "import time:        10 |      12000 | json\n")
    prof = cProfile.Profile()
    prof.enable()
    sorted(range(1000), key=lambda x: -x)
    prof.disable()
    prof.dump_stats(tmp_path / "one.prof")
    return tmp_path


def test_junit_cases_read_wall_kernel_time_and_launches_and_leave_skips_out(tmp_path):
    cases = pg.junit_cases(_folder(tmp_path) / "warm.xml")
    assert [c["id"] for c in cases] == ["hwtests/test_alu.py::test_ffma_latency", "hwtests/test_alu.py::test_imad",
                                        "hwtests/test_smem.py::test_lds_latency[500]",
                                        "hwtests/test_health.py::test_health[ecc]"]
    assert cases[2] == {"id": "hwtests/test_smem.py::test_lds_latency[500]", "wall": 2.0, "busy": 0.5,
                        "launches": 50, "failed": True}
    assert cases[3]["busy"] == 0.0 and cases[3]["launches"] == 0 and not cases[3]["failed"]
    assert pg.junit_cases(tmp_path / "absent.xml") == []


def test_per_test_sums_the_run_and_gives_the_overhead_per_launch_slowest_first(tmp_path):
    text = pg.per_test(pg.junit_cases(_folder(tmp_path) / "warm.xml"), top=2)
    assert text.startswith("4 tests ran: 3.10 s of wall time in their setup/call/teardown, "
                           "0.700 s of it kernels timed by the Runner (450 launches)\n")
    rows = _rows(text)
    assert rows == [["hwtests/test_smem.py::test_lds_latency[500]", 2.0, 0.5, 50, 30.0],  # (2.0 - 0.5) / 50 ms
                    ["hwtests/test_alu.py::test_imad", 0.75, 0.15, 300, 2.0]]  # the top 2 only


def test_per_file_groups_tests_by_file_slowest_first(tmp_path):
    rows = _rows(pg.per_file(pg.junit_cases(_folder(tmp_path) / "warm.xml")))
    assert rows == [["hwtests/test_smem.py", 1, 2.0, 0.5, 50],
                    ["hwtests/test_alu.py", 2, 1.0, 0.2, 400],
                    ["hwtests/test_health.py", 1, 0.1, 0.0, 0]]


def test_compiles_give_the_floor_of_a_parallel_cold_run(tmp_path):
    text = pg.compiles(_folder(tmp_path) / "compile_seconds.json", cores=16)
    # 37.0 s in all; on 16 threads the floor is the longest compile, not 37.0 / 16
    assert text.startswith("3 compiles, 37.0 s of compiler time; the longest 26.4 s; on 16 threads the floor is "
                           "max(longest, total / threads) = 26.4 s")
    assert ["wgmma.cu", "sm_90a", 2, 36.4] in _rows(text.split("slowest builds:")[0])
    assert ["wgmma.cu", "sm_90a", "-DN=256 -DA_REGS=1", 26.4] in _rows(text.split("slowest builds:")[1])
    assert "--std" not in text  # only the defines name a build
    assert "max(longest, total / threads) = 37.0 s" in pg.compiles(tmp_path / "compile_seconds.json", cores=1)
    assert pg.compiles(tmp_path / "none.json", 16) == "(no compile record)"


def test_imports_keep_top_level_modules_by_cumulative_time(tmp_path):
    text = pg.imports(_folder(tmp_path) / "one_importtime.log", 2)
    assert text.startswith("top-level imports: 1.31 s in all\n")
    assert _rows(text) == [["pytest_gpuprops", 1.05], ["cupy", 0.25]]
    assert "cupy._core" not in text


def test_the_whole_profile_has_every_section_and_says_what_is_missing(tmp_path, capsys):
    assert pg.main(["--dir", str(_folder(tmp_path)), "--top", "5"]) == 0
    out = capsys.readouterr().out
    heads = [line for line in out.splitlines() if line.startswith("#")]
    assert heads == ["# GPU run profile", "## Wall times", "## GPU suite, warm: per file",
                     "## GPU suite, warm: slowest tests", "## Cold run: compiles",
                     "## micro-architecture facts, warm, cProfile (cumulative)",
                     "## One fact in its own process, cProfile (whole process, by own time)",
                     "## One fact in its own process, cProfile (cumulative)",
                     "## One fact in its own process: imports"]
    assert "gpu suite warm rc=0 wall=26.90 s" in out and "on 16 threads" in out
    assert "(no profile)" in out  # micro.prof was not made
    assert "ncalls" in out.split("by own time)", 1)[1]  # one.prof was read
