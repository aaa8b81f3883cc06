"""Launch kernels from cubins, once each, in order: the process Nsight Compute profiles.

    python -m pytest_gpuprops.launch '{"lock": "/tmp/gpuprops-gpu0.lock", "launches": [
        {"cubin": "x.cubin", "kernel": "k", "grid": 1, "block": 128,
         "args": [{"array": "<u4", "values": [...]}, {"scalar": "int32", "value": 3}], "device": 0}, ...]}'

The process takes the GPU's lock (the file gpulock.gpu_lock takes, named by "lock") before CUDA
is first touched and gives it back once its kernels, modules and buffers are gone: ncu's own
start-up (seconds, all of it on the CPU) runs beside the session's measurements, its profiled
launches never do. A bare list of launches (no "lock") runs without it.

The arguments are made and copied to the GPU before the first launch, so only the kernels run
while ncu profiles (no CuPy fill kernels between them).
"""

import contextlib
import json
import sys

from .gpulock import LOCK_TIMEOUT_S


def build_args(cp, launch: dict) -> tuple:
    n_warps = launch["grid"] * launch["block"] // 32
    args = [cp.zeros(2 * n_warps, dtype=cp.uint64)]
    for a in launch.get("args", []):
        if "fill" in a:
            args.append(cp.full(a["size"], a["fill"], dtype=cp.dtype(a["array"])))
        elif "array" in a:
            args.append(cp.asarray(a["values"], dtype=cp.dtype(a["array"])))
        else:
            args.append(getattr(cp, a["scalar"])(a["value"]))
    return tuple(args)


def gpu_lock(path: str | None):
    """The GPU's file lock at ``path`` (gpulock.gpu_lock's file), or no lock where ``path`` is None."""
    if path is None:
        return contextlib.nullcontext()
    from filelock import FileLock
    return FileLock(path, timeout=LOCK_TIMEOUT_S)


def launch_all(launches: list[dict]) -> None:
    """Every launch once, in order; then the modules and buffers are released and the device idle."""
    import cupy as cp

    cp.cuda.Device(launches[0].get("device", 0)).use()
    ready = [(cp.RawModule(path=L["cubin"]).get_function(L["kernel"]), L, build_args(cp, L)) for L in launches]
    cp.cuda.Device().synchronize()
    for fn, L, args in ready:
        fn((L["grid"],), (L["block"],), args)
    cp.cuda.Device().synchronize()
    del ready, fn, args
    cp.get_default_memory_pool().free_all_blocks()
    cp.cuda.Device().synchronize()


def parse(text: str) -> tuple[str | None, list[dict]]:
    """(lock path or None, launches) from the command line's JSON."""
    job = json.loads(text)
    if isinstance(job, dict) and "launches" in job:
        return job.get("lock"), list(job["launches"])
    return None, [job] if isinstance(job, dict) else list(job)


def main(argv: list[str] | None = None) -> int:
    lock, launches = parse((argv or sys.argv[1:])[0])
    try:
        with gpu_lock(lock):
            if launches:
                launch_all(launches)
    except TimeoutError:  # filelock.Timeout
        print(f"gpuprops: the GPU's lock {lock} was not free within {LOCK_TIMEOUT_S:.0f} s: another process is "
              "measuring on this GPU; run again when it is done", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
