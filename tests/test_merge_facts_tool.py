"""tools/merge_facts.py: how a recording joins a facts file (added, replaced with the reviewed
tolerance kept, or dropped first so that a fact whose method changed is recorded afresh)."""

import pytest
from gp_testing import load_tool

from pytest_gpuprops import facts as F

BASE = '''arch = "sm_90"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "reviewed method"
source = "measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-21"

[tma_2d_4k_latency_cycles]
value = 395.0
tolerance_abs = 10.3
unit = "cycles"
method = "one CTA, one line"
source = "measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-24"
'''
RECORDED = '''arch = "sm_90"

[lds_latency_cycles]
value = 23.1
tolerance_abs = 0.5
unit = "cycles"
method = "recorded method"
source = "measured on NVIDIA H200, driver 580.159.04, CUDA 13.0, 2026-11-25"

[tma_2d_4k_latency_cycles]
value = 370.5
tolerance_abs = 2.96
unit = "cycles"
method = "line by line"
source = "measured on NVIDIA H200, driver 580.159.04, CUDA 13.0, 2026-11-25"

[const_cache_hit_latency_cycles]
value = 27.891
tolerance_abs = 0.25
unit = "cycles"
method = "const chase"
source = "measured on NVIDIA H200, driver 580.159.04, CUDA 13.0, 2026-11-25"
'''


merge_facts = load_tool("merge_facts")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "rec.toml").write_text(RECORDED)
    return tmp_path


def _facts(path):
    return {f.name: f for f in F._parse(path).values()}


def test_missing_facts_are_added_and_present_ones_kept(files, capsys):
    assert merge_facts.main([str(files / "base.toml"), str(files / "rec.toml"), "-o", str(files / "out.toml")]) == 0
    out = _facts(files / "out.toml")
    assert sorted(out) == ["const_cache_hit_latency_cycles", "lds_latency_cycles", "tma_2d_4k_latency_cycles"]
    assert out["lds_latency_cycles"].value == 23.0 and out["tma_2d_4k_latency_cycles"].value == 395.0
    assert out["const_cache_hit_latency_cycles"].value == 27.891
    assert "3 facts (+1 against" in capsys.readouterr().out


def test_replace_takes_the_recorded_value_and_source_but_keeps_the_reviewed_tolerance(files):
    merge_facts.main([str(files / "base.toml"), str(files / "rec.toml"), "-o", str(files / "out.toml"),
                  "--replace", "^lds_"])
    lds = _facts(files / "out.toml")["lds_latency_cycles"]
    assert (lds.value, lds.tolerance, lds.method) == (23.1, 0.25, "reviewed method")
    assert "H200" in lds.source


def test_drop_removes_facts_whose_method_changed_so_the_recording_brings_them_whole(files):
    merge_facts.main([str(files / "base.toml"), str(files / "rec.toml"), "-o", str(files / "out.toml"),
                  "--drop", "^tma_"])
    tma = _facts(files / "out.toml")["tma_2d_4k_latency_cycles"]
    assert (tma.value, tma.tolerance, tma.method) == (370.5, 2.96, "line by line")
    # without a recording: the base without them, for a recording run to fill
    merge_facts.main([str(files / "base.toml"), "-o", str(files / "dropped.toml"), "--drop", "^tma_"])
    assert sorted(_facts(files / "dropped.toml")) == ["lds_latency_cycles"]


def test_neither_a_recording_nor_a_drop_is_a_usage_error(files):
    with pytest.raises(SystemExit) as e:
        merge_facts.main([str(files / "base.toml"), "-o", str(files / "out.toml")])
    assert e.value.code == 2
