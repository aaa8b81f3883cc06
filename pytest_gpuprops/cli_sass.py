"""``gpuprops compile``, ``gpuprops sass`` and ``gpuprops patch``: CUDA C++ to a cubin, a cubin's SASS
with decoded control codes, and its instructions edited, verified by disassembly. A cubin is read
with its arch (:func:`cubin_arch`) and refused by name when it is too old, damaged or not a cubin."""

from __future__ import annotations

import io
import re
import struct
import tempfile
from pathlib import Path

from . import compile as gp_compile
from . import sass
from .cli_files import Refused, check_output, read_input, write_whole

MAKE_CUBIN = "make one with: gpuprops compile kernels/regbank_ffma.cu --arch sm_90 -o rb.cubin"


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
    data = read_input(path, "cubin", f"give a .cubin file ({MAKE_CUBIN})")
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
    read_input(a.source, "source", "give one CUDA .cu file (e.g. kernels/ffma.cu)")
    arch = gp_compile.check_arch(a.arch)
    out = Path(a.output) if a.output else Path(f"{src.stem}.{arch}.cubin")
    check_output(out, [src])
    c = gp_compile.compile_cuda(src, arch, dict(a.define or []), backend=a.backend)
    if not _kernels_of(c.cubin, arch):
        raise Refused(f"{src} defines no kernel (no __global__ function), so its cubin would hold no code to read "
                      f"or patch; {out} was not written. Add a __global__ function (extern \"C\" keeps its name)")
    write_whole(out, c.cubin)
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
    check_output(out, [Path(a.cubin)])
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
    write_whole(out, result.cubin)
    print(f"wrote {out} (verified by disassembly)")
    return 0
