"""The plugin's own tests: no GPU needed. Cubins compile into the persistent cubin cache (a mutation
run: a folder of its session, seeded from $GPUPROPS_TEST_CUBIN_SEED where set), so a warm run compiles
nothing. SASS listings are cached by the code's bytes under $GPUPROPS_CACHE_DIR (sass/listing.py), so a
second run reads no SASS again. Before the first test, the builds the tests read are compiled in
parallel and their SASS, and that of the patches they make, read in one nvdisasm batch per arch
(``_prefetch``): the tests then find them in the caches and check exactly what they checked before.
"""


import functools
import importlib.metadata
import inspect
import itertools
import os
import platform
import re
import shlex
import shutil

import pluggy._hooks
import pytest
from gp_testing import CHILD_PYTEST_ADDOPTS, KERNELS, PATCH_ARCHES  # noqa: F401

from pytest_gpuprops import cli as gp_cli
from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import sass
from pytest_gpuprops.compile import compile_cuda, default_cache_dir

pytest_plugins = ["pytester"]


class _KeptDistribution(importlib.metadata.PathDistribution):
    """An installed distribution whose metadata, entry points and files are read once per process."""

    def __init__(self, dist):
        super().__init__(dist._path)

    @functools.cached_property
    def metadata(self):
        return super().metadata

    @functools.cached_property
    def entry_points(self):
        return super().entry_points

    @functools.cached_property
    def files(self):
        return super().files


_distributions = importlib.metadata.distributions


@functools.lru_cache(maxsize=1)
def _installed():
    return tuple(_KeptDistribution(d) if isinstance(d, importlib.metadata.PathDistribution) else d
                 for d in _distributions())


def _kept_distributions(**kwargs):
    return _distributions(**kwargs) if kwargs else iter(_installed())


#: Every pytest session a test runs in this process (pytester's in-process runs and parseconfig, some
#: 400 of them) reads every installed distribution's metadata three times (pluggy's entry points, pytest's
#: modules to rewrite, the header's plugin versions): ~25 of each session's ~60 ms. Nothing installs
#: or removes a package during the suite, so this process reads them once.
importlib.metadata.distributions = _kept_distributions
#: pytest-benchmark asks it at every session's configure (its machine id), and it runs `file` on the
#: Python executable each time: the same answer for the same arguments
platform.architecture = functools.lru_cache(maxsize=None)(platform.architecture)
try:
    import pytest_benchmark.plugin
except ImportError:  # pragma: no cover - pytest-benchmark is a dependency
    pass
else:
    #: and at every session's option parsing its tag, for --benchmark-autosave's file name: `git rev-parse`
    #: and `hg path` run in the session's folder (~6 ms a session). No test here autosaves: the tag of
    #: this process's first session names any later one's too.
    pytest_benchmark.plugin.get_tag = functools.lru_cache(maxsize=None)(pytest_benchmark.plugin.get_tag)

_varnames = pluggy._hooks.varnames
_kept_names: dict = {}


def _kept_varnames(func):
    """pluggy's argument names of a hook function, read once per function: a plain function's, or a
    bound method's (the same for every instance of its class); a class or callable object as pluggy
    reads it, each time."""
    if inspect.ismethod(func):
        key = (func.__func__, True)
    elif inspect.isfunction(func):
        key = (func, False)
    else:
        return _varnames(func)
    names = _kept_names.get(key)
    if names is None:
        names = _kept_names[key] = _varnames(func)
    return names


#: pluggy reads every hook function's signature (inspect.signature) as each plugin registers, and
#: every pytest session a test runs in this process (~300 pytester runs) registers some 40 plugins
#: afresh: ~3 s of the suite went to reading the same signatures again. A function's argument names
#: do not change, so this process reads each once.
pluggy._hooks.varnames = _kept_varnames

PLANTED = KERNELS.parent / "tests" / "planted"
REGION_ARCHES = ["sm_80", "sm_86", "sm_90"]
#: Below this many selected tests here, each test compiles and reads what it needs itself.
_PREFETCH_MIN_TESTS = 20


def pytest_sessionstart(session):
    """Nothing read before this session answers in it: in-process memos start empty (a forked
    process, as mutmut makes, would otherwise inherit them), and in a mutation run
    ($GPUPROPS_TEST_CUBIN_SEED set) SASS listings are cached in a folder of this session only, so a
    mutant of the sass layer is always run, never answered from an earlier listing."""
    sass.clear_memo()
    gp_facts.clear_memo()
    gp_cli._parser.cache_clear()
    if os.environ.get("GPUPROPS_TEST_CUBIN_SEED"):
        import tempfile
        session.config._gpuprops_listings = tempfile.mkdtemp(prefix="gpuprops-listings-")
        os.environ["GPUPROPS_CACHE_DIR"] = session.config._gpuprops_listings
        seed = os.environ.get("GPUPROPS_TEST_LISTING_SEED")
        if seed and os.path.isdir(seed):
            # A quick first pass (tools/mutation.sh): start from listings read before. Hard links are
            # safe, as the cache replaces an entry by a new file, never writes into one. A mutant that
            # only a cache miss would run survives here and is run again without this seed, so the
            # seed can hide a kill for a while, never make one.
            shutil.copytree(seed, os.path.join(session.config._gpuprops_listings, "sass"), copy_function=os.link,
                            dirs_exist_ok=True)


def pytest_sessionfinish(session):
    folder = getattr(session.config, "_gpuprops_listings", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        # a mutation run starts thousands of sessions in forked processes, which skip pytest's own
        # clean-up of old temporary folders: remove this session's (nothing reads it afterwards)
        factory = getattr(session.config, "_tmp_path_factory", None)
        base = getattr(factory, "_basetemp", None) if factory is not None else None
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)


#: The files of the longest tests here (each 1.5-12 s on the 2-core machine: simulated stresses in real
#: time, pytest processes under xdist), longest first. Under pytest-xdist they are collected first,
#: so a worker takes them while the short tests still even out the end: last, the simulated validation
#: run (12 s) left one worker alone for the last 6 s of a `-n 2` run. Only the order changes.
_LONGEST_FILES = ("test_throughput_facts_simulated.py", "test_trust.py", "test_dram_peak_compare_tool.py",
                  "test_power.py", "test_fleet_groups.py", "test_accepted_units.py")


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # serial runs keep pytest's order
        return
    rank = {name: n for n, name in enumerate(_LONGEST_FILES)}
    here = [(rank[i.path.name], n, i) for n, i in enumerate(items)
            if i.path.name in rank and i.path.parent.name == "tests"]
    if here:
        moved = {id(i) for _, _, i in here}
        items[:] = [i for _, _, i in sorted(here, key=lambda t: t[:2])] + [i for i in items if id(i) not in moved]


@pytest.fixture(scope="session")
def _tmp_path_numbers():
    return itertools.count()


@pytest.fixture
def tmp_path(tmp_path_factory, _tmp_path_numbers, request):
    """pytest's tmp_path (a new empty folder under the session's base folder, named for the test), but
    numbered by a count of this process instead of pytest's listing of the base folder at each test
    for the highest number so far: with ~1 700 folders there, that listing cost each test more as the
    suite went on (the 684 cases of one test in test_bad_inputs.py listed each other's: ~2 s)."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    base = tmp_path_factory.getbasetemp()
    while True:
        path = base / f"{name}_{next(_tmp_path_numbers)}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # another process of this base folder made it
            continue
        return path


@pytest.fixture(scope="session")
def _baseline_stores(tmp_path_factory):
    return tmp_path_factory.mktemp("baselines"), itertools.count()


@pytest.fixture(autouse=True)
def _baseline_store_of_the_test(_baseline_stores, monkeypatch):
    """Runs of fake GPUs (pytester sessions) keep their unit baselines in a folder of their test,
    never in the user's store (~/.local/share/gpuprops/baselines). The folder is named, not made: the
    store makes it when a run writes there (a numbered temporary folder per test lists every earlier
    one: 3 600 tests spent seconds on that)."""
    base, numbers = _baseline_stores
    monkeypatch.setenv("GPUPROPS_BASELINE_DIR", str(base / str(next(numbers))))




@pytest.fixture(autouse=True)
def _child_pytest_without_hypothesis(monkeypatch):
    """Set per test, not for the session: this session's own xdist workers keep the plugin."""
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"),
                                                               CHILD_PYTEST_ADDOPTS])))


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester, whose runs (in this process or not) leave Hypothesis's plugin out too: pytester
    removes $PYTEST_ADDOPTS when it starts, so it is set again here. A run given paths of the checkout
    as option values (--gpuprops-kernels, --gpuprops-cache) takes the checkout as its rootdir and
    confcutdir; its collection then listed every folder on the way down to the test's (/tmp, the base
    temporary folder with thousands of test folders) and it read, sorted and wrote back the checkout's
    .pytest_cache (the suite's 4 400 node ids). Its confcutdir is the test's folder, and it runs without
    the cache plugin (no run here uses --lf, --nf or the cache fixture): rootdir, ini and node ids are
    as before."""
    here = shlex.quote(str(pytester.path))
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{CHILD_PYTEST_ADDOPTS} --confcutdir={here} -p no:cacheprovider")
    return pytester


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """The cubin cache the tests compile into: the persistent one (``$GPUPROPS_CACHE_DIR``, else
    ~/.cache/gpuprops/cubins), so a warm run compiles nothing and a cold one compiles each build once.
    Sharing it is safe: an entry is keyed by source, headers, options, arch and compiler, replaced by a
    new file (never written into) and checked on every read; tests of damaged or missing entries use
    folders of their own. A mutation run ($GPUPROPS_TEST_CUBIN_SEED) compiles into a folder of its
    session, started from the seed."""
    seed = os.environ.get("GPUPROPS_TEST_CUBIN_SEED")  # a warm cache to start from (tools/mutation.sh)
    if not seed:
        path = default_cache_dir()
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = tmp_path_factory.mktemp("cubins")
    if os.path.isdir(seed):
        # hard links: the cache replaces an entry by a new file, never writes into one
        shutil.copytree(seed, path, dirs_exist_ok=True, copy_function=os.link)
    else:
        # Tests that point $GPUPROPS_CACHE_DIR here still find the SASS listings already read (they
        # are keyed by the code's bytes and checked against them on every read): share that folder.
        listings = default_cache_dir() / "sass"
        try:
            listings.mkdir(parents=True, exist_ok=True)
            (path / "sass").symlink_to(listings, target_is_directory=True)
        except OSError:
            pass  # no symlinks here: those tests read their listings again
    return path


@pytest.fixture(scope="session")
def kernel_cache():
    """The persistent cubin cache (``$GPUPROPS_CACHE_DIR``, else ~/.cache/gpuprops/cubins), read
    before any pytester run moves HOME: a pytester run of the suite's own kernels passes it as
    --gpuprops-cache and compiles them once, not in every session. (A mutation run points
    $GPUPROPS_CACHE_DIR at a folder of its session alone; so does this, then.)"""
    return default_cache_dir()


@pytest.fixture(scope="session")
def build(cache_dir):
    """build(source, arch, **defines) -> sass.Cubin"""
    def _build(source, arch, **defines):
        c = compile_cuda(KERNELS / source, arch, defines, cache_dir=cache_dir)
        return sass.Cubin(c.cubin, arch, name=source)
    return _build


def _builds():
    """What the test_sass_*.py files and test_cli.py compile (a build left out here is
    compiled by its test as before, only not in the batch)."""
    from pytest_gpuprops.prefetch import Build
    out = []
    for arch in PATCH_ARCHES:
        out += [Build.of(KERNELS / "regbank_ffma.cu", arch, {"NFFMA": 8}),
                Build.of(KERNELS / "smem_latency_st.cu", arch, {"UNROLL": 4}),
                Build.of(KERNELS / "ffma.cu", arch, {"ILP": 1, "UNROLL": 8})]
    for arch in REGION_ARCHES:
        out += [Build.of(KERNELS / "smem_latency_ld.cu", arch, {"UNROLL": 4}),
                Build.of(PLANTED / "dirty_start.cu", arch, include_dirs=[KERNELS]),
                Build.of(PLANTED / "load_inside.cu", arch, include_dirs=[KERNELS])]
    out += [Build.of(KERNELS / "smem_latency_ld.cu", "sm_90", {"UNROLL": 50}),
            Build.of(KERNELS / "ffma.cu", "sm_90", {"ILP": 1, "UNROLL": 256}),
            Build.of(KERNELS / "ffma.cu", "sm_90"),
            Build.of(KERNELS / "clock_overhead.cu", "sm_90"),
            Build.of(KERNELS / "hmma_16816.cu", "sm_86", {"ILP": 1})]
    return out


def _foreseen_patches(cubins):
    """The patches test_sass_patching.py and test_sass_region.py make, planned as they plan them (a copy: if a
    test changes its edits, its patch is read in its own nvdisasm run, as before, only slower)."""
    E, reqs = sass.Edit, []
    for b, cb in cubins.items():
        k = next(iter(cb.kernels))
        try:
            ins = cb.instructions(k)
            name = b.source.name
            if name == "regbank_ffma.cu":
                scratch = sass.ffma_destinations(ins)
                body = [i for i in sass.timed_region(ins)[1] if i.base_opcode == "FFMA"]
                for edits in ([E(body[0].offset, regs=(None, 8, 10, 16), reuse=0b011, stall=1, yield_flag=False)],
                              [E(body[1].offset, regs=(None, sass.RZ, 9, 11), reuse=0b100, yield_flag=False)],
                              sass.ffma_operand_edits(ins, 8, 10, 16, 0)[:1],
                              *[sass.ffma_operand_edits(ins, *v) + sass.timing_edits(ins)
                                for v in [(8, 10, 16, 0), (9, 9, 9, 3), (11, 13, 15, 1)]]):
                    reqs.append((cb, k, edits, scratch))
                continue
            start, _, stop = sass.timed_region(ins)
            if name == "smem_latency_st.cu":
                reqs.append((cb, k, sass.chain_on_read_scoreboard(ins, "STS"), None))
            elif name == "dirty_start.cu":
                reqs.append((cb, k, [E(stop.offset, wait_mask=0x3F)], None))
            elif name == "smem_latency_ld.cu":
                reqs.append((cb, k, [E(start.offset, wait_mask=0x3F), E(stop.offset, wait_mask=0)], None))
            if name in ("dirty_start.cu", "load_inside.cu", "smem_latency_ld.cu") or \
                    (name == "ffma.cu" and dict(b.defines).get("UNROLL") == "8"):
                reqs.append((cb, k, sass.timing_edits(ins), None))
        except (sass.SassError, IndexError):
            continue
    return reqs


@pytest.fixture(scope="session", autouse=True)
def _prefetch(request, cache_dir):
    here = [i for i in request.session.items if "tests" in i.path.parts and i.path.parent.name == "tests"]
    if len(here) < _PREFETCH_MIN_TESTS:
        return
    from filelock import FileLock

    from pytest_gpuprops import cache as gp_cache
    from pytest_gpuprops import prefetch
    lock = gp_cache.root() / "prefetch.lock"  # pytest-xdist workers: one compiles, the others read its cache
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock), timeout=1800), prefetch.long_lived():
        cubins = prefetch.builds(_builds(), cache_dir=cache_dir)
        try:
            sass.prefetch_patches(_foreseen_patches(cubins))
        except sass.SassError:
            pass  # nvdisasm missing: the tests that need it say so


@pytest.fixture
def none_registered(monkeypatch):
    """No fact registered as a GPU model's (facts.GPU_SCOPED emptied for the test)."""
    from pytest_gpuprops import facts
    monkeypatch.setattr(facts, "GPU_SCOPED", set())
