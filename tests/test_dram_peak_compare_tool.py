"""tools/dram_peak_compare.py's GPU path on the CPU, against stand-ins: a NumPy ``torch`` and a
``cuda.bindings.driver`` whose launches do what the kernels do (the write stores (j, reps - 1, 0, 0),
the copy copies, the read reads) in the buffers' memory, by address. Every device call advances a
simulated clock by its bytes over a rate set here per build and per baseline, and the CUDA events
read that clock: so the tool's GB/s, shares and best-of lines are checked against arithmetic done
by hand, and a planted kernel that skips a vector must be reported WRONG with exit status 1.
"""

import ctypes
import hashlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from gp_testing import load_tool

from pytest_gpuprops import workloads

tool = load_tool("dram_peak_compare")
ROOT = Path(__file__).resolve().parents[1]
SMS, L2 = 132, 50 * 2**20
MIB = 4  # the buffers: 4 MiB, 262144 vectors
N16 = MIB * 2**20 // 16
#: GB/s of each baseline (the event pair around one call reads its bytes over this rate)
BASELINE_GBPS = {"fill": 3000.0, "memset": 2900.0, "copy_": 2800.0, "memcpy": 2820.0, "not": 2700.0, "sum": 2900.0}
#: GB/s of a kernel: the suite's build (and tile_tail_u1's unstamped one, the same build), the one-wave
#: build, the best of each kind (the chunk layout's write, tile_tail_b512's copy, load_nc's read), else
#: the default
SUITE_GBPS = {"stream_write": 3050.0, "stream_copy": 2850.0, "stream_read": 3100.0}
ONE_WAVE_GBPS = {"stream_write": 2800.0, "stream_copy": 2650.0, "stream_read": 2950.0}
OTHER_GBPS = {"stream_write": 2500.0, "stream_copy": 2400.0, "stream_read": 2600.0}
BEST_GBPS = {"stream_write": (("LAYOUT", "LAYOUT_BLOCK_CHUNK"), 3200.0), "stream_copy": (("BLOCK", 512), 2900.0),
             "stream_read": (("LOAD", "LOAD_NC"), 3150.0)}


def kernel_gbps(defines: dict, kernel: str) -> float:
    if {k: v for k, v in defines.items() if k != "STAMPS"} == {k: v for k, v in workloads.DRAM_DEFINES.items()
                                                               if k != "STAMPS"}:
        return SUITE_GBPS[kernel]
    if defines == workloads.STREAM_DEFINES:
        return ONE_WAVE_GBPS[kernel]
    (key, value), gbps = BEST_GBPS[kernel]
    return gbps if defines.get(key) == value else OTHER_GBPS[kernel]


class Clock:
    """The simulated GPU's time in whole femtoseconds (so equal calls time exactly equal): a call of
    ``nbytes`` at ``gbps`` takes nbytes / gbps ns."""

    def __init__(self):
        self.now = 0

    def spend(self, nbytes: int, gbps: float):
        self.now += round(nbytes * 1e6 / gbps)


# ------------------------------------------------------------------------------------------------
# torch, on NumPy


class T:
    def __init__(self, a, clock):
        self.a, self.clock = a, clock

    def _t(self, a):
        return T(a, self.clock)

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], np.dtype):
            return self._t(self.a.view(shape[0]))
        out = self.a.reshape(shape)
        assert np.shares_memory(out, self.a)
        return self._t(out)

    def data_ptr(self):
        return self.a.ctypes.data

    def fill_(self, v):
        self.a.fill(v)
        self.clock.spend(self.a.nbytes, BASELINE_GBPS["fill"])
        return self

    def copy_(self, x):
        np.copyto(self.a, x.a)
        self.clock.spend(2 * self.a.nbytes, BASELINE_GBPS["copy_"])
        return self

    def sum(self):
        self.clock.spend(self.a.nbytes, BASELINE_GBPS["sum"])
        return self._t(np.array(self.a.sum()))

    def cpu(self):
        return self

    def to(self, dtype):
        return self._t(self.a.astype(dtype))

    def median(self):
        return self._t(np.array(np.sort(self.a.ravel())[(self.a.size - 1) // 2]))  # torch: the lower median

    def min(self):
        return self._t(np.array(self.a.min()))

    def max(self):
        return self._t(np.array(self.a.max()))

    def any(self):
        return self._t(np.array(self.a.any()))

    def all(self):
        return self._t(np.array(self.a.all()))

    def __bool__(self):
        return bool(self.a)

    def __float__(self):
        return float(self.a)

    def __getitem__(self, idx):
        return self._t(self.a[idx.a if isinstance(idx, T) else idx])

    def __eq__(self, o):
        return self._t(self.a == (o.a if isinstance(o, T) else o))

    def __gt__(self, o):
        return self._t(self.a > o)

    def __sub__(self, o):
        return self._t(self.a - o.a)

    def __truediv__(self, o):
        return self._t(self.a / o.a)


def fake_torch(clock: Clock):
    torch = types.ModuleType("torch")
    torch.__version__, torch.version = "0.0-stand-in", types.SimpleNamespace(cuda="13.0")
    for name in ("uint8", "int32", "int64", "float32", "float64"):
        setattr(torch, name, np.dtype(name))
    torch.zeros = lambda n, dtype=np.dtype("float32"), device=None: T(np.zeros(n, dtype=dtype), clock)
    torch.empty = lambda n, dtype=np.dtype("float32"), device=None: T(np.empty(n, dtype=dtype), clock)
    torch.arange = lambda n, dtype=np.dtype("int64"), device=None: T(np.arange(n, dtype=dtype), clock)
    torch.equal = lambda a, b: bool(np.array_equal(a.a, b.a))

    def bitwise_not(x, out):
        np.bitwise_not(x.a, out=out.a)
        clock.spend(2 * x.a.nbytes, BASELINE_GBPS["not"])
        return out
    torch.bitwise_not = bitwise_not

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = clock.now

        def elapsed_time(self, end):
            return (end.t - self.t) / 1e12

    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, init=lambda: None, get_device_capability=lambda: (9, 0),
        get_device_name=lambda: "Stand-in H100", mem_get_info=lambda: (80 * 2**30, 80 * 2**30),
        synchronize=lambda: None, current_device=lambda: 0,
        current_stream=lambda: types.SimpleNamespace(cuda_stream=0), Event=Event)
    return torch


# ------------------------------------------------------------------------------------------------
# the driver, doing what the kernels do


def fake_driver(clock: Clock, build_of: dict, broken):
    """``build_of``: sha256 of a cubin -> its defines; ``broken(defines, kernel)``: that kernel skips
    its last vector. ``cu.launches`` records each launch."""
    cu = types.ModuleType("cuda.bindings.driver")
    attrs = {"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": SMS, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE": L2,
             "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE": 2_619_000, "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH": 5120}
    cu.CUdevice_attribute = types.SimpleNamespace(**{k: k for k in attrs})
    cu.launches = []
    cu.cuInit = lambda flags: (0,)
    cu.cuCtxGetCurrent = lambda: (0, 1)
    cu.cuCtxGetDevice = lambda: (0, 0)
    cu.CUstream = lambda h: h
    cu.cuGetErrorName = lambda err: (0, b"CUDA_ERROR_STAND_IN")
    cu.cuDeviceGetAttribute = lambda a, dev: (0, attrs[a])
    cu.cuDriverGetVersion = lambda: (0, 13000)

    def load(cubin):
        assert cubin[:4] == b"\x7fELF"
        return 0, build_of[hashlib.sha256(cubin).hexdigest()]
    cu.cuModuleLoadData = load
    cu.cuModuleGetFunction = lambda mod, name: (0, (mod, name.decode()))
    cu.cuOccupancyMaxActiveBlocksPerMultiprocessor = lambda fn, block, smem: (0, min(32, 2048 // block))

    def memset(ptr, v, n, stream):
        ctypes.memset(ptr, v, n)
        clock.spend(n, BASELINE_GBPS["memset"])
        return (0,)

    def memcpy(dst, src, n, stream):
        ctypes.memmove(dst, src, n)
        clock.spend(2 * n, BASELINE_GBPS["memcpy"])
        return (0,)
    cu.cuMemsetD8Async, cu.cuMemcpyDtoDAsync = memset, memcpy
    stores: dict = {}

    def written(n16, reps):
        """What the write kernel stores in vector j, (j, reps - 1, 0, 0), for every j: made once per
        buffer size and copied in (three strided column stores a launch were 1.8 ms of ~900 launches)."""
        if (n16, reps) not in stores:
            words = np.zeros((n16, 4), dtype=np.uint32)
            words[:, 0], words[:, 1] = np.arange(n16, dtype=np.uint32), reps - 1
            stores[(n16, reps)] = words
        return stores[(n16, reps)]

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, addr, extra):
        defines, kernel = fn
        assert (gy, gz, by, bz, smem, extra) == (1, 1, 1, 1, 0, 0)
        assert bx == int(defines["BLOCK"]), (bx, defines)
        ptrs = (ctypes.c_void_p * 5).from_address(addr)
        stamps, src, dst, n16 = (int.from_bytes(ctypes.string_at(ptrs[i], 8), "little") for i in range(4))
        reps = int.from_bytes(ctypes.string_at(ptrs[4], 4), "little", signed=True)
        cu.launches.append({"defines": defines, "kernel": kernel, "grid": gx, "block": bx, "n16": n16, "reps": reps,
                            "src": src, "dst": dst})
        n = n16 - 1 if broken(defines, kernel) else n16
        if kernel == "stream_write":
            words = np.ctypeslib.as_array((ctypes.c_uint32 * (n16 * 4)).from_address(dst)).reshape(n16, 4)
            words[:n] = written(n16, reps)[:n]
        elif kernel == "stream_copy":
            ctypes.memmove(dst, src, n * 16)
        clock.spend(16 * n16 * reps * (2 if kernel == "stream_copy" else 1), kernel_gbps(defines, kernel))
        if defines.get("STAMPS", 1):
            st = np.ctypeslib.as_array((ctypes.c_uint64 * (gx * 4)).from_address(stamps)).reshape(gx, 2, 2)
            b = np.arange(gx, dtype=np.uint64)
            st[:, 0, 0], st[:, 0, 1] = 5000, 0  # start: clock, globaltimer (ns)
            st[:, 1, 1] = 1000 + b  # end: block b 1000 + b ns after the start
            st[:, 1, 0] = 5000 + (1000 + b) * 198 // 100  # 1980 MHz
        return (0,)
    cu.cuLaunchKernel = launch
    return cu


@pytest.fixture(scope="module")
def build_of():
    """sha256 of every build the tool makes -> its defines (a cubin two variants share, the suite's,
    has the same defines in both)."""
    table = {v.name: v for v in tool.variant_table()}
    out = {}
    for (name, st), c in tool.compile_all(ROOT, "sm_90", list(table.values())).items():
        key = hashlib.sha256(c.cubin).hexdigest()
        assert out.setdefault(key, table[name].build(st)) == table[name].build(st), (name, out[key])
    return out


@pytest.fixture
def stand_ins(monkeypatch, capsys, build_of):
    """run(argv, broken=...) -> (exit status, printed text, launches): the tool's main on the stand-ins."""
    import cuda.bindings

    def run(argv, broken=lambda defines, kernel: False):
        clock = Clock()
        cu = fake_driver(clock, build_of, broken)
        monkeypatch.setitem(sys.modules, "torch", fake_torch(clock))
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", cu)
        monkeypatch.setattr(cuda.bindings, "driver", cu, raising=False)
        rc = tool.main(["--repo", str(ROOT), "--mib", str(MIB), *argv])
        return rc, capsys.readouterr().out, cu.launches
    return run


def chunk_write(defines, kernel):
    return kernel == "stream_write" and defines.get("LAYOUT") == "LAYOUT_BLOCK_CHUNK" and "GUARD" not in defines


def test_every_variant_at_its_grids_checked_and_timed(stand_ins, tmp_path):
    out = tmp_path / "dram.json"
    rc, text, launches = stand_ins(["--json", str(out)])
    assert rc == 0, text
    assert "WRONG" not in text
    data = json.loads(out.read_text())
    assert set(data) == {"gpu", "arch", "sms", "l2_bytes", "driver", "torch", "torch_cuda", "buffer_bytes",
                         "read_bytes", "reps", "warmup", "samples", "date", "baselines_before", "baselines_after",
                         "kernels"}
    assert (data["arch"], data["sms"], data["buffer_bytes"], data["read_bytes"]) == ("sm_90", SMS, N16 * 16, N16 * 16)
    assert set(data["baselines_before"]) == set(data["baselines_after"]) == {
        "write: torch fill_ (uint8)", "write: driver cuMemsetD8Async", "copy: torch copy_ (uint8)",
        "copy: driver cuMemcpyDtoDAsync", "copy: torch bitwise_not (elementwise)", "read: torch sum (float32 view)"}
    assert data["baselines_before"]["copy: driver cuMemcpyDtoDAsync"]["gbps"] == pytest.approx(2820.0)
    rows = data["kernels"]
    # the suite's build only at tiles, the one-wave build only at 1x / 2x / 4x, every other at all four
    grids = {}
    for row in rows:
        grids.setdefault((row["variant"], row["kind"]), []).append(row["grid"])
    assert all(g == ["tiles"] for (name, _), g in grids.items() if name == "suite")
    assert all(g == ["1x", "2x", "4x"] for (name, _), g in grids.items() if name == "one_wave")
    assert all(g == ["1x", "2x", "4x", "tiles"] for (name, _), g in grids.items() if name not in ("suite", "one_wave"))
    table = tool.variant_table()
    assert len(rows) == sum(len(v.kinds) for v in table) * 4 - 3 * 3 - 3 * 1
    assert len(launches) == len(rows) * 11  # 2 untimed + 9 timed each
    for row in rows:
        d, g = row["defines"], row["grid"]
        if row["variant"] == "suite":
            assert d == workloads.DRAM_DEFINES and row["blocks"] == N16 // 256  # a block per 256-vector tile
        if row["variant"] == "one_wave":
            assert d == workloads.STREAM_DEFINES
        want = (-(-N16 // (int(d["BLOCK"]) * int(d["UNROLL"]))) if g == "tiles"
                else SMS * min(32, 2048 // int(d["BLOCK"])) * int(g[:-1]))
        assert row["blocks"] == want, row
        assert (d.get("STAMPS") == 0) == (g == "tiles"), row
        assert row["gbps"] == pytest.approx(kernel_gbps(d, tool.KERNEL_OF[row["kind"]])), row
        assert row["noise"] == pytest.approx(0, abs=1e-9) and len(row["samples"]) == 9
        assert row.get("correct", True) is True and ("correct" in row) == (row["kind"] != "read")
        if g != "tiles":
            assert row["mhz"] == pytest.approx(1980, abs=1)
        else:
            assert "mhz" not in row
    # the buffers: the write's and copy's destination and the read's sink are separate; every launch
    # covers the whole buffer once
    assert {(la["n16"], la["reps"]) for la in launches} == {(N16, 1)}
    copy_dst = {la["dst"] for la in launches if la["kernel"] == "stream_copy"}
    write_dst = {la["dst"] for la in launches if la["kernel"] == "stream_write"}
    read_sink = {la["dst"] for la in launches if la["kernel"] == "stream_read"}
    assert len(copy_dst) == 1 and copy_dst == write_dst and read_sink.isdisjoint(copy_dst) and len(read_sink) == 1
    # the tail of the one-wave grid at 1x: the median block (lower median) ends 1000 + (g - 1) // 2 ns
    # after the start, the last 1000 + g - 1
    one_wave = next(r for r in rows if r["variant"] == "one_wave" and r["grid"] == "1x")
    g = one_wave["blocks"]
    assert one_wave["tail"] == pytest.approx(((g - 1) - (g - 1) // 2) / (1000 + g - 1))
    # best of each kind: worked out by hand from the rates above
    assert "  write: chunk at 1x (1056 blocks) 3200.0 GB/s = 106.7% of torch fill_ (uint8) (3000.0); the " \
           "suite's kernel at tiles 3050.0 (101.7%); the one-wave grid at 1x 2800.0 (93.3%)\n" in text
    assert "  copy : tile_tail_b512 at 1x (528 blocks) 2900.0 GB/s = 102.8% of driver cuMemcpyDtoDAsync (2820.0); " \
           "the suite's kernel at tiles 2850.0 (101.1%); the one-wave grid at 1x 2650.0 (94.0%)\n" in text
    assert "  read : load_nc at 1x (1056 blocks) 3150.0 GB/s = 108.6% of torch sum (float32 view) (2900.0); the " \
           "suite's kernel at tiles 3100.0 (106.9%); the one-wave grid at 1x 2950.0 (101.7%)\n" in text
    # the table: one row per variant and grid; the suite's one row, its cells and shares
    lines = text.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("suite ")] == ["tiles"]
    assert [ln.split()[1] for ln in lines if ln.startswith("one_wave ")] == ["1x", "2x", "4x"]
    suite = next(ln for ln in lines if ln.startswith("suite "))
    assert suite.split()[3:9] == ["3050.0", "101.7%", "2850.0", "101.1%", "3100.0", "106.9%"]
    store_cs = next(ln for ln in lines if ln.startswith("store_cs "))
    assert store_cs.split()[1:8] == ["1x", "(1056)", "2500.0", "83.3%", "2400.0", "85.1%", "="]  # no read kernel


def test_a_kernel_that_skips_a_vector_is_wrong_never_the_best_and_fails_the_run(stand_ins):
    rc, text, _ = stand_ins(["--variants", "suite,one_wave,chunk", "--grids", "1x,tiles"], broken=chunk_write)
    assert rc == 1
    assert "WRONG results (a kernel skipped or misplaced vectors): chunk write 1x, chunk write tiles\n" in text
    chunk = [ln.split() for ln in text.splitlines() if ln.startswith("chunk ")]
    assert [row[1] for row in chunk] == ["1x", "tiles"] and all(row[3:5] == ["3200.0", "WRONG"] for row in chunk)
    # the best write is then the suite's (3050), not the faster, wrong chunk layout (3200)
    assert "  write: suite at tiles (1024 blocks) 3050.0 GB/s = 101.7% of torch fill_ (uint8) (3000.0)" in text


def test_a_wrong_suite_kernel_is_named_wrong_on_its_own_line(stand_ins):
    def suite_copy(defines, kernel):
        return defines == workloads.DRAM_DEFINES and kernel == "stream_copy"
    rc, text, _ = stand_ins(["--variants", "suite,one_wave"], broken=suite_copy)
    assert rc == 1
    assert "  copy : one_wave at 1x (1056 blocks) 2650.0 GB/s = 94.0% of driver cuMemcpyDtoDAsync (2820.0); the " \
           "suite's kernel at tiles 2850.0 (WRONG); the one-wave grid at 1x 2650.0 (94.0%)\n" in text
    assert "WRONG results (a kernel skipped or misplaced vectors): suite copy tiles\n" in text


def test_buffers_are_the_suites_at_one_gib_and_the_asked_size_otherwise():
    assert tool.buffer_bytes(1024, 50 * 2**20, 80 * 2**30) == (2**30, 2**30)  # 8 x 50 MiB < 1 GiB
    assert tool.buffer_bytes(1024, 256 * 2**20, 80 * 2**30) == (2**30, 2 * 2**30)  # 8 x L2
    assert tool.buffer_bytes(4, 256 * 2**20, 80 * 2**30) == (4 * 2**20, 4 * 2**20)


def test_bad_variants_and_grids_are_refused_naming_what_is_known():
    with pytest.raises(SystemExit, match="unknown variant.* nope; known: suite, one_wave, store_cs"):
        tool.main(["--repo", str(ROOT), "--dry-run", "--variants", "suite,nope"])
    with pytest.raises(SystemExit, match=r"unknown grid\(s\) 3, wave: give 'tiles' or a multiple"):
        tool.grid_list("1x,3,tiles,wave")
    assert tool.grid_list("1x,16x,tiles") == ["1x", "16x", "tiles"]
    with pytest.raises(SystemExit, match="no checkout of pytest-gpuprops found"):
        tool.find_repo(str(ROOT / "docs"))


def test_the_suite_variant_is_the_suites_dram_build_and_one_wave_the_one_before():
    table = {v.name: v for v in tool.variant_table()}
    assert table["suite"].build(False) == workloads.DRAM_DEFINES
    assert table["suite"].stamps() == (False,) and table["suite"].runs_at("tiles")
    assert not table["suite"].runs_at("1x")
    assert table["one_wave"].build(True) == workloads.STREAM_DEFINES and table["one_wave"].stamps() == (True,)
    assert table["one_wave"].runs_at("8x") and not table["one_wave"].runs_at("tiles")
    assert table["tile_tail_u1"].build(False) == workloads.DRAM_DEFINES  # the suite's build again, at every grid
    assert len(table) == 25


def test_dry_run_compiles_every_variant_and_launches_nothing(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would raise
    assert tool.main(["--repo", str(ROOT), "--dry-run"]) == 0
    text = capsys.readouterr().out
    names = [v.name for v in tool.variant_table()]
    assert f"compiled {2 * len(names) - 2} builds of {ROOT}/kernels/stream_bandwidth.cu for sm_90 " \
           f"({len(names)} variants)" in text
    listed = [ln.split()[0] for ln in text.splitlines() if ln.startswith("  ")]
    assert listed == names
    assert "nothing was launched" in text


def test_dry_run_sass_reads_each_loop(capsys):
    assert tool.main(["--repo", str(ROOT), "--dry-run", "--sass", "--variants", "suite,one_wave"]) == 0
    rows = {}
    for ln in capsys.readouterr().out.splitlines():
        cells = ln.replace(" (STAMPS=0)", "").split()
        if cells and cells[0] in ("suite", "one_wave") and cells[1].startswith("stream_"):
            rows[cells[0], cells[1]] = cells[2:]
    # the suite's build: one 16-byte access a thread, unchecked (GUARD_TAIL); one wave: UNROLL 4, each checked
    assert rows["suite", "stream_copy"][:6] == ["1", "LDG.E.128,", "1", "STG.E.128", "LS", "12"]
    assert rows["one_wave", "stream_copy"][:5] == ["4", "LDG.E.128,", "4", "STG.E.128", "LLLLSSSS"]
    assert rows["suite", "stream_write"][4] == "0" and rows["one_wave", "stream_write"][4] == "4"  # predicated
    assert all(cells[-1] == "0/0" for cells in rows.values()) and len(rows) == 6  # no local memory
