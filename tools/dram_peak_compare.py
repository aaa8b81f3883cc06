#!/usr/bin/env python3
"""DRAM write, copy and read on one GPU: the suite's kernel and the variants of
kernels/stream_bandwidth.cu beside PyTorch (fill_, copy_, an elementwise copy, a sum) and the
driver's memset / memcpy, in one process, on the same buffers, timed the same way.

    python3 tools/dram_peak_compare.py --json $OUT/dram.json   # on the GPU machine, repository root
    python3 tools/dram_peak_compare.py --variants suite,one_wave --grids 1x,tiles
    python3 tools/dram_peak_compare.py --dry-run [--sass]      # no GPU: compile every variant [its loops]

It needs torch, cuda-bindings and NVRTC, and imports pytest_gpuprops from the checkout (the current
folder, one above it, the script's, or --repo); about 20-30 s on an H100. A number: one launch (or
PyTorch / driver call) passes over the buffer once; 2 untimed, then 9 each between a pair of CUDA
events on one stream; the median of the 9 in GB/s (1e9 B/s), a copy counting bytes read + written.
Write and copy buffers are 1 GiB each; the read buffer is the suite's (workloads.dram_buffer_bytes).

Variants: "suite" is the suite's DRAM build today (workloads.DRAM_DEFINES) at the tiles grid, as the
suite launches it; "one_wave" the persistent grid it replaced (workloads.STREAM_DEFINES) at 1x, 2x,
4x; every other variant is one_wave's build with some defines changed, at every grid (tile_tail_u1
at tiles is the suite's build again: the two rows differ by the noise). Grids: 1x, 2x, 4x = SMs x the
variant's blocks that fit an SM at once (the driver's occupancy) x 1, 2, 4; tiles = one block per
BLOCK x UNROLL vectors (PyTorch's elementwise shape), with the STAMPS=0 build. The stamped grids give
the SM clock (clock64 / %globaltimer), their 1x rows the tail: the share of the launch after half of
the blocks had finished (a one-wave grid whose SMs get unequal DRAM shares waits for its slowest).
Each write and copy is checked after its timed launches: the buffer, poisoned first, must hold
(j, reps - 1, 0, 0) in vector j (the write) or the source (the copy); a row that fails says WRONG,
is never the best, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import re
import statistics
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

GiB = 1 << 30
VEC = 16
KINDS = ("write", "copy", "read")
KERNEL_OF = {"write": "stream_write", "copy": "stream_copy", "read": "stream_read"}
GRIDS = ("1x", "2x", "4x", "tiles")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One build of kernels/stream_bandwidth.cu: its defines (STAMPS aside: the grid sets it), the
    kinds it is measured for (the kernels it changes), and the grids it runs at: "any" every grid
    asked, "tiles" the tiles grid only, "waves" the 1x, 2x, ... grids only."""

    name: str
    defines: dict
    kinds: tuple = KINDS
    grids: str = "any"

    def runs_at(self, grid: str) -> bool:
        return self.grids == "any" or (grid == "tiles") == (self.grids == "tiles")

    def stamps(self) -> tuple:
        """The builds it needs: stamped (the 1x, 2x, ... grids) and unstamped (tiles)."""
        return {"any": (True, False), "tiles": (False,), "waves": (True,)}[self.grids]

    def build(self, stamps: bool) -> dict:
        return {**self.defines, **({} if stamps else {"STAMPS": 0})}


def variant_table() -> list[Variant]:
    """Every variant, from the suite's defines of the checkout being run (imported after --repo)."""
    from pytest_gpuprops import workloads
    one_wave = dict(workloads.STREAM_DEFINES)
    tail = {**one_wave, "LAYOUT": "LAYOUT_BLOCK_TILE", "GUARD": "GUARD_TAIL"}
    stores, loads = ("write", "copy"), ("copy", "read")
    return [
        Variant("suite", {k: v for k, v in workloads.DRAM_DEFINES.items() if k != "STAMPS"}, grids="tiles"),
        Variant("one_wave", one_wave, grids="waves"),
        *(Variant(f"store_{s.lower()}", {**one_wave, "STORE": f"STORE_{s}"}, stores)
          for s in ("CS", "WT", "L2_EVICT_FIRST", "L1_NO_ALLOCATE")),
        *(Variant(f"load_{s.lower()}", {**one_wave, "LOAD": f"LOAD_{s}"}, loads)
          for s in ("CS", "LU", "NC", "L2_EVICT_FIRST", "L2_256B")),
        Variant("guard_tail", {**one_wave, "GUARD": "GUARD_TAIL"}),
        Variant("tile", {**one_wave, "LAYOUT": "LAYOUT_BLOCK_TILE"}),
        Variant("tile_tail", tail),
        Variant("chunk", {**one_wave, "LAYOUT": "LAYOUT_BLOCK_CHUNK"}),
        Variant("chunk_tail", {**one_wave, "LAYOUT": "LAYOUT_BLOCK_CHUNK", "GUARD": "GUARD_TAIL"}),
        Variant("tile_tail_u1", {**tail, "UNROLL": 1}),
        Variant("tile_tail_u2", {**tail, "UNROLL": 2}),
        Variant("tile_tail_u8_64regs", {**tail, "UNROLL": 8, "MIN_BLOCKS": 4}),
        *(Variant(f"tile_tail_b{b}", {**tail, "BLOCK": b}) for b in (128, 512, 1024)),
        Variant("tile_tail_cs", {**tail, "STORE": "STORE_CS", "LOAD": "LOAD_CS"}),
        Variant("tile_tail_l2_evict_first", {**tail, "STORE": "STORE_L2_EVICT_FIRST", "LOAD": "LOAD_L2_EVICT_FIRST"}),
        Variant("tile_tail_l2_256b", {**tail, "LOAD": "LOAD_L2_256B"}, loads),
    ]


def find_repo(asked: str | None) -> Path:
    """The checkout that holds kernels/stream_bandwidth.cu and pytest_gpuprops: --repo, else the
    current folder or one above it, else the one this script is in."""
    here = Path(__file__).resolve().parent
    tries = [Path(asked)] if asked else [Path.cwd(), *Path.cwd().parents, here.parent]
    for p in tries:
        if (p / "kernels" / "stream_bandwidth.cu").is_file() and (p / "pytest_gpuprops").is_dir():
            return p.resolve()
    raise SystemExit(f"no checkout of pytest-gpuprops found from {tries[0]}: run this from the repository root or "
                     "pass --repo PATH (a folder with kernels/stream_bandwidth.cu and pytest_gpuprops/)")


def selected(names: str | None) -> list[Variant]:
    table = variant_table()
    if not names:
        return table
    asked = names.split(",")
    unknown = [n for n in asked if n not in {v.name for v in table}]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(v.name for v in table)}")
    return [v for v in table if v.name in asked]


def grid_list(text: str) -> list[str]:
    grids = text.split(",")
    bad = [g for g in grids if g != "tiles" and not re.fullmatch(r"[1-9][0-9]*x", g)]
    if bad:
        raise SystemExit(f"unknown grid(s) {', '.join(bad)}: give 'tiles' or a multiple of the one-wave grid "
                         "(1x, 2x, 4x, 8x ...), comma-separated")
    return grids


def buffer_bytes(mib: int, l2_bytes: int, free_bytes: int) -> tuple[int, int]:
    """(write / copy buffer, read buffer): --mib MiB each; at the default 1 GiB the read buffer is the
    suite's DRAM buffer (workloads.dram_buffer_bytes), else the same size."""
    from pytest_gpuprops import workloads
    nbytes = mib * 2**20
    return nbytes, workloads.dram_buffer_bytes(l2_bytes, free_bytes) if nbytes == GiB else nbytes


def compile_all(repo: Path, arch: str, variants: list[Variant]) -> dict:
    """{(variant name, stamps): CompiledCubin} for every build the variants need, compiled in parallel."""
    from pytest_gpuprops.compile import compile_cuda
    source = repo / "kernels" / "stream_bandwidth.cu"
    jobs = [(v, st) for v in variants for st in v.stamps()]
    with ThreadPoolExecutor(min(8, os.cpu_count() or 2)) as ex:
        built = list(ex.map(lambda job: compile_cuda(source, arch, job[0].build(job[1])), jobs))
    return {(v.name, st): c for (v, st), c in zip(jobs, built)}


def loop_summary(cubin, arch: str, kernel: str) -> dict:
    """What the kernel's innermost loop of global accesses holds (read from the SASS)."""
    from pytest_gpuprops import sass, workloads
    cb = sass.Cubin(cubin.cubin, arch)
    instrs = cb.instructions(kernel)
    loop = workloads.innermost_loop(instrs, "STG" if kernel == "stream_write" else "LDG")
    acc = [i for i in loop if i.base_opcode in ("LDG", "STG")]
    offs = sorted({int(m.group(1), 16) for i in acc for m in [re.search(r"\.64\+(0x[0-9a-f]+)\]", i.text)] if m})
    plain = {i.operands[0].split(".")[0] for i in instrs if i.opcode == "ULDC.64" and i.operands[-1] == "c[0x0][0x208]"}
    return {
        "accesses": ", ".join(f"{n} {op}" for op, n in workloads.opcode_counts(acc).items()),
        "order": "".join("L" if i.base_opcode == "LDG" else "S" for i in acc),
        "instructions": sum(1 for i in loop if i.base_opcode != "NOP"),
        "predicated": sum(1 for i in acc if i.predicate),
        "offsets": ",".join(hex(o) for o in offs) or "0",
        "policy_descriptor": sum(1 for i in acc if (m := re.search(r"desc\[(UR\d+)\]", i.text)) and m.group(1) not in plain),
        "registers": cb.nvinfo_register_count(kernel),
        "local_memory": f"{sum(1 for i in loop if i.base_opcode in ('LDL', 'STL'))}/"
                        f"{sum(1 for i in instrs if i.base_opcode in ('LDL', 'STL'))}",
    }


def dry_run(args, repo: Path) -> int:
    t0 = time.perf_counter()
    variants = selected(args.variants)
    built = compile_all(repo, args.arch, variants)
    print(f"compiled {len(built)} builds of {repo}/kernels/stream_bandwidth.cu for {args.arch} "
          f"({len(variants)} variants) in {time.perf_counter() - t0:.1f} s ({next(iter(built.values())).compiler})")
    for v in variants:
        print(f"  {v.name:26} {' '.join(f'{k}={x}' for k, x in v.defines.items()):80} {', '.join(v.kinds)}"
              f" (grids: {v.grids})")
    if not args.sass:
        print(f"dry run done in {time.perf_counter() - t0:.1f} s; nothing was launched (--sass prints each loop)")
        return 0
    print(f"{'variant':26} {'kernel':13} {'loop: 16-byte accesses':44} {'order':17} {'instrs':>6} {'pred':>4} "
          f"{'offsets':28} {'hint':>4} {'regs':>4} {'local':>5}")
    for v in variants:
        shown, *others = v.stamps()  # the stamped build where there is one; the other is checked for spills
        for kind in v.kinds:
            s = loop_summary(built[(v.name, shown)], args.arch, KERNEL_OF[kind])
            print(f"{v.name + ('' if shown else ' (STAMPS=0)'):26} {KERNEL_OF[kind]:13} {s['accesses']:44} "
                  f"{s['order']:17} {s['instructions']:>6} {s['predicated']:>4} {s['offsets']:28} "
                  f"{s['policy_descriptor']:>4} {s['registers']:>4} {s['local_memory']:>5}")
            for st in others:
                local = loop_summary(built[(v.name, st)], args.arch, KERNEL_OF[kind])["local_memory"]
                if local != "0/0":
                    print(f"  {v.name} {kind} STAMPS=0: local memory (loop/kernel) {local}")
    print("order: L a load, S a store, in loop order; pred: accesses under a predicate (the j < n16 checks); "
          "offsets: constant byte offsets of the accesses' addresses; hint: accesses whose memory descriptor is "
          "not the kernel's plain one (an L2 policy); local: LDL/STL in the loop / in the whole kernel (spills)")
    print(f"dry run done in {time.perf_counter() - t0:.1f} s; nothing was launched")
    return 0


# ------------------------------------------------------------------------------------------------
# on the GPU


class Gpu:
    """The driver API (cuda.bindings) on PyTorch's primary context and current stream."""

    def __init__(self, torch):
        from cuda.bindings import driver as cu
        self.cu = cu
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # PyTorch makes the primary context current here
        self.call("cuInit", 0)
        if int(self.call("cuCtxGetCurrent")) == 0:
            dev = self.call("cuDeviceGet", torch.cuda.current_device())
            self.call("cuCtxSetCurrent", self.call("cuDevicePrimaryCtxRetain", dev))
        self.dev = self.call("cuCtxGetDevice")
        self.stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        self.modules = []

    def check(self, err, what: str):
        if int(err) != 0:
            _, name = self.cu.cuGetErrorName(err)
            raise SystemExit(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")

    def call(self, name: str, *args, what: str = ""):
        """``cu.<name>(*args)``, its error checked (exit saying ``name`` and ``what``); what it returns."""
        err, *out = getattr(self.cu, name)(*args)
        self.check(err, f"{name} {what}".strip())
        return out[0] if out else None

    def attribute(self, name: str) -> int:
        return int(self.call("cuDeviceGetAttribute", getattr(self.cu.CUdevice_attribute, name), self.dev, what=name))

    def function(self, cubin: bytes, kernel: str):
        self.modules.append(self.call("cuModuleLoadData", cubin, what=f"({kernel})"))
        return self.call("cuModuleGetFunction", self.modules[-1], kernel.encode(), what=kernel)

    def blocks_per_sm(self, fn, block: int) -> int:
        return int(self.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", fn, block, 0))

    def launcher(self, fn, grid: int, block: int, args: list[bytes]):
        from pytest_gpuprops.driver_launch import kernel_params
        params, keep = kernel_params(args)
        addr = ctypes.addressof(params)
        cu, stream = self.cu, self.stream

        def launch():
            (err,) = cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, stream, addr, 0)
            if int(err) != 0:
                self.check(err, f"cuLaunchKernel grid {grid} x {block}")
        launch.keep = (params, keep)
        return launch


def timed(torch, op, warmup: int, samples: int) -> list[float]:
    """Milliseconds of each of ``samples`` calls of ``op``, each between its own pair of events on the
    current stream, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        op()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
    for start, end in pairs:
        start.record()
        op()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def rate(nbytes: int, ms: list[float]) -> dict:
    med = statistics.median(ms)
    return {"gbps": nbytes / (med * 1e-3) / 1e9, "ms": med, "noise": (max(ms) - min(ms)) / med, "samples": ms}


def stamp_stats(torch, stamps, grid: int) -> dict:
    """The SM clock (median over blocks of clock64 / %globaltimer) and the tail (max end - median end)
    over (max end - min start) of a stamped launch."""
    st = stamps[: grid * 4].view(grid, 2, 2).cpu().to(torch.float64)
    dclk, dns = st[:, 1, 0] - st[:, 0, 0], st[:, 1, 1] - st[:, 0, 1]
    ok = dns > 0
    mhz = float((dclk[ok] / dns[ok]).median()) * 1e3 if bool(ok.any()) else float("nan")
    start, end = float(st[:, 0, 1].min()), st[:, 1, 1]
    span = float(end.max()) - start
    tail = (float(end.max()) - float(end.median())) / span if span > 0 else float("nan")
    return {"mhz": mhz, "tail": tail}


def gpu_run(args, repo: Path) -> int:
    t0 = time.perf_counter()
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("torch sees no CUDA GPU: run this on the GPU machine, or pass --dry-run")
    gpu = Gpu(torch)
    major, minor = torch.cuda.get_device_capability()
    arch = args.arch or f"sm_{major}{minor}"
    variants, grids = selected(args.variants), grid_list(args.grids)
    t_compile = time.perf_counter()
    built = compile_all(repo, arch, variants)
    t_compile = time.perf_counter() - t_compile
    sms, l2, mem_khz, bus = (gpu.attribute(f"CU_DEVICE_ATTRIBUTE_{a}") for a in (
        "MULTIPROCESSOR_COUNT", "L2_CACHE_SIZE", "MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH"))
    drv = gpu.call("cuDriverGetVersion")
    nbytes, read_bytes = buffer_bytes(args.mib, l2, torch.cuda.mem_get_info()[0])
    n16, read_n16, reps = nbytes // VEC, read_bytes // VEC, args.reps

    # the buffers: x the copy's source (words 0, 1, 2, ...: an XOR of any of them is never all-ones, so
    # the reads' sink is never written), y the write's and copy's destination, r the read's source
    x = torch.arange(nbytes // 4, dtype=torch.int32, device="cuda").view(torch.uint8)
    y = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    r = x if read_bytes == nbytes else torch.arange(read_bytes // 4, dtype=torch.int32, device="cuda").view(torch.uint8)
    want_index = torch.arange(n16, dtype=torch.int32, device="cuda")
    stamped_max = sms * 32 * max((int(g[:-1]) for g in grids if g != "tiles"), default=1)  # <= 32 blocks an SM
    stamps = torch.zeros(stamped_max * 4, dtype=torch.int64, device="cuda")
    sink = torch.zeros(max(n16, read_n16) + 1024, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()

    name = torch.cuda.get_device_name()
    print(f"GPU: {name}, {arch}, {sms} SMs, L2 {l2 / 2**20:.0f} MiB, memory {mem_khz / 1e3:.0f} MHz x {bus} bits; "
          f"driver {drv // 1000}.{drv % 1000 // 10}, torch {torch.__version__} (CUDA {torch.version.cuda}); "
          f"compiled {len(built)} builds in {t_compile:.1f} s")
    print(f"buffers: write / copy {nbytes / 2**20:.0f} MiB each, read {read_bytes / 2**20:.0f} MiB "
          f"(8 x L2 = {8 * l2 / 2**20:.0f} MiB); reps {reps} a launch; median of {args.samples} after {args.warmup}; "
          "GB/s = 1e9 B/s; copy = bytes read + written")

    def baselines():
        ops = {
            ("write", "torch fill_ (uint8)"): (lambda: y.fill_(3), nbytes),
            ("write", "driver cuMemsetD8Async"):
                (lambda: gpu.call("cuMemsetD8Async", y.data_ptr(), 3, nbytes, gpu.stream), nbytes),
            ("copy", "torch copy_ (uint8)"): (lambda: y.copy_(x), 2 * nbytes),
            ("copy", "driver cuMemcpyDtoDAsync"):
                (lambda: gpu.call("cuMemcpyDtoDAsync", y.data_ptr(), x.data_ptr(), nbytes, gpu.stream), 2 * nbytes),
            ("copy", "torch bitwise_not (elementwise)"): (lambda: torch.bitwise_not(x, out=y), 2 * nbytes),
            ("read", "torch sum (float32 view)"): (lambda: r.view(torch.float32).sum(), read_bytes),
        }
        return {key: rate(nb, timed(torch, op, args.warmup, args.samples)) for key, (op, nb) in ops.items()}

    before = baselines()
    results = []
    for v in variants:
        for kind in v.kinds:
            block, unroll = int(v.defines["BLOCK"]), int(v.defines["UNROLL"])
            fns = {st: gpu.function(built[(v.name, st)].cubin, KERNEL_OF[kind]) for st in v.stamps()}
            per_sm = gpu.blocks_per_sm(next(iter(fns.values())), block)
            n = read_n16 if kind == "read" else n16
            for g in (g for g in grids if v.runs_at(g)):
                if g == "tiles":
                    grid, st = -(-n // (block * unroll)), False
                else:
                    grid, st = sms * per_sm * int(g[:-1]), True
                src, third = (r, sink) if kind == "read" else (x, y)
                params = [struct.pack("<Q", a) for a in (stamps.data_ptr(), src.data_ptr(), third.data_ptr(), n)]
                launch = gpu.launcher(fns[st], grid, block, [*params, struct.pack("<i", reps)])
                if kind != "read":
                    y.fill_(0xFF)  # poisoned: a vector the kernel skips shows
                ms = timed(torch, launch, args.warmup, args.samples)
                row = {"variant": v.name, "defines": v.build(st), "kind": kind, "grid": g, "blocks": grid,
                       "block": block, "blocks_per_sm": per_sm,
                       **rate(VEC * n * reps * (2 if kind == "copy" else 1), ms)}
                if kind == "write":
                    words = y.view(torch.int32).view(-1, 4)
                    row["correct"] = bool(torch.equal(words[:, 0], want_index)) and \
                        bool((words[:, 1] == reps - 1).all()) and bool((words[:, 2:] == 0).all())
                elif kind == "copy":
                    row["correct"] = bool(torch.equal(y, x))
                if st:
                    row.update(stamp_stats(torch, stamps, grid))
                results.append(row)
    after = baselines()
    print_tables(variants, grids, results, before, after)
    wrong = [f"{row['variant']} {row['kind']} {row['grid']}" for row in results if not row.get("correct", True)]
    if wrong:
        print(f"WRONG results (a kernel skipped or misplaced vectors): {', '.join(wrong)}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "gpu": name, "arch": arch, "sms": sms, "l2_bytes": l2, "driver": drv, "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "buffer_bytes": nbytes, "read_bytes": read_bytes, "reps": reps,
            "warmup": args.warmup, "samples": args.samples, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "baselines_before": {f"{k[0]}: {k[1]}": v for k, v in before.items()},
            "baselines_after": {f"{k[0]}: {k[1]}": v for k, v in after.items()},
            "kernels": results}, indent=1))
        print(f"raw results in {args.json}")
    return 1 if wrong else 0


def print_tables(variants: list[Variant], grids: list[str], results: list[dict], before: dict, after: dict):
    """The baselines, a row per variant and grid with a column per kind, and the best of each kind
    beside the best baseline, the suite's kernel and the one-wave grid it replaced."""
    print()
    print("baselines (GB/s, noise = (max - min) / median of the samples), before / after the kernels:")
    for key in before:
        b, a = before[key], after[key]
        print(f"  {key[0]:5} {key[1]:34} {b['gbps']:8.1f} ({b['noise']:5.1%}) / {a['gbps']:8.1f} ({a['noise']:5.1%})")
    best_base = {k: max(((kk[1], v["gbps"]) for side in (before, after) for kk, v in side.items() if kk[0] == k),
                        key=lambda t: t[1]) for k in KINDS}
    print()
    print(f"{'variant':26} {'grid':>14} " + " ".join(f"{k + ' GB/s':>18}" for k in KINDS) + f" {'MHz':>6} {'tail':>6}")
    by = {(row["variant"], row["grid"], row["kind"]): row for row in results}
    for v in variants:
        for g in (g for g in grids if v.runs_at(g)):
            cells, mhz, tail, blocks = [], "", "", ""
            for k in KINDS:
                row = by.get((v.name, g, k))
                if row is None:
                    cells.append(f"{'=':>18}")
                    continue
                blocks = f"{g} ({row['blocks']})"
                share = f"{row['gbps'] / best_base[k][1]:.1%}" if row.get("correct", True) else "WRONG"
                cells.append(f"{row['gbps']:9.1f} {share:>8}")
                if "mhz" in row and not mhz:
                    mhz = f"{row['mhz']:6.0f}"
                    tail = f"{row['tail']:6.1%}" if g == "1x" else ""
            print(f"{v.name:26} {blocks:>14} " + " ".join(cells) + f" {mhz:>6} {tail:>6}")
    print("each cell: GB/s and its share of the best baseline of that kind; '=' the variant does not change that "
          "kernel; MHz: the SM clock the launch ran at (stamped grids); tail (1x): the share of the launch after half "
          "the blocks had finished")
    print()
    print("best of each kind:")
    for k in KINDS:
        rows = [row for row in results if row["kind"] == k and row.get("correct", True)]
        if not rows:
            continue
        best = max(rows, key=lambda row: row["gbps"])
        base_name, base = best_base[k]
        line = (f"  {k:5}: {best['variant']} at {best['grid']} ({best['blocks']} blocks) {best['gbps']:.1f} GB/s = "
                f"{best['gbps'] / base:.1%} of {base_name} ({base:.1f})")
        for label, key in (("the suite's kernel", ("suite", "tiles", k)), ("the one-wave grid", ("one_wave", "1x", k))):
            row = by.get(key)
            if row is not None:
                line += (f"; {label} at {key[1]} {row['gbps']:.1f} ("
                         + (f"{row['gbps'] / base:.1%})" if row.get("correct", True) else "WRONG)"))
        print(line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="compile every variant; launch nothing")
    ap.add_argument("--sass", action="store_true", help="with --dry-run: print each variant's loop from its SASS")
    ap.add_argument("--repo", help="the checkout (default: the current folder, one above it, or this script's)")
    ap.add_argument("--arch", help="compile for this arch (default: the GPU's; sm_90 in a dry run)")
    ap.add_argument("--variants", help="comma-separated subset of the variants (suite, one_wave, store_cs, ...; "
                    "--dry-run lists them all)")
    ap.add_argument("--grids", default=",".join(GRIDS), help="comma-separated subset of 1x,2x,4x,tiles (or 8x, 16x ...)")
    ap.add_argument("--samples", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1, help="passes over the buffer per launch (the kernels only)")
    ap.add_argument("--mib", type=int, default=1024,
                    help="write / copy buffer size in MiB (default 1024, the suite's; then the read buffer is the "
                         "suite's 8 x L2 or 1 GiB, else the same size)")
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args(argv)
    repo = find_repo(args.repo)
    sys.path.insert(0, str(repo))
    if args.dry_run:
        args.arch = args.arch or "sm_90"
        return dry_run(args, repo)
    return gpu_run(args, repo)


if __name__ == "__main__":
    sys.exit(main())
