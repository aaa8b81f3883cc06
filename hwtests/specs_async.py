"""The sm_90 asynchronous units' facts (:data:`FACTS`, one pytest_gpuprops.factspec.FactSpec each) and
their launch shapes: the mbarrier round trip (kernels/mbarrier_roundtrip.cu), cp.async / LDGSTS
(kernels/cp_async_latency.cu), thread-block clusters and distributed shared memory
(kernels/cluster_dsmem.cu) and the bulk / tensor (TMA) copies (kernels/tma_load.cu). The GPU tests
(test_async_units.py), the static region checks (test_static_async_units.py), the session prefetch
and the docs' fact list are made from :data:`FACTS`.

An asynchronous unit completes through an mbarrier or an async-copy group, not a register
scoreboard: each timed region ends when the wait returns (try_wait's loop, wait_group's DEPBAR), and
the stop clock read, patched to wait on every scoreboard, adds nothing to that. Each spec names the
unit's opcodes (what NVRTC 13.5 emits for sm_90) and the region's shape; the rest of the region is
read from the SASS and checked against the shape's rules (pytest_gpuprops/factspec.py).

The cluster kernels are compiled with ``__cluster_dims__()`` and launched with the cluster size as a
launch attribute (KernelSpec.cluster, driver_launch.launch_config), so one build serves every size; the
runner allows the non-portable size 16 on the function before it launches it."""

import struct

from memory_levels import ALL_LINES_TEXT, L2_LINES_RESERVE, NEAR_TIER_TEXT, line_by_line

from pytest_gpuprops.driver_launch import PORTABLE_CLUSTER_SIZE
from pytest_gpuprops.factspec import FactSpec, Statistic
from pytest_gpuprops.kernel_spec import KernelSpec
from pytest_gpuprops.region_rules import (
    COPY_RING,
    ELECTED_COPY,
    LANE0_BULK_GROUP,
    LANE0_STORE_POLL,
    LOOP,
    WAIT_LOOP,
    Region,
)

ARCH = "sm_90"

# ----------------------------------------------------------------------------------------------
# mbarrier

#: wait -> (kernels/mbarrier_roundtrip.cu TOKEN, what the wait is)
MBARRIER_WAITS = {
    "parity": (0, "mbarrier.try_wait.parity on the phase's parity"),
    "token": (1, "mbarrier.try_wait on the state token the arrive returned"),
}
MBARRIER_FACT = {"parity": "mbarrier_arrive_wait_cycles", "token": "mbarrier_arrive_token_wait_cycles"}
#: one round trip: arrive, then the try_wait loop (its retry path out of line, after EXIT)
MBARRIER_UNIT = ("SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT")


def mbarrier(wait: str) -> KernelSpec:
    token, _ = MBARRIER_WAITS[wait]
    return KernelSpec("mbarrier_roundtrip.cu", "mbarrier_roundtrip", {"TOKEN": token, "PASSES": 2}, grid=1,
                      block=32, args=lambda cp: (cp.zeros(64, dtype=cp.uint32),))


# ----------------------------------------------------------------------------------------------
# cp.async (LDGSTS)

#: variant -> (kernels/cp_async_latency.cu CG, SIZE, the copy's SASS, what it reads in the timed pass)
CP_ASYNC = {
    "ca4": (0, 4, "LDGSTS.E", "an L1 hit"),
    "ca16": (0, 16, "LDGSTS.E.128", "an L1 hit"),
    "cg16": (1, 16, "LDGSTS.E.BYPASS.128", "an L2 hit"),
}


#: the copies that read L2 hits: measured line by line (memory_levels.near_tier_latency)
L2_COPIES = {"cg16"}


def cp_async(variant: str, line: int | None = None) -> KernelSpec:
    """One warp's cp.async of ``variant``; an L2 copy reads line ``line`` of memory_levels.l2_line_offsets()
    (the same build for every line: the source is the argument)."""
    cg, size, _, _ = CP_ASYNC[variant]
    if (line is None) == (variant in L2_COPIES):
        raise ValueError(f"cp.async {variant}: a line is given for the L2 copies {sorted(L2_COPIES)} only, and they need one")
    return KernelSpec("cp_async_latency.cu", "cp_async_latency", {"CG": cg, "SIZE": size, "PASSES": 2}, grid=1,
                      block=32, args=lambda cp: (cp.zeros(4096, dtype=cp.uint32) if line is None else line_by_line(cp, line),
                                                 cp.zeros(64, dtype=cp.uint32)),
                      clock_beside=variant in L2_COPIES)


# ----------------------------------------------------------------------------------------------
# clusters and distributed shared memory

CLUSTER_SIZES = (2, 4, 8, 16)  # 16 is non-portable
#: dynamic shared memory of every cluster CTA (unused): more than half of an SM's 228 KiB, so no two
#: CTAs of a cluster share an SM and every "neighbour" is another SM's shared memory. A cluster that
#: cannot be placed so (16 SMs of one GPC for 16) is refused by cuOccupancyMaxActiveClusters, and its
#: facts fail with that reason on sm_90 (refused_cluster).
CLUSTER_SHARED_MEM = 120 * 1024
DSMEM_UNROLL = 64  # dependent hops per pass
DSMEM_BW_CLUSTER = 2
DSMEM_BW_UNROLL, DSMEM_BW_ITERS = 32, 32
#: store -> the access's SASS
DSMEM_BW_OPCODE = {False: "LD.E.128.STRONG.SYS", True: "ST.E.128.STRONG.SYS"}
CLUSTER_BARRIER_UNROLL = 16
#: relaxed -> the SASS of one barrier.cluster.arrive + barrier.cluster.wait
CLUSTER_BARRIER_STEP = {
    True: ("UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"),
    False: ("MEMBAR.ALL.GPU", "ERRBAR", "CGAERRBAR", "UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"),
}


#: CTAs of a DSMEM bandwidth sweep launch: 64 // k clusters of k.
CLUSTER_LAUNCH_CTAS = 64


def cluster_chase_ctas(cluster: int) -> int:
    """CTAs of a DSMEM chase or cluster-barrier launch: a CTA on every SM (one fits an SM), in whole
    clusters of ``cluster``. One cluster's latency depends on the SM pair it lands on (one CTA pair reads
    176-212 cycles a hop), so the statistic (the DSMEM chase's mean, the barriers' median) is taken over
    CTAs on every SM: the median over 64 CTAs followed
    where a process's clusters landed (H100 GPU-5c5ac176, clusters of 4: 198.77-199.90 over four
    processes, 2026-11-26; the fact's band is 198.707 +- 0.5)."""
    return sm_count() // cluster * cluster


def dsmem_chase(cluster: int, hop: int) -> KernelSpec:
    """:func:`cluster_chase_ctas` CTAs in clusters of ``cluster``, one warp each, every CTA chasing
    through the CTA ``hop`` ranks on in its cluster (0: its own shared memory, 1: its neighbour's). The
    same build for every size and hop."""
    import numpy as np
    ctas = cluster_chase_ctas(cluster)
    return KernelSpec("cluster_dsmem.cu", "dsmem_chase", {"UNROLL": DSMEM_UNROLL, "PASSES": 2},
                      grid=ctas, block=32, cluster=cluster, shared_mem=CLUSTER_SHARED_MEM,
                      args=lambda cp: (cp.zeros(32 * ctas, dtype=cp.uint32), np.uint32(hop)))


def dsmem_bandwidth(store: bool, cluster: int = DSMEM_BW_CLUSTER, ctas: int = DSMEM_BW_CLUSTER) -> KernelSpec:
    """``ctas`` // ``cluster`` clusters of ``cluster`` 1024-thread CTAs, one per SM, every CTA loading
    (or storing) its neighbour's shared memory at once (the same build for every size and count)."""
    import numpy as np
    if ctas % cluster:
        raise ValueError(f"dsmem bandwidth: {ctas} CTAs are not whole clusters of {cluster}")
    block = 1024
    return KernelSpec("cluster_dsmem.cu", "dsmem_bandwidth", {"UNROLL": DSMEM_BW_UNROLL, "STORE": int(store)},
                      grid=ctas, block=block, cluster=cluster, shared_mem=CLUSTER_SHARED_MEM,
                      args=lambda cp: (cp.zeros(block * ctas, dtype=cp.uint32), np.int32(DSMEM_BW_ITERS)))


def dsmem_bytes_per_block() -> int:
    """Bytes one CTA of :func:`dsmem_bandwidth` moves to or from its neighbour in the timed region."""
    return 1024 * 16 * DSMEM_BW_UNROLL * DSMEM_BW_ITERS


def cluster_barrier(cluster: int, relaxed: bool = True) -> KernelSpec:
    """:func:`cluster_chase_ctas` CTAs in clusters of ``cluster``, each running its barriers: one
    cluster's barrier depends on where its CTAs land (a cluster of 2, one per run: 45.938 cycles on one
    H100, 58.938 on three other units, 2026-11-24/25), so the median over clusters on every SM is taken."""
    return KernelSpec("cluster_dsmem.cu", "cluster_barrier",
                      {"UNROLL": CLUSTER_BARRIER_UNROLL, "PASSES": 2, "RELAXED": int(relaxed)},
                      grid=cluster_chase_ctas(cluster),
                      block=32, cluster=cluster, shared_mem=CLUSTER_SHARED_MEM,
                      clock_beside=not relaxed)  # a release barrier waits on the memory system (its fence)


#: the first arch with thread-block clusters and distributed shared memory (Hopper)
CLUSTER_MIN_ARCH = 90


def arch_number(arch: str) -> int:
    """sm_90 -> 90, sm_90a -> 90, sm_100f -> 100."""
    digits = "".join(ch for ch in arch.split("_")[-1] if ch.isdigit())
    if not digits:
        raise ValueError(f"arch {arch!r}: expected sm_NN, sm_NNa or sm_NNf")
    return int(digits)


def refused_cluster(arch: str, spec: KernelSpec, refusal: str, fact: str, expected: str | None) -> tuple[bool, str]:
    """What it means that the driver refused ``spec``'s cluster launch (``refusal``: its reason, from
    Runner.cluster_refusal) on a GPU of ``arch``: (True, the skip reason) on an arch without clusters
    (below sm_90), where the fact cannot apply; (False, the failure message) on sm_90 and newer, which
    have clusters and whose facts were measured with this very launch: a refusal there is a fault of
    this GPU or its setup, and a skip would hide it. ``expected`` is the fact's expected value as text
    (None in record mode)."""
    if arch_number(arch) < CLUSTER_MIN_ARCH:
        return True, (f"{fact}: {arch} has no thread-block clusters (sm_{CLUSTER_MIN_ARCH} and newer have them), "
                      f"so the driver refused the launch: {refusal}")
    k = spec.cluster
    shape = (f"{spec.grid // k} clusters of {k} CTAs x {spec.block} threads"
             + (f", {spec.shared_mem} bytes of dynamic shared memory per CTA" if spec.shared_mem else ""))
    check = ("other processes, MPS or MIG on this GPU (nvidia-smi; nvidia-smi mig -lgi: a MIG instance has fewer "
             "SMs per GPC), the driver version (nvidia-smi; clusters need a CUDA 12 driver or newer)")
    if k > PORTABLE_CLUSTER_SIZE:
        check += (f"; a cluster of {k} is non-portable: it needs one GPC with {k} SMs free, which not every sm_90 "
                  "SKU or MIG slice has (such a GPU needs facts of its own: --gpuprops-record)")
    facts = f"{fact} = {expected}" if expected else fact
    return False, (f"{fact}: the driver refused the cluster launch on {arch}, which has thread-block clusters and "
                   f"the fact {facts} for them.\n"
                   f"  refused:  {spec.kernel} from {spec.source}, {shape}: {refusal}\n"
                   f"  expected: the launch to run, as it did on the GPUs the fact was measured on\n"
                   f"  check:    {check}; then run this test again")


# ----------------------------------------------------------------------------------------------
# bulk copies: cp.async.bulk and cp.async.bulk.tensor (TMA)

BULK_BYTES = (1024, 4096)
#: dim -> (tensor shape in fp32 elements, innermost first; the box copied). The bulk and tensor loads
#: read L2 hits, line by line (memory_levels.near_tier_latency): the source, or the tensor, starts at
#: the line.
TMA_SHAPES = {1: ((4096,), (256,)), 2: ((64, 64), (32, 32))}
#: one copy by one thread: lane 0 arms the barrier and issues the copy inside ptxas's ELECT loop, the
#: other lanes branch round it; then every lane's try_wait loop (factspec.ELECTED_COPY)
BULK_ARM, BULK_WAIT = "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"
#: copy -> the copy's SASS
BULK_COPIES = {"bulk": "UBLKCP.S.G", "tma_1d": "UTMALDG.1D", "tma_2d": "UTMALDG.2D"}
KIB = {1024: "1k", 4096: "4k"}
KIB_NAME = {1024: "1k", 4096: "4k", 16384: "16k"}


def bulk_copy(nbytes: int, line: int = 0) -> KernelSpec:
    """cp.async.bulk of ``nbytes`` from line ``line`` of memory_levels.l2_line_offsets() (the size and
    the source are runtime arguments: one build for every size and line)."""
    import numpy as np
    return KernelSpec("tma_load.cu", "bulk_copy", {"PASSES": 2}, grid=1, block=32,
                      args=lambda cp: (line_by_line(cp, line), np.uint32(nbytes), cp.zeros(64, dtype=cp.uint32)),
                      clock_beside=True)


def tma_bytes(dim: int) -> int:
    _, box = TMA_SHAPES[dim]
    n = 4
    for b in box:
        n *= b
    return n


def tma_tensor(dim: int, line: int = 0) -> KernelSpec:
    """cp.async.bulk.tensor.<dim>d of the box at the origin of an fp32 tensor (TMA_SHAPES) that starts
    at line ``line`` of memory_levels.l2_line_offsets() (the tensor map is the argument: one build)."""
    import numpy as np
    shape, box = TMA_SHAPES[dim]
    return KernelSpec("tma_load.cu", "tma_tensor", {"PASSES": 2, "DIM": dim}, grid=1, block=32,
                      args=lambda cp: (tensor_map(cp, shape, box, line), np.uint32(tma_bytes(dim)),
                                       cp.zeros(64, dtype=cp.uint32)),
                      clock_beside=True)


class TensorMapArg(bytes):
    """A CUtensorMap's 128 bytes, passed by value (driver_launch.kernel_params), holding the device array
    it describes so that the array lives as long as the launch arguments."""

    tensor = None


#: TMA stores (cp.async.bulk.tensor.2d.global.shared::cta.bulk_group) of the TMA_SHAPES[2] box from shared
#: memory to the origin of an fp32 tensor: lane 0 alone issues and commits its bulk group, the other
#: lanes branch round it. Two events, one fact each:
#: * the source read: cp.async.bulk.wait_group.read 0 (kernels/tma_load.cu WAIT_READ=1), DEPBAR.LE SB0,
#:   0x0 on the commit's (UTMACMDFLUSH's) read scoreboard (factspec.LANE0_BULK_GROUP). wait_group 0, the
#:   writes done as PTX names it, compiles on sm_90 (NVRTC 13.5) to the same DEPBAR plus CCTL.IVALL after
#:   it: the same event (both read 222 cycles on every unit), so it is no fact of its own
#:   (tma_2d_store_4k_latency_cycles, retired 2026-11-26);
#: * the writes seen in L2 (STORE_VISIBLE=1): lane r polls the last word of box row r with ld.relaxed.gpu
#:   until the warp's vote says all 32 rows hold the timed pass's values (factspec.LANE0_STORE_POLL); no
#:   wait in the region.
TMA_STORE_DIM = 2
TMA_STORE_WAIT_UNIT = ("UTMASTG.2D", "UTMACMDFLUSH", "DEPBAR.LE")
TMA_STORE_POLL_UNIT = ("UTMASTG.2D", "UTMACMDFLUSH", "LDG.E.STRONG.GPU", "VOTE.ALL")


#: blocks of the visible TMA store: one warp a block on SMs of their own, one at a time, each storing a box of its
#: own (rows 32 b .. 32 b + 31 of a tensor 32 x this tall): the median over them is no one box's L2 slices
TMA_STORE_VISIBLE_BLOCKS = 32


def tma_store(visible: bool = False) -> KernelSpec:
    """A TMA store of the TMA_SHAPES[2] box from shared memory to the origin of an fp32 tensor, timed
    until wait_group.read 0 returns, or (``visible``) until polls of every row read the stored values:
    then TMA_STORE_VISIBLE_BLOCKS blocks, one at a time through a turn counter, each store a box of
    their own rows of a tensor that many boxes tall (its address is an argument too, its row length
    STORE_ROW_WORDS the tensor's innermost dimension), and the median over the blocks is the reading."""
    shape, box = TMA_SHAPES[TMA_STORE_DIM]
    if not visible:
        return KernelSpec("tma_load.cu", "tma_store", {"PASSES": 2, "DIM": TMA_STORE_DIM, "WAIT_READ": 1}, grid=1,
                          block=32, args=lambda cp: (tensor_map(cp, shape, box), cp.zeros(64, dtype=cp.uint32)))
    blocks = TMA_STORE_VISIBLE_BLOCKS
    tall = (shape[0], box[1] * blocks)

    def args(cp):  # pragma: no cover  (GPU only: the tensor map)
        tm = tensor_map(cp, tall, box)
        return tm, tm.tensor, cp.zeros(64, dtype=cp.uint32), cp.zeros(1, dtype=cp.uint32)
    return KernelSpec("tma_load.cu", "tma_store",
                      {"PASSES": 2, "DIM": TMA_STORE_DIM, "STORE_VISIBLE": 1, "STORE_ROW_WORDS": shape[0]},
                      grid=blocks, block=32, args=args, clock_beside=True)


#: TMA throughput: every block of SMs x blocks-per-SM streams 2D boxes from L2 (kernels/tma_load.cu tma_stream),
#: its warps walking the tensor's boxes on strides of their own (``scatter``: one H100, GPU-6c61e38e, 2026-11-26,
#: read each box and blocks per SM within 0.3 % over three processes and launch to launch; a warp re-reading its
#: own box moved 1.8 % between processes at 16 KiB, where its lines' L2 slices are the allocation's; warps a box
#: apart in step, ``convoy``, read 6.6 % apart launch to launch at 4 KiB):
#: each of its TMA_STREAM_ISSUERS warps through a ring of mbarrier stages of its own, one box a stage, the arm
#: and the copy issued once per trip by the lane elect.sync picks. box bytes -> (box rows of TMA_STREAM_WIDTH
#: fp32, stages a warp): 64 KiB in flight per block for every box (Little's law: ~30 B/clk/SM at ~700 cycles
#: of loaded L2 latency needs ~21 KiB; the ring holds three times that). Four issuing warps, not one: one warp's
#: copy of a 1 KiB box per trip read 9.566 B/clk a block at 1 and 2 blocks per SM alike (measured on an H100,
#: GPU-2bbcd972, driver 580.159.04, CUDA 13.0, 2026-11-26, with lane 0 issuing 4 copies a stage in ELECT
#: loops): the issuing warp's loop, not TMA. With 4 warps a block issues 4 copies in the time one warp
#: issues one; the 16 KiB box's warps hold one stage each (4 in flight a block, as a ring of 4 in one warp)
TMA_STREAM_BOXES = {1024: (8, 16), 4096: (32, 4), 16384: (128, 1)}
TMA_STREAM_ISSUERS = 4
TMA_STREAM_WIDTH = 32  # fp32 elements a tensor row and a box row: 128 bytes, one L2 line
TMA_STREAM_BLOCKS_PER_SM = (1, 2)
#: (box bytes, blocks per SM) measured but not a fact, and why: the 1 KiB box at 2 blocks per SM read
#: 16.8 .. 20.2 B/clk from launch to launch (noise 2.8-3.1 %, 100 launches, both H100s of GPU-9db59b7a +
#: GPU-fd48deeb, 2026-11-26), below the 22.8 of one block, so its value is no property to hold a unit to
TMA_STREAM_NOT_FACTS = {(1024, 2): "NOISY on every unit measured: 16.8 .. 20.2 B/clk from launch to launch"}
#: boxes whose stream is bound by the L2, not by the issuing warps' loop: their rate is read in time (GB/s an SM,
#: the blocks' spans in %globaltimer ns, KernelSpec.timer), since per SM cycle it moves with the SM's clock
#: against the L2's. H100 GPU-0508e7f9 (driver 580.159.04, CUDA 13.0, 2026-11-26), four processes: the one whose
#: session SM clock read 1995.0 MHz (the others 1979.7-1980.0) read the 4 KiB box 1.6 % and the 16 KiB box 1.1 %
#: fewer B/clk at one and two blocks an SM (MOVED on all four against the unit's baseline) and the 1 KiB box's
#: 22.82-22.84 B/clk unchanged; GPU-e369c733's processes, 1943.5-1978.6 MHz, moved 1.2 % (2026-11-26)
TMA_STREAM_L2_BOUND = (4096, 16384)
#: blocks per SM -> dynamic shared memory per block that lets that many on an SM and no more (228 KiB an SM,
#: 1 KiB reserved per block on sm_90): 120 KiB, more than half; 100 KiB, two fit and three do not
TMA_STREAM_SHARED = {1: 120 * 1024, 2: 100 * 1024}
#: bytes every block copies in a launch (TMA_STREAM_ISSUERS warps, a quarter each)
TMA_STREAM_BYTES = 8 * 1024 * 1024
#: SMs of the sm_90 GPUs measured (H100 SXM5 and H200): the grid the static checks and the docs show
SM90_SMS = 132
TMA_STREAM_OPCODES = ("SYNCS.ARRIVE.TRANS64", "UTMALDG.2D", "SYNCS.PHASECHK.TRANS64.TRYWAIT")


def sm_count() -> int:
    """The SMs of the GPU the runner measures on (cupy's current device, set by measure.Runner); without
    cupy (the static checks, for which the grid is no part of the build) :data:`SM90_SMS`."""
    try:
        import cupy
    except ImportError:
        return SM90_SMS
    try:
        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    except cupy.cuda.runtime.CUDARuntimeError:  # cupy without a GPU: as without cupy
        return SM90_SMS


def tma_stream_shape(box_bytes: int) -> dict:
    """What :func:`tma_stream` copies for ``box_bytes``: the box (innermost first), the issuing warps a
    block, the stages a warp (one box each: ``stage_bytes``), each warp's loop trips and ring, and the
    block's ring (all its warps')."""
    if box_bytes not in TMA_STREAM_BOXES:
        raise ValueError(f"TMA stream box of {box_bytes} bytes: expected one of {sorted(TMA_STREAM_BOXES)}")
    rows, stages = TMA_STREAM_BOXES[box_bytes]
    if TMA_STREAM_WIDTH * 4 * rows != box_bytes:
        raise ValueError(f"TMA stream box {box_bytes}: {rows} rows of {TMA_STREAM_WIDTH} fp32 are not that many bytes")
    per_warp = TMA_STREAM_BYTES // TMA_STREAM_ISSUERS
    if per_warp % (box_bytes * stages):
        raise ValueError(f"TMA stream box {box_bytes}: a warp's {per_warp} bytes are not whole rounds of its "
                         f"{stages} stages")
    return {"box": (TMA_STREAM_WIDTH, rows), "issuers": TMA_STREAM_ISSUERS, "stages": stages,
            "stage_bytes": box_bytes, "trips": per_warp // box_bytes, "warp_ring_bytes": box_bytes * stages,
            "ring_bytes": box_bytes * stages * TMA_STREAM_ISSUERS}


def tma_stream_waited_bytes(box_bytes: int) -> int:
    """Bytes one block's timed regions wait for: each warp's copies of its first trips - stages + 1 trips
    (the last wait in its region is for the stage the next trip would refill; the later stages are waited
    for after the stop read), times the warps."""
    sh = tma_stream_shape(box_bytes)
    return (sh["trips"] - sh["stages"] + 1) * sh["stage_bytes"] * sh["issuers"]


#: how the warps of the TMA stream walk the tensor's boxes (one box a warp, as many boxes as warps):
#: ``own``: every trip the warp's own box again; ``convoy``: the next box each trip (warp k + 1 a trip behind
#: warp k on the same box); ``scatter``: each warp its own stride through every box, coprime with their number
TMA_STREAM_WALKS = ("own", "convoy", "scatter")


def _scatter_stride(k: int, boxes: int) -> int:
    """Warp ``k``'s stride in boxes: spread by a Fibonacci hash, moved on to the next coprime with ``boxes``
    (so the walk visits every box once a round), in 1 .. boxes - 1."""
    import math
    s = 1 + (k * 40503) % (boxes - 1)
    while math.gcd(s, boxes) != 1:
        s = 1 + s % (boxes - 1)
    return s


def tma_stream_walks(grid: int, box_bytes: int, walk: str = "scatter") -> tuple[list[int], int]:
    """Each warp's first row and its step in rows (``walks[2k]``, ``walks[2k + 1]`` for warp k = b x issuers
    + w), and the tensor's rows: one box a warp, warp k starting at the k-th, walking as ``walk`` says
    (TMA_STREAM_WALKS)."""
    if walk not in TMA_STREAM_WALKS:
        raise ValueError(f"TMA stream walk {walk!r}: expected one of {TMA_STREAM_WALKS}")
    sh = tma_stream_shape(box_bytes)
    rows, boxes = sh["box"][1], grid * sh["issuers"]
    if boxes < 2:
        raise ValueError(f"TMA stream of {boxes} warp(s): a walk needs two boxes or more")
    out = []
    for k in range(boxes):
        step = {"own": 0, "convoy": 1, "scatter": _scatter_stride(k, boxes)}[walk]
        out += [k * rows, step * rows]
    return out, boxes * rows


def tma_stream(box_bytes: int, blocks_per_sm: int, walk: str = "scatter", *, timer: bool = False) -> KernelSpec:
    """``blocks_per_sm`` blocks of TMA_STREAM_ISSUERS warps on every SM (:func:`sm_count`; the dynamic shared
    memory lets no more on one, and the largest carve-out, 228 KiB of shared memory, lets that many), each
    warp streaming ``box_bytes`` boxes of an fp32 tensor (TMA_STREAM_WIDTH wide, one column of boxes, all of
    them in L2) through its ring; ``timer``: each warp's %globaltimer span recorded too (TIMER=1)."""
    import numpy as np
    sh = tma_stream_shape(box_bytes)
    if blocks_per_sm not in TMA_STREAM_SHARED:
        raise ValueError(f"TMA stream: {blocks_per_sm} blocks per SM; expected one of {sorted(TMA_STREAM_SHARED)}")
    shared = TMA_STREAM_SHARED[blocks_per_sm]
    if sh["ring_bytes"] > shared:
        raise ValueError(f"TMA stream box {box_bytes}: a ring of {sh['ring_bytes']} bytes does not fit {shared}")
    grid = sm_count() * blocks_per_sm

    walks, tensor_rows = tma_stream_walks(grid, box_bytes, walk)

    def args(cp):  # pragma: no cover  (GPU only: the tensor map)
        tm = tensor_map(cp, (TMA_STREAM_WIDTH, tensor_rows), sh["box"])
        return (tm, cp.asarray(walks, dtype=cp.uint32), np.uint32(sh["stage_bytes"]), np.int32(sh["trips"]),
                np.uint32(tensor_rows), cp.zeros(64, dtype=cp.uint32))
    defines = {"STAGES": sh["stages"], "ISSUERS": sh["issuers"], **({"TIMER": 1} if timer else {})}
    return KernelSpec("tma_load.cu", "tma_stream", defines, grid=grid,
                      block=32 * sh["issuers"], shared_mem=shared, carveout=100, args=args)


def tensor_map_request(address: int, shape: tuple[int, ...], box: tuple[int, ...], elem_bytes: int = 4) -> dict:
    """cuTensorMapEncodeTiled's arguments (the enums aside) for a dense row-major tensor of
    ``shape`` (innermost dimension first) at ``address``, copying ``box``; refuses what the driver
    would (CUDA driver API, cuTensorMapEncodeTiled)."""
    rank = len(shape)
    if not 1 <= rank <= 5 or len(box) != rank:
        raise ValueError(f"shape {shape} and box {box}: rank 1..5, one box size per dimension")
    if address % 16:
        raise ValueError(f"global address {address:#x} is not 16-byte aligned")
    if any(not 1 <= b <= 256 for b in box) or any(b > s for b, s in zip(box, shape)):
        raise ValueError(f"box {box}: each size 1..256 and within the tensor {shape}")
    if box[0] * elem_bytes % 16:
        raise ValueError(f"the box's inner extent, {box[0] * elem_bytes} bytes, is not a multiple of 16")
    strides, stride = [], shape[0] * elem_bytes
    for s in shape[1:]:
        if stride % 16:
            raise ValueError(f"global stride {stride} bytes is not a multiple of 16")
        strides.append(stride)
        stride *= s
    return {"tensorRank": rank, "globalAddress": address, "globalDim": list(shape), "globalStrides": strides,
            "boxDim": list(box), "elementStrides": [1] * rank}


def stride_argument(req: dict) -> list[int]:
    """The globalStrides array to pass: the rank - 1 strides, or for a rank-1 tensor one unread
    placeholder (the tensor's size in bytes). An empty list reaches the driver as a null pointer, which
    drivers since early 2024 refuse with CUDA_ERROR_INVALID_VALUE even where no stride is read (NVIDIA/cccl
    pull request 1567 works round the same change); the driver reads only rank - 1 entries."""
    if req["globalStrides"]:
        return list(req["globalStrides"])
    return [req["globalDim"][0] * 4]


def tensor_map_bytes(words) -> bytes:
    """The 128 bytes of a CUtensorMap from its 16 opaque 64-bit words (cuda-python's ``.opaque``)."""
    words = [int(w) for w in words]
    if len(words) != 16:
        raise ValueError(f"a CUtensorMap is 16 64-bit words, not {len(words)}")
    return struct.pack("<16Q", *words)


def tensor_map(cp, shape: tuple[int, ...], box: tuple[int, ...],
               line: int | None = None) -> TensorMapArg:  # pragma: no cover  (GPU only)
    """A zeroed fp32 tensor of ``shape`` on the GPU (at line ``line`` of memory_levels.l2_line_offsets()
    where given) and its tiled tensor map (no swizzle, no interleave, 128-byte L2 promotion), as the
    kernel's by-value parameter."""
    from pytest_gpuprops.driver_launch import cuda_driver, driver_error
    d = cuda_driver()
    n = 1
    for s in shape:
        n *= s
    tensor = cp.zeros(n, dtype=cp.float32) if line is None else line_by_line(cp, line)[:n].view(cp.float32)
    req = tensor_map_request(int(tensor.data.ptr), shape, box)
    u32, u64 = d.cuuint32_t, d.cuuint64_t
    err, tmap = d.cuTensorMapEncodeTiled(
        d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, u32(req["tensorRank"]), req["globalAddress"],
        [u64(x) for x in req["globalDim"]], [u64(x) for x in stride_argument(req)],
        [u32(x) for x in req["boxDim"]], [u32(x) for x in req["elementStrides"]],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if int(err) != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled refused shape {shape} box {box}: {driver_error(d, err)}")
    arg = TensorMapArg(tensor_map_bytes(tmap.opaque))
    arg.tensor = tensor
    return arg


# ----------------------------------------------------------------------------------------------
# the facts

#: facts that move with the memory system and the clocks of the GPU model (H100 and H200 differ): the
#: L2 reads (.cg, bulk and TMA copies), a release fence that waits for memory, and the TMA stores
#: (their writes reach L2; the visible store is polled in L2)
GPU = "gpu"
#: the L2 copies' statistic: the .cg copy (one line per warp) as the lowest tier's median, as the global
#: atomics; the bulk and tensor copies (8 to 32 lines each, so each waits for its slowest slice: one
#: tier) as the median over lines (memory_levels.near_tier_latency)
LOWEST_TIER = Statistic(lines="near_tier")
OVER_LINES = Statistic(lines="all_lines")


def _mbarrier_facts() -> list[FactSpec]:
    return [FactSpec(
        MBARRIER_FACT[wait], lambda wait=wait: mbarrier(wait), Region(MBARRIER_UNIT, WAIT_LOOP),
        method=f"one warp: mbarrier.arrive on a shared mbarrier expecting 32 arrivals (the warp's "
               f"completes the phase), then {what} in a loop until true; cycles "
               "from the arrive's issue to the wait's return (SYNCS.ARRIVE.TRANS64.A1T0 -> "
               "SYNCS.PHASECHK.TRANS64.TRYWAIT), pass 2 of 2 timed, a fresh barrier per pass")
        for wait, (_, what) in sorted(MBARRIER_WAITS.items())]


def _cp_async_facts() -> list[FactSpec]:
    out = []
    for variant, (cg, size, opcode, hit) in sorted(CP_ASYNC.items()):
        l2 = variant in L2_COPIES
        per_warp = "lane l at 16 (l mod 8): one 128-byte line per warp" if cg else f"{32 * size} contiguous bytes per warp"
        out.append(FactSpec(
            f"cp_async_{variant}_latency_cycles",
            (lambda line, v=variant: cp_async(v, line)) if l2 else (lambda v=variant: cp_async(v)),
            Region((opcode, "LDGDEPBAR", "DEPBAR.LE")), scope=GPU if l2 else "arch",
            statistic=LOWEST_TIER if l2 else Statistic(), reserve=L2_LINES_RESERVE if l2 else None,
            method=f"one warp, one cp.async.{'cg' if cg else 'ca'} of {size} bytes per lane ({opcode}; "
                   f"{per_warp}) global -> shared, then commit_group + "
                   f"wait_group 0 (LDGDEPBAR, DEPBAR.LE SB0, 0x0); the source warmed by pass 1, so pass "
                   f"2 (timed) reads {hit}{f'; {NEAR_TIER_TEXT}' if l2 else ''}"))
    return out


def _dsmem_plot(cluster):
    return lambda m: ("dsmem_latency", {"cluster": cluster, "cycles": m.median})


def _cluster_facts() -> list[FactSpec]:
    chase = Region(("LD.E.64",), steps="UNROLL")
    out = [FactSpec(
        f"dsmem_latency_cluster{k}_cycles", lambda k=k: dsmem_chase(k, 1), chase, plot=_dsmem_plot(k),
        statistic=Statistic(mode="warp_mean"),
        method=f"a CTA of one warp on every SM, in clusters of {k} (SMs // {k} clusters); every CTA chases "
               f"{DSMEM_UNROLL} dependent 8-byte generic loads (LD.E.64) through the shared memory of the next "
               "rank (mapa addresses; 16 distinct words per hop); cycles per hop, the mean over the CTAs (every "
               "SM pair the clusters form: pair latencies sit on levels between 176 and 212 cycles, where a median "
               "jumps a level with a few pairs), pass 2 of 2 timed")
        for k in CLUSTER_SIZES]
    out.append(FactSpec(
        "dsmem_self_latency_cycles", lambda: dsmem_chase(2, 0), chase, plot=_dsmem_plot(None),
        method=f"as dsmem_latency_cluster2_cycles, every CTA chasing its own shared memory through "
               f"the same generic loads (LD.E.64 of its mapa addresses), {DSMEM_UNROLL} hops; cycles "
               "per hop"))
    nbytes = dsmem_bytes_per_block()
    for store in (False, True):
        op = "stores" if store else "loads"
        out.append(FactSpec(
            f"dsmem_{'store' if store else 'load'}_bytes_per_cycle", lambda store=store: dsmem_bandwidth(store),
            Region((DSMEM_BW_OPCODE[store],), LOOP, steps="UNROLL"), divisor=1,
            statistic=Statistic(mode="block_span"), unit="B/clk", transform=lambda cycles: nbytes / cycles,
            method=f"one cluster of {DSMEM_BW_CLUSTER} CTAs of 1024 threads on two SMs, each CTA {op} 16 bytes per "
                   f"thread per instruction ({DSMEM_BW_OPCODE[store]}, volatile) to its neighbour's "
                   f"shared memory, {DSMEM_BW_UNROLL} x {DSMEM_BW_ITERS} per thread; bytes per cycle "
                   "of one CTA's span on its SM's clock, median over the CTAs"
                   + ("; stores still in flight at the stop read are not waited for" if store else "")))
    out += _dsmem_sweep_facts()
    out += [FactSpec(
        f"cluster_barrier_cluster{k}_cycles", lambda k=k: cluster_barrier(k),
        Region(CLUSTER_BARRIER_STEP[True], steps="UNROLL"),
        method=f"a CTA of one warp on every SM, in clusters of {k} (SMs // {k} clusters), "
               f"{CLUSTER_BARRIER_UNROLL} x barrier.cluster.arrive.relaxed.aligned + "
               "barrier.cluster.wait.aligned (UCGABAR_ARV, UCGABAR_WAIT, CCTL.IVALL); cycles per barrier, "
               "median over CTAs, pass 2 of 2 timed")
        for k in CLUSTER_SIZES]
    out.append(FactSpec(
        "cluster_barrier_release_cluster2_cycles", lambda: cluster_barrier(2, relaxed=False),
        Region(CLUSTER_BARRIER_STEP[False], steps="UNROLL"), scope=GPU,
        method=f"as cluster_barrier_cluster2_cycles (a CTA of one warp on every SM, in clusters of 2) with the default "
               f"(release) arrive, "
               f"{CLUSTER_BARRIER_UNROLL} x barrier.cluster.arrive.aligned + barrier.cluster.wait."
               "aligned (MEMBAR.ALL.GPU, ERRBAR, CGAERRBAR, UCGABAR_ARV, UCGABAR_WAIT, CCTL.IVALL): "
               "cluster.sync() with nothing to release; cycles per barrier"))
    return out


def _dsmem_sweep_plot(store: bool, cluster: int):
    return lambda m: (f"dsmem_{'store' if store else 'load'}_bandwidth", {"cluster": cluster, "bytes_per_cycle": m.median})


def _dsmem_sweep_facts() -> list[FactSpec]:
    """DSMEM throughput against cluster size: :data:`CLUSTER_LAUNCH_CTAS` 1024-thread CTAs in clusters of
    each size of :data:`CLUSTER_SIZES`, every CTA loading (storing) its neighbour's shared memory at once."""
    nbytes = dsmem_bytes_per_block()
    out = []
    for store in (False, True):
        op = "stores" if store else "loads"
        kind = "store" if store else "load"
        for k in CLUSTER_SIZES:
            out.append(FactSpec(
                f"dsmem_{kind}_bytes_per_cycle_cluster{k}",
                lambda store=store, k=k: dsmem_bandwidth(store, k, CLUSTER_LAUNCH_CTAS),
                Region((DSMEM_BW_OPCODE[store],), LOOP, steps="UNROLL"), divisor=1,
                statistic=Statistic(mode="block_span"), unit="B/clk", transform=lambda cycles: nbytes / cycles,
                plot=_dsmem_sweep_plot(store, k),
                method=f"{CLUSTER_LAUNCH_CTAS // k} clusters of {k} CTAs of 1024 threads, one CTA per SM, all at "
                       f"once; each CTA {op} 16 bytes per thread per instruction ({DSMEM_BW_OPCODE[store]}, "
                       f"volatile) to the shared memory of the next rank of its cluster, {DSMEM_BW_UNROLL} x "
                       f"{DSMEM_BW_ITERS} per thread ({nbytes} bytes per CTA); bytes per cycle of one CTA's span "
                       f"on its SM's clock, median over the {CLUSTER_LAUNCH_CTAS} CTAs"
                       + ("; stores still in flight at the stop read are not waited for" if store else "")))
    return out


def _bulk_facts() -> list[FactSpec]:
    out = [FactSpec(
        f"cp_async_bulk_{KIB[n]}_latency_cycles", lambda line, n=n: bulk_copy(n, line),
        Region((BULK_ARM, BULK_COPIES["bulk"], BULK_WAIT), ELECTED_COPY), scope=GPU, statistic=OVER_LINES, reserve=L2_LINES_RESERVE,
        method=f"one warp; lane 0 arms a fresh mbarrier with mbarrier.arrive.expect_tx {n} and "
               f"issues cp.async.bulk of {n} contiguous bytes global -> shared (UBLKCP.S.G, in "
               "ptxas's one-trip ELECT loop), then the warp's try_wait.parity loop until true; the "
               f"source in L2 from pass 1, pass 2 timed; {ALL_LINES_TEXT}")
        for n in BULK_BYTES]
    for dim in sorted(TMA_SHAPES):
        shape, box = TMA_SHAPES[dim]
        opcode = BULK_COPIES[f"tma_{dim}d"]
        out.append(FactSpec(
            f"tma_{dim}d_{KIB[tma_bytes(dim)]}_latency_cycles", lambda line, dim=dim: tma_tensor(dim, line),
            Region((BULK_ARM, opcode, BULK_WAIT), ELECTED_COPY), scope=GPU, statistic=OVER_LINES, reserve=L2_LINES_RESERVE,
            method=f"as the bulk copy, with cp.async.bulk.tensor.{dim}d.tile ({opcode}) of the {box} box "
                   f"at the origin of an fp32 tensor {shape} (innermost first; {tma_bytes(dim)} bytes; "
                   "tensor map from cuTensorMapEncodeTiled, no swizzle, passed as a __grid_constant__ "
                   "parameter), the tensor starting at each line in turn"))
    shape, box = TMA_SHAPES[TMA_STORE_DIM]
    store = (f"one warp; lane 0 issues cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (UTMASTG.2D) of the "
             f"{box} box of an fp32 tensor {shape} from shared memory (written and fenced for the async proxy "
             "before the start read) to the tensor's origin and cp.async.bulk.commit_group (UTMACMDFLUSH)")
    out.append(FactSpec(
        "tma_2d_store_4k_source_read_cycles", tma_store, Region(TMA_STORE_WAIT_UNIT, LANE0_BULK_GROUP), scope=GPU,
        method=f"{store}, then cp.async.bulk.wait_group.read 0 (DEPBAR.LE SB0, 0x0 on the commit's read "
               "scoreboard); cycles of lane 0 from the issue to the wait's return, pass 2 of 2 timed (the lines "
               "in L2); wait_group 0 (the writes done, as PTX names it) compiles to this same DEPBAR.LE, "
               "CCTL.IVALL after it (NVRTC 13.5, sm_90): one event; the writes seen in L2 are "
               "tma_2d_store_4k_visible_cycles"))
    out.append(FactSpec(
        "tma_2d_store_4k_visible_cycles", lambda: tma_store(visible=True), Region(TMA_STORE_POLL_UNIT, LANE0_STORE_POLL),
        scope=GPU,
        method=f"{TMA_STORE_VISIBLE_BLOCKS} blocks of one warp, on SMs of their own, one at a time (a turn counter), "
               f"block b's lane 0 issuing cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (UTMASTG.2D) of the "
               f"{box} box from shared memory (written and fenced for the async proxy before the start read) to rows "
               f"32 b .. 32 b + 31 of an fp32 tensor ({shape[0]}, {box[1] * TMA_STORE_VISIBLE_BLOCKS}) and "
               "cp.async.bulk.commit_group (UTMACMDFLUSH), each pass its own values, no wait; every lane r polls the "
               "last word of its box's row r with ld.relaxed.gpu (LDG.E.STRONG.GPU: L2, not L1) until all 32 lanes "
               "read the timed pass's values (VOTE.ALL); cycles from the issue to the vote, pass 2 of 2 timed (the "
               "lines in L2 from pass 1), median over the blocks (every box's own L2 slices and SM); "
               "each poll waits for the one before (one L2 round trip), so the region ends between half and one "
               "and a half round trips after the last row is in L2; the stop read, waiting on every scoreboard, "
               "also waits for the commit's source read (tma_2d_store_4k_source_read_cycles)"))
    return out


def _tma_stream_plot(box: int, blocks: int, key: str):
    return lambda m: ("tma_2d_load_bandwidth", {"box_bytes": box, "blocks_per_sm": blocks, key: m.median})


def tma_stream_fact_name(box: int, blocks: int) -> str:
    """The TMA stream fact of ``box`` bytes at ``blocks`` blocks an SM: GB/s an SM where the L2 bounds it
    (TMA_STREAM_L2_BOUND), B/clk where the issuing loop does."""
    rate = "gbps_per_sm" if box in TMA_STREAM_L2_BOUND else "bytes_per_cycle"
    return f"tma_2d_load_{rate}_box{KIB_NAME[box]}_blocks{blocks}"


def _tma_stream_facts() -> list[FactSpec]:
    """TMA throughput from L2 against the box size and the blocks per SM, on every SM at once."""
    out = []
    for box in sorted(TMA_STREAM_BOXES):
        sh = tma_stream_shape(box)
        waited = tma_stream_waited_bytes(box)
        stages = f"{sh['stages']} mbarrier stage{'s' if sh['stages'] > 1 else ''}"
        in_time = box in TMA_STREAM_L2_BOUND
        for b in (b for b in TMA_STREAM_BLOCKS_PER_SM if (box, b) not in TMA_STREAM_NOT_FACTS):
            if in_time:  # bytes per ns = GB/s, an SM
                rate = dict(statistic=Statistic(mode="block_span_ns"), unit="GB/s/SM",
                            transform=lambda ns, waited=waited, b=b: waited * b / ns,
                            plot=_tma_stream_plot(box, b, "gbps_per_sm"))
                per = ("per nanosecond of the block's span (its warps' first start to last stop, %globaltimer read "
                       "beside the clock reads: the L2 bounds this box's stream, so its rate per SM cycle moves with "
                       "the SM's clock against the L2's)")
            else:
                rate = dict(statistic=Statistic(mode="block_span"), unit="B/clk",
                            transform=lambda cycles, waited=waited, b=b: waited * b / cycles,
                            plot=_tma_stream_plot(box, b, "bytes_per_cycle"))
                per = "per cycle of the block's span (its warps' first start to last stop) on its SM's clock"
            out.append(FactSpec(
                tma_stream_fact_name(box, b), lambda box=box, b=b, t=in_time: tma_stream(box, b, timer=t),
                Region(TMA_STREAM_OPCODES, COPY_RING), scope=GPU, divisor=1, **rate,
                method=f"{b} block{'s' if b > 1 else ''} of {sh['issuers']} warps on every SM at once "
                       f"({TMA_STREAM_SHARED[b] // 1024} KiB of dynamic shared memory each: no more fit); each warp "
                       f"streams {sh['box']} fp32 boxes ({box} bytes; innermost first) of a {TMA_STREAM_WIDTH}-wide "
                       f"tensor in L2 with cp.async.bulk.tensor.2d (UTMALDG.2D) through a ring of its own of "
                       f"{stages}, one box each ({sh['ring_bytes'] // 1024} KiB in flight a block): each trip the "
                       f"lane elect.sync picks arms its stage (arrive.expect_tx) and issues its copy, straight "
                       f"line (no ELECT loop, vote or branch round them), then the warp's try_wait for the stage "
                       f"the next trip refills; {sh['trips']} trips a warp; as many boxes as warps, warp k starting "
                       f"at the k-th and walking every box on a stride of its own, coprime with their number "
                       f"(L2 hits after the first round: TMA does not fill L1); the bytes waited for in the "
                       f"regions ({waited} per block) {per}, median over blocks, x {b} blocks per SM"))
    return out


#: every fact of the asynchronous units, declared once
FACTS: list[FactSpec] = [*_mbarrier_facts(), *_cp_async_facts(), *_cluster_facts(), *_bulk_facts(), *_tma_stream_facts()]
