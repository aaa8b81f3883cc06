"""A pytest plugin for checking the session prefetch (hwtests/conftest.py): every build a test asks
``compile_cuda`` for on its own thread, cache hits included, and whether the prefetch asked for it
first. Warm or cold, the summary's last lines name the builds the prefetch did not foresee:

    PYTHONPATH=tools/probes pytest hwtests -m static -p foreseen_builds

(the run's own ``gpuprops prefetch:`` line counts only what the tests had to compile, so it needs an
empty cache to see them). In a process of its own or in-process (``ForeseenBuilds()`` among
pytester's plugins), it records through every module that bound ``compile_cuda``, and puts each
binding back at the end."""

import sys
import threading
from pathlib import Path

import pytest

from pytest_gpuprops import compile as gp_compile


def build_key(source, arch, defines) -> tuple:
    return Path(source).name, arch, tuple(sorted((str(k), str(v)) for k, v in (defines or {}).items()))


class ForeseenBuilds:
    def __init__(self):
        self.asked_first: set = set()  # asked for outside a test, or on another thread: the prefetch's
        self.by_tests: dict = {}  # build -> the first test that asked for it itself
        self._test = None
        self._bound: list = []

    @property
    def missed(self) -> dict:
        return {k: t for k, t in self.by_tests.items() if k not in self.asked_first}

    def pytest_configure(self, config):
        original = gp_compile.compile_cuda

        def recording(source, arch, defines=None, **kwargs):
            key = build_key(source, arch, defines)
            if self._test is None or threading.current_thread() is not threading.main_thread():
                self.asked_first.add(key)
            else:
                self.by_tests.setdefault(key, self._test)
            return original(source, arch, defines, **kwargs)

        for module in [gp_compile, *list(sys.modules.values())]:
            if getattr(module, "compile_cuda", None) is original:
                module.compile_cuda = recording
                self._bound.append((module, original))

    def pytest_unconfigure(self, config):
        for module, original in self._bound:
            module.compile_cuda = original
        self._bound.clear()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._test = item.nodeid
        yield
        self._test = None

    def pytest_terminal_summary(self, terminalreporter):
        missed = self.missed
        terminalreporter.write_line(f"foreseen builds: {len(self.by_tests) - len(missed)} of the "
                                    f"{len(self.by_tests)} builds the tests asked for; not foreseen: {len(missed)}")
        for (source, arch, defines), test in sorted(missed.items()):
            terminalreporter.write_line(f"  {source} {arch} {dict(defines)} <- {test}")


def pytest_configure(config):
    """``-p foreseen_builds``: one recorder for the session (pytest_configure reaches it, as a
    historic hook, once registered)."""
    config.pluginmanager.register(ForeseenBuilds(), "foreseen_builds_recorder")
