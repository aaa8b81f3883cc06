"""The datasheet table (datasheets.py): lookup by the name CUDA reports, the H100 and H200 figures as
their datasheets print them, and the clock a peak implies."""

import pytest

from pytest_gpuprops import datasheets


def test_datasheet_lookup_by_cuda_name_case_and_spacing_aside():
    assert datasheets.datasheet_for("NVIDIA H100 80GB HBM3").sku == "H100 SXM5 80GB"
    assert datasheets.datasheet_for("nvidia  h200").dram_gbps == 4800.0
    assert datasheets.datasheet_for("NVIDIA H100 PCIe").sms == 114
    assert datasheets.datasheet_for("NVIDIA GeForce RTX 4090") is None


def test_h100_and_h200_share_compute_and_differ_in_memory():
    h100, h200 = datasheets.datasheet_for("NVIDIA H100 80GB HBM3"), datasheets.datasheet_for("NVIDIA H200")
    assert (h100.bf16_dense_tflops, h100.fp8_dense_tflops, h100.fp32_tflops) == (989.4, 1978.9, 67.0)
    assert (h200.bf16_dense_tflops, h200.fp8_dense_tflops, h200.fp32_tflops) == (989.4, 1978.9, 67.0)
    assert (h100.dram_gbps, h200.dram_gbps) == (3350.0, 4800.0)
    assert all(d.source for d in datasheets.DATASHEETS.values())


@pytest.mark.parametrize("peak, rate, mhz", [
    (989.4, 4096, 1830.0),   # H100 SXM5 dense bf16: 132 SMs x 4096 FLOP/cycle at 1830 MHz
    (1978.9, 8192, 1830.0),  # dense e4m3
    (67.0, 256, 1982.8),     # FP32: 132 x 128 FFMA lanes x 2 at ~1980 MHz
])
def test_implied_clock_of_the_h100_sxm_datasheet(peak, rate, mhz):
    assert datasheets.implied_clock_mhz(peak, 132, rate) == pytest.approx(mhz, abs=0.1)


def test_clock_peak_is_sms_times_rate_times_clock():
    assert datasheets.clock_peak_tflops(132, 4096, 1755) == pytest.approx(948.88, abs=0.01)
    assert datasheets.clock_peak_tflops(132, 256, 1980) == pytest.approx(66.91, abs=0.01)
