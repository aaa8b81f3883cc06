"""facts layer: expected values per architecture, as data with provenance.

One TOML file per arch (``pytest_gpuprops/facts/sm_90.toml``); each table is a fact::

    [lds_latency_cycles]
    value = 30.0
    tolerance_abs = 0.5        # and/or tolerance_rel = 0.02; the larger applies
    unit = "cycles"
    method = "pointer chase, one warp, ..."
    source = "measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-21"

Static schedule facts hold what a compiler does, so they carry values per compiler version::

    [hmma_16816_f32_dependent_spacing_cycles]
    kind = "static"
    by_compiler = { "nvrtc 13.5" = 24 }

Memory latencies and bandwidths belong to the GPU, not to its SM's arch (an H100 and an H200 share
the SM, not the memory system). Per-GPU sections, selected by the GPU's name, add to or override the
arch's facts (see :func:`select_gpu`)::

    [gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
    value = 800.0
    ...

An arch-level table may say ``scope = "gpu"``: a memory-system fact measured on the file's ``gpu``;
it is not applied to another GPU. Record mode writes such facts, and the names registered with
:func:`register_gpu_scoped`, to the recording GPU's section.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
import re
from pathlib import Path

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore

PACKAGED_DIR = Path(__file__).parent / "facts"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class FactsError(Exception):
    """A facts file that cannot be read or is malformed; says which file and which key."""


class MissingFacts(LookupError):
    """No facts for an arch, or no such fact: the message says how to record them."""


@dataclasses.dataclass(frozen=True)
class Fact:
    name: str
    arch: str
    unit: str
    method: str
    source: str
    value: float | None = None
    tolerance_abs: float = 0.0
    tolerance_rel: float = 0.0
    kind: str = "measured"  # "measured" (hardware) or "static" (compiler schedule)
    by_compiler: dict = dataclasses.field(default_factory=dict)
    scope: str = "arch"  # "arch" (the SM's) or "gpu" (the memory system's: one GPU's value)
    gpu: str | None = None  # for scope "gpu": the GPU it was measured on

    @property
    def tolerance(self) -> float:
        return max(self.tolerance_abs, abs(self.value or 0.0) * self.tolerance_rel)

    def accepts(self, measured: float) -> bool:
        return self.value is not None and abs(measured - self.value) <= self.tolerance + 1e-12

    def expected_text(self) -> str:
        if self.kind == "static":
            return ", ".join(f"{v} ({c})" for c, v in self.by_compiler.items())
        return f"{self.value:g} ± {self.tolerance:.3g} {self.unit}"


class Facts(dict):
    """name -> Fact for one arch, with the file it came from."""

    def __init__(self, arch: str, path: Path | None, facts: dict[str, Fact], meta: dict):
        super().__init__(facts)
        self.arch = arch
        self.path = path
        self.meta = meta
        self.gpu_sections: dict[str, dict[str, Fact]] = {}  # GPU name -> its facts, as in the file
        self.gpu: str | None = None  # the GPU these facts were selected for (select_gpu)

    def need(self, name: str) -> Fact:
        if name not in self and self.gpu is not None and is_gpu_scoped(name, self):
            where = self.path or "(no file)"
            raise MissingFacts(f"no fact {name!r} for the GPU {self.gpu!r} ({self.arch}) in {where}: it belongs to "
                               f"the GPU's memory system; record it with --gpuprops-record PATH on this GPU, or add "
                               f"a [{GPUS_KEY}.\"{self.gpu}\".{name}] table")
        if name not in self:
            where = self.path or "(no file)"
            raise MissingFacts(f"no fact {name!r} for {self.arch} in {where}; record it with "
                               f"--gpuprops-record PATH on a {self.arch} GPU, or add a [{name}] table")
        return self[name]


def _parse(path: Path) -> Facts:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FactsError(f"cannot read facts file {path}: {exc}") from exc
    arch = data.get("arch")
    if not isinstance(arch, str):
        raise FactsError(f"{path}: top-level key arch = \"sm_XX\" is missing")
    meta = {k: v for k, v in data.items() if not isinstance(v, dict)}
    facts = {}
    for name, t in data.items():
        if not isinstance(t, dict) or name == GPUS_KEY:
            continue
        facts[name] = _parse_fact(path, arch, name, t, meta.get("gpu"))
    out = Facts(arch, path, facts, meta)
    out.gpu_sections = _parse_gpu_sections(path, arch, data.get(GPUS_KEY, {}))
    return out


def _parse_fact(path: Path, arch: str, name: str, t: dict, file_gpu: str | None, gpu: str | None = None) -> Fact:
    if not _NAME.match(name):
        raise FactsError(f"{path}: fact name {name!r} must be lower_snake_case")
    missing = [k for k in ("unit", "method", "source") if not t.get(k)]
    kind = t.get("kind", "measured")
    if kind == "measured" and "value" not in t:
        missing.append("value")
    if kind == "static" and not t.get("by_compiler"):
        missing.append("by_compiler")
    if missing:
        raise FactsError(f"{path}: fact [{name}] lacks {', '.join(missing)}; every fact needs a value, "
                         "unit, method and source")
    scope = "gpu" if gpu is not None else t.get("scope", "arch")
    if scope not in ("arch", "gpu"):
        raise FactsError(f"{path}: fact [{name}] has scope {scope!r}; use \"arch\" or \"gpu\"")
    try:
        return Fact(name=name, arch=arch, unit=t["unit"], method=t["method"], source=t["source"],
                    value=float(t["value"]) if "value" in t else None,
                    tolerance_abs=float(t.get("tolerance_abs", 0.0)),
                    tolerance_rel=float(t.get("tolerance_rel", 0.0)), kind=kind,
                    by_compiler=dict(t.get("by_compiler", {})), scope=scope,
                    gpu=gpu if gpu is not None else (file_gpu if scope == "gpu" else None))
    except (TypeError, ValueError) as exc:
        raise FactsError(f"{path}: fact [{name}] has a non-numeric value or tolerance: {exc}") from exc


# ----------------------------------------------------------------------------------------------
# per-GPU sections

GPUS_KEY = "gpus"
#: Fact names that belong to a GPU's memory system (registered by the test modules that measure
#: them): record mode writes them to the recording GPU's section.
GPU_SCOPED: set[str] = set()


def register_gpu_scoped(*names: str) -> None:
    """Mark facts as the GPU's (memory latencies, bandwidths), not the arch's."""
    for n in names:
        if not _NAME.match(n):
            raise FactsError(f"fact name {n!r} must be lower_snake_case")
    GPU_SCOPED.update(names)


def is_gpu_scoped(name: str, facts: Facts | None = None) -> bool:
    """Registered as the GPU's, or recorded so in ``facts`` (in a GPU section or with scope = "gpu")."""
    if name in GPU_SCOPED:
        return True
    if facts is None:
        return False
    if name in facts and facts[name].scope == "gpu":
        return True
    return any(name in sec for sec in facts.gpu_sections.values())


def _gpu_key(name: str) -> str:
    return " ".join(name.split()).casefold()


def _parse_gpu_sections(path: Path, arch: str, data) -> dict[str, dict[str, Fact]]:
    if not isinstance(data, dict):
        raise FactsError(f"{path}: {GPUS_KEY} must hold tables [{GPUS_KEY}.\"GPU name\".fact_name]")
    out: dict[str, dict[str, Fact]] = {}
    for gpu, section in data.items():
        if not isinstance(section, dict) or not all(isinstance(t, dict) for t in section.values()):
            raise FactsError(f"{path}: [{GPUS_KEY}.\"{gpu}\"] must hold fact tables "
                             f"[{GPUS_KEY}.\"{gpu}\".fact_name]")
        if any(_gpu_key(gpu) == _gpu_key(g) for g in out):
            raise FactsError(f"{path}: two sections name the GPU {gpu!r}")
        out[gpu] = {name: _parse_fact(path, arch, name, t, None, gpu=gpu) for name, t in section.items()}
    return out


def select_gpu(facts: Facts, gpu_name: str) -> Facts:
    """The facts that hold for the GPU named ``gpu_name``: the arch's facts, less the GPU-scoped ones
    measured on another GPU, with the GPU's own section (matched by name, case and spacing aside)
    added on top, overriding arch facts of the same name."""
    chosen = {n: f for n, f in facts.items()
              if not (f.scope == "gpu" and f.gpu is not None and _gpu_key(f.gpu) != _gpu_key(gpu_name))}
    for gpu, section in facts.gpu_sections.items():
        if _gpu_key(gpu) == _gpu_key(gpu_name):
            chosen.update(section)
    out = Facts(facts.arch, facts.path, chosen, facts.meta)
    out.gpu_sections = facts.gpu_sections
    out.gpu = gpu_name
    return out


def split_by_scope(facts: list[Fact], gpu: str | None) -> tuple[list[Fact], dict[str, list[Fact]]]:
    """Split recorded facts into the arch's and each GPU's: GPU-scoped ones (by their scope or by
    :data:`GPU_SCOPED`) go to the GPU they were measured on, else to ``gpu`` (the recording GPU)."""
    arch_facts: list[Fact] = []
    by_gpu: dict[str, list[Fact]] = {}
    for f in facts:
        owner = f.gpu or gpu
        if (f.scope == "gpu" or f.name in GPU_SCOPED) and owner:
            by_gpu.setdefault(owner, []).append(f)
        else:
            arch_facts.append(f)
    return arch_facts, by_gpu


def packaged_archs() -> list[str]:
    return sorted(p.stem for p in PACKAGED_DIR.glob("sm_*.toml"))


def load_facts(arch: str, path: str | Path | None = None, gpu_name: str | None = None) -> Facts:
    """Facts for ``arch``: from ``path`` if given (a file, or a folder of sm_XX.toml), else packaged.
    With ``gpu_name``, the GPU's section adds to and overrides the arch's facts (:func:`select_gpu`)."""
    if gpu_name is not None:
        return select_gpu(load_facts(arch, path), gpu_name)
    if path is not None:
        p = Path(path)
        if p.is_dir():
            p = p / f"{arch}.toml"
        if not p.exists():
            raise MissingFacts(f"facts file {p} does not exist")
        facts = _parse(p)
        if facts.arch != arch:
            raise MissingFacts(f"facts file {p} is for {facts.arch}, but this GPU is {arch}")
        return facts
    p = PACKAGED_DIR / f"{arch}.toml"
    if not p.exists():
        raise MissingFacts(f"no facts recorded for {arch} (packaged: {', '.join(packaged_archs())}); run "
                           f"'pytest hwtests --gpuprops-record {arch}.toml' on a {arch} GPU to record them, "
                           "then review and pass it with --gpuprops-facts")
    return _parse(p)


# ----------------------------------------------------------------------------------------------
# record mode


def provenance(gpu_name: str, driver: str, cuda: str, date: _dt.date | None = None) -> str:
    date = date or _dt.date.today()
    return f"measured on {gpu_name}, driver {driver}, CUDA {cuda}, {date.isoformat()}"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # numpy scalars
        v = v.item()
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            raise FactsError(f"cannot record a non-finite value {v}")
        return repr(round(v, 4) if isinstance(v, float) else v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_value(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    s = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return f'"{s}"'


def dumps(arch: str, facts: list[Fact], meta: dict | None = None) -> str:
    lines = [f"arch = {_toml_value(arch)}"]
    for k, v in (meta or {}).items():
        lines.append(f"{k} = {_toml_value(v)}")
    arch_facts, by_gpu = split_by_scope(facts, (meta or {}).get("gpu"))
    tables = [(f"[{f.name}]", f, f.scope == "gpu") for f in arch_facts]
    tables += [(f"[{GPUS_KEY}.{_toml_value(g)}.{f.name}]", f, False) for g, fs in by_gpu.items() for f in fs]
    for header, f, mark_scope in tables:
        lines += ["", header]
        if mark_scope:  # a GPU's fact with no GPU name to file it under
            lines.append('scope = "gpu"')
        if f.kind != "measured":
            lines.append(f"kind = {_toml_value(f.kind)}")
        if f.value is not None:
            lines.append(f"value = {_toml_value(f.value)}")
        if f.tolerance_abs:
            lines.append(f"tolerance_abs = {_toml_value(f.tolerance_abs)}")
        if f.tolerance_rel:
            lines.append(f"tolerance_rel = {_toml_value(f.tolerance_rel)}")
        if f.by_compiler:
            lines.append(f"by_compiler = {_toml_value(f.by_compiler)}")
        for k in ("unit", "method", "source"):
            lines.append(f"{k} = {_toml_value(getattr(f, k))}")
    return "\n".join(lines) + "\n"


def write_facts(path: str | Path, arch: str, facts: list[Fact], *, force: bool = False, meta: dict | None = None) -> Path:
    """Write a facts file from recorded facts; refuses to overwrite unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise FactsError(f"{p} exists; pass --force to overwrite it (or choose another path)")
    text = dumps(arch, facts, meta)
    _parse_text_check(text, p)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p


def _parse_text_check(text: str, p: Path) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - our emitter is small and tested
        raise FactsError(f"internal error: record for {p} is not valid TOML: {exc}") from exc


def default_tolerance(unit: str, value: float, noise: float) -> tuple[float, float]:
    """Tolerance for a recorded fact: a latency in cycles within 0.5 cycle or 3 noise spreads,
    other quantities within 3 % or 3 noise spreads, whichever is wider."""
    spread = 3 * noise * abs(value)
    if unit == "cycles":
        return max(0.5, round(spread, 3)), 0.0
    return 0.0, max(0.03, round(3 * noise, 4))
