"""The whole-GPU workloads of the throughput and sustained-clock facts: each kernel's build parameters
(the defines), what one launch does (FLOPs, bytes), how big its buffers are and where the L2 read's
windows lie, the Workload that a launch is made from, and the loop its SASS spends its time in
(hwtests/test_static_throughput.py checks it).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence

#: kernels/stress_ffma.cu, stress_ffma: 8 chains x 64 steps per loop trip = 512 FFMAs, 8 samples;
#: blocks of 512 (launch bounds: 32 registers, so every thread slot of an SM is filled).
FFMA_BLOCK = 512
FFMA_DEFINES = {"ILP": 8, "UNROLL": 64, "SAMPLES": 8, "BLOCK": FFMA_BLOCK}
#: kernels/stress_ffma.cu, stress_wgmma (sm_90a): 16 wgmma m64n256 per loop trip, 2 warpgroups per block.
WGMMA_DTYPES = {"bf16": (0, 16, "HGMMA.64x256x16.F32.BF16"), "e4m3": (1, 32, "QGMMA.64x256x32.F32.E4M3.E4M3")}
WGMMA_N = 256
WGMMA_UNROLL, WGMMA_WARPGROUPS, WGMMA_SAMPLES = 16, 2, 8


def wgmma_defines(dtype: str, zero_operands: bool = False) -> dict:
    """stress_wgmma's build; ``zero_operands``: the same loop on all-zero A and B tiles (ZERO_OPERANDS=1)
    instead of pseudo-random ones, for the zero-vs-random operand power facts."""
    d = {"WGMMA_DTYPE": WGMMA_DTYPES[dtype][0], "UNROLL": WGMMA_UNROLL, "WARPGROUPS": WGMMA_WARPGROUPS,
         "SAMPLES": WGMMA_SAMPLES}
    return dict(d, ZERO_OPERANDS=1) if zero_operands else d


#: kernels/stream_bandwidth.cu: 4 independent 16-byte accesses per thread per loop trip, blocks of
#: 256 (launch bounds: 32 registers, every thread slot of an SM filled).
STREAM_BLOCK = 256
STREAM_DEFINES = {"UNROLL": 4, "BLOCK": STREAM_BLOCK}
VEC_BYTES = 16
STREAM_KERNELS = {"dram_read": "stream_read", "l2_read": "stream_read_cg", "dram_copy": "stream_copy",
                  "dram_write": "stream_write"}
#: The DRAM kernels' shape: one tile of BLOCK x UNROLL vectors per block (PyTorch's elementwise shape),
#: one pass a launch over a grid of as many blocks as tiles, no stamps. A persistent grid of one wave
#: (STREAM_DEFINES) spent its last 25-40 % of a launch on half its blocks and read 93.5 % of the driver's
#: memcpy and 95.1 % of torch's fill_ on an H100; this shape read 100.7 % and 100.2 % (kernels/
#: stream_bandwidth.cu's variants, docs/results.md).
DRAM_DEFINES = {"UNROLL": 1, "BLOCK": STREAM_BLOCK, "LAYOUT": "LAYOUT_BLOCK_TILE", "GUARD": "GUARD_TAIL", "STAMPS": 0}
#: The L2 read's chunk: its window is read as chunks of this size, each by many blocks at once.
L2_CHUNK_BYTES = 512 * 1024
#: Blocks a launch of the L2 read runs for every block slot of the GPU (or every chunk, if more).
L2_WAVES = 4
#: The L2 read's shape (LAYOUT_SHARED_CHUNK): block b reads chunk b % chunks of its window, L2_WAVES
#: blocks a slot. The persistent thread-stride grid (every line read by one thread a pass) read 7000-7290
#: GB/s on H100s and moved 6-9 % between processes of one unit; this shape read 8740-8840 GB/s, within
#: 0.9-1.1 % over four processes, on H100 GPU-970b7d1c (2026-11-26, docs/results.md).
L2_DEFINES = {"UNROLL": 4, "BLOCK": STREAM_BLOCK, "LAYOUT": "LAYOUT_SHARED_CHUNK", "GUARD": "GUARD_TAIL",
              "CHUNK16": L2_CHUNK_BYTES // VEC_BYTES}


def stream_defines(kind: str) -> dict:
    """The build of a stream kind's kernel: the DRAM kinds' tile shape, the L2 read's shared chunks."""
    if kind not in STREAM_KERNELS:
        raise ValueError(f"kind must be one of {', '.join(STREAM_KERNELS)}, not {kind!r}")
    return dict(L2_DEFINES if kind == "l2_read" else DRAM_DEFINES)


def l2_read_grid(n16: int, sms: int, max_threads_per_sm: int) -> int:
    """The L2 read's blocks: L2_WAVES for every block slot of the GPU or every chunk, whichever is more."""
    chunks = max(1, n16 * VEC_BYTES // L2_CHUNK_BYTES)
    return L2_WAVES * max(chunks, sms * blocks_per_sm(max_threads_per_sm, STREAM_BLOCK))


def l2_read_bytes(n16: int, grid: int, reps: int) -> int:
    """Bytes one L2 read launch reads: every block its chunk (the window's whole chunks), reps times."""
    chunk16 = L2_CHUNK_BYTES // VEC_BYTES
    return VEC_BYTES * min(chunk16, n16) * grid * reps


def ffma_flops(grid: int, block: int, samples: int, iters: int, unroll: int, ilp: int) -> int:
    """FLOPs of one stress_ffma launch: every thread runs samples x iters loop trips of unroll x ilp FFMAs."""
    return 2 * grid * block * samples * iters * unroll * ilp


def wgmma_flops(grid: int, warpgroups: int, samples: int, iters: int, unroll: int, n: int, k: int, m: int = 64) -> int:
    """FLOPs of one stress_wgmma launch: every warpgroup runs samples x iters x unroll m x n x k MMAs."""
    return 2 * m * n * k * grid * warpgroups * samples * iters * unroll


def stream_bytes(kind: str, n16: int, reps: int) -> int:
    """Bytes one stream launch moves: reads (and, for a copy, as many writes) of n16 16-byte vectors, reps times."""
    if kind not in STREAM_KERNELS:
        raise ValueError(f"kind must be one of {', '.join(STREAM_KERNELS)}, not {kind!r}")
    return VEC_BYTES * n16 * (2 if kind == "dram_copy" else 1) * reps


def blocks_per_sm(max_threads_per_sm: int, block: int) -> int:
    """Resident blocks of ``block`` threads that fill an SM's thread slots (at least one)."""
    return max(1, max_threads_per_sm // block)


def dram_buffer_bytes(l2_bytes: int, free_bytes: int, *, floor: int = 1 << 30) -> int:
    """The DRAM buffer: 8 x L2 or 1 GiB, whichever is larger, at most a quarter of free memory
    (the copy needs two), in whole 16-byte vectors."""
    want = max(8 * l2_bytes, floor)
    nbytes = min(want, free_bytes // 4) // VEC_BYTES * VEC_BYTES
    if nbytes < 4 * l2_bytes:
        raise ValueError(f"only {free_bytes} bytes of device memory free: a DRAM buffer of {nbytes} bytes would "
                         f"not be 4 x the {l2_bytes}-byte L2")
    return nbytes


def l2_buffer_bytes(l2_bytes: int) -> int:
    """The L2 buffer: a quarter of the L2, in whole chunks of L2_CHUNK_BYTES (12.5 MiB on the H100,
    15 MiB on the H200: 25 and 30 chunks)."""
    window = l2_bytes // 4 // L2_CHUNK_BYTES * L2_CHUNK_BYTES
    if window <= 0:
        raise ValueError(f"an L2 of {l2_bytes} bytes has no quarter of whole {L2_CHUNK_BYTES >> 10} KiB chunks to read: "
                         f"the L2 read needs an L2 of {4 * L2_CHUNK_BYTES >> 20} MiB or more")
    return window


#: The L2 read rate depends on where its buffer's lines fall among the L2 slices and the two L2
#: partitions, i.e. on the physical pages the buffer got: one 12.5 MiB buffer read 7045-7215 GB/s in
#: three processes on one H100 (7058-7484 on another), each process steady to 0.2 %. So the L2 read is
#: measured in this many windows of that size, each on 2 MiB pages of its own (64 placements of the
#: lines), and the fact is the mean of their rates: if windows vary like processes (1-3 % relative
#: standard deviation), the mean of 64 varies by 1/8 of that.
L2_PLACEMENTS = 64
#: The GPU's large page (what the driver backs an allocation of MiBs with): a window starts on one and
#: shares none with another window.
PAGE_BYTES = 2 * 2**20


@dataclasses.dataclass(frozen=True)
class L2Placements:
    """Where the L2 read's windows lie in the one allocation that holds them all."""

    window_bytes: int  # each window: a quarter of the L2 (l2_buffer_bytes)
    stride_bytes: int  # window starts this far apart: the window in whole pages
    count: int
    page_bytes: int = PAGE_BYTES

    @property
    def region_bytes(self) -> int:
        """The allocation: every window, and a page of room to start the first on a page boundary."""
        return (self.count - 1) * self.stride_bytes + self.window_bytes + self.page_bytes

    def offsets(self, base_ptr: int) -> list[int]:
        """Each window's byte offset in an allocation at device address ``base_ptr``: the first at
        the first page boundary, the rest ``stride_bytes`` apart."""
        first = -base_ptr % self.page_bytes
        return [first + k * self.stride_bytes for k in range(self.count)]


def l2_placements(l2_bytes: int, count: int = L2_PLACEMENTS, *, free_bytes: int | None = None,
                  page_bytes: int = PAGE_BYTES) -> L2Placements:
    """``count`` windows of a quarter of the L2, one every whole number of pages; fewer where the
    allocation would take more than a quarter of ``free_bytes`` (at least one)."""
    window = l2_buffer_bytes(l2_bytes)
    stride = -(-window // page_bytes) * page_bytes
    if free_bytes is not None:
        fits = (free_bytes // 4 - page_bytes - window) // stride + 1
        count = max(1, min(count, fits))
    return L2Placements(window, stride, count, page_bytes)


@dataclasses.dataclass
class Workload:
    """One kernel on every SM, how to launch it and what one launch does.

    ``args(stamps, scale)`` builds a launch's arguments; ``scale`` is the loop count that sets its
    length (iters for the compute kernels, reps for the stream kernels) and ``work(scale)`` is what
    one launch then does (FLOPs or bytes, in ``unit``'s numerator).
    """

    kind: str  # "ffma", "wgmma_bf16", "wgmma_e4m3", "dram_read", "dram_copy", "l2_read"
    kernel: str
    source: str
    defines: dict
    fn: object
    grid: int
    block: int
    stamps_per_block: int
    args: Callable[[object, int], tuple]
    work: Callable[[int], float]
    unit: str
    scale: int = 1  # the first guess; calibration replaces it
    smids: object | None = None  # the kernel writes each block's SM id here (the stresses)
    #: one pass a launch (scale stays 1): a repeat's length is set by how many launches it holds
    fixed_scale: bool = False
    extra: dict = dataclasses.field(default_factory=dict)  # buffer sizes and the like, for the record

    def describe(self) -> dict:
        return {"kind": self.kind, "kernel": self.kernel, "source": self.source, "defines": dict(self.defines),
                "grid": self.grid, "block": self.block, **self.extra}


def ffma_workload(cp, fn, *, sms: int, max_threads_per_sm: int) -> Workload:
    d = FFMA_DEFINES
    grid = sms * blocks_per_sm(max_threads_per_sm, FFMA_BLOCK)
    smids, out = cp.zeros(grid, dtype=cp.uint32), cp.zeros(grid * FFMA_BLOCK, dtype=cp.float32)
    return Workload("ffma", "stress_ffma", "stress_ffma.cu", dict(d), fn, grid, FFMA_BLOCK, d["SAMPLES"] + 1,
                    lambda st, s: (st, smids, out, cp.int32(s), cp.float32(-1.0), cp.float32(0.5)),
                    lambda s: ffma_flops(grid, FFMA_BLOCK, d["SAMPLES"], s, d["UNROLL"], d["ILP"]), "TFLOP/s",
                    scale=16, smids=smids)


def wgmma_workload(cp, fn, dtype: str, *, sms: int, zero_operands: bool = False) -> Workload:
    """``fn`` built with :func:`wgmma_defines` (``dtype``, ``zero_operands``): kind ``wgmma_<dtype>``, with
    ``_zero`` where its operands are all zero."""
    _, k, _ = WGMMA_DTYPES[dtype]
    block, grid = 128 * WGMMA_WARPGROUPS, sms  # 154 registers a thread: one block per SM
    smids, out = cp.zeros(grid, dtype=cp.uint32), cp.zeros(grid * block, dtype=cp.float32)
    return Workload(f"wgmma_{dtype}{'_zero' if zero_operands else ''}", "stress_wgmma", "stress_ffma.cu",
                    wgmma_defines(dtype, zero_operands), fn, grid, block,
                    WGMMA_SAMPLES + 1, lambda st, s: (st, smids, out, cp.int32(s)),
                    lambda s: wgmma_flops(grid, WGMMA_WARPGROUPS, WGMMA_SAMPLES, s, WGMMA_UNROLL, WGMMA_N, k),
                    "TFLOP/s", scale=16, smids=smids)


def stream_workload(cp, fn, kind: str, *, sms: int, max_threads_per_sm: int, nbytes: int, src=None, dst=None,
                    sink=None, extra: dict | None = None) -> Workload:
    """``src`` / ``dst``: CuPy buffers of at least ``nbytes`` to reuse (allocated, zeroed, when None);
    ``sink``: the reads' never-written output, grid x block words (allocated when None). The DRAM kinds
    take :data:`DRAM_DEFINES` (``fn`` built with them): a block per tile, one pass a launch
    (``fixed_scale``: the number of launches sets a repeat's length, not a loop count)."""
    n16 = nbytes // VEC_BYTES
    dram = kind.startswith("dram_")
    tile = DRAM_DEFINES["BLOCK"] * DRAM_DEFINES["UNROLL"]
    grid = -(-n16 // tile) if dram else l2_read_grid(n16, sms, max_threads_per_sm)
    src = src if src is not None else cp.zeros(n16 * 4, dtype=cp.uint32)
    if kind in ("dram_copy", "dram_write"):
        dst = dst if dst is not None else cp.zeros(n16 * 4, dtype=cp.uint32)
        third = dst
    else:
        third = sink if sink is not None else cp.zeros(grid * STREAM_BLOCK, dtype=cp.uint32)  # the never-written sink
    work = (lambda s: stream_bytes(kind, n16, s)) if dram else (lambda s: l2_read_bytes(n16, grid, s))
    return Workload(kind, STREAM_KERNELS[kind], "stream_bandwidth.cu", stream_defines(kind),
                    fn, grid, STREAM_BLOCK, 0 if dram else 2, lambda st, s: (st, src, third, cp.uint64(n16), cp.int32(s)),
                    work, "GB/s", scale=1, fixed_scale=dram,
                    extra={"buffer_bytes": n16 * VEC_BYTES, **(extra or {})})


def device_ptr(buf) -> int:
    """A CuPy array's device address (``buf.data.ptr``); 0 for an array without one (a host stand-in)."""
    return int(getattr(getattr(buf, "data", None), "ptr", 0) or 0)


def l2_placement_workloads(cp, fn, layout: L2Placements, region, *, sms: int,
                           max_threads_per_sm: int) -> list[Workload]:
    """The L2 read (stream_read_cg) of each window of ``layout`` in ``region`` (a uint32 CuPy array of
    at least ``layout.region_bytes``), one workload a window, in address order, one sink for all."""
    if region.nbytes < layout.region_bytes:
        raise ValueError(f"the region holds {region.nbytes} bytes, the windows need {layout.region_bytes}")
    grid = sms * blocks_per_sm(max_threads_per_sm, STREAM_BLOCK)
    sink = cp.zeros(grid * STREAM_BLOCK, dtype=cp.uint32)
    words = layout.window_bytes // 4
    offsets = layout.offsets(device_ptr(region))
    where = {"placements": layout.count, "stride_bytes": layout.stride_bytes, "region_bytes": layout.region_bytes,
             "page_bytes": layout.page_bytes}
    return [stream_workload(cp, fn, "l2_read", sms=sms, max_threads_per_sm=max_threads_per_sm,
                            nbytes=layout.window_bytes, src=region[off // 4:off // 4 + words], sink=sink,
                            extra=dict(where, window_offset=off))
            for off in offsets]


def innermost_loop(instrs: Sequence, opcode: str) -> list:
    """The instructions of the shortest loop (a backward BRA and everything from its target to it)
    that holds an instruction whose opcode starts with ``opcode``; [] when none does."""
    best: list = []
    for br in instrs:
        if br.base_opcode != "BRA" or not br.operands:
            continue
        try:
            target = int(br.operands[-1], 16)
        except ValueError:
            continue
        if target > br.offset:
            continue
        body = [i for i in instrs if target <= i.offset <= br.offset]
        if any(i.opcode.startswith(opcode) for i in body) and (not best or len(body) < len(best)):
            best = body
    return best


def opcode_counts(instrs: Sequence) -> dict[str, int]:
    """How many of each opcode, NOPs aside."""
    return dict(collections.Counter(i.opcode for i in instrs if i.base_opcode != "NOP"))
