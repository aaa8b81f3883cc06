"""The output file of ``gpuprops compile`` and ``patch`` (cli_files.py): never an input (a hard link
to it included), a folder, a file that is not a cubin, or a file in a folder that cannot be written; and
written whole or not at all. Each refusal is the whole stderr line, exit 2, nothing written."""

import os
import socket
from pathlib import Path

import test_cli
from test_cli import TWO_KERNELS, refusal

#: the fixtures shared with test_cli.py (the working folder and its cubins)
cubins, work = test_cli.cubins, test_cli.work


# ----------------------------------------------------------------------------------------------
# the output file


def test_output_that_is_a_hard_link_to_the_source_is_the_source(capsys, work):
    os.link(work / "two.cu", work / "link.cu")
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "link.cu") == (
        "gpuprops compile: -o link.cu is the input two.cu; writing there would destroy it. Choose another output "
        "name (e.g. -o two.out.cubin)")
    assert (work / "link.cu").read_text() == TWO_KERNELS


def test_output_that_is_a_folder(capsys, work):
    (work / "outdir").mkdir()
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "outdir") == (
        "gpuprops compile: -o outdir is a folder; give a file name (e.g. -o outdir/out.cubin)")


def test_output_that_exists_and_is_not_a_cubin(capsys, work):
    (work / "notes.txt").write_text("keep me")
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "notes.txt") == (
        "gpuprops compile: -o notes.txt exists and is not a cubin; refusing to overwrite it. Choose another output "
        "name, or remove the file first")
    assert (work / "notes.txt").read_text() == "keep me"


def test_output_that_exists_and_cannot_be_read(capsys, work):
    """A Unix socket exists but cannot be opened (ENXIO), whoever runs the test."""
    with socket.socket(socket.AF_UNIX) as s:
        s.bind("out.sock")
        assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "out.sock") == (
            "gpuprops compile: -o out.sock exists and cannot be read (No such device or address); choose another "
            "output name")


def test_output_in_a_folder_that_is_not_writable(capsys, work, monkeypatch):
    """os.access answers for ro/ as it does for a user without write permission on it (root may write
    anywhere, so the answer is planted)."""
    (work / "ro").mkdir()
    real_access = os.access

    def access(path, mode, *a, **k):
        if Path(path) == Path("ro"):
            return not mode & os.W_OK
        return real_access(path, mode, *a, **k)
    monkeypatch.setattr(os, "access", access)
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "ro/x.cubin") == (
        "gpuprops compile: -o ro/x.cubin: folder ro is not writable; choose an output in a folder you can write")
    assert list((work / "ro").iterdir()) == []


def test_output_whose_temporary_file_cannot_be_made_is_not_written(capsys, work):
    """The output is written through a temporary file beside it (sub/.x.cubin.tmp<pid>); a folder of
    that name planted there makes the write fail: the message says why and nothing is left behind."""
    (work / "sub").mkdir()
    planted = work / "sub" / f".x.cubin.tmp{os.getpid()}"
    planted.mkdir()
    assert refusal(capsys, "compile", "two.cu", "--arch", "sm_90", "-o", "sub/x.cubin") == (
        "gpuprops compile: cannot write sub/x.cubin: File exists; nothing was written")
    assert sorted(p.name for p in (work / "sub").iterdir()) == [planted.name]
    assert sorted(p.name for p in work.iterdir()) == ["sub", "two.cu", "two.cubin"]
