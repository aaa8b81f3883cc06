"""Paths and arch lists shared by the plugin's own tests."""

from pathlib import Path

KERNELS = Path(__file__).parent.parent / "kernels"
PATCH_ARCHES = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
