"""``gpuprops facts`` (cli_facts.py): the facts tables per arch and per GPU section, one fact whole,
and its refusals, compared line by line with tables written here."""

import test_cli
from test_cli import LONG_METHOD, LONG_SOURCE, refusal, run

from pytest_gpuprops import cli

#: the fixtures shared with test_cli.py (a folder of two facts files)
facts_dir = test_cli.facts_dir


def test_facts_lists_one_arch_from_a_file(tmp_path, capsys):
    f = tmp_path / "sm_90.toml"
    f.write_text('arch = "sm_90"\n[lds]\nvalue = 30\ntolerance_abs = 0.5\nunit = "cycles"\nmethod = "chase"\n'
                 'source = "by hand"\n')
    assert cli.main(["facts", "--arch", "sm_90", "--facts", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# sm_90: {f}"
    header = out[1].split()
    assert header == ["fact", "expected", "kind", "method", "source"]
    assert out[3].split() == ["lds", "30", "±", "0.5", "cycles", "measured", "chase", "by", "hand"]


GPU_FACTS = """arch = "sm_90"

[lds]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "by hand"

[gpus."NVIDIA H200".dram_read_gbps]
value = 4549.0
tolerance_rel = 0.03
units_range = [4486.0, 4612.0]
unit = "GB/s"
method = "stream read"
source = "four units"
"""


def test_facts_lists_each_gpu_section_after_the_arch_with_the_units_so_far(tmp_path, capsys):
    f = tmp_path / "sm_90.toml"
    f.write_text(GPU_FACTS)
    assert cli.main(["facts", "--facts", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# sm_90: {f}" and out[3].split()[0] == "lds"
    assert out[5] == f"# sm_90, GPU NVIDIA H200 (adds to and overrides the arch's for that GPU): {f}"
    assert out[6].split() == ["fact", "expected", "units", "so", "far", "kind", "method", "source"]
    assert out[8].split() == ["dram_read_gbps", "4549", "±", "136", "GB/s", "4486", "..", "4612", "measured", "stream",
                              "read", "four", "units"]


def test_facts_for_one_gpu_and_one_fact_whole(tmp_path, capsys):
    f = tmp_path / "sm_90.toml"
    f.write_text(GPU_FACTS)
    assert cli.main(["facts", "--facts", str(f), "--gpu", "nvidia  h200"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# sm_90 for nvidia  h200: {f}"
    assert {line.split()[0] for line in out[3:5]} == {"lds", "dram_read_gbps"}  # the arch's and the GPU's
    assert cli.main(["facts", "--facts", str(f), "--fact", "dram_read_gbps"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"# dram_read_gbps (sm_90, GPU NVIDIA H200): {f}",
        "expected:    4549 ± 136 GB/s",
        "units so far: 4486 .. 4612 (a unit beyond is flagged as a new sample)",
        "kind:        measured", "method:      stream read", "source:      four units", ""]
    assert refusal(capsys, "facts", "--facts", str(f), "--gpu", "NVIDIA B200") == (
        "gpuprops facts: no facts file here has a section for the GPU 'NVIDIA B200' (sections: NVIDIA H200); its "
        "arch's facts alone: gpuprops facts --arch sm_XX")
    assert refusal(capsys, "facts", "--facts", str(f), "--fact", "no_such") == (
        f"gpuprops facts: no fact 'no_such' in {f}; gpuprops facts lists them")


def test_facts_error_is_one_line(tmp_path, capsys):
    assert cli.main(["facts", "--arch", "sm_90", "--facts", str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err == (f"gpuprops facts: facts path {tmp_path / 'none.toml'} does not exist; pass a "
                                       "facts .toml file or a folder of sm_XX.toml (gpuprops facts lists the packaged "
                                       "ones)\n")


# ----------------------------------------------------------------------------------------------
# facts


def test_facts_table_cuts_method_at_60_and_source_at_70_characters(capsys, facts_dir):
    assert LONG_METHOD[:60] == "pointer chase over a 64 KiB ring of shared memory, one threa"
    assert LONG_SOURCE[:70] == "measured by hand on an RTX 3060 with the driver of that day; copied fr"
    status, out, err = run(capsys, "facts", "--facts", facts_dir)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"# sm_80: {facts_dir / 'sm_80.toml'}",
        "fact    expected         kind      method    source",
        "------  ---------------  --------  --------  --------",
        "lds     30 ± 0.5 cycles  measured  chase     2024",
        "",
        f"# sm_90: {facts_dir / 'sm_90.toml'}",
        "fact    expected          kind      method                                                        source",
        "------  ----------------  --------  ------------------------------------------------------------  "
        "----------------------------------------------------------------------",
        "lds     23 ± 0.25 cycles  measured  pointer chase over a 64 KiB ring of shared memory, one threa  "
        "measured by hand on an RTX 3060 with the driver of that day; copied fr",
        "",
    ]


def test_facts_for_an_arch_the_folder_lacks_lists_what_it_has(capsys, facts_dir):
    assert refusal(capsys, "facts", "--arch", "sm_86", "--facts", facts_dir) == (
        f"gpuprops facts: {facts_dir} has no facts for sm_86 (it has sm_80, sm_90)")
