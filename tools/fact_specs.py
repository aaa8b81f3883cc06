"""The facts declared as fact specs (pytest_gpuprops/factspec.py), as the docs list them: one row per
fact with its scope, kernel and defines, launch, region (the unit's opcodes x steps, and the shape),
statistic, divisor and unit; or one fact whole, its method included.

    python3 tools/fact_specs.py                    # the Markdown table of every spec
    python3 tools/fact_specs.py --fact NAME        # one fact's spec whole

The specs live in the ``FACTS`` list of each hwtests/specs_*.py module that has one (:func:`spec_modules`).
"""

import argparse
import importlib
import sys
from pathlib import Path

from pytest_gpuprops import factspec

HWTESTS = Path(__file__).resolve().parent.parent / "hwtests"


def spec_modules() -> list[str]:
    """The hwtests/specs_*.py modules that declare facts (a ``FACTS`` list): found, not listed by hand,
    so a new spec module is in the fact list the moment it exists."""
    if str(HWTESTS) not in sys.path:
        sys.path.insert(0, str(HWTESTS))
    names = sorted(p.stem for p in HWTESTS.glob("specs_*.py"))
    return [n for n in names if isinstance(getattr(importlib.import_module(n), "FACTS", None), list)]


def all_facts() -> list[factspec.FactSpec]:
    facts = [f for name in spec_modules() for f in importlib.import_module(name).FACTS]
    factspec.by_name(facts)  # a name declared in two modules is refused
    return facts


def describe(fact: factspec.FactSpec) -> str:
    row = fact.row()
    width = max(len(k) for k in row) + 1
    lines = [f"{k + ':':<{width}} {v}" for k, v in row.items()]
    return "\n".join(lines + [f"{'method:':<{width}} {fact.method}"]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fact", help="one fact's spec whole")
    a = ap.parse_args(argv)
    facts = all_facts()
    if a.fact is None:
        sys.stdout.write(factspec.markdown(facts))
        return 0
    by_name = factspec.by_name(facts)
    if a.fact not in by_name:
        print(f"no fact spec {a.fact!r}; {len(by_name)} facts are specs: python3 tools/fact_specs.py lists them",
              file=sys.stderr)
        return 2
    sys.stdout.write(describe(by_name[a.fact]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
