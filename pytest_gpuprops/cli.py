"""The ``gpuprops`` command for people who read SASS.

    gpuprops compile kernels/hmma_16816.cu --arch sm_90 -D ILP=3 -o hmma.cubin
    gpuprops sass hmma.cubin [--kernel hmma_16816]
    gpuprops patch in.cubin --kernel K --at 0x480 0x490 --regs R8,R10,R12 --reuse A --stall 1 -o out.cubin
    gpuprops facts [--arch sm_90] [--facts PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import compile as gp_compile
from . import facts as gp_facts
from . import sass


def _defines(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        k, _, v = item.partition("=")
        out[k] = v if v else "1"
    return out


def cmd_compile(a) -> int:
    c = gp_compile.compile_cuda(a.source, a.arch, _defines(a.define), backend=a.backend)
    out = Path(a.output or Path(a.source).with_suffix(f".{gp_compile.check_arch(a.arch)}.cubin").name)
    out.write_bytes(c.cubin)
    print(f"{out}: {len(c.cubin)} bytes, {c.compiler}, {'cached' if c.cached else 'compiled'}")
    return 0


def cmd_sass(a) -> int:
    cubin = sass.load_cubin(a.cubin)
    names = [a.kernel] if a.kernel else sorted(cubin.kernels)
    for name in names:
        k = cubin.kernel(name)
        print(f"// {name}: {k.register_count} registers ({cubin.arch}); control code "
              "[B<wait mask>:R<read sb>:W<write sb>:<Y = yield>:S<stall>]")
        for ins in cubin.instructions(name):
            print(ins.line())
    return 0


def _reg(tok: str) -> int:
    tok = tok.strip().upper()
    if tok == "RZ":
        return sass.RZ
    if not tok.startswith("R") or not tok[1:].isdigit():
        raise SystemExit(f"--regs takes registers like R8 or RZ, not {tok!r}")
    return int(tok[1:])


def cmd_patch(a) -> int:
    cubin = sass.load_cubin(a.cubin)
    kernel = cubin.kernel(a.kernel).name
    fields = {}
    if a.regs:
        regs = [_reg(t) for t in a.regs.split(",")]
        if len(regs) == 3:
            regs = [None, *regs]  # sources only; the destination stays
        if len(regs) != 4:
            raise SystemExit("--regs takes Ra,Rb,Rc or Rd,Ra,Rb,Rc")
        fields["regs"] = tuple(regs)
    if a.reuse is not None:
        mask = 0
        for ch in a.reuse.upper().replace("-", ""):
            if ch not in "ABC":
                raise SystemExit(f"--reuse takes slots A, B, C (e.g. AB), not {a.reuse!r}")
            mask |= 1 << "ABC".index(ch)
        fields["reuse"] = mask
        fields.setdefault("yield_flag", False)
    for name in ("stall", "wait_mask", "read_barrier", "write_barrier"):
        v = getattr(a, name)
        if v is not None:
            fields[name] = None if v == "none" else int(v, 0)
    if a.yield_flag is not None:
        fields["yield_flag"] = a.yield_flag == "on"
    edits = [sass.Edit(int(off, 0), **fields) for off in a.at]
    scratch = {_reg(t) for t in a.scratch.split(",")} if a.scratch else None
    try:
        result = sass.patch(cubin, kernel, edits, scratch=scratch)
    except sass.PatchRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    Path(a.output).write_bytes(result.cubin)
    print("\n".join(result.diff_lines()))
    print(f"wrote {a.output} (verified by disassembly)")
    return 0


def cmd_facts(a) -> int:
    from tabulate import tabulate
    archs = [a.arch] if a.arch else gp_facts.packaged_archs()
    for arch in archs:
        f = gp_facts.load_facts(arch, a.facts)
        print(f"# {arch}: {f.path}")
        rows = [[x.name, x.expected_text(), x.kind, x.method[:60], x.source[:70]] for x in f.values()]
        print(tabulate(rows, headers=["fact", "expected", "kind", "method", "source"], disable_numparse=True))
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuprops", description="compile, read and patch SASS; list GPU facts")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="CUDA C++ -> cubin for one arch (NVRTC, no GPU needed)")
    c.add_argument("source")
    c.add_argument("--arch", required=True)
    c.add_argument("-D", "--define", action="append", help="NAME=VALUE macro (repeatable)")
    c.add_argument("--backend", default="nvrtc", choices=["nvrtc", "nvcc"])
    c.add_argument("-o", "--output")
    c.set_defaults(func=cmd_compile)
    s = sub.add_parser("sass", help="print a cubin's SASS with decoded control codes and raw words")
    s.add_argument("cubin")
    s.add_argument("--kernel")
    s.set_defaults(func=cmd_sass)
    t = sub.add_parser("patch", help="edit registers, reuse and control fields; verified by disassembly")
    t.add_argument("cubin")
    t.add_argument("--kernel")
    t.add_argument("--at", nargs="+", required=True, help="instruction offsets (0x480 ...)")
    t.add_argument("--regs", help="Ra,Rb,Rc (or Rd,Ra,Rb,Rc) for FFMA R, R, R, R")
    t.add_argument("--reuse", help="slots to mark .reuse: A, B, C, AB, ... ('' clears)")
    t.add_argument("--stall", type=str)
    t.add_argument("--yield", dest="yield_flag", choices=["on", "off"])
    t.add_argument("--wait-mask", dest="wait_mask", type=str, help="scoreboards to wait on, as a bit mask (0x3f)")
    t.add_argument("--read-barrier", dest="read_barrier", type=str, help="0..5 or none")
    t.add_argument("--write-barrier", dest="write_barrier", type=str, help="0..5 or none")
    t.add_argument("--scratch", help="registers the patch may write (R5,R6); default: only the current Rd")
    t.add_argument("-o", "--output", required=True)
    t.set_defaults(func=cmd_patch)
    f = sub.add_parser("facts", help="list the facts per arch")
    f.add_argument("--arch")
    f.add_argument("--facts", help="a facts file or folder instead of the packaged ones")
    f.set_defaults(func=cmd_facts)
    a = p.parse_args(argv)
    try:
        return a.func(a)
    except (gp_compile.CompileError, gp_compile.ArchError, sass.SassError, gp_facts.FactsError,
            gp_facts.MissingFacts) as exc:
        print(f"gpuprops {a.cmd}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
