"""What every ``gpuprops`` command shares: :class:`Refused` (a bad input, exit 2, one message) and
the files: an input read or refused by name, an output checked before any work (never an input,
never a file that is not a cubin) and written whole or not at all."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


class Refused(Exception):
    """A bad input: the message says what was wrong, what was expected and what to do."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


def read_input(path: str, what: str, hint: str) -> bytes:
    """The bytes of an input file, or a refusal that names it (missing, a folder, unreadable) and says
    what to give (``hint``)."""
    p = Path(path)
    if not p.exists():
        raise Refused(f"{what} {p} does not exist; {hint}")
    if p.is_dir():
        raise Refused(f"{what} {p} is a folder; {hint}")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise Refused(f"cannot read {what} {p}: {exc.strerror or exc}") from exc


def check_output(out: Path, inputs: list[Path]) -> None:
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


def write_whole(out: Path, data: bytes) -> None:
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
