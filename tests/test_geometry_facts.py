"""pytest_gpuprops.smem_limits and hwtests/test_geometry.py without a GPU: the search for the largest
size that fits (two probes where the driver's figure is right, a bisection where it is not), what one
byte more was refused with, the shared memory two co-resident blocks hold, the check of what the
touching kernel read back; SmemProbe on a simulated sm_90 SM behind a stand-in driver (cuda-python's
types, the calls answered as an H100's driver and SM would: 227 KiB a block, 228 KiB an SM, 1 KiB
reserved per block); and the two facts recorded (the arch's), checked, and failing a planted value
end to end on it."""

import ctypes
import re
from types import SimpleNamespace

import numpy as np
import pytest
from gp_testing import KERNELS, fake_gpu_conftest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gpuprops import driver_launch, sass, session
from pytest_gpuprops import smem_limits as sl
from pytest_gpuprops.compile import compile_cuda
from pytest_gpuprops.facts import tomllib
from pytest_gpuprops.stats import StopRule

driver = pytest.importorskip("cuda.bindings.driver")
KIB = 1024
H100_BLOCK, H100_SM, RESERVED = 227 * KIB, 228 * KIB, KIB  # 232448, 233472, 1024

# ----------------------------------------------------------------------------------------------
# the search


def _oracle(boundary):
    asked = []

    def fits(size):
        asked.append(size)
        return size <= boundary, "ran" if size <= boundary else "refused"
    return fits, asked


def test_where_the_driver_is_right_two_probes_find_the_boundary():
    fits, asked = _oracle(H100_BLOCK)
    size, probes = sl.largest_fitting(fits, H100_BLOCK)
    assert size == H100_BLOCK and asked == [H100_BLOCK, H100_BLOCK + 1]
    assert probes == [sl.Probe(H100_BLOCK, True, "ran"), sl.Probe(H100_BLOCK + 1, False, "refused")]
    assert sl.refusal_text(size, probes) == "232449 bytes: refused"


@pytest.mark.parametrize("boundary", [0, 1, 48 * KIB, 230400, H100_BLOCK + 1, 300 * KIB])
def test_where_the_driver_is_wrong_the_bisection_finds_the_boundary(boundary):
    fits, asked = _oracle(boundary)
    size, probes = sl.largest_fitting(fits, H100_BLOCK)
    assert size == boundary
    assert len(asked) <= 2 + sl.SEARCH_LIMIT.bit_length()
    assert any(p.size == boundary + 1 and not p.fits for p in probes)  # one byte more was seen refused
    assert boundary == 0 or any(p.size == boundary and p.fits for p in probes)


@given(boundary=st.integers(0, 4096), guess=st.integers(-5, 5000), limit=st.integers(1, 4096))
def test_the_search_returns_the_largest_fitting_size_within_the_limit(boundary, guess, limit):
    fits, asked = _oracle(boundary)
    size, probes = sl.largest_fitting(fits, guess, limit)
    assert size == min(boundary, limit)
    assert all(0 < s <= limit + 1 for s in asked) and [p.size for p in probes] == asked


def test_a_search_that_never_sees_a_refusal_says_so():
    fits, _ = _oracle(10**9)
    size, probes = sl.largest_fitting(fits, 100, limit=1000)
    assert size == 1000
    assert sl.refusal_text(size, probes) == ("1001 bytes not probed: the search stopped at its limit of 1000 bytes "
                                             "without a refusal")
    with pytest.raises(ValueError, match="at least 1 byte"):
        sl.largest_fitting(fits, 1, limit=0)


def test_two_blocks_hold_their_bytes_and_the_reserved_kilobyte_each():
    assert sl.per_sm_bytes(H100_SM // 2 - RESERVED, RESERVED) == H100_SM == 233472
    assert sl.per_sm_bytes(0, 0) == 0
    with pytest.raises(ValueError):
        sl.per_sm_bytes(-1, RESERVED)


def test_what_the_touching_kernel_read_back_is_checked():
    sl.check_touch(H100_BLOCK, [H100_BLOCK, 0xC3, 0xA5])
    sl.check_touch(0, [0, 0, 0])  # no shared memory: nothing to read back
    with pytest.raises(sl.SmemMisreport, match=r"ran, but the block was given 231424 \(%dynamic_smem_size\)"):
        sl.check_touch(H100_BLOCK, [231424, 0xC3, 0xA5])
    with pytest.raises(sl.SmemMisreport, match="read back 0x00 from its last byte and 0xa5 from its first, not the "
                                               "0xc3 and 0xa5 it wrote"):
        sl.check_touch(H100_BLOCK, [H100_BLOCK, 0, 0xA5])


def test_a_size_is_one_exact_reading_with_its_probes():
    probes = [sl.Probe(5, True, "ran"), sl.Probe(6, False, "refused")]
    m = sl.limit_measurement("smem_max_per_block_bytes", 5, probes, kernel="smem_touch_last", launch={"a": 1})
    assert (m.values, m.unit, m.noise, m.stop_reason) == ([5.0], "bytes", 0.0, "search, 2 probes")
    assert m.launch == {"a": 1, "probes": [[5, True, "ran"], [6, False, "refused"]]}


def test_the_kernels_the_probe_loads_are_in_its_source():
    cubin = sass.Cubin(compile_cuda(KERNELS / sl.SOURCE, "sm_90").cubin, "sm_90")
    assert set(cubin.kernels) == {"smem_touch_last", "smem_pair_resident"}


# ----------------------------------------------------------------------------------------------
# SmemProbe on a simulated SM behind a stand-in driver


class SimSmemDriver:
    """cuda-python's driver module for its types; the calls answered as a driver and SM with the given
    limits would. The driver accepts a function's dynamic shared memory up to ``optin`` (its attribute)
    and launches up to what the function was allowed; the SM gives a block up to ``block_hw`` (past it a
    launch the driver accepted reads back nothing) and holds two blocks of S while 2 x (S rounded up to
    128 bytes + ``reserved``) <= ``sm_hw`` at the carve-out of 100 %."""

    FUNCTIONS = {"smem_touch_last": 1, "smem_pair_resident": 2}

    def __init__(self, optin=H100_BLOCK, per_sm=H100_SM, reserved=RESERVED, block_hw=H100_BLOCK, sm_hw=H100_SM,
                 launch_limit=None, sms=4):
        self.optin, self.per_sm, self.reserved, self.block_hw, self.sm_hw = optin, per_sm, reserved, block_hw, sm_hw
        self.launch_limit, self.sms = launch_limit, sms
        self.allowed, self.carveout, self.launches = {}, {}, []

    def __getattr__(self, name):
        return getattr(driver, name)

    def cuDeviceGetAttribute(self, attr, index):
        a = driver.CUdevice_attribute
        return 0, {a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: self.optin,
                   a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: self.per_sm,
                   a.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: self.reserved}[attr]

    def cuFuncSetAttribute(self, f, attr, value):
        a = driver.CUfunction_attribute
        if attr == a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            if value > self.optin:
                return (1,)
            self.allowed[int(f)] = value
        elif attr == a.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            self.carveout[int(f)] = value
        return (0,)

    def cuLaunchKernelEx(self, config, f, params, extra):
        size, f = config.sharedMemBytes, int(f)
        if size > self.allowed.get(f, 48 * KIB) or (self.launch_limit is not None and size > self.launch_limit):
            return (1,)
        self.launches.append((f, config.gridDimX, size))
        ptrs = (ctypes.c_void_p * 5).from_address(params)

        def words(k, n, ctype=ctypes.c_uint32):
            return np.ctypeslib.as_array((ctype * n).from_address(ctypes.c_uint64.from_address(ptrs[k]).value))
        if f == self.FUNCTIONS["smem_touch_last"]:
            out, pattern = words(0, 3), ctypes.c_uint32.from_address(ptrs[1]).value
            good = size <= self.block_hw
            out[:] = [size, pattern & 0xFF if good else 0, (pattern >> 8) & 0xFF if good else 0]
        else:
            peak, done = words(1, sl.SM_SLOTS), words(2, 2)
            rounded = -(-size // 128) * 128
            two = self.carveout.get(f) == 100 and 2 * (rounded + self.reserved) <= self.sm_hw
            peak[:self.sms] = 2 if two else 1
            done[:] = [config.gridDimX, 0]
        return (0,)

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_INVALID_VALUE"

    def cuGetErrorString(self, err):
        return 0, b"invalid argument"


class _Device:
    def __init__(self, index):
        self.index = index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class SimCupy:
    """What SmemProbe uses of CuPy: device arrays in host memory, an event that is always done."""

    uint32, uint64 = np.uint32, np.uint64

    class _Array:
        def __init__(self, a):
            self.a, self.data = a, SimpleNamespace(ptr=a.ctypes.data)

        def get(self):
            return self.a.copy()

    def __init__(self):
        self.cuda = SimpleNamespace(Device=_Device, get_current_stream=lambda: SimpleNamespace(ptr=0),
                                    Event=lambda: SimpleNamespace(record=lambda: None, done=True))

    def zeros(self, n, dtype):
        return self._Array(np.zeros(n, dtype=dtype))


def _runner(sms=4):
    return SimpleNamespace(cp=SimCupy(), info=SimpleNamespace(index=0, sm_count=sms), stop=StopRule(),
                           compile=lambda source: SimpleNamespace(cubin=b"cubin"),
                           load=lambda cubin, name: SimpleNamespace(ptr=SimSmemDriver.FUNCTIONS[name]))


@pytest.fixture
def sim(monkeypatch):
    def make(**kw):
        fake = SimSmemDriver(**kw)
        monkeypatch.setattr(driver_launch, "cuda_driver", lambda: fake)
        return fake, sl.SmemProbe(_runner(fake.sms))
    return make


def test_on_an_h100_like_sm_the_block_search_takes_two_launches(sim):
    fake, probe = sim()
    size, probes = sl.largest_fitting(probe.block_fits, probe.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"))
    assert size == H100_BLOCK
    assert [(p.size, p.fits) for p in probes] == [(H100_BLOCK, True), (H100_BLOCK + 1, False)]
    assert probes[0].why == "ran: the block was given 232448 bytes and read back its first and last byte"
    assert probes[1].why == ("refused by cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449): "
                             "CUDA_ERROR_INVALID_VALUE (invalid argument)")
    assert fake.launches == [(1, 1, H100_BLOCK)]  # the refused size never reached a launch


def test_a_launch_the_driver_refuses_below_its_own_attribute_is_found(sim):
    _, probe = sim(launch_limit=200 * KIB)
    size, probes = sl.largest_fitting(probe.block_fits, H100_BLOCK)
    assert size == 200 * KIB
    assert sl.refusal_text(size, probes) == ("204801 bytes: refused by cuLaunchKernelEx: CUDA_ERROR_INVALID_VALUE "
                                             "(invalid argument)")


def test_shared_memory_the_driver_accepts_but_the_sm_cannot_hold_is_a_misreport(sim):
    _, probe = sim(block_hw=200 * KIB)
    with pytest.raises(sl.SmemMisreport, match="a block of 232448 bytes of dynamic shared memory read back 0x00"):
        probe.block_fits(H100_BLOCK)


def test_on_an_h100_like_sm_two_blocks_share_it_up_to_half_less_the_reserved(sim):
    fake, probe = sim()
    guess = probe.attribute("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR") // 2 - probe.attribute(
        "RESERVED_SHARED_MEMORY_PER_BLOCK")
    size, probes = sl.largest_fitting(probe.pair_resident, guess, limit=H100_BLOCK)
    assert size == 115712 and sl.per_sm_bytes(size, RESERVED) == H100_SM
    assert [(p.size, p.fits, p.why) for p in probes] == [
        (115712, True, "4 of 4 SMs held two blocks of 115712 bytes at once"),
        (115713, False, "0 of 4 SMs held two blocks of 115713 bytes at once")]
    assert fake.launches == [(2, 8, 115712), (2, 8, 115713)]  # two blocks per SM
    assert fake.carveout == {2: 100}


def test_an_sm_that_holds_less_than_the_driver_says_reads_less(sim):
    _, probe = sim(sm_hw=200 * KIB)
    size, _ = sl.largest_fitting(probe.pair_resident, H100_SM // 2 - RESERVED, limit=H100_BLOCK)
    assert sl.per_sm_bytes(size, RESERVED) == 200 * KIB


# ----------------------------------------------------------------------------------------------
# hwtests/test_geometry.py end to end on the simulated SM


def _run(pytester, monkeypatch, *args, **sim_kw):
    fake = SimSmemDriver(**sim_kw)
    monkeypatch.setattr(driver_launch, "cuda_driver", lambda: fake)
    monkeypatch.setattr(session.GpuPropsState, "runner", lambda self, index=None: _runner(fake.sms))
    monkeypatch.setenv("GPUPROPS_LOCK_DIR", str(pytester.path))
    pytester.makeconftest(fake_gpu_conftest("sm_90").replace('"Fake GPU"', '"NVIDIA H100 80GB HBM3"'))
    pytester.makepyfile(test_limits=(KERNELS.parent / "hwtests" / "test_geometry.py").read_text())
    return pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-rs", *args)


def _without(pytester, *names) -> str:
    """A copy of the packaged sm_90 facts without the named tables (a GPU whose facts lack them)."""
    import re
    text = (KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text()
    for name in names:
        text = re.sub(r"\[" + name + r"\]\n(?:[^\[\n].*\n)*\n?", "", text)
    (pytester.path / "without.toml").write_text(text)
    return str(pytester.path / "without.toml")


def test_the_packaged_limits_hold_on_a_simulated_h100(pytester, monkeypatch):
    r = _run(pytester, monkeypatch)
    r.assert_outcomes(passed=2)


def test_without_facts_the_limits_skip_saying_how_to_record_them(pytester, monkeypatch):
    facts = _without(pytester, "smem_max_per_block_bytes", "smem_max_per_sm_bytes")
    r = _run(pytester, monkeypatch, "--gpuprops-facts", facts)
    r.assert_outcomes(skipped=2)
    r.stdout.fnmatch_lines(["*no fact 'smem_max_per_block_bytes' for sm_90 in *record it with --gpuprops-record PATH*"])


def test_the_limits_record_as_the_arch_s_then_hold_and_a_planted_value_fails(pytester, monkeypatch):
    r = _run(pytester, monkeypatch, "--gpuprops-record", "rec.toml", "--gpuprops-report", "rec.json")
    r.assert_outcomes(passed=2)
    recorded = tomllib.loads((pytester.path / "rec.toml").read_text())
    assert "gpus" not in recorded  # the arch's facts, not the GPU's
    block, sm = recorded["smem_max_per_block_bytes"], recorded["smem_max_per_sm_bytes"]
    assert (block["value"], block["unit"], block["method"]) == (H100_BLOCK, "bytes", sl.BLOCK_METHOD)
    assert (sm["value"], sm["method"]) == (H100_SM, sl.SM_METHOD)
    report = (pytester.path / "rec.json").read_text()
    assert '"one_byte_more": "232449 bytes: refused by cuFuncSetAttribute' in report
    assert '"pair_size": 115712' in report
    # as the facts are meant to be kept: exact (tolerance_abs = 0); they hold
    exact = re.sub(r"tolerance_rel = [0-9.]+", "tolerance_abs = 0", (pytester.path / "rec.toml").read_text())
    (pytester.path / "exact.toml").write_text(exact)
    _run(pytester, monkeypatch, "--gpuprops-facts", "exact.toml").assert_outcomes(passed=2)
    # the per-SM figure planted as the per-block one (228 KiB for 227 KiB): it fails, measured three times
    planted = exact.replace(f"[smem_max_per_block_bytes]\nvalue = {H100_BLOCK}", f"[smem_max_per_block_bytes]\nvalue = {H100_SM}")
    assert planted != exact
    (pytester.path / "planted.toml").write_text(planted)
    r = _run(pytester, monkeypatch, "--gpuprops-facts", "planted.toml")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["*fact smem_max_per_block_bytes on sm_90 does not hold*", "*expected: 233472 ± 0 bytes*",
                            "*measured: 232448.000 bytes*", "*confirmed: failed 3 of 3*"])
