"""The sass package's errors: every problem it reports is a :class:`SassError`."""

from __future__ import annotations


class SassError(Exception):
    """A cubin or disassembly problem: not an ELF, no such kernel, nvdisasm missing or failing."""


class PatchRefused(SassError):
    """A patch that cannot be made or cannot be verified; nothing was produced."""


class ListingMismatch(SassError):
    """nvdisasm printed words that are not the bytes it was given (at ``offset`` of the code)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset
