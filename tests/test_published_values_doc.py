"""docs/published_values.md sets every fact of the packaged facts file beside what the sources publish (or
says that nothing was found): each fact is named there, in backticks, alone or in a pattern (`{a,b}`
alternatives, `*`)."""

import itertools
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _named_patterns(text: str) -> list[re.Pattern]:
    out = []
    for token in set(re.findall(r"`([^`\s]+)`", text)):
        parts = re.split(r"(\{[^}]*\})", token)
        for combo in itertools.product(*[p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]):
            out.append(re.compile("^" + re.escape("".join(combo)).replace(r"\*", ".*") + "$"))
    return out


def _facts(path: Path) -> set[str]:
    data = tomllib.loads(path.read_text())
    names = {k for k, v in data.items() if isinstance(v, dict) and k != "gpus"}
    for section in data.get("gpus", {}).values():
        names |= {k for k, v in section.items() if isinstance(v, dict)}
    return names


def test_every_packaged_fact_is_named_in_published_values():
    patterns = _named_patterns((ROOT / "docs" / "published_values.md").read_text())
    for facts in sorted((ROOT / "pytest_gpuprops" / "facts").glob("sm_*.toml")):
        missing = sorted(n for n in _facts(facts) if not any(p.match(n) for p in patterns))
        assert not missing, f"{facts.name}: facts not in docs/published_values.md: {missing}"


def test_the_patterns_expand_alternatives_and_stars_and_nothing_else():
    patterns = _named_patterns("`a_{x,y}_c` and `m_*_n` and `plain`")
    assert {p.pattern for p in patterns} >= {"^a_x_c$", "^a_y_c$", "^plain$"}
    match = lambda name: any(p.match(name) for p in patterns)  # noqa: E731
    assert match("a_y_c") and match("m_anything_n") and match("plain")
    assert not match("a_z_c") and not match("plainer")
