"""compile layer: CUDA C++ source -> cubin bytes for an explicit arch, with no GPU.

NVRTC from pip (``cuda.bindings.nvrtc``) is the default backend, so compiling needs neither a GPU nor
a system CUDA toolkit; ``nvcc`` is an optional backend where it is on PATH.  Every result is cached on
disk under a key made of the source (and the headers it includes), the options, the arch, the
backend and the compiler version, so a warm cache costs a file read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

#: Architectures the whole pipeline supports: NVRTC compiles them and nvdisasm 13 reads them.
SUPPORTED_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a")
#: Older architectures NVRTC may still know but nvdisasm 13 from pip refuses.
_TOO_OLD = re.compile(r"^sm_(3\d|5\d|6\d|70|72)$")

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


class CompileError(Exception):
    """The compiler rejected the source; the message carries the compiler's log."""


class ArchError(ValueError):
    """An arch string the pipeline cannot handle."""


def check_arch(arch: str) -> str:
    """Return ``arch`` normalised (``sm_90``), or raise with what is supported and why."""
    norm = arch.strip().lower().replace("compute_", "sm_")
    if re.fullmatch(r"\d+a?", norm):
        norm = "sm_" + norm
    if norm in SUPPORTED_ARCHES:
        return norm
    if _TOO_OLD.match(norm):
        raise ArchError(
            f"arch {arch!r} is older than sm_75: nvdisasm 13 (pip package nvidia-cuda-nvdisasm) refuses "
            f"sm_70 and older, so its SASS cannot be read or verified. Supported: {', '.join(SUPPORTED_ARCHES)}."
        )
    raise ArchError(f"unknown or unsupported arch {arch!r}; expected one of {', '.join(SUPPORTED_ARCHES)}")


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
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cubin_path = cache / f"{path.stem}-{arch}-{key}.cubin"
    meta_path = cubin_path.with_suffix(".json")
    dkey = tuple(sorted((k, str(v)) for k, v in defines.items()))

    if cubin_path.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
            data = cubin_path.read_bytes()
            if _is_elf(data) and hashlib.sha256(data).hexdigest() == meta["sha256"]:
                return CompiledCubin(data, cubin_path, arch, path.name, dkey, version, meta.get("log", ""), True)
        except (OSError, ValueError, KeyError):
            pass  # corrupt entry: fall through and recompile

    t0 = time.perf_counter()
    if backend == "nvrtc":
        data, log = _compile_nvrtc(path.read_bytes(), path.name, opts)
    else:
        data, log = _compile_nvcc(path, opts)
    elapsed = time.perf_counter() - t0
    if not _is_elf(data):
        raise CompileError(f"{backend} returned something that is not an ELF cubin for {path.name}")

    cache.mkdir(parents=True, exist_ok=True)
    meta = {"source": str(path), "arch": arch, "options": key_opts, "compiler": version,
            "sha256": hashlib.sha256(data).hexdigest(), "log": log, "seconds": round(elapsed, 4)}
    for target, payload in ((cubin_path, data), (meta_path, json.dumps(meta, indent=1).encode())):
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, target)
    return CompiledCubin(data, cubin_path, arch, path.name, dkey, version, log, False)
