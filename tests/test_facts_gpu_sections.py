"""Per-GPU sections of the facts files: memory-system facts belong to a GPU, not to its arch."""

import pytest

from pytest_gpuprops import facts as F

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
    src = F.provenance("NVIDIA H100 80GB HBM3", "580.159.04", "13.0")
    sm = F.Fact(name="lds_latency_cycles", arch="sm_90", unit="cycles", method="chase", source=src, value=23.0)
    mem = F.Fact(name="dram_latency_cycles", arch="sm_90", unit="cycles", method="cold chase", source=src, value=801.5)
    p = F.write_facts(tmp_path / "rec.toml", "sm_90", [sm, mem], meta={"gpu": "NVIDIA H100 80GB HBM3"})
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
    p = F.write_facts(tmp_path / "x.toml", "sm_90", [f])
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
