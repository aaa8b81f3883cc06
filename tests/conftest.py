"""The plugin's own tests: no GPU needed. Cubins compile into a per-session cache folder."""


import os
import shutil

import pytest
from gp_testing import KERNELS, PATCH_ARCHES  # noqa: F401

from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cubins")
    seed = os.environ.get("GPUPROPS_TEST_CUBIN_SEED")  # a warm cache to start from (tools/mutation.sh)
    if seed and os.path.isdir(seed):
        shutil.copytree(seed, path, dirs_exist_ok=True)
    return path


@pytest.fixture(scope="session")
def build(cache_dir):
    """build(source, arch, **defines) -> sass.Cubin"""
    def _build(source, arch, **defines):
        c = compile_cuda(KERNELS / source, arch, defines, cache_dir=cache_dir)
        return sass.Cubin(c.cubin, arch, name=source)
    return _build
