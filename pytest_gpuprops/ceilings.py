"""Physical ceilings: the most the hardware can do at a given SM clock, and whether a reading is
possible. One place for the arithmetic that tests/test_physical_ceilings.py applies to every fact of
a facts file (value and population) and that assertions.evaluate applies to every measurement as it
is checked (:func:`impossible_reading`: a rate above its ceiling at the clock recorded beside it, or
a clock above the GPU's maximum, is an impossible reading, not a pass).

The ceilings, and where each number comes from:

* TFLOP/s: SMs x FLOP per SM per clock x the clock (datasheets.PER_SM_CYCLE: FFMA 128 lanes x 2 FLOP;
  dense wgmma 4096 FLOP/clk for bf16 and 8192 for FP8, NVIDIA's dense peaks 989.4 / 1978.9 TFLOPS over
  132 SMs at the 1.83 GHz they are quoted at, docs/published_values.md N1c).
* GB/s from SM work (DRAM and L2 streams): every byte passes an SM's 128 B/clk load/store data path,
  so SMs x 128 B/clk x the clock; DRAM rates are also at or under the datasheet's peak.
* GB/s over the node's links: one direction of NVLink (links x the per-link rate of its version:
  26.5625 GB/s for NVLink 4.0, as nvidia-smi reports it), or of PCIe gen 5 x16 (16 lanes x 32 GT/s,
  128b/130b: 63.0 GB/s) for the host copies.
* B/clk per SM (shared memory, L1 hit loads, DSMEM): 128, the 32 banks x 4 bytes per clock of the
  shared memory / L1 data array (the seeds' "theory 128"; RRZE gpu-benches README: close to 128
  B/cycle/SM, docs/published_values.md §3).
* wgmma chain intervals (cycles per instruction per SM): at or above the instruction's FLOPs over the
  SM's peak FLOP/clk for its type (dense tf32 2048, f16/bf16 4096, 8-bit 8192; sparse twice its dense
  type, NVIDIA's "with sparsity" figures, docs/published_values.md N1c), less the 0.05 % a steady
  interval read as a difference of two spans can fall under it (WGMMA_INTERVAL_RESOLUTION_REL).
* MHz: at or under the GPU's maximum SM clock (NVML's nvmlDeviceGetMaxClockInfo, 1980 MHz on the
  H100 and H200 SXM) plus one 15 MHz clock step, which some H100 units run at, plus the 1 MHz
  within which the kernels' clock64 / %globaltimer reads a clock (the FFMA stress 1979.6-1980.1 MHz on
  every unit at 1980, the sustained_sm_clock_ffma_mhz sources in pytest_gpuprops/facts/sm_90.toml; the
  FFMA rate's 5 ms launches 1980.5-1980.6 at 1980 and 1995.5-1995.6 at 1995 on H100 GPU-88a21ba7 and
  GPU-bc25d84a, 2026-11-26). The step is
  real, not a timer's error: H100 GPU-e146a6d1 ran clock64 at 1994.5-1994.8 MHz against the host's
  clock (perf_counter around a 0.5 s spin) in 6 of 6 processes on 2026-11-26, while %globaltimer and
  CUDA events kept the host's time to 0.03 % and its FFMA rate read 0.76 % above a 1980 MHz unit's
  (66.6 vs 66.1 TFLOP/s); GPU-112a2c6f beside it ran at 1979.5-1979.8 (docs/method.md).
"""

from __future__ import annotations

import dataclasses
import re

from .datasheets import PER_SM_CYCLE

#: bytes one SM's shared memory / L1 data array moves per clock: 32 banks x 4 bytes
SM_BYTES_PER_CLK = 128
#: how far above NVML's maximum SM clock a clock can really read: one 15 MHz step (some H100s run at
#: 1995 against 1980) and the 1 MHz reading width (the module docstring has the measurements)
CLOCK_ALLOWANCE_MHZ = 16.0
SCALE = {"TFLOP/s": 1e12, "GB/s": 1e9}
#: one direction of one NVLink, GB/s, by NVLink version: NVLink 4.0 is 2 lanes of 106.25 Gb/s, the
#: 26.562 GB/s a link that nvidia-smi reports on the H100 SXM nodes (the link facts' source)
NVLINK_GBPS_PER_LINK = {4: 26.5625}
#: one direction of PCIe gen 5 x16: 16 lanes x 32 GT/s with 128b/130b encoding, in GB/s
PCIE_GEN5_X16_GBPS = 16 * 32 * 128 / 130 / 8
#: what "bytes" work moves per SM per clock
BYTES = "bytes"


@dataclasses.dataclass(frozen=True)
class Rate:
    """A whole-GPU rate: at most SMs x its work per SM per clock x the clock it ran at, and what else caps it."""

    #: the work per SM per clock that bounds it: a datasheets.PER_SM_CYCLE kind (FLOPs, per arch), BYTES
    #: (SM_BYTES_PER_CLK), or None: not bounded by SM work (a link's copy engine)
    work: str | None
    clock_fact: str | None = None  # the facts section's sustained clock fact for this load; None: the GPU's max
    datasheet_cap: str | None = None  # a Datasheet field the rate cannot exceed either
    link: str | None = None  # "nvlink" or "pcie": one direction of the link it crosses

    def per_sm_clk(self, arch: str) -> int | None:
        """FLOP or bytes per SM per clock on ``arch``; None where SM work does not bound it or the arch's is unknown."""
        if self.work == BYTES:
            return SM_BYTES_PER_CLK
        return PER_SM_CYCLE.get(arch, {}).get(self.work) if self.work else None

    def ceiling(self, unit: str, arch: str, sms: int, mhz: float) -> float | None:
        """The most ``sms`` SMs of ``arch`` can do at ``mhz``, in ``unit``; None where SM work does not bound it."""
        per = self.per_sm_clk(arch)
        return None if per is None else sms * per * mhz * 1e6 / SCALE[unit]


#: Every rate fact and what bounds it (tests/test_physical_ceilings.py requires an entry for each
#: TFLOP/s and GB/s fact of the facts files).
RATES = {
    "ffma_fp32_tflops": Rate("ffma", "sustained_sm_clock_ffma_mhz"),
    "wgmma_bf16_dense_tflops": Rate("wgmma_bf16", "sustained_sm_clock_tensor_mhz"),
    # no fact holds the e4m3 load's own sustained clock; it runs at or under the bf16 stress's
    # (docs/samples/h100_full_run.json: 1545 MHz against 1588.9), which bounds it
    "wgmma_e4m3_dense_tflops": Rate("wgmma_e4m3", "sustained_sm_clock_tensor_mhz"),
    "dram_read_gbps": Rate(BYTES, None, "dram_gbps"),
    "dram_write_gbps": Rate(BYTES, None, "dram_gbps"),
    "dram_copy_gbps": Rate(BYTES, None, "dram_gbps"),
    "l2_read_gbps": Rate(BYTES, None),
    # the node's links (hwtests/test_node_links.py): a copy engine's or SMs' copy over NVLink, one direction
    # each (the bidirectional fact is one direction's rate while the other runs), and the host copies over PCIe
    "p2p_ce_copy_gbps": Rate(None, link="nvlink"),
    "p2p_ce_bidir_gbps": Rate(None, link="nvlink"),
    "p2p_sm_load_gbps": Rate(BYTES, link="nvlink"),
    "p2p_sm_store_gbps": Rate(BYTES, link="nvlink"),
    "host_to_device_gbps": Rate(None, link="pcie"),
    "device_to_host_gbps": Rate(None, link="pcie"),
    "device_to_host_bidir_gbps": Rate(None, link="pcie"),
}

def scales_with_sm_clock(name: str) -> bool:
    """Whether rate fact ``name`` is SM work per second (FLOPs bound by the SM's per-clock peak), so the
    same unit reads it in proportion to the SM clock it ran at; bytes through L2, DRAM or a link are
    not counted as such."""
    r = RATES.get(name)
    return r is not None and r.work not in (None, BYTES)


#: peak FLOP per SM per clock of one wgmma type (sparse: the logical FLOPs of the dense shape it stands for)
WGMMA_FLOP_PER_CLK = {"tf32": 2048, "f16": 4096, "bf16": 4096, "f16_f16acc": 4096, "e4m3": 8192, "e5m2": 8192,
                      "s8": 8192, "u8": 8192, "sp_f16": 8192, "sp_e4m3": 16384}
_WGMMA_INTERVAL = re.compile(r"^wgmma_(?:(?P<pre>[a-z0-9_]+?)_)?m64n(?P<n>\d+)k(?P<k>\d+)_(?:(?P<post>f16|bf16)_)?"
                             r"(?:ss|rs)_sm_cycles$")


#: how far under its floor a wgmma chain interval can read from how it is measured: the difference of two
#: launches' spans, whose edges (fill, drain, start skew) differ by up to ~25 cycles between launches, over the
#: 512-2048 chain instructions between them (H100 GPU-2a7e6836, 2026-11-27: 127.965 against 128, 31.988 against 32;
#: the dense shapes' medians otherwise 127.998-128.031). A reading further under is not the hardware's
WGMMA_INTERVAL_RESOLUTION_REL = 5e-4


def under_wgmma_floor(name: str, value: float) -> bool:
    """Whether ``value`` of wgmma chain-interval fact ``name`` is under what the tensor cores can do: under
    its FLOP floor by more than the method's resolution (:data:`WGMMA_INTERVAL_RESOLUTION_REL`)."""
    floor = wgmma_interval_floor(name)
    return floor is not None and value < floor * (1 - WGMMA_INTERVAL_RESOLUTION_REL)


def wgmma_interval_floor(name: str) -> float | None:
    """The fewest cycles per instruction per SM a wgmma chain-interval fact can read: the instruction's
    FLOPs (2 x 64 x N x K) over its type's peak per SM and clock; None for another fact."""
    m = _WGMMA_INTERVAL.match(name)
    if not m or bool(m["pre"]) == bool(m["post"]):
        return None
    kind = m["pre"] or m["post"]
    return 2 * 64 * int(m["n"]) * int(m["k"]) / WGMMA_FLOP_PER_CLK[kind]


#: the flag of a rate above its ceiling at the clock read beside it: one of the two was not read over
#: the work the other counts (docs/method.md), so the verdict cannot stand either way
IMPOSSIBLE_RATE = "physically impossible reading: the rate and its clock disagree"
#: the flag of an SM clock read above the GPU's maximum: the clock64 / %globaltimer ratio is off
IMPOSSIBLE_CLOCK = "physically impossible reading: a clock above the GPU's maximum"
#: the flag of a rate whose largest sample is above its ceiling at the GPU's maximum clock: that sample's
#: time was not the work's (a timer or launch disturbed it), so the median beside it is not trusted either
IMPOSSIBLE_SAMPLE = "physically impossible reading: a sample above the ceiling at the GPU's maximum clock"


def possible_clock(mhz: float | None, max_sm_clock_mhz: float | None) -> float | None:
    """``mhz`` where a GPU whose NVML maximum is ``max_sm_clock_mhz`` can run at it (at most
    CLOCK_ALLOWANCE_MHZ above), else None: a clock read above that is the reading's fault, not the GPU's
    (the session clock's 20 ms spin read 1980-2092 MHz on every H100 of 2026-11-26 night, while their
    kernels' clocks over their own launches read 1980). Unknown maximum: taken as read."""
    if mhz is None or not max_sm_clock_mhz or mhz <= max_sm_clock_mhz + CLOCK_ALLOWANCE_MHZ:
        return mhz
    return None


def impossible_reading(name: str, unit: str, value: float, *, arch: str, sms: int | None, clock_mhz: float | None,
                       max_sm_clock_mhz: float | None) -> list[str]:
    """Why a reading cannot be, as flags ([] when it can): a rate fact (RATES) above SMs x its work per
    SM per clock at ``clock_mhz``, the clock recorded beside it (read over the same launches, so the two
    agree on a real GPU); a clock fact, or a rate's recorded clock, above ``max_sm_clock_mhz`` (NVML's)
    + CLOCK_ALLOWANCE_MHZ. What is unknown (the SMs, a clock, the maximum, an arch without a
    per-clock width) is not checked."""
    flags = []
    top = max_sm_clock_mhz + CLOCK_ALLOWANCE_MHZ if max_sm_clock_mhz else None
    if unit == "MHz" and top is not None and value > top:
        flags.append(f"{IMPOSSIBLE_CLOCK}: {value:.1f} MHz, over the {max_sm_clock_mhz:g} MHz NVML reports (+ "
                     f"{CLOCK_ALLOWANCE_MHZ} MHz: one clock step and the reading width)")
    if unit not in SCALE or not clock_mhz:
        return flags
    if top is not None and clock_mhz > top:
        flags.append(f"{IMPOSSIBLE_CLOCK}: the SM clock read beside the rate, {clock_mhz:.1f} MHz, is over the "
                     f"{max_sm_clock_mhz:g} MHz NVML reports (+ {CLOCK_ALLOWANCE_MHZ} MHz: one clock step and the "
                     "reading width)")
    rate = RATES.get(name)
    ceiling = rate.ceiling(unit, arch, sms, clock_mhz) if rate is not None and sms else None
    if ceiling is not None and value > ceiling:
        per = rate.per_sm_clk(arch)
        what = "B" if rate.work == BYTES else "FLOP"
        flags.append(f"{IMPOSSIBLE_RATE}: {value:g} {unit} is {100 * value / ceiling:.2f} % of {ceiling:.6g}, the "
                     f"ceiling of {sms} SMs x {per} {what}/clk at the {clock_mhz:g} MHz read beside it")
    return flags


def impossible_sample(name: str, unit: str, peak: float, *, arch: str, sms: int | None,
                      max_sm_clock_mhz: float | None) -> list[str]:
    """Why the largest sample ``peak`` of a rate cannot be, as flags ([] when it can): above SMs x its
    work per SM per clock at the GPU's maximum SM clock + CLOCK_ALLOWANCE_MHZ, the most any sample's
    clock could have been. H100 GPU-aba34808's FFMA rate read samples of 68.4 and 69.4 TFLOP/s (ceiling
    67.45) in the first measurement of three warm processes, 2026-11-26, its next ones 65.9-66.0 and
    steady (docs/results.md). What is unknown is not checked."""
    rate = RATES.get(name)
    if unit not in SCALE or rate is None or not sms or not max_sm_clock_mhz:
        return []
    top = max_sm_clock_mhz + CLOCK_ALLOWANCE_MHZ
    ceiling = rate.ceiling(unit, arch, sms, top)
    if ceiling is None or peak <= ceiling:
        return []
    return [f"{IMPOSSIBLE_SAMPLE}: its largest sample, {peak:g} {unit}, is {100 * peak / ceiling:.2f} % of "
            f"{ceiling:.6g}, the ceiling of {sms} SMs x {rate.per_sm_clk(arch)} "
            f"{'B' if rate.work == BYTES else 'FLOP'}/clk at {top:g} MHz (NVML's maximum + {CLOCK_ALLOWANCE_MHZ} MHz)"]
