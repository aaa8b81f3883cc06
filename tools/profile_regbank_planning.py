#!/usr/bin/env python3
"""Time the SASS patch planning of every register-bank variant the GPU suite measures -- a script,
not a test; no GPU needed (NVRTC compiles for sm_90 and nvdisasm reads it here).

    python tools/profile_regbank_planning.py              # warm caches: planning + verification
    python tools/profile_regbank_planning.py --profile    # the same under cProfile (top 25)
    python tools/profile_regbank_planning.py --repeat 2   # each test's patch_many twice (a remeasure)

The variants are those of hwtests/test_regbank.py: the seed cases (two tests), 200 drawn operand
triples and the 12 x 12 heat map, each patched with ``sass.patch_many`` exactly as ``Bench.measure``
does (``ffma_operand_edits`` + ``timing_edits``, the accumulators as scratch). Printed: seconds for
the edit lists, for ``patch_many`` (plan, nvdisasm listings from the cache, verification), and the
number of variants. The first pass fills the listing cache (nvdisasm runs); the passes after it are
what a warm GPU run pays.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hwtests"))

from pytest_gpuprops import compile as gp_compile  # noqa: E402
from pytest_gpuprops import sass  # noqa: E402
from pytest_gpuprops.assertions import reuse_mask  # noqa: E402


def kernel(arch: str):
    import specs
    c = gp_compile.compile_cuda(ROOT / "kernels" / "regbank_ffma.cu", arch, {"NFFMA": specs.REGBANK_NFFMA})
    cubin = sass.Cubin(c.cubin, arch)
    instrs = cubin.instructions("regbank_ffma")
    scratch = sass.ffma_destinations(instrs)
    usable = sass.usable_registers(instrs, cubin.kernel("regbank_ffma"))
    return cubin, instrs, scratch, [r for r in range(usable) if r not in scratch]


def case_lists(sources: list[int]) -> list[list[tuple[int, int, int, int]]]:
    """One list per patch_many call of test_regbank.py: seed cases (two tests), 200 drawn, heat map."""
    import test_regbank as t

    def place(ra, rb, rc):
        for k in range(0, 64, 4):
            if all(r + k in sources for r in (ra, rb, rc)):
                return ra + k, rb + k, rc + k
        raise SystemExit(f"cannot place R{ra}, R{rb}, R{rc}")

    seeds = [(*place(a, b, c), reuse_mask(r)) for a, b, c, r in t.SEED_CASES]
    rng = random.Random(0)
    drawn: dict[tuple, None] = {}
    while len(drawn) < 200:
        drawn[(rng.choice(sources), rng.choice(sources), rng.choice(sources), rng.randrange(8))] = None
    regs, rc = sources[8:20], sources[21]
    heat = [(a, b, rc, 0) for a in regs for b in regs]
    return [seeds, seeds, list(drawn), heat]


def one_pass(cubin, instrs, scratch, lists, repeat: int) -> tuple[float, float, int]:
    t_edits = t_patch = 0.0
    n = 0
    for cases in lists:
        for _ in range(repeat):
            t0 = time.perf_counter()
            variants = [sass.ffma_operand_edits(instrs, ra, rb, rc, reuse) + sass.timing_edits(instrs)
                        for ra, rb, rc, reuse in cases]
            t1 = time.perf_counter()
            out = sass.patch_many(cubin, "regbank_ffma", variants, scratch=scratch)
            t2 = time.perf_counter()
            assert len(out) == len(cases)
            t_edits += t1 - t0
            t_patch += t2 - t1
            n += len(cases)
    return t_edits, t_patch, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1, help="patch_many calls per test (2: a remeasure)")
    ap.add_argument("--profile", action="store_true", help="cProfile the last pass")
    ap.add_argument("--profile-first", action="store_true", help="cProfile the first pass (listings from disk)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cubin, instrs, scratch, sources = kernel(args.arch)
    lists = case_lists(sources)
    print(f"kernel compiled and read in {time.perf_counter() - t0:.2f} s; "
          f"{len(instrs)} instructions, scratch {sorted(scratch)}, {len(sources)} readable sources")
    for p in range(args.passes):
        profiled = (args.profile and p == args.passes - 1) or (args.profile_first and p == 0)
        if profiled:
            prof = cProfile.Profile()
            prof.enable()
        te, tp, n = one_pass(cubin, instrs, scratch, lists, args.repeat)
        if profiled:
            prof.disable()
        print(f"pass {p + 1}: {n} variants: edits {te:.3f} s, patch_many {tp:.3f} s "
              f"({1000 * tp / n:.2f} ms a variant); nvdisasm runs so far {sass.stats['nvdisasm_runs']}")
    if args.profile or args.profile_first:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
        print(s.getvalue())
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
