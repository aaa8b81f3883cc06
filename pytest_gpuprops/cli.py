"""The ``gpuprops`` command for people who read SASS.

    gpuprops compile kernels/regbank_ffma.cu --arch sm_90 -o rb.cubin
    gpuprops sass rb.cubin [--kernel regbank_ffma]
    gpuprops patch rb.cubin --kernel regbank_ffma --at 0480 --regs R8,R10,R12 --reuse A --stall 1 -o p.cubin
    gpuprops facts [--arch sm_90] [--facts PATH]

Offsets are hexadecimal, as ``gpuprops sass`` and nvdisasm print them (``/*0480*/``): ``0480`` and
``0x480`` name the same instruction.

Exit status: 0 when the command did what it was asked; 2 when it refused (a bad argument, a file
that cannot be read or written, a patch that cannot be verified). A refusal prints one message on
stderr (what was wrong, what was expected, what to do) and writes nothing.

This module parses the command line and dispatches; the commands are :mod:`~pytest_gpuprops.cli_sass`
(compile, sass, patch), :mod:`~pytest_gpuprops.cli_facts` (facts) and :mod:`~pytest_gpuprops.cli_runs`
(merge, baselines), their shared refusal and file handling :mod:`~pytest_gpuprops.cli_files`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import string
import sys

from . import __version__, sass
from . import compile as gp_compile
from . import facts as gp_facts
from .cli_facts import cmd_facts
from .cli_files import Refused
from .cli_runs import cmd_baselines, cmd_merge
from .cli_sass import cmd_compile, cmd_patch, cmd_sass


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is a :class:`Refused` (exit 2, one line), not a usage dump."""

    def error(self, message: str):
        raise Refused(f"{message} (see '{self.prog} --help')", prog=self.prog)


# ----------------------------------------------------------------------------------------------
# argument types: each says what it takes


def _int_in(lo: int, hi: int, *, none_ok: bool = False):
    def parse(text: str):
        if none_ok and text.strip().lower() == "none":
            return None
        try:
            v = int(text, 0)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            extra = " or 'none'" if none_ok else ""
            raise argparse.ArgumentTypeError(f"takes an integer {lo}..{hi}{extra}, not {text!r}")
        return v
    return parse


def _offset(text: str) -> int:
    """An instruction offset in hex, as nvdisasm prints it: ``0480``, ``0x480`` or ``/*0480*/``."""
    t = text.strip()
    if t.startswith("/*") and t.endswith("*/"):
        t = t[2:-2].strip()
    t = t.lower().removeprefix("0x")
    if not t or any(ch not in string.hexdigits for ch in t):
        raise argparse.ArgumentTypeError(f"takes instruction offsets in hex, as 'gpuprops sass' prints them "
                                         f"(/*0480*/ -> 0480 or 0x480), not {text!r}")
    v = int(t, 16)
    if v % 16:
        raise argparse.ArgumentTypeError(f"{text} (0x{v:x}) is not an instruction offset; instructions are "
                                         "16 bytes, so offsets end in 0 in hex (0480, 0490, ...)")
    return v


def _reg(tok: str) -> int:
    t = tok.strip().upper()
    if t == "RZ":
        return sass.RZ
    if not t.startswith("R") or not t[1:].isdigit() or int(t[1:]) > 254:
        raise argparse.ArgumentTypeError(f"takes registers like R8 or RZ (R0..R254), not {tok.strip()!r}")
    return int(t[1:])


def _regs(text: str) -> tuple:
    regs = [_reg(t) for t in text.split(",")]
    if len(regs) == 3:
        return (None, *regs)  # sources only; the destination stays
    if len(regs) != 4:
        raise argparse.ArgumentTypeError(f"takes Ra,Rb,Rc or Rd,Ra,Rb,Rc (3 or 4 registers), not {text!r}")
    return tuple(regs)


def _scratch(text: str) -> set[int]:
    return {_reg(t) for t in text.split(",")}


def _reuse(text: str) -> int:
    mask = 0
    for ch in text.upper().replace("-", ""):
        if ch not in "ABC":
            raise argparse.ArgumentTypeError(f"takes slots A, B, C (e.g. AB; '' clears them), not {text!r}")
        mask |= 1 << "ABC".index(ch)
    return mask


def _given(what: str):
    """A string argument that must not be empty: ``-o ''`` is a mistake, never 'the default'."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"takes {what}, not an empty value {text!r}")
        return text
    return parse


def _define(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    if not re.fullmatch(r"[A-Za-z_]\w*", name.strip()):
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE (or NAME) with NAME a C identifier, not {text!r}")
    return name.strip(), value if value else "1"


class _Version(argparse.Action):
    """--version: the package and the tools it found (looked up only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parts = [f"gpuprops {__version__}"]
        for label, get in (("compiler", gp_compile.compiler_version),
                           ("nvdisasm", lambda: f"{sass.nvdisasm_version()} ({sass.find_nvdisasm()})")):
            try:
                parts.append(f"{label}: {get()}")
            except Exception as exc:  # a missing tool is part of the answer, not an error
                parts.append(f"{label}: unavailable ({exc})")
        print("\n".join(parts))
        parser.exit()


class _BarrierAction(argparse.Action):
    """--read-barrier/--write-barrier: 'none' (None) is a value to set, not 'leave as is'."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuprops", description="compile, read and patch SASS; list GPU facts",
                epilog="Exit status: 0 done, 1 facts that do not hold (merge), 2 refused (the message says why; "
                       "nothing is written).")
    p.add_argument("--version", action=_Version, help="print the version and the compiler and nvdisasm found")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{compile,sass,patch,facts,merge,baselines}")
    c = sub.add_parser("compile", help="CUDA C++ -> cubin for one arch (NVRTC, no GPU needed)")
    c.add_argument("source", type=_given("a CUDA C++ file (.cu)"), help="a CUDA C++ file (.cu)")
    c.add_argument("--arch", required=True, type=_given("an arch name (sm_90)"), help="sm_75 or newer: sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120, ...")
    c.add_argument("-D", "--define", action="append", type=_define, help="NAME=VALUE macro (repeatable)")
    c.add_argument("--backend", default="nvrtc", choices=["nvrtc", "nvcc"])
    c.add_argument("-o", "--output", type=_given("a file name for the cubin"), help="the cubin to write (default: <source>.<arch>.cubin here); an "
                                          "existing file that is not a cubin is never overwritten")
    c.set_defaults(func=cmd_compile)
    s = sub.add_parser("sass", help="print a cubin's SASS with decoded control codes and raw words")
    s.add_argument("cubin", type=_given("a .cubin file"))
    s.add_argument("--kernel", type=_given("a kernel's name ('gpuprops sass' lists them)"))
    s.set_defaults(func=cmd_sass)
    t = sub.add_parser("patch", help="edit registers, reuse and control fields; verified by disassembly")
    t.add_argument("cubin", type=_given("a .cubin file"))
    t.add_argument("--kernel", type=_given("a kernel's name ('gpuprops sass' lists them)"), help="which kernel (needed when the cubin has several)")
    t.add_argument("--at", nargs="+", required=True, type=_offset, metavar="OFFSET",
                   help="instruction offsets in hex, as 'gpuprops sass' prints them: 0480 or 0x480")
    t.add_argument("--regs", type=_regs, help="Ra,Rb,Rc (or Rd,Ra,Rb,Rc) for FFMA R, R, R, R")
    t.add_argument("--reuse", type=_reuse, help="slots to mark .reuse: A, B, C, AB, ... ('' clears)")
    t.add_argument("--stall", type=_int_in(0, 15), help="stall cycles 0..15")
    t.add_argument("--yield", dest="yield_flag", choices=["on", "off"], type=str.lower,
                   help="on prints 'Y' in the control code")
    t.add_argument("--wait-mask", dest="wait_mask", type=_int_in(0, 0x3F),
                   help="scoreboards to wait on, as a bit mask 0..0x3f")
    t.add_argument("--read-barrier", dest="read_barrier", type=_int_in(0, 5, none_ok=True),
                   action=_BarrierAction, help="scoreboard 0..5 to set on read, or none")
    t.add_argument("--write-barrier", dest="write_barrier", type=_int_in(0, 5, none_ok=True),
                   action=_BarrierAction, help="scoreboard 0..5 to set on write, or none")
    t.add_argument("--scratch", type=_scratch, help="registers the patch may write (R5,R6); default: only the "
                                                    "current Rd")
    t.add_argument("-o", "--output", required=True, type=_given("a file name for the patched cubin"), help="the patched cubin (never the input itself)")
    t.set_defaults(func=cmd_patch)
    f = sub.add_parser("facts", help="list the facts per arch")
    f.add_argument("--arch", type=_given("an arch name (sm_90)"), help="one arch (sm_90); default: every packaged one")
    f.add_argument("--facts", type=_given("a facts .toml file or a folder of sm_XX.toml"), help="a facts file or folder of sm_XX.toml instead of the packaged ones")
    f.add_argument("--gpu", type=_given("a GPU model's name, e.g. 'NVIDIA H200'"), help="the facts for one GPU model (its arch's, with its section on top), e.g. "
                                 "'NVIDIA H200'")
    f.add_argument("--fact", type=_given("a fact's name ('gpuprops facts' lists them)"), help="one fact whole: expected, units so far, method and source")
    f.add_argument("--detection", action="store_true",
                   help="the shift each fact's SKU band is sure to catch on every unit recorded, and its same-unit "
                        "band, the weakest first")
    f.set_defaults(func=cmd_facts)
    m = sub.add_parser("merge", help="one table for a fleet's reports (--gpuprops-report JSON), outliers flagged")
    m.add_argument("reports", nargs="+", type=_given("report JSON files (--gpuprops-report)"), help="report JSON files, one per node or run")
    m.set_defaults(func=cmd_merge)
    b = sub.add_parser("baselines", help="the unit baseline store: each GPU unit's runs, accepted or not, and its "
                                         "baseline")
    b.add_argument("--store", type=_given("the baseline store's folder"),
                   help="the store (default $GPUPROPS_BASELINE_DIR or ~/.local/share/gpuprops/baselines)")
    b.add_argument("--unit", type=_given("a GPU UUID or its start, e.g. GPU-c5d47081"),
                   help="one unit (a UUID or its start): every run, not the newest five")
    b.set_defaults(func=cmd_baselines)
    return p


_REFUSED = (Refused, gp_compile.CompileError, gp_compile.ArchError, sass.SassError, gp_facts.FactsError,
            gp_facts.MissingFacts)


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """The parser main() uses, built once a process: building it is ~3 ms (argparse looks up a
    translation for every help text), and a parse leaves it as it was."""
    return build_parser()


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 done, 2 refused) instead of raising."""
    parser = _parser()
    prog = "gpuprops"
    try:
        args = parser.parse_args(argv)
        prog = f"gpuprops {args.cmd}"
        if getattr(args, "yield_flag", None) is not None:
            args.yield_flag = args.yield_flag == "on"
        status = args.func(args)
        sys.stdout.flush()
        return status
    except _REFUSED as exc:
        print(f"{getattr(exc, 'prog', None) or prog}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped reading (gpuprops sass x | head): not an error. Point stdout at
        # /dev/null so that the interpreter's final flush does not complain either.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
