"""sass layer: read a cubin, disassemble it, decode control codes, and patch it with verification.

One module per concern; every name is re-exported here, so ``from pytest_gpuprops import sass;
sass.X`` is all a caller needs:

* :mod:`.errors`: ``SassError`` and its kinds;
* :mod:`.encoding`: control codes (``ControlCode``) and instructions (``Instruction``), the bits
  of one 16-byte instruction (docs/encoding.md);
* :mod:`.listing`: nvdisasm, its listings and their cache (in memory and on disk);
* :mod:`.cubin`: the ELF cubin (pyelftools): kernels, code, register counts;
* :mod:`.patching`: the verified patcher (``Edit``, ``patch``, ``patch_many``, ``prefetch*``);
* :mod:`.region`: timed-region analysis (the code between the two clock reads) and its edits.

A test that replaces a name to change what the package does (``monkeypatch.setattr``) replaces it
in the module that uses it, e.g. ``sass.listing.disassemble_raw``: the names here are the same
objects, read once at import.
"""

from __future__ import annotations

# ``_name as _name``: private names that tests and tools read as ``sass._name``.
from .cubin import EIATTR_REGCOUNT, EM_CUDA, Cubin, KernelInfo, clear_memo, load_cubin
from .cubin import _iter_nvinfo as _iter_nvinfo
from .encoding import FFMA_RRRR_OPCODE, RZ, ControlCode, Instruction, join_words, split_words
from .errors import ListingMismatch, PatchRefused, SassError
from .listing import _BASE_SHIFT as _BASE_SHIFT
from .listing import (
    LISTING_MODE,
    code_listing,
    code_listings,
    code_listings_by_arch,
    disassemble_raw,
    find_nvdisasm,
    listing_key,
    listing_path,
    nvdisasm_arch,
    nvdisasm_build,
    nvdisasm_version,
    stats,
)
from .listing import _disassemble_codes as _disassemble_codes
from .listing import _memo as _memo
from .listing import _memo_put as _memo_put
from .listing import _nvdisasm_identity_of as _nvdisasm_identity_of
from .listing import _parse_listing as _parse_listing
from .listing import _rebase_text as _rebase_text
from .listing import _run_nvdisasm as _run_nvdisasm
from .listing import _words_problem as _words_problem
from .patching import _CONTROL_FLOW as _CONTROL_FLOW
from .patching import KEEP, Edit, PatchResult, patch, patch_many, prefetch, prefetch_patches, usable_registers
from .patching import _plan as _plan
from .patching import _plan_one as _plan_one
from .patching import _verify as _verify
from .region import (
    chain_on_read_scoreboard,
    clock_reads,
    ffma_destinations,
    ffma_operand_edits,
    free_scoreboard,
    is_filler,
    region_hazards,
    region_mismatch,
    region_opcodes,
    timed_region,
    timing_edits,
)

__all__ = [
    "EIATTR_REGCOUNT", "EM_CUDA", "FFMA_RRRR_OPCODE", "KEEP", "LISTING_MODE", "RZ",
    "ControlCode", "Cubin", "Edit", "Instruction", "KernelInfo", "ListingMismatch", "PatchRefused",
    "PatchResult", "SassError",
    "chain_on_read_scoreboard", "clear_memo", "clock_reads", "code_listing", "code_listings", "code_listings_by_arch",
    "disassemble_raw", "ffma_destinations", "ffma_operand_edits", "find_nvdisasm", "free_scoreboard",
    "is_filler", "join_words", "listing_key", "listing_path", "load_cubin", "nvdisasm_arch",
    "nvdisasm_build", "nvdisasm_version", "patch", "patch_many", "prefetch", "prefetch_patches",
    "region_hazards", "region_mismatch", "region_opcodes", "split_words", "stats", "timed_region",
    "timing_edits", "usable_registers",
]
