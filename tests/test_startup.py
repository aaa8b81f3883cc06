"""The start-up checks (pytest_gpuprops/startup.py) of the paths the options name: a report path that
is a folder, a file in the way of a folder, a folder that cannot be written, each refused with what to
give instead; the options' checks through pytest are in tests/test_plugin.py and test_bad_inputs.py."""

import os
from pathlib import Path

import pytest

from pytest_gpuprops import startup


def test_a_report_path_that_is_a_folder_is_refused_naming_a_file_to_give(tmp_path):
    with pytest.raises(pytest.UsageError) as exc:
        startup.writable_file("--gpuprops-report", str(tmp_path))
    assert str(exc.value) == (f"--gpuprops-report {tmp_path} is a folder; give a file name "
                              f"(e.g. {tmp_path}/gpuprops.json)")


def test_an_existing_report_file_is_overwritten_without_force(tmp_path):
    old = tmp_path / "r.json"
    old.write_text("{}")
    assert startup.writable_file("--gpuprops-report", str(old)) is None  # the report's default: overwrite


def test_a_file_in_the_way_of_the_folder_is_refused(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(pytest.UsageError) as exc:
        startup.writable_dir("--gpuprops-plots", str(blocker / "sub" / "plots"))
    assert str(exc.value) == (f"--gpuprops-plots {blocker}/sub/plots: {blocker} is a file, not a folder; choose a "
                              "path in a folder")
    with pytest.raises(pytest.UsageError) as exc:
        startup.writable_file("--gpuprops-report", str(blocker / "r.json"))
    assert str(exc.value) == (f"--gpuprops-report {blocker}/r.json: {blocker} is a file, not a folder; choose a "
                              "path in a folder")


@pytest.fixture
def read_only_folder(tmp_path, monkeypatch):
    """A folder with mode r-x (0o500). We run as root, which may write anywhere, so os.access answers
    for it as the folder's owner (not root) would: from the owner's permission bits."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    real_access = os.access

    def access_as_owner(path, mode, *a, **k):
        if Path(path) == ro:
            owner_bits = (os.stat(path).st_mode >> 6) & 0o7  # R_OK 4, W_OK 2, X_OK 1, F_OK 0
            return mode & ~owner_bits == 0
        return real_access(path, mode, *a, **k)
    monkeypatch.setattr(startup.os, "access", access_as_owner)
    yield ro
    ro.chmod(0o700)


def test_a_folder_that_is_not_writable_is_refused(read_only_folder):
    ro = read_only_folder
    assert os.access(ro, os.R_OK | os.X_OK) and os.access(ro, os.F_OK)  # it exists and can be entered
    with pytest.raises(pytest.UsageError) as exc:
        startup.writable_dir("--gpuprops-plots", str(ro / "new" / "plots"))
    assert str(exc.value) == (f"--gpuprops-plots {ro}/new/plots: folder {ro} is not writable; choose a path you "
                              "can write")
    # a file to write there names the file the option gave, not the folder
    with pytest.raises(pytest.UsageError) as exc:
        startup.writable_file("--gpuprops-report", str(ro / "r.json"))
    assert str(exc.value) == (f"--gpuprops-report {ro}/r.json: folder {ro} is not writable; choose a path you "
                              "can write")
    # beside it, a folder that is writable passes
    assert startup.writable_dir("--gpuprops-plots", str(ro.parent / "plots")) is None
