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
    assert "refused" in capsys.readouterr().err


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
