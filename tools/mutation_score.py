"""Per-module mutation score from mutmut's result files (mutants/pytest_gpuprops/**/*.py.meta; the
sass package's modules are named sass.listing, sass.patching, ...).

    python tools/mutation_score.py [--survivors [--diff]] [--module sass] [--names]
    python tools/mutation_score.py --explain > docs/mutation_survivors.md

``--explain`` lists every surviving and unreached mutant with its change and the reason it
survives, read from tools/mutation_reasons.toml; a survivor with no reason there is printed as
UNEXPLAINED and makes the command exit 1.

Score = killed / (killed + survived + no tests + suspicious): a mutant no test reaches counts
against the score, a timeout counts as killed (the mutant hung a test: it was noticed), and mutants
not yet run are reported separately and left out.
"""

from __future__ import annotations

import argparse
import ast
import collections
import difflib
import fnmatch
import json
from pathlib import Path

from pytest_gpuprops.facts import tomllib  # tomllib, or tomli on Python 3.10

KILLED = {1, 3, 36, 24, -24, 152, 255, 37}
SURVIVED = {0}
NO_TESTS = {5, 33}
SKIPPED = {34}


def classify(code) -> str:
    if code is None:
        return "not run"
    if code in KILLED:
        return "killed"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    if code in SKIPPED:
        return "skipped"
    return "suspicious"


def load(root: Path) -> dict[str, dict[str, int | None]]:
    """{module: {mutant: exit code}}; a module of a package is named package.module (sass.listing)."""
    out = {}
    base = root / "mutants" / "pytest_gpuprops"
    for meta in sorted(base.rglob("*.py.meta")):
        module = meta.relative_to(base).as_posix()[:-len(".py.meta")].replace("/", ".")
        out[module] = json.loads(meta.read_text())["exit_code_by_key"]
    return out


def selected(module: str, wanted: str | None) -> bool:
    """``--module sass`` takes the package's modules too (sass.listing, sass.patching, ...)."""
    return not wanted or module == wanted or module.startswith(wanted + ".")


def mutant_diff(root: Path, module: str, name: str) -> str:
    """The mutant as a diff against the original function, read from mutmut's trampolined copy of the
    module (mutants/pytest_gpuprops/<module>.py), without starting a mutmut process per mutant."""
    path = f"{module.replace('.', '/')}.py"
    source = (root / "mutants" / "pytest_gpuprops" / path).read_text()
    wanted = name.rsplit(".", 1)[-1]
    original = wanted.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (wanted, original):
            found[node.name] = ast.get_source_segment(source, node).replace(node.name, "", 1).splitlines()
    if len(found) != 2:
        return f"(no source found for {name} in mutants/pytest_gpuprops/{path})"
    lines = difflib.unified_diff(found[original], found[wanted], lineterm="", n=1)
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


REASONS = Path(__file__).with_name("mutation_reasons.toml")


def load_reasons(path: Path = REASONS) -> list[dict]:
    """[[reason]] tables: ``mutants`` (names without "pytest_gpuprops.", fnmatch patterns allowed),
    ``kind`` (equivalent, unreachable, gap, killed by hand) and ``why``. The first reason that matches
    a name wins."""
    reasons = tomllib.loads(path.read_text())["reason"]
    kinds = ("equivalent", "unreachable", "gap", "killed by hand")
    for r in reasons:
        if set(r) != {"mutants", "kind", "why"} or r["kind"] not in kinds:
            raise SystemExit(f"{path}: each [[reason]] needs mutants, kind (one of {', '.join(kinds)}) "
                             f"and why; got {sorted(r)} with kind {r.get('kind')!r}")
    return reasons


def reason_for(name: str, reasons: list[dict]) -> dict | None:
    short = name.removeprefix("pytest_gpuprops.")
    return next((r for r in reasons if any(fnmatch.fnmatchcase(short, pat) for pat in r["mutants"])), None)


def short_change(diff: str) -> str:
    """The first removed and added line of a mutant's diff, for one table cell."""
    old = next((ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-")), "")
    new = next((ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+")), "")
    cell = f"`{old}` → `{new}`" if new else f"`{old}` → (removed)"
    return cell.replace("|", "\\|")


def explain(root: Path, data: dict, module: str | None) -> int:
    reasons = load_reasons()
    unexplained = 0
    for mod, codes in data.items():
        if not selected(mod, module):
            continue
        names = [n for n, c in sorted(codes.items()) if classify(c) in ("survived", "no tests", "suspicious")]
        if not names:
            continue
        print(f"\n### {mod} ({len(names)})\n")
        print("| mutant | change | kind | why it survives |")
        print("| --- | --- | --- | --- |")
        for name in names:
            r = reason_for(name, reasons)
            kind, why = (r["kind"], r["why"]) if r else ("UNEXPLAINED", "")
            unexplained += r is None
            label = name.removeprefix(f"pytest_gpuprops.{mod}.").replace("__mutmut_", " #")
            if classify(codes[name]) != "survived":
                kind = f"{kind} ({classify(codes[name])})"
            print(f"| {label} | {short_change(mutant_diff(root, mod, name))} | {kind} | {why} |")
    if unexplained:
        print(f"\n{unexplained} UNEXPLAINED")
    return 1 if unexplained else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=".")
    p.add_argument("--survivors", action="store_true", help="list surviving and unreached mutants")
    p.add_argument("--module", help="only this module (sass, compile, ...)")
    p.add_argument("--diff", action="store_true", help="with --survivors: each mutant's change as a diff")
    p.add_argument("--names", action="store_true", help="print only the surviving mutants' names, one line")
    p.add_argument("--markdown", action="store_true", help="the per-module table as Markdown (docs/testing.md)")
    p.add_argument("--explain", action="store_true",
                   help="every survivor with its change and its reason from tools/mutation_reasons.toml (Markdown)")
    a = p.parse_args(argv)
    data = load(Path(a.root))
    if a.explain:
        return explain(Path(a.root), data, a.module)
    if a.names:  # for `mutmut run NAMES...` (tools/mutation.sh's second pass)
        print(" ".join(name for module, codes in data.items() if selected(module, a.module)
                       for name, code in sorted(codes.items()) if classify(code) == "survived"))
        return 0
    total = collections.Counter()
    rows = []
    for module, codes in data.items():
        if not selected(module, a.module):
            continue
        c = collections.Counter(classify(v) for v in codes.values())
        total.update(c)
        judged = c["killed"] + c["survived"] + c["no tests"] + c["suspicious"]
        score = f"{100 * c['killed'] / judged:5.1f} %" if judged else "    -  "
        rows.append(f"{module:<12} {c['killed']:>5}/{judged:<5} {score}   survived {c['survived']:>4}  no tests "
                    f"{c['no tests']:>4}  suspicious {c['suspicious']:>3}  not run {c['not run']:>4}")
    judged = total["killed"] + total["survived"] + total["no tests"] + total["suspicious"]
    if a.markdown:
        print("| module | mutants | killed / judged | score | survived | no test reaches it | not run |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for module, codes in data.items():
            if not selected(module, a.module):
                continue
            c = collections.Counter(classify(v) for v in codes.values())
            j = c["killed"] + c["survived"] + c["no tests"] + c["suspicious"]
            score = f"{100 * c['killed'] / j:.1f} %" if j else "-"
            print(f"| {module} | {len(codes)} | {c['killed']} / {j} | {score} | {c['survived']} | {c['no tests']} | "
                  f"{c['not run']} |")
        if judged:
            print(f"| **all** | {sum(len(c) for c in data.values())} | {total['killed']} / {judged} | "
                  f"**{100 * total['killed'] / judged:.1f} %** | {total['survived']} | {total['no tests']} | "
                  f"{total['not run']} |")
        return 0
    print(f"{'module':<12} {'killed/judged':>11}  score")
    print("\n".join(rows))
    if judged:
        print(f"{'all':<12} {total['killed']:>5}/{judged:<5} {100 * total['killed'] / judged:5.1f} %   "
              f"(not run: {total['not run']})")
    if a.survivors:
        for module, codes in data.items():
            if not selected(module, a.module):
                continue
            for name, code in sorted(codes.items()):
                if classify(code) in ("survived", "no tests", "suspicious"):
                    print(f"{classify(code):<10} {name}")
                    if a.diff:
                        print(mutant_diff(Path(a.root), module, name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
