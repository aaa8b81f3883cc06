"""Repo-level pytest configuration: hypothesis profiles. The plugin registers itself through the
pytest11 entry point (pytest_gpuprops.plugin), not from here."""

import os

from hypothesis import HealthCheck, settings

# GPU examples are slow and share function-scoped fixtures on purpose (one FactChecker per test).
_common = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("default", max_examples=12, **_common)
settings.register_profile("ci", max_examples=25, derandomize=True, **_common)
settings.register_profile("thorough", max_examples=200, **_common)
_profile = os.environ.get("GPUPROPS_HYPOTHESIS_PROFILE", "default")
if _profile not in ("default", "ci", "thorough"):
    raise SystemExit(f"GPUPROPS_HYPOTHESIS_PROFILE={_profile!r}: expected default, ci or thorough (see docs/reference.md)")
settings.load_profile(_profile)
