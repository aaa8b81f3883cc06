"""From a row of the facts table to a rerun: every fact a test checks is declared on it
(``@pytest.mark.fact``), so ``pytest -k <fact name>`` selects that test; a check of an undeclared
fact is refused."""

import ast
from pathlib import Path

import pytest
from gp_testing import fake_gpu_conftest

from pytest_gpuprops.fixture import UndeclaredFact, check_declared, declared_facts

HWTESTS = Path(__file__).parent.parent / "hwtests"
CHECKS = {"check", "check_model", "check_condition"}


def _checks_a_fact(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CHECKS
               and isinstance(n.func.value, ast.Name) and n.func.value.id in ("gpuprops", "gpuprops_static")
               for n in ast.walk(fn))


def _declares(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "fact"
               for d in fn.decorator_list)


def test_every_hwtests_fact_test_declares_its_facts():
    undeclared = [f"{path.name}::{fn.name}" for path in sorted(HWTESTS.glob("test_*.py"))
                  for fn in ast.parse(path.read_text()).body
                  if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_") and _checks_a_fact(fn)
                  and not _declares(fn)]
    assert undeclared == []


FACT_TESTS = '''
import pytest
from pytest_gpuprops.measure import Measurement

LEVEL = {"l1": "l1_hit_latency_cycles", "dram": "dram_latency_cycles"}


@pytest.mark.gpu
@pytest.mark.fact(lambda level: LEVEL[level])
@pytest.mark.parametrize("level", ["l1", "dram"])
def test_chase_latency(gpuprops, level):
    m = Measurement.given("x", [1.0])
    m.remeasure = lambda: Measurement.given("x", [1.0])
    gpuprops.check(gpuprops.fact_name, m, method="given")


@pytest.mark.gpu
@pytest.mark.fact("{op}_latency_cycles")
@pytest.mark.parametrize("op", ["imad", "dfma"])
def test_alu(gpuprops, op):
    m = Measurement.given("x", [1.0])
    m.remeasure = lambda: Measurement.given("x", [1.0])
    gpuprops.check("imad_latency_cycles", m, method="given")
'''


@pytest.mark.parametrize("fact, selected", [
    ("l1_hit_latency_cycles", ["test_chase_latency[l1]"]),
    ("dram_latency_cycles", ["test_chase_latency[dram]"]),
    ("dfma_latency_cycles", ["test_alu[dfma]"]),
    ("latency_cycles and not chase", ["test_alu[imad]", "test_alu[dfma]"]),
])
def test_k_with_a_fact_name_selects_the_test_that_checks_it(pytester, fact, selected):
    pytester.makepyfile(test_facts=FACT_TESTS)
    r = pytester.runpytest_inprocess("--co", "-q", "-k", fact, "-p", "no:randomly")
    assert [ln.split("::")[-1] for ln in r.stdout.lines if "::" in ln] == selected


def test_a_check_of_a_fact_its_test_does_not_declare_is_refused(pytester):
    """test_alu[dfma] checks imad_latency_cycles: `-k imad` would miss the dfma case."""
    pytester.makeconftest(fake_gpu_conftest("sm_99"))
    pytester.makepyfile(test_facts=FACT_TESTS)
    r = pytester.runpytest_inprocess("-k", "test_alu", "-p", "no:randomly", "--gpuprops-record", "rec.toml")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["E *UndeclaredFact: test_facts.py::test_alu[[]dfma[]] checks fact imad_latency_cycles "
                            "but declares [[]'dfma_latency_cycles'[]]: add @pytest.mark.fact('imad_latency_cycles')*"])


def test_declared_facts_fill_templates_and_call_functions_with_the_parameters():
    class Item:
        nodeid = "t.py::test_x[a-2]"
        callspec = type("C", (), {"params": {"op": "a", "n": 2}})()

        def iter_markers(self, name):
            return [pytest.mark.fact("{op}_n{n}", lambda n: f"x{n * 2}").mark]
    assert declared_facts(Item()) == ["a_n2", "x4"]
    check_declared(Item(), "x4")
    with pytest.raises(UndeclaredFact, match=r"checks fact y but declares \['a_n2', 'x4'\]"):
        check_declared(Item(), "y")
