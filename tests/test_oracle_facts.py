"""The facts layer: parsing, tolerance, record-mode output, against hand-written TOML."""

import datetime
import os

import pytest

from pytest_gpuprops import facts as F


def _fact(**kw):
    base = dict(name="lds", arch="sm_90", unit="cycles", method="m", source="s", value=23.0)
    base.update(kw)
    return F.Fact(**base)


# ----------------------------------------------------------------------------------------------
# tolerance and acceptance


@pytest.mark.parametrize("kw, tol", [
    (dict(tolerance_abs=0.5), 0.5),
    (dict(tolerance_rel=0.1), 2.3),
    (dict(tolerance_abs=3.0, tolerance_rel=0.1), 3.0),       # the wider of the two
    (dict(value=-10.0, tolerance_rel=0.1), 1.0),             # relative to |value|
    (dict(value=None, tolerance_abs=0.25, tolerance_rel=0.5), 0.25),
    (dict(), 0.0),
])
def test_tolerance(kw, tol):
    assert _fact(**kw).tolerance == pytest.approx(tol)


def test_accepts_inside_and_on_the_edges_only():
    f = _fact(tolerance_abs=0.5)
    assert f.accepts(23.0) and f.accepts(23.5) and f.accepts(22.5)
    assert not f.accepts(23.50001) and not f.accepts(22.49999)
    exact = _fact()
    assert exact.accepts(23.0) and not exact.accepts(23.001)
    assert not _fact(value=None, tolerance_abs=100.0).accepts(0.0)  # a static fact accepts no measurement
    assert not _fact(value=0.0).accepts(0.1) and _fact(value=0.0).accepts(0.0)


def test_expected_text():
    assert _fact(tolerance_abs=0.5).expected_text() == "23 ± 0.5 cycles"
    assert _fact(value=128.0, unit="B/clk", tolerance_rel=0.02).expected_text() == "128 ± 2.56 B/clk"
    assert _fact(tolerance_abs=0.123456).expected_text() == "23 ± 0.123 cycles"
    static = _fact(kind="static", value=None, by_compiler={"nvrtc 13.0": 20, "nvrtc 13.5": 24})
    assert static.expected_text() == "20 (nvrtc 13.0), 24 (nvrtc 13.5)"


def test_fact_defaults():
    f = F.Fact(name="a", arch="sm_90", unit="u", method="m", source="s")
    assert (f.value, f.tolerance_abs, f.tolerance_rel, f.kind, f.by_compiler) == (None, 0.0, 0.0, "measured", {})


# ----------------------------------------------------------------------------------------------
# parsing


GOOD = '''arch = "sm_90"
gpu = "NVIDIA H200"
recorded = 3

[lds_latency_cycles]
value = 30
tolerance_abs = 0.5
unit = "cycles"
method = "chase"
source = "measured"

[bw]
value = 128.0
tolerance_rel = 0.02
unit = "B/clk"
method = "sts"
source = "measured"

[dep_spacing]
kind = "static"
by_compiler = { "nvrtc 13.5" = 24 }
unit = "cycles"
method = "sass"
source = "compiled"
'''


def test_parse_a_hand_written_file(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text(GOOD)
    f = F.load_facts("sm_90", p)
    assert f.arch == "sm_90" and f.path == p and f.meta == {"arch": "sm_90", "gpu": "NVIDIA H200", "recorded": 3}
    assert sorted(f) == ["bw", "dep_spacing", "lds_latency_cycles"]
    assert f["lds_latency_cycles"] == F.Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="chase",
                                             source="measured", value=30.0, tolerance_abs=0.5)
    assert isinstance(f["lds_latency_cycles"].value, float)
    assert f["bw"].tolerance_rel == 0.02 and f["bw"].tolerance_abs == 0.0 and f["bw"].kind == "measured"
    dep = f["dep_spacing"]
    assert dep.kind == "static" and dep.value is None and dep.by_compiler == {"nvrtc 13.5": 24}
    # a folder of sm_XX.toml works too
    assert F.load_facts("sm_90", tmp_path)["bw"].value == 128.0


@pytest.mark.parametrize("text, message", [
    ('gpu = "x"\n', 'top-level key arch = "sm_XX" is missing'),
    ('arch = 90\n', 'top-level key arch = "sm_XX" is missing'),
    ('arch = "sm_90"\n[Bad_Name]\nvalue = 1\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     "fact name 'Bad_Name' must be lower_snake_case"),
    ('arch = "sm_90"\n[9x]\nvalue = 1\nunit = "c"\nmethod = "m"\nsource = "s"\n', "must be lower_snake_case"),
    ('arch = "sm_90"\n[x]\nunit = "c"\nmethod = "m"\nsource = "s"\n', r"\[x\] lacks value;"),
    ('arch = "sm_90"\n[x]\nvalue = 1\nmethod = "m"\nsource = "s"\n', r"\[x\] lacks unit;"),
    ('arch = "sm_90"\n[x]\nvalue = 1\nunit = ""\nmethod = "m"\nsource = "s"\n',
     r"fact \[x\] unit must be a non-empty string, not ''"),
    ('arch = "sm_90"\n[x]\nvalue = 1\nunit = "c"\nsource = "s"\n', r"\[x\] lacks method;"),
    ('arch = "sm_90"\n[x]\nvalue = 1\nunit = "c"\nmethod = "m"\n', r"\[x\] lacks source;"),
    ('arch = "sm_90"\n[x]\nkind = "static"\nunit = "c"\nmethod = "m"\nsource = "s"\n', r"\[x\] lacks by_compiler"),
    ('arch = "sm_90"\n[x]\nkind = "static"\nby_compiler = {}\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     r"\[x\] lacks by_compiler"),
    ('arch = "sm_90"\n[x]\nvalue = "fast"\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     r"fact \[x\] value = 'fast': expected a finite number"),
    ('arch = "sm_90"\n[x]\nvalue = 1\ntolerance_abs = [1]\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     r"fact \[x\] tolerance_abs = \[1\]: expected a finite number >= 0"),
    # every measured fact needs a tolerance, and a key the schema does not know is refused, not ignored
    ('arch = "sm_90"\n[x]\nvalue = 1\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     r"fact \[x\] has no tolerance: give tolerance_abs \(in its unit\) and/or tolerance_rel"),
    ('arch = "sm_90"\n[x]\nvalue = 1\ntolerence_abs = 1\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     r"fact \[x\] unknown key\(s\) tolerence_abs for a measured fact; allowed: value, tolerance_abs, "),
    ('arch = "sm_90"\n[x\n', "cannot read facts file"),
])
def test_malformed_files_say_which_file_and_what(tmp_path, text, message):
    p = tmp_path / "sm_90.toml"
    p.write_text(text)
    with pytest.raises(F.FactsError, match=message) as e:
        F.load_facts("sm_90", p)
    assert str(p) in str(e.value)


def test_lacks_lists_every_missing_key(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text('arch = "sm_90"\n[x]\nkind = "measured"\nmethod = "m"\n')
    with pytest.raises(F.FactsError) as e:
        F.load_facts("sm_90", p)
    # every problem of the file, one per line, then where the schema is described
    assert str(e.value) == (f"{p}: \n"
                            "  fact [x] lacks value, unit, source; every fact needs a value, unit, method and source\n"
                            "  fact [x] has no tolerance: give tolerance_abs (in its unit) and/or tolerance_rel (a "
                            "fraction, 0.02 = 2 %); write tolerance_abs = 0 for a fact that must hold exactly\n"
                            "  (see the facts TOML schema in README.md)")


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_90", tmp_path / "none.toml")
    assert str(e.value) == f"facts file {tmp_path / 'none.toml'} does not exist"
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_86", tmp_path)
    assert str(e.value) == (f"no facts for sm_86 in folder {tmp_path} (it has: none); record them with "
                            f"--gpuprops-record {tmp_path / 'sm_86.toml'} on a sm_86 GPU")
    (tmp_path / "sm_90.toml").write_text(GOOD)
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_86", tmp_path)
    assert str(e.value).startswith(f"no facts for sm_86 in folder {tmp_path} (it has: sm_90); ")
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_86", tmp_path / "sm_90.toml")
    assert str(e.value) == (f"facts file {tmp_path / 'sm_90.toml'} is for sm_90, not sm_86; to check several archs "
                            "pass a folder of sm_XX.toml files")


def test_packaged_archs_and_the_message_for_an_unrecorded_one():
    assert F.packaged_archs() == ["sm_80", "sm_86", "sm_89", "sm_90"]
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_75")
    msg = str(e.value)
    assert "no facts recorded for sm_75 (packaged: sm_80, sm_86, sm_89, sm_90)" in msg
    assert "'pytest hwtests --gpuprops-record sm_75.toml' on a sm_75 GPU" in msg and "--gpuprops-facts" in msg


def test_packaged_file_is_used_without_a_path():
    f = F.load_facts("sm_86")
    assert f.path == F.PACKAGED_DIR / "sm_86.toml" and f.arch == "sm_86"


def test_need_names_the_fact_the_arch_and_the_file(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text(GOOD)
    f = F.load_facts("sm_90", p)
    assert f.need("bw") is f["bw"]
    with pytest.raises(F.MissingFacts) as e:
        f.need("nope")
    assert str(e.value) == (f"no fact 'nope' for sm_90 in {p}; record it with --gpuprops-record PATH on a sm_90 "
                            "GPU, or add a [nope] table")
    with pytest.raises(F.MissingFacts, match=r"in \(no file\)"):
        F.Facts("sm_80", None, {}, {}).need("x")


# ----------------------------------------------------------------------------------------------
# record mode


def test_provenance():
    assert F.provenance("NVIDIA H200", "580.1", "13.0", datetime.date(2026, 1, 2)) == \
        "measured on NVIDIA H200, driver 580.1, CUDA 13.0, 2026-01-02"
    assert F.provenance("G", "d", "c").endswith(datetime.date.today().isoformat())


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
    assert F._toml_value(value) == text


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_values_are_not_recorded(bad):
    with pytest.raises(F.FactsError, match="non-finite"):
        F._toml_value(bad)


def test_dumps_by_hand():
    measured = _fact(name="lds", tolerance_abs=0.25, tolerance_rel=0.02, source='on "G"')
    static = F.Fact(name="dep", arch="sm_90", unit="cycles", method="m", source="s", kind="static",
                    by_compiler={"nvrtc 13.5": 24})
    bare = _fact(name="bare")  # no tolerance: written as tolerance_abs = 0.0 (must hold exactly), as the schema asks
    text = F.dumps("sm_90", [measured, static, bare], meta={"gpu": "G", "n": 2})
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
    assert F.dumps("sm_80", []) == 'arch = "sm_80"\n'


def test_write_facts_round_trip_force_and_folders(tmp_path):
    p = tmp_path / "new" / "dir" / "sm_90.toml"
    facts = [_fact(tolerance_abs=0.5)]
    assert F.write_facts(p, "sm_90", facts, meta={"gpu": "G"}) == p
    assert F.load_facts("sm_90", p)["lds"] == facts[0] and F.load_facts("sm_90", p).meta["gpu"] == "G"
    with pytest.raises(F.FactsError, match="exists; pass --force"):
        F.write_facts(p, "sm_90", [_fact(value=99.0)])
    assert F.load_facts("sm_90", p)["lds"].value == 23.0  # untouched
    F.write_facts(p, "sm_90", [_fact(value=99.0)], force=True)
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
    assert F.default_tolerance(unit, value, noise) == pytest.approx(tol)


def test_unrecorded_arch_message_exactly():
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_75")
    assert str(e.value) == ("no facts recorded for sm_75 (packaged: sm_80, sm_86, sm_89, sm_90); run 'pytest hwtests "
                            "--gpuprops-record sm_75.toml' on a sm_75 GPU to record them, then review and pass it "
                            "with --gpuprops-facts")
