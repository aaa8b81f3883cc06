"""Static checks of the whole-GPU validation kernels (hwtests/test_throughput_and_clocks.py), without
a GPU: the loop each kernel spends its time in holds exactly the work pytest_gpuprops/workloads.py
counts per launch (FFMAs, HGMMA / QGMMA of the intended shape and type, 16-byte global accesses) and
little else, on every arch the GPU facts run on."""

from pathlib import Path

import pytest

from pytest_gpuprops import sass, workloads
from pytest_gpuprops.compile import compile_cuda

pytestmark = pytest.mark.static
KERNELS = Path(__file__).parent.parent / "kernels"
ARCHES = ["sm_80", "sm_86", "sm_89", "sm_90"]
THREAD_SLOTS = {"sm_80": 2048, "sm_86": 1536, "sm_89": 1536, "sm_90": 2048}  # per SM (CUDA C++ Programming Guide, compute capabilities)
#: the counter's add and compare, the branch back, and on sm_80 .. sm_89 a CALL.REL.NOINC out and a MOV
LOOP_CONTROL = 5
#: memory accesses (constant-bank LDC aside: the compiler reloads kernel parameters in a loop)
MEMORY = {"LD", "ST", "LDG", "STG", "LDS", "STS", "LDL", "STL", "ATOM", "ATOMG", "ATOMS", "RED"}


def memory_ops(counts: dict) -> dict:
    return {op: n for op, n in counts.items() if op.split(".")[0] in MEMORY}


def listing(source: str, arch: str, kernel: str, defines: dict):
    compiled = compile_cuda(KERNELS / source, arch, defines)
    return compiled, sass.Cubin(compiled.cubin, arch, name=f"{source} {defines}").instructions(kernel)


def _builds_of(item) -> list:
    """What one test of this file compiles, as (source, arch, defines): the session prefetch
    (hwtests/conftest.py) compiles and reads them with the other static builds, before the tests."""
    params, name = getattr(getattr(item, "callspec", None), "params", {}), item.originalname
    if name == "test_stress_ffma_loop_is_the_counted_ffmas":
        return [("stress_ffma.cu", params["arch"], workloads.FFMA_DEFINES)]
    if name in ("test_stress_wgmma_loop_is_the_counted_gmma", "test_stress_wgmma_stamps_after_the_whole_block"):
        return [("stress_ffma.cu", "sm_90a", workloads.wgmma_defines(params["dtype"]))]
    if name == "test_stress_wgmma_fits_one_block_per_sm_with_all_its_warpgroups":
        return [("stress_ffma.cu", "sm_90a", workloads.wgmma_defines("bf16"))]
    if name == "test_stress_wgmma_is_empty_below_sm_90a":
        return [("stress_ffma.cu", "sm_90", workloads.wgmma_defines("bf16"))]
    if name == "test_full_grid_kernels_fit_every_thread_slot":
        return [(params["source"], params["arch"], params["defines"])]
    if name == "test_stream_loop_makes_the_counted_16_byte_accesses":
        return [("stream_bandwidth.cu", params["arch"], workloads.STREAM_DEFINES)]
    if name == "test_l2_read_reads_its_chunk_four_16_byte_ld_global_cg_a_trip":
        return [("stream_bandwidth.cu", params["arch"], workloads.L2_DEFINES)]
    if name == "test_dram_kernels_make_one_16_byte_access_per_thread_and_trip":
        return [("stream_bandwidth.cu", params["arch"], workloads.DRAM_DEFINES)]
    return []


def others(counts: dict, intended: set) -> dict:
    return {op: n for op, n in counts.items() if op not in intended}


@pytest.mark.parametrize("arch", ARCHES)
def test_stress_ffma_loop_is_the_counted_ffmas(arch):
    d = workloads.FFMA_DEFINES
    _, instrs = listing("stress_ffma.cu", arch, "stress_ffma", d)
    loop = workloads.innermost_loop(instrs, "FFMA")
    counts = workloads.opcode_counts(loop)
    assert counts.get("FFMA") == d["UNROLL"] * d["ILP"], counts
    rest = others(counts, {"FFMA"})
    assert sum(rest.values()) <= LOOP_CONTROL, rest
    assert memory_ops(rest) == {}, rest
    # every FFMA is x = x * a + b: the same a and b, x written by an FFMA of the loop (a chain carried
    # around the loop; the compiler may rotate a chain's register at the loop edge), ILP chains or more
    ffmas = [i for i in loop if i.base_opcode == "FFMA"]
    plain = [[o.replace(".reuse", "") for o in i.operands] for i in ffmas]
    assert len({(ops[2], ops[3]) for ops in plain}) == 1, {(ops[2], ops[3]) for ops in plain}
    written = {ops[0] for ops in plain}
    assert all(ops[1] in written for ops in plain)
    assert len(written) >= d["ILP"]
    assert workloads.ffma_flops(1, 1, 1, 1, d["UNROLL"], d["ILP"]) == 2 * counts["FFMA"]


@pytest.mark.parametrize("dtype", list(workloads.WGMMA_DTYPES))
def test_stress_wgmma_loop_is_the_counted_gmma(dtype):
    code, k, opcode = workloads.WGMMA_DTYPES[dtype]
    compiled, instrs = listing("stress_ffma.cu", "sm_90a", "stress_wgmma", workloads.wgmma_defines(dtype))
    loop = workloads.innermost_loop(instrs, opcode.split(".")[0])
    counts = workloads.opcode_counts(loop)
    assert counts.get(opcode) == workloads.WGMMA_UNROLL, counts
    assert counts.get("WARPGROUP.ARRIVE") == 1 and counts.get("WARPGROUP.DEPBAR.LE") == 1, counts
    rest = others(counts, {opcode, "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR.LE"})
    assert sum(rest.values()) <= LOOP_CONTROL, rest
    assert memory_ops(rest) == {} and not any("GMMA" in op for op in rest), rest
    # one accumulator chain: every instruction adds into the same 128 registers
    gmma = [i for i in loop if i.opcode == opcode]
    assert {(i.operands[0], i.operands[2]) for i in gmma} == {(gmma[0].operands[0],) * 2}
    assert "serializ" not in compiled.log.lower(), compiled.log  # ptxas did not serialize the wgmma chain
    assert workloads.wgmma_flops(1, 1, 1, 1, 1, workloads.WGMMA_N, k) == 2 * 64 * 256 * k


def stamps_without_a_barrier_first(instrs) -> list:
    """The stamps (reads of %globaltimer) reached, going back from them, by tensor work (a GMMA or the
    wait for one) before a block barrier: each interval they close left some warpgroup's work out."""
    bad = []
    for n, i in enumerate(instrs):
        if "SR_GLOBALTIMERLO" not in i.text:
            continue
        for j in reversed(instrs[:n]):
            if j.base_opcode == "BAR":
                break
            if "GMMA" in j.opcode or j.opcode.startswith("WARPGROUP"):
                bad.append(i)
                break
    return bad


@pytest.mark.parametrize("dtype", list(workloads.WGMMA_DTYPES))
def test_stress_wgmma_stamps_after_the_whole_block(dtype):
    """Thread 0 (warpgroup 0) stamps; a block barrier first makes the stamp wait for every warpgroup's
    wgmma chain, so a launch's stamps bracket all its work (the span its rate is read over)."""
    _, instrs = listing("stress_ffma.cu", "sm_90a", "stress_wgmma", workloads.wgmma_defines(dtype))
    stamps = [i for i in instrs if "SR_GLOBALTIMERLO" in i.text]
    assert len(stamps) == 2, [i.text for i in stamps]  # the start, and the one after each sample's loop
    assert stamps_without_a_barrier_first(instrs) == []
    # the check itself: the same listing without its barriers leaves the stamp after the loop unbracketed
    assert stamps_without_a_barrier_first([i for i in instrs if i.base_opcode != "BAR"]) == stamps[1:]


def test_stress_wgmma_fits_one_block_per_sm_with_all_its_warpgroups():
    """154 registers a thread (2 warpgroups, 256 threads: 39 424 of the SM's 65 536): every block of
    the one-per-SM grid is resident at once."""
    compiled, _ = listing("stress_ffma.cu", "sm_90a", "stress_wgmma", workloads.wgmma_defines("bf16"))
    regs = sass.Cubin(compiled.cubin, "sm_90a").nvinfo_register_count("stress_wgmma")
    assert regs is not None and regs * 128 * workloads.WGMMA_WARPGROUPS <= 65536, regs


def test_stress_wgmma_is_empty_below_sm_90a():
    _, instrs = listing("stress_ffma.cu", "sm_90", "stress_wgmma", workloads.wgmma_defines("bf16"))
    assert not any("GMMA" in i.opcode for i in instrs)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("source, kernel, defines", [
    ("stress_ffma.cu", "stress_ffma", workloads.FFMA_DEFINES),
    *[("stream_bandwidth.cu", k, workloads.STREAM_DEFINES) for k in sorted(workloads.STREAM_KERNELS.values())],
    ("stream_bandwidth.cu", "stream_read_cg", workloads.L2_DEFINES),
])
def test_full_grid_kernels_fit_every_thread_slot(arch, source, kernel, defines):
    """The grid is SMs x (thread slots / block): every block of it is resident at once (one wave),
    registers allocated per warp in units of 256."""
    compiled, _ = listing(source, arch, kernel, defines)
    regs = sass.Cubin(compiled.cubin, arch).nvinfo_register_count(kernel)
    warps = THREAD_SLOTS[arch] // defines["BLOCK"] * defines["BLOCK"] // 32
    assert regs is not None and warps * -(-regs * 32 // 256) * 256 <= 65536, regs


STREAM = {  # kernel -> the loop's global accesses, sm_80 .. sm_90
    "stream_read": {"LDG.E.128": 4},
    "stream_read_cg": {"LDG.E.128.STRONG.GPU": 4},
    "stream_copy": {"LDG.E.128": 4, "STG.E.128": 4},
    "stream_write": {"STG.E.128": 4},
}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel", sorted(STREAM))
def test_stream_loop_makes_the_counted_16_byte_accesses(arch, kernel):
    _, instrs = listing("stream_bandwidth.cu", arch, kernel, workloads.STREAM_DEFINES)
    loop = workloads.innermost_loop(instrs, "STG" if kernel == "stream_write" else "LDG")
    counts = workloads.opcode_counts(loop)
    memory = memory_ops(counts)
    assert memory == STREAM[kernel], counts
    unroll = workloads.STREAM_DEFINES["UNROLL"]
    kind = {v: k for k, v in workloads.STREAM_KERNELS.items()}[kernel]
    assert workloads.stream_bytes(kind, unroll, 1) == workloads.VEC_BYTES * sum(memory.values())


@pytest.mark.parametrize("arch", ARCHES)
def test_l2_read_reads_its_chunk_four_16_byte_ld_global_cg_a_trip(arch):
    """The L2 read as the fact builds it (workloads.L2_DEFINES, shared chunks): its loop makes UNROLL
    16-byte L2-only loads (LDG.E.128.STRONG.GPU) and nothing else of memory, and a launch's bytes are
    its blocks' chunks."""
    d = workloads.L2_DEFINES
    _, instrs = listing("stream_bandwidth.cu", arch, "stream_read_cg", d)
    counts = workloads.opcode_counts(workloads.innermost_loop(instrs, "LDG"))
    assert memory_ops(counts) == {"LDG.E.128.STRONG.GPU": d["UNROLL"]}, counts
    assert d["CHUNK16"] * workloads.VEC_BYTES == workloads.L2_CHUNK_BYTES
    n16 = 25 * d["CHUNK16"]  # the H100's window: 12.5 MiB
    assert workloads.l2_read_grid(n16, 132, 2048) == 4 * 1056
    assert workloads.l2_read_bytes(n16, 4224, 3) == 4224 * workloads.L2_CHUNK_BYTES * 3


DRAM = {  # kernel -> its global accesses as the DRAM facts build it (workloads.DRAM_DEFINES), sm_80 .. sm_90
    "stream_read": {"LDG.E.128": 1},
    "stream_copy": {"LDG.E.128": 1, "STG.E.128": 1},
    "stream_write": {"STG.E.128": 1},
}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel", sorted(DRAM))
def test_dram_kernels_make_one_16_byte_access_per_thread_and_trip(arch, kernel):
    """The DRAM facts' shape: a block per tile of BLOCK x UNROLL (= 1) vectors, so the unchecked trip
    holds exactly one 16-byte access per thread (two for the copy), and no stamps (STAMPS=0) are
    written (the read's one conditional store is its never-taken sink); stream_bytes counts what the
    kernel moves."""
    _, instrs = listing("stream_bandwidth.cu", arch, kernel, workloads.DRAM_DEFINES)
    loop = workloads.innermost_loop(instrs, "STG" if kernel == "stream_write" else "LDG")
    memory = memory_ops(workloads.opcode_counts(loop))
    assert memory == DRAM[kernel], memory
    every = memory_ops(workloads.opcode_counts(instrs))
    kind = {v: k for k, v in workloads.STREAM_KERNELS.items()}[kernel]
    assert workloads.stream_bytes(kind, 1, 1) == workloads.VEC_BYTES * sum(memory.values())
    assert "STG.E.64" not in every, every  # the stamps' 64-bit (clock64, %globaltimer) stores are not built
