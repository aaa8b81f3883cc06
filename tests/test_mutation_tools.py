"""The mutation-testing tools (tools/mutation.sh runs mutmut with them): the per-module score from mutmut's
result files, the survivors' explanations from tools/mutation_reasons.toml, and the plugin that orders a
mutant's tests fastest first."""

import json

from gp_testing import load_tool

ms = load_tool("mutation_score")

ORIGINAL = '''def f(x):
    return x + 1


def x_f__mutmut_orig(x):
    return x + 1


def x_f__mutmut_1(x):
    return x - 1
'''


def _results(root, module, codes, source=ORIGINAL):
    base = root / "mutants" / "pytest_gpuprops"
    path = base / f"{module.replace('.', '/')}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    path.with_name(path.name + ".meta").write_text(json.dumps({"exit_code_by_key": codes}))


def test_exit_codes_are_classified_as_mutmut_means_them():
    assert [ms.classify(c) for c in (None, 1, 0, 33, 34, 99)] == [
        "not run", "killed", "survived", "no tests", "skipped", "suspicious"]


def test_the_packaged_reasons_all_say_which_mutants_what_kind_and_why():
    reasons = ms.load_reasons()  # exits naming the table where one is malformed
    assert len(reasons) > 10 and all(r["why"].strip() for r in reasons)


def test_the_score_counts_unreached_mutants_against_it_and_leaves_unrun_ones_out(tmp_path, capsys):
    _results(tmp_path, "sass.listing", {"a": 1, "b": 0, "c": 33, "d": None})
    _results(tmp_path, "compile", {"e": 1, "f": 1})
    assert list(ms.load(tmp_path)) == ["compile", "sass.listing"]
    assert ms.main(["--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sass.listing     1/3      33.3 %" in out and "not run    1" in out
    assert "all              3/5      60.0 %" in out
    assert ms.main(["--root", str(tmp_path), "--module", "sass", "--names"]) == 0
    assert capsys.readouterr().out.strip() == "b"  # survivors only, of the package's modules


def test_a_survivor_is_explained_by_the_first_matching_reason_or_fails_the_command(tmp_path, capsys, monkeypatch):
    _results(tmp_path, "compile", {"pytest_gpuprops.compile.x_f__mutmut_1": 0})
    assert ms.mutant_diff(tmp_path, "compile", "pytest_gpuprops.compile.x_f__mutmut_1").splitlines()[-2:] == [
        "-    return x + 1", "+    return x - 1"]
    reasons = tmp_path / "reasons.toml"
    reasons.write_text('[[reason]]\nmutants = ["compile.x_f__*"]\nkind = "equivalent"\nwhy = "the same"\n')
    monkeypatch.setattr(ms, "load_reasons", lambda: load_original(reasons))
    assert ms.main(["--root", str(tmp_path), "--explain"]) == 0
    assert "| x_f #1 | `return x + 1` → `return x - 1` | equivalent | the same |" in capsys.readouterr().out
    reasons.write_text('[[reason]]\nmutants = ["other.*"]\nkind = "gap"\nwhy = "w"\n')
    assert ms.main(["--root", str(tmp_path), "--explain"]) == 1
    assert "1 UNEXPLAINED" in capsys.readouterr().out


load_original = ms.load_reasons


def test_the_plugin_orders_a_mutants_tests_fastest_first_and_does_nothing_outside_a_run(pytester):
    pytester.makepyfile(test_order="def test_slow(): pass\ndef test_fast(): pass\n")
    pytester.makeconftest("pytest_plugins = ['mutation_order']\n")
    import shutil
    from pathlib import Path
    shutil.copy(Path(ms.__file__).with_name("mutation_order.py"), pytester.path / "mutation_order.py")
    result = pytester.runpytest_subprocess("-v", "-p", "no:gpuprops")
    assert result.ret == 0
    lines = result.outlines
    assert lines.index(next(x for x in lines if "test_slow" in x)) < lines.index(next(x for x in lines if "test_fast" in x))
    (pytester.path / "mutmut-stats.json").write_text(json.dumps(
        {"duration_by_test": {"test_order.py::test_slow": 2.0, "test_order.py::test_fast": 0.1}}))
    result = pytester.runpytest_subprocess("-v", "-p", "no:gpuprops")
    fast = next(i for i, line in enumerate(result.outlines) if "test_fast" in line)
    slow = next(i for i, line in enumerate(result.outlines) if "test_slow" in line)
    assert result.ret == 0 and fast < slow
