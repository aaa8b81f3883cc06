"""The shared-memory facts (:data:`FACTS`, one pytest_gpuprops.factspec.FactSpec each): STS latency
and the STS -> LDS pair (kernels/smem_latency_st.cu), LDS / STS bandwidth per access width
(kernels/smem_bandwidth.cu) and one conflict-free wavefront (kernels/smem_conflict.cu). The launch
shapes are specs.py's (:func:`specs.sts_chain`, :func:`specs.smem_bandwidth`,
:func:`specs.smem_conflict`); the GPU tests (test_smem.py, test_smem_conflicts.py), their static
region checks (test_static_smem.py), the session prefetch and the docs' fact list are made from these
specs.

Not here, hand-written tests still (their docstrings say why): lds_latency_cycles (one fact checked
at two chain lengths), l1_load_bytes_per_cycle (one LOP3 per trip beside the per-load steps), and
smem_bank_conflict_model (a model over hypothesis-drawn accesses).

These facts hold on every arch whose facts file has them (``arch=None``); their regions are checked
on every arch of factspec.STATIC_ARCHES, as test_static.py checked their builds before."""

import specs

from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.region_rules import GUARDED_LOOP, Region

SPAN = Statistic(mode="span")
STS_CHAIN = 50
WIDTHS = {1: "float", 2: "float2", 4: "float4"}
_OPCODE = {(1, False): "STS", (2, False): "STS.64", (4, False): "STS.128",
           (1, True): "LDS", (2, True): "LDS.64", (4, True): "LDS.128"}


def _sts_facts() -> list[FactSpec]:
    return [
        # the seeds' smem_latency_st: 50 STS, each waiting on the previous one's read scoreboard
        FactSpec("sts_latency_cycles", lambda: specs.sts_chain(STS_CHAIN), Region(("STS",), steps="UNROLL"),
                 arch=None,
                 method="50 STS chained by patched control codes (each waits on the previous STS's read "
                        "scoreboard), one warp"),
        # the seeds' STS -> LDS variant: one STS, then an LDS of the same address that waits on the STS's
        # read scoreboard; the stop read waits on the LDS. On sm_86 the seeds read 36 = 11 + 23 + 2.
        FactSpec("sts_then_lds_cycles", lambda: specs.sts_chain(1, then_lds=True), Region(("STS", "LDS")),
                 arch=None,
                 method="STS; LDS of the same address waiting on the STS's read scoreboard; one warp, one pair"),
        # the reference for the STS -> LDS pair: the same LDS alone in the region
        FactSpec("lds_single_cycles", lambda: specs.sts_chain(0, then_lds=True), Region(("LDS",)), arch=None,
                 method="one LDS alone between the clock reads, one warp"),
    ]


def _bandwidth_plot(op: str, width: str):
    return lambda m: ("smem_bandwidth", {"label": f"{op.upper()} {width}", "bytes_per_cycle": m.median})


def _bandwidth_facts() -> list[FactSpec]:
    out = []
    for load in (False, True):
        op = "lds" if load else "sts"
        for vec, width in WIDTHS.items():
            nbytes = specs.smem_bytes(vec)
            out.append(FactSpec(
                f"smem_{op}_{width}_bytes_per_cycle", lambda v=vec, ld=load: specs.smem_bandwidth(v, ld),
                Region((_OPCODE[vec, load],), GUARDED_LOOP, steps="UNROLL"), divisor=1, statistic=SPAN, arch=None,
                unit="B/clk", transform=lambda cycles, n=nbytes: n / cycles, plot=_bandwidth_plot(op, width),
                method=f"one 1024-thread block on one SM, 2048 conflict-free {op.upper()} of {width} per "
                       "thread; bytes / (last stop - first start)"))
    return out


#: the conflict-free access whose cycles the bank-conflict model scales (test_smem_conflicts.py)
WAVEFRONT = FactSpec(
    "smem_wavefront_cycles", lambda: specs.smem_conflict(1, 1), Region(("LDS",), GUARDED_LOOP, steps="UNROLL"),
    divisor=specs.conflict_accesses(), statistic=SPAN, arch=None,
    method="conflict-free LDS (lane l reads word l), one 1024-thread block, 2048 accesses per warp; "
           "cycles per warp access per SM over the block's span (one wavefront)")

#: test_smem.py's facts: a test with pytest-benchmark's fixture for those that stored their launches
#: there, one without for the STS -> LDS pair and its single LDS (as before the move to specs)
STS: list[FactSpec] = _sts_facts()
BANDWIDTH: list[FactSpec] = _bandwidth_facts()
BENCHMARKED: list[FactSpec] = [STS[0], *BANDWIDTH]
UNBENCHMARKED: list[FactSpec] = STS[1:]
#: every shared-memory fact declared as a spec
FACTS: list[FactSpec] = [*STS, *BANDWIDTH, WAVEFRONT]
