"""Launching a kernel: what a failed launch raises, the wait for a launch to end, and the launches
CuPy's RawKernel call cannot make, through the CUDA driver API's cuLaunchKernelEx (cuda-python):
thread-block clusters, more than 48 KiB of dynamic shared memory, parameters passed by value as
bytes (a CUtensorMap). What the driver is handed (parameters, launch configuration) is built here;
tests/test_driver_launch.py checks it against cuda-python's own structures and a stand-in driver.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .kernel_spec import KernelSpec


class KernelLaunchError(Exception):
    """A kernel failed to load, launch or finish; the message names kernel and launch shape."""


#: how long a launch's completion is polled without sleeping: the suite's kernels take microseconds,
#: and a 0.2-ms sleep per poll was most of a launch's wall time (docs/performance.md)
SPIN_S = 0.005


def wait_for(event, timeout_s: float, what: str) -> None:  # pragma: no mutate block  (GPU only)
    """Wait until ``event`` has completed: poll it without sleeping for :data:`SPIN_S`, then every
    0.2 ms; a kernel still running after ``timeout_s`` is a hung launch, reported as one."""
    start = time.monotonic()
    while not event.done:
        waited = time.monotonic() - start
        if waited > timeout_s:
            raise KernelLaunchError(f"{what} did not finish within {timeout_s:.0f} s")
        if waited > SPIN_S:
            time.sleep(0.0002)


#: the largest cluster every sm_90 GPU must run; larger sizes need the non-portable attribute
PORTABLE_CLUSTER_SIZE = 8
#: the largest cluster size sm_90 allows at all (non-portable)
MAX_CLUSTER_SIZE = 16
#: dynamic shared memory a function may use without asking (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
DEFAULT_DYNAMIC_SHARED = 48 * 1024


def cuda_driver():
    """cuda-python's driver module (``cuda.bindings.driver``; ``cuda.cuda`` in cuda-python before 12.6)."""
    try:
        from cuda.bindings import driver
    except ImportError:  # pragma: no cover  (an old cuda-python)
        from cuda import cuda as driver
    return driver


def check_cluster(spec: KernelSpec) -> None:
    """Refuse a cluster spec no GPU can launch: the size out of 1..16, or a grid that is not whole
    clusters."""
    k = spec.cluster
    if k is None:
        raise ValueError(f"{spec.label()} is not a cluster launch (cluster=None)")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_CLUSTER_SIZE:
        raise ValueError(f"{spec.label()}: cluster size must be an integer 1..{MAX_CLUSTER_SIZE}, not {k!r}")
    if spec.grid % k:
        raise ValueError(f"{spec.label()}: grid {spec.grid} is not a whole number of clusters of {k}")


def needs_launch_ex(spec: KernelSpec, args: Sequence) -> bool:
    """Whether a launch goes through cuLaunchKernelEx: a cluster spec, dynamic shared memory, or an
    argument passed by value as raw bytes (a CUtensorMap), which CuPy's kernel call does not take, or a
    shared-memory carve-out to set on the function first."""
    return (spec.cluster is not None or spec.shared_mem > 0 or spec.carveout is not None
            or any(isinstance(a, (bytes, bytearray)) for a in args))


def _param_bytes(a) -> bytes:
    """One kernel parameter as the bytes the kernel receives: a device array as its 8-byte address,
    a NumPy scalar (cupy.int32(5) is one) as its bytes, raw bytes as they are."""
    import struct
    if isinstance(a, (bytes, bytearray)):
        if not a:
            raise TypeError("an empty bytes kernel parameter")
        return bytes(a)
    ptr = getattr(getattr(a, "data", None), "ptr", None)
    if ptr is not None:  # a CuPy array (a NumPy array's .data is a memoryview, without .ptr)
        return struct.pack("<Q", int(ptr))
    tobytes = getattr(a, "tobytes", None)
    if tobytes is not None and getattr(a, "shape", None) == ():  # a NumPy scalar
        return tobytes()
    raise TypeError(f"kernel parameter {a!r} ({type(a).__name__}): give a CuPy array, a NumPy scalar "
                    "(cupy.uint32(5), which says its size) or bytes")


def kernel_params(args: Sequence, align: int = 64) -> tuple[object, list]:
    """cuLaunchKernel's ``kernelParams`` for ``args``: a ctypes array of pointers, one per parameter,
    each to a copy of the parameter's bytes (:func:`_param_bytes`) at an ``align``-byte aligned
    address (a CUtensorMap is 64-byte aligned; the driver copies each by the kernel's own layout).
    Returns (the pointer array, the buffers it points into: keep both alive until the launch)."""
    import ctypes
    keep, ptrs = [], []
    for a in args:
        data = _param_bytes(a)
        buf = ctypes.create_string_buffer(len(data) + align)
        addr = (ctypes.addressof(buf) + align - 1) // align * align
        ctypes.memmove(addr, data, len(data))
        keep.append(buf)
        ptrs.append(addr)
    return (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs), keep


def launch_config(driver, spec: KernelSpec, stream: int = 0):
    """The CUlaunchConfig of ``spec``: its grid and block along x and its dynamic shared memory on
    ``stream``, and for a cluster spec one CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION attribute of
    (cluster, 1, 1)."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = spec.grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = spec.block, 1, 1
    config.sharedMemBytes = spec.shared_mem
    config.hStream = driver.CUstream(int(stream))
    attrs = []
    if spec.cluster is not None:
        check_cluster(spec)
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = spec.cluster, 1, 1
        attrs.append(attr)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config


def driver_error(driver, err) -> str:
    """A driver API status as its name and description: 'CUDA_ERROR_INVALID_CLUSTER_SIZE (...)'."""
    try:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name} ({text})"
    except Exception:
        return str(err)


def function_handle(fn) -> int:
    """The CUfunction of a CuPy kernel: a cupy.cuda.Function has ``ptr``; CuPy 13+'s RawModule hands
    out a RawKernel, whose Function is ``kernel``."""
    ptr = getattr(fn, "ptr", None)
    return int(ptr if ptr is not None else fn.kernel.ptr)


def allow_launch(driver, f, spec: KernelSpec) -> None:  # pragma: no mutate block  (driver calls)
    """Set what ``spec``'s launch needs on the function ``f`` (a CUfunction): a non-portable cluster
    size, more than 48 KiB of dynamic shared memory, the preferred shared-memory carve-out."""
    attrs = driver.CUfunction_attribute
    if spec.cluster is not None and spec.cluster > PORTABLE_CLUSTER_SIZE:
        (err,) = driver.cuFuncSetAttribute(f, attrs.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        if int(err) != 0:
            raise KernelLaunchError(f"the driver refused a non-portable cluster size for this kernel: "
                                    f"{driver_error(driver, err)}")
    if spec.shared_mem > DEFAULT_DYNAMIC_SHARED:
        (err,) = driver.cuFuncSetAttribute(f, attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           spec.shared_mem)
        if int(err) != 0:
            raise KernelLaunchError(f"the driver refused {spec.shared_mem} bytes of dynamic shared memory "
                                    f"for this kernel: {driver_error(driver, err)}")
    if spec.carveout is not None:
        (err,) = driver.cuFuncSetAttribute(f, attrs.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                           spec.carveout)
        if int(err) != 0:
            raise KernelLaunchError(f"the driver refused a shared-memory carve-out of {spec.carveout} % for this "
                                    f"kernel: {driver_error(driver, err)}")


def launch_ex(fn, spec: KernelSpec, args: tuple, stream: int = 0) -> None:  # pragma: no mutate block  (driver calls)
    """Launch ``fn`` (a CuPy kernel) on ``stream`` through cuLaunchKernelEx: kernel parameters as a
    pointer array (any by-value bytes, e.g. a CUtensorMap, included) and, for a cluster spec, the
    cluster dimension."""
    import ctypes
    driver = cuda_driver()
    f = driver.CUfunction(function_handle(fn))
    allow_launch(driver, f, spec)
    params, _keep = kernel_params(args)
    config = launch_config(driver, spec, stream)
    (err,) = driver.cuLaunchKernelEx(config, f, ctypes.addressof(params), 0)
    if int(err) != 0:
        raise KernelLaunchError(f"{spec.label()}: cuLaunchKernelEx failed: {driver_error(driver, err)}")


def cluster_refusal(fn, spec: KernelSpec) -> str | None:  # pragma: no mutate block  (driver calls)
    """None when ``spec``'s clusters of ``fn`` (a loaded CuPy kernel) can run on this GPU; otherwise
    why not (a skip reason): the driver refuses the non-portable size, or no such cluster fits
    (cuOccupancyMaxActiveClusters)."""
    check_cluster(spec)
    driver = cuda_driver()
    f = driver.CUfunction(function_handle(fn))
    k = spec.cluster
    try:
        allow_launch(driver, f, spec)
    except KernelLaunchError as exc:
        why = f" is non-portable (over {PORTABLE_CLUSTER_SIZE}) and" if k > PORTABLE_CLUSTER_SIZE else ":"
        return f"cluster size {k}{why} {exc}"
    what = f"{k} CTAs x {spec.block} threads" + (f" x {spec.shared_mem} bytes of shared memory"
                                                  if spec.shared_mem else "")
    err, n = driver.cuOccupancyMaxActiveClusters(f, launch_config(driver, spec, 0))
    if int(err) != 0:
        return (f"the driver cannot place clusters of {what} for {spec.kernel}: "
                f"cuOccupancyMaxActiveClusters failed: {driver_error(driver, err)}")
    if int(n) < 1:
        return f"no cluster of {what} of {spec.kernel} fits on this GPU (cuOccupancyMaxActiveClusters = 0)"
    return None
