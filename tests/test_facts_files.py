"""The facts layer (facts.py): parsing, tolerance, scopes (arch and per-GPU sections) and
record-mode output, against hand-written TOML, and every message of a file that is incomplete or
malformed, to the last character."""

from __future__ import annotations

import pathlib

import pytest
from gp_testing import named_fact

from pytest_gpuprops import facts, facts_record
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
                            "  (see the facts TOML schema in docs/reference.md)")


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


def test_unrecorded_arch_message_exactly():
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_75")
    assert str(e.value) == ("no facts recorded for sm_75 (packaged: sm_80, sm_86, sm_89, sm_90); run 'pytest hwtests "
                            "--gpuprops-record sm_75.toml' on a sm_75 GPU to record them, then review and pass it "
                            "with --gpuprops-facts")


# ----------------------------------------------------------------------------------------------
# the packaged facts


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
def test_packaged_facts_parse_with_method_and_source(arch):
    f = F.load_facts(arch)
    assert f.arch == arch and len(f) >= 2
    assert all(x.method and x.source and x.unit for x in f.values())


def test_unknown_arch_says_how_to_record():
    with pytest.raises(F.MissingFacts, match="--gpuprops-record"):
        F.load_facts("sm_75")


def test_record_round_trip_and_refusal_to_overwrite(tmp_path):
    p = tmp_path / "sm_90.toml"
    fact = F.Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method='chase "x"', value=23.0,
                  source=facts_record.provenance("NVIDIA H200", "580.159.04", "13.0"), tolerance_abs=0.25)
    facts_record.write_facts(p, "sm_90", [fact], meta={"gpu": "NVIDIA H200"})
    back = F.load_facts("sm_90", p)
    assert back["lds_latency_cycles"] == fact and back.meta["gpu"] == "NVIDIA H200"
    with pytest.raises(F.FactsError, match="--force"):
        facts_record.write_facts(p, "sm_90", [fact])
    facts_record.write_facts(p, "sm_90", [fact], force=True)


def test_malformed_facts_name_the_file_and_key(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text('arch = "sm_90"\n[x]\nvalue = 1\nunit = "c"\n')
    with pytest.raises(F.FactsError, match=r"\[x\] lacks method, source"):
        F.load_facts("sm_90", p)
    p.write_text('arch = "sm_86"\n')
    with pytest.raises(F.MissingFacts, match="is for sm_86"):
        F.load_facts("sm_90", p)


# ----------------------------------------------------------------------------------------------
# per-GPU sections: memory-system facts belong to a GPU, not to its arch


ARCH_FILE = '''arch = "sm_90"
gpu = "NVIDIA H200"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "measured"

[l2_hit_latency_cycles]
value = 260.0
tolerance_abs = 5.0
unit = "cycles"
method = "chase"
source = "measured on the arch default"

[old_dram_latency_cycles]
scope = "gpu"
value = 700.0
tolerance_abs = 5.0
unit = "cycles"
method = "chase"
source = "measured on NVIDIA H200"

[gpus."NVIDIA H100 80GB HBM3".l2_hit_latency_cycles]
value = 270.0
tolerance_rel = 0.05
unit = "cycles"
method = "chase, cg"
source = "measured on NVIDIA H100 80GB HBM3"

[gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
value = 800.0
tolerance_abs = 5.0
unit = "cycles"
method = "cold chase"
source = "measured on NVIDIA H100 80GB HBM3"

[gpus."NVIDIA H200".dram_latency_cycles]
value = 750.0
tolerance_abs = 5.0
unit = "cycles"
method = "cold chase"
source = "measured on NVIDIA H200"
'''


@pytest.fixture
def facts_file(tmp_path):
    p = tmp_path / "sm_90.toml"
    p.write_text(ARCH_FILE)
    return p


def test_without_a_gpu_name_only_the_arch_facts_apply(facts_file):
    f = F.load_facts("sm_90", facts_file)
    assert set(f) == {"lds_latency_cycles", "l2_hit_latency_cycles", "old_dram_latency_cycles"}
    assert f["l2_hit_latency_cycles"].value == 260.0 and f["l2_hit_latency_cycles"].scope == "arch"
    assert f["old_dram_latency_cycles"].scope == "gpu" and f["old_dram_latency_cycles"].gpu == "NVIDIA H200"
    assert set(f.gpu_sections) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}


def test_a_gpu_section_overrides_and_adds(facts_file):
    f = F.load_facts("sm_90", facts_file, gpu_name="NVIDIA H100 80GB HBM3")
    assert f["lds_latency_cycles"].value == 23.0  # the SM's fact, shared by the arch
    l2 = f["l2_hit_latency_cycles"]
    assert (l2.value, l2.scope, l2.gpu, l2.tolerance_rel) == (270.0, "gpu", "NVIDIA H100 80GB HBM3", 0.05)
    assert f["dram_latency_cycles"].value == 800.0
    assert "old_dram_latency_cycles" not in f  # measured on an H200: not this GPU's
    assert f.gpu == "NVIDIA H100 80GB HBM3"


def test_sections_are_the_arch_and_each_gpu_as_in_the_file_or_the_one_gpu_selected(facts_file):
    f = F.load_facts("sm_90", facts_file)
    assert [(name, sorted(table)) for name, table in f.sections()] == [
        ("arch", ["l2_hit_latency_cycles", "lds_latency_cycles", "old_dram_latency_cycles"]),
        *[(g, sorted(t)) for g, t in f.gpu_sections.items()]]
    assert [g for g, _ in f.sections()[1:]] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    h100 = F.load_facts("sm_90", facts_file, gpu_name="NVIDIA H100 80GB HBM3")
    assert [(name, table is h100) for name, table in h100.sections()] == [("NVIDIA H100 80GB HBM3", True)]


def test_gpu_names_match_whatever_the_case_and_spacing(facts_file):
    f = F.load_facts("sm_90", facts_file, gpu_name="nvidia  h200")
    assert f["dram_latency_cycles"].value == 750.0
    assert f["l2_hit_latency_cycles"].value == 260.0  # no H200 override: the arch's
    assert f["old_dram_latency_cycles"].value == 700.0  # the file's own GPU


def test_a_gpu_with_no_section_gets_the_arch_facts_and_a_message_naming_it(facts_file):
    f = F.load_facts("sm_90", facts_file, gpu_name="NVIDIA H100 PCIe")
    assert set(f) == {"lds_latency_cycles", "l2_hit_latency_cycles"}
    with pytest.raises(F.MissingFacts, match=r'gpus\."NVIDIA H100 PCIe"\.dram_latency_cycles'):
        f.need("dram_latency_cycles")
    with pytest.raises(F.MissingFacts, match=r"add a \[nonexistent_fact\] table"):
        f.need("nonexistent_fact")


def test_record_writes_memory_facts_to_the_gpu_section(tmp_path, monkeypatch):
    monkeypatch.setattr(F, "GPU_SCOPED", set())
    F.register_gpu_scoped("dram_latency_cycles")
    src = facts_record.provenance("NVIDIA H100 80GB HBM3", "580.159.04", "13.0")
    sm = F.Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="chase", source=src, value=23.0)
    mem = F.Fact(name="dram_latency_cycles", arch="sm_90", unit="cycles", method="cold chase", source=src, value=801.5)
    p = facts_record.write_facts(tmp_path / "rec.toml", "sm_90", [sm, mem], meta={"gpu": "NVIDIA H100 80GB HBM3"})
    text = p.read_text()
    assert '[gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]' in text and "\n[lds_latency_cycles]" in text
    plain = F.load_facts("sm_90", p)
    assert "dram_latency_cycles" not in plain and plain["lds_latency_cycles"] == sm
    mine = F.load_facts("sm_90", p, gpu_name="NVIDIA H100 80GB HBM3")
    assert mine["dram_latency_cycles"].value == 801.5 and mine["dram_latency_cycles"].gpu == "NVIDIA H100 80GB HBM3"
    assert "dram_latency_cycles" not in F.load_facts("sm_90", p, gpu_name="NVIDIA H200")


def test_a_gpu_fact_with_no_gpu_to_file_it_under_keeps_its_scope(tmp_path):
    f = F.Fact(name="dram_latency_cycles", arch="sm_90", unit="cycles", method="m", source="s", value=1.0,
               scope="gpu")
    p = facts_record.write_facts(tmp_path / "x.toml", "sm_90", [f])
    assert F.load_facts("sm_90", p)["dram_latency_cycles"].scope == "gpu"


@pytest.mark.parametrize("text, match", [
    ('arch = "sm_90"\ngpus = 3\n', "must hold tables"),
    ('arch = "sm_90"\n[gpus."X"]\nvalue = 1\n', "must hold fact tables"),
    ('arch = "sm_90"\n[gpus."X".l2]\nvalue = 1\nunit = "c"\n', r"\[gpus.\"X\".l2\] lacks method"),
    ('arch = "sm_90"\n[x]\nscope = "sku"\nvalue = 1\ntolerance_abs = 0\nunit = "c"\nmethod = "m"\nsource = "s"\n',
     "scope 'sku'"),
])
def test_malformed_gpu_sections_are_refused(tmp_path, text, match):
    p = tmp_path / "sm_90.toml"
    p.write_text(text)
    with pytest.raises(F.FactsError, match=match):
        F.load_facts("sm_90", p)


def test_packaged_facts_still_load_for_a_named_gpu():
    f = F.load_facts("sm_90", gpu_name="NVIDIA H200")
    assert "lds_latency_cycles" in f


# ----------------------------------------------------------------------------------------------
# facts: check_facts_path, load_file, load_facts messages in full

ONE = '''arch = "{arch}"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"
'''


def test_check_facts_path_messages_in_full(tmp_path):
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(tmp_path / "nope")
    assert str(e.value) == (f"facts path {tmp_path / 'nope'} does not exist; pass a facts .toml file or a folder of "
                            "sm_XX.toml (gpuprops facts lists the packaged ones)")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(empty)
    assert str(e.value) == f"facts folder {empty} holds no sm_XX.toml files (found: nothing)"
    other = tmp_path / "other"
    other.mkdir()
    for name in "ihgfedcba":
        (other / f"{name}.txt").write_text("")
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(other)
    assert str(e.value) == (f"facts folder {other} holds no sm_XX.toml files (found: a.txt, b.txt, c.txt, d.txt, "
                            "e.txt, f.txt, g.txt, h.txt)")


def test_a_file_in_a_folder_must_be_named_for_its_arch(tmp_path):
    (tmp_path / "sm_80.toml").write_text(ONE.format(arch="sm_80"))
    (tmp_path / "sm_86.toml").write_text(ONE.format(arch="sm_90"))
    with pytest.raises(F.FactsError) as e:
        F.check_facts_path(tmp_path)
    assert str(e.value) == (f"{tmp_path / 'sm_86.toml'}: arch = 'sm_90', but the file is named sm_86.toml; in a "
                            "folder each file must be named for its arch (rename it, or fix arch)")
    (tmp_path / "sm_86.toml").write_text(ONE.format(arch="sm_86"))
    assert [(f.arch, f.path) for f in F.check_facts_path(tmp_path)] == [
        ("sm_80", tmp_path / "sm_80.toml"), ("sm_86", tmp_path / "sm_86.toml")]
    assert [f.arch for f in F.check_facts_path(tmp_path / "sm_86.toml")] == ["sm_86"]


def test_load_messages_in_full(tmp_path):
    with pytest.raises(F.FactsError) as e:
        F.load_file(tmp_path / "none.toml")
    assert str(e.value) == f"facts file {tmp_path / 'none.toml'} does not exist"
    (tmp_path / "sm_90.toml").write_text(ONE.format(arch="sm_90"))
    (tmp_path / "sm_80.toml").write_text(ONE.format(arch="sm_80"))
    with pytest.raises(F.MissingFacts) as e:
        F.load_facts("sm_86", tmp_path)
    assert str(e.value) == (f"no facts for sm_86 in folder {tmp_path} (it has: sm_80, sm_90); record them with "
                            f"--gpuprops-record {tmp_path / 'sm_86.toml'} on a sm_86 GPU")


# ----------------------------------------------------------------------------------------------
# facts: GPU scope


def test_register_gpu_scoped_checks_every_name_first(none_registered):
    with pytest.raises(F.FactsError) as e:
        F.register_gpu_scoped("dram_latency_cycles", "L2-Latency")
    assert str(e.value) == "fact name 'L2-Latency' must be lower_snake_case"
    assert F.GPU_SCOPED == set() and not F.is_gpu_scoped("dram_latency_cycles")
    F.register_gpu_scoped("dram_latency_cycles", "l2_bw")
    assert F.GPU_SCOPED == {"dram_latency_cycles", "l2_bw"} and F.is_gpu_scoped("l2_bw")


def test_is_gpu_scoped_by_registration_scope_or_section(none_registered):
    facts = F.Facts("sm_90", None, {"lds": named_fact("lds"), "dram": named_fact("dram", scope="gpu", gpu="G1")}, {})
    facts.gpu_sections = {"G2": {"l2": named_fact("l2", scope="gpu", gpu="G2")}}
    assert not F.is_gpu_scoped("dram") and not F.is_gpu_scoped("lds")  # nothing registered, no file
    assert [F.is_gpu_scoped(n, facts) for n in ("lds", "dram", "l2", "other")] == [False, True, True, False]
    F.register_gpu_scoped("lds")
    assert F.is_gpu_scoped("lds") and F.is_gpu_scoped("lds", facts)


GPU_FILE = '''arch = "sm_90"
gpu = "NVIDIA H200"

[lds_latency_cycles]
value = 23.0
tolerance_abs = 0.25
unit = "cycles"
method = "chase"
source = "s"

[gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
value = 800.0
tolerance_abs = 5.0
unit = "cycles"
method = "cold chase"
source = "s"
'''


def test_need_on_a_gpu_says_the_fact_is_the_gpus(tmp_path, none_registered):
    """A fact only a GPU section holds is the GPU's even when no test module registered it."""
    p = tmp_path / "sm_90.toml"
    p.write_text(GPU_FILE)
    h200 = F.load_facts("sm_90", p, gpu_name="NVIDIA H200")
    with pytest.raises(F.MissingFacts) as e:
        h200.need("dram_latency_cycles")
    assert str(e.value) == (f"no fact 'dram_latency_cycles' for the GPU 'NVIDIA H200' (sm_90) in {p}: it belongs to "
                            "the GPU's memory system; record it with --gpuprops-record PATH on this GPU, or add a "
                            '[gpus."NVIDIA H200".dram_latency_cycles] table')
    with pytest.raises(F.MissingFacts) as e:
        h200.need("l2_bw")
    assert str(e.value) == (f"no fact 'l2_bw' for sm_90 in {p}; record it with --gpuprops-record PATH on a sm_90 GPU, "
                            "or add a [l2_bw] table")
    assert h200.need("lds_latency_cycles").value == 23.0


def test_need_on_a_gpu_without_a_file(none_registered):
    facts = F.Facts("sm_86", None, {}, {})
    facts.gpu_sections = {"G2": {"dram": named_fact("dram", arch="sm_86", scope="gpu", gpu="G2")}}
    with pytest.raises(F.MissingFacts) as e:
        F.select_gpu(facts, "RTX A6000").need("dram")
    assert str(e.value) == ("no fact 'dram' for the GPU 'RTX A6000' (sm_86) in (no file): it belongs to the GPU's "
                            "memory system; record it with --gpuprops-record PATH on this GPU, or add a "
                            '[gpus."RTX A6000".dram] table')


def test_select_gpu_keeps_the_file_meta_and_sections(none_registered):
    path = pathlib.Path("/facts/sm_90.toml")
    meta = {"arch": "sm_90", "gpu": "NVIDIA H200", "recorded": 3}
    mine, other = named_fact("dram", scope="gpu", gpu="NVIDIA H200"), named_fact("old", scope="gpu", gpu="NVIDIA H100")
    facts = F.Facts("sm_90", path, {"lds": named_fact("lds"), "dram": mine, "old": other}, meta)
    section = {"l2": named_fact("l2", scope="gpu", gpu="nvidia  h200", value=260.0)}
    facts.gpu_sections = {"nvidia  h200": section}
    got = F.select_gpu(facts, " NVIDIA H200")
    assert (got.arch, got.path, got.meta, got.gpu, got.gpu_sections) == (
        "sm_90", path, meta, " NVIDIA H200", {"nvidia  h200": section})
    assert dict(got) == {"lds": named_fact("lds"), "dram": mine, "l2": section["l2"]}


def test_split_by_scope(none_registered):
    F.register_gpu_scoped("l2_bw")
    lds, own, h100, reg = (named_fact("lds"), named_fact("dram", scope="gpu"), named_fact("old", scope="gpu", gpu="H100"),
                           named_fact("l2_bw"))
    assert F.split_by_scope([lds, own, h100, reg], "H200") == ([lds], {"H200": [own, reg], "H100": [h100]})
    assert F.split_by_scope([lds, own, h100, reg], None) == ([lds, own, reg], {"H100": [h100]})


@pytest.mark.parametrize("value, tol, measured, ok", [
    (0.0, 0.5, 0.5 + 1e-12, True),   # exactly on the edge (the 1e-12 slack included): accepted
    (0.0, 0.5, -(0.5 + 1e-12), True),
    (0.0, 0.5, 0.5 + 2e-12, False),
    (0.0, 0.0, 1e-12, True),
    (0.0, 0.0, 2e-12, False),
])
def test_accepts_at_the_exact_edge(value, tol, measured, ok):
    assert named_fact("x", value=value, tolerance_abs=tol).accepts(measured) is ok


def test_a_document_held_as_text_is_validated_naming_its_record(tmp_path):
    p = tmp_path / "rec.toml"
    with pytest.raises(F.FactsError) as e:
        F.loads("x = \n", p)
    assert str(e.value) == f"internal error: record for {p} is not valid TOML: Invalid value (at line 1, column 5)"
    with pytest.raises(F.FactsError) as e:
        F.loads('gpu = "G"\n', p)
    assert str(e.value) == f'{p}: top-level key arch = "sm_XX" is missing (see the facts TOML schema in docs/reference.md)'


# -- a facts file that lacks something -------------------------------------------------------------

HEAD = 'arch = "sm_90"\n'
FULL = 'unit = "cycles"\nmethod = "m"\nsource = "s"\n'


def test_a_static_fact_needs_no_value_and_a_measured_one_no_compiler_table(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[dep]\nkind = "static"\nby_compiler = { "nvrtc 13.5" = 24 }\n' + FULL
                    + "\n[lds]\nvalue = 23\ntolerance_abs = 0.5\n" + FULL)
    parsed = facts.load_file(path)
    assert (parsed["dep"].kind, parsed["dep"].value, parsed["dep"].by_compiler) == ("static", None, {"nvrtc 13.5": 24})
    assert (parsed["lds"].kind, parsed["lds"].value, parsed["lds"].by_compiler) == ("measured", 23.0, {})


def test_a_fact_name_that_is_not_lower_snake_case_is_refused_in_a_gpu_section_too(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + "[LdsLatency]\nvalue = 23\ntolerance_abs = 0\n" + FULL)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == (f"{path}: fact name 'LdsLatency' must be lower_snake_case (a-z, 0-9, _)\n"
                              "  (see the facts TOML schema in docs/reference.md)")
    path.write_text(HEAD + '[gpus."NVIDIA H200".DramLatency]\nvalue = 670\ntolerance_abs = 20\n' + FULL)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == (f'{path}: fact [gpus."NVIDIA H200".DramLatency] name must be lower_snake_case '
                              "(a-z, 0-9, _)\n  (see the facts TOML schema in docs/reference.md)")


# -- facts files: folders, GPU sections, a fresh Facts ----------------------------------------------

def test_a_facts_file_that_is_a_folder_says_so(tmp_path):
    (tmp_path / "sm_90.toml").mkdir()
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(tmp_path / "sm_90.toml")
    assert str(exc.value) == f"facts file {tmp_path / 'sm_90.toml'} is a folder; pass a .toml file or a folder of sm_XX.toml"


GPU_FACT = "value = 670\ntolerance_abs = 20\n" + FULL


def test_a_gpu_sections_facts_carry_their_name_arch_gpu_and_scope(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[gpus."NVIDIA H200".dram_latency_cycles]\n' + GPU_FACT)
    fact = facts.load_file(path).gpu_sections["NVIDIA H200"]["dram_latency_cycles"]
    assert fact == facts.Fact(name="dram_latency_cycles", arch="sm_90", unit="cycles", method="m", source="s",
                              value=670.0, tolerance_abs=20.0, scope="gpu", gpu="NVIDIA H200")


def test_every_problem_of_a_gpu_section_is_listed_on_its_own_line(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[gpus."H200".a]\nvalue = 1\ntolerance_abs = 0\n[gpus."H200".b]\nvalue = 2\n'
                    'tolerance_abs = 0\n')
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    lacks = "lacks unit, method, source; every fact needs a value, unit, method and source"
    assert str(exc.value) == (f'{path}: fact [gpus."H200".a] {lacks}\n  fact [gpus."H200".b] {lacks}\n'
                              "  (see the facts TOML schema in docs/reference.md)")


def test_two_sections_for_one_gpu_are_refused_naming_it(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[gpus."NVIDIA H200".l2]\n' + GPU_FACT + '[gpus."nvidia  h200".l2]\n' + GPU_FACT)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == f"{path}: two sections name the GPU 'nvidia  h200'"


def test_a_fresh_facts_set_has_no_gpu_and_no_sections(tmp_path):
    fresh = facts.Facts("sm_90", None, {}, {})
    assert fresh.gpu_sections == {} and fresh.gpu is None
    with pytest.raises(facts.MissingFacts) as exc:
        fresh.need("dram_latency_cycles")
    assert str(exc.value) == ("no fact 'dram_latency_cycles' for sm_90 in (no file); record it with --gpuprops-record "
                              "PATH on a sm_90 GPU, or add a [dram_latency_cycles] table")


def test_every_problem_of_every_fact_is_listed_after_a_bad_name(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + "[BadName]\nvalue = 1\n\n[a]\nvalue = 1\ntolerance_abs = 0\ncolour = 1\nshade = 2\n"
                    + FULL + '\n[b]\nvalue = 2\ntolerance_abs = 0\nunit = "c"\nmethod = 5\nsource = "s"\n')
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    allowed = "value, tolerance_abs, tolerance_rel, unit, method, source, kind, scope, units_range, same_unit_tolerance_rel"
    assert str(exc.value) == (f"{path}: \n  fact name 'BadName' must be lower_snake_case (a-z, 0-9, _)\n"
                              f"  fact [a] unknown key(s) colour, shade for a measured fact; allowed: {allowed}\n"
                              "  fact [b] method must be a non-empty string, not 5\n"
                              "  (see the facts TOML schema in docs/reference.md)")


def test_a_scope_that_is_neither_arch_nor_gpu_names_the_file(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(HEAD + '[a]\nvalue = 1\ntolerance_abs = 0\nscope = "node"\n' + FULL)
    with pytest.raises(facts.FactsError) as exc:
        facts.load_file(path)
    assert str(exc.value) == f'{path}: fact [a] has scope \'node\'; use "arch" or "gpu"'


# ----------------------------------------------------------------------------------------------
# a fact that differs by unit: the units measured so far, and a tolerance that must cover them

POPULATION = """arch = "sm_90"

[cluster_barrier_cluster8_cycles]
value = {value}
tolerance_abs = {tol}
units_range = {units}
unit = "cycles"
method = "barrier.cluster arrive + wait"
source = "measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-25"
"""


def test_units_range_is_read_and_written_back(tmp_path):
    path = tmp_path / "sm_90.toml"
    path.write_text(POPULATION.format(value=68.9375, tol=2.5, units="[66.9375, 70.9375]"))
    f = F.load_facts("sm_90", path)["cluster_barrier_cluster8_cycles"]
    assert f.units_range == (66.9375, 70.9375)
    again = tmp_path / "again.toml"
    again.write_text(facts_record.dumps("sm_90", [f]))
    assert "units_range = [66.9375, 70.9375]" in again.read_text()
    assert F.load_facts("sm_90", again)["cluster_barrier_cluster8_cycles"] == f


@pytest.mark.parametrize("value, tol, units, message", [
    # the rounding defect: a midpoint rounded up and no margin left an edge unit outside its own population
    (68.938, 2.0, "[66.9375, 70.9375]", r"units_range = \[66.9375, 70.9375\] reaches outside value \+- tolerance "
                                        r"\(66.938 .. 70.938\): the tolerance must cover every unit measured"),
    (68.9375, 1.0, "[68.0, 70.0]", r"units_range = \[68.0, 70.0\] reaches outside value \+- tolerance "
                                   r"\(67.9375 .. 69.9375\)"),  # the highest unit above the band
    (68.9375, 2.5, "[70.9375, 66.9375]", r"expected \[lowest, highest\]"),
    (68.9375, 2.5, "[66.9375]", r"expected \[lowest, highest\]"),
    (68.9375, 2.5, '["a", "b"]', r"expected \[lowest, highest\]"),
])
def test_a_units_range_the_tolerance_does_not_cover_is_refused(tmp_path, value, tol, units, message):
    path = tmp_path / "sm_90.toml"
    path.write_text(POPULATION.format(value=value, tol=tol, units=units))
    with pytest.raises(F.FactsError, match=message):
        F.load_facts("sm_90", path)
