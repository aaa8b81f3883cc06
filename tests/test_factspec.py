"""pytest_gpuprops/factspec.py: what a fact spec derives (the region's exact counts, its order, the
divisor, the build a session compiles, the docs' row, the GPU-scope registration) and that its region
rules refuse a wrong region. The refusals are checked on real sm_90 compiles (NVRTC, no GPU) of the
asynchronous and synchronous units' kernels, each fact's spec planted wrong one way at a time: a
wrong opcode, a wrong step count, the unit out of order, glue its shape does not allow, a memory
access beside the unit, a try_wait loop that is not there, an untimed second pass, a trailing copy
not allowed."""

import dataclasses
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import factspec as fs
from pytest_gpuprops import region_rules as rr
from pytest_gpuprops import sass
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.timing import UncleanRegion, build_for_timing

sys.path.insert(0, str(Path(__file__).parent.parent / "hwtests"))
import fact_tests as ft  # noqa: E402
import specs_alu as sl  # noqa: E402
import specs_async as sa  # noqa: E402
import specs_sync_units as su  # noqa: E402

FACTS = fs.by_name(sa.FACTS + su.FACTS)


def _launch():
    return KernelSpec("x.cu", "x", {"UNROLL": 16, "PASSES": 2}, grid=2, block=64, cluster=2)


def _spec(**kw) -> fs.FactSpec:
    base = dict(name="x_cycles", launch=_launch, region=rr.Region(("LD.E.64",), steps="UNROLL"), method="m")
    return fs.FactSpec(**{**base, **kw})


# ----------------------------------------------------------------------------------------------
# what a spec derives


def test_a_region_counts_its_unit_times_the_steps_its_define_sets():
    r = rr.Region(("UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"), steps="UNROLL")
    assert r.counts({"UNROLL": 16}) == {"UCGABAR_ARV": 16, "UCGABAR_WAIT": 16, "CCTL.IVALL": 16}
    assert r.order({"UNROLL": 2}) == ["UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"] * 2
    assert rr.Region(("ISETP.GE.AND", "SEL", "SEL"), steps=4).counts({}) == {"ISETP.GE.AND": 4, "SEL": 8}
    assert r.text({"UNROLL": 16}) == "16 x UCGABAR_ARV + UCGABAR_WAIT + CCTL.IVALL"


def test_a_shape_puts_its_own_instructions_in_the_order():
    assert rr.Region(("A", "W"), rr.WAIT_LOOP).order({}) == ["A", "W", "BRA"]
    assert rr.Region(("ARM", "COPY", "WAIT"), rr.ELECTED_COPY).order({}) == \
        ["ARM", "ELECT", "COPY", "BRA.U.ANY", "WAIT", "BRA"]
    assert rr.Region(("LD",), rr.LOOP, steps=3).order({}) == ["LD", "LD", "LD", "BRA"]
    assert rr.Region(("S", "F", "D"), rr.LANE0_BULK_GROUP).order({}) == ["S", "F", "D", "BSYNC"]


@pytest.mark.parametrize("bad, match", [
    (dict(unit="LDS"), "a tuple of the unit's SASS opcodes"),
    (dict(unit=()), "a tuple of the unit's SASS opcodes"),
    (dict(unit=("A", "")), "a tuple of the unit's SASS opcodes"),
    (dict(unit=("A", "B"), shape=rr.ELECTED_COPY), "shape elected_copy takes 3 unit opcodes"),
])
def test_a_region_that_names_no_unit_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        rr.Region(**bad)


def test_steps_that_name_no_define_are_refused():
    with pytest.raises(ValueError, match=r"region steps 'ITERS' names no define of the kernel \(\['UNROLL'\]\)"):
        rr.Region(("LD",), steps="ITERS").counts({"UNROLL": 4})
    with pytest.raises(ValueError, match=r"region steps 'ILP' names no define of the kernel \(\['UNROLL'\]\)"):
        rr.Region(("LD",), steps=("UNROLL", "ILP")).counts({"UNROLL": 4})


def test_steps_named_by_several_defines_are_their_product():
    """ILP independent chains of UNROLL steps each: UNROLL x ILP steps in the region."""
    r = rr.Region(("ISETP.GE.AND", "SEL", "SEL"), rr.INTERLEAVED, steps=("UNROLL", "ILP"))
    assert r.step_count({"UNROLL": 128, "ILP": 8, "PASSES": 1}) == 1024
    assert r.counts({"UNROLL": 128, "ILP": 8}) == {"ISETP.GE.AND": 1024, "SEL": 2048}
    assert r.text({"UNROLL": 2, "ILP": 3}) == "6 x ISETP.GE.AND + SEL + SEL"
    assert r.order({"UNROLL": 2, "ILP": 3}) == []  # interleaved chains: counts only
    for bad in ((), ("UNROLL", ""), ("UNROLL", 2)):
        with pytest.raises(ValueError, match="expected a number, a define's name or a tuple of defines' names"):
            rr.Region(("LD",), steps=bad)


def test_trailing_opcodes_are_allowed_after_the_unit_once_each():
    r = rr.Region(("ISETP.GE.AND", "SEL", "SEL"), steps="UNROLL", trailing=("IMAD.MOV.U32",))
    assert r.other_max() == 1 and r.counts({"UNROLL": 2}) == {"ISETP.GE.AND": 2, "SEL": 4}
    assert r.text({"UNROLL": 2}) == "2 x ISETP.GE.AND + SEL + SEL, then at most IMAD.MOV.U32"
    assert rr.Region(("LD",), rr.LOOP, trailing=("MOV",)).other_max() == rr.LOOP.glue_max + 1
    for bad in ("IMAD.MOV.U32", ("SEL",)):
        with pytest.raises(ValueError, match="region trailing"):
            rr.Region(("ISETP.GE.AND", "SEL", "SEL"), trailing=bad)


def test_the_kernel_carries_the_derived_region_the_shapes_glue_and_the_rules():
    fact = _spec()
    spec = fact.kernel()
    assert spec.region == {"LD.E.64": 16} and spec.region_other == 0
    assert spec.region_check == rr.RegionRules("x_cycles", fact.region, (("UNROLL", 16), ("PASSES", 2)))
    assert spec.patch is None  # the rules are no patch: the launch's own patch, if any, is left as it is
    assert (spec.source, spec.grid, spec.block, spec.cluster) == ("x.cu", 2, 64, 2)
    loop = _spec(region=rr.Region(("LD",), rr.LOOP, steps="UNROLL")).kernel()
    assert loop.region_other == rr.LOOP.glue_max == 8
    tail = _spec(region=rr.Region(("LD",), steps="UNROLL", trailing=("IMAD.MOV.U32",))).kernel()
    assert tail.region_other == 1


def test_the_rules_check_the_instructions_with_the_launchs_defines():
    """RegionRules(instructions) is Region.problems with the defines the launch was built with."""
    seen = []

    class Spy(rr.Region):
        def problems(self, instrs, defines):
            seen.append((instrs, defines))
            return ["a problem"]
    rules = rr.RegionRules("x_cycles", Spy(("LD",)), (("UNROLL", 16),))
    assert rules(("i1", "i2")) == ["a problem"] and seen == [(["i1", "i2"], {"UNROLL": 16})]


def test_the_divisor_is_the_steps_unless_the_spec_says():
    assert _spec().per() == 16.0
    assert _spec(divisor=1).per() == 1.0
    assert FACTS["dsmem_latency_cluster2_cycles"].per() == sa.DSMEM_UNROLL
    assert FACTS["cluster_barrier_cluster4_cycles"].per() == sa.CLUSTER_BARRIER_UNROLL
    assert FACTS["dsmem_load_bytes_per_cycle"].per() == 1.0
    assert FACTS["mbarrier_arrive_wait_cycles"].per() == 1.0


def test_a_line_is_given_to_the_line_by_line_facts_only():
    lines = _spec(statistic=fs.Statistic(lines="near_tier"), launch=lambda line: _launch())
    assert lines.kernel(3).defines == {"UNROLL": 16, "PASSES": 2} and lines.build().region == {"LD.E.64": 16}
    with pytest.raises(ValueError, match="x_cycles: a line is given for the line-by-line facts only"):
        lines.kernel()
    with pytest.raises(ValueError, match="x_cycles: a line is given"):
        _spec().kernel(0)


@pytest.mark.parametrize("bad, match", [
    (dict(name="X-Cycles"), "must be lower_snake_case"),
    (dict(scope="unit"), r"scope 'unit'; expected one of \('arch', 'gpu'\)"),
])
def test_a_spec_with_a_bad_name_or_scope_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        _spec(**bad)


@pytest.mark.parametrize("bad, match", [
    (dict(mode="median"), "statistic mode 'median'"),
    (dict(lines="all"), "statistic lines 'all'"),
])
def test_a_statistic_it_cannot_measure_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        fs.Statistic(**bad)


def test_a_fact_of_any_arch_is_checked_on_each_and_launched_on_any():
    """arch None: the GPU test carries no arch mark (the GPU's facts say whether it applies), the
    static checks take it once per arch of STATIC_ARCHES, pinned to it, and it is never compiled
    unpinned."""
    anywhere = _spec(arch=None)
    pinned = anywhere.on_each_arch()
    assert [f.arch for f in pinned] == list(fs.STATIC_ARCHES) and all(f.name == "x_cycles" for f in pinned)
    assert _spec().on_each_arch() == [_spec()] and anywhere.row()["arch"] == "any"
    (one,) = ft.gpu_params([anywhere])
    assert one.marks == [] and ft.gpu_params([_spec()])[0].marks[0].args == ("sm_90",)
    assert [p.id for p in ft.static_params([anywhere, _spec(name="y_cycles")])] == \
        [f"x_cycles-{a}" for a in fs.STATIC_ARCHES] + ["y_cycles"]
    with pytest.raises(ValueError, match="fact x_cycles is defined for any arch: compile it pinned to one"):
        ft.compiled(anywhere)
    assert {f.arch for f in sl.FACTS} == {None}


def test_min_launches_sets_the_stop_rules_floor_and_nothing_else(monkeypatch):
    from pytest_gpuprops.stats import StopRule
    asked = []
    gpuprops = SimpleNamespace(runner=SimpleNamespace(stop=StopRule()),
                               measure=lambda name, spec, **kw: asked.append(kw))
    ft.measure(gpuprops, _spec(min_launches=41))
    ft.measure(gpuprops, _spec())
    assert asked[0]["stop"] == dataclasses.replace(StopRule(), min_samples=41) and "stop" not in asked[1]
    assert {k: v for k, v in asked[0].items() if k != "stop"} == asked[1]
    assert [f.min_launches for f in sl.FACTS if f.min_launches] == [41]  # ffma_smsp_cycles
    with pytest.raises(ValueError, match="min_launches 0; expected a positive count or None"):
        _spec(min_launches=0)


def test_a_fact_declared_twice_is_refused():
    with pytest.raises(ValueError, match="fact x_cycles is declared twice"):
        fs.by_name([_spec(), _spec(method="other")])


def test_the_gpu_models_facts_are_registered_and_no_others(monkeypatch):
    monkeypatch.setattr(gp_facts, "GPU_SCOPED", set())
    fs.register_scopes(sa.FACTS)
    assert gp_facts.GPU_SCOPED == {f.name for f in sa.FACTS if f.scope == "gpu"}
    # the facts the asynchronous units' file registered by hand before the specs, the store's written
    # wait retired for the store seen in L2 (2026-11-26)
    assert gp_facts.GPU_SCOPED == {
        "cp_async_cg16_latency_cycles", "cp_async_bulk_1k_latency_cycles", "cp_async_bulk_4k_latency_cycles",
        "tma_1d_1k_latency_cycles", "tma_2d_4k_latency_cycles", "cluster_barrier_release_cluster2_cycles",
        "tma_2d_store_4k_source_read_cycles", "tma_2d_store_4k_visible_cycles",
        # TMA throughput from L2 (2026-11-26): the GPU's memory system
        "tma_2d_load_bytes_per_cycle_box1k_blocks1",  # bound by the issuing loop: per SM cycle
        *(f"tma_2d_load_gbps_per_sm_box{b}_blocks{n}" for b in ("4k", "16k") for n in (1, 2))}  # by the L2: in time
    monkeypatch.setattr(gp_facts, "GPU_SCOPED", set())
    fs.register_scopes(su.FACTS)
    # and those the synchronous units' file registered by hand: the global atomics' L2 latencies
    assert gp_facts.GPU_SCOPED == {"atom_global_add_distinct_near_latency_cycles",
                                   "atom_global_add_same_address_near_latency_cycles"}


def test_the_builds_are_one_per_code_not_per_fact():
    """The four cluster sizes and the self chase are one build; the L2 lines are arguments, not code;
    so are an atomic's two address patterns, but where a throughput shape runs more trips."""
    builds = fs.builds(sa.FACTS)
    keys = [(b.source, b.kernel, tuple(sorted(b.defines.items()))) for b in builds]
    assert len(keys) == len(set(keys)) == 18 < len(sa.FACTS) == 36  # the two store facts: two builds; the DSMEM sweep: the bandwidth builds
    assert sum(b.kernel == "dsmem_chase" for b in builds) == 1
    sync = fs.builds(su.FACTS)
    assert len(sync) == 18 < len(su.FACTS) == 22  # 10 DPX, 2 constant, 2 atomic latency, 4 atomic throughput
    assert sum(b.kernel == "atomic_ops" and b.defines["ILP"] == 1 for b in sync) == 2


def test_the_docs_list_has_a_row_per_fact():
    table = fs.markdown(sa.FACTS)
    lines = table.splitlines()
    assert lines[0] == "| fact | scope | kernel | launch | region | statistic | divisor | unit |"
    assert len(lines) == 2 + len(sa.FACTS)
    row = FACTS["dsmem_latency_cluster8_cycles"].row()
    assert row == {"fact": "dsmem_latency_cluster8_cycles", "scope": "arch", "arch": "sm_90",
                   "kernel": "cluster_dsmem.cu UNROLL=64 PASSES=2", "launch": "128 x 32, clusters of 8",
                   "region": "64 x LD.E.64 (only)", "statistic": "mean over warps", "divisor": "64",
                   "unit": "cycles"}
    assert FACTS["cp_async_cg16_latency_cycles"].row()["statistic"] == \
        "median over warps, line by line: the lowest tier's median"
    assert "| `tma_2d_4k_latency_cycles` | gpu |" in table


# ----------------------------------------------------------------------------------------------
# the region rules refuse a wrong region (real sm_90 compiles)


def _planted(name: str, **region) -> fs.FactSpec:
    fact = FACTS[name]
    return dataclasses.replace(fact, region=dataclasses.replace(fact.region, **region))


def test_every_unit_fact_holds_its_rules_as_declared():
    """The baseline the plants below move away from: every spec, as declared, holds."""
    assert {f.name: ft.region_problems(f) for f in FACTS.values()} == {name: [] for name in FACTS}


@pytest.mark.parametrize("name, plant, wanted", [
    # another copy than the kernel issues
    ("cp_async_ca4_latency_cycles", dict(unit=("LDGSTS.E.128", "LDGDEPBAR", "DEPBAR.LE")),
     "LDGSTS.E.128: 0 in the region, intended 1"),
    # a chase of another length than the kernel's
    ("dsmem_latency_cluster2_cycles", dict(steps=32), "LD.E.64: 64 in the region, intended 32"),
    # the wait before the arrive
    ("mbarrier_arrive_wait_cycles", dict(unit=("SYNCS.PHASECHK.TRANS64.TRYWAIT", "SYNCS.ARRIVE.TRANS64.A1T0")),
     "does not hold [SYNCS.PHASECHK.TRANS64.TRYWAIT, SYNCS.ARRIVE.TRANS64.A1T0, BRA] in that order"),
    # a try_wait loop where no glue is allowed: its BSSY, BRA and BSYNC are not the unit's
    ("mbarrier_arrive_wait_cycles", dict(shape=rr.ONLY), "3 other instructions"),
    # an elected copy said to be lane 0's bulk group: ELECT and PLOP3 are no glue of that shape
    ("tma_1d_1k_latency_cycles", dict(shape=rr.LANE0_BULK_GROUP),
     "nor the glue of a lane0_bulk_group region (BRA, BSSY, BSYNC, YIELD, uniform set-up): ELECT, PLOP3.LUT"),
    # the visible store's poll said to be lane 0's bulk group: its compare is no glue of that shape
    ("tma_2d_store_4k_visible_cycles", dict(shape=rr.LANE0_BULK_GROUP),
     "nor the glue of a lane0_bulk_group region (BRA, BSSY, BSYNC, YIELD, uniform set-up): ISETP.NE.AND"),
    # the visible store said to wait for its group in the region: there is no DEPBAR, and the poll is unintended
    ("tma_2d_store_4k_visible_cycles", dict(unit=("UTMASTG.2D", "UTMACMDFLUSH", "DEPBAR.LE", "VOTE.ALL")),
     "memory accesses the fact does not intend: LDG.E.STRONG.GPU"),
    # the source-read wait said to be a poll: no poll load, no vote
    ("tma_2d_store_4k_source_read_cycles", dict(unit=sa.TMA_STORE_POLL_UNIT, shape=rr.LANE0_STORE_POLL),
     "one LDG.E.STRONG.GPU and one VOTE.ALL expected in the region, found 0 and 0"),
    # a group wait said to be a try_wait loop: there is no try_wait to retry
    ("cp_async_ca16_latency_cycles", dict(shape=rr.WAIT_LOOP),
     "DEPBAR.LE is not followed by a predicated branch out of the region to its retry loop"),
    # vibmax's chain without its trailing register copy: one instruction more than the chain
    ("dpx_vibmax_s32_isetp_sel_latency_cycles", dict(trailing=()), "1 other instructions"),
    ("dpx_vibmax_s32_isetp_sel_latency_cycles", dict(trailing=()),
     "nor the glue of a only region (none): IMAD.MOV.U32"),
    # a DPX chain counted by UNROLL x ILP x PASSES: twice the steps the region holds
    ("dpx_vimax3_s32_latency_cycles", dict(steps=("UNROLL", "ILP", "PASSES")), "VIMNMX3: 128 in the region, intended 256"),
    # the throughput shape's 8 interleaved chains said to be one chain in order
    ("dpx_vibmax_s32_isetp_sel_smsp_cycles", dict(shape=rr.ONLY),
     "the region does not hold [ISETP.GE.AND, SEL x 2, ISETP.GE.AND"),
    # the atomic throughput loop said to hold its atomics alone: the loop control is no glue of that shape
    ("atom_global_add_distinct_sm_cycles", dict(shape=rr.ONLY), "4 other instructions"),
    # another atomic than the kernel issues
    ("red_global_add_same_address_sm_cycles", dict(unit=("ATOMG.E.ADD.STRONG.GPU",)),
     "memory accesses the fact does not intend: REDG.E.ADD.STRONG.GPU"),
])
def test_a_planted_wrong_region_is_refused(name, plant, wanted):
    problems = ft.region_problems(_planted(name, **plant))
    assert any(wanted in p for p in problems), problems


def test_the_written_wait_is_the_source_read_wait_and_an_l1_invalidation():
    """Why tma_2d_store_4k_latency_cycles was retired: the wait_group 0 build (WAIT_READ=0) holds the
    source-read fact's region and CCTL.IVALL after it, nothing else; the rules refuse it for that fact."""
    fact = FACTS["tma_2d_store_4k_source_read_cycles"]
    base = fact.build()
    written = dataclasses.replace(fact, launch=lambda: dataclasses.replace(base, defines={**base.defines, "WAIT_READ": 0}))
    problems = ft.region_problems(written)
    assert problems[0] == "memory accesses the fact does not intend: CCTL.IVALL" and len(problems) == 3, problems
    assert problems[1].startswith("7 other instructions (") and problems[1].endswith("; at most 6 intended")
    assert problems[2].endswith("lane0_bulk_group region (BRA, BSSY, BSYNC, YIELD, uniform set-up): CCTL.IVALL")
    read, write = ([i.opcode for i in _split(c.instructions(k.kernel))[0] if not sass.is_filler(i)]
                   for c, k in (ft.compiled(fact), ft.compiled(written)))
    k = write.index("CCTL.IVALL")
    assert write[:k] + write[k + 1:] == read and write[k - 1] == "DEPBAR.LE"


def _poll(*rows):
    """A region body from (offset, text) rows, as the poll rule reads it."""
    out = []
    for offset, text in rows:
        pred, _, rest = text.partition(" ") if text.startswith("@") else (None, "", text)
        opcode, _, ops = rest.partition(" ")
        out.append(SimpleNamespace(offset=offset, text=text, opcode=opcode, base_opcode=opcode.split(".")[0],
                                   predicate=pred, operands=[o.strip() for o in ops.split(",")] if ops else []))
    return out


def test_a_poll_must_be_retried_in_the_region_on_the_votes_predicate():
    good = [(0x820, "LDG.E.STRONG.GPU R11, desc[UR6][R2.64]"), (0x830, "ISETP.NE.AND P0, PT, R11, R18, PT"),
            (0x840, "VOTE.ALL P0, !P0"), (0x850, "@!P0 BRA 0x820")]
    assert rr._poll_loop_problems(_poll(*good), "LDG.E.STRONG.GPU", "VOTE.ALL") == []
    other_predicate = good[:3] + [(0x850, "@!P1 BRA 0x820")]
    assert rr._poll_loop_problems(_poll(*other_predicate), "LDG.E.STRONG.GPU", "VOTE.ALL") == [
        "the branch back (@!P1 BRA 0x820) does not take the vote's predicate (VOTE.ALL P0, !P0)"]
    elsewhere = good[:3] + [(0x850, "@!P0 BRA 0x830")]
    assert "is not followed by a predicated branch back to the poll" in \
        rr._poll_loop_problems(_poll(*elsewhere), "LDG.E.STRONG.GPU", "VOTE.ALL")[0]
    busy = good[:1] + [(0x824, "IADD3 R2, R2, 0x4, RZ")] + good[1:]
    assert rr._poll_loop_problems(_poll(*busy), "LDG.E.STRONG.GPU", "VOTE.ALL") == [
        "the poll loop holds more than the poll, its compare and the vote: ['IADD3 R2, R2, 0x4, RZ']"]


def test_a_trailing_opcode_before_the_unit_or_more_often_than_allowed_is_refused():
    """The rule on the region as read (the compiled vibmax chain keeps its copy after the last step;
    planted: a copy before the last step, and two copies)."""
    def ins(*ops):
        return [SimpleNamespace(opcode=op, text=f"{op} R{k}", base_opcode=op.split(".")[0]) for k, op in enumerate(ops)]
    r = rr.Region(("ISETP.GE.AND", "SEL", "SEL"), steps=2, trailing=("IMAD.MOV.U32",))
    chain = ["ISETP.GE.AND", "SEL", "SEL"]
    assert r._trailing_problems(ins(*chain, *chain, "IMAD.MOV.U32")) == []
    assert r._trailing_problems(ins(*chain, "IMAD.MOV.U32", *chain)) == [
        "IMAD.MOV.U32 is allowed only after the unit's last step, found before it: IMAD.MOV.U32 R3"]
    assert r._trailing_problems(ins(*chain, *chain, "IMAD.MOV.U32", "IMAD.MOV.U32")) == [
        "IMAD.MOV.U32: 2 after the unit, at most 1 allowed"]


def test_an_untimed_second_pass_is_refused():
    """PASSES = 2 on a kernel that ignores it (the DSMEM bandwidth loop runs once): no branch back over
    the region, so the second pass the define promises is not there."""
    fact = FACTS["dsmem_load_bytes_per_cycle"]
    once = fact.build()
    planted = dataclasses.replace(fact, launch=lambda: dataclasses.replace(once, defines={**once.defines, "PASSES": 2}))
    assert ft.region_problems(planted) == ["PASSES=2: 1 branch back over the region after the stop read expected, "
                                           "found 0: []"]


def test_the_retries_of_a_wait_loop_must_return_into_the_region():
    """The rule follows the retry branch out of the region and back: on the real mbarrier kernel the
    loop is try_wait, the branch back to it, the branch home into the region."""
    fact = FACTS["mbarrier_arrive_token_wait_cycles"]
    cubin, spec = ft.compiled(fact)
    instrs = cubin.instructions(spec.kernel)
    assert rr._wait_loop_problems(instrs, *_split(instrs), "SYNCS.PHASECHK.TRANS64.TRYWAIT") == []
    start, between, stop = sass.timed_region(instrs)
    # the loop's way home (BRA to just after the try_wait's branch), and a region that ends before it
    home = next(rr._target(i) for i in instrs if i.offset > stop.offset and i.base_opcode == "BRA"
                and not i.predicate and start.offset < rr._target(i) <= stop.offset)
    early_stop = SimpleNamespace(offset=home - 8)
    problems = rr._wait_loop_problems(instrs, [i for i in between if i.offset < home], start, early_stop,
                                      "SYNCS.PHASECHK.TRANS64.TRYWAIT")
    assert problems == [f"the retry loop does not return into the region: BRA {home:#x}"], problems


def _split(instrs):
    start, between, stop = sass.timed_region(instrs)
    return between, start, stop


def test_build_for_timing_refuses_a_region_that_breaks_the_rules():
    """On the GPU the same rules run as the kernel is built (KernelSpec.region_check): a fact whose
    kernel no longer holds what it measures is refused before it runs, with the fact and every
    problem named; the same build, its rules as declared, is built."""
    planted = _planted("mbarrier_arrive_wait_cycles", unit=("SYNCS.PHASECHK.TRANS64.TRYWAIT", "SYNCS.ARRIVE.TRANS64.A1T0"))
    cubin, _ = ft.compiled(FACTS["mbarrier_arrive_wait_cycles"])
    spec = planted.kernel()
    with pytest.raises(UncleanRegion) as e:
        build_for_timing(cubin, spec)
    assert str(e.value).startswith(f"{spec.label()} on sm_90: the timed region does not hold what "
                                   "mbarrier_arrive_wait_cycles measures:\n  the region does not hold [SYNCS.PHASECHK")
    built, instrs = build_for_timing(cubin, FACTS["mbarrier_arrive_wait_cycles"].kernel())
    assert built and sass.region_hazards(instrs) == []
    # refused on every ask, though the build itself (same bytes, edits and counts) is kept
    with pytest.raises(UncleanRegion, match="mbarrier_arrive_wait_cycles measures"):
        build_for_timing(cubin, spec)


def test_a_specs_own_patch_runs_after_the_check_and_not_when_it_refuses():
    fact = FACTS["mbarrier_arrive_wait_cycles"]
    cubin, _ = ft.compiled(fact)
    calls = []

    def own(cb, kernel):
        calls.append(kernel)
        return []
    base = fact.build()
    mine = dataclasses.replace(fact, launch=lambda: dataclasses.replace(base, patch=own))
    assert mine.kernel().patch is own
    build_for_timing(cubin, mine.kernel())
    assert calls == [base.kernel]
    wrong = dataclasses.replace(mine, region=dataclasses.replace(fact.region, steps=2))
    with pytest.raises(UncleanRegion, match="SYNCS.ARRIVE.TRANS64.A1T0: 1 in the region, intended 2"):
        build_for_timing(cubin, wrong.kernel())
    assert calls == [base.kernel]


def test_short_writes_a_run_of_one_opcode_once():
    assert rr._short(["LD"] * 64 + ["BRA", "A", "A"]) == "[LD x 64, BRA, A x 2]"


# ----------------------------------------------------------------------------------------------
# tools/fact_specs.py: the docs' fact list


def test_the_fact_list_tool_prints_every_spec_and_one_whole(capsys):
    from gp_testing import load_tool
    tool = load_tool("fact_specs")
    assert tool.main([]) == 0
    out = capsys.readouterr().out
    every = tool.all_facts()
    assert out == fs.markdown(every) and all(f"| `{f.name}` |" in out for f in FACTS.values())
    assert {f.name for f in every} >= {f.name for f in sa.FACTS + su.FACTS + sl.FACTS}
    assert tool.main(["--fact", "tma_2d_store_4k_source_read_cycles"]) == 0
    one = capsys.readouterr().out
    assert "region:    UTMASTG.2D + UTMACMDFLUSH + DEPBAR.LE (lane0_bulk_group)\n" in one
    assert one.endswith(f"method:    {FACTS['tma_2d_store_4k_source_read_cycles'].method}\n")
    assert tool.main(["--fact", "tma_2d_store"]) == 2
    assert f"no fact spec 'tma_2d_store'; {len(every)} facts are specs" in capsys.readouterr().err


def test_the_fact_list_tool_finds_every_spec_module_without_a_list_to_keep():
    """Every hwtests/specs_*.py with a FACTS list is in the fact list (a new module needs no registration);
    a module without one (helpers, dtype tables) is not."""
    from gp_testing import load_tool
    tool = load_tool("fact_specs")
    found = tool.spec_modules()
    hwtests = Path(__file__).resolve().parent.parent / "hwtests"
    declared = sorted(p.stem for p in hwtests.glob("specs_*.py") if re.search(r"^FACTS\b", p.read_text(), re.M))
    assert found == declared and {"specs_async", "specs_memory", "specs_mma", "specs_wgmma"} <= set(found)
    assert "specs_wgmma_dtypes" not in found


# ----------------------------------------------------------------------------------------------
# the guarded loop (hwtests/specs_smem.py's bandwidth and wavefront facts)


def test_a_guarded_loop_allows_its_guard_and_register_set_up_and_no_more():
    """The LDS.128 bandwidth loop on sm_90 holds its 32 loads with 18 instructions beside them (the
    guard, the loop's control, the FADDs and moves of its registers): a guarded loop; said to be a
    plain counted loop, its FADD and MOV are no glue; allowed one instruction fewer, it has one too many."""
    import specs_smem
    lds = fs.by_name(specs_smem.FACTS)["smem_lds_float4_bytes_per_cycle"]
    fact = next(f for f in lds.on_each_arch() if f.arch == "sm_90")
    assert ft.region_problems(fact) == []
    plain = dataclasses.replace(fact, region=dataclasses.replace(fact.region, shape=rr.LOOP))
    assert any("nor the glue of a loop region" in p and "FADD" in p and "MOV" in p for p in ft.region_problems(plain))
    tight = dataclasses.replace(rr.GUARDED_LOOP, glue_max=17)
    planted = dataclasses.replace(fact, region=dataclasses.replace(fact.region, shape=tight))
    assert any("18 other instructions" in p for p in ft.region_problems(planted)), ft.region_problems(planted)


def test_a_fixed_trip_loop_allows_its_epilogue_only_after_the_last_step_and_once():
    """The 8-chain HMMA loop on sm_90 holds its 512 HMMAs, the loop's MOV, IADD3, ISETP and BRA, and
    after the loop's exit one S2R (the spec's trailing epilogue). Without that trailing opcode the S2R
    is neither unit nor glue; said to be a plain counted loop, the counter's MOV is no glue."""
    import specs_tensorcore
    spec = fs.by_name(specs_tensorcore.FACTS)["hmma_16816_f32_single_warp_issue_cycles"]
    fact = next(f for f in spec.on_each_arch() if f.arch == "sm_90")
    assert ft.region_problems(fact) == []
    bare = dataclasses.replace(fact, region=dataclasses.replace(fact.region, trailing=()))
    assert any("nor the glue of a fixed_trip_loop region" in p and "S2R" in p for p in ft.region_problems(bare))
    plain = dataclasses.replace(fact, region=dataclasses.replace(fact.region, shape=rr.LOOP))
    assert any("nor the glue of a loop region" in p and ": MOV" in p for p in ft.region_problems(plain))


def test_a_warpgroup_chain_holds_one_arrive_and_one_wait_round_its_steps():
    """The N = 64 bf16 throughput build (sm_90a) holds ARRIVE, 256 HGMMA, DEPBAR.LE: a warpgroup chain.
    Said to hold the HGMMAs alone, the two WARPGROUP instructions are too many; with another N's
    opcode, none of the region's HGMMAs is the unit's."""
    import specs_wgmma
    fact = fs.by_name(specs_wgmma.FACTS)["wgmma_m64n64k16_bf16_ss_sm_cycles"]
    assert (fact.arch, fact.compile_arch()) == ("sm_90", "sm_90a")
    assert ft.region_problems(fact) == []
    alone = dataclasses.replace(fact, region=dataclasses.replace(fact.region, shape=rr.ONLY))
    assert any("2 other instructions" in p for p in ft.region_problems(alone))
    other_n = dataclasses.replace(fact, region=dataclasses.replace(fact.region, unit=("HGMMA.64x128x16.F32.BF16",)))
    assert any("HGMMA.64x128x16.F32.BF16: 0 in the region, intended 256" in p for p in ft.region_problems(other_n))


def test_a_build_arch_is_compiled_for_and_needs_the_arch_it_runs_on():
    assert _spec(build_arch="sm_90a").compile_arch() == "sm_90a"
    assert _spec().compile_arch() == "sm_90"
    with pytest.raises(ValueError, match="build_arch sm_90a needs the one arch it runs on"):
        _spec(build_arch="sm_90a", arch=None)


# ----------------------------------------------------------------------------------------------
# sweep specs: a fact read where a sweep of launches steps


def _point(x) -> KernelSpec:
    # two builds over the sweep: its code changes at x = 3 (as a sweep over two cache operators would)
    return KernelSpec("chase.cu", "chase", {"CACHE": int(x >= 3), "UNROLL": 8}, grid=1, block=32,
                      region={"LDG.E.64": 8}, shared_mem=x)


def _sweep(**kw) -> fs.SweepSpec:
    base = dict(name="x_bytes", point=_point, xs=(1, 2, 3, 4), read=lambda pts: (float(pts[-1][0]), {}),
                method="m", unit="bytes", divisor=8)
    return fs.SweepSpec(**{**base, **kw})


@pytest.mark.parametrize("bad, match", [(dict(name="X"), "lower_snake_case"), (dict(scope="sm"), "scope"),
                                        (dict(xs=(1,)), "at least 2"), (dict(divisor=0), "positive")])
def test_a_sweep_spec_with_a_bad_name_scope_sweep_or_divisor_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        _sweep(**bad)


def test_a_sweeps_builds_are_its_distinct_codes_and_the_session_compiles_each():
    sweep = _sweep()
    assert [k.defines["CACHE"] for k in sweep.builds()] == [0, 1]
    assert sweep.build().shared_mem == 1 and sweep.on_each_arch() == [sweep] and sweep.compile_arch() == "sm_90"
    spec = _spec()
    assert [(k.source, k.defines.get("CACHE")) for k in fs.builds([spec, sweep])] == \
        [("x.cu", None), ("chase.cu", 0), ("chase.cu", 1)]


def test_a_sweeps_plot_point_names_each_coordinate():
    assert _sweep().plot_point(2, 301.234) == {"x": 2, "cycles": 301.23}
    pair = _sweep(xs=((64, 4096), (128, 4096)), point=lambda x: _point(1), x_names=("stride", "footprint"))
    assert pair.plot_point((64, 4096), 30.0) == {"stride": 64, "footprint": 4096, "cycles": 30.0}
    with pytest.raises(ValueError, match="coordinates"):
        pair.plot_point(64, 30.0)


def test_the_docs_list_has_a_row_per_sweep_and_the_tool_finds_the_sweep_modules():
    row = _sweep().row()
    assert row["region"] == "8 x LDG.E.64 (a sweep)" and row["statistic"].startswith("a sweep of 4 points over x")
    assert "| `x_bytes` |" in fs.markdown([_sweep()])
    import specs_lines
    from gp_testing import load_tool
    tool = load_tool("fact_specs")
    assert {f.name for f in tool.all_facts()} >= {f.name for f in specs_lines.FACTS}


class SweepGpuprops:
    """The fixture's side a sweep test uses: each point's measurement (cycles from ``levels``), plot points,
    the session clock, and check (which returns what it is handed)."""

    def __init__(self, levels):
        self.levels, self.measured, self.plots = levels, [], []
        self.runner = SimpleNamespace(session_sm_clock_mhz=lambda: 1980.0)
        self.fact_name = "x_bytes"

    def measure(self, label, spec, *, divisor, stop):
        self.measured.append((spec.shared_mem, divisor, stop.min_samples))
        return SimpleNamespace(median=self.levels[spec.shared_mem])

    def plot_point(self, plot, **point):
        self.plots.append((plot, point))

    def fact(self, name):
        return None

    def check(self, name, m, *, benchmark=None, method=""):
        return name, m, method


def test_a_sweep_is_measured_point_by_point_read_once_and_measured_again_whole():
    from specs_caches import SweepError
    reads = []

    def read(points):
        reads.append(points)
        hit = points[0][1]
        return next(x for x, c in points if c > 1.5 * hit), {"hit_cycles": hit}

    g = SweepGpuprops({1: 30.0, 2: 31.0, 3: 290.0, 4: 291.0})
    name, m, method = ft.measure_sweep_and_check(g, _sweep(read=read))
    assert (name, m.values, m.unit, m.noise_target, method) == ("x_bytes", [3.0], "bytes", 0.0, "m")
    assert [x for x, _, _ in g.measured] == [1, 2, 3, 4] and {d for _, d, _ in g.measured} == {8}
    assert m.launch["hit_cycles"] == 30.0 and m.launch["sweep"][2] == {"x": 3, "cycles": 290.0}
    assert m.sm_clock_mhz == 1980.0 and g.plots[0] == ("x_bytes", {"x": 1, "cycles": 30.0})
    assert len(reads) == 1
    again = m.remeasure()
    assert again.values == [3.0] and len(g.measured) == 8 and len(reads) == 2
    # a sweep that shows no value fails the test, saying what the reader said
    flat = SweepGpuprops({1: 30.0, 2: 30.0, 3: 30.0, 4: 30.0})

    def no_step(points):
        raise SweepError("no step: 30.0 everywhere")
    with pytest.raises(pytest.fail.Exception, match="x_bytes: none of 3 sweeps shows its value: sweep 1: no step: "
                                                    "30.0 everywhere; sweep 2: .*; sweep 3: no step: 30.0 everywhere"):
        ft.measure_sweep_and_check(flat, _sweep(read=no_step))
    assert len(flat.measured) == 3 * 4  # three whole sweeps
    with pytest.raises(ValueError, match="handed the sweep of y_bytes"):
        ft.measure_sweep_and_check(g, _sweep(name="y_bytes"))


def test_what_a_sweep_reports_of_its_launch_joins_the_record_and_a_failures_text():
    from specs_caches import SweepError
    said = []

    def report(gp, build):
        said.append((build.shared_mem, len(gp.measured)))
        return {"driver_readback": {"carveout": 100}}

    g = SweepGpuprops({1: 30.0, 2: 31.0, 3: 290.0, 4: 291.0})
    _, m, _ = ft.measure_sweep_and_check(g, _sweep(read=lambda pts: (3, {"hit_cycles": 30.0}), report=report))
    assert m.launch["driver_readback"] == {"carveout": 100} and m.launch["hit_cycles"] == 30.0
    assert said == [(1, 4)]  # read after the sweep's four launches: what they left the function with

    def no_step(points):
        raise SweepError("no step")
    with pytest.raises(pytest.fail.Exception, match=r"x_bytes \({'driver_readback': {'carveout': 100}}\): none of 3 "
                                                    r"sweeps shows its value: sweep 1: no step"):
        ft.measure_sweep_and_check(g, _sweep(read=no_step, report=report))


def test_a_sweep_that_cannot_be_read_is_swept_again_and_the_first_readable_one_decides():
    """One disturbed sweep is no failure: a fresh one is taken; the one set aside is kept in the record."""
    from specs_caches import SweepError
    g = SweepGpuprops({1: 30.0, 2: 31.0, 3: 290.0, 4: 291.0})
    tries = []

    def read(points):
        tries.append(points)
        if len(tries) == 1:
            raise SweepError("the smallest footprints are not one level")
        return 3, {}
    m = ft.measure_sweep(g, _sweep(read=read))
    assert m.values == [3.0] and len(g.measured) == 8 and len(tries) == 2
    assert m.launch["unreadable_sweeps"] == ["the smallest footprints are not one level"]


def test_a_level_past_the_sweeps_reach_skips_where_the_gpu_has_no_value_and_is_confirmed_where_it_has():
    from specs_caches import NoSuchLevel

    def past(points):
        raise NoSuchLevel("the bank does not reach past level 2")
    g = SweepGpuprops({1: 30.0, 2: 31.0, 3: 290.0, 4: 291.0})
    with pytest.raises(pytest.skip.Exception, match="x_bytes: the bank does not reach past level 2"):
        ft.measure_sweep(g, _sweep(read=past))
    assert len(g.measured) == 4  # one sweep: nothing to confirm where there is no value
    g.fact = lambda name: SimpleNamespace(value=32768)
    with pytest.raises(pytest.fail.Exception, match="none of 3 sweeps shows its value"):
        ft.measure_sweep(g, _sweep(read=past))
    assert len(g.measured) == 4 + 12
