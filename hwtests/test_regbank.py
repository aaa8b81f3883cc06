"""Register banks (the original sm_86 notes, register banks): FFMA sequences with chosen source registers and reuse flags,
written into the compiler's cubin by the verified patcher.

Each variant: the regbank kernel's 128 body FFMAs all become FFMA Rd, Ra, Rb, Rc with the same
sources, reuse mask and stall 1; 4 warps per sub-partition hide the loop's branch, so cycles per
FFMA per sub-partition is the register-file read cost.

These facts stay hand-written tests, not fact specs (pytest_gpuprops/factspec.py): each is a model
checked over, or a bank count inferred from, many variants of one kernel whose FFMA operands are
patched per case (sass.patch_many) and measured in one batch (the cost model's 200 cases drawn by
hypothesis), where a spec is one compiled launch measured as one value. The unpatched build's region
(128 FFMA in the loop) is checked through specs.launched() by test_static.py."""

import pytest
import specs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytest_gpuprops import sass
from pytest_gpuprops.models import bank_read_cycles, explained_fraction, reuse_mask
from pytest_gpuprops.stats import StopRule

pytestmark = pytest.mark.gpu
WARPS = 4
TOLERANCE = 0.06  # 3 loop-control instructions per 128 FFMAs, and launch skew
FAST = StopRule(noise_target=0.01, min_samples=3, max_samples=15, time_budget_s=0.3)
METHOD = ("128 patched FFMAs per loop iteration x 64, 4 warps per sub-partition; cycles per FFMA per "
          "sub-partition")
SOURCE = "the original sm_86 notes, register banks (RTX 3060): 2 banks, bank = reg % 2, one 32-bit read per bank per cycle"

# The seeds' cases: test_ReuseBankConflict and regBankTest_2Bank (FFMA R6, R8|R7, R9, R10..R16).
SEED_CASES = [(8, 10, 16, r) for r in ("--", "-R", "R-", "RR")] + [(8, 8, 16, r) for r in ("--", "-R", "R-", "RR")] \
    + [(9, 10, 16, r) for r in ("--", "-R", "R-", "RR")] + [(a, 9, x, "--") for a in (8, 7) for x in range(10, 17)]


class Kernel:
    """The regbank kernel as compiled for this GPU: its SASS, scratch and readable registers."""

    def __init__(self, runner):
        self.cubin = sass.Cubin(runner.compile("regbank_ffma.cu", {"NFFMA": specs.REGBANK_NFFMA}).cubin,
                                runner.info.arch)
        self.instrs = self.cubin.instructions("regbank_ffma")
        self.scratch = sass.ffma_destinations(self.instrs)
        usable = sass.usable_registers(self.instrs, self.cubin.kernel("regbank_ffma"))
        self.sources = [r for r in range(usable) if r not in self.scratch]


@pytest.fixture(scope="module")
def regbank_kernel(gpu_runner):
    """Compiled and disassembled once for the module's tests."""
    return Kernel(gpu_runner)


class Bench:
    """How to measure patched variants of the regbank kernel from one test."""

    def __init__(self, gpuprops, kernel: Kernel):
        self.gp = gpuprops
        self.cubin, self.instrs = kernel.cubin, kernel.instrs
        self.scratch, self.sources = kernel.scratch, kernel.sources

    def place(self, ra, rb, rc):
        """The seeds' registers moved by a multiple of 4 (bank pattern and equalities kept) off the
        kernel's scratch accumulators."""
        for k in range(0, 64, 4):
            if all(r + k in self.sources for r in (ra, rb, rc)):
                return ra + k, rb + k, rc + k
        pytest.fail(f"cannot place R{ra}, R{rb}, R{rc} among readable registers {self.sources}")

    def measure(self, cases):
        """cases: [(ra, rb, rc, reuse mask)] -> cycles per FFMA per sub-partition, one per case."""
        timing = sass.timing_edits(self.instrs)  # the same two clock-read edits in every variant
        variants = [sass.ffma_operand_edits(self.instrs, ra, rb, rc, reuse) + timing for ra, rb, rc, reuse in cases]
        patched = sass.patch_many(self.cubin, "regbank_ffma", variants, scratch=self.scratch)
        spec = specs.regbank(WARPS)
        divisor = specs.REGBANK_NFFMA * specs.REGBANK_ITERS * WARPS
        return [self.gp.measure("regbank", spec, divisor=divisor, mode="span", stop=FAST,
                                built=(p.cubin, p.instructions)).median for p in patched]

    def model_cases(self, cases):
        """(label, bank-model cycles, measured cycles) per case, measured now."""
        return [(_label(*c), bank_read_cycles(*c), x) for c, x in zip(cases, self.measure(cases))]


def _label(ra, rb, rc, reuse):
    return f"R{ra},R{rb},R{rc} reuse {''.join('R' if reuse >> i & 1 else '-' for i in range(3))}"


@pytest.mark.fact("regbank_seed_cases")
def test_regbank_seed_cases_follow_the_bank_model(gpuprops, regbank_kernel):
    bench = Bench(gpuprops, regbank_kernel)
    cases = [(*bench.place(a, b, c), reuse_mask(r)) for a, b, c, r in SEED_CASES]
    gpuprops.check_model("regbank_seed_cases", bench.model_cases(cases), remeasure=lambda: bench.model_cases(cases),
                         tolerance_rel=TOLERANCE, unit="cycles/FFMA", method=METHOD, source=SOURCE)


@pytest.mark.fact("register_bank_count")
def test_register_bank_count_is_inferred_from_the_seed_cases(gpuprops, regbank_kernel):
    """Not asserted but inferred: which bank count (bank = reg % n) explains the seeds' cases, and
    that the cases tell it from twice as many banks."""
    from pytest_gpuprops.measure import Measurement
    bench = Bench(gpuprops, regbank_kernel)
    cases = [(*bench.place(a, b, c), reuse_mask(r)) for a, b, c, r in SEED_CASES]

    def inferred():
        measured = list(zip(cases, bench.measure(cases)))
        explained = {n: explained_fraction(measured, banks=n, cycles_per_read=1.0, tolerance_rel=TOLERANCE)
                     for n in (1, 2, 4, 8)}
        best = max(explained, key=explained.get)
        # every case explained, and not by twice as many banks too (reg % 4 fits whatever reg % 2 fits only
        # if the cases never tell them apart)
        unique = explained[best] == 1.0 and explained.get(2 * best, 0.0) < 1.0
        m = Measurement.given("banks", [float(best) if unique else float("nan")], unit="banks",
                              kernel="regbank_ffma", launch={"explained": explained})
        m.remeasure = inferred
        return m

    m = inferred()
    gpuprops.check("register_bank_count", m, method="the one bank count whose model (bank = reg % n) explains "
                   f"every seed case, and twice as many banks do not: {m.launch['explained']} (nan: none, or not told apart)")


@settings(max_examples=1, derandomize=specs.SAME_DRAWS, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
@pytest.mark.fact("regbank_cost_model")
def test_regbank_cost_model_holds_for_drawn_operands(gpuprops, regbank_kernel, data):
    """200 drawn (Ra, Rb, Rc, reuse mask) variants, patched and measured in one batch."""
    bench = Bench(gpuprops, regbank_kernel)
    reg = st.sampled_from(bench.sources)
    cases = data.draw(st.lists(st.tuples(reg, reg, reg, st.integers(0, 7)), min_size=200, max_size=200,
                               unique=True), label="cases")
    gpuprops.check_model("regbank_cost_model", bench.model_cases(cases), remeasure=lambda: bench.model_cases(cases),
                         tolerance_rel=TOLERANCE, unit="cycles/FFMA", method=METHOD, source=SOURCE)


@pytest.mark.fact("regbank_heat_map")
def test_regbank_heat_map(gpuprops, regbank_kernel):
    """Ra x Rb over 12 registers for a fixed Rc, no reuse: the conflict pattern as a picture."""
    bench = Bench(gpuprops, regbank_kernel)
    regs = bench.sources[8:20]
    rc = bench.sources[21]
    cases = [(a, b, rc, 0) for a in regs for b in regs]
    measured = bench.model_cases(cases)
    for (a, b, c, _), (_, _, x) in zip(cases, measured):
        gpuprops.plot_point("regbank", ra=a, rb=b, rc=c, cycles=x)
    gpuprops.check_model("regbank_heat_map", measured, remeasure=lambda: bench.model_cases(cases),
                         tolerance_rel=TOLERANCE, unit="cycles/FFMA", method=METHOD, source=SOURCE)
