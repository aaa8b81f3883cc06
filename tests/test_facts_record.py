"""Record mode (pytest_gpuprops/facts_record.py): provenance, each value as TOML, the text a record
writes (arch facts, a GPU's facts under its section), a write refused before anything is made, and
the tolerance a recorded fact gets."""

from __future__ import annotations

import datetime
import os

import pytest
from gp_testing import named_fact

from pytest_gpuprops import facts as F
from pytest_gpuprops import facts_record


def _fact(**kw):
    base = dict(name="lds", arch="sm_90", unit="cycles", method="m", source="s", value=23.0)
    base.update(kw)
    return F.Fact(**base)


def test_provenance():
    assert facts_record.provenance("NVIDIA H200", "580.1", "13.0", datetime.date(2026, 1, 2)) == \
        "measured on NVIDIA H200, driver 580.1, CUDA 13.0, 2026-01-02"
    assert facts_record.provenance("G", "d", "c").endswith(datetime.date.today().isoformat())


class _Scalar:
    """Looks like a numpy scalar: has item()."""

    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


@pytest.mark.parametrize("value, text", [
    (True, "true"), (False, "false"), (3, "3"), (1.23456, "1.2346"), (2.0, "2.0"), (-0.5, "-0.5"),
    ("plain", '"plain"'), ('say "hi"', '"say \\"hi\\""'), ("a\\b", '"a\\\\b"'), ("two\nlines", '"two lines"'),
    ({"nvrtc 13.5": 24}, '{ "nvrtc 13.5" = 24 }'), ({"a": 1, "b": 2.5}, '{ "a" = 1, "b" = 2.5 }'),
    (_Scalar(7), "7"), (_Scalar(0.123456), "0.1235"),
])
def test_toml_values(value, text):
    assert facts_record._toml_value(value) == text


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_values_are_not_recorded(bad):
    with pytest.raises(F.FactsError, match="non-finite"):
        facts_record._toml_value(bad)


def test_dumps_by_hand():
    measured = _fact(name="lds", tolerance_abs=0.25, tolerance_rel=0.02, source='on "G"')
    static = F.Fact(name="dep", arch="sm_90", unit="cycles", method="m", source="s", kind="static",
                    by_compiler={"nvrtc 13.5": 24})
    bare = _fact(name="bare")  # no tolerance: written as tolerance_abs = 0.0 (must hold exactly), as the schema asks
    text = facts_record.dumps("sm_90", [measured, static, bare], meta={"gpu": "G", "n": 2})
    assert text == '''arch = "sm_90"
gpu = "G"
n = 2

[lds]
value = 23.0
tolerance_abs = 0.25
tolerance_rel = 0.02
unit = "cycles"
method = "m"
source = "on \\"G\\""

[dep]
kind = "static"
by_compiler = { "nvrtc 13.5" = 24 }
unit = "cycles"
method = "m"
source = "s"

[bare]
value = 23.0
tolerance_abs = 0.0
unit = "cycles"
method = "m"
source = "s"
'''
    assert facts_record.dumps("sm_80", []) == 'arch = "sm_80"\n'


def test_write_facts_round_trip_force_and_folders(tmp_path):
    p = tmp_path / "new" / "dir" / "sm_90.toml"
    facts = [_fact(tolerance_abs=0.5)]
    assert facts_record.write_facts(p, "sm_90", facts, meta={"gpu": "G"}) == p
    assert F.load_facts("sm_90", p)["lds"] == facts[0] and F.load_facts("sm_90", p).meta["gpu"] == "G"
    with pytest.raises(F.FactsError, match="exists; pass --force"):
        facts_record.write_facts(p, "sm_90", [_fact(value=99.0)])
    assert F.load_facts("sm_90", p)["lds"].value == 23.0  # untouched
    facts_record.write_facts(p, "sm_90", [_fact(value=99.0)], force=True)
    assert F.load_facts("sm_90", p)["lds"].value == 99.0
    assert sorted(os.listdir(p.parent)) == ["sm_90.toml"]  # no temporary file left behind


@pytest.mark.parametrize("unit, value, noise, tol", [
    ("cycles", 10.0, 0.001, (0.5, 0.0)),      # 3 * 0.001 * 10 = 0.03 < 0.5
    ("cycles", 10.0, 0.05, (1.5, 0.0)),       # 3 * 0.05 * 10 = 1.5
    ("cycles", -10.0, 0.05, (1.5, 0.0)),
    ("cycles", 1000.0, 0.0001234, (0.5, 0.0)),
    ("cycles", 1000.0, 0.0004321, (1.296, 0.0)),  # 1.2963 rounded to 3 places
    ("B/clk", 128.0, 0.001, (0.0, 0.03)),     # 3 * 0.001 < 3 %
    ("B/clk", 128.0, 0.02, (0.0, 0.06)),
    ("B/clk", 128.0, 0.012345, (0.0, 0.037)),  # 0.037035 rounded to 4 places
])
def test_default_tolerance(unit, value, noise, tol):
    assert facts_record.default_tolerance(unit, value, noise) == pytest.approx(tol)


# ----------------------------------------------------------------------------------------------
# the text written


def test_dumps_files_gpu_facts_under_their_gpu_without_a_scope_line(none_registered):
    F.register_gpu_scoped("dram_latency_cycles")
    facts = [named_fact("lds_latency_cycles"), named_fact("dram_latency_cycles", value=801.5, tolerance_abs=5.0,
                                                method="cold chase")]
    assert facts_record.dumps("sm_90", facts, meta={"gpu": "NVIDIA H100 80GB HBM3"}) == '''arch = "sm_90"
gpu = "NVIDIA H100 80GB HBM3"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"

[gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
value = 801.5
tolerance_abs = 5.0
unit = "cycles"
method = "cold chase"
source = "s"
'''
    assert facts_record.dumps("sm_90", [named_fact("dram", scope="gpu", tolerance_abs=0.0, tolerance_rel=0.02)]) == '''arch = "sm_90"

[dram]
scope = "gpu"
value = 23.0
tolerance_rel = 0.02
unit = "cycles"
method = "chase"
source = "s"
'''


def test_write_facts_text_and_a_refused_record(tmp_path, none_registered):
    p = facts_record.write_facts(tmp_path / "rec.toml", "sm_90", [named_fact("old", scope="gpu", gpu="H100", value=7)])
    assert p.read_text() == '''arch = "sm_90"

[gpus."H100".old]
value = 7
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"
'''
    bad = tmp_path / "new" / "bad.toml"
    with pytest.raises(F.FactsError) as e:
        facts_record.write_facts(bad, "sm_90", [named_fact("x", unit="")])
    assert str(e.value) == f"{bad}: fact [x] unit must be a non-empty string, not ''\n  (see the facts TOML schema in docs/reference.md)"
    assert not bad.parent.exists()
