"""Tensor-core power with zero against random operands, per GPU model: the same dense bf16 wgmma
m64n256k16 stress as the sustained tensor clock (kernels/stress_ffma.cu stress_wgmma, two warpgroups on
every SM), once on all-zero A and B tiles (ZERO_OPERANDS=1) and once on its pseudo-random ones, each for
STRESS_S with NVML's energy counter sampled every 10 ms; pytest_gpuprops/power.py has the method.

* sustained_sm_clock_tensor_zero_operand_mhz: the SM clock the zero-operand stress sustains (the
  random one's is sustained_sm_clock_tensor_mhz, test_throughput_and_clocks.py);
* wgmma_bf16_zero_operand_power_w, wgmma_bf16_random_operand_power_w: the mean power of each stress
  over the windows its sustained clock is read in (from SUSTAINED_FROM_S on), from the energy counter;
* wgmma_bf16_zero_operand_power_pct_of_random: the zero stress's power as a percentage of the random
  one's, window by window.

Why: Luo et al. (arXiv 2501.12084) report that Hopper's tensor cores draw less power on zero than on
random data. With random data an H100 SXM runs this stress at its 700 W limit (the capped clock of
sustained_sm_clock_tensor_mhz); with zeros it is expected under the limit and at a higher clock. The
zero stress runs first, the random one second, in every run (the GPU's temperature then follows the
same path). They depend on the SKU (power limit, clocks): record mode files them under the GPU's
section. About 16 s on an H100: two stresses of 6 s, each after its calibration and compile."""

import pytest

from pytest_gpuprops import datasheets, throughput_text, workloads
from pytest_gpuprops import facts as gp_facts
from pytest_gpuprops import power as gp_power
from pytest_gpuprops.compile import compile_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.validation, pytest.mark.arch("sm_90")]
WGMMA_ARCH = "sm_90a"
#: as the sustained tensor clock's stress (test_throughput_and_clocks.py): 6 s, read from 1 s on in 5
#: windows of 1 s, each a whole cycle of the capped clock's dip (about once a second on an H100 SXM)
STRESS_S = 6.0
SUSTAINED_FROM_S = 1.0
CLOCK_FACT = "sustained_sm_clock_tensor_zero_operand_mhz"
POWER_FACTS = {True: "wgmma_bf16_zero_operand_power_w", False: "wgmma_bf16_random_operand_power_w"}
RATIO_FACT = "wgmma_bf16_zero_operand_power_pct_of_random"
gp_facts.register_gpu_scoped(CLOCK_FACT, *POWER_FACTS.values(), RATIO_FACT)


def _specs_of(item) -> list:
    """No timed region to prefetch (the stresses are timed by their stamps, compiled in the test); this
    keeps the session prefetch from compiling every shared build for this file (hwtests/conftest.py)."""
    return []


def _stress(runner, gpu, zero: bool):
    import cupy
    defines = workloads.wgmma_defines("bf16", zero_operands=zero)
    cubin = compile_cuda(runner.kernels_dir / "stress_ffma.cu", WGMMA_ARCH, defines, cache_dir=runner.cache_dir).cubin
    wl = workloads.wgmma_workload(cupy, runner.load(cubin, "stress_wgmma"), "bf16", sms=gpu.sm_count, zero_operands=zero)
    try:
        return gp_power.stress_power(cupy, wl, clock_name=CLOCK_FACT if zero else "sustained_sm_clock_tensor_mhz",
                                     power_name=POWER_FACTS[zero], info=gpu, duration_s=STRESS_S,
                                     sustained_from_s=SUSTAINED_FROM_S)
    except ValueError as exc:  # the energy counter: not read, or too few steps in a window
        pytest.fail(f"{POWER_FACTS[zero]}: NVML's energy counter could not give the stress's power: {exc}. Check that "
                    "nvmlDeviceGetTotalEnergyConsumption works on this GPU (nvidia-smi -q -d POWER).", pytrace=False)


@pytest.fixture(scope="module")
def zero_stress(gpu_runner, gpu):
    """(clock, power) of the stress on all-zero operands: run first."""
    return _stress(gpu_runner, gpu, zero=True)


@pytest.fixture(scope="module")
def random_stress(gpu_runner, gpu, zero_stress):
    """(clock, power) of the stress on pseudo-random operands: run after the zero one."""
    return _stress(gpu_runner, gpu, zero=False)


def _every_sm(m, gpu) -> None:
    if m.launch.get("sms_covered") != gpu.sm_count:
        pytest.fail(f"{m.kernel} ran on {m.launch.get('sms_covered')} of the {gpu.sm_count} SMs: a whole-GPU stress "
                    "must load every SM", pytrace=False)


def power_method(m, zero: bool) -> str:
    ln = m.launch
    return (f"stress_wgmma bf16 m64n256k16 ({'all-zero' if zero else 'pseudo-random'} A and B tiles) on all "
            f"{ln['sms_covered']} SMs, launches of ~{ln['launch_s'] * 1e3:.0f} ms two deep for {ln['duration_s']:g} s; "
            f"NVML's total energy counter every {ln['period_s'] * 1e3:g} ms (it moved every "
            f"{ln['energy_step_period_s']} s): the energy between the first and last steps seen in each of 5 windows "
            f"of {ln['power_from_s']:g} .. {ln['power_to_s']:g} s over the time between them, the median window "
            f"(whole span {ln['span_power_w']:g} W; NVML's power reading {ln['reading_power_w']} W); the SM clock "
            f"of the same windows {ln['window_clock_mhz']} MHz (kernel stamps), throttle reasons: "
            f"{', '.join(m.throttle) or 'none'}")


@pytest.mark.fact(CLOCK_FACT)
def test_sustained_sm_clock_with_zero_operands(gpuprops, gpu, zero_stress):
    m, _ = zero_stress
    _every_sm(m, gpu)
    gpuprops.plot_point("sustained_clock", load="bf16 wgmma, zero operands", series=m.launch["series_mhz"],
                        sustained=m.median, throttle=list(m.throttle))
    gpuprops.check(CLOCK_FACT, m, method=throughput_text.clock_method(m, datasheets.datasheet_for(gpu.name)))


@pytest.mark.fact(lambda operands: POWER_FACTS[operands == "zero"])
@pytest.mark.parametrize("operands", ["zero", "random"])
def test_tensor_stress_power(gpuprops, gpu, zero_stress, random_stress, operands):
    zero = operands == "zero"
    _, m = zero_stress if zero else random_stress
    _every_sm(m, gpu)
    gpuprops.check(POWER_FACTS[zero], m, method=power_method(m, zero))


@pytest.mark.fact(RATIO_FACT)
def test_zero_operand_power_as_a_share_of_random(gpuprops, zero_stress, random_stress):
    m = gp_power.power_ratio_pct(zero_stress[1], random_stress[1], RATIO_FACT)
    m.remeasure = lambda: gp_power.power_ratio_pct(zero_stress[1].remeasure(), random_stress[1].remeasure(), RATIO_FACT)
    ln = m.launch
    gpuprops.check(RATIO_FACT, m, method=(
        f"window by window, the zero-operand stress's power over the random-operand one's (5 windows of "
        f"{SUSTAINED_FROM_S:g} .. {STRESS_S:g} s, energy counter): {ln['numerator_w']:g} W at {ln['numerator_mhz']} MHz "
        f"against {ln['denominator_w']:g} W at {ln['denominator_mhz']} MHz; the zero stress runs first"))
