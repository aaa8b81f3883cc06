"""The report schema, as data: what a ``--gpuprops-report`` JSON (``"schema": "gpuprops-results/1"``)
and a stored unit run (``"schema": "gpuprops-unit-run/1"``) may hold, and one check of a parsed file
against it.

Every reader of these files goes through :func:`check_report` or :func:`check_unit_run` first
(``gpuprops merge``, ``--gpuprops-compare``/``--gpuprops-baseline FILE``, the baseline store), so a
file of another schema version, a part of the wrong type or an unknown verdict status is one
:class:`SchemaError` that names the entry and what was expected, never a Python error from deep
inside. The tables below are also what ``tests/test_bad_inputs.py`` generates its malformed reports
from; docs/reference.md ("The report: JSON and Markdown") describes the same keys for people.
"""

from __future__ import annotations

import math

from . import assertions, results

#: every status a verdict can have: the verdict layer's and the fleet rules'
STATUSES = (assertions.PASS, assertions.FAIL, assertions.THROTTLED, assertions.UNSTABLE, assertions.NOISY,
            assertions.ERROR, assertions.SCHEDULE_CHANGED, assertions.SKIPPED, assertions.RECORDED,
            results.OUTLIER, results.MOVED, results.UNITS_DIFFER)
#: every kind of verdict (docs/reference.md, "A verdict")
KINDS = ("measured", "static", "model", "condition", "health", "test", "fleet", "baseline")
SCHEMA_HELP = 'the schema: "The report: JSON and Markdown" in docs/reference.md'


class SchemaError(ValueError):
    """A report that does not match the schema: which entry, what it is, what was expected."""


# ----------------------------------------------------------------------------------------------
# the type language: each spec checks a value and says what it expects


class Spec:
    expected = "?"
    nullable = False

    def problem(self, value, at: str) -> str | None:
        """None when ``value`` fits; otherwise one sentence naming ``at`` (the entry's JSON path)."""
        if value is None:
            return None if self.nullable else self._wrong(value, at)
        return self._check(value, at)

    def _check(self, value, at: str) -> str | None:  # pragma: no cover - every spec overrides it
        raise NotImplementedError

    def _wrong(self, value, at: str) -> str:
        return f"{at} is {describe(value)}; expected {self.expects()}"

    def expects(self) -> str:
        return self.expected + (" or null" if self.nullable else "")


def describe(value) -> str:
    """A JSON value in a person's words: 'a list', 'the string "x"', 'the number 5', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:39] + "…"
        return f"the string {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class Str(Spec):
    def __init__(self, nullable: bool = False, expected: str = "a string"):
        self.nullable, self.expected = nullable, expected

    def _check(self, value, at):
        return None if isinstance(value, str) else self._wrong(value, at)


class Num(Spec):
    """A finite number (not a boolean), optionally >= 0."""

    def __init__(self, nullable: bool = False, at_least: float | None = None, integer: bool = False):
        self.nullable, self.at_least, self.integer = nullable, at_least, integer
        what = "an integer" if integer else "a finite number"
        self.expected = what + (f" >= {at_least:g}" if at_least is not None else "")

    def _check(self, value, at):
        ok = isinstance(value, int if self.integer else (int, float)) and not isinstance(value, bool)
        if ok and not self.integer:
            ok = math.isfinite(value)
        if ok and self.at_least is not None:
            ok = value >= self.at_least
        return None if ok else self._wrong(value, at)


class Bool(Spec):
    expected = "true or false"

    def __init__(self, nullable: bool = False):
        self.nullable = nullable

    def _check(self, value, at):
        return None if isinstance(value, bool) else self._wrong(value, at)


class OneOf(Spec):
    def __init__(self, values: tuple[str, ...], nullable: bool = False):
        self.values, self.nullable = tuple(values), nullable
        self.expected = "one of " + ", ".join(self.values)

    def _check(self, value, at):
        return None if value in self.values else self._wrong(value, at)


class ListOf(Spec):
    def __init__(self, item: Spec, nullable: bool = False, length: int | None = None, expected: str | None = None):
        self.item, self.nullable, self.length = item, nullable, length
        self.expected = expected or (f"a list of {length}" if length else "a list")

    def _check(self, value, at):
        if not isinstance(value, list) or (self.length is not None and len(value) != self.length):
            return self._wrong(value, at)
        for n, x in enumerate(value):
            p = self.item.problem(x, f"{at}[{n}]")
            if p:
                return p
        return None


class MapOf(Spec):
    """An object whose keys are free (statuses, plot names) and whose values all fit ``item``."""

    def __init__(self, item: Spec, nullable: bool = False, expected: str = "an object"):
        self.item, self.nullable, self.expected = item, nullable, expected

    def _check(self, value, at):
        if not isinstance(value, dict):
            return self._wrong(value, at)
        for k, x in value.items():
            p = self.item.problem(x, f"{at}.{k}")
            if p:
                return p
        return None


class Any(Spec):
    expected = "any JSON value"
    nullable = True

    def _check(self, value, at):
        return None


class Obj(Spec):
    """An object with known keys (each checked where present), some required; other keys are left
    alone (a newer gpuprops of the same schema version may add some)."""

    def __init__(self, fields: dict[str, Spec], required: tuple[str, ...] = (), nullable: bool = False,
                 expected: str = "an object", name_key: str | None = None):
        self.fields, self.required, self.nullable, self.expected = fields, tuple(required), nullable, expected
        self.name_key = name_key  # the key that names an entry in messages ("fact")

    def _check(self, value, at):
        if not isinstance(value, dict):
            return self._wrong(value, at)
        if self.name_key and isinstance(value.get(self.name_key), str):
            at = f"{at} ({self.name_key} {value[self.name_key]})"
        missing = [k for k in self.required if k not in value]
        if missing:
            return f"{at} lacks {', '.join(repr(k) for k in missing)}; {self.expected} has {', '.join(self.required)}"
        for k, spec in self.fields.items():
            if k in value:
                p = spec.problem(value[k], f"{at}.{k}")
                if p:
                    return p
        return None


# ----------------------------------------------------------------------------------------------
# the report's parts

GPU = Obj({"index": Num(integer=True, at_least=0, nullable=True), "name": Str(nullable=True),
           "uuid": Str(nullable=True), "host": Str(nullable=True), "pci_bus_id": Str(nullable=True),
           "arch": Str(nullable=True)},
          expected="an object naming the GPU (index, name, uuid, pci_bus_id, host)")
ATTEMPT = Obj({"measured": Num(nullable=True), "measured_text": Str(), "status": OneOf(STATUSES)},
              expected="an attempt (measured, measured_text, status)")
MEASUREMENT = Obj({"noise": Num(at_least=0), "n": Num(integer=True, at_least=0), "median": Num(nullable=True),
                   "unit": Str(), "values": ListOf(Num(), expected="a list of numbers")},
                  expected="an object (the measurement: values, median, noise, n, ...)")
#: a verdict: the keys Verdict needs are required, the others checked where present
VERDICT = Obj({
    "fact": Str(), "arch": Str(), "status": OneOf(STATUSES), "expected": Str(), "measured": Num(nullable=True),
    "measured_text": Str(), "unit": Str(), "method": Str(), "source": Str(), "kind": OneOf(KINDS),
    "flags": ListOf(Str(), expected="a list of strings"), "reproduce": Str(), "nodeid": Str(),
    "measurement": Obj(MEASUREMENT.fields, nullable=True, expected=MEASUREMENT.expected),
    "attempts": ListOf(ATTEMPT, expected="a list of attempts"), "gpu": Obj(GPU.fields, nullable=True, expected=GPU.expected),
    "tolerance": Num(nullable=True, at_least=0), "scope": OneOf(("arch", "gpu")),
    "same_unit_tolerance_rel": Num(nullable=True, at_least=0),
    "units_range": ListOf(Num(), nullable=True, length=2, expected="[lowest, highest]"), "verdict": Str(),
    "peer": Obj(GPU.fields, nullable=True, expected=GPU.expected),
    "accepted_reading": Obj({"measured": Num(), "date": Str(), "path": Str(), "forced": Bool(),
                             "sm_clock_mhz": Num(nullable=True), "band": Num(at_least=0)},
                            nullable=True,
                            expected="the reading its unit accepted (measured, date, path, forced, ...), or null")},
    required=("fact", "arch", "status", "expected", "measured", "measured_text", "unit", "method", "source"),
    expected="a verdict", name_key="fact")
#: a fact recorded in record mode (facts.Fact's fields)
RECORDED = Obj({
    "name": Str(), "arch": Str(), "unit": Str(), "method": Str(), "source": Str(), "value": Num(nullable=True),
    "tolerance_abs": Num(at_least=0), "tolerance_rel": Num(at_least=0), "kind": OneOf(("measured", "static")),
    "by_compiler": MapOf(Num(), expected="an object of compiler -> value"), "scope": OneOf(("arch", "gpu")),
    "gpu": Str(nullable=True), "units_range": ListOf(Num(), nullable=True, length=2, expected="[lowest, highest]"),
    "same_unit_tolerance_rel": Num(nullable=True, at_least=0)},
    required=("name", "arch", "unit", "method", "source"), expected="a recorded fact", name_key="name")
RUN = Obj({"status": OneOf(("finished", "running")), "exit_status": Num(integer=True), "exit": Str(),
           "interrupted": Bool(), "selected": Num(integer=True, at_least=0), "finished": Num(integer=True, at_least=0),
           "not_run": Num(integer=True, at_least=0), "complete": Bool()},
          required=("status",), nullable=True, expected="an object saying how the run ended (status, exit_status, complete, ...)")
META = Obj({"date": Str(nullable=True), "host": Str(nullable=True), "compiler": Str(nullable=True),
            "nvdisasm": Str(nullable=True), "arch": Str(nullable=True),
            "gpu": Obj(GPU.fields, nullable=True, expected=GPU.expected), "gpus": ListOf(GPU, expected="a list of GPUs"),
            "run": RUN, "baselines": MapOf(Any(), nullable=True)},
           expected="an object (date, host, compiler, nvdisasm, gpu, arch, gpus, run)")
#: the whole report; "schema" is checked first, on its own (another version is a message of its own)
REPORT = Obj({"meta": META, "summary": MapOf(Num(integer=True, at_least=0), expected="an object of status -> count"),
              "facts": ListOf(VERDICT, expected="a list of verdicts"),
              "recorded": ListOf(RECORDED, expected="a list of recorded facts"),
              "plot_points": MapOf(ListOf(Obj({}, expected="a point (an object)"), expected="a list of points"),
                                   expected="an object of plot -> points"),
              "fleet": ListOf(VERDICT, expected="a list of verdicts"),
              "links": MapOf(Obj({"unit": Str(), "gpus": ListOf(Str(), expected="a list of GPU labels"),
                                  "cells": ListOf(ListOf(Obj({"value": Num(nullable=True), "status": OneOf(STATUSES)},
                                                             required=("value", "status"), nullable=True,
                                                             expected="a cell ({value, status}, or null)"),
                                                         expected="a row"), expected="a list of rows")},
                                 required=("unit", "gpus", "cells"),
                                 expected="a GPU x GPU matrix (unit, gpus, cells)"),
                             expected="an object of pair fact -> GPU x GPU matrix")},
             required=("facts",), expected="a gpuprops report")
#: a run kept in the baseline store (baselines.py)
UNIT_RUN = Obj({"meta": Obj(META.fields, expected=META.expected), "accepted": Bool(), "why": Str(),
                "facts": ListOf(VERDICT, expected="a list of verdicts"),
                "red": ListOf(Str(), expected="a list of the red facts, as 'fact::test'")},
               required=("facts",), expected="a stored unit run")


def _check(data, where: str, spec: Obj, schema: str, what: str, hint: str, *, schema_required: bool) -> None:
    if not isinstance(data, dict):
        raise SchemaError(f"{where} is not {what}: it holds {describe(data)}, not a JSON object; {hint}")
    got = data.get("schema", None)
    if got != schema and ("schema" in data or schema_required):
        other = ("no \"schema\" key" if "schema" not in data else
                 "a stored unit run (gpuprops-unit-run/1)" if got == "gpuprops-unit-run/1" else
                 "a gpuprops report (gpuprops-results/1)" if got == results.SCHEMA else
                 f"of schema {got!r}" if isinstance(got, str) else f"of schema {describe(got)}")
        raise SchemaError(f"{where} is not {what}: it {'has' if 'schema' not in data else 'is'} {other}; expected "
                          f"\"schema\": \"{schema}\"; {hint}")
    problem = spec.problem(data, "")
    if problem:
        problem = problem.removeprefix(".")
        if problem.startswith(" lacks "):
            problem = f"it{problem}"
        raise SchemaError(f"{where}: {problem}; {hint} ({SCHEMA_HELP})")


def check_report(data, where: str) -> None:
    """Raise :class:`SchemaError` unless ``data`` (a parsed JSON file) is a report of this schema
    version whose every part has its type, every verdict its required keys and a known status.
    A report without a "schema" key (written by hand, or by a test) is read as this version."""
    _check(data, where, REPORT, results.SCHEMA, "a gpuprops report",
           "pass a report written by pytest --gpuprops-report of this gpuprops version", schema_required=False)


def check_unit_run(data, where: str) -> None:
    """Raise :class:`SchemaError` unless ``data`` is a run kept in the baseline store."""
    from .baselines import SCHEMA
    _check(data, where, UNIT_RUN, SCHEMA, "a gpuprops unit run", "move the file out of the store",
           schema_required=True)
