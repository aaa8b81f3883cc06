"""The variants of kernels/stream_bandwidth.cu (its STORE, LOAD, LAYOUT, GUARD, MIN_BLOCKS and STAMPS
defines), read from their SASS without a GPU: each variant's loop holds the 16-byte loads and stores
it names (the cache operator in the opcode, or the L2 evict_first policy in the access's memory
descriptor) and nothing else that touches memory; the guards, the trip's layout and the stamps are
where the variant says; the defaults, named, build the suite's kernels byte for byte."""

import re

import pytest
from gp_testing import KERNELS as KERNEL_DIR

from pytest_gpuprops import workloads
from pytest_gpuprops.compile import CompileError, compile_cuda

SOURCE = "stream_bandwidth.cu"
ARCH = "sm_90"
#: the defines' defaults, by name: the suite's build (workloads.STREAM_DEFINES) names none of them
NAMED_DEFAULTS = {"STORE": "STORE_WB", "LOAD": "LOAD_PLAIN", "LAYOUT": "LAYOUT_THREAD_STRIDE",
                  "GUARD": "GUARD_EACH", "MIN_BLOCKS": 2048 // workloads.STREAM_BLOCK, "STAMPS": 1}
UNROLL = workloads.STREAM_DEFINES["UNROLL"]
STORES = {  # STORE -> the opcode of its 16-byte store (sm_90, nvdisasm 13)
    "STORE_WB": "STG.E.128",
    "STORE_CS": "STG.E.EF.128",
    "STORE_WT": "STG.E.128.STRONG.SYS",
    "STORE_L1_NO_ALLOCATE": "STG.E.NA.128",
    "STORE_L2_EVICT_FIRST": "STG.E.128",  # the policy rides in the descriptor, not the opcode
}
LOADS = {  # LOAD -> the opcode of its 16-byte load
    "LOAD_PLAIN": "LDG.E.128",
    "LOAD_CS": "LDG.E.EF.128",
    "LOAD_LU": "LDG.E.LU.128",
    "LOAD_NC": "LDG.E.128.CONSTANT",
    "LOAD_L2_EVICT_FIRST": "LDG.E.128",
    "LOAD_L2_256B": "LDG.E.LTC256B.128",
}
KERNELS = ("stream_read", "stream_copy", "stream_write")
LAYOUTS = ("LAYOUT_THREAD_STRIDE", "LAYOUT_BLOCK_TILE", "LAYOUT_BLOCK_CHUNK")
MEMORY = {"LD", "ST", "LDG", "STG", "LDS", "STS", "LDL", "STL", "ATOM", "ATOMG", "ATOMS", "RED"}
_ADDRESS = re.compile(r"desc\[(UR\d+)\]\[(R\d+)\.64(?:\+(0x[0-9a-f]+))?\]")
#: the global memory descriptor's place in an sm_90 kernel's constant bank: every plain access's
#: descriptor is loaded from it (ULDC.64 URn, c[0x0][0x208])
GLOBAL_DESCRIPTOR = "c[0x0][0x208]"
#: the constant (UMOV URn, c) an L2 eviction priority puts in the descriptor that createpolicy
#: .fractional ... 1.0 folds into; read from NVRTC 13.5's sm_90 SASS of this kernel with each priority
#: in turn (2026-11-26): evict_first 0x120, evict_normal 0x160, evict_last 0x140, evict_unchanged 0x100
L2_PRIORITY_CONSTANTS = {"0x100": "evict_unchanged", "0x120": "evict_first", "0x140": "evict_last",
                         "0x160": "evict_normal"}


def compiled(cache_dir, **defines):
    return compile_cuda(KERNEL_DIR / SOURCE, ARCH, {**workloads.STREAM_DEFINES, **defines}, cache_dir=cache_dir)


def listing(build, kernel: str, **defines):
    return build(SOURCE, ARCH, **{**workloads.STREAM_DEFINES, **defines}).instructions(kernel)


def loop_of(build, kernel: str, **defines):
    """The kernel's innermost loop that holds its first kind of access (the write's stores, the
    others' loads)."""
    loop = workloads.innermost_loop(listing(build, kernel, **defines), "STG" if kernel == "stream_write" else "LDG")
    assert loop, f"{kernel} {defines}: no loop with a global access"
    return loop


def memory_ops(loop) -> dict:
    return {op: n for op, n in workloads.opcode_counts(loop).items() if op.split(".")[0] in MEMORY}


def accesses(loop) -> list:
    return [i for i in loop if i.base_opcode in ("LDG", "STG")]


def address(instr) -> tuple[str, str, int]:
    """(descriptor register, address register, byte offset) of a global access."""
    m = _ADDRESS.search(instr.text)
    assert m, instr.text
    return m.group(1), m.group(2), int(m.group(3) or "0", 16)


def global_descriptors(instrs) -> set[str]:
    """The uniform registers loaded with the kernel's plain global memory descriptor."""
    return {i.operands[0].split(".")[0] for i in instrs
            if i.opcode == "ULDC.64" and i.operands[-1] == GLOBAL_DESCRIPTOR}


# ----------------------------------------------------------------------------------------------
# the defaults


def test_the_defaults_named_build_the_suites_kernels_byte_for_byte(cache_dir):
    suite = compiled(cache_dir).cubin
    assert compiled(cache_dir, **NAMED_DEFAULTS).cubin == suite
    # and a variant is another build: the comparison can tell them apart
    assert compiled(cache_dir, **{**NAMED_DEFAULTS, "STORE": "STORE_CS"}).cubin != suite


@pytest.mark.parametrize("define, wrong", [("STORE", "STORE_CSS"), ("LOAD", "LOAD_NONE"), ("L2_LOAD", "4"),
                                           ("LAYOUT", "LAYOUT_TILE"), ("GUARD", "GUARD_NONE"), ("STORE", "0")])
def test_a_misspelt_variant_is_refused_not_built_as_the_default(cache_dir, define, wrong):
    with pytest.raises(CompileError, match=f"{define} must be"):
        compiled(cache_dir, **{define: wrong})


# ----------------------------------------------------------------------------------------------
# the cache operators


@pytest.mark.parametrize("kernel", ["stream_write", "stream_copy"])
@pytest.mark.parametrize("store", list(STORES))
def test_store_variant_loop_holds_its_stores(build, kernel, store):
    counts = memory_ops(loop_of(build, kernel, STORE=store))
    expected = {STORES[store]: UNROLL}
    if kernel == "stream_copy":
        expected["LDG.E.128"] = UNROLL
    assert counts == expected


@pytest.mark.parametrize("kernel", ["stream_read", "stream_copy"])
@pytest.mark.parametrize("load", list(LOADS))
def test_load_variant_loop_holds_its_loads(build, kernel, load):
    counts = memory_ops(loop_of(build, kernel, LOAD=load))
    expected = {LOADS[load]: UNROLL}
    if kernel == "stream_copy":
        expected["STG.E.128"] = UNROLL
    assert counts == expected


def test_read_cg_keeps_its_own_load_whatever_the_load_variant(build):
    assert memory_ops(loop_of(build, "stream_read_cg", LOAD="LOAD_CS")) == {"LDG.E.128.STRONG.GPU": UNROLL}


#: L2_LOAD -> stream_read_cg's 16-byte load: the strong .cg load, or weak loads that do not allocate in L1
L2_LOADS = {"L2_LOAD_CG": "LDG.E.128.STRONG.GPU", "L2_LOAD_NC_NO_ALLOCATE": "LDG.E.NA.128.CONSTANT",
            "L2_LOAD_NO_ALLOCATE": "LDG.E.NA.128"}


@pytest.mark.parametrize("l2_load", list(L2_LOADS))
def test_read_cg_loads_as_its_l2_load_variant_says(build, cache_dir, l2_load):
    assert memory_ops(loop_of(build, "stream_read_cg", L2_LOAD=l2_load)) == {L2_LOADS[l2_load]: UNROLL}
    if l2_load == "L2_LOAD_CG":  # the default, named: the suite's L2 read as it always was
        assert compiled(cache_dir, L2_LOAD=l2_load).cubin == compiled(cache_dir).cubin


@pytest.mark.parametrize("kernel, hinted, defines", [
    ("stream_write", "STG", {"STORE": "STORE_L2_EVICT_FIRST"}),
    ("stream_copy", "STG", {"STORE": "STORE_L2_EVICT_FIRST"}),
    ("stream_copy", "LDG", {"LOAD": "LOAD_L2_EVICT_FIRST"}),
    ("stream_read", "LDG", {"LOAD": "LOAD_L2_EVICT_FIRST"}),
])
def test_l2_evict_first_accesses_carry_a_descriptor_of_their_own(build, kernel, hinted, defines):
    """createpolicy's evict_first policy is folded into the memory descriptor of the hinted
    accesses: theirs is not the kernel's plain global descriptor, the other accesses' is, and in the
    default build every access's is."""
    plain = global_descriptors(listing(build, kernel))
    assert plain and all(address(i)[0] in plain for i in accesses(loop_of(build, kernel)))
    instrs = listing(build, kernel, **defines)
    plain = global_descriptors(instrs)
    loop = workloads.innermost_loop(instrs, "STG" if kernel == "stream_write" else "LDG")
    for i in accesses(loop):
        assert (address(i)[0] in plain) == (i.base_opcode != hinted), i.text
    assert priorities(instrs) == ["evict_first"]
    assert priorities(listing(build, kernel)) == []


def priorities(instrs) -> list[str]:
    """The L2 eviction priorities whose constants the kernel moves into a uniform register."""
    return [L2_PRIORITY_CONSTANTS[i.operands[-1]] for i in instrs
            if i.opcode == "UMOV" and i.operands[-1] in L2_PRIORITY_CONSTANTS]


# ----------------------------------------------------------------------------------------------
# guards, layouts, shapes


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_each_access_is_checked_or_only_the_tail_is(build, kernel, layout):
    each = accesses(loop_of(build, kernel, LAYOUT=layout))
    assert len(each) == UNROLL * (2 if kernel == "stream_copy" else 1)
    assert all(i.predicate for i in each), [i.text for i in each]
    tail = accesses(loop_of(build, kernel, LAYOUT=layout, GUARD="GUARD_TAIL"))
    assert len(tail) == len(each)
    assert not any(i.predicate for i in tail), [i.text for i in tail]


@pytest.mark.parametrize("block", [128, 256, 512])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_trips_accesses_lie_where_the_layout_puts_them(build, kernel, layout, block):
    """THREAD_STRIDE: a thread's accesses are the grid apart, each address computed on its own
    (no constant offsets); BLOCK_TILE and BLOCK_CHUNK: BLOCK vectors apart, constant offsets of
    16 x BLOCK bytes from the trip's first."""
    loop = loop_of(build, kernel, LAYOUT=layout, GUARD="GUARD_TAIL", BLOCK=block)
    for op in ("LDG", "STG"):
        offsets = sorted(address(i)[2] for i in accesses(loop) if i.base_opcode == op)
        if not offsets:
            continue
        if layout == "LAYOUT_THREAD_STRIDE":
            assert offsets == [0] * UNROLL
        else:
            assert offsets == [u * block * workloads.VEC_BYTES for u in range(UNROLL)]


def test_unroll_8_with_4_blocks_an_sm_has_the_registers_for_its_16_accesses(build):
    defines = {"LAYOUT": "LAYOUT_BLOCK_TILE", "GUARD": "GUARD_TAIL", "UNROLL": 8, "MIN_BLOCKS": 4}
    cubin = build(SOURCE, ARCH, **{**workloads.STREAM_DEFINES, **defines})
    assert memory_ops(loop_of(build, "stream_copy", **defines)) == {"LDG.E.128": 8, "STG.E.128": 8}
    regs = cubin.nvinfo_register_count("stream_copy")
    assert 32 < regs <= 65536 // (4 * workloads.STREAM_BLOCK)
    # at the default bounds the same 8 vectors would not fit 32 registers: the variant needs MIN_BLOCKS
    assert build(SOURCE, ARCH, **{**workloads.STREAM_DEFINES, **defines, "MIN_BLOCKS": 8}
                 ).nvinfo_register_count("stream_copy") <= 32


@pytest.mark.parametrize("layout", ["LAYOUT_THREAD_STRIDE", "LAYOUT_BLOCK_TILE"])
@pytest.mark.parametrize("store", ["STORE_WB", "STORE_CS", "STORE_L2_EVICT_FIRST"])
def test_copy_issues_all_its_loads_before_its_first_store(build, layout, store):
    """A trip's UNROLL loads are in flight together (LOAD_NC is left out: NVRTC 13.5 stores its first
    vector before loading the others under the 32-register bound)."""
    for guard in ("GUARD_EACH", "GUARD_TAIL"):
        ops = [i.base_opcode for i in accesses(loop_of(build, "stream_copy", LAYOUT=layout, STORE=store, GUARD=guard))]
        assert ops == ["LDG"] * UNROLL + ["STG"] * UNROLL, (guard, ops)


@pytest.mark.parametrize("kernel", KERNELS)
def test_stamps_read_the_clocks_twice_or_not_at_all(build, kernel):
    def clock_reads(instrs):
        return sum(1 for i in instrs if i.opcode == "CS2R" and i.operands[-1] in ("SR_CLOCKLO", "SR_GLOBALTIMERLO"))
    assert clock_reads(listing(build, kernel)) == 4  # (clock64, %globaltimer) at the start and the end
    no_stamps = listing(build, kernel, STAMPS=0, LAYOUT="LAYOUT_BLOCK_TILE")
    assert clock_reads(no_stamps) == 0
    assert not [i for i in no_stamps if i.base_opcode == "STG" and ".64" in i.opcode]  # no stamp stores


@pytest.mark.parametrize("stamps", [0, 1])
@pytest.mark.parametrize("layout", ["LAYOUT_BLOCK_TILE", "LAYOUT_BLOCK_CHUNK"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_tile_and_chunk_kernels_keep_everything_in_registers(build, kernel, layout, stamps):
    """No local memory anywhere, the copy's checked last trip included (its skipped vectors are
    zeros, not values carried over: left undefined they were spilled). The thread-stride copy under
    GUARD_TAIL is left out: with NVRTC 13.5 at 32 registers it spills one word a trip (STL + LDL.LU)."""
    for guard in ("GUARD_EACH", "GUARD_TAIL"):
        instrs = listing(build, kernel, LAYOUT=layout, GUARD=guard, STAMPS=stamps)
        assert not [i.text for i in instrs if i.base_opcode in ("LDL", "STL")], guard
