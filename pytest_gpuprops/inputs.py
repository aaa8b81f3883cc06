"""Start-up checks of what a user hands the plugin beyond each option's own type: the files a run
will write (never one that is not an earlier gpuprops report), the environment variables of
docs/reference.md, and whether a facts file given with ``--gpuprops-facts`` can be checked at all by
the tests selected.

Every check raises :class:`InputError` with one line: what was wrong, what was expected, what to do.
startup.py turns it into pytest's usage error (exit status 4) before any test runs.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path

from . import facts as gp_facts
from . import results


class InputError(Exception):
    """A bad input: the message says what was wrong, what was expected and what to do."""


# ----------------------------------------------------------------------------------------------
# files the run writes

#: the first line of every Markdown report (report_files.markdown)
MARKDOWN_HEAD = "# gpuprops report:"


def is_report_json(path: Path) -> bool:
    """Whether ``path`` holds a report gpuprops wrote (``"schema": "gpuprops-results/1"``)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("schema") == results.SCHEMA


def is_report_markdown(path: Path) -> bool:
    """Whether ``path`` holds a Markdown report gpuprops wrote (its first line is the report's heading)."""
    try:
        with open(path, "rb") as f:
            head = f.readline(200)
    except OSError:
        return False
    return head.startswith(MARKDOWN_HEAD.encode())


def _read_only(p: Path) -> bool:
    try:
        mode = p.stat().st_mode
    except OSError:
        return False
    return not (mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) or not os.access(p, os.W_OK)


def check_report_target(option: str, path: str, force: bool) -> None:
    """``--gpuprops-report PATH`` writes PATH (JSON) and its Markdown twin beside it: refuse a path
    whose twin is itself, and any existing file that is not an earlier gpuprops report (unless
    ``force``), or that is read-only."""
    p = Path(path)
    md = p.with_suffix(".md")
    if p.suffix.lower() == ".md":
        raise InputError(f"{option} {path}: the JSON report and its Markdown twin would both be {path}; give the "
                         f"JSON's path (e.g. {p.with_suffix('.json')}), the Markdown goes beside it")
    for target, what, ours in ((p, "the JSON report", is_report_json), (md, "its Markdown twin", is_report_markdown)):
        if not target.exists() or target.is_dir():
            continue
        if _read_only(target):
            raise InputError(f"{option} {path}: {what} {target} exists and is read-only; it is not replaced. Make it "
                             f"writable (chmod u+w {target}) or choose another report path")
        if not force and not ours(target):
            raise InputError(f"{option} {path}: {what} {target} exists and is not a gpuprops report; refusing to "
                             "overwrite it. Choose another report path, or pass --force to replace it")


def check_distinct_outputs(outputs: Iterable[tuple[str, str]]) -> None:
    """The files one run writes (report, its twin, record) must be different files."""
    seen: dict[Path, str] = {}
    for option, path in outputs:
        key = Path(os.path.abspath(path))
        if key in seen and seen[key] != option:
            raise InputError(f"{option} {path} and {seen[key]} would write the same file; give each its own path")
        seen.setdefault(key, f"{option} {path}")


# ----------------------------------------------------------------------------------------------
# environment variables (docs/reference.md, "Environment variables")


def _tool_says(path: str) -> str:
    """What ``path --version`` prints (stdout and stderr), or why it could not be run."""
    try:
        r = subprocess.run([path, "--version"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "(no answer within 30 s)"
    except OSError as exc:
        return f"({exc.strerror or exc})"
    return (r.stdout + r.stderr).decode("utf-8", "replace")


def check_tool(var: str, banner: str, name: str, hint: str) -> None:
    """A variable naming a tool must name an executable that says it is that tool (``--version``)."""
    tool = os.environ.get(var)
    if not tool:
        return
    p = Path(tool)
    if not p.is_file() or not os.access(tool, os.X_OK):
        why = "no such file" if not p.exists() else "a folder" if p.is_dir() else "no permission to execute it"
        raise InputError(f"{var}={tool} is not an executable file ({why}); point it at {name}, or {hint}")
    said = _tool_says(tool)
    if not re.search(banner, said, re.IGNORECASE):
        first = next((line.strip() for line in said.splitlines() if line.strip()), "nothing")
        raise InputError(f"{var}={tool} is not {name}: '{p.name} --version' printed {first[:80]!r}; point it at "
                         f"{name}, or {hint}")


def check_fresh_draws() -> None:
    v = os.environ.get("GPUPROPS_FRESH_DRAWS")
    if v is not None and v not in ("", "0", "1"):
        raise InputError(f"GPUPROPS_FRESH_DRAWS={v!r}: expected 1 (the GPU tests draw new cases) or 0/unset (the "
                         "same cases on every run)")


def check_plant_no_peer() -> None:
    v = os.environ.get("GPUPROPS_PLANT_NO_PEER")
    if v is not None and v not in ("", "0", "1"):
        raise InputError(f"GPUPROPS_PLANT_NO_PEER={v!r}: expected 1 (test-only: the node's pairs run with peer access "
                         "off, as a pair forced through the host) or 0/unset (a real run)")


def known_fact_names(facts_path: str | None) -> set[str]:
    """Every fact name of the facts checked against: ``--gpuprops-facts``, else every packaged arch's,
    GPU sections included."""
    sets = (gp_facts.check_facts_path(facts_path) if facts_path else
            [gp_facts.load_facts(a) for a in gp_facts.packaged_archs()])
    names: set[str] = set()
    for f in sets:
        names.update(f)
        for section in f.gpu_sections.values():
            names.update(section)
    return names


def check_plant_shift(plant: tuple[int, str, float] | None, text: str | None, facts_path: str | None) -> None:
    """GPUPROPS_PLANT_SHIFT must name a fact the run checks against, or it plants nothing."""
    if plant is None:
        return
    names = known_fact_names(facts_path)
    if plant[1] not in names:
        near = difflib.get_close_matches(plant[1], sorted(names), n=1)
        where = f"in {facts_path}" if facts_path else "among the packaged facts"
        raise InputError(f"GPUPROPS_PLANT_SHIFT={text!r} names fact {plant[1]!r}, which is not {where}"
                         + (f" (did you mean {near[0]!r}?)" if near else "")
                         + "; expected <gpu index>:<fact>:<delta> with a fact 'gpuprops facts' lists, or unset it")


def check_lock_dir() -> None:
    lock = os.environ.get("GPUPROPS_LOCK_DIR")
    if lock and not Path(lock).is_dir():
        raise InputError(f"GPUPROPS_LOCK_DIR={lock} is not a folder; point it at a folder every process "
                         "measuring on this machine can write (default: the system temp folder)")
    if lock and not os.access(lock, os.W_OK | os.X_OK):
        raise InputError(f"GPUPROPS_LOCK_DIR={lock} is not writable; point it at a folder every process measuring "
                         "on this machine can write (default: the system temp folder)")


# ----------------------------------------------------------------------------------------------
# a facts file that the selected tests cannot check

_ARCH_PARAM = re.compile(r"^sm_\d+[af]?$")


def static_arch(params: dict) -> str | None:
    """The arch a compile-time test checks, from its ``arch`` parameter (None when it has none)."""
    arch = params.get("arch")
    return arch if isinstance(arch, str) and _ARCH_PARAM.match(arch) else None


def check_facts_match(facts_path: str, static_archs: set[str | None], gpu_archs: set[str] | None,
                      gpu_note: str) -> None:
    """``--gpuprops-facts`` must hold facts for at least one arch the selected tests check, or every
    fact test would skip (a green run that checked nothing). ``static_archs``: the arch of each
    selected compile-time test (None where it cannot be told); ``gpu_archs``: the GPU(s)' archs where
    GPU tests are selected and a GPU can be used, an empty set where none can, None where unknown."""
    if None in static_archs or gpu_archs is None:
        return
    asked = static_archs | gpu_archs
    if not asked:
        return
    have = [f.arch for f in gp_facts.check_facts_path(facts_path)]
    if set(have) & asked:
        return
    raise InputError(f"--gpuprops-facts {facts_path} holds facts for {', '.join(have)}, and the selected tests check "
                     f"{', '.join(sorted(asked))}{gpu_note}: no fact would be checked, every one would skip. Pass the "
                     "facts for one of those archs, or a folder of sm_XX.toml (gpuprops facts lists the packaged ones)")


#: the skip reasons of facts.load_facts for a facts file (or folder) of another arch
_OTHER_ARCH = re.compile(r"facts file .* is for \S+, not (sm_\w+)|no facts for (sm_\w+) in folder ")


def facts_matched_nothing(facts_path: str, verdicts) -> str | None:
    """At the end of a run (where the tests were collected elsewhere: xdist's workers): a sentence
    when no fact was checked and tests skipped because ``--gpuprops-facts`` is for another arch;
    None otherwise."""
    from .assertions import SKIPPED
    if any(v.kind != "test" for v in verdicts):
        return None
    asked = set()
    for v in verdicts:
        m = _OTHER_ARCH.search(v.measured_text) if v.status == SKIPPED else None
        if m:
            asked.add(m.group(1) or m.group(2))
    if not asked:
        return None
    have = [f.arch for f in gp_facts.check_facts_path(facts_path)]
    return (f"--gpuprops-facts {facts_path} holds facts for {', '.join(have)}, and the tests that ran check "
            f"{', '.join(sorted(asked))}: no fact was checked, every one skipped. Pass the facts for one of those "
            "archs, or a folder of sm_XX.toml (gpuprops facts lists the packaged ones)")
