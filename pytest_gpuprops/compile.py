"""compile layer: CUDA C++ source -> cubin bytes for an explicit arch, with no GPU.

NVRTC from pip (``cuda.bindings.nvrtc``) is the default backend, so compiling needs neither a GPU nor
a system CUDA toolkit; ``nvcc`` is an optional backend where it is on PATH.  Every result is cached on
disk under a key made of the source (and the headers it includes), the options, the arch, the
backend and the compiler version, so a warm cache costs a file read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

#: The oldest architecture the pipeline reads: nvdisasm 13 (pip nvidia-cuda-nvdisasm) refuses sm_70
#: and older, so their SASS can be neither printed nor verified after a patch.
MIN_SM = 75
#: Architectures with packaged facts and CPU tests; any other arch NVRTC compiles for works too.
TESTED_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a")
SUPPORTED_ARCHES = TESTED_ARCHES  # the old name

_ARCH_RE = re.compile(r"sm_(\d+)([af]?)")
_ARCH_HELP = ("sm_NN with an optional suffix: a (arch-specific, sm_90a and newer) or f (family, sm_100f and "
              "newer), e.g. sm_86, sm_90, sm_90a, sm_100, sm_120f")

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


class CompileError(Exception):
    """The compiler rejected the source; the message carries the compiler's log."""


class ArchError(ValueError):
    """An arch string the pipeline cannot handle."""


class CacheError(CompileError):
    """The cubin cache folder cannot be used (a file, or not writable); says which setting names it."""


def parse_arch(arch: str) -> str:
    """``arch`` normalised (``90`` -> ``sm_90``) and checked for form only: no compiler is asked.

    Raises :class:`ArchError` for something that is not an arch name, or one older than sm_75.
    """
    if not isinstance(arch, str):
        raise ArchError(f"arch must be a string like 'sm_90', not {arch!r}")
    norm = arch.strip().lower().replace("compute_", "sm_")
    if re.fullmatch(r"\d+[af]?", norm):
        norm = "sm_" + norm
    m = _ARCH_RE.fullmatch(norm)
    if not m:
        raise ArchError(f"{arch!r} is not an arch name; expected {_ARCH_HELP}")
    sm, suffix = int(m.group(1)), m.group(2)
    if sm < MIN_SM:
        raise ArchError(
            f"arch {arch!r} is older than sm_75: nvdisasm 13 (pip package nvidia-cuda-nvdisasm) refuses "
            "sm_70 and older, so its SASS cannot be read or verified. Use sm_75 or newer "
            f"(tested: {', '.join(TESTED_ARCHES)})."
        )
    if suffix == "a" and sm < 90:
        raise ArchError(f"arch {arch!r}: arch-specific 'a' variants exist from sm_90 on (sm_90a); use sm_{sm}")
    if suffix == "f" and sm < 100:
        raise ArchError(f"arch {arch!r}: family 'f' variants exist from sm_100 on (sm_100f); use sm_{sm}")
    return norm


@functools.cache
def nvrtc_arches() -> tuple[int, ...] | None:
    """The SM numbers this NVRTC compiles for (``nvrtcGetSupportedArchs``); None where NVRTC is absent."""
    try:
        nvrtc = _nvrtc()
        err, archs = nvrtc.nvrtcGetSupportedArchs()
    except (CompileError, AttributeError):
        return None
    if int(err) != 0:
        return None
    return tuple(int(a) for a in archs)


def check_arch(arch: str) -> str:
    """Return ``arch`` normalised (``sm_90``), or raise with what is supported and why.

    Any ``sm_NN``, ``sm_NNa`` or ``sm_NNf`` from sm_75 on that the installed NVRTC compiles for is
    accepted, so a GPU newer than the packaged facts (sm_100, sm_120) compiles and measures.
    """
    norm = parse_arch(arch)
    sm = int(_ARCH_RE.fullmatch(norm).group(1))
    known = nvrtc_arches()
    if known is not None and sm not in known:
        usable = [f"sm_{k}" for k in known if k >= MIN_SM]
        raise ArchError(
            f"arch {arch!r}: {compiler_version()} cannot compile for {norm}; it compiles for "
            f"{', '.join(usable)} (with suffixes: sm_90a; sm_100a, sm_100f and newer). A newer NVRTC "
            "(pip install -U nvidia-cuda-nvrtc) may know it"
        )
    return norm


@dataclasses.dataclass(frozen=True)
class CompiledCubin:
    """A cubin on disk (in the cache) with how it was made."""

    cubin: bytes
    path: Path
    arch: str
    source_name: str
    defines: tuple[tuple[str, str], ...]
    compiler: str  # e.g. "nvrtc 13.5"
    log: str
    cached: bool


def _nvrtc():
    try:
        from cuda.bindings import nvrtc  # type: ignore
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore  # cuda-python < 12.6 layout
        except ImportError as exc:
            raise CompileError(
                "NVRTC is not importable: install cuda-bindings and nvidia-cuda-nvrtc "
                "(pip install 'pytest-gpuprops[dev]' or '[cuda13]'), or pass backend='nvcc'"
            ) from exc
    return nvrtc


def compiler_version(backend: str = "nvrtc") -> str:
    """The compiler's name and version, part of every cache key and of static facts."""
    if backend == "nvrtc":
        nvrtc = _nvrtc()
        err, major, minor = nvrtc.nvrtcVersion()
        if int(err) != 0:
            raise CompileError(f"nvrtcVersion failed: {err}")
        return f"nvrtc {major}.{minor}"
    if backend == "nvcc":
        nvcc = shutil.which("nvcc")
        if not nvcc:
            raise CompileError("backend 'nvcc' asked for but nvcc is not on PATH; use backend='nvrtc'")
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release (\d+\.\d+)", out)
        return f"nvcc {m.group(1) if m else 'unknown'}"
    raise CompileError(f"unknown compiler backend {backend!r}; expected 'nvrtc' or 'nvcc'")


def default_cache_dir() -> Path:
    env = os.environ.get("GPUPROPS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuprops" / "cubins"


def check_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """The cubin cache folder (``cache_dir``, else $GPUPROPS_CACHE_DIR, else ~/.cache/gpuprops/cubins),
    or :class:`CacheError` when it is a file or lies under one. It need not exist yet."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    if cache_dir:
        origin = "the cache folder asked for (--gpuprops-cache)"
    elif os.environ.get("GPUPROPS_CACHE_DIR"):
        origin = "GPUPROPS_CACHE_DIR"
    else:
        origin = "the default cache folder"
    existing = cache
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == cache else f"cannot be created: {existing} is a file"
        raise CacheError(f"cubin cache {cache} ({origin}) {what}, not a folder; point GPUPROPS_CACHE_DIR "
                         "(or --gpuprops-cache) at a folder, or unset it to use ~/.cache/gpuprops/cubins")
    return cache


def _file_mode() -> int:
    """0666 less the umask: cache files are as readable as any file this user creates, so a shared
    cache (GPUPROPS_CACHE_DIR on a group folder) works for everyone (mkstemp alone gives 0600)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _with_includes(path: Path, seen: set[Path] | None = None) -> bytes:
    """The source's bytes followed by those of every local header it includes (for the cache key)."""
    seen = seen if seen is not None else set()
    path = path.resolve()
    if path in seen or not path.exists():
        return b""
    seen.add(path)
    data = path.read_bytes()
    out = [data]
    for inc in _INCLUDE_RE.findall(data.decode("utf-8", "replace")):
        out.append(_with_includes(path.parent / inc, seen))
    return b"".join(out)


def _options(arch: str, defines: dict[str, object], include_dirs: list[Path], extra: tuple[str, ...]) -> list[str]:
    opts = [f"-arch={arch}", "-std=c++17"]
    opts += [f"-I{d}" for d in include_dirs]
    opts += [f"-D{k}={v}" for k, v in sorted(defines.items())]
    opts += list(extra)
    return opts


def _compile_nvrtc(source: bytes, name: str, opts: list[str]) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source, name.encode(), 0, [], [])
    if int(err) != 0:
        raise CompileError(f"nvrtcCreateProgram failed for {name}: {err}")
    try:
        bopts = [o.encode() for o in opts]
        (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        log_buf = b" " * log_size
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.rstrip(b"\x00 ").decode("utf-8", "replace")
        if int(cerr) != 0:
            raise CompileError(f"NVRTC could not compile {name} with {' '.join(opts)}:\n{_head(log)}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        if int(err) != 0 or size == 0:
            raise CompileError(
                f"NVRTC produced no cubin for {name} (arch option {opts[0]}): a real arch such as sm_90 "
                "is needed, not a virtual compute_XX"
            )
        buf = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, buf)
        return bytes(buf), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _head(log: str, n: int = 15) -> str:
    lines = log.strip().splitlines()
    return "\n".join(lines[:n] + ([f"... ({len(lines) - n} more lines)"] if len(lines) > n else []))


def _compile_nvcc(source_path: Path, opts: list[str]) -> tuple[bytes, str]:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise CompileError("backend 'nvcc' asked for but nvcc is not on PATH; use backend='nvrtc'")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.cubin"
        cmd = [nvcc, "-cubin", *opts, "-o", str(out), str(source_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"nvcc could not compile {source_path.name}:\n$ {' '.join(cmd)}\n{_head(proc.stderr)}")
        return out.read_bytes(), proc.stderr


def _is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def compile_cuda(
    source: str | Path,
    arch: str,
    defines: dict[str, object] | None = None,
    *,
    include_dirs: list[str | Path] | None = None,
    options: tuple[str, ...] = (),
    backend: str = "nvrtc",
    cache_dir: str | Path | None = None,
) -> CompiledCubin:
    """Compile the CUDA C++ file ``source`` for ``arch`` and return the cubin.

    ``defines`` become ``-D`` macros (how kernels take ILP, UNROLL, element type).  A cached cubin is
    returned when source, headers, options, arch and compiler version all match; a cache entry that
    is unreadable or not an ELF is recompiled, never trusted.
    """
    arch = check_arch(arch)
    path = Path(source)
    if not path.exists():
        raise CompileError(f"kernel source {path} does not exist")
    if path.is_dir():
        raise CompileError(f"kernel source {path} is a folder; give one .cu file in it")
    try:
        source_bytes = path.read_bytes()
    except OSError as exc:
        raise CompileError(f"cannot read kernel source {path}: {exc.strerror or exc}") from exc
    defines = dict(defines or {})
    incs = [Path(d).resolve() for d in (include_dirs or [])] + [path.parent.resolve()]
    opts = _options(arch, defines, incs, tuple(options))
    version = compiler_version(backend)

    # The key leaves out absolute include paths so that checkouts in other folders share entries.
    key_opts = [o for o in opts if not o.startswith("-I")]
    h = hashlib.sha256()
    for part in (_with_includes(path), json.dumps(key_opts).encode(), arch.encode(), version.encode(), backend.encode()):
        h.update(hashlib.sha256(part).digest())
    key = h.hexdigest()[:32]
    cache = check_cache_dir(cache_dir)
    cubin_path = cache / f"{path.stem}-{arch}-{key}.cubin"
    meta_path = cubin_path.with_suffix(".json")
    dkey = tuple(sorted((k, str(v)) for k, v in defines.items()))

    cached = _read_entry(cubin_path, meta_path)
    if cached is not None:
        data, log = cached
        return CompiledCubin(data, cubin_path, arch, path.name, dkey, version, log, True)

    with _in_flight_lock:  # another thread compiling the same entry (the session's background builds)
        running = _in_flight.get(cubin_path)
        mine = None if running is not None else _in_flight.setdefault(cubin_path, threading.Event())
    if running is not None:
        running.wait()
        cached = _read_entry(cubin_path, meta_path)
        if cached is not None:
            data, log = cached
            return CompiledCubin(data, cubin_path, arch, path.name, dkey, version, log, True)
        # it failed, or could not write the cache: compile here, and raise its error here
    try:
        t0 = time.perf_counter()
        if backend == "nvrtc":
            data, log = _compile_nvrtc(source_bytes, path.name, opts)
        else:
            data, log = _compile_nvcc(path, opts)
        elapsed = time.perf_counter() - t0
        if not _is_elf(data):
            raise CompileError(f"{backend} returned something that is not an ELF cubin for {path.name}")

        meta = {"source": str(path), "arch": arch, "options": key_opts, "compiler": version,
                "sha256": hashlib.sha256(data).hexdigest(), "log": log, "seconds": round(elapsed, 4)}
        _write_entry(cache, ((cubin_path, data), (meta_path, json.dumps(meta, indent=1).encode())))
        compiled_here.append((path.name, arch, dkey, threading.current_thread().name))
    finally:
        if mine is not None:
            with _in_flight_lock:
                _in_flight.pop(cubin_path, None)
            mine.set()
    return CompiledCubin(data, cubin_path, arch, path.name, dkey, version, log, False)


#: every compile this process made rather than read from its cache, in order: (source file name, arch,
#: defines, the name of the thread that compiled it); hwtests/conftest.py counts those a test made
#: itself, which the session prefetch did not foresee
compiled_here: list[tuple[str, str, tuple, str]] = []

#: cache entries being compiled now in this process, by cubin path: a second thread asking for one
#: waits for that compile and reads its entry instead of compiling it again
_in_flight: dict[Path, threading.Event] = {}
_in_flight_lock = threading.Lock()


def _read_entry(cubin_path: Path, meta_path: Path) -> tuple[bytes, str] | None:
    """A cache entry's (cubin, log) if it is whole and matches its checksum; None to recompile.

    Anything else in the cache (a truncated cubin, JSON that is not an object, a missing key, an
    unreadable file) is recompiled and overwritten, never trusted and never an error."""
    try:
        if not (cubin_path.is_file() and meta_path.is_file()):
            return None
        meta = json.loads(meta_path.read_text())
        data = cubin_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str):
        return None
    if not _is_elf(data) or hashlib.sha256(data).hexdigest() != meta["sha256"]:
        return None
    log = meta.get("log", "")
    return data, log if isinstance(log, str) else ""


def _write_entry(cache: Path, files) -> None:
    """Write cache files atomically (temporary name, then rename) with the user's usual file mode.
    A cache that cannot be written (a read-only shared folder) costs only the caching: warned once."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for target, payload in files:
            fd, tmp = tempfile.mkstemp(dir=cache, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(payload)
                os.chmod(tmp, _file_mode())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except OSError as exc:
        _warn_unwritable(cache, exc)


_WARNED: set[Path] = set()


def _warn_unwritable(cache: Path, exc: OSError) -> None:
    if cache in _WARNED:
        return
    _WARNED.add(cache)
    warnings.warn(f"cubin cache {cache} cannot be written ({exc.strerror or exc}); compiling without "
                  "caching. Set GPUPROPS_CACHE_DIR to a folder you can write.", RuntimeWarning, stacklevel=4)
