"""Paths and arch lists shared by the plugin's own tests."""

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

KERNELS = Path(__file__).parent.parent / "kernels"
PATCH_ARCHES = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
#: What the pytest processes a test starts (pytester subprocesses, their xdist workers, ``python -m
#: pytest``) leave out: Hypothesis's pytest plugin, which none of them uses, imports all of Hypothesis at
#: each session's end (~0.7 s of CPU a process, ~2 s a ``-n 2`` run on this machine's 2 cores).
CHILD_PYTEST_ADDOPTS = "-p no:hypothesispytest"


def load_tool(name: str):
    """``tools/<name>.py`` as a module (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, KERNELS.parent / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses and pickling look a module up by its name
    spec.loader.exec_module(mod)
    return mod


def one_fact_test(fact: str, value: float, test: str = "test_fact") -> str:
    """A test file for pytester that checks ``fact`` against a given reading of ``value`` (three launches
    alike, the same when measured again, so a failure is confirmed): a unit's run, fed given numbers."""
    return f'''
import pytest
from pytest_gpuprops.measure import Measurement

@pytest.mark.gpu
def {test}(gpuprops):
    m = Measurement.given("{fact}", [{value}] * 3)
    m.remeasure = lambda: Measurement.given("{fact}", [{value}] * 3)
    gpuprops.check("{fact}", m, method="given")
'''


def fake_gpu_conftest(arch: str = "sm_90", count: int = 1) -> str:
    """A conftest.py for pytester that makes ``count`` fake GPUs of ``arch`` visible (index, UUID and
    PCI bus id per GPU, host "node1"): the plugin's GPU paths run without a GPU, fed given numbers."""
    return f'''
import pytest
from pytest_gpuprops import devices, measure

_mp = pytest.MonkeyPatch()

def pytest_configure(config):
    _mp.setattr(devices, "gpu_unavailable_reason", lambda index=0: None)
    _mp.setattr(devices, "visible_gpu_count", lambda: {count})
    _mp.setattr(devices, "gpu_info", lambda index=0: devices.GpuInfo(
        index, "Fake GPU", "{arch}", 132, "580.0", "13.0", "13.0", f"0000:0{{index}}:00.0", 1980,
        f"GPU-0000000{{index}}-0000-0000-0000-000000000000", "node1"))

def pytest_unconfigure(config):
    _mp.undo()
'''


FAKE_GPU = fake_gpu_conftest()


def child_processes_outside_mutmut(monkeypatch) -> None:
    """For a test that starts Python processes importing the package: under mutmut's bookkeeping
    passes ("stats", "fail") the trampolines in a child would report to a mutmut run that is not
    there and fail. The child gets no such mode; a real mutant's name is kept, so the child runs
    the mutant too: the child imports the package from where this process did (mutmut's mutants/
    tree, not the installed checkout)."""
    import pytest_gpuprops
    if os.environ.get("MUTANT_UNDER_TEST") in ("stats", "fail"):
        monkeypatch.delenv("MUTANT_UNDER_TEST")
    root = str(Path(pytest_gpuprops.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))


def collect_hwtests(pytester, monkeypatch, *args: str):
    """``pytest hwtests --collect-only -q -p no:cacheprovider -p no:randomly *args`` from the checkout's
    root, run in this process (pytester: sys.modules and sys.path are restored after it): (exit status,
    node id lines, the output's tail for a failure message). The same conftests, plugins and order as
    the command in a process of its own, whose start-up and re-import of the hwtests files (1.6 s on 2
    cores) this process has already paid: its own collection imported them (~0.2 s). The run's
    $PYTEST_ADDOPTS is what a child pytest gets (CHILD_PYTEST_ADDOPTS), without the pytester fixture's
    --confcutdir at its folder, which would leave the checkout's conftests out."""
    monkeypatch.setenv("PYTEST_ADDOPTS", CHILD_PYTEST_ADDOPTS)
    r = pytester.runpytest_inprocess(str(KERNELS.parent / "hwtests"), "--collect-only", "-q", "-p", "no:cacheprovider",
                                     "-p", "no:randomly", *args)
    ids = [line for line in r.stdout.lines if "::" in line]
    return r.ret, ids, r.stdout.str()[-2000:] + r.stderr.str()[-2000:]


class Terminal:
    """A stand-in terminal reporter for the end-of-run hooks: ``written`` holds each separator as
    (sep, title) and each line, in order; ``lines`` each line with the colours it was written in."""

    def __init__(self):
        self.written, self.lines = [], []

    def write_sep(self, sep, title=None, **markup):
        self.written.append((sep, title))

    def write_line(self, line, **markup):
        self.written.append(line)
        self.lines.append((line, sorted(k for k, on in markup.items() if on)))


def ncu_stand_in(folder: Path) -> str:
    """An executable that answers ``--version`` as Nsight Compute's ncu does (GPUPROPS_NCU is checked
    at start-up), for tests whose ncu profiles are planted."""
    p = Path(folder) / "fake-ncu"
    p.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho 'Version 2026.1.0.0'\n")
    p.chmod(0o755)
    return str(p)


def named_fact(name: str, **kw):
    """A measured fact named ``name`` (a 23-cycle chase latency, ± 0.25) with ``kw`` over its fields: the
    facts files' and record mode's tests build their facts from it."""
    from pytest_gpuprops import facts
    base = dict(name=name, arch="sm_90", unit="cycles", method="chase", source="s", value=23.0, tolerance_abs=0.25)
    base.update(kw)
    return facts.Fact(**base)


class DeviceWords(np.ndarray):
    """A numpy buffer standing in for a CuPy one: ``data.ptr`` its device address (BASE at element 0 of the
    array it is a view of), so slices of it have the addresses a CuPy slice would."""

    BASE = 0x7F00_0000_0000

    @property
    def data(self):
        root = self.base if isinstance(self.base, np.ndarray) else self
        return SimpleNamespace(ptr=self.BASE + self.ctypes.data - root.ctypes.data)

    def get(self):
        """The host copy, as a CuPy array's ``get()`` gives it."""
        return np.asarray(self)


class StandInCupy:
    """The few CuPy calls reserved.py and the specs' arguments make, on one of several GPUs (``device``): numpy
    arrays as :class:`DeviceWords`, ``made`` the (device, elements) of every buffer ``empty`` allocated."""

    def __init__(self, l2_bytes: int = 2 * 2**20):
        self.device, self.made = 0, []
        self.uint64, self.uint32, self.int32, self.float32, self.asarray = np.uint64, np.uint32, np.int32, np.float32, np.asarray
        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(id=self.device),
                                    runtime=SimpleNamespace(getDeviceProperties=lambda i: {"l2CacheSize": l2_bytes},
                                                            getDevice=lambda: self.device,
                                                            deviceSynchronize=lambda: None))

    def empty(self, n, dtype):
        self.made.append((self.device, n))
        return np.zeros(n, dtype=dtype).view(DeviceWords)

    @staticmethod
    def zeros(n, dtype):
        return np.zeros(n, dtype=dtype).view(DeviceWords)
