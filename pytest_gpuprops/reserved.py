"""Device buffers allocated as a GPU's runner starts, before any test allocates, so that where a buffer lies in
memory does not depend on which tests ran before it in the process.

Why: which L2 partition a line lives in follows its physical address, and the physical pages a buffer gets
follow the process's allocation history. A chase over fresh buffers read the H100's near step 52.19-52.30 %
in a fresh process and 52.52-52.74 % after 6 GiB had passed through CuPy's pool (GPU-1626408e, 2026-11-27);
a ``-k`` process and a whole-suite process of one unit differed by up to 1.75 %. A fact spec that declares a
reservation (``SweepSpec.reserve``) gets its buffer at the same point of every process's history: right after
its GPU's context is made.

The layers: the plugin hands every collected test's reservations to :func:`request` before -k and -m select
(the buffers allocated before a reserved one decide where it lies, so a ``-k`` run reserves as the whole
suite does, in one order: the largest first, then by name);
``measure.Runner`` calls :func:`allocate_requested` as it starts on a GPU; a kernel's arguments take the
buffer with :func:`buffer` (which allocates it there and then where nothing reserved it: a lone test run
outside the plugin, a stand-in GPU).
"""

from __future__ import annotations

from typing import Callable

#: requested reservations: key -> bytes wanted, a function of the array module (``cupy``) on the GPU in use
_requested: dict[str, Callable[[object], int]] = {}
#: allocated buffers: (device index, key) -> a 1-d uint64 array
_buffers: dict[tuple[int, str], object] = {}


def request(key: str, nbytes: Callable[[object], int]) -> None:
    """Ask for a buffer ``key`` of ``nbytes(cp)`` bytes on every GPU a runner starts on from now on. Asking
    again for one key keeps the first function (the specs of one shared sweep ask alike)."""
    if not key:
        raise ValueError("a reserved buffer needs a name (the fact spec's shared sweep or its own name)")
    _requested.setdefault(key, nbytes)


def requested() -> list[str]:
    return sorted(_requested)


def allocate_requested(cp) -> list[tuple[str, int]]:
    """Allocate every requested buffer not yet held on the GPU in use (``cp.cuda.Device()``), the largest
    first; returns ``[(key, bytes)]`` of those allocated now."""
    made = []
    sizes = {key: nbytes(cp) for key, nbytes in _requested.items()}
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):  # the largest first (the L2 sweep's, as recorded)
        if (cp.cuda.Device().id, key) not in _buffers:
            made.append((key, _allocate(cp, key, sizes[key])))
    return made


def buffer(cp, key: str, nbytes: int):
    """The buffer ``key`` on the GPU in use, at least ``nbytes`` bytes: the one reserved when its runner
    started, else one allocated now (and kept). A reserved buffer smaller than asked is refused: its
    reservation and its use disagree, a bug in the fact spec."""
    held = _buffers.get((cp.cuda.Device().id, key))
    if held is None:
        _allocate(cp, key, nbytes)
        held = _buffers[(cp.cuda.Device().id, key)]
    if held.size * 8 < nbytes:
        raise ValueError(f"reserved buffer {key!r} holds {held.size * 8} bytes; a launch asked for {nbytes}: the "
                         "fact spec's reserve() must cover its largest launch")
    return held


def _allocate(cp, key: str, nbytes: int) -> int:
    if nbytes <= 0:
        raise ValueError(f"reserved buffer {key!r} of {nbytes} bytes: expected a positive size")
    words = -(-nbytes // 8)
    _buffers[(cp.cuda.Device().id, key)] = cp.empty(words, dtype=cp.uint64)
    return words * 8


def clear() -> None:
    """Forget every request and buffer (a new session in this process: pytester's in-process runs)."""
    _requested.clear()
    _buffers.clear()
