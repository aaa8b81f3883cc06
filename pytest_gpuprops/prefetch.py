"""Batch the CPU work a test session will ask for, before it asks: compile in parallel, read SASS in
nvdisasm batches spread over the cores, read every timing-patched build in more of them.

Nothing here decides an outcome. It fills the caches that :func:`compile.compile_cuda`,
:meth:`sass.Cubin.instructions` and :func:`sass.patch` look in; those then compile, read, plan,
verify and refuse exactly as they would without it. A build this module did not foresee costs time,
never correctness.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import cache, sass
from . import compile as gp_compile


@dataclasses.dataclass(frozen=True)
class Build:
    """One compile: ``source`` for ``arch`` with ``defines`` (as compile_cuda takes them)."""

    source: Path
    arch: str
    defines: tuple[tuple[str, str], ...] = ()
    include_dirs: tuple[Path, ...] = ()

    @classmethod
    def of(cls, source: str | Path, arch: str, defines: dict | None = None,
           include_dirs: Iterable[str | Path] = ()) -> Build:
        return cls(Path(source), arch, tuple(sorted((str(k), str(v)) for k, v in (defines or {}).items())),
                   tuple(Path(d) for d in include_dirs))


@contextlib.contextmanager
def long_lived():
    """Fill the session's caches with Python's cyclic garbage collector paused, then freeze what
    they hold (:func:`gc.freeze`) so that no later collection walks it again.

    A warm prefetch reads ~1 000 listings, 400 000 instruction objects, that live as long as the
    session. Allocating them triggers full collections, and every later full collection (and
    pytest's five at exit) walks all of them: 20 % of a warm static run (6.4 s -> 5.2 s with the
    collector off). Frozen objects are still freed by reference counting when a cache lets them go;
    only reference cycles among what existed by the end of the prefetch wait for the process's end."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@dataclasses.dataclass
class Timings:
    """Where this process's prefetch went: builds asked for, compiled (not in the cache), the wall
    seconds of compiling, of reading SASS and of reading the timing patches, and the compiler's own
    seconds summed over the threads. A first run's line in the summary (hwtests/conftest.py)."""

    builds: int = 0
    compiled: int = 0
    compiler_s: float = 0.0
    compile_s: float = 0.0
    sass_s: float = 0.0
    patches_s: float = 0.0
    #: builds handed to :func:`in_background`, how many of them it has finished (read or failed), and
    #: how many of those it compiled (not in the cache)
    background: int = 0
    background_done: int = 0
    background_compiled: int = 0
    #: compiles the tests made themselves (:data:`compile.compiled_here` entries): builds the prefetch
    #: did not foresee, each a test's wait on a first run
    by_tests: list = dataclasses.field(default_factory=list)

    def line(self) -> str:
        beside = (f"; {self.background} more beside the tests ({self.background_done} finished, "
                  f"{self.background_compiled} of them compiled)" if self.background else "")
        unforeseen = ""
        if self.by_tests:
            named = ", ".join(f"{src} {arch} {' '.join(f'{k}={v}' for k, v in defines)}".rstrip()
                              for src, arch, defines, _ in self.by_tests[:4])
            more = f" and {len(self.by_tests) - 4} more" if len(self.by_tests) > 4 else ""
            unforeseen = f"; {len(self.by_tests)} compiled by the tests themselves, not foreseen: {named}{more}"
        return (f"{self.builds} builds ({self.compiled} compiled, {self.compiler_s:.1f} s of compiler time on "
                f"{workers()} threads) in {self.compile_s:.1f} s; SASS read in {self.sass_s:.1f} s; timing "
                f"patches read in {self.patches_s:.1f} s{beside}{unforeseen}")


#: this process's prefetch so far
timings = Timings()
_timings_lock = threading.Lock()


def workers() -> int:
    """Threads for compiling: NVRTC releases the GIL while it compiles."""
    return max(1, min(16, os.cpu_count() or 1))


def _compile_one(b: Build, cache_dir, copy_to, *, beside: bool = False) -> sass.Cubin | None:
    """One build through compile_cuda (counted in :data:`timings` where it compiled: ``beside``, as
    one of :func:`in_background`'s), or None where it fails: the test that needs it compiles it again
    and reports the error itself."""
    try:
        t0 = time.perf_counter()
        c = gp_compile.compile_cuda(b.source, b.arch, dict(b.defines), include_dirs=list(b.include_dirs),
                                    cache_dir=cache_dir)
        if not c.cached:
            with _timings_lock:
                if beside:
                    timings.background_compiled += 1
                else:
                    timings.compiled += 1
                    timings.compiler_s += time.perf_counter() - t0
        if copy_to is not None:
            for f in (c.path, c.path.with_suffix(".json")):
                if f.exists() and not (Path(copy_to) / f.name).exists():
                    cache.atomic_write(Path(copy_to) / f.name, f.read_bytes())
        return sass.Cubin(c.cubin, b.arch, name=b.source.name)
    except Exception:  # reported where the build is used, not here
        return None


def in_background(jobs: Iterable[tuple[Build, object]], *, cache_dir: str | Path | None = None,
                  threads: int | None = None) -> list[threading.Thread]:
    """Compile each ``(Build, KernelSpec to patch for timing, or None)`` in the given order, then read
    its SASS and its timing patch, on daemon threads at a lower CPU priority, and return at once.

    A first run's longest compiles (the sm_90a wgmma chains: up to 22 s each, 190 s of the 220 s of
    compiling on an H100's machine) belong to the tests that run last; compiled here, they no longer
    hold back the tests before them. A test that asks for a build still compiling waits for that
    compile (compile_cuda joins a compile in flight) and reads the rest itself, as without a prefetch.
    The threads run at nice +10 where the OS allows it, so the tests' own thread keeps its core; they
    end with the jobs, or with the process."""
    queue = collections.deque(jobs)
    lock = threading.Lock()
    with _timings_lock:
        timings.background += len(queue)

    def work():
        _lower_priority()
        while True:
            with lock:
                if not queue:
                    return
                b, spec = queue.popleft()
            try:
                cubin = _compile_one(b, cache_dir, None, beside=True)
                if cubin is not None:
                    sass.prefetch([cubin])
                    if spec is not None:
                        _timing_patches([(cubin, spec)])
            except Exception:  # the test that needs it reads it again and reports what is wrong
                pass
            finally:
                with _timings_lock:
                    timings.background_done += 1

    started = []
    for n in range(min(threads or workers(), len(queue))):
        t = threading.Thread(target=work, name=f"gpuprops-build-{n}", daemon=True)
        t.start()
        started.append(t)
    return started


def _lower_priority() -> None:
    """This thread (and what it starts: nvdisasm) at nice +10, on Linux; elsewhere left as it is."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + 10))
    except (AttributeError, OSError):
        pass


def compile_all(builds: Iterable[Build], *, cache_dir: str | Path | None = None,
                copy_to: str | Path | None = None) -> dict[Build, sass.Cubin]:
    """Compile every build (cache hits cost a file read) in parallel; a build that fails to compile
    is left out (the test that needs it compiles it again and reports the error itself).
    ``copy_to``: also put each build's cache entry (cubin and metadata) in that cubin folder."""
    todo = list(dict.fromkeys(builds))

    def one(b: Build):
        return b, _compile_one(b, cache_dir, copy_to)

    t0 = time.perf_counter()
    if len(todo) <= 1:
        done = [one(b) for b in todo]
    else:
        with ThreadPoolExecutor(workers()) as ex:
            done = list(ex.map(one, todo))
    timings.builds += len(todo)
    timings.compile_s += time.perf_counter() - t0
    return {b: cb for b, cb in done if cb is not None}


def builds(builds: Iterable[Build], *, cache_dir: str | Path | None = None,
           copy_to: str | Path | None = None) -> dict[Build, sass.Cubin]:
    """Compile ``builds`` in parallel and read all their kernels' SASS in nvdisasm batches."""
    cubins = compile_all(builds, cache_dir=cache_dir, copy_to=copy_to)
    t0 = time.perf_counter()
    try:
        sass.prefetch(cubins.values())
    except sass.SassError:
        pass  # nvdisasm missing or failing: every test that reads SASS says so itself
    timings.sass_s += time.perf_counter() - t0
    return cubins


def timing_patches(pairs: Iterable[tuple[sass.Cubin, object]]) -> int:
    """Read, in nvdisasm batches over the cores, every ``(cubin, KernelSpec)`` build as
    :func:`timing.build_for_timing` will patch it (the spec's edits, then both clock reads waiting
    on all scoreboards). Returns how many patches were planned."""
    t0 = time.perf_counter()
    try:
        return _timing_patches(pairs)
    finally:
        timings.patches_s += time.perf_counter() - t0


def _timing_patches(pairs: Iterable[tuple[sass.Cubin, object]]) -> int:
    requests = []
    for cubin, spec in pairs:
        try:
            edits = list(spec.patch(cubin, spec.kernel)) if spec.patch else []
            edits += sass.timing_edits(cubin.instructions(spec.kernel))
        except sass.SassError:
            continue  # refused: build_for_timing refuses it again, with its message
        requests.append((cubin, spec.kernel, edits, None))
    try:
        return sass.prefetch_patches(requests)
    except sass.SassError:
        return 0
