"""What a fact's timed region must hold, derived rather than typed from a disassembly: the unit's own
opcodes per step and how many steps (:class:`Region`), and the :class:`Shape` ptxas lays the rest out
in (nothing else, a counted loop, interleaved chains, a try_wait loop, an elected lane's copy, a lane-0
bulk group, a lane-0 store poll), each shape's invariants checked against the compiled SASS as rules,
not counts (pytest_gpuprops/factspec.py's docstring lists them). :class:`RegionRules` is a region as a
launch's ``KernelSpec.region_check``. No pytest here."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Sequence

from . import sass

# ----------------------------------------------------------------------------------------------
# shapes: how the compiler lays a unit's instructions out in the timed region

#: glue kinds, by base opcode: what may sit beside the unit's instructions in a region
BRANCHES = frozenset({"BRA", "BSSY", "BSYNC", "YIELD"})
LOOP_CONTROL = BRANCHES | {"IMAD", "IADD3", "VIADD", "ISETP"}


@dataclasses.dataclass(frozen=True)
class Shape:
    """How ptxas lays a unit's instructions out in the timed region (sm_90, NVRTC 13): the order
    they must appear in (others may sit between), the kinds of glue that may sit beside them (base
    opcodes; ``uniform``: also uniform-datapath set-up, U* opcodes that do not touch memory) and at
    most how many, whether the last unit instruction is a try_wait whose retries run out of line,
    and whether the unit ends in a poll retried in the region until a warp vote says done.
    """

    name: str
    text: str
    #: the unit's opcodes of one step (in issue order) and the step count -> the order the region holds
    order: Callable[[tuple[str, ...], int], list[str]]
    glue: frozenset = frozenset()
    uniform: bool = False
    glue_max: int = 0
    wait_loop: bool = False
    #: the unit's last two opcodes are a poll (a load) and a warp vote, retried in the region until
    #: the vote is true
    poll_loop: bool = False
    #: how many opcodes one step of the unit has (None: any)
    unit_len: int | None = None


#: the unit's instructions and nothing else: a dependent chain, or an issue, commit and wait
ONLY = Shape("only", "the unit's instructions alone, in order", lambda u, n: list(u) * n)
#: the unit unrolled in a counted loop inside the region: the trip counter's init, increment and
#: compare, the branch back, YIELD, BSSY / BSYNC (7 with NVRTC 13.5 for the DSMEM loop; one more where
#: a compiler sets the counter after the start read, as the device's NVRTC 13.0 does for l1_bandwidth)
LOOP = Shape("loop", "the unit unrolled in a counted loop (loop control beside it)",
             lambda u, n: list(u) * n + ["BRA"], LOOP_CONTROL, glue_max=8)
#: the unit unrolled in a counted loop that runs only when its trip count (a kernel argument) is positive:
#: beside the loop's control, the guard (its compare, the branch round the loop, BSSY / BSYNC) and the
#: registers the loop reads set up before it and copied out after it (MOV, the FADDs that fill a store's
#: vector, HFMA2 zeroing a counter). 18 beside the unit with NVRTC 13.5 for the LDS.128 bandwidth loop
#: (sm_86 .. sm_90), the most of kernels/smem_bandwidth.cu and smem_conflict.cu; 20 allowed, as the
#: hand-written regions of those kernels allowed
GUARDED_LOOP = Shape("guarded_loop", "the unit unrolled in a counted loop run when its count is positive (the guard "
                     "and register set-up beside it)", lambda u, n: list(u) * n + ["BRA"],
                     LOOP_CONTROL | {"MOV", "FADD", "HFMA2"}, glue_max=20)
#: the unit unrolled in a loop whose trip count a define fixes: the loop control, its counter set to zero
#: by a MOV (NVRTC 13.5 for kernels/hmma_16816.cu: MOV, IADD3, ISETP, BRA on sm_80 .. sm_90). What ptxas
#: puts between the loop's exit and the stop read (a CALL.REL.NOINC loop exit, the epilogue's S2R or
#: ULDC) is no glue: a spec names it as ``trailing``, at most once each, after the unit's last step
FIXED_TRIP_LOOP = Shape("fixed_trip_loop", "the unit unrolled in a loop of a fixed trip count (loop control, "
                        "its counter set by MOV)", lambda u, n: list(u) * n + ["BRA"], LOOP_CONTROL | {"MOV"},
                        glue_max=8)
#: a warpgroup MMA chain (wgmma.mma_async, sm_90a): WARPGROUP.ARRIVE (wgmma.fence) before the unit's
#: steps and WARPGROUP.DEPBAR.LE (commit_group + wait_group 0) after them, once each, nothing else (NVRTC
#: 13.5 for kernels/wgmma.cu, every N, type and A source, 1 and 256 steps)
WARPGROUP_CHAIN = Shape("warpgroup_chain", "WARPGROUP.ARRIVE, the unit's steps, WARPGROUP.DEPBAR.LE (once each)",
                        lambda u, n: ["WARPGROUP.ARRIVE", *(list(u) * n), "WARPGROUP.DEPBAR.LE"],
                        frozenset({"WARPGROUP"}), glue_max=2)
#: independent chains of the unit (ILP of them), which ptxas interleaves as it schedules: the unit's
#: exact counts in any order, nothing beside them (a step's opcodes of one chain need not be adjacent)
INTERLEAVED = Shape("interleaved", "independent chains of the unit, interleaved (counts only, any order)",
                    lambda u, n: [])
#: an operation completed through an mbarrier: issue, then try_wait until true; ptxas puts the
#: retry path out of line after EXIT (BSSY, the @!P0 BRA out, BSYNC in the region)
WAIT_LOOP = Shape("wait_loop", "the unit, then its try_wait loop (retries out of line, timed)",
                  lambda u, n: list(u) * n + ["BRA"], BRANCHES, glue_max=3, wait_loop=True)
#: one lane arms an mbarrier and issues a bulk / tensor copy inside ptxas's one-trip ELECT loop (ELECT,
#: BRA.U.ANY), the other lanes branch round it; then every lane's try_wait loop. Beside them the copy's
#: uniform operands and predicates (PLOP3), the wait's parity (SHF) and the branch round (BRA, BSYNC):
#: 13 for the 2D tensor copy with NVRTC 13.5, the most of the three copies
ELECTED_COPY = Shape("elected_copy", "an elected lane arms the mbarrier and issues the copy; every lane's try_wait loop",
                     lambda u, n: [u[0], "ELECT", u[1], "BRA.U.ANY", u[2], "BRA"],
                     BRANCHES | {"ELECT", "PLOP3", "SHF"}, uniform=True, glue_max=13, wait_loop=True, unit_len=3)
#: lane 0 alone issues, commits and waits for a bulk group (DEPBAR), the other lanes branch round it
#: (BRA, BSYNC); its uniform operands are set up in the region (4 with NVRTC 13.5)
LANE0_BULK_GROUP = Shape("lane0_bulk_group", "lane 0 issues, commits and waits for its bulk group; the others branch round",
                         lambda u, n: list(u) * n + ["BSYNC"], BRANCHES, uniform=True, glue_max=6)

#: lane 0 alone issues and commits a store, the other lanes branch round it (BRA, BSYNC); then every
#: lane polls (a load and a compare) until a warp vote says all of them read what was stored, the
#: branch back to the poll inside the region, so every poll is timed. The store's uniform operands are
#: set up in the region (4 with NVRTC 13.5), and ptxas opens the convergence region of what follows
#: (BSSY) before the stop read: 9 beside the unit with NVRTC 13.5 for the TMA store
LANE0_STORE_POLL = Shape("lane0_store_poll",
                         "lane 0 issues and commits a store, the others branch round; every lane polls until a vote says all see it",
                         lambda u, n: [u[0], u[1], "BSYNC", u[2], u[3], "BRA"], BRANCHES | {"ISETP"}, uniform=True,
                         glue_max=9, poll_loop=True, unit_len=4)

SHAPES = {s.name: s for s in (ONLY, INTERLEAVED, LOOP, GUARDED_LOOP, FIXED_TRIP_LOOP, WARPGROUP_CHAIN, WAIT_LOOP,
                               ELECTED_COPY, LANE0_BULK_GROUP, LANE0_STORE_POLL)}
#: a ring of mbarrier stages streamed by a counted loop (kernels/tma_load.cu tma_stream): each trip the lane
#: elect.sync picks arms the stage it is at and issues its copy, straight line (ELECT after the WARPSYNC that
#: elect.sync's full mask compiles to, the copy's operands moved to uniform registers by R2UR; no ELECT loop,
#: no vote, no branch round them), then every lane's try_wait for the stage the next trip refills (retries
#: out of line). Beside them the loop's control, the stage's index, parity and addresses (SEL, LOP3, SHF,
#: IMAD) and the walk to the next box (an add, a compare and a select): 28 with NVRTC 13.5 for every box. Nothing reads memory or the
#: constant bank: the tensor map's address is pinned in registers before the start read (NVRTC 13.0 reloaded
#: it with LDC.64 c[0x0][...] in the region, and voted per trip with VOTEU.ALL round a lane-0 branch, where
#: the copy was issued under ``if (lane == 0)``)
COPY_RING = Shape("copy_ring", "a counted loop: the elected lane arms a stage and issues its copy (straight line), "
                  "every lane's try_wait for the next stage (retries out of line)", lambda u, n: list(u) * n + ["BRA"],
                  LOOP_CONTROL | {"WARPSYNC", "ELECT", "R2UR", "SEL", "LOP3", "SHF"}, glue_max=28, wait_loop=True)
SHAPES[COPY_RING.name] = COPY_RING


@dataclasses.dataclass(frozen=True)
class Region:
    """What a timed region must hold: ``unit``, the unit's opcodes of one step in issue order, ``steps``
    times (a number, the name of the kernel define that sets it, or several names whose product does:
    ``("UNROLL", "ILP")`` for ILP chains of UNROLL steps), laid out as ``shape``. ``trailing``: opcodes
    ptxas may put after the unit's last step, at most once each (a register copy that readies the
    next pass's registers); they count beside the shape's glue."""

    unit: tuple[str, ...]
    shape: Shape = ONLY
    steps: int | str | tuple[str, ...] = 1
    trailing: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.unit, str) or not self.unit or not all(isinstance(o, str) and o for o in self.unit):
            raise ValueError(f"region unit {self.unit!r}: expected a tuple of the unit's SASS opcodes, e.g. "
                             "('LDGSTS.E', 'LDGDEPBAR', 'DEPBAR.LE')")
        if self.shape.unit_len is not None and len(self.unit) != self.shape.unit_len:
            raise ValueError(f"shape {self.shape.name} takes {self.shape.unit_len} unit opcodes, not {self.unit}")
        if isinstance(self.steps, tuple) and (not self.steps or not all(isinstance(d, str) and d for d in self.steps)):
            raise ValueError(f"region steps {self.steps!r}: expected a number, a define's name or a tuple of "
                             "defines' names, e.g. ('UNROLL', 'ILP')")
        if isinstance(self.trailing, str) or set(self.trailing) & set(self.unit):
            raise ValueError(f"region trailing {self.trailing!r}: expected a tuple of opcodes other than the "
                             f"unit's {self.unit}")

    def step_count(self, defines: dict) -> int:
        if isinstance(self.steps, int):
            return self.steps
        names = (self.steps,) if isinstance(self.steps, str) else self.steps
        n = 1
        for name in names:
            if name not in defines:
                raise ValueError(f"region steps {name!r} names no define of the kernel ({sorted(defines)})")
            n *= int(defines[name])
        return n

    def counts(self, defines: dict) -> dict[str, int]:
        """Opcode -> exact count in the region (KernelSpec.region)."""
        n = self.step_count(defines)
        return {op: k * n for op, k in Counter(self.unit).items()}

    def other_max(self) -> int:
        """How many instructions beside the unit's the region may hold (KernelSpec.region_other)."""
        return self.shape.glue_max + len(self.trailing)

    def order(self, defines: dict) -> list[str]:
        return self.shape.order(self.unit, self.step_count(defines))

    def text(self, defines: dict) -> str:
        n = self.step_count(defines)
        text = f"{n} x {' + '.join(self.unit)}" if n != 1 else " + ".join(self.unit)
        return text + (f", then at most {' + '.join(self.trailing)}" if self.trailing else "")

    def problems(self, instrs: list[sass.Instruction], defines: dict) -> list[str]:
        """How the kernel's timed region (``instrs``: the whole kernel) breaks this region's rules;
        empty when it holds them."""
        start, between, stop = sass.timed_region(instrs)
        body = [i for i in between if not sass.is_filler(i)]
        problems = sass.region_mismatch(instrs, self.counts(defines), self.other_max())
        own = set(self.unit)
        stray = sorted({i.opcode for i in body if i.opcode not in own and i.opcode not in self.trailing
                        and not self._is_glue(i)})
        if stray:
            problems.append(f"instructions that are neither the unit's ({', '.join(self.unit)}) nor the glue of a "
                            f"{self.shape.name} region ({self._glue_text()}): {', '.join(stray)}")
        problems += self._trailing_problems(body)
        wanted = self.order(defines)
        if not _is_subsequence(wanted, [i.opcode for i in body]):
            problems.append(f"the region does not hold {_short(wanted)} in that order: {_short([i.opcode for i in body])}")
        problems += _pass_problems(instrs, start, stop, defines)
        if self.shape.wait_loop:
            problems += _wait_loop_problems(instrs, between, start, stop, self.unit[-1])
        if self.shape.poll_loop:
            problems += _poll_loop_problems(body, *self.unit[-2:])
        return problems

    def _trailing_problems(self, body: list[sass.Instruction]) -> list[str]:
        """A trailing opcode that is not the shape's glue sits after the unit's last instruction, at
        most as often as ``trailing`` names it."""
        own = set(self.unit)
        last_unit = max((k for k, i in enumerate(body) if i.opcode in own), default=-1)
        tail = [(k, i) for k, i in enumerate(body) if i.opcode in self.trailing and not self._is_glue(i)]
        problems = [f"{i.opcode} is allowed only after the unit's last step, found before it: {i.text}"
                    for k, i in tail if k < last_unit]
        allowed = Counter(self.trailing)
        for op, n in sorted(Counter(i.opcode for _, i in tail).items()):
            if n > allowed[op]:
                problems.append(f"{op}: {n} after the unit, at most {allowed[op]} allowed")
        return problems

    def _is_glue(self, i: sass.Instruction) -> bool:
        return i.base_opcode in self.shape.glue or (self.shape.uniform and _is_uniform_setup(i))

    def _glue_text(self) -> str:
        kinds = sorted(self.shape.glue) + (["uniform set-up"] if self.shape.uniform else [])
        return ", ".join(kinds) if kinds else "none"


def _is_uniform_setup(i: sass.Instruction) -> bool:
    """A uniform-datapath instruction (UIADD3, UMOV, ULDC, ...); one that touches memory (UBLKCP,
    UTMA*) is refused beside the unit by sass.region_mismatch already."""
    return i.base_opcode.startswith("U")


def _is_subsequence(wanted: Sequence[str], got: Sequence[str]) -> bool:
    it = iter(got)
    return all(any(g == w for g in it) for w in wanted)


def _short(ops: list[str]) -> str:
    """A run of one opcode as ``op x n``: a 64-step chain reads as one item."""
    runs = [(op, len(list(group))) for op, group in itertools.groupby(ops)]
    return "[" + ", ".join(op if n == 1 else f"{op} x {n}" for op, n in runs) + "]"


def _target(i: sass.Instruction) -> int | None:
    try:
        return int(i.operands[-1], 16)
    except (IndexError, ValueError):
        return None


def _pass_problems(instrs, start, stop, defines) -> list[str]:
    """PASSES > 1: the pass loop branches back over the whole region once, after the stop read (the
    first pass warms the caches); PASSES = 1: no such branch (a block's warps would start a second
    pass out of step). Kernels without PASSES are not asked."""
    if "PASSES" not in defines:
        return []
    passes = int(defines["PASSES"])
    back = [i for i in instrs if i.offset > stop.offset and i.base_opcode == "BRA"
            and (t := _target(i)) is not None and t <= start.offset]
    want = 1 if passes > 1 else 0
    if len(back) != want:
        return [f"PASSES={passes}: {want} branch back over the region after the stop read expected, found "
                f"{len(back)}: {[i.text for i in back]}"]
    return []


def _wait_loop_problems(instrs, between, start, stop, wait_opcode: str) -> list[str]:
    """try_wait's false branch leaves the region for ptxas's retry loop ([YIELD,] try_wait, branch)
    after the kernel's EXIT, which returns into the region, at the latest to the stop read: every
    retry is timed."""
    waits = [i for i in between if i.opcode == wait_opcode]
    if len(waits) != 1:
        return [f"one {wait_opcode} expected in the region, found {len(waits)}"]
    after = [i for i in between if i.offset > waits[0].offset and i.base_opcode == "BRA"]
    if not after or not (after[0].predicate or "").startswith("@!P") or (_target(after[0]) or 0) <= stop.offset:
        return [f"{wait_opcode} is not followed by a predicated branch out of the region to its retry loop: "
                f"{[i.text for i in after]}"]
    retry = [i for i in instrs if i.offset >= _target(after[0])]
    out = next((k for k, i in enumerate(retry) if i.base_opcode == "BRA" and not i.predicate), None)
    if out is None:
        return ["the retry loop has no branch back into the region"]
    loop = retry[:out + 1]
    ops = [i.opcode for i in loop if not sass.is_filler(i) and i.opcode != "YIELD"]
    problems = []
    if ops != [wait_opcode, "BRA", "BRA"]:
        problems.append(f"the retry loop is not {wait_opcode}, the branch back to it, the branch home: {ops}")
    if not any(_target(i) == loop[0].offset for i in loop if (i.predicate or "").startswith("@!P")):
        problems.append("the retry loop does not retry until the wait is true")
    if not start.offset < (_target(loop[-1]) or -1) <= stop.offset:
        problems.append(f"the retry loop does not return into the region: {loop[-1].text}")
    return problems


def _poll_loop_problems(body: list[sass.Instruction], poll_opcode: str, vote_opcode: str) -> list[str]:
    """The poll is retried inside the region: after the one vote, a branch on the vote's predicate
    back to the one poll load, and between them only the load, its compare and the vote (nothing
    else waits or polls in the loop). ``body``: the region, padding left out."""
    votes = [i for i in body if i.opcode == vote_opcode]
    polls = [i for i in body if i.opcode == poll_opcode]
    if len(votes) != 1 or len(polls) != 1:
        return [f"one {poll_opcode} and one {vote_opcode} expected in the region, found {len(polls)} and {len(votes)}"]
    vote, poll = votes[0], polls[0]
    after = [i for i in body if i.offset > vote.offset and i.base_opcode == "BRA"]
    if not after or not after[0].predicate or _target(after[0]) != poll.offset:
        return [f"{vote_opcode} is not followed by a predicated branch back to the poll ({poll.text}) in the region: "
                f"{[i.text for i in after]}"]
    back = after[0]
    problems = []
    if back.predicate.lstrip("@!") != (vote.operands[0] if vote.operands else None):
        problems.append(f"the branch back ({back.text}) does not take the vote's predicate ({vote.text})")
    loop = [i for i in body if poll.offset <= i.offset < back.offset]
    others = [i.text for i in loop if i.opcode not in (poll_opcode, vote_opcode) and i.base_opcode != "ISETP"]
    if others:
        problems.append(f"the poll loop holds more than the poll, its compare and the vote: {others}")
    return problems



@dataclasses.dataclass(frozen=True)
class RegionRules:
    """A fact's region rules as its launch's ``KernelSpec.region_check``: called with the kernel's
    compiled instructions, the problems :meth:`Region.problems` finds (none: it holds).
    timing.build_for_timing runs it on the GPU's own compile before the timing patch and refuses the
    kernel, naming ``fact``, where it finds any."""

    fact: str
    region: Region
    defines: tuple[tuple[str, object], ...]

    def __call__(self, instrs: Sequence[sass.Instruction]) -> list[str]:
        return self.region.problems(list(instrs), dict(self.defines))
