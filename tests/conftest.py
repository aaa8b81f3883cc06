"""The plugin's own tests: no GPU needed. Cubins compile into a per-session cache folder."""


import pytest
from gp_testing import KERNELS, PATCH_ARCHES  # noqa: F401

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cubins")


@pytest.fixture(scope="session")
def build(cache_dir):
    """build(source, arch, **defines) -> sass.Cubin"""
    def _build(source, arch, **defines):
        c = compile_cuda(KERNELS / source, arch, defines, cache_dir=cache_dir)
        return sass.Cubin(c.cubin, arch, name=source)
    return _build
