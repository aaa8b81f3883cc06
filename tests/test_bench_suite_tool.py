"""tools/bench_suite.py's side by side with accel-sim's microbenchmarks: the build command taken from
a program's Makefile, the value read from what it prints, and the report's section (fed given
numbers; building and running them needs a GPU)."""

import pytest
from gp_testing import load_tool

bs = load_tool("bench_suite")

# the shape of an accel-sim GPU_Microbenchmark Makefile (written here, not copied)
MAKEFILE = """GENCODE_SM70 := -gencode=arch=compute_70,code=\\"sm_70,compute_70\\"
CUOPTS = $(GENCODE_SM70)
CC := nvcc
SRC = {src}
EXE = prog
{flags}
release:
\t$(CC) $(NVCC_FLGAS) $(CUOPTS) $(SRC) -o $(EXE) -lcudart
"""


def _program(tmp_path, name, src="prog.cu", flags="NVCC_FLGAS = -Xptxas -dlcm=cg -Xptxas -dscm=wt"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "Makefile").write_text(MAKEFILE.format(src=src, flags=flags))
    return folder


def test_the_build_command_keeps_the_makefiles_cache_options_and_takes_the_gpus_arch(tmp_path):
    folder = _program(tmp_path, "l2_lat", src="l2_lat.cu")
    cmd = bs.accelsim_build(folder, "sm_90", "/usr/bin/nvcc", tmp_path / "exe")
    assert cmd == ["/usr/bin/nvcc", "-Xptxas", "-dlcm=cg", "-Xptxas", "-dscm=wt", "-arch=sm_90",
                   str(folder / "l2_lat.cu"), "-o", str(tmp_path / "exe")]
    assert not any("sm_70" in part for part in cmd)
    plain = _program(tmp_path, "l1_lat", src="l1_lat.cu", flags="")  # l1_lat's Makefile has no NVCC_FLGAS
    assert bs.accelsim_build(plain, "sm_90", "nvcc", tmp_path / "e")[1:3] == ["-arch=sm_90", str(plain / "l1_lat.cu")]


def test_a_folder_that_is_not_accel_sims_says_what_was_expected(tmp_path):
    with pytest.raises(ValueError, match="--accelsim takes accel-sim's gpu-app-collection/src/cuda/GPU_Microbenchmark"):
        bs.accelsim_build(tmp_path / "shared_lat", "sm_90", "nvcc", tmp_path / "e")
    odd = _program(tmp_path, "odd")
    (odd / "Makefile").write_text("all:\n\tcc x.c\n")
    with pytest.raises(ValueError, match="no 'SRC = <file>.cu' line"):
        bs.accelsim_build(odd, "sm_90", "nvcc", tmp_path / "e")


@pytest.mark.parametrize("stdout, value", [
    ("Shared Memory Latency  = 23.015625 cycles\nTotal Clk number = 47136 \n", "23.015625"),
    ("L2 Latency =     262.0312 cycles \nTotal Clk number = 8586240 \n", "262.0312"),
    ("Shared Memory Bandwidth = 127.451 (byte/clk/SM)\n", "127.451"),
    ("no value here\n", "no value here"),
    ("", "(nothing printed)"),
])
def test_the_printed_value_is_the_first_number_after_an_equals_sign(stdout, value):
    assert bs.printed_value(stdout) == value


def test_the_report_section_gives_both_ratios_and_names_a_failed_build():
    rows = [{"label": "LDS latency (pointer chase)", "program": "shared_lat", "unit": "cycles",
             "theirs": {"build": 1.3, "run": 0.4, "total": 1.7, "value": "23.0156"},
             "node": "hwtests/test_smem.py::test_lds_latency[500]", "ours": 0.01},
            {"label": "DRAM latency (chase)", "program": "mem_lat", "unit": "cycles",
             "theirs": {"error": "nvcc failed: boom"}, "node": "hwtests/test_memory_hierarchy.py::test_chase_latency[dram]",
             "ours": 0.08}]
    md = "\n".join(bs.accelsim_report({"rows": rows, "warm": (3.4, "5 passed"), "cold": (8.5, "5 passed"),
                                       "theirs": 10.2}))
    assert "| LDS latency (pointer chase) | `shared_lat` | 1.30 | 0.40 | 1.70 | 23.0156 cycles |" in md
    assert "| DRAM latency (chase) | `mem_lat` | nvcc failed: boom |" in md
    assert "built and run, 10.20 s; ours as one pytest process 3.40 s warm (5 passed), 8.50 s cold" in md
    assert "3.0x warm, 1.2x cold (issue 21's targets: 5x warm, 2x cold)" in md
    assert bs.accelsim_report(None) == []
    assert bs.accelsim_report({"note": "skipped: no GPU (no CUDA)"})[-1] == "accel-sim programs skipped: no GPU (no CUDA)."


def test_every_accelsim_fact_names_a_test_of_the_suite(request):
    # this session's own collection when it holds them (as `pytest` does), else a collecting run
    collected = {item.nodeid for item in request.session.items}
    if not all(node in collected for _, _, node, _ in bs.ACCELSIM):
        import subprocess
        import sys
        out = subprocess.run([sys.executable, "-m", "pytest", "hwtests", "--collect-only", "-q", "-p",
                              "no:cacheprovider", "-m", "not static"], cwd=bs.ROOT, capture_output=True, text=True)
        collected = set(out.stdout.split())
    for _, _, node, _ in bs.ACCELSIM:
        assert node in collected, node


def test_the_targets_table_reads_each_number_where_the_issue_says():
    suites = [{"name": "GPU suite", "cold": {"wall": 29.0}, "warm": {"wall": 20.0}},
              {"name": "full hwtests", "cold": {"wall": 50.0}, "warm": {"wall": 11.0}}]
    parts = [("micro-architecture facts (no stresses)", "pytest hwtests ...", {"wall": 7.5}),
             ("one fact in its own process", "pytest hwtests -k ffma_latency", {"wall": 2.5})]
    rows = bs.targets_table(suites, parts, {"rows": [], "ratio_warm": 5.5, "ratio_cold": 1.5})
    text = "\n".join(rows)
    assert "| GPU micro-architecture facts, warm | 7.5 s | < 8 s | yes |" in text
    assert "| GPU suite with the stresses, warm | 20.0 s | < 8 s | no |" in text
    assert "| full `pytest hwtests`, first run | 50.0 s | < 45 s | no |" in text
    assert "| GPU suite, first run | 29.0 s | < 30 s | yes |" in text
    assert "| one fact in its own process | 2.5 s | < 2 s | no |" in text
    assert "ours warm vs theirs | 5.5x | >= 5x | yes |" in text and "ours cold vs theirs | 1.5x | >= 2x | no |" in text
    assert bs.targets_table([], [], None) == []
