"""Launch kernels from cubins, once each, in order: the process Nsight Compute profiles.

    python -m pytest_gpuprops.launch '[{"cubin": "x.cubin", "kernel": "k", "grid": 1, "block": 128,
                                        "args": [{"array": "<u4", "values": [...]}, {"scalar": "int32", "value": 3}],
                                        "device": 0}, ...]'

The arguments are made and copied to the GPU before the first launch, so only the kernels run
while ncu profiles (no CuPy fill kernels between them).
"""

import json
import sys


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


def main(argv: list[str] | None = None) -> int:
    import cupy as cp

    launches = json.loads((argv or sys.argv[1:])[0])
    if isinstance(launches, dict):
        launches = [launches]
    cp.cuda.Device(launches[0].get("device", 0)).use()
    ready = [(cp.RawModule(path=L["cubin"]).get_function(L["kernel"]), L, build_args(cp, L)) for L in launches]
    cp.cuda.Device().synchronize()
    for fn, L, args in ready:
        fn((L["grid"],), (L["block"],), args)
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
