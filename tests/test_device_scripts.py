"""The shell scripts of tools/ that run on the GPU machine (tools/device_*.sh): they cannot run here,
but each must parse, and the validation script must refuse a mode it does not know before it touches a
GPU (it is run unattended within a device call's time limit, where a syntax error costs the call)."""

import subprocess
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
SCRIPTS = sorted(TOOLS.glob("device_*.sh"))


def test_there_are_device_scripts_to_check():
    assert {p.name for p in SCRIPTS} >= {"device_validation.sh", "device_profile.sh", "device_stress_check.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_device_script_parses(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_validation_script_names_its_modes_and_refuses_another(tmp_path):
    done = subprocess.run(["bash", str(TOOLS / "device_validation.sh"), "no-such-mode"], capture_output=True, text=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "TMPDIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.startswith("usage: ") and "units" in done.stderr and "validate" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written for a mode it does not know


def test_every_fact_the_planted_mode_shifts_is_a_packaged_h100_fact():
    """The planted mode shifts named facts of the packaged file: a fact since retired or renamed would stop the
    mode at its first shift on the device (its value looked up, none found), costing the call."""
    import re

    from pytest_gpuprops.facts import tomllib
    text = (TOOLS / "device_validation.sh").read_text()
    block = text[text.index("for shift in"):text.index("; do", text.index("for shift in"))]
    shifts = re.findall(r'"(\w+):([+-]\d+)%"', block)
    assert len(shifts) >= 9 and all(pct in ("+5", "-5") for _, pct in shifts)
    facts = tomllib.loads((TOOLS.parent / "pytest_gpuprops" / "facts" / "sm_90.toml").read_text())
    h100 = facts["gpus"]["NVIDIA H100 80GB HBM3"]
    missing = [name for name, _ in shifts if name not in facts and name not in h100]
    assert not missing, f"the planted mode shifts facts the packaged file lacks: {missing}"
