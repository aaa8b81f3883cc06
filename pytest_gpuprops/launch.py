"""Launch one kernel from a cubin once (or several, given a JSON list): the process Nsight
Compute profiles.

    python -m pytest_gpuprops.launch '{"cubin": "x.cubin", "kernel": "k", "grid": 1, "block": 128,
                                       "buffers": 2, "ints": [], "device": 0}'
"""

import json
import sys


def main(argv: list[str] | None = None) -> int:
    """Launch the kernel the JSON object describes, or each of a JSON list of them, in order."""
    import cupy as cp

    given = json.loads((argv or sys.argv[1:])[0])
    for spec in given if isinstance(given, list) else [given]:
        cp.cuda.Device(spec.get("device", 0)).use()
        fn = cp.RawModule(path=spec["cubin"]).get_function(spec["kernel"])
        n_warps = spec["grid"] * spec["block"] // 32
        args = [cp.zeros(2 * n_warps, dtype=cp.uint64)]
        args += [cp.zeros(1 << 20, dtype=cp.float32) for _ in range(spec.get("buffers", 0))]
        args += [cp.int32(v) for v in spec.get("ints", [])]
        fn((spec["grid"],), (spec["block"],), tuple(args))
        cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
