"""The whole-GPU workloads (workloads.py) with given numbers and NumPy for CuPy: what one launch does,
buffer sizes, where the L2 read's windows lie, the arguments each workload's launch gets, and the
innermost loop of a listing."""

from types import SimpleNamespace

import numpy as np
import pytest

from pytest_gpuprops import sass, workloads

# ----------------------------------------------------------------------------------------------
# what one launch does


def test_ffma_flops_per_launch():
    # 528 blocks of 512 threads, 8 samples x 100 trips of 64 x 8 FFMAs, 2 FLOPs each
    assert workloads.ffma_flops(528, 512, 8, 100, 64, 8) == 2 * 528 * 512 * 8 * 100 * 512 == 221_459_251_200


def test_wgmma_flops_per_launch():
    # 132 SMs x 2 warpgroups x 8 x 10 x 16 instructions of m64n256k16 (524 288 FLOPs each)
    assert workloads.wgmma_flops(132, 2, 8, 10, 16, 256, 16) == 132 * 2 * 8 * 10 * 16 * 524_288 == 177_167_400_960
    assert workloads.wgmma_flops(1, 1, 1, 1, 1, 256, 32) == 2 * workloads.wgmma_flops(1, 1, 1, 1, 1, 256, 16)


@pytest.mark.parametrize("kind, expected", [("dram_read", 48_000), ("l2_read", 48_000), ("dram_copy", 96_000),
                                            ("dram_write", 48_000)])
def test_stream_bytes_count_reads_and_for_a_copy_writes(kind, expected):
    assert workloads.stream_bytes(kind, 1000, 3) == expected


def test_stream_bytes_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="dram_read"):
        workloads.stream_bytes("smem_read", 1, 1)


@pytest.mark.parametrize("threads, block, n", [(2048, 512, 4), (1536, 512, 3), (1536, 256, 6), (1024, 2048, 1)])
def test_blocks_per_sm(threads, block, n):
    assert workloads.blocks_per_sm(threads, block) == n


def test_buffer_sizes():
    l2 = 50 * 2**20
    assert workloads.dram_buffer_bytes(l2, 80 * 2**30) == 2**30  # 8 x L2 = 400 MiB < 1 GiB
    assert workloads.dram_buffer_bytes(200 * 2**20, 80 * 2**30) == 1600 * 2**20  # 8 x L2 > 1 GiB
    assert workloads.dram_buffer_bytes(l2, 2 * 2**30 + 7) == 2**29 + 0  # a quarter of free memory, whole vectors
    assert workloads.dram_buffer_bytes(l2, 2**30) % 16 == 0
    with pytest.raises(ValueError, match="4 x the"):
        workloads.dram_buffer_bytes(l2, 4 * l2)
    assert workloads.l2_buffer_bytes(52_428_800) == 13_107_200
    assert workloads.l2_buffer_bytes(60 * 2**20) == 15 * 2**20  # the H200's: 30 chunks of 512 KiB
    with pytest.raises(ValueError, match="no quarter of whole 512 KiB chunks"):
        workloads.l2_buffer_bytes(1000)
    assert workloads.l2_buffer_bytes(7 * 2**20) == 3 * 2**20 // 2  # a quarter, down to whole chunks


# ----------------------------------------------------------------------------------------------
# the L2 read's windows


MiB = 2**20


def _pages(start: int, nbytes: int, page: int = workloads.PAGE_BYTES) -> set[int]:
    return set(range(start // page, (start + nbytes - 1) // page + 1))


def test_l2_placements_put_each_window_on_pages_of_its_own():
    h100 = workloads.l2_placements(50 * MiB)  # the H100's 50 MiB L2: 12.5 MiB windows, 14 MiB apart
    assert (h100.window_bytes, h100.stride_bytes, h100.count) == (12.5 * MiB, 14 * MiB, workloads.L2_PLACEMENTS)
    assert h100.region_bytes == (workloads.L2_PLACEMENTS - 1) * 14 * MiB + 12.5 * MiB + 2 * MiB  # 896.5 MiB
    h200 = workloads.l2_placements(60 * MiB)  # 15 MiB windows: one page of room between them
    assert (h200.window_bytes, h200.stride_bytes) == (15 * MiB, 16 * MiB)
    # an allocation that does not start on a page: the first window starts at the next page boundary
    base = 7 * workloads.PAGE_BYTES + 4096
    offsets = h100.offsets(base)
    assert offsets[0] == workloads.PAGE_BYTES - 4096 and (base + offsets[0]) % workloads.PAGE_BYTES == 0
    assert [b - a for a, b in zip(offsets, offsets[1:])] == [14 * MiB] * (workloads.L2_PLACEMENTS - 1)
    assert offsets[-1] + h100.window_bytes <= h100.region_bytes  # every window inside the allocation
    seen: set[int] = set()
    for off in offsets:  # no page holds lines of two windows
        pages = _pages(base + off, h100.window_bytes)
        assert len(pages) == 7 and not pages & seen
        seen |= pages
    assert h100.offsets(0)[0] == 0 and h100.offsets(workloads.PAGE_BYTES)[0] == 0


def test_l2_placements_fit_a_quarter_of_free_memory():
    # 16 MiB of windows 12.5 MiB + 14 MiB apart and a page of room: a quarter of 256 MiB holds 4 of them
    assert workloads.l2_placements(50 * MiB, free_bytes=256 * MiB).count == 4
    assert workloads.l2_placements(50 * MiB, free_bytes=256 * MiB).region_bytes <= 64 * MiB
    assert workloads.l2_placements(50 * MiB, free_bytes=80 * 2**30).count == workloads.L2_PLACEMENTS
    assert workloads.l2_placements(50 * MiB, free_bytes=1 * MiB).count == 1  # always one window, as before
    small = workloads.l2_placements(3 * MiB, count=8)  # an RTX 3060's 3 MiB L2: one 0.5 MiB chunk a window, a page each
    assert (small.window_bytes, small.stride_bytes, small.region_bytes) == (0.5 * MiB, 2 * MiB, 16.5 * MiB)
    with pytest.raises(ValueError, match="no quarter"):
        workloads.l2_placements(32)


# ----------------------------------------------------------------------------------------------
# workloads and their arguments


class _Array:
    def __init__(self, a):
        self.a = a

    def get(self):
        return self.a.copy()

    @property
    def nbytes(self):
        return self.a.nbytes

    def __getitem__(self, i):
        return _Array(self.a[i])  # a view, as CuPy's


def test_workloads_launch_what_they_count():
    wl = workloads.ffma_workload(np, None, sms=132, max_threads_per_sm=2048)
    assert (wl.grid, wl.block, wl.stamps_per_block, wl.unit) == (528, 512, 9, "TFLOP/s")
    assert wl.work(100) == workloads.ffma_flops(528, 512, 8, 100, 64, 8)
    args = wl.args("stamps", 7)
    assert args[0] == "stamps" and args[3] == 7 and args[3].dtype == np.int32 and (args[4], args[5]) == (-1.0, 0.5)
    w = workloads.wgmma_workload(np, None, "e4m3", sms=132)
    assert (w.grid, w.block, w.defines["WGMMA_DTYPE"], w.work(1)) == (132, 256, 1, workloads.wgmma_flops(132, 2, 8, 1, 16, 256, 32))
    c = workloads.stream_workload(np, None, "dram_copy", sms=132, max_threads_per_sm=2048, nbytes=16 * 1000 + 5)
    # the DRAM kinds: a block per 256-vector tile (1000 vectors: 4 blocks), one pass a launch, no stamps
    assert (c.grid, c.block, c.stamps_per_block, c.work(1), c.describe()["buffer_bytes"]) == (4, 256, 0, 32_000, 16_000)
    assert c.fixed_scale and c.defines == workloads.DRAM_DEFINES
    big = workloads.stream_workload(np, None, "dram_write", sms=132, max_threads_per_sm=2048, nbytes=1 << 30)
    assert big.grid == (1 << 30) // 16 // 256 == 262_144
    cg = workloads.stream_workload(np, None, "l2_read", sms=132, max_threads_per_sm=2048, nbytes=1 << 20)
    # the L2 read: 4 blocks a block slot (132 x 8), each reading its 512 KiB chunk (2 in 1 MiB) a pass
    assert (cg.grid, cg.stamps_per_block, cg.fixed_scale, cg.defines) == (4224, 2, False, workloads.L2_DEFINES)
    assert cg.work(3) == 4224 * 512 * 1024 * 3 and cg.defines["LAYOUT"] == "LAYOUT_SHARED_CHUNK"
    many = workloads.stream_workload(np, None, "l2_read", sms=2, max_threads_per_sm=1024, nbytes=40 << 20)
    assert many.grid == 4 * 80  # more chunks (80) than block slots (8): 4 blocks a chunk
    src, dst = np.zeros(4), np.ones(4)
    r = workloads.stream_workload(np, None, "l2_read", sms=2, max_threads_per_sm=1024, nbytes=64, src=src)
    assert r.kernel == "stream_read_cg" and r.args("st", 3)[1] is src and r.args("st", 3)[3] == 4
    assert r.grid == 32 and r.work(3) == 16 * 4 * 32 * 3  # a window under one chunk: every block reads all of it
    assert workloads.stream_workload(np, None, "dram_copy", sms=2, max_threads_per_sm=1024, nbytes=64, src=src,
                              dst=dst).args("st", 1)[2] is dst


def test_l2_placement_workloads_read_each_window_into_one_sink():
    layout = workloads.l2_placements(4 * MiB, count=3)  # 1 MiB windows, 2 MiB apart
    region = _Array(np.zeros(layout.region_bytes // 4, dtype=np.uint32))
    wls = workloads.l2_placement_workloads(np, None, layout, region, sms=2, max_threads_per_sm=1024)
    assert len(wls) == 3 and {wl.kernel for wl in wls} == {"stream_read_cg"}
    srcs = [wl.args("st", 5)[1].a for wl in wls]
    base = region.a.__array_interface__["data"][0]
    assert [a.__array_interface__["data"][0] - base for a in srcs] == [0, 2 * MiB, 4 * MiB]  # views, not copies
    assert all(a.nbytes == MiB for a in srcs)
    assert len({id(wl.args("st", 5)[2]) for wl in wls}) == 1  # one sink for all
    # 32 blocks (4 x 8 slots), each its 512 KiB chunk of the window, 5 passes
    assert [wl.work(5) for wl in wls] == [5 * 32 * MiB // 2] * 3 and wls[0].args("st", 5)[3] == MiB // 16
    d = wls[1].describe()
    assert (d["buffer_bytes"], d["window_offset"], d["placements"], d["stride_bytes"], d["region_bytes"]) == \
        (MiB, 2 * MiB, 3, 2 * MiB, layout.region_bytes)
    # a device allocation off a page boundary: the windows start on the next one
    odd = SimpleNamespace(nbytes=layout.region_bytes, data=SimpleNamespace(ptr=workloads.PAGE_BYTES - 256))
    assert workloads.device_ptr(odd) == workloads.PAGE_BYTES - 256 and workloads.device_ptr(region) == 0
    with pytest.raises(ValueError, match="the windows need"):
        workloads.l2_placement_workloads(np, None, layout, _Array(np.zeros(16, dtype=np.uint32)), sms=2, max_threads_per_sm=1024)


# ----------------------------------------------------------------------------------------------
# SASS loops


def _ins(offset: int, text: str) -> sass.Instruction:
    return sass.Instruction(offset, text, 0, 0)


def test_innermost_loop_holding_an_opcode():
    instrs = [_ins(0x00, "MOV R1, RZ"), _ins(0x10, "FFMA R2, R2, R3, R4"), _ins(0x20, "IADD3 R5, R5, 0x1, RZ"),
              _ins(0x30, "FFMA R2, R2, R3, R4"), _ins(0x40, "@!P0 BRA 0x30"), _ins(0x50, "@!P1 BRA 0x10"),
              _ins(0x60, "LDG.E.128 R8, desc[UR4][R2.64]"), _ins(0x70, "BRA 0x80"), _ins(0x80, "EXIT"),
              _ins(0x90, "BRA 0x90")]
    assert [i.offset for i in workloads.innermost_loop(instrs, "FFMA")] == [0x30, 0x40]
    assert [i.offset for i in workloads.innermost_loop(instrs, "IADD3")] == [0x10, 0x20, 0x30, 0x40, 0x50]
    assert workloads.innermost_loop(instrs, "LDG") == []  # forward branches and a self-loop are no loop around it
    assert workloads.opcode_counts(instrs[:5] + [_ins(0xa0, "NOP")]) == {"MOV": 1, "FFMA": 2, "IADD3": 1, "BRA": 1}
