"""The sample outputs in README.md and docs/reference.md, made by the current code.

    python3 tools/make_doc_samples.py                    # render docs/samples/*.txt, refresh the excerpts
    python3 tools/make_doc_samples.py --trim REPORT.json # first make REPORT the (small) sample run

The sample run is docs/samples/h100_full_run.json: a real ``--gpuprops-report`` of the whole GPU suite
on an H100, trimmed (:func:`trim`: the per-warp values, long value lists and plot points are
dropped; meta, the summary and every verdict stay). From it, through the report layer:

* ``h100_table.txt``: what the terminal prints at the end of that run (default verbosity): the
  "gpuprops facts" separator, :func:`pytest_gpuprops.report.terminal_table` (the compact table),
  :func:`~pytest_gpuprops.report.summary_line` and the outlier-check note;
* ``h100_failure.txt``: the message of the run's first FAIL (what pytest shows after the exception's
  name, and the Markdown report under "Not passing").

The documents quote them between marker comments::

    <!-- sample:h100_table.txt lines=0:12,-4: begin -->
    ```text
    ...
    ```
    <!-- sample:h100_table.txt end -->

``lines=`` (optional) names the sample's lines as Python slices, 0-based, separated by commas; the
excerpt is those lines, with a line ``...`` between two slices. Running this script rewrites every
marked excerpt from its sample; an excerpt without ``lines=`` is left as written and only checked.
tests/test_docs_samples.py regenerates everything in memory and fails when a file is stale.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuprops import report, results  # noqa: E402
from pytest_gpuprops.assertions import FAIL, Verdict  # noqa: E402

SAMPLES = ROOT / "docs" / "samples"
FULL_RUN = SAMPLES / "h100_full_run.json"
#: the documents that quote samples
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "reference.md"]
#: a measurement's value lists longer than this are dropped from the sample run
MAX_VALUES = 20
#: the separator's width in the samples (pytest draws it as wide as the terminal)
WIDTH = report.TERMINAL_WIDTH
GAP = "..."


# ----------------------------------------------------------------------------------------------
# the sample run


def _trim_measurement(m: dict) -> dict:
    m = {k: v for k, v in m.items() if k != "per_warp"}
    for k, v in list(m.items()):
        if isinstance(v, list) and len(v) > MAX_VALUES:
            del m[k]
    return m


def trim(data: dict) -> dict:
    """A report JSON without its bulk: every measurement's per-warp values and value lists longer
    than MAX_VALUES (in each verdict and each attempt), and the plot points. The verdict fields, meta
    and summary stay as they are, so the report layer renders the same tables from it."""
    out = dict(data)
    for key in ("facts", "fleet"):
        verdicts = []
        for v in data.get(key, []):
            v = dict(v)
            if isinstance(v.get("measurement"), dict):
                v["measurement"] = _trim_measurement(v["measurement"])
            v["attempts"] = [_trim_measurement(a) if isinstance(a, dict) else a for a in v.get("attempts", [])]
            verdicts.append(v)
        if key in data:
            out[key] = verdicts
    if "plot_points" in out:
        out["plot_points"] = {}
    return out


def dump(data: dict) -> str:
    """JSON with one verdict per line: small, and a change to a verdict is a change to its line."""
    parts = []
    for k, v in data.items():
        if isinstance(v, list) and v:
            rows = ",\n".join("  " + json.dumps(x, ensure_ascii=False) for x in v)
            parts.append(f" {json.dumps(k)}: [\n{rows}\n ]")
        else:
            parts.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def load(path: Path = FULL_RUN) -> tuple[list[Verdict], list[Verdict], dict]:
    """The verdicts, fleet verdicts and meta of a report, read as ``gpuprops merge`` and
    ``--gpuprops-compare`` read them (:func:`pytest_gpuprops.results.load`)."""
    res, meta = results.load(path)
    fleet = [Verdict.from_dict(d) for d in json.loads(Path(path).read_text()).get("fleet", [])]
    return res.verdicts, fleet, meta


# ----------------------------------------------------------------------------------------------
# the samples


def _separator(title: str) -> str:
    """The line pytest writes above the table (TerminalReporter.write_sep), WIDTH wide."""
    from _pytest._io import TerminalWriter
    buf = io.StringIO()
    tw = TerminalWriter(buf)
    tw.fullwidth = WIDTH
    tw.sep("=", title)
    return buf.getvalue().rstrip("\n")


def render(path: Path = FULL_RUN) -> dict[str, str]:
    """Every sample file's text, by file name, from the sample run."""
    verdicts, fleet, meta = load(path)
    _, note = results.outliers(verdicts)
    table = [_separator("gpuprops facts"), report.terminal_table(verdicts),
             report.summary_line(verdicts + fleet, meta.get("run"))]
    if any(v.gpu for v in verdicts):
        table.append(f"gpuprops {note}")
    failing = [v for v in verdicts if v.status == FAIL]
    samples = {"h100_table.txt": "\n".join(table) + "\n"}
    if failing:
        samples["h100_failure.txt"] = failing[0].message() + "\n"
    return samples


# ----------------------------------------------------------------------------------------------
# the excerpts in the documents

MARKER = re.compile(r"<!-- sample:(?P<name>[\w.-]+)(?: lines=(?P<lines>[-\d:,]+))? begin -->\n"
                    r"(?P<body>.*?)"
                    r"<!-- sample:(?P=name) end -->", re.S)


def _slices(spec: str) -> list[slice]:
    out = []
    for part in spec.split(","):
        a, _, b = part.partition(":")
        out.append(slice(int(a) if a else None, int(b) if b else None))
    return out


def selected(sample: str, spec: str) -> list[str]:
    """The lines ``lines=spec`` names, GAP between two slices."""
    lines = sample.rstrip("\n").split("\n")
    out: list[str] = []
    for n, s in enumerate(_slices(spec)):
        out += ([GAP] if n else []) + lines[s]
    return out


def excerpt_lines(body: str) -> list[str]:
    """A marked excerpt's lines, without the code fence around them."""
    lines = body.strip("\n").split("\n")
    if lines and lines[0].startswith("```"):
        lines = lines[1:]
    if lines and lines[-1].startswith("```"):
        lines = lines[:-1]
    return lines


def excerpts(text: str) -> list[dict]:
    """Every marked excerpt of a document: name, lines (the spec or None), body lines."""
    return [{"name": m["name"], "lines": m["lines"], "body": excerpt_lines(m["body"])} for m in MARKER.finditer(text)]


def is_part_of(body: list[str], sample: str) -> bool:
    """The excerpt's pieces (split at GAP lines) are runs of whole lines of the sample, in order."""
    lines = sample.rstrip("\n").split("\n")
    at = 0
    pieces: list[list[str]] = [[]]
    for line in body:
        if line == GAP:
            pieces.append([])
        else:
            pieces[-1].append(line)
    for piece in pieces:
        if not piece:
            return False
        for start in range(at, len(lines) - len(piece) + 1):
            if lines[start:start + len(piece)] == piece:
                at = start + len(piece)
                break
        else:
            return False
    return True


def refresh(text: str, samples: dict[str, str]) -> str:
    """The document with every excerpt that has ``lines=`` rewritten from its sample."""
    def one(m: re.Match) -> str:
        if not m["lines"] or m["name"] not in samples:
            return m.group(0)
        body = "\n".join(selected(samples[m["name"]], m["lines"]))
        return (f"<!-- sample:{m['name']} lines={m['lines']} begin -->\n```text\n{body}\n```\n"
                f"<!-- sample:{m['name']} end -->")
    return MARKER.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trim", metavar="REPORT", help=f"trim this report JSON into {FULL_RUN.relative_to(ROOT)} first")
    a = ap.parse_args(argv)
    if a.trim:
        data = trim(json.loads(Path(a.trim).read_text()))
        FULL_RUN.write_text(dump(data))
        print(f"wrote {FULL_RUN.relative_to(ROOT)} ({FULL_RUN.stat().st_size} bytes)")
    samples = render()
    for name, text in samples.items():
        (SAMPLES / name).write_text(text)
        print(f"wrote docs/samples/{name}")
    stale = []
    for doc in DOCUMENTS:
        if not doc.exists():
            continue
        text = doc.read_text()
        new = refresh(text, samples)
        if new != text:
            doc.write_text(new)
            print(f"refreshed the excerpts in {doc.relative_to(ROOT)}")
        for e in excerpts(new):
            if e["name"] not in samples or not is_part_of(e["body"], samples[e["name"]]):
                stale.append(f"{doc.relative_to(ROOT)}: the excerpt of {e['name']} is not part of the sample")
    for line in stale:
        print(line, file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
