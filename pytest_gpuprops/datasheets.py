"""Published peaks, per SKU (datasheets and whitepapers), and the arithmetic that relates a peak to a
clock: the clock a datasheet's peak implies, and the peak at the clock a measurement ran at. Keyed by
the name CUDA reports; a GPU not tabulated here has no datasheet figures in its method text.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Datasheet:
    """One SKU's published peaks (dense: tensor figures without 2:4 sparsity)."""

    sku: str
    sms: int
    max_sm_clock_mhz: int
    fp32_tflops: float
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    dram_gbps: float
    source: str


_H100_DS = ("NVIDIA H100 Tensor Core GPU datasheet (SXM and PCIe columns; BF16 and FP8 tensor figures are "
            "printed with sparsity, the dense ones are half) and the NVIDIA H100 Tensor Core GPU Architecture "
            "whitepaper (dense FP16/BF16 989.4 TFLOPS for H100 SXM5, 756.5 for H100 PCIe)")
_H200_DS = ("NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column: the H100 SXM's compute, 4.8 TB/s HBM3e; "
            "tensor figures printed with sparsity, the dense ones are half)")

#: Keyed by the name CUDA reports (cudaDeviceProp.name, GpuInfo.name), matched case and spacing aside.
DATASHEETS: dict[str, Datasheet] = {
    "NVIDIA H100 80GB HBM3": Datasheet("H100 SXM5 80GB", 132, 1980, 67.0, 989.4, 1978.9, 3350.0, _H100_DS),
    "NVIDIA H100 PCIe": Datasheet("H100 PCIe 80GB", 114, 1755, 51.0, 756.5, 1513.0, 2000.0, _H100_DS),
    "NVIDIA H200": Datasheet("H200 SXM 141GB", 132, 1980, 67.0, 989.4, 1978.9, 4800.0, _H200_DS),
}

#: FLOPs per SM per cycle at full rate (FFMA: FP32 lanes x 2, 64 lanes on sm_80, 128 on sm_86 .. sm_90;
#: wgmma dense: the sm_90 facts wgmma_m64n256k16_*_sm_cycles = 128 cycles for 64 x 256 x 16 x 2 FLOPs;
#: e4m3 twice bf16).
PER_SM_CYCLE: dict[str, dict[str, int]] = {
    "sm_80": {"ffma": 128},
    "sm_86": {"ffma": 256},
    "sm_89": {"ffma": 256},
    "sm_90": {"ffma": 256, "wgmma_bf16": 4096, "wgmma_e4m3": 8192},
}

#: Which datasheet figure a workload is compared with.
PEAK_FIELD = {"ffma": "fp32_tflops", "wgmma_bf16": "bf16_dense_tflops", "wgmma_e4m3": "fp8_dense_tflops",
              "dram_read": "dram_gbps", "dram_copy": "dram_gbps", "dram_write": "dram_gbps"}


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


def datasheet_for(gpu_name: str) -> Datasheet | None:
    """The datasheet of the GPU CUDA names ``gpu_name``; None for a GPU not tabulated here."""
    return next((d for n, d in DATASHEETS.items() if _key(n) == _key(gpu_name)), None)


def implied_clock_mhz(peak_tflops: float, sms: int, flops_per_sm_cycle: int) -> float:
    """The SM clock at which ``sms`` SMs doing ``flops_per_sm_cycle`` make the datasheet's peak."""
    return peak_tflops * 1e12 / (sms * flops_per_sm_cycle) / 1e6


def clock_peak_tflops(sms: int, flops_per_sm_cycle: int, mhz: float) -> float:
    """The peak at the clock a measurement ran at: sms x FLOP per SM per cycle x clock."""
    return sms * flops_per_sm_cycle * mhz * 1e6 / 1e12
