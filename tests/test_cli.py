import pytest
from gp_testing import KERNELS

from pytest_gpuprops.cli import main


def test_compile_then_sass_prints_the_seeds_notation(tmp_path, capsys):
    out = tmp_path / "h.cubin"
    assert main(["compile", str(KERNELS / "hmma_16816.cu"), "--arch", "sm_86", "-D", "ILP=1", "-o", str(out)]) == 0
    assert main(["sass", str(out)]) == 0
    text = capsys.readouterr().out
    hmma = [line for line in text.splitlines() if "HMMA.16816.F32" in line]
    assert len(hmma) == 64
    assert all(line.startswith("[B") and ":S" in line and "/* 0x" in line for line in hmma)


def test_patch_prints_before_and_after(tmp_path, capsys):
    cub = tmp_path / "r.cubin"
    main(["compile", str(KERNELS / "regbank_ffma.cu"), "--arch", "sm_90", "-D", "NFFMA=8", "-o", str(cub)])
    main(["sass", str(cub)])
    line = next(x for x in capsys.readouterr().out.splitlines() if " FFMA " in x)
    off = "0x" + line.split("/*")[1].split("*/")[0]
    rd = line.split("FFMA ")[1].split(",")[0]
    rc = main(["patch", str(cub), "--at", off, "--regs", "R8,R10,R12", "--reuse", "A", "--stall", "1",
               "--scratch", rd, "-o", str(tmp_path / "p.cubin")])
    out = capsys.readouterr().out
    assert rc == 0 and "+ [B" in out and f"FFMA {rd}, R8.reuse, R10, R12" in out
    assert main(["patch", str(cub), "--at", off, "--regs", "R250,R1,R2", "-o", str(tmp_path / "q.cubin")]) == 2
    assert "refused" in capsys.readouterr().err and not (tmp_path / "q.cubin").exists()


def test_facts_lists_every_arch(capsys):
    assert main(["facts"]) == 0
    out = capsys.readouterr().out
    assert "# sm_90" in out and "lds_latency_cycles" in out and "# sm_86" in out


def test_errors_are_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "x.cubin"
    bad.write_bytes(b"nope")
    assert main(["sass", str(bad)]) == 2
    assert "not an ELF" in capsys.readouterr().err
    assert main(["compile", str(KERNELS / "ffma.cu"), "--arch", "sm_70"]) == 2
    assert "nvdisasm" in capsys.readouterr().err


def _readme_block(heading: str, lang: str = "bash") -> str:
    text = (KERNELS.parent / "README.md").read_text()
    section = text.split(heading, 1)[1]
    return section.split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def test_readme_gpuprops_commands_run_as_written(tmp_path, monkeypatch, capsys, cache_dir):
    import shlex

    from pytest_gpuprops.compile import compiler_version
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPROPS_CACHE_DIR", str(cache_dir))
    (tmp_path / "kernels").symlink_to(KERNELS)
    lines = [x for x in _readme_block("## The `gpuprops` command").splitlines() if x.strip()]
    assert len(lines) >= 5
    for line in lines:
        args = shlex.split(line.split("  #")[0])
        assert args[0] == "gpuprops"
        assert main(args[1:]) == 0, line
    out = capsys.readouterr().out
    if compiler_version() == "nvrtc 13.5":  # the README's sample lines are from NVRTC 13.5
        section = (KERNELS.parent / "README.md").read_text().split("## The `gpuprops` command", 1)[1]
        samples = [x for x in section.splitlines() if x.startswith(("[B", "- [B", "+ [B", "wrote "))]
        assert len(samples) == 4 and all(s in out for s in samples)


def test_readme_failure_recipe_fails_as_shown(pytester, tmp_path):
    recipe = _readme_block("## What a failure looks like").splitlines()
    assert recipe[0].startswith("sed 's/\"nvrtc 13.5\" = 24 }/\"nvrtc 13.5\" = 20 }/'")
    from pytest_gpuprops.compile import compiler_version
    if compiler_version() != "nvrtc 13.5":  # another compiler reads the planted file as a changed schedule
        pytest.skip(f"the README's recipe plants the nvrtc 13.5 entry; this compiler is {compiler_version()}")
    planted = tmp_path / "planted.toml"
    facts = (KERNELS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text()
    planted.write_text(facts.replace('"nvrtc 13.5" = 24 }', '"nvrtc 13.5" = 20 }'))
    r = pytester.runpytest_inprocess(str(KERNELS.parent / "hwtests" / "test_static.py"), "-k",
                                     "dependent_chain and sm_90", "--gpuprops-facts", str(planted),
                                     "-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*fact hmma_16816_f32_dependent_issue_cycles on sm_90 does not hold:*",
                            "*expected: 20 (nvrtc 13.5)*",
                            f"*reproduce: pytest 'hwtests/test_static.py::test_hmma_dependent_chain_issue_spacing"
                            f"[[]sm_90[]]' --gpuprops-facts {planted}"])
