"""start-up: everything the options name, checked once before any test runs, so a typo is one usage
error (exit status 4) at start-up, not a green run of skips or a traceback after the whole run: the
facts file, the kernels and cache folders, the files the run will write, the environment variables
(inputs.py's checks, whose InputError becomes the usage error here), the baseline options, the GPUs
asked for by index, and after collection whether the facts given can be checked by the tests selected.
plugin.py calls these from its hooks; each raises pytest.UsageError saying what to fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import baselines, devices, fixture, inputs, session
from . import compile as gp_compile
from . import facts as gp_facts


def writable_file(option: str, path: str, *, exists_ok: bool = True) -> None:
    """A file ``option`` will write at the end of the run: refuse now what would fail then."""
    p = Path(path)
    if p.is_dir():
        raise pytest.UsageError(f"{option} {path} is a folder; give a file name (e.g. {p / 'gpuprops.json'})")
    if p.exists() and not exists_ok:
        raise pytest.UsageError(f"{option} {path} exists; pass --force to overwrite it, or choose another path")
    writable_dir(option, str(p.parent), path)


def writable_dir(option: str, path: str, shown: str | None = None) -> None:
    """A folder that exists or can be created, and can be written."""
    p = Path(path) if path else Path(".")
    existing = p
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise pytest.UsageError(f"{option} {shown or path}: {existing} is a file, not a folder; choose a path "
                                "in a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{option} {shown or path}: folder {existing} is not writable; choose a "
                                "path you can write")


def check_options(opt) -> None:
    """Everything the options name, checked once before any test runs: a typo is one usage error at
    start-up, not a green run of skips or a traceback after the whole run."""
    if opt.gpuprops_facts:
        try:
            gp_facts.check_facts_path(opt.gpuprops_facts)
        except gp_facts.FactsError as exc:
            raise pytest.UsageError(f"--gpuprops-facts: {exc}") from None
    if opt.gpuprops_kernels and not Path(opt.gpuprops_kernels).is_dir():
        raise pytest.UsageError(f"--gpuprops-kernels {opt.gpuprops_kernels} is not a folder; give the folder "
                                "that holds the kernel sources (the repository's kernels/)")
    if opt.gpuprops_kernels and not any(Path(opt.gpuprops_kernels).glob("*.cu")):
        raise pytest.UsageError(f"--gpuprops-kernels {opt.gpuprops_kernels} holds no kernel sources (no .cu file); "
                                "give the folder that holds them (the repository's kernels/)")
    try:
        gp_compile.check_cache_dir(opt.gpuprops_cache)
    except gp_compile.CacheError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.gpuprops_report:
        writable_file("--gpuprops-report", opt.gpuprops_report)
        writable_file("--gpuprops-report", str(Path(opt.gpuprops_report).with_suffix(".md")))
    try:
        check_environment(opt)
    except inputs.InputError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.gpuprops_plots:
        if Path(opt.gpuprops_plots).is_file():
            raise pytest.UsageError(f"--gpuprops-plots {opt.gpuprops_plots} is a file; give a folder for the PNGs")
        writable_dir("--gpuprops-plots", opt.gpuprops_plots)
    check_baseline_options(opt)
    fixture.parse_plant_shift(os.environ.get("GPUPROPS_PLANT_SHIFT"))
    check_asked_gpus(opt)
    if opt.gpuprops_record:
        writable_file("--gpuprops-record", opt.gpuprops_record, exists_ok=opt.gpuprops_force)
        reason = devices.gpu_unavailable_reason(opt.gpuprops_gpu or 0)
        if reason:
            raise pytest.UsageError(f"--gpuprops-record measures facts on a GPU, and none can be used here: {reason}. "
                                    "Nothing would be recorded; run it on the GPU whose facts you want")


def check_environment(opt) -> None:
    """The files the run writes and the environment variables (inputs.py): what no option type checks.
    Raises inputs.InputError."""
    inputs.check_lock_dir()
    inputs.check_tool("GPUPROPS_NVDISASM", r"CUDA disassembler", "nvdisasm",
                      "unset it to use the one from pip (nvidia-cuda-nvdisasm)")
    inputs.check_tool("GPUPROPS_NCU", r"Nsight Compute", "Nsight Compute's ncu",
                      "unset it to find ncu on PATH (the tensor-pipe facts skip without one)")
    inputs.check_fresh_draws()
    inputs.check_plant_no_peer()
    if opt.gpuprops_report:
        inputs.check_report_target("--gpuprops-report", opt.gpuprops_report, opt.gpuprops_force)
        report_path = Path(opt.gpuprops_report)
        inputs.check_distinct_outputs([("--gpuprops-report", str(report_path)),
                                       ("--gpuprops-report", str(report_path.with_suffix(".md"))),
                                       *([("--gpuprops-record", opt.gpuprops_record)] if opt.gpuprops_record else [])])
    if not opt.gpuprops_record:
        text = os.environ.get("GPUPROPS_PLANT_SHIFT")
        inputs.check_plant_shift(fixture.parse_plant_shift(text), text, opt.gpuprops_facts)


def check_selected_facts(state: session.GpuPropsState, items: list[pytest.Item]) -> None:
    """--gpuprops-facts must hold facts for an arch the selected fact tests check: the compile-time
    tests' ``arch`` parameters, and the GPU's arch where a GPU can be used (inputs.check_facts_match)."""
    if not state.facts_path or state.record_path or not items:
        return
    static = {inputs.static_arch(dict(getattr(getattr(i, "callspec", None), "params", {}))) for i in items
              if "gpuprops_static" in getattr(i, "fixturenames", ())}
    gpu_archs: set[str] = set()
    note = ""
    if any(i.get_closest_marker("gpu") and {"gpuprops", "gpu_facts"} & set(getattr(i, "fixturenames", ()))
           for i in items):
        slots = [state.slot(index) for index in state.gpu_list()]
        gpu_archs = {s.info.arch for s in slots if s.info is not None}
        note = (f" (the GPU here is {', '.join(sorted(gpu_archs))})" if gpu_archs else
                f"; no GPU can be used here ({next((s.unavailable for s in slots if s.unavailable), 'none visible')})")
    try:
        inputs.check_facts_match(state.facts_path, static, gpu_archs, note)
    except inputs.InputError as exc:
        raise pytest.UsageError(str(exc)) from None


def check_baseline_options(opt) -> None:
    """--gpuprops-baseline / --gpuprops-compare name a readable report, and the store a folder we can
    write; the two options cannot both name a file."""
    chosen = opt.gpuprops_baseline
    if not chosen or not chosen.strip():
        raise pytest.UsageError("--gpuprops-baseline '': expected 'last' (the unit's last accepted run), 'none' or "
                                "a report file")
    if opt.gpuprops_compare is not None and not opt.gpuprops_compare.strip():
        raise pytest.UsageError("--gpuprops-compare '': expected a report file written by --gpuprops-report")
    if opt.gpuprops_compare and chosen not in (baselines.LAST, opt.gpuprops_compare):
        raise pytest.UsageError(f"--gpuprops-compare {opt.gpuprops_compare} and --gpuprops-baseline {chosen} "
                                "name two baselines; give one")
    option, path = (("--gpuprops-compare", opt.gpuprops_compare) if opt.gpuprops_compare else
                    ("--gpuprops-baseline", chosen if chosen not in (baselines.LAST, baselines.NONE) else None))
    if path:
        try:
            baselines.from_report(path)
        except baselines.BaselineError as exc:
            raise pytest.UsageError(f"{option}: {exc}") from None
    if opt.gpuprops_baselines is not None and not opt.gpuprops_baselines.strip():
        raise pytest.UsageError("--gpuprops-baselines '': expected a folder for the baseline store")
    if opt.gpuprops_baseline_accept and chosen == baselines.NONE:
        raise pytest.UsageError("--gpuprops-baseline-accept with --gpuprops-baseline none: a run that is not stored "
                                "cannot become a baseline; drop one of the two")
    # a store the user named must be usable; the default one (a read-only home on a CI machine) is
    # only said to be unusable at the end, when a GPU run had something to keep
    if chosen != baselines.NONE and opt.gpuprops_baselines:
        writable_dir("--gpuprops-baselines", opt.gpuprops_baselines)
    elif chosen != baselines.NONE and os.environ.get(baselines.STORE_ENV):
        writable_dir(baselines.STORE_ENV, os.environ[baselines.STORE_ENV])


def check_asked_gpus(opt) -> None:
    """A GPU asked for by index (--gpu N, --gpuprops-gpus LIST or all) that is not visible fails the
    run at start-up: a GPU that fell off the bus must not read as a green run of skipped facts. With
    no GPU asked for, a machine without one still skips every GPU fact with the reason (CPU CI)."""
    asked: list[tuple[str, int]] = []
    if opt.gpuprops_gpu is not None:
        asked.append((f"--gpu {opt.gpuprops_gpu}", opt.gpuprops_gpu))
    gpus = getattr(opt, "gpuprops_gpus", None)
    if gpus and gpus.strip() != "all":
        asked += [(f"--gpuprops-gpus {gpus}", i) for i in session.parse_gpus(gpus, devices.visible_gpu_count)]
    if not asked and not (gpus and gpus.strip() == "all"):
        return
    visible = devices.visible_gpu_count()
    if visible == 0:
        why = devices.gpu_unavailable_reason(0) or "no CUDA GPU visible"
        what = asked[0][0] if asked else f"--gpuprops-gpus {gpus}"
        raise pytest.UsageError(f"{what} asks for a GPU, and none is visible here: {why}. Check the GPU with "
                                "nvidia-smi (a GPU that fell off the bus is missing there too) and "
                                "CUDA_VISIBLE_DEVICES; without --gpu the GPU facts skip with that reason")
    missing = [(what, i) for what, i in asked if i >= visible]
    if missing:
        what, i = missing[0]
        raise pytest.UsageError(f"{what} asks for GPU {i}, and only {visible} GPU(s) are visible (indices 0.."
                                f"{visible - 1}). Check the GPU with nvidia-smi (a GPU that fell off the bus is "
                                "missing there too) and CUDA_VISIBLE_DEVICES")
