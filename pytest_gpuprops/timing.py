"""A kernel as it is timed (docs/method.md): both clock reads patched to wait on all six
scoreboards (nothing issued before the region finishes inside it; the region ends only when its last
variable-latency result is in), plus the spec's own edits, verified by disassembly; refused unless
the patched region is clean at both ends and holds what the fact measures (the spec's exact counts
and, where it has one, its region check: a fact spec's rules). One build per input, kept for the
process.
"""

from __future__ import annotations

import hashlib

from . import sass
from .kernel_spec import KernelSpec


class UncleanRegion(sass.PatchRefused):
    """The timed region, as it would be launched, is not clean at both ends (see sass.region_hazards)."""


def patched_for_timing(cubin: sass.Cubin, kernel: str, edits: list[sass.Edit]) -> tuple[bytes, list[sass.Instruction]]:
    """The kernel with both clock reads waiting on every scoreboard, plus ``edits``; verified by
    disassembly, and refused unless the patched region is clean at both ends."""
    result = sass.patch(cubin, kernel, [*edits, *sass.timing_edits(cubin.instructions(kernel))])
    problems = sass.region_hazards(result.instructions)
    if problems:
        raise UncleanRegion(f"{kernel} ({cubin.name}): the timed region is not clean after the timing patch:\n  "
                            + "\n  ".join(problems))
    return result.cubin, result.instructions


#: (cubin bytes' SHA-256, kernel, edits, region) -> what build_for_timing returned for them: a GPU run
#: asks for the same build again and again (every repeat of a fact, every line of an L2 chase, every
#: shape of a sweep). The answer is a function of those inputs alone (the patch verified against
#: nvdisasm's reading of the patched bytes, the region checked), so the first one stands for the
#: rest of the process; a refusal is not kept (it is raised again, each time).
_BUILT: dict[tuple, tuple[bytes, tuple]] = {}
_BUILT_MAX = 4096


def region_check_refusal(cubin: sass.Cubin, spec: KernelSpec) -> UncleanRegion | None:
    """What ``spec.region_check`` finds wrong with the compiled kernel's timed region, as the refusal
    to raise (naming the check's ``fact`` where it has one), or None where it holds or there is none."""
    if spec.region_check is None:
        return None
    problems = list(spec.region_check(cubin.instructions(spec.kernel)))
    if not problems:
        return None
    fact = getattr(spec.region_check, "fact", None) or "the fact"
    return UncleanRegion(f"{spec.label()} on {cubin.arch}: the timed region does not hold what {fact} measures:\n  "
                         + "\n  ".join(problems))


def build_for_timing(cubin: sass.Cubin, spec: KernelSpec) -> tuple[bytes, list[sass.Instruction]]:
    """``spec``'s kernel patched for timing, with its region checked against what it must hold: its
    ``region_check`` on the compiled kernel first (a refusal asks ``spec.patch`` for nothing), then
    the patched region clean at both ends and holding ``region``'s exact counts. The check runs on
    every call, the patch once per input."""
    refusal = region_check_refusal(cubin, spec)
    if refusal is not None:
        raise refusal
    edits = tuple(spec.patch(cubin, spec.kernel)) if spec.patch else ()
    region = None if spec.region is None else tuple(sorted(spec.region.items()))
    key = (hashlib.sha256(cubin.data).digest(), cubin.arch, spec.kernel, edits, region, spec.region_other)
    known = _BUILT.get(key)
    if known is not None:
        return known[0], list(known[1])
    built = patched_for_timing(cubin, spec.kernel, list(edits))
    if spec.region is not None:
        problems = sass.region_mismatch(built[1], spec.region, spec.region_other)
        if problems:
            raise UncleanRegion(f"{spec.label()} on {cubin.arch}: the timed region does not hold what the fact "
                                "measures:\n  " + "\n  ".join(problems))
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = (built[0], tuple(built[1]))
    return built
