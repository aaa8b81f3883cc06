"""facts layer: expected values per architecture, as data with provenance.

One TOML file per arch (``pytest_gpuprops/facts/sm_90.toml``); each table is a fact::

    [lds_latency_cycles]
    value = 30.0
    tolerance_abs = 0.5        # and/or tolerance_rel = 0.02; the larger applies; one is required
                               # (tolerance_abs = 0 for a fact that must hold exactly)
    unit = "cycles"
    method = "pointer chase, one warp, ..."
    source = "measured on NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, 2026-11-21"

Static schedule facts hold what a compiler does, so they carry values per compiler version::

    [hmma_16816_f32_dependent_spacing_cycles]
    kind = "static"
    by_compiler = { "nvrtc 13.5" = 24 }

Every problem in a file (a missing or negative tolerance, a non-finite value, an unknown key) is
refused with the file, the fact and what is expected (facts_schema.py says what a table may hold);
the plugin checks ``--gpuprops-facts`` once at start-up, so a bad file is one usage error, not a
failure per test.

Memory latencies and bandwidths belong to the GPU, not to its SM's arch (an H100 and an H200 share
the SM, not the memory system). Per-GPU sections, selected by the GPU's name, add to or override the
arch's facts (see :func:`select_gpu`)::

    [gpus."NVIDIA H100 80GB HBM3".dram_latency_cycles]
    value = 800.0
    ...

An arch-level table may say ``scope = "gpu"``: a memory-system fact measured on the file's ``gpu``;
it is not applied to another GPU. Record mode (facts_record.py) writes such facts, and the names
registered with :func:`register_gpu_scoped`, to the recording GPU's section.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
from pathlib import Path

from .compile import ArchError, parse_arch
from .facts_schema import NAME, SCHEMA_HINT, fact_problems

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore

PACKAGED_DIR = Path(__file__).parent / "facts"

#: TOML text -> its parsed document, pickled: the packaged sm_90.toml is ~250 kB, ~30 ms to parse with
#: tomllib and ~1 ms to unpickle, and a process (a pytest session, the plugin's tests) reads it again
#: and again. Keyed by the whole text, so an edited file is parsed afresh; each caller gets its own copy.
_TOML_MEMO: dict[str, bytes] = {}
_TOML_MEMO_MAX = 16
_toml_memo_lock = threading.Lock()


def _toml_loads(text: str) -> dict:
    """``tomllib.loads(text)``, from the memo when this text was parsed before (a new copy each call)."""
    with _toml_memo_lock:
        kept = _TOML_MEMO.get(text)
    if kept is not None:
        return pickle.loads(kept)
    data = tomllib.loads(text)
    with _toml_memo_lock:
        if len(_TOML_MEMO) >= _TOML_MEMO_MAX:
            _TOML_MEMO.pop(next(iter(_TOML_MEMO)))
        _TOML_MEMO[text] = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def clear_memo() -> None:
    """Forget the TOML documents parsed before (a forked process starts with them)."""
    with _toml_memo_lock:
        _TOML_MEMO.clear()


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
    #: a fact that differs by unit: the lowest and highest value the units measured so far read
    #: (value and tolerance come from it, tools/population_fact.py); a unit beyond it is a new sample
    units_range: tuple[float, float] | None = None
    #: the band within which the same unit repeats the fact from one process to the next, as a
    #: fraction of the unit's own earlier reading (its baseline): measured per fact on several units
    #: (tools/same_unit_bands.py), much tighter than the SKU's band, which must hold every unit
    same_unit_tolerance_rel: float | None = None

    @property
    def tolerance(self) -> float:
        return max(self.tolerance_abs, abs(self.value or 0.0) * self.tolerance_rel)

    def accepts(self, measured: float) -> bool:
        return self.value is not None and abs(measured - self.value) <= self.tolerance + 1e-12

    @property
    def detection_shift(self) -> float | None:
        """The smallest relative shift that takes every unit recorded (``units_range``, else the value)
        out of the band, either way: what the SKU's band is guaranteed to catch on any unit it was
        set from. The unit at the bottom of the range must rise past value + tolerance, the one at
        the top fall past value - tolerance. None for a static fact or a zero value."""
        if self.kind != "measured" or not self.value:
            return None
        lo, hi = self.units_range or (self.value, self.value)
        if not lo or not hi:
            return None
        return max((self.value + self.tolerance - lo) / abs(lo), (hi - (self.value - self.tolerance)) / abs(hi))

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

    def sections(self) -> list[tuple[str, dict[str, Fact]]]:
        """(section, its facts) of this file: the arch's ("arch") and each GPU model's, as in the file; for
        facts selected for a GPU (:func:`select_gpu`), that GPU's one table, its section already merged in."""
        if self.gpu:
            return [(self.gpu, self)]
        return [("arch", self), *self.gpu_sections.items()]

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


def _validate(data: dict, path: Path) -> Facts:
    """A parsed TOML document as Facts, or FactsError naming the file, the fact and every problem."""
    arch = data.get("arch")
    if not isinstance(arch, str):
        raise FactsError(f'{path}: top-level key arch = "sm_XX" is missing ({SCHEMA_HINT})')
    try:
        arch = parse_arch(arch)
    except ArchError as exc:
        raise FactsError(f"{path}: top-level arch: {exc}") from exc
    meta = {k: v for k, v in data.items() if not isinstance(v, dict)}
    facts, problems = {}, []
    for name, t in data.items():
        if not isinstance(t, dict) or name == GPUS_KEY:
            continue
        if not NAME.match(name):
            problems.append(f"fact name {name!r} must be lower_snake_case (a-z, 0-9, _)")
            continue
        mine = fact_problems(name, t)
        if mine:
            problems += [f"fact [{name}] {p}" for p in mine]
            continue
        facts[name] = _parse_fact(path, arch, name, t, meta.get("gpu"))
    if problems:
        raise FactsError(f"{path}: " + ("\n  ".join(["", *problems]) if len(problems) > 1 else problems[0])
                         + f"\n  ({SCHEMA_HINT})")
    out = Facts(arch, path, facts, meta)
    out.gpu_sections = _parse_gpu_sections(path, arch, data.get(GPUS_KEY, {}))
    return out


def _parse_fact(path: Path, arch: str, name: str, t: dict, file_gpu: str | None, gpu: str | None = None) -> Fact:
    """One fact table that _fact_problems found nothing wrong with, as a Fact."""
    kind = t.get("kind", "measured")
    scope = "gpu" if gpu is not None else t.get("scope", "arch")
    if scope not in ("arch", "gpu"):
        raise FactsError(f"{path}: fact [{name}] has scope {scope!r}; use \"arch\" or \"gpu\"")
    try:
        return Fact(name=name, arch=arch, unit=t["unit"], method=t["method"], source=t["source"],
                    value=float(t["value"]) if "value" in t else None,
                    tolerance_abs=float(t.get("tolerance_abs", 0.0)),
                    tolerance_rel=float(t.get("tolerance_rel", 0.0)), kind=kind,
                    by_compiler=dict(t.get("by_compiler", {})), scope=scope,
                    gpu=gpu if gpu is not None else (file_gpu if scope == "gpu" else None),
                    units_range=tuple(float(v) for v in t["units_range"]) if "units_range" in t else None,
                    same_unit_tolerance_rel=(float(t["same_unit_tolerance_rel"]) if "same_unit_tolerance_rel" in t
                                             else None))
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
        if not NAME.match(n):
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
        problems = [f"fact [{GPUS_KEY}.\"{gpu}\".{name}] {p}" for name, t in section.items()
                    for p in (fact_problems(name, t) if NAME.match(name) else
                              ["name must be lower_snake_case (a-z, 0-9, _)"])]
        if problems:
            raise FactsError(f"{path}: " + "\n  ".join(problems) + f"\n  ({SCHEMA_HINT})")
        out[gpu] = {name: _parse_fact(path, arch, name, t, None, gpu=gpu) for name, t in section.items()}
    return out


def gpu_section_name(facts: Facts, gpu_name: str) -> str | None:
    """The name of ``facts``' section for the GPU ``gpu_name`` (case and spacing aside), or None."""
    return next((g for g in facts.gpu_sections if _gpu_key(g) == _gpu_key(gpu_name)), None)


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


def _parse(path: Path) -> Facts:
    try:
        data = _toml_loads(path.read_text(encoding="utf-8"))
    except IsADirectoryError as exc:
        raise FactsError(f"facts file {path} is a folder; pass a .toml file or a folder of sm_XX.toml") from exc
    except UnicodeDecodeError as exc:
        raise FactsError(f"facts file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start}): a facts file is TOML saved as UTF-8 ({SCHEMA_HINT})") from None
    except OSError as exc:
        raise FactsError(f"cannot read facts file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise FactsError(f"cannot read facts file {path}: {exc}") from exc
    return _validate(data, path)


def load_file(path: str | Path) -> Facts:
    """One facts file, validated, whatever arch it is for."""
    p = Path(path)
    if not p.exists():
        raise FactsError(f"facts file {p} does not exist")
    return _parse(p)


def check_facts_path(path: str | Path) -> list[Facts]:
    """Validate what ``--gpuprops-facts`` names before anything runs: a facts file, or a folder of
    sm_XX.toml files each holding its own arch. Raises FactsError saying what to fix."""
    p = Path(path)
    if not p.exists():
        raise FactsError(f"facts path {p} does not exist; pass a facts .toml file or a folder of sm_XX.toml "
                         "(gpuprops facts lists the packaged ones)")
    if not p.is_dir():
        return [_holding_facts(_parse(p))]
    files = sorted(p.glob("sm_*.toml"))
    if not files:
        raise FactsError(f"facts folder {p} holds no sm_XX.toml files (found: "
                         f"{', '.join(sorted(x.name for x in p.iterdir())[:8]) or 'nothing'})")
    out = []
    for f in files:
        facts = _parse(f)
        if facts.arch != f.stem:
            raise FactsError(f"{f}: arch = {facts.arch!r}, but the file is named {f.name}; in a folder each "
                             "file must be named for its arch (rename it, or fix arch)")
        out.append(_holding_facts(facts))
    return out


def _holding_facts(facts: Facts) -> Facts:
    """A facts file given to check against must hold a fact: one without any would skip every test."""
    if not facts and not any(facts.gpu_sections.values()):
        raise FactsError(f"facts file {facts.path} holds no facts (arch = {facts.arch!r} and no [fact] table), so "
                         f"nothing would be checked; add the facts ({SCHEMA_HINT}) or record them with "
                         f"--gpuprops-record {facts.arch}.toml on a {facts.arch} GPU")
    return facts


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
            f = p / f"{arch}.toml"
            if not f.exists():
                have = ", ".join(sorted(x.stem for x in p.glob("sm_*.toml"))) or "none"
                raise MissingFacts(f"no facts for {arch} in folder {p} (it has: {have}); record them with "
                                   f"--gpuprops-record {p / (arch + '.toml')} on a {arch} GPU")
            p = f
        if not p.exists():
            raise MissingFacts(f"facts file {p} does not exist")
        facts = _parse(p)
        if facts.arch != arch:
            raise MissingFacts(f"facts file {p} is for {facts.arch}, not {arch}; to check several archs pass a folder of "
                               "sm_XX.toml files")
        return facts
    p = PACKAGED_DIR / f"{arch}.toml"
    if not p.exists():
        raise MissingFacts(f"no facts recorded for {arch} (packaged: {', '.join(packaged_archs())}); run "
                           f"'pytest hwtests --gpuprops-record {arch}.toml' on a {arch} GPU to record them, "
                           "then review and pass it with --gpuprops-facts")
    return _parse(p)


def loads(text: str, path: Path) -> Facts:
    """A facts document held as text (a record about to be written to ``path``), validated as a file
    is: what is written must load again."""
    try:
        data = _toml_loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FactsError(f"internal error: record for {path} is not valid TOML: {exc}") from exc
    return _validate(data, path)
