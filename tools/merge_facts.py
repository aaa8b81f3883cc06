"""Merge facts recorded on a GPU (--gpuprops-record) into a facts file, for review.

    python3 tools/merge_facts.py BASE.toml RECORDED.toml -o OUT.toml [--replace REGEX] [--drop REGEX]
    python3 tools/merge_facts.py BASE.toml -o OUT.toml --drop REGEX      # BASE without those facts

Facts the base file lacks are added (with the recorded value, default tolerance and provenance);
facts whose name matches --replace take the recorded value and source but keep the base file's
reviewed tolerance and method; facts whose name matches --drop are removed from the base first (so
that a fact whose method changed is recorded afresh); every other base fact is kept as it is. GPU sections are merged the
same way. The result is validated by reading it back.
"""

import argparse
import dataclasses
import re
import sys

from pytest_gpuprops import facts as F
from pytest_gpuprops import facts_record


def merge(base: F.Facts, recorded: F.Facts | None, replace: str | None, drop: str | None = None) -> list[F.Fact]:
    pattern = re.compile(replace) if replace else None
    dropped = re.compile(drop) if drop else None
    out = {(f.gpu, f.name): f for _, table in base.sections() for f in table.values()}
    if dropped:
        out = {k: f for k, f in out.items() if not dropped.search(f.name)}
    if recorded is None:
        return list(out.values())
    new = [f for _, table in recorded.sections() for f in table.values()]
    for f in new:
        key = (f.gpu, f.name)
        old = out.get(key)
        if old is None:
            out[key] = f
        elif pattern and pattern.search(f.name):
            out[key] = dataclasses.replace(old, value=f.value, source=f.source)
    return list(out.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("recorded", nargs="?", default=None)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--replace", default=None, help="regex of fact names whose value is taken from the recording")
    ap.add_argument("--drop", default=None, help="regex of fact names removed from the base before merging")
    a = ap.parse_args(argv)
    if a.recorded is None and not a.drop:
        ap.error("give a RECORDED.toml to merge, or --drop REGEX to remove facts from BASE")
    base = F._parse(F.Path(a.base))
    recorded = F._parse(F.Path(a.recorded)) if a.recorded else None
    facts = merge(base, recorded, a.replace, a.drop)
    meta = {k: v for k, v in base.meta.items() if k != "arch"}
    facts_record.write_facts(a.out, base.arch, facts, force=True, meta=meta)
    F._parse(F.Path(a.out))
    added = len(facts) - len(base) - sum(len(s) for s in base.gpu_sections.values())
    print(f"{a.out}: {len(facts)} facts ({added:+d} against {a.base}{f', from {a.recorded}' if a.recorded else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
