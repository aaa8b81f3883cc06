"""The documents' samples and names against the current code: every sample output quoted in README.md
and docs/reference.md is rendered again from docs/samples/h100_full_run.json (tools/make_doc_samples.py)
and must be what the code prints now; every option, command and environment variable the reference
names must exist, and every one the code has must be named."""

import json
import re
from pathlib import Path

import pytest
from gp_testing import load_tool

from pytest_gpuprops import cli, plugin

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "reference.md"
AGAIN = "stale: run `python3 tools/make_doc_samples.py` to render the samples and excerpts again"



tool = load_tool("make_doc_samples")


@pytest.fixture(scope="module")
def samples():
    return tool.render()


def _section(text: str, heading: str) -> str:
    body = text.split(heading + "\n", 1)[1]
    return body.split("\n## ", 1)[0]


# ----------------------------------------------------------------------------------------------
# the samples


def test_the_sample_files_are_what_the_code_renders(samples):
    assert {"h100_table.txt", "h100_failure.txt"} <= set(samples)
    on_disk = {p.name for p in tool.SAMPLES.glob("*.txt")}
    assert on_disk == set(samples), AGAIN
    for name, text in samples.items():
        assert (tool.SAMPLES / name).read_text() == text, f"docs/samples/{name} is {AGAIN}"


def test_the_sample_run_is_trimmed_and_whole():
    text = tool.FULL_RUN.read_text()
    data = json.loads(text)
    assert tool.dump(tool.trim(data)) == text, f"docs/samples/h100_full_run.json is not trimmed: {AGAIN} --trim it"
    assert list(data) == ["schema", "meta", "summary", "facts", "recorded", "plot_points", "fleet"]
    assert data["plot_points"] == {} and data["meta"]["run"]["complete"]
    assert not any("per_warp" in (f.get("measurement") or {}) for f in data["facts"])
    verdicts, fleet, meta = tool.load()
    assert len(verdicts) == sum(data["summary"].values()) == len(data["facts"]) and fleet == []
    assert {v.status for v in verdicts} == set(data["summary"])


def test_the_table_sample_fits_120_columns_and_says_every_verdict(samples):
    lines = samples["h100_table.txt"].rstrip("\n").split("\n")
    assert max(len(line) for line in lines) <= 120
    verdicts, _, _ = tool.load()
    heads = [line for line in lines if " — " in line]
    assert sum(int(h.split(" — ")[1].split(":")[0]) for h in heads) == len(verdicts)
    assert lines[-2].startswith("gpuprops: ") and lines[0].strip("=").strip() == "gpuprops facts"


def test_trim_drops_the_bulk_only():
    big = {"schema": "s", "meta": {"m": 1}, "summary": {"PASS": 1}, "recorded": [],
           "plot_points": {"hmma": [{"x": 1}]}, "fleet": [],
           "facts": [{"fact": "f", "status": "PASS", "verdict": "PASS",
                      "measurement": {"values": list(range(21)), "per_warp": [1.0], "noise": 0.0, "n": 21,
                                      "launch": {"grid": 1}, "throttle": []},
                      "attempts": [{"measured": 1.0, "status": "FAIL"}]}]}
    out = tool.trim(big)
    assert out["facts"][0]["measurement"] == {"noise": 0.0, "n": 21, "launch": {"grid": 1}, "throttle": []}
    assert out["plot_points"] == {} and out["facts"][0]["attempts"] == [{"measured": 1.0, "status": "FAIL"}]
    assert out["meta"] == big["meta"] and big["facts"][0]["measurement"]["per_warp"] == [1.0]  # a copy
    short = dict(big, facts=[dict(big["facts"][0], measurement={"values": [1.0] * 20})])
    assert tool.trim(short)["facts"][0]["measurement"] == {"values": [1.0] * 20}


# ----------------------------------------------------------------------------------------------
# the excerpts in the documents


@pytest.mark.parametrize("doc", [README, REFERENCE], ids=["README.md", "reference.md"])
def test_every_marked_excerpt_is_part_of_its_sample(doc, samples):
    text = doc.read_text()
    found = tool.excerpts(text)
    assert found, f"{doc.name} quotes no sample"
    assert text.count("<!-- sample:") == 2 * len(found), f"{doc.name}: a sample marker without its pair"
    for e in found:
        assert e["name"] in samples, f"{doc.name} quotes {e['name']}, which tools/make_doc_samples.py does not make"
        where = f"{doc.name}: the excerpt of {e['name']} is {AGAIN}"
        assert tool.is_part_of(e["body"], samples[e["name"]]), where
        if e["lines"]:
            assert e["body"] == tool.selected(samples[e["name"]], e["lines"]), where
    assert tool.refresh(text, samples) == text, f"{doc.name}: {AGAIN}"


def test_readme_shows_the_compact_table_and_a_failure():
    names = [e["name"] for e in tool.excerpts(README.read_text())]
    assert names == ["h100_table.txt", "h100_failure.txt"]
    table = tool.excerpts(README.read_text())[0]["body"]
    assert table[1].startswith("all facts for sm_90") and table[-2].startswith("gpuprops: ")


def test_is_part_of():
    sample = "a\nb\nc\nd\n"
    assert tool.is_part_of(["b", "c"], sample) and tool.is_part_of(["a", "...", "d"], sample)
    assert not tool.is_part_of(["b", "d"], sample)  # not a run of whole lines
    assert not tool.is_part_of(["c", "...", "b"], sample)  # out of order
    assert not tool.is_part_of(["b "], sample) and not tool.is_part_of(["...", "a"], sample)
    assert tool.selected(sample, "0:1,-1:") == ["a", "...", "d"]


def test_refresh_rewrites_an_excerpt_with_lines_and_keeps_one_without():
    samples = {"s.txt": "one\ntwo\nthree\n"}
    doc = ("x\n<!-- sample:s.txt lines=1:2 begin -->\n```text\nold\n```\n<!-- sample:s.txt end -->\n"
           "<!-- sample:s.txt begin -->\n```text\nthree\n```\n<!-- sample:s.txt end -->\n")
    new = tool.refresh(doc, samples)
    assert new == doc.replace("```text\nold\n```", "```text\ntwo\n```")
    assert [e["body"] for e in tool.excerpts(new)] == [["two"], ["three"]]


# ----------------------------------------------------------------------------------------------
# the names the reference gives


class _Options:
    """A stand-in for pytest's parser: collects the names pytest_addoption adds."""

    def __init__(self):
        self.names = []

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        self.names += names

    def __getattr__(self, name):  # addini, ... : not options
        return lambda *args, **kwargs: None


def _table_rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| ---")][1:]


def test_the_options_table_names_every_plugin_option_and_no_other():
    parser = _Options()
    plugin.pytest_addoption(parser)
    rows = _table_rows(_section(REFERENCE.read_text(), "## Options"))
    documented = [n for r in rows for n in re.findall(r"`(--[\w-]+)", r[0].replace("`, `", "` `"))]
    assert sorted(documented) == sorted(parser.names)


def test_the_command_table_names_real_commands_and_options():
    p = cli.build_parser()
    subs = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction").choices
    rows = _table_rows(_section(REFERENCE.read_text(), "## The `gpuprops` command"))
    named = set()
    for first, options in rows:
        words = first.strip("`").split()
        assert words[0] == "gpuprops"
        parser = subs[words[1]] if words[1] in subs else p
        named.add(words[1])
        flags = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", first + " " + options)
        assert flags or not parser._option_string_actions.keys() - {"-h", "--help"}, first
        for flag in flags:
            assert flag in parser._option_string_actions, f"{first}: {flag}"
        missing = {o for o in parser._option_string_actions if o.startswith("--")} - set(flags) - {"--help"}
        assert not missing or parser is p, f"{first}: {sorted(missing)} not in the table"
    assert named >= set(subs)


def test_every_environment_variable_is_in_the_reference_and_exists():
    text = _section(REFERENCE.read_text(), "## Environment variables")
    documented = set(re.findall(r"^\| `(GPUPROPS_\w+)`", text, re.M))
    used = set()
    for path in [*ROOT.glob("pytest_gpuprops/**/*.py"), ROOT / "conftest.py", *ROOT.glob("hwtests/*.py")]:
        used |= set(re.findall(r"GPUPROPS_[A-Z_]+", path.read_text()))
    assert documented == used


# ----------------------------------------------------------------------------------------------
# what CI relies on, and the links


def test_the_readme_keeps_the_commands_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    quick = README.read_text().split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert quick.splitlines() == ['python3 -m pip install -e ".[dev]"', "pytest"]
    assert all(line in ci.splitlines() for line in quick.splitlines())


@pytest.mark.parametrize("doc", [README, REFERENCE], ids=["README.md", "reference.md"])
def test_every_relative_link_leads_to_a_file(doc):
    text = doc.read_text()
    links = re.findall(r"\]\(([^)#:]+)(#[\w-]*)?\)", text)
    assert links
    for target, anchor in links:
        path = (doc.parent / target).resolve()
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"
        if anchor:
            headings = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                        for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}
            assert anchor[1:] in headings, f"{doc.name} links to {target}{anchor}, which has no such heading"
