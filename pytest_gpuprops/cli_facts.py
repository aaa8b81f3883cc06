"""``gpuprops facts``: the facts per arch and per GPU model as tables, one fact whole (``--fact``),
and what each fact's bands are sure to catch (``--detection``)."""

from __future__ import annotations

from . import compile as gp_compile
from . import facts as gp_facts
from .cli_files import Refused


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
        for name, section in f.sections():
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
