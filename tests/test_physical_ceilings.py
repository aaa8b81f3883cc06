"""Every sm_90 fact that states a rate, a per-clock width or a clock is physically possible: at or
under the ceiling the hardware sets at the clock the fact ran at, and no clock above the GPU's maximum.
The value and every reading its population keeps (``units_range``) are checked, in the arch section and
in each GPU section of the real facts file; planted copies of the file show that each check fails on a
value past its ceiling.

The ceilings and where each number comes from are pytest_gpuprops/ceilings.py's (the same arithmetic
checks every measurement at run time, tests/test_ceilings.py). How they are applied to a facts file:

* TFLOP/s: at the section's sustained clock fact for that load (ceilings.RATES names it). The value
  must be at or under the ceiling at the clock fact's value, the highest reading at or under the
  ceiling at the highest clock the clock fact's units read (the two populations hold the same
  processes: the lowest and highest rate can be no more than the ceiling at the lowest and highest
  clock), and every reading at or under the ceiling at the GPU's maximum SM clock.
* GB/s from SM work (DRAM and L2 streams): at the GPU's maximum SM clock (these loads have no sustained
  clock fact of their own; their kernels read the maximum); DRAM rates also at or under the datasheet's
  peak (datasheets.DATASHEETS).
* GB/s over the node's links: one direction of the section's NVLinks (``nvlink_links_up`` x the
  per-link rate of ``nvlink_version``), or of PCIe gen 5 x16 for the host copies.
* B/clk per SM: one SM's 128 B/clk; wgmma chain intervals: at or above their FLOP floor.
* MHz: at or under the GPU's maximum SM clock (datasheets.DATASHEETS; the 1980 MHz NVML reported for
  the H100, nvmlDeviceGetMaxClockInfo, kept in every report's meta) plus the 0.5 MHz reading width."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_gpuprops import datasheets as ds
from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops.ceilings import (
    CLOCK_ALLOWANCE_MHZ,
    NVLINK_GBPS_PER_LINK,
    PCIE_GEN5_X16_GBPS,
    RATES,
    SM_BYTES_PER_CLK,
    under_wgmma_floor,
    wgmma_interval_floor,
)

ROOT = Path(__file__).resolve().parents[1]
SM90 = gp_facts.PACKAGED_DIR / "sm_90.toml"
SAMPLE_RUN = ROOT / "docs" / "samples" / "h100_full_run.json"
ARCH = "sm_90"

#: dense FLOP per SM per clock (datasheets.PER_SM_CYCLE: ffma 256, wgmma_bf16 4096, wgmma_e4m3 8192)
FLOP_PER_CLK = ds.PER_SM_CYCLE[ARCH]
#: the units a fact is checked against a ceiling for
CEILING_UNITS = ("TFLOP/s", "GB/s", "MHz", "B/clk", "bytes/cycle", "FLOP/clk/SM", "GB/s/SM")
TIME_UNITS = ("TFLOP/s", "GB/s", "MHz", "GB/s/SM")
#: B/clk facts of one SM's data path
PER_SM_BYTES = ("smem_sts_float_bytes_per_cycle", "smem_sts_float2_bytes_per_cycle", "smem_sts_float4_bytes_per_cycle",
                "smem_lds_float_bytes_per_cycle", "smem_lds_float2_bytes_per_cycle", "smem_lds_float4_bytes_per_cycle",
                "l1_load_bytes_per_cycle", "dsmem_load_bytes_per_cycle", "dsmem_store_bytes_per_cycle",
                *(f"dsmem_{op}_bytes_per_cycle_cluster{k}" for op in ("load", "store") for k in (2, 4, 8, 16)),
                "tma_2d_load_bytes_per_cycle_box1k_blocks1")


def readings(f: gp_facts.Fact) -> list[tuple[str, float]]:
    """The value and the lowest and highest reading its population keeps."""
    out = [("value", f.value)]
    if f.units_range:
        out += [("lowest reading", f.units_range[0]), ("highest reading", f.units_range[1])]
    return out


def ceiling_problems(facts: gp_facts.Facts) -> list[str]:
    """Each reading of ``facts`` past its physical ceiling, as 'section fact: what, by how much'."""
    problems = []
    for section, table in facts.sections():
        sheet = ds.datasheet_for(section) if section != "arch" else None
        for name, f in sorted(table.items()):
            if f.kind != "measured" or f.value is None:
                continue
            where = f"{section} {name}"
            floor = wgmma_interval_floor(name)
            if floor is not None:
                problems += [f"{where}: {what} {v:g} cycles is under {floor:g}, the instruction's FLOPs over the "
                             f"SM's peak FLOP/clk" for what, v in readings(f) if under_wgmma_floor(name, v)]
            if f.unit not in CEILING_UNITS:
                continue
            if f.unit in ("B/clk", "bytes/cycle"):
                problems += [f"{where}: {what} {v:g} B/clk is over one SM's {SM_BYTES_PER_CLK} B/clk"
                             for what, v in readings(f) if v > SM_BYTES_PER_CLK]
                continue
            if sheet is None:  # a time unit in the arch section, or a GPU without a datasheet
                continue  # named by test_every_rate_width_and_clock_fact_has_a_ceiling
            top = sheet.max_sm_clock_mhz
            if f.unit == "GB/s/SM":  # one SM's data path at the GPU's maximum SM clock
                ceiling = SM_BYTES_PER_CLK * top / 1e3
                problems += [f"{where}: {what} {v:g} GB/s/SM is over one SM's {SM_BYTES_PER_CLK} B/clk at {top} MHz, "
                             f"{ceiling:g} GB/s" for what, v in readings(f) if v > ceiling]
                continue
            if f.unit == "MHz":
                problems += [f"{where}: {what} {v:g} MHz is over the GPU's maximum SM clock, {top} MHz (+ "
                             f"{CLOCK_ALLOWANCE_MHZ} MHz: one clock step and the reading width)" for what, v in readings(f)
                             if v > top + CLOCK_ALLOWANCE_MHZ]
                continue
            rate = RATES[name]
            bounds = []
            if rate.per_sm_clk(ARCH):
                bounds.append((f"the GPU's maximum SM clock, {top} MHz", rate.ceiling(f.unit, ARCH, sheet.sms, top),
                               readings(f)))
            if rate.link == "pcie":
                bounds.append(("one direction of PCIe gen 5 x16", PCIE_GEN5_X16_GBPS, readings(f)))
            elif rate.link == "nvlink":
                links, version = table.get("nvlink_links_up"), table.get("nvlink_version")
                if links is None or version is None or int(version.value) not in NVLINK_GBPS_PER_LINK:
                    problems.append(f"{where}: no nvlink_links_up and nvlink_version (a known one) in this section, "
                                    "the links its ceiling is")
                    continue
                per_link = NVLINK_GBPS_PER_LINK[int(version.value)]
                bounds.append((f"one direction of {links.value:g} NVLink {version.value:g} links x {per_link:g} GB/s",
                               links.value * per_link, readings(f)))
            if rate.datasheet_cap:
                bounds.append((f"the datasheet's {rate.datasheet_cap}", getattr(sheet, rate.datasheet_cap), readings(f)))
            if rate.clock_fact:
                clock = table.get(rate.clock_fact)
                if clock is None or clock.value is None:
                    problems.append(f"{where}: no {rate.clock_fact} in this section, the clock its ceiling is at")
                    continue
                clock_top = clock.units_range[1] if clock.units_range else clock.value
                bounds.append((f"{rate.clock_fact} = {clock.value:g} MHz",
                               rate.ceiling(f.unit, ARCH, sheet.sms, clock.value), [("value", f.value)]))
                bounds.append((f"the highest {rate.clock_fact} reading, {clock_top:g} MHz",
                               rate.ceiling(f.unit, ARCH, sheet.sms, clock_top), readings(f)[-1:]))
            for at, ceiling, checked in bounds:
                problems += [f"{where}: {what} {v:g} {f.unit} is over {ceiling:.6g}, the ceiling at {at} "
                             f"({100 * v / ceiling:.2f} %)" for what, v in checked if v > ceiling]
    return problems


def packaged() -> gp_facts.Facts:
    return gp_facts.load_file(SM90)


# -- the file as shipped ---------------------------------------------------------------------------


def test_every_rate_width_and_clock_fact_has_a_ceiling():
    """A new fact in one of these units must say what bounds it (a rule here), and a time unit belongs
    to a GPU section with a datasheet (its SMs, maximum clock and peaks)."""
    missing, checked = [], 0
    for section, table in packaged().sections():
        for name, f in table.items():
            if f.kind != "measured" or f.unit not in CEILING_UNITS:
                continue
            checked += 1
            if f.unit in TIME_UNITS and (section == "arch" or ds.datasheet_for(section) is None):
                missing.append(f"{section} {name}: a {f.unit} fact needs a GPU section with a datasheet "
                               "(datasheets.DATASHEETS)")
            elif f.unit not in ("MHz", "B/clk", "bytes/cycle", "GB/s/SM") and name not in RATES:
                missing.append(f"{section} {name}: no ceiling rule (RATES)")
            elif f.unit in ("B/clk", "bytes/cycle") and name not in PER_SM_BYTES:
                missing.append(f"{section} {name}: a B/clk fact not known to be one SM's (PER_SM_BYTES)")
    assert not missing, "facts without a physical ceiling:\n  " + "\n  ".join(missing)
    assert checked >= 27  # 9 B/clk of the arch; per GPU section 2 clocks, 3 TFLOP/s and 4 GB/s


def test_every_wgmma_chain_interval_fact_has_a_flop_floor():
    names = [n for n in packaged() if n.startswith("wgmma_") and n.endswith("_sm_cycles")]
    assert len(names) == 72 and all(wgmma_interval_floor(n) is not None for n in names)


def test_the_packaged_sm90_facts_are_at_or_under_their_physical_ceilings():
    problems = ceiling_problems(packaged())
    assert not problems, ("readings that cannot be (remove them from the population, saying why in the "
                          "entry's source, and recompute it: tools/population_fact.py):\n  " + "\n  ".join(problems))


@pytest.mark.parametrize("name, value, under", [
    ("wgmma_sp_e4m3_m64n256k64_rs_sm_cycles", 127.965, False),  # a slope's edge jitter: 0.027 % under 128
    ("wgmma_e5m2_m64n64k32_rs_sm_cycles", 31.988, False),       # 0.0375 % under 32
    ("wgmma_e5m2_m64n64k32_rs_sm_cycles", 31.98, True),         # 0.0625 %: more than the method's resolution
    ("wgmma_e4m3_m64n256k32_rs_sm_cycles", 121.6, True),        # a 5 % faster tensor core: cannot be
    ("wgmma_e4m3_m64n256k32_rs_sm_cycles", 128.0, False),
    ("hmma_16816_f32_smsp_cycles", 1.0, False),                 # no floor
])
def test_a_wgmma_interval_may_read_under_its_floor_only_by_the_slopes_resolution(name, value, under):
    assert under_wgmma_floor(name, value) is under


def test_a_wgmma_interval_exactly_at_its_floor_less_the_resolution_is_possible():
    from pytest_gpuprops.ceilings import WGMMA_INTERVAL_RESOLUTION_REL
    name = "wgmma_e4m3_m64n256k32_rs_sm_cycles"
    edge = wgmma_interval_floor(name) * (1 - WGMMA_INTERVAL_RESOLUTION_REL)
    assert not under_wgmma_floor(name, edge)
    assert under_wgmma_floor(name, edge - 1e-9)


def test_the_datasheet_max_clock_is_the_one_nvml_reported():
    meta = json.loads(SAMPLE_RUN.read_text())["meta"]["gpu"]
    assert meta["name"] == "NVIDIA H100 80GB HBM3"
    assert ds.datasheet_for(meta["name"]).max_sm_clock_mhz == meta["max_sm_clock_mhz"] == 1980


@pytest.mark.parametrize("name, wanted", [
    ("wgmma_m64n256k16_bf16_ss_sm_cycles", 128.0),   # 2 x 64 x 256 x 16 / 4096
    ("wgmma_tf32_m64n64k8_rs_sm_cycles", 32.0),      # 2 x 64 x 64 x 8 / 2048
    ("wgmma_e4m3_m64n256k32_ss_sm_cycles", 128.0),
    ("wgmma_f16_f16acc_m64n128k16_ss_sm_cycles", 64.0),
    ("wgmma_sp_f16_m64n64k32_ss_sm_cycles", 32.0),   # 2 x 64 x 64 x 32 / 8192
    ("wgmma_sp_e4m3_m64n256k64_rs_sm_cycles", 128.0),
    ("wgmma_m64n8k16_f16_ss_latency_cycles", None),  # a latency, not an interval
    ("hmma_16816_f32_smsp_cycles", None),
])
def test_the_wgmma_floor_is_the_instructions_flops_over_the_peak(name, wanted):
    assert wgmma_interval_floor(name) == wanted


def test_the_per_clock_widths_are_the_datasheets_peaks_at_their_quoted_clocks():
    """FFMA: the 67 TFLOPS FP32 peak at the 1980 MHz maximum; dense bf16 and FP8: 989.4 and 1978.9 TFLOPS
    at the 1.83 GHz NVIDIA quotes tensor peaks at (docs/published_values.md N1c, GL)."""
    sheet = ds.datasheet_for("NVIDIA H100 80GB HBM3")
    assert ds.implied_clock_mhz(sheet.fp32_tflops, sheet.sms, FLOP_PER_CLK["ffma"]) == pytest.approx(1980, rel=0.002)
    assert ds.implied_clock_mhz(sheet.bf16_dense_tflops, sheet.sms, FLOP_PER_CLK["wgmma_bf16"]) == pytest.approx(1830, abs=0.5)
    assert ds.implied_clock_mhz(sheet.fp8_dense_tflops, sheet.sms, FLOP_PER_CLK["wgmma_e4m3"]) == pytest.approx(1830, abs=0.5)


def test_the_ceiling_arithmetic_gives_the_published_and_the_issues_numbers():
    bf16, ffma = RATES["wgmma_bf16_dense_tflops"], RATES["ffma_fp32_tflops"]
    assert bf16.ceiling("TFLOP/s", ARCH, 132, 1617) == pytest.approx(874.3, abs=0.05)  # H100 GPU-7ebe9dba's clock
    assert bf16.ceiling("TFLOP/s", ARCH, 132, 1830) == pytest.approx(989.4, abs=0.1)   # NVIDIA's dense bf16 peak
    assert ffma.ceiling("TFLOP/s", ARCH, 132, 1980) == pytest.approx(66.9, abs=0.01)   # the datasheet's 67
    assert RATES["l2_read_gbps"].ceiling("GB/s", ARCH, 132, 1980) == pytest.approx(33454.1, abs=0.1)


# -- planted values: each check fails on a copy of the file with one value past its ceiling -----------


def _plant(path: Path, header: str, keys: dict[str, str]) -> None:
    text = path.read_text()
    start = text.index(header + "\n")
    end = text.index("\n\n", start)
    block = text[start:end]
    for k, v in keys.items():
        block, n = re.subn(rf"\n{k} = [^\n]*", f"\n{k} = {v}", block, count=1)
        assert n == 1, f"{header} has no {k}"
    path.write_text(text[:start] + block + text[end:])


H100 = '[gpus."NVIDIA H100 80GB HBM3".'
H200 = '[gpus."NVIDIA H200".'


@pytest.mark.parametrize("header, keys, problem", [
    # the H100 bf16 entry as it stood: 893.6 from a unit whose clock read 1617 MHz, the middle 869.92
    (H100 + "wgmma_bf16_dense_tflops]", {"value": "869.9225", "tolerance_rel": "0.0349",
                                         "units_range": "[846.245, 893.6]"},
     ["NVIDIA H100 80GB HBM3 wgmma_bf16_dense_tflops: value 869.923 TFLOP/s is over 859.985, the ceiling at "
      "sustained_sm_clock_tensor_mhz = 1590.59 MHz (101.16 %)",
      "NVIDIA H100 80GB HBM3 wgmma_bf16_dense_tflops: highest reading 893.6 TFLOP/s is over 875.348, the ceiling "
      "at the highest sustained_sm_clock_tensor_mhz reading, 1619 MHz (102.09 %)"]),
    # an H100 FFMA clock two 15 MHz steps over the 1980 MHz maximum (one step, 1995, is real on some units)
    (H100 + "sustained_sm_clock_ffma_mhz]", {"value": "1997.5", "units_range": "[1979.6518031416115, 2015.0]"},
     ["NVIDIA H100 80GB HBM3 sustained_sm_clock_ffma_mhz: value 1997.5 MHz is over the GPU's maximum SM clock, "
      "1980 MHz (+ 16.0 MHz: one clock step and the reading width)",
      "NVIDIA H100 80GB HBM3 sustained_sm_clock_ffma_mhz: highest reading 2015 MHz is over the GPU's maximum "
      "SM clock, 1980 MHz (+ 16.0 MHz: one clock step and the reading width)"]),
    (H200 + "wgmma_e4m3_dense_tflops]", {"value": "1730.0", "units_range": "[1700.0, 1760.0]"},
     ["NVIDIA H200 wgmma_e4m3_dense_tflops: value 1730 TFLOP/s is over 1719.17, the ceiling at "
      "sustained_sm_clock_tensor_mhz = 1589.85 MHz (100.63 %)",
      "NVIDIA H200 wgmma_e4m3_dense_tflops: highest reading 1760 TFLOP/s is over 1740.96, the ceiling at the "
      "highest sustained_sm_clock_tensor_mhz reading, 1610 MHz (101.09 %)"]),
    (H200 + "ffma_fp32_tflops]", {"value": "67.0", "units_range": "[66.5, 67.5]"},
     ["NVIDIA H200 ffma_fp32_tflops: value 67 TFLOP/s is over 66.9082, the ceiling at the GPU's maximum SM clock, "
      "1980 MHz (100.14 %)",
      "NVIDIA H200 ffma_fp32_tflops: highest reading 67.5 TFLOP/s is over 66.9082, the ceiling at the GPU's "
      "maximum SM clock, 1980 MHz (100.88 %)",
      "NVIDIA H200 ffma_fp32_tflops: value 67 TFLOP/s is over 66.9031, the ceiling at sustained_sm_clock_ffma_mhz "
      "= 1979.85 MHz (100.14 %)",
      "NVIDIA H200 ffma_fp32_tflops: highest reading 67.5 TFLOP/s is over 66.9115, the ceiling at the highest "
      "sustained_sm_clock_ffma_mhz reading, 1980.1 MHz (100.88 %)"]),
    (H100 + "dram_read_gbps]", {"value": "3400.0", "units_range": "[3390.0, 3410.0]"},
     ["NVIDIA H100 80GB HBM3 dram_read_gbps: value 3400 GB/s is over 3350, the ceiling at the datasheet's "
      "dram_gbps (101.49 %)",
      "NVIDIA H100 80GB HBM3 dram_read_gbps: lowest reading 3390 GB/s is over 3350, the ceiling at the "
      "datasheet's dram_gbps (101.19 %)",
      "NVIDIA H100 80GB HBM3 dram_read_gbps: highest reading 3410 GB/s is over 3350, the ceiling at the "
      "datasheet's dram_gbps (101.79 %)"]),
    (H100 + "l2_read_gbps]", {"value": "34000.0", "units_range": "[33950.0, 34050.0]"},
     ["NVIDIA H100 80GB HBM3 l2_read_gbps: value 34000 GB/s is over 33454.1, the ceiling at the GPU's maximum SM clock, "
      "1980 MHz (101.63 %)",
      "NVIDIA H100 80GB HBM3 l2_read_gbps: lowest reading 33950 GB/s is over 33454.1, the ceiling at the GPU's maximum SM "
      "clock, 1980 MHz (101.48 %)",
      "NVIDIA H100 80GB HBM3 l2_read_gbps: highest reading 34050 GB/s is over 33454.1, the ceiling at the GPU's maximum SM "
      "clock, 1980 MHz (101.78 %)"]),
    # one SM's TMA stream past one SM's 128 B/clk at 1980 MHz: 253.44 GB/s
    (H100 + "tma_2d_load_gbps_per_sm_box4k_blocks1]", {"value": "254.0", "units_range": "[253.0, 255.0]"},
     ["NVIDIA H100 80GB HBM3 tma_2d_load_gbps_per_sm_box4k_blocks1: value 254 GB/s/SM is over one SM's 128 B/clk "
      "at 1980 MHz, 253.44 GB/s",
      "NVIDIA H100 80GB HBM3 tma_2d_load_gbps_per_sm_box4k_blocks1: highest reading 255 GB/s/SM is over one SM's "
      "128 B/clk at 1980 MHz, 253.44 GB/s"]),
    ("[smem_lds_float4_bytes_per_cycle]", {"value": "128.5"},
     ["arch smem_lds_float4_bytes_per_cycle: value 128.5 B/clk is over one SM's 128 B/clk"]),
    ("[wgmma_m64n256k16_bf16_ss_sm_cycles]", {"value": "127.5"},
     ["arch wgmma_m64n256k16_bf16_ss_sm_cycles: value 127.5 cycles is under 128, the instruction's FLOPs over "
      "the SM's peak FLOP/clk"]),
])
def test_a_planted_value_past_its_ceiling_is_named(tmp_path, header, keys, problem):
    planted = tmp_path / "sm_90.toml"
    shutil.copy(SM90, planted)
    _plant(planted, header, keys)
    assert ceiling_problems(gp_facts.load_file(planted)) == problem


def test_a_rate_whose_clock_fact_is_missing_is_named(tmp_path):
    planted = tmp_path / "sm_90.toml"
    text = SM90.read_text()
    start = text.index(H200 + "sustained_sm_clock_tensor_mhz]\n")
    planted.write_text(text[:start] + text[text.index("\n\n", start) + 2:])
    got = ceiling_problems(gp_facts.load_file(planted))
    assert got == [f"NVIDIA H200 {n}: no sustained_sm_clock_tensor_mhz in this section, the clock its ceiling is at"
                   for n in ("wgmma_bf16_dense_tflops", "wgmma_e4m3_dense_tflops")]


def test_a_link_rate_past_its_link_is_named(tmp_path):
    """The node's link rates against the section's own link facts (a file of its own: the ceilings
    hold whatever link facts the packaged file has)."""
    entry = 'unit = "{unit}"\nmethod = "m"\nsource = "s"\n'
    planted = tmp_path / "sm_90.toml"
    planted.write_text('arch = "sm_90"\n\n' + "\n".join(
        f'[gpus."NVIDIA H100 80GB HBM3".{name}]\nvalue = {value}\n{tol}\n' + entry.format(unit=unit)
        for name, value, tol, unit in [
            ("nvlink_links_up", 18, "tolerance_abs = 0", "links"), ("nvlink_version", 4, "tolerance_abs = 0", "version"),
            ("p2p_ce_copy_gbps", 479.0, "tolerance_rel = 0.03\nunits_range = [478.0, 480.0]", "GB/s"),
            ("p2p_sm_load_gbps", 470.0, "tolerance_rel = 0.03", "GB/s"),
            ("host_to_device_gbps", 62.0, "tolerance_rel = 0.05\nunits_range = [61.0, 64.0]", "GB/s")]))
    assert ceiling_problems(gp_facts.load_file(planted)) == [
        "NVIDIA H100 80GB HBM3 host_to_device_gbps: highest reading 64 GB/s is over 63.0154, the ceiling at one "
        "direction of PCIe gen 5 x16 (101.56 %)",
        "NVIDIA H100 80GB HBM3 p2p_ce_copy_gbps: value 479 GB/s is over 478.125, the ceiling at one direction of 18 "
        "NVLink 4 links x 26.5625 GB/s (100.18 %)",
        "NVIDIA H100 80GB HBM3 p2p_ce_copy_gbps: highest reading 480 GB/s is over 478.125, the ceiling at one "
        "direction of 18 NVLink 4 links x 26.5625 GB/s (100.39 %)"]
    planted.write_text(planted.read_text().replace("value = 4\n", "value = 3\n"))
    assert ceiling_problems(gp_facts.load_file(planted))[1:] == [
        f"NVIDIA H100 80GB HBM3 {n}: no nvlink_links_up and nvlink_version (a known one) in this section, the links "
        "its ceiling is" for n in ("p2p_ce_copy_gbps", "p2p_sm_load_gbps")]
