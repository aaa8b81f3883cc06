"""Nsight Compute: find ncu, profile one launch of each of a test's kernels (built and patched as
for timing) in one ncu process, started ahead in the background where a test will ask for it, and
read its CSV back into one {metric: value} per launch. The profiled process is launch.py; it takes
the GPU's lock itself around its launches.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from .gpulock import gpu_lock_path
from .kernel_spec import KernelSpec
from .measure import Runner


class NcuUnavailable(Exception):
    """ncu is missing or cannot read this GPU's counters; the message is the skip reason."""


def find_ncu() -> str | None:
    import glob
    import shutil
    env = os.environ.get("GPUPROPS_NCU")
    if env:
        return env
    return shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)), None) \
        or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ncu"), reverse=True)), None)


def ncu_unavailable_reason() -> str | None:
    return None if find_ncu() else "Nsight Compute (ncu) is not on PATH (set GPUPROPS_NCU to its path)"


def ncu_metrics(runner: Runner, specs: Sequence[KernelSpec], metrics: list[str], *, timeout_s: float = 300.0
                ) -> list[dict[str, float]]:  # pragma: no mutate block  (GPU only)
    """Profile one launch of each spec (built and patched as for timing) under ``ncu --clock-control
    none``, all in ONE ncu process, and return each launch's metrics in order. The kernels get the
    cycles buffer and the arguments their spec builds."""
    return _ncu_finish(_ncu_start(runner, specs, metrics), metrics, len(specs), timeout_s)


def ncu_key(specs: Sequence[KernelSpec], metrics: Sequence[str]) -> tuple:
    """What an ncu profile is of: the specs' kernels and builds, and the metrics."""
    return (tuple(f"{s.label()} {sorted(s.defines.items())}" for s in specs), tuple(metrics))


class NcuJob:  # pragma: no mutate block  (GPU only)
    """:func:`ncu_metrics` started ahead of its test, in the background: ncu's start-up (about 3 s,
    most of it ncu's own, on the CPU) overlaps the session's work instead of adding to the run. The
    profiled process takes the GPU's lock itself, before it first touches CUDA, and holds it until its
    kernels and buffers are gone (pytest_gpuprops.launch), so no measurement runs beside its launches;
    :meth:`result` waits for the profile."""

    def __init__(self, runner: Runner, specs: Sequence[KernelSpec], metrics: list[str], *, timeout_s: float = 300.0):
        import threading
        self.key = ncu_key(specs, metrics)
        self._out: list[dict[str, float]] | None = None
        self._error: BaseException | None = None
        cmd = _ncu_start(runner, specs, metrics)  # builds in this thread (compile, patch: not thread-bound)

        def run():
            try:
                self._out = _ncu_finish(cmd, metrics, len(specs), timeout_s)
            except BaseException as exc:  # handed to result(), in the test that asks
                self._error = exc

        self._thread = threading.Thread(target=run, name="gpuprops-ncu", daemon=True)
        self._thread.start()

    def result(self) -> list[dict[str, float]]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out  # type: ignore[return-value]


def _ncu_start(runner: Runner, specs: Sequence[KernelSpec], metrics: list[str]) -> list[str]:
    """The ncu command line for one launch of each spec (its cubins written to the runner's folder)."""
    import json
    import sys
    launches = []
    for spec in specs:
        cubin, _ = runner.build(spec)
        path = os.path.join(runner._tmp, "ncu-" + hashlib.sha256(cubin).hexdigest()[:16] + ".cubin")
        Path(path).write_bytes(cubin)
        launches.append({"cubin": path, "kernel": spec.kernel, "grid": spec.grid, "block": spec.block,
                         "args": encode_args(spec), "device": runner.info.index})
    names = sorted({spec.kernel for spec in specs})
    job = {"lock": str(gpu_lock_path(runner.info.index)), "launches": launches}
    return [find_ncu(), "--clock-control", "none", "--csv", "--print-units", "base", "--metrics", ",".join(metrics),
            "-k", "regex:^(" + "|".join(names) + ")$", sys.executable, "-m", "pytest_gpuprops.launch",
            json.dumps(job)]


def _ncu_finish(cmd: list[str], metrics: list[str], launches: int, timeout_s: float
                ) -> list[dict[str, float]]:  # pragma: no mutate block  (GPU only)
    """Run the ncu command and read its metrics. The profiled process takes the GPU's lock itself:
    the caller must not hold it (the two would wait for each other until the lock's timeout)."""
    import subprocess
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    text = proc.stdout
    if proc.returncode != 0 or '"Metric Name"' not in text:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise NcuUnavailable("ncu could not profile the kernels: " + " | ".join(tail))
    return parse_ncu_csv(text[text.index('"ID"'):] if '"ID"' in text else text, metrics, launches)


def parse_ncu_csv(body: str, metrics: list[str], launches: int) -> list[dict[str, float]]:
    """ncu --csv rows (one per launch and metric) -> one {metric: value} per launch, in launch order."""
    import csv
    import io
    by_id: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(body)):
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if name not in metrics:
            continue
        try:
            by_id.setdefault(int(row["ID"]), {})[name] = float(value.replace(",", ""))
        except ValueError:
            raise NcuUnavailable(f"ncu printed {value!r} for {name}; expected a number") from None
    out = [by_id[k] for k in sorted(by_id)]
    if len(out) != launches:
        raise NcuUnavailable(f"ncu profiled {len(out)} launches, expected {launches}")
    for i, got in enumerate(out):
        missing = [m for m in metrics if m not in got]
        if missing:
            raise NcuUnavailable(f"ncu did not report {', '.join(missing)} for launch {i} on this GPU")
    return out


def encode_args(spec: KernelSpec) -> list[dict]:
    """The spec's arguments (after the cycles buffer) in a form another process can rebuild:
    each CuPy array as dtype, shape and its values, each scalar as dtype and value."""
    if spec.args is None:
        return []
    import cupy
    out = []
    for a in spec.args(cupy):
        if isinstance(a, cupy.ndarray):
            values = a.get().ravel().tolist()
            if values and all(v == values[0] for v in values):  # zeros / full(): no need to send each value
                out.append({"array": a.dtype.str, "fill": values[0], "size": len(values)})
            else:
                out.append({"array": a.dtype.str, "values": values})
        else:
            out.append({"scalar": type(a).__name__, "value": a.item() if hasattr(a, "item") else a})
    return out
