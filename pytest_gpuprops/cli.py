"""The ``gpuprops`` command for people who read SASS.

    gpuprops compile kernels/regbank_ffma.cu --arch sm_90 -o rb.cubin
    gpuprops sass rb.cubin [--kernel regbank_ffma]
    gpuprops patch rb.cubin --kernel regbank_ffma --at 0480 --regs R8,R10,R12 --reuse A --stall 1 -o p.cubin
    gpuprops facts [--arch sm_90] [--facts PATH]

Offsets are hexadecimal, as ``gpuprops sass`` and nvdisasm print them (``/*0480*/``): ``0480`` and
``0x480`` name the same instruction.

Exit status: 0 when the command did what it was asked; 2 when it refused (a bad argument, a file
that cannot be read or written, a patch that cannot be verified). A refusal prints one message on
stderr (what was wrong, what was expected, what to do) and writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import string
import struct
import sys
import tempfile
from pathlib import Path

from . import __version__, sass
from . import compile as gp_compile
from . import facts as gp_facts

MAKE_CUBIN = "make one with: gpuprops compile kernels/regbank_ffma.cu --arch sm_90 -o rb.cubin"


class Refused(Exception):
    """A bad input: the message says what was wrong, what was expected and what to do."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is a :class:`Refused` (exit 2, one line), not a usage dump."""

    def error(self, message: str):
        raise Refused(f"{message} (see '{self.prog} --help')", prog=self.prog)


# ----------------------------------------------------------------------------------------------
# argument types: each says what it takes


def _int_in(lo: int, hi: int, *, none_ok: bool = False):
    def parse(text: str):
        if none_ok and text.strip().lower() == "none":
            return None
        try:
            v = int(text, 0)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            extra = " or 'none'" if none_ok else ""
            raise argparse.ArgumentTypeError(f"takes an integer {lo}..{hi}{extra}, not {text!r}")
        return v
    return parse


def _offset(text: str) -> int:
    """An instruction offset in hex, as nvdisasm prints it: ``0480``, ``0x480`` or ``/*0480*/``."""
    t = text.strip()
    if t.startswith("/*") and t.endswith("*/"):
        t = t[2:-2].strip()
    t = t.lower().removeprefix("0x")
    if not t or any(ch not in string.hexdigits for ch in t):
        raise argparse.ArgumentTypeError(f"takes instruction offsets in hex, as 'gpuprops sass' prints them "
                                         f"(/*0480*/ -> 0480 or 0x480), not {text!r}")
    v = int(t, 16)
    if v % 16:
        raise argparse.ArgumentTypeError(f"{text} (0x{v:x}) is not an instruction offset; instructions are "
                                         "16 bytes, so offsets end in 0 in hex (0480, 0490, ...)")
    return v


def _reg(tok: str) -> int:
    t = tok.strip().upper()
    if t == "RZ":
        return sass.RZ
    if not t.startswith("R") or not t[1:].isdigit() or int(t[1:]) > 254:
        raise argparse.ArgumentTypeError(f"takes registers like R8 or RZ (R0..R254), not {tok.strip()!r}")
    return int(t[1:])


def _regs(text: str) -> tuple:
    regs = [_reg(t) for t in text.split(",")]
    if len(regs) == 3:
        return (None, *regs)  # sources only; the destination stays
    if len(regs) != 4:
        raise argparse.ArgumentTypeError(f"takes Ra,Rb,Rc or Rd,Ra,Rb,Rc (3 or 4 registers), not {text!r}")
    return tuple(regs)


def _scratch(text: str) -> set[int]:
    return {_reg(t) for t in text.split(",")}


def _reuse(text: str) -> int:
    mask = 0
    for ch in text.upper().replace("-", ""):
        if ch not in "ABC":
            raise argparse.ArgumentTypeError(f"takes slots A, B, C (e.g. AB; '' clears them), not {text!r}")
        mask |= 1 << "ABC".index(ch)
    return mask


def _given(what: str):
    """A string argument that must not be empty: ``-o ''`` is a mistake, never 'the default'."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"takes {what}, not an empty value {text!r}")
        return text
    return parse


def _define(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    if not re.fullmatch(r"[A-Za-z_]\w*", name.strip()):
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE (or NAME) with NAME a C identifier, not {text!r}")
    return name.strip(), value if value else "1"


class _Version(argparse.Action):
    """--version: the package and the tools it found (looked up only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parts = [f"gpuprops {__version__}"]
        for label, get in (("compiler", gp_compile.compiler_version),
                           ("nvdisasm", lambda: f"{sass.nvdisasm_version()} ({sass.find_nvdisasm()})")):
            try:
                parts.append(f"{label}: {get()}")
            except Exception as exc:  # a missing tool is part of the answer, not an error
                parts.append(f"{label}: unavailable ({exc})")
        print("\n".join(parts))
        parser.exit()


# ----------------------------------------------------------------------------------------------
# files


def _read_input(path: str, what: str, hint: str) -> bytes:
    p = Path(path)
    if not p.exists():
        raise Refused(f"{what} {p} does not exist; {hint}")
    if p.is_dir():
        raise Refused(f"{what} {p} is a folder; {hint}")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise Refused(f"cannot read {what} {p}: {exc.strerror or exc}") from exc


def _check_output(out: Path, inputs: list[Path]) -> None:
    """Refuse, before any work, an output that would destroy an input or cannot be written.

    An existing cubin may be replaced; any other existing file (a source, a header, notes) is not."""
    for src in inputs:
        if (out.exists() and src.exists() and os.path.samefile(out, src)) or out.resolve() == src.resolve():
            raise Refused(f"-o {out} is the input {src}; writing there would destroy it. Choose another "
                          f"output name (e.g. -o {src.stem}.out.cubin)")
    if out.is_dir():
        raise Refused(f"-o {out} is a folder; give a file name (e.g. -o {out / 'out.cubin'})")
    if out.exists():
        try:
            with open(out, "rb") as f:
                head = f.read(4)
        except OSError as exc:
            raise Refused(f"-o {out} exists and cannot be read ({exc.strerror}); choose another output name") from exc
        if head != b"\x7fELF":
            raise Refused(f"-o {out} exists and is not a cubin; refusing to overwrite it. Choose another output "
                          "name, or remove the file first")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        raise Refused(f"-o {out}: folder {parent} does not exist; create it first (mkdir -p {parent})")
    if not parent.is_dir():
        raise Refused(f"-o {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise Refused(f"-o {out}: folder {parent} is not writable; choose an output in a folder you can write")


def _write(out: Path, data: bytes) -> None:
    """Write ``data`` to ``out`` whole or not at all (temporary file in the same folder, then rename)."""
    parent = out.parent if str(out.parent) else Path(".")
    tmp = parent / f".{out.name}.tmp{os.getpid()}"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise Refused(f"cannot write {out}: {exc.strerror or exc}; nothing was written") from exc


def cubin_arch(data: bytes) -> str | None:
    """The arch a cubin was built for, with its a/f suffix (``sm_90a``): the SM number from the ELF
    flags, the suffix from the ``-arch`` option ptxas records in ``.note.nv.tkinfo`` (the flags are
    the same for sm_90 and sm_90a). None when the ELF cannot be read."""
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(data))
        flags = elf["e_flags"]
        sm = next((x for x in ((flags >> 8) & 0xFF, flags & 0xFF) if 30 <= x <= 250), None)
        if sm is None:
            return None
        note = elf.get_section_by_name(".note.nv.tkinfo")
        m = re.search(rb"-arch\s+sm_(\d+)([af]?)\b", note.data()) if note is not None else None
        if m and int(m.group(1)) == sm:
            return f"sm_{sm}{m.group(2).decode()}"
        return f"sm_{sm}"
    except Exception:
        return None


_DAMAGED = (struct.error, ValueError, IndexError, KeyError, AttributeError, TypeError, EOFError)


def _load_cubin(path: str) -> sass.Cubin:
    from elftools.common.exceptions import ELFError
    data = _read_input(path, "cubin", f"give a .cubin file ({MAKE_CUBIN})")
    arch = cubin_arch(data)
    if arch and int(re.sub(r"\D", "", arch)) < gp_compile.MIN_SM:
        raise Refused(f"{path} is an {arch} cubin; nvdisasm 13 reads sm_75 and newer only, so its SASS cannot be "
                      "printed or patched. Compile it for sm_75 or newer")
    try:
        return sass.Cubin(data, arch=arch, name=str(path))
    except sass.SassError:
        raise
    except (ELFError, *_DAMAGED) as exc:
        raise Refused(f"{path} is not a complete cubin ({len(data)} bytes; its ELF cannot be read: {exc}); it "
                      "may be truncated or damaged: compile it again") from exc


def _user_names(exc: Exception, path: str) -> str:
    """nvdisasm runs on a temporary copy; name the user's file in its messages instead."""
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    lines = re.sub(tmp + r"/tmp[\w.-]*?\.(?:cubin|bin)\b", lambda _m: path, str(exc)).splitlines()
    if len(lines) > 3:  # nvdisasm repeats itself once per bad instruction
        lines = lines[:3] + [f"... and {len(lines) - 3} more lines like these"]
    return "\n".join(lines)


def _instructions(cubin: sass.Cubin, kernel: str, path: str) -> list[sass.Instruction]:
    try:
        return cubin.instructions(kernel)
    except sass.SassError as exc:
        raise Refused(_user_names(exc, path)) from exc


# ----------------------------------------------------------------------------------------------
# commands


def cmd_compile(a) -> int:
    src = Path(a.source)
    _read_input(a.source, "source", "give one CUDA .cu file (e.g. kernels/ffma.cu)")
    arch = gp_compile.check_arch(a.arch)
    out = Path(a.output) if a.output else Path(f"{src.stem}.{arch}.cubin")
    _check_output(out, [src])
    c = gp_compile.compile_cuda(src, arch, dict(a.define or []), backend=a.backend)
    if not _kernels_of(c.cubin, arch):
        raise Refused(f"{src} defines no kernel (no __global__ function), so its cubin would hold no code to read "
                      f"or patch; {out} was not written. Add a __global__ function (extern \"C\" keeps its name)")
    _write(out, c.cubin)
    print(f"{out}: {len(c.cubin)} bytes, {arch}, {c.compiler}, {'cached' if c.cached else 'compiled'}")
    return 0


def _kernels_of(cubin: bytes, arch: str) -> list[str]:
    try:
        return sorted(sass.Cubin(cubin, arch=arch).kernels)
    except Exception:  # a cubin pyelftools cannot read is not ours to judge here: write it as compiled
        return ["?"]


def cmd_sass(a) -> int:
    cubin = _load_cubin(a.cubin)
    names = [cubin.kernel(a.kernel).name] if a.kernel else sorted(cubin.kernels)
    if not names:
        raise Refused(f"{a.cubin} holds no kernels (no .text.<name> section)")
    for name in names:
        instrs = _instructions(cubin, name, a.cubin)
        k = cubin.kernel(name)
        print(f"// {name}: {k.register_count} registers ({cubin.arch}); control code "
              "[B<wait mask>:R<read sb>:W<write sb>:<Y = yield>:S<stall>]; offsets in hex")
        for ins in instrs:
            print(ins.line())
    return 0


_FIELDS = ("regs", "reuse", "stall", "yield_flag", "wait_mask", "read_barrier", "write_barrier")


def cmd_patch(a) -> int:
    fields = {}
    for name in _FIELDS:
        v = getattr(a, name)
        if v is not None or (name in ("read_barrier", "write_barrier") and getattr(a, name + "_given", False)):
            fields[name] = v
    if not fields:
        raise Refused("nothing to change: give at least one of --regs, --reuse, --stall, --yield, --wait-mask, "
                      "--read-barrier, --write-barrier")
    if fields.get("reuse"):
        fields.setdefault("yield_flag", False)  # reuse flags count only where yield is clear
    cubin = _load_cubin(a.cubin)
    kernel = cubin.kernel(a.kernel).name
    out = Path(a.output)
    _check_output(out, [Path(a.cubin)])
    _instructions(cubin, kernel, a.cubin)
    edits = [sass.Edit(off, **fields) for off in a.at]
    try:
        result = sass.patch(cubin, kernel, edits, scratch=a.scratch)
    except sass.PatchRefused as exc:
        raise Refused(f"refused: {_user_names(exc, a.cubin + ' (patched)')}; nothing was written") from exc
    except sass.SassError as exc:  # nvdisasm cannot read the edited code (e.g. a stall it does not accept there)
        raise Refused(f"refused: the patched code of {kernel} cannot be read back, so the edit cannot be verified "
                      f"({_user_names(exc, a.cubin + ' (patched)')}); nothing was written") from exc
    changed = [(b, x) for b, x in result.changed if (b.lo, b.hi) != (x.lo, x.hi)]
    if not changed:
        raise Refused(f"nothing to change: {kernel} at {', '.join(f'{o:04x}' for o in a.at)} already reads as "
                      f"asked; {out} was not written")
    for before, after in changed:
        print("- " + before.line())
        print("+ " + after.line())
    same = [f"{b.offset:04x}" for b, x in result.changed if (b.lo, b.hi) == (x.lo, x.hi)]
    if same:
        print(f"unchanged (already as asked): {', '.join(same)}")
    _write(out, result.cubin)
    print(f"wrote {out} (verified by disassembly)")
    return 0


def cmd_facts(a) -> int:
    arch = gp_compile.parse_arch(a.arch) if a.arch else None
    if a.facts:
        sets = gp_facts.check_facts_path(a.facts)
        if arch:
            have = [f.arch for f in sets]
            sets = [f for f in sets if f.arch == arch]
            if not sets:
                raise Refused(f"{a.facts} has no facts for {arch} (it has {', '.join(have)})")
    else:
        sets = [gp_facts.load_facts(x) for x in ([arch] if arch else gp_facts.packaged_archs())]
    if a.gpu:
        picked = [f for f in sets if gp_facts.gpu_section_name(f, a.gpu)]
        if not picked:
            have = sorted({g for f in sets for g in f.gpu_sections}) or ["none"]
            raise Refused(f"no facts file here has a section for the GPU {a.gpu!r} (sections: {', '.join(have)}); "
                          "its arch's facts alone: gpuprops facts --arch sm_XX")
        sets = [gp_facts.select_gpu(f, a.gpu) for f in picked]
    if a.fact:
        return _show_fact(sets, a.fact, a.gpu)
    if a.detection:
        print(detection_table(sets))
        return 0
    for f in sets:
        print(f"# {f.arch}{' for ' + f.gpu if f.gpu else ''}: {f.path}")
        print(_facts_table(f.values()))
        print()
        if f.gpu:
            continue
        for gpu, section in f.gpu_sections.items():  # the memory system's and the SKU's facts, per GPU model
            print(f"# {f.arch}, GPU {gpu} (adds to and overrides the arch's for that GPU): {f.path}")
            print(_facts_table(section.values()))
            print()
    return 0


def detection_rows(sets) -> list[tuple[str, str, float, float | None]]:
    """(section, fact, guaranteed detection shift of the SKU's band, same-unit band) for every measured
    fact of ``sets`` and their GPU sections, the weakest first."""
    rows = []
    for f in sets:
        sections = [(f.gpu or "arch", f)] + ([] if f.gpu else list(f.gpu_sections.items()))
        for name, section in sections:
            for x in section.values():
                if x.detection_shift is not None:
                    rows.append((f"{f.arch} {name}", x.name, x.detection_shift, x.same_unit_tolerance_rel))
    return sorted(rows, key=lambda r: -r[2])


def detection_table(sets) -> str:
    """What each fact's bands are sure to catch: the SKU's band on every unit it was set from, and the
    unit's own baseline compare (its same-unit band)."""
    from tabulate import tabulate
    rows = detection_rows(sets)
    return tabulate([(sec, name, f"{d:.1%}", f"{u:.1%}" if u else "its tolerance") for sec, name, d, u in rows],
                    headers=["section", "fact", "SKU band catches on every recorded unit", "same-unit band"])


def _facts_table(facts) -> str:
    """fact, expected, kind, method (60 characters), source (70); and the units measured so far where a
    fact has them (a population fact's units_range)."""
    from tabulate import tabulate
    facts = list(facts)
    headers = ["fact", "expected", "kind", "method", "source"]
    rows = [[x.name, x.expected_text(), x.kind, x.method[:60], x.source[:70]] for x in facts]
    if any(x.units_range for x in facts):
        headers.insert(2, "units so far")
        for row, x in zip(rows, facts):
            row.insert(2, f"{x.units_range[0]:g} .. {x.units_range[1]:g}" if x.units_range else "")
    return tabulate(rows, headers=headers, disable_numparse=True)


def _show_fact(sets, name: str, gpu: str | None) -> int:
    """One fact whole, wherever the facts files have it: the arch's, and each GPU section's."""
    found = []
    for f in sets:
        if name in f:
            found.append((f"{f.arch}{' for ' + f.gpu if f.gpu else ''}", f[name], f.path))
        if not gpu:
            found += [(f"{f.arch}, GPU {g}", s[name], f.path) for g, s in f.gpu_sections.items() if name in s]
    if not found:
        raise Refused(f"no fact {name!r} in {', '.join(str(f.path) for f in sets)}; gpuprops facts lists them")
    for where, x, path in found:
        lines = [f"# {x.name} ({where}): {path}", f"expected:    {x.expected_text()}"]
        if x.units_range:
            lines.append(f"units so far: {x.units_range[0]:g} .. {x.units_range[1]:g} (a unit beyond is flagged "
                         "as a new sample)")
        lines += [f"kind:        {x.kind}", f"method:      {x.method}", f"source:      {x.source}", ""]
        print("\n".join(lines))
    return 0


def cmd_merge(a) -> int:
    """The fleet's reports (one per node, or per run) as one table, with the outliers across them."""
    from . import report, results
    verdicts = []
    incomplete = []
    seen: dict[str, str] = {}
    for path in a.reports:
        try:
            data = results.read_json(Path(path))
            res, meta = results.SessionResults.from_json(data, path)
        except results.ResultsError as exc:
            raise Refused(str(exc)) from None
        same = seen.setdefault(hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest(), path)
        if same != path or a.reports.count(path) > 1:
            again = (f"{path} is given twice" if same == path or os.path.samefile(same, path) else
                     f"{path} is a copy of {same} (the same run: {meta.get('host', '?')}, {meta.get('date', '?')})")
            raise Refused(f"{again}; its GPUs would be counted twice. Give each node's report once")
        why = results.incomplete_reason(meta.get("run"))
        if why:
            incomplete.append(f"{path} ({meta.get('host', '?')}): {why}")
        for v in res.verdicts:
            if v.gpu is not None and not v.gpu.get("host"):
                v.gpu = dict(v.gpu, host=meta.get("host") or path)
        verdicts += res.verdicts
    measured = [v for v in verdicts if v.gpu is not None]
    if incomplete:
        print(f"gpuprops merge: {len(incomplete)} of {len(a.reports)} node(s) INCOMPLETE, not counted as passed:")
        for line in incomplete:
            print(f"  {line}")
        if not measured:
            return 1
    if not measured:
        raise Refused(f"no GPU measurements in {', '.join(a.reports)}: merge needs reports of GPU runs "
                      "(pytest hwtests --gpuprops-report PATH on each node)")
    print(report.gpu_table(measured))
    print(report.summary_line(verdicts))
    outliers, note = results.outliers(measured)
    print(f"gpuprops {note}")
    if outliers:
        print(report.table(outliers))
    return 1 if outliers or incomplete or results.red(verdicts) else 0


def cmd_baselines(a) -> int:
    """The baseline store as a person reads it: each unit, its runs (newest first), whether each was
    accepted, its driver and VBIOS, and the facts it lends; one unit's runs with --unit."""
    from tabulate import tabulate

    from . import baselines
    store = baselines.Store(a.store or baselines.default_dir())
    units = store.units()
    if a.unit:
        units = [u for u in units if u.startswith(a.unit)]
        if not units:
            raise Refused(f"no unit {a.unit!r} in the baseline store {store.root} (units: "
                          f"{', '.join(u[:12] for u in store.units()) or 'none'})")
    if not units:
        print(f"baseline store {store.root}: no unit has run yet (pytest hwtests keeps each GPU's runs here)")
        return 0
    print(f"baseline store {store.root}: {len(units)} unit(s)")
    for uuid in units:
        runs, bad = store.read(uuid)
        base = store.baseline(uuid, runs)
        lent = {id(v) for v in base.verdicts}
        rows = [(r.date, r.meta.get("host", "?"), "yes" if r.accepted else "no", r.meta.get("driver_version", "?"),
                 r.meta.get("vbios_version") or "?", len(r.verdicts), sum(id(v) in lent for v in r.verdicts),
                 r.path.name) for r in (runs if a.unit else runs[:5])]
        name = runs[0].meta.get("name", "?") if runs else "?"
        print(f"\n{uuid} ({name}): {len(runs)} run(s){'' if a.unit or len(runs) <= 5 else ', the newest 5'}; "
              f"baseline: {base.describe()}")
        print(tabulate(rows, headers=["date", "host", "accepted", "driver", "VBIOS", "facts", "in the baseline",
                                      "file"]))
        for path in bad:
            print(f"  not a unit run, never a baseline: {path}")
    return 0


class _BarrierAction(argparse.Action):
    """--read-barrier/--write-barrier: 'none' (None) is a value to set, not 'leave as is'."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuprops", description="compile, read and patch SASS; list GPU facts",
                epilog="Exit status: 0 done, 1 facts that do not hold (merge), 2 refused (the message says why; "
                       "nothing is written).")
    p.add_argument("--version", action=_Version, help="print the version and the compiler and nvdisasm found")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{compile,sass,patch,facts,merge,baselines}")
    c = sub.add_parser("compile", help="CUDA C++ -> cubin for one arch (NVRTC, no GPU needed)")
    c.add_argument("source", type=_given("a CUDA C++ file (.cu)"), help="a CUDA C++ file (.cu)")
    c.add_argument("--arch", required=True, type=_given("an arch name (sm_90)"), help="sm_75 or newer: sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120, ...")
    c.add_argument("-D", "--define", action="append", type=_define, help="NAME=VALUE macro (repeatable)")
    c.add_argument("--backend", default="nvrtc", choices=["nvrtc", "nvcc"])
    c.add_argument("-o", "--output", type=_given("a file name for the cubin"), help="the cubin to write (default: <source>.<arch>.cubin here); an "
                                          "existing file that is not a cubin is never overwritten")
    c.set_defaults(func=cmd_compile)
    s = sub.add_parser("sass", help="print a cubin's SASS with decoded control codes and raw words")
    s.add_argument("cubin", type=_given("a .cubin file"))
    s.add_argument("--kernel", type=_given("a kernel's name ('gpuprops sass' lists them)"))
    s.set_defaults(func=cmd_sass)
    t = sub.add_parser("patch", help="edit registers, reuse and control fields; verified by disassembly")
    t.add_argument("cubin", type=_given("a .cubin file"))
    t.add_argument("--kernel", type=_given("a kernel's name ('gpuprops sass' lists them)"), help="which kernel (needed when the cubin has several)")
    t.add_argument("--at", nargs="+", required=True, type=_offset, metavar="OFFSET",
                   help="instruction offsets in hex, as 'gpuprops sass' prints them: 0480 or 0x480")
    t.add_argument("--regs", type=_regs, help="Ra,Rb,Rc (or Rd,Ra,Rb,Rc) for FFMA R, R, R, R")
    t.add_argument("--reuse", type=_reuse, help="slots to mark .reuse: A, B, C, AB, ... ('' clears)")
    t.add_argument("--stall", type=_int_in(0, 15), help="stall cycles 0..15")
    t.add_argument("--yield", dest="yield_flag", choices=["on", "off"], type=str.lower,
                   help="on prints 'Y' in the control code")
    t.add_argument("--wait-mask", dest="wait_mask", type=_int_in(0, 0x3F),
                   help="scoreboards to wait on, as a bit mask 0..0x3f")
    t.add_argument("--read-barrier", dest="read_barrier", type=_int_in(0, 5, none_ok=True),
                   action=_BarrierAction, help="scoreboard 0..5 to set on read, or none")
    t.add_argument("--write-barrier", dest="write_barrier", type=_int_in(0, 5, none_ok=True),
                   action=_BarrierAction, help="scoreboard 0..5 to set on write, or none")
    t.add_argument("--scratch", type=_scratch, help="registers the patch may write (R5,R6); default: only the "
                                                    "current Rd")
    t.add_argument("-o", "--output", required=True, type=_given("a file name for the patched cubin"), help="the patched cubin (never the input itself)")
    t.set_defaults(func=cmd_patch)
    f = sub.add_parser("facts", help="list the facts per arch")
    f.add_argument("--arch", type=_given("an arch name (sm_90)"), help="one arch (sm_90); default: every packaged one")
    f.add_argument("--facts", type=_given("a facts .toml file or a folder of sm_XX.toml"), help="a facts file or folder of sm_XX.toml instead of the packaged ones")
    f.add_argument("--gpu", type=_given("a GPU model's name, e.g. 'NVIDIA H200'"), help="the facts for one GPU model (its arch's, with its section on top), e.g. "
                                 "'NVIDIA H200'")
    f.add_argument("--fact", type=_given("a fact's name ('gpuprops facts' lists them)"), help="one fact whole: expected, units so far, method and source")
    f.add_argument("--detection", action="store_true",
                   help="the shift each fact's SKU band is sure to catch on every unit recorded, and its same-unit "
                        "band, the weakest first")
    f.set_defaults(func=cmd_facts)
    m = sub.add_parser("merge", help="one table for a fleet's reports (--gpuprops-report JSON), outliers flagged")
    m.add_argument("reports", nargs="+", type=_given("report JSON files (--gpuprops-report)"), help="report JSON files, one per node or run")
    m.set_defaults(func=cmd_merge)
    b = sub.add_parser("baselines", help="the unit baseline store: each GPU unit's runs, accepted or not, and its "
                                         "baseline")
    b.add_argument("--store", type=_given("the baseline store's folder"),
                   help="the store (default $GPUPROPS_BASELINE_DIR or ~/.local/share/gpuprops/baselines)")
    b.add_argument("--unit", type=_given("a GPU UUID or its start, e.g. GPU-c5d47081"),
                   help="one unit (a UUID or its start): every run, not the newest five")
    b.set_defaults(func=cmd_baselines)
    return p


_REFUSED = (Refused, gp_compile.CompileError, gp_compile.ArchError, sass.SassError, gp_facts.FactsError,
            gp_facts.MissingFacts)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 done, 2 refused) instead of raising."""
    parser = build_parser()
    prog = "gpuprops"
    try:
        args = parser.parse_args(argv)
        prog = f"gpuprops {args.cmd}"
        if getattr(args, "yield_flag", None) is not None:
            args.yield_flag = args.yield_flag == "on"
        status = args.func(args)
        sys.stdout.flush()
        return status
    except _REFUSED as exc:
        print(f"{getattr(exc, 'prog', None) or prog}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped reading (gpuprops sass x | head): not an error. Point stdout at
        # /dev/null so that the interpreter's final flush does not complain either.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
