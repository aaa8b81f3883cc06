"""nvdisasm and its listings: finding nvdisasm, reading its output, and the listing cache.

Listings come from nvdisasm's raw mode on a kernel's code alone at address 0 (branch targets print
as kernel-relative addresses, ``BRA 0x1f0``, where the ELF mode prints labels). A listing is a pure
function of (code bytes, arch, nvdisasm build), so it is cached on that key: in memory for the
process and on disk (docs/performance.md), and each one is checked word for word against the bytes
it describes whenever it is used. Many codes are disassembled in one nvdisasm run
(:func:`code_listings`; :func:`.patching.prefetch`, :func:`.patching.prefetch_patches`): nvdisasm's start-up, not the
size of the code, is what a disassembly costs.
"""

from __future__ import annotations

import collections
import functools
import glob
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import cache
from .encoding import Instruction
from .errors import ListingMismatch, SassError

# ----------------------------------------------------------------------------------------------
# nvdisasm


#: (sys.path, $PATH) -> the nvdisasm the search below found there: the search stats some thirty
#: paths, and every listing asks (a warm GPU run asks 5000 times); the answer is used only while it
#: is still an executable
_found_nvdisasm: dict[tuple, str] = {}


def find_nvdisasm() -> str:
    """nvdisasm from $GPUPROPS_NVDISASM, the pip package nvidia-cuda-nvdisasm, or PATH."""
    env = os.environ.get("GPUPROPS_NVDISASM")
    if env:
        if not os.access(env, os.X_OK):
            raise SassError(f"GPUPROPS_NVDISASM={env} is not an executable")
        return env
    where = (tuple(sys.path), os.environ.get("PATH"))
    known = _found_nvdisasm.get(where)
    if known is not None and os.access(known, os.X_OK):
        return known
    found = _search_nvdisasm()
    _found_nvdisasm.clear()
    _found_nvdisasm[where] = found
    return found


def _search_nvdisasm() -> str:
    for base in sys.path:
        for sub in ("nvidia/cu13/bin/nvdisasm", "nvidia/cuda_nvdisasm/bin/nvdisasm", "nvidia/cu12/bin/nvdisasm"):
            cand = os.path.join(base, sub)
            if os.access(cand, os.X_OK):
                return cand
    found = shutil.which("nvdisasm")
    if found:
        return found
    for cand in sorted(glob.glob("/usr/local/cuda*/bin/nvdisasm"), reverse=True):
        return cand
    raise SassError("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or put CUDA's bin/ on PATH, "
                    "or set GPUPROPS_NVDISASM)")


def _nvdisasm_stat() -> tuple[str, int, int]:
    path = find_nvdisasm()
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SassError(f"nvdisasm at {path} cannot be read: {exc}") from exc
    return path, st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=16)
def _nvdisasm_identity_of(path: str, mtime_ns: int, size: int) -> tuple[str, str]:
    """(release, full version text) of the nvdisasm binary at ``path``; cached on disk by the
    binary's path, mtime and size, so a warm run starts no nvdisasm just to ask its version."""
    entry = cache.subdir("sass") / f"nvdisasm-{cache.digest(path, str(mtime_ns), str(size))[:24]}.json"
    stored = cache.read_json(entry)
    if (isinstance(stored, dict) and stored.get("path") == path and stored.get("mtime_ns") == mtime_ns
            and stored.get("size") == size and isinstance(stored.get("release"), str)
            and isinstance(stored.get("full"), str)):
        return stored["release"], stored["full"]
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    release = m.group(1) if m else "unknown"
    full = " ".join(line.strip() for line in out.splitlines() if re.search(r"release|Build|Built", line))
    if m:
        cache.write_json(entry, {"path": path, "mtime_ns": mtime_ns, "size": size, "release": release, "full": full})
    return release, full or release


def nvdisasm_version() -> str:
    """nvdisasm's release, e.g. ``13.5`` (of the binary :func:`find_nvdisasm` finds now)."""
    return _nvdisasm_identity_of(*_nvdisasm_stat())[0]


def nvdisasm_build() -> str:
    """nvdisasm's full version text (release, V-number, build): part of every listing's cache key."""
    return _nvdisasm_identity_of(*_nvdisasm_stat())[1]


_INSTR_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\*\s*0x([0-9a-f]{16})\s*\*/")
_HI_RE = re.compile(r"^\s*/\*\s*0x([0-9a-f]{16})\s*\*/\s*$")
_SECTION_RE = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+),")


def _parse_listing(text: str) -> dict[str, list[Instruction]]:
    """nvdisasm -hex output -> {kernel: [Instruction]}; raw mode has one unnamed section ''."""
    out: dict[str, list[Instruction]] = {}
    current = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        sec = _SECTION_RE.match(line)
        if sec:
            current = sec.group(1)
            out.setdefault(current, [])
        m = _INSTR_RE.search(line)
        if m and i + 1 < len(lines):
            hm = _HI_RE.match(lines[i + 1])
            if hm:
                txt = re.sub(r"\s+", " ", m.group(2).strip())
                out.setdefault(current, []).append(Instruction(int(m.group(1), 16), txt, int(m.group(3), 16),
                                                               int(hm.group(1), 16)))
                i += 2
                continue
        i += 1
    return out


def _run_nvdisasm(args: list[str], path: str) -> str:
    proc = subprocess.run([find_nvdisasm(), *args, path], capture_output=True, text=True)
    if proc.returncode != 0:
        msg = proc.stderr.strip() or proc.stdout.strip()
        raise SassError(f"nvdisasm {nvdisasm_version()} failed on {path}: {msg}")
    return proc.stdout


def nvdisasm_arch(arch: str) -> str:
    """``sm_90a`` -> ``SM90a`` (nvdisasm's --binary spelling)."""
    m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    if not m:
        raise SassError(f"cannot map arch {arch!r} to nvdisasm's --binary name")
    return f"SM{m.group(1)}{m.group(2)}"


def disassemble_raw(code: bytes, arch: str, *, base: int = 0) -> list[Instruction]:
    """Disassemble bare instruction bytes (one or many kernels' code back to back) in one call,
    as loaded at address ``base``. Not cached: see :func:`code_listings`."""
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(code)
        name = f.name
    try:
        args = ["-b", nvdisasm_arch(arch), "-hex"] + (["--base-address", hex(base)] if base else [])
        return _parse_listing(_run_nvdisasm(args, name)).get("", [])
    finally:
        os.unlink(name)


# ----------------------------------------------------------------------------------------------
# listings: cached, and batched over many codes

#: What a listing is: nvdisasm raw mode (``-b SMxx -hex``) on one kernel's code alone, at address 0.
LISTING_MODE = "raw@0"
#: Bump when _parse_listing, the listing's meaning or its entry's layout changes: every cached
#: listing then misses. 2: texts (and offsets where not dense), the words read from the code.
_LISTING_FORMAT = 2
#: Second base address of a batched run; codes batched together stay well under it.
_BASE_SHIFT = 1 << 28
_HEX = re.compile(r"0x[0-9a-f]+")

#: Counters for benchmarks and tests: nvdisasm runs started, listings found in memory / on disk.
stats = collections.Counter()
_stats_lock = threading.Lock()


def _count(what: str, n: int = 1) -> None:
    with _stats_lock:  # batches are read on several threads at once
        stats[what] += n

_MEMO_MAX = 4096
_memo: collections.OrderedDict[str, tuple[Instruction, ...]] = collections.OrderedDict()
_memo_lock = threading.Lock()


def _memo_get(key: str) -> tuple[Instruction, ...] | None:
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
        return hit


def _memo_put(key: str, listing: tuple[Instruction, ...]) -> None:
    with _memo_lock:
        _memo[key] = listing
        _memo.move_to_end(key)
        while len(_memo) > _MEMO_MAX:
            _memo.popitem(last=False)


def listing_key(code: bytes, arch: str, build: str | None = None) -> str:
    """The cache key of a listing: the code's SHA-256, the arch, the nvdisasm build and the mode."""
    build = nvdisasm_build() if build is None else build
    return cache.digest(LISTING_MODE, str(_LISTING_FORMAT), arch, build, hashlib.sha256(code).digest())


def listing_path(key: str, arch: str) -> Path:
    return cache.subdir("sass") / "listings" / arch / f"{key}.json"


def _words_problem(listing: Sequence[Instruction], code: bytes) -> tuple[int, str] | None:
    """Where and why ``listing`` is not a reading of ``code`` (offsets in order, every word equal)."""
    n = len(listing)
    if n * 16 == len(code) and all(i.offset == 16 * k for k, i in enumerate(listing)):
        # the usual case, every instruction printed: all words compared at once
        if struct.pack(f"<{2 * n}Q", *[w for i in listing for w in (i.lo, i.hi)]) == code:
            return None
    last = -16
    for ins in listing:
        if ins.offset % 16 or ins.offset <= last or ins.offset + 16 > len(code):
            return ins.offset, f"offset {ins.offset:#06x} is out of order or outside the {len(code)}-byte code"
        if ins.raw != code[ins.offset:ins.offset + 16]:
            return ins.offset, f"the words at {ins.offset:#06x} differ from the code's bytes"
        last = ins.offset
    return None


def _disk_get(key: str, code: bytes, arch: str, build: str) -> tuple[Instruction, ...] | None:
    """The listing stored for ``code``, or None. An entry holds nvdisasm's texts and, where not
    every 16-byte word of the code was printed, their offsets; each instruction's words are read
    from ``code`` itself, which the entry names by its SHA-256 (and which it was checked against
    word for word when nvdisasm read it). A warm run reads some 1 000 entries, 400 000
    instructions: they are built straight from the bytes, not parsed and compared again."""
    payload = cache.read_json(listing_path(key, arch))
    try:
        if (payload["mode"], payload["format"], payload["arch"], payload["nvdisasm"], payload["code_sha256"]) != \
                (LISTING_MODE, _LISTING_FORMAT, arch, build, hashlib.sha256(code).hexdigest()):
            return None
        texts, offsets = payload["texts"], payload["offsets"]
        if type(texts) is not list or not texts or not all(type(t) is str for t in texts):
            return None
        n = len(texts)
        if offsets is None:  # every word printed, in order: the usual case
            if n * 16 != len(code):
                return None
            words = struct.unpack(f"<{2 * n}Q", code)
            return tuple(map(_instruction, range(0, 16 * n, 16), texts, words[0::2], words[1::2]))
        if type(offsets) is not list or len(offsets) != n or not all(type(o) is int for o in offsets):
            return None
        if any(o % 16 or o < 0 or o + 16 > len(code) for o in offsets) or any(a >= b for a, b in zip(offsets, offsets[1:])):
            return None
        return tuple(_instruction(o, t, *struct.unpack_from("<2Q", code, o)) for o, t in zip(offsets, texts))
    except (TypeError, KeyError, ValueError, struct.error):
        return None  # missing, corrupt or of another kind: recomputed and rewritten by the caller


def _instruction(offset: int, text: str, lo: int, hi: int) -> Instruction:
    """Instruction(offset, text, lo, hi), built without the frozen dataclass's per-field checks
    (hundreds of thousands are read back from the disk cache in a warm run)."""
    ins = object.__new__(Instruction)
    ins.__dict__.update(offset=offset, text=text, lo=lo, hi=hi)
    return ins


def _disk_put(key: str, listing: tuple[Instruction, ...], code: bytes, arch: str, build: str) -> None:
    """Store a listing already checked word for word against ``code`` (see :func:`_disk_get`)."""
    dense = len(listing) * 16 == len(code) and all(i.offset == 16 * k for k, i in enumerate(listing))
    cache.write_json(listing_path(key, arch), {
        "mode": LISTING_MODE, "format": _LISTING_FORMAT, "arch": arch, "nvdisasm": build,
        "code_sha256": hashlib.sha256(code).hexdigest(),
        "texts": [i.text for i in listing], "offsets": None if dense else [i.offset for i in listing]})


def _rebase_text(at0: str, shifted: str, base: int) -> str | None:
    """The text nvdisasm prints for an instruction at ``offset - base`` of a code loaded at 0, from
    what it printed for it at ``offset`` (run at base 0) and ``offset + _BASE_SHIFT`` (run at base
    _BASE_SHIFT). A literal that moved by exactly _BASE_SHIFT is an address derived from the
    instruction's own (a branch target); every other part must read the same in both runs."""
    if _HEX.split(at0) != _HEX.split(shifted):
        return None
    out = []
    parts = _HEX.split(at0)
    for i, (a, b) in enumerate(zip(_HEX.findall(at0), _HEX.findall(shifted))):
        va, vb = int(a, 16), int(b, 16)
        if va == vb:
            out.append(parts[i] + a)
        elif vb - va == _BASE_SHIFT and va >= base:
            out.append(parts[i] + hex(va - base))
        else:
            return None
    out.append(parts[-1])
    return "".join(out)


def _disassemble_codes(codes: list[bytes], arch: str) -> list[list[Instruction]]:
    """Each code as nvdisasm reads it alone at address 0, in as few nvdisasm runs as possible.

    One code: one run. Several: their bytes back to back, read in two runs at once (base 0 and base
    _BASE_SHIFT); position-dependent literals (branch targets) are the ones that moved by exactly
    the shift, and are rebased to the code's own start. A code whose reading cannot be rebased that
    way is read again alone."""
    if len(codes) == 1:
        _count("nvdisasm_runs")
        return [disassemble_raw(codes[0], arch)]
    blob = b"".join(codes)
    if len(blob) >= _BASE_SHIFT // 2:
        half = len(codes) // 2
        return _disassemble_codes(codes[:half], arch) + _disassemble_codes(codes[half:], arch)
    _count("nvdisasm_runs", 2)
    with ThreadPoolExecutor(2) as ex:
        at0, shifted = ex.map(lambda b: disassemble_raw(blob, arch, base=b), (0, _BASE_SHIFT))
    twins = {i.offset - _BASE_SHIFT: i for i in shifted}
    out: list[list[Instruction] | None] = []
    idx, base = 0, 0
    for code in codes:
        end = base + len(code)
        mine: list[Instruction] | None = []
        while idx < len(at0) and at0[idx].offset < end:
            ins = at0[idx]
            idx += 1
            if ins.offset < base or mine is None:
                continue
            twin = twins.get(ins.offset)
            text = None
            if twin is not None and (twin.lo, twin.hi) == (ins.lo, ins.hi):
                text = ins.text if twin.text == ins.text else _rebase_text(ins.text, twin.text, base)
            if text is None:
                mine = None  # read this code again, alone
                continue
            mine.append(Instruction(ins.offset - base, text, ins.lo, ins.hi))
        if mine is not None and (not mine or _words_problem(mine, code)):
            mine = None  # e.g. a code whose size is not a whole number of instructions: read it alone
        out.append(mine)
        base = end
    for n, listing in enumerate(out):
        if listing is None:
            _count("nvdisasm_runs")
            out[n] = disassemble_raw(codes[n], arch)
    return out  # type: ignore[return-value]


def code_listings(codes: Sequence[bytes], arch: str) -> list[list[Instruction]]:
    """The listing of each code (one kernel's instruction bytes) for ``arch``: from memory, from
    the disk cache, or from nvdisasm, all the missing ones in batches. Every listing returned has
    been checked word for word against its code."""
    return code_listings_by_arch({arch: codes})[arch]


def _chunks(items: list, sizes: list[int], n: int) -> list[list]:
    """``items`` in at most ``n`` runs of neighbours of about equal total ``sizes``, in order."""
    total = sum(sizes)
    out: list[list] = [[]]
    filled = 0
    for item, size in zip(items, sizes):
        if out[-1] and filled >= total * len(out) / n and len(out) < n:
            out.append([])
        out[-1].append(item)
        filled += size
    return out


def batch_workers() -> int:
    """nvdisasm batches read at once: each is two nvdisasm runs (at base 0 and at _BASE_SHIFT)."""
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def code_listings_by_arch(codes_by_arch: dict[str, Sequence[bytes]]) -> dict[str, list[list[Instruction]]]:
    """:func:`code_listings` for several archs at once: what no cache holds is read in batches of
    neighbouring codes, as many at once as :func:`batch_workers` says (one on a 2-core machine), so a
    first run's nvdisasm work spreads over the cores. How codes are batched changes no listing: each
    is read as nvdisasm reads it alone (:func:`_disassemble_codes`) and checked word for word."""
    build = nvdisasm_build()
    keys = {arch: [listing_key(c, arch, build) for c in codes] for arch, codes in codes_by_arch.items()}
    found: dict[str, dict[str, tuple[Instruction, ...]]] = {}
    todo: dict[str, dict[str, bytes]] = {}
    for arch, codes in codes_by_arch.items():
        have, missing = found.setdefault(arch, {}), todo.setdefault(arch, {})
        for key, code in zip(keys[arch], codes):
            if key in have or key in missing:
                continue
            hit = _memo_get(key)
            if hit is not None:
                _count("memo_hits")
            else:
                hit = _disk_get(key, code, arch, build)
                if hit is not None:
                    _count("disk_hits")
                    _memo_put(key, hit)
            if hit is not None:
                have[key] = hit
            else:
                missing[key] = code
    workers = batch_workers()
    jobs = [(arch, chunk) for arch, missing in todo.items() if missing
            for chunk in _chunks(list(missing), [len(c) for c in missing.values()], min(workers, len(missing)))]

    def read(job):
        arch, chunk = job
        return _disassemble_codes([todo[arch][k] for k in chunk], arch)

    if len(jobs) <= 1:
        readings = [read(job) for job in jobs]
    else:
        with ThreadPoolExecutor(workers) as ex:
            readings = list(ex.map(read, jobs))
    for (arch, chunk), listings in zip(jobs, readings):
        _count("disassembled", len(chunk))
        for key, listing in zip(chunk, listings):
            code = todo[arch][key]
            problem = _words_problem(listing, code)
            if problem:
                raise ListingMismatch(f"nvdisasm {nvdisasm_version()} ({arch}): {problem[1]}", problem[0])
            found[arch][key] = tuple(listing)
            if listing:  # an empty reading is an error for the caller; never cached
                _memo_put(key, found[arch][key])
                _disk_put(key, found[arch][key], code, arch, build)
    return {arch: [list(found[arch][k]) for k in keys[arch]] for arch in codes_by_arch}


def code_listing(code: bytes, arch: str) -> list[Instruction]:
    """:func:`code_listings` for one code."""
    return code_listings([code], arch)[0]

