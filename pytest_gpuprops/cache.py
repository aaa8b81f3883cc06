"""On-disk cache helpers shared by the sass layer (and usable by compile): one root, atomic entries.

Every entry lives under the cubin cache's root (:func:`pytest_gpuprops.compile.default_cache_dir`,
``$GPUPROPS_CACHE_DIR``) in its own subfolder. An entry is written to a temporary file in the same
folder and moved into place with ``os.replace``, so a reader sees either the old entry, the new one
or none, never half of one; files are mode 0644. A JSON entry carries the SHA-256 of its payload: an
entry that cannot be read, does not parse, or does not match its checksum is treated as absent (and
the caller rewrites it), never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

#: Bump when the layout or meaning of any JSON entry changes; old entries then miss.
FORMAT = 1


def root() -> Path:
    """The cache root: the folder compile.py keeps cubins in (``$GPUPROPS_CACHE_DIR`` where set)."""
    from .compile import default_cache_dir
    return default_cache_dir()


def subdir(name: str) -> Path:
    return root() / name


def digest(*parts: bytes | str) -> str:
    """SHA-256 over length-prefixed parts (so ("ab", "c") and ("a", "bc") differ), as hex."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + os.replace), mode 0644.

    A failure to write (read-only or full disk) is not an error: the cache is an optimisation."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


def _dump(payload) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def write_json(path: Path, payload) -> None:
    """Store ``payload`` (JSON-serialisable) with its checksum: one header line, then the payload."""
    body = _dump(payload)
    header = {"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest()}
    atomic_write(path, json.dumps(header).encode() + b"\n" + body)


def read_json(path: Path):
    """The payload stored by :func:`write_json`, or None where the entry is missing, unreadable,
    of another format, or does not match its checksum."""
    try:
        data = path.read_bytes()
        head, sep, body = data.partition(b"\n")
        header = json.loads(head)
        if not sep or not isinstance(header, dict) or header.get("format") != FORMAT:
            return None
        if header.get("sha256") != hashlib.sha256(body).hexdigest():
            return None
        return json.loads(body)
    except (OSError, ValueError, TypeError):
        return None
