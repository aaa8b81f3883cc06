"""Launch shapes of the sm_90 asynchronous units: the mbarrier round trip (kernels/mbarrier_roundtrip.cu),
cp.async / LDGSTS (kernels/cp_async_latency.cu), thread-block clusters and distributed shared memory
(kernels/cluster_dsmem.cu) and the bulk / tensor (TMA) copies (kernels/tma_load.cu). Shared by
test_async_units.py and its static checks (test_static_async_units.py, which checks every build of
:func:`builds` on sm_90).

An asynchronous unit completes through an mbarrier or an async-copy group, not a register
scoreboard: each timed region ends when the wait returns (try_wait's loop, wait_group's DEPBAR), and
the stop clock read, patched to wait on every scoreboard, adds nothing to that. The opcodes are what
NVRTC 13.5 emits for sm_90.

The cluster kernels are compiled with ``__cluster_dims__()`` and launched with the cluster size as a
launch attribute (KernelSpec.cluster, measure.launch_config), so one build serves every size; the
runner allows the non-portable size 16 on the function before it launches it."""

import struct

from memory_levels import line_by_line

from pytest_gpuprops.measure import PORTABLE_CLUSTER_SIZE, KernelSpec

ARCH = "sm_90"

# ----------------------------------------------------------------------------------------------
# mbarrier

#: wait -> (kernels/mbarrier_roundtrip.cu TOKEN, what the wait is)
MBARRIER_WAITS = {
    "parity": (0, "mbarrier.try_wait.parity on the phase's parity"),
    "token": (1, "mbarrier.try_wait on the state token the arrive returned"),
}
#: one round trip: arrive, then the try_wait loop (BSSY, the branch back, BSYNC; the retry path is
#: out of line, after EXIT)
MBARRIER_REGION = {"SYNCS.ARRIVE.TRANS64.A1T0": 1, "SYNCS.PHASECHK.TRANS64.TRYWAIT": 1, "BRA": 1, "BSSY": 1,
                   "BSYNC": 1}


def mbarrier(wait: str) -> KernelSpec:
    token, _ = MBARRIER_WAITS[wait]
    return KernelSpec("mbarrier_roundtrip.cu", "mbarrier_roundtrip", {"TOKEN": token, "PASSES": 2}, grid=1,
                      block=32, args=lambda cp: (cp.zeros(64, dtype=cp.uint32),), region=dict(MBARRIER_REGION))


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
    cg, size, opcode, _ = CP_ASYNC[variant]
    if (line is None) == (variant in L2_COPIES):
        raise ValueError(f"cp.async {variant}: a line is given for the L2 copies {sorted(L2_COPIES)} only, and they need one")
    return KernelSpec("cp_async_latency.cu", "cp_async_latency", {"CG": cg, "SIZE": size, "PASSES": 2}, grid=1,
                      block=32, args=lambda cp: (cp.zeros(4096, dtype=cp.uint32) if line is None else line_by_line(cp, line),
                                                 cp.zeros(64, dtype=cp.uint32)),
                      region={opcode: 1, "LDGDEPBAR": 1, "DEPBAR.LE": 1})


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
DSMEM_BW_LOOP = 7  # the trip counter's init, increment and compare, the branch back, YIELD, BSSY and BSYNC
#: store -> the access's SASS
DSMEM_BW_OPCODE = {False: "LD.E.128.STRONG.SYS", True: "ST.E.128.STRONG.SYS"}
CLUSTER_BARRIER_UNROLL = 16
#: relaxed -> the SASS of one barrier.cluster.arrive + barrier.cluster.wait
CLUSTER_BARRIER_STEP = {
    True: ("UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"),
    False: ("MEMBAR.ALL.GPU", "ERRBAR", "CGAERRBAR", "UCGABAR_ARV", "UCGABAR_WAIT", "CCTL.IVALL"),
}


#: CTAs of a DSMEM chase or cluster barrier launch: 64 // k clusters of k. One cluster's latency
#: depends on the SM pair it lands on (cluster of 2, one per run: 186.469, 186.844, 187.453, 188.06
#: cycles per hop on H100 and H200 units, 2026-11-24/25, each steady within its run); the median over
#: 64 CTAs on many SM pairs is the GPU's, not the pair's.
CLUSTER_LAUNCH_CTAS = 64


def dsmem_chase(cluster: int, hop: int) -> KernelSpec:
    """CLUSTER_LAUNCH_CTAS // ``cluster`` clusters of ``cluster`` CTAs, one warp each, every CTA chasing
    through the CTA ``hop`` ranks on in its cluster (0: its own shared memory, 1: its neighbour's). The
    same build for every size and hop."""
    import numpy as np
    return KernelSpec("cluster_dsmem.cu", "dsmem_chase", {"UNROLL": DSMEM_UNROLL, "PASSES": 2},
                      grid=CLUSTER_LAUNCH_CTAS, block=32, cluster=cluster, shared_mem=CLUSTER_SHARED_MEM,
                      args=lambda cp: (cp.zeros(32 * CLUSTER_LAUNCH_CTAS, dtype=cp.uint32), np.uint32(hop)),
                      region={"LD.E.64": DSMEM_UNROLL})


def dsmem_bandwidth(store: bool) -> KernelSpec:
    import numpy as np
    block = 1024
    return KernelSpec("cluster_dsmem.cu", "dsmem_bandwidth", {"UNROLL": DSMEM_BW_UNROLL, "STORE": int(store)},
                      grid=DSMEM_BW_CLUSTER, block=block, cluster=DSMEM_BW_CLUSTER, shared_mem=CLUSTER_SHARED_MEM,
                      args=lambda cp: (cp.zeros(block * DSMEM_BW_CLUSTER, dtype=cp.uint32),
                                       np.int32(DSMEM_BW_ITERS)),
                      region={DSMEM_BW_OPCODE[store]: DSMEM_BW_UNROLL}, region_other=DSMEM_BW_LOOP)


def dsmem_bytes_per_block() -> int:
    """Bytes one CTA of :func:`dsmem_bandwidth` moves to or from its neighbour in the timed region."""
    return 1024 * 16 * DSMEM_BW_UNROLL * DSMEM_BW_ITERS


def cluster_barrier(cluster: int, relaxed: bool = True) -> KernelSpec:
    """CLUSTER_LAUNCH_CTAS // ``cluster`` clusters of ``cluster`` CTAs, each running its barriers: one
    cluster's barrier depends on where its CTAs land (a cluster of 2, one per run: 45.938 cycles on one
    H100, 58.938 on three other units, 2026-11-24/25), so the median over many clusters is taken."""
    step = CLUSTER_BARRIER_STEP[relaxed]
    return KernelSpec("cluster_dsmem.cu", "cluster_barrier",
                      {"UNROLL": CLUSTER_BARRIER_UNROLL, "PASSES": 2, "RELAXED": int(relaxed)}, grid=CLUSTER_LAUNCH_CTAS,
                      block=32, cluster=cluster, shared_mem=CLUSTER_SHARED_MEM,
                      region={op: CLUSTER_BARRIER_UNROLL for op in step})


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
#: the region of one copy by one thread: lane 0 arms the barrier (SYNCS.ARRIVE.TRANS64) and issues
#: the copy inside ptxas's ELECT loop (ELECT, BRA.U.ANY: one trip), the other lanes branch round it;
#: then every lane's try_wait loop. Beside them, uniform-register set-up of the copy's operands and
#: predicates, the wait's parity register and the BSYNC of the branch round the copy.
BULK_REGION = {"SYNCS.ARRIVE.TRANS64": 1, "ELECT": 1, "BRA.U.ANY": 1, "BRA": 2,
               "SYNCS.PHASECHK.TRANS64.TRYWAIT": 1}
#: copy -> (the copy's SASS, other instructions beside BULK_REGION)
BULK_COPIES = {"bulk": ("UBLKCP.S.G", 8), "tma_1d": ("UTMALDG.1D", 8), "tma_2d": ("UTMALDG.2D", 9)}


def bulk_copy(nbytes: int, line: int = 0) -> KernelSpec:
    """cp.async.bulk of ``nbytes`` from line ``line`` of memory_levels.l2_line_offsets() (the size and
    the source are runtime arguments: one build for every size and line)."""
    import numpy as np
    opcode, other = BULK_COPIES["bulk"]
    return KernelSpec("tma_load.cu", "bulk_copy", {"PASSES": 2}, grid=1, block=32,
                      args=lambda cp: (line_by_line(cp, line), np.uint32(nbytes), cp.zeros(64, dtype=cp.uint32)),
                      region={**BULK_REGION, opcode: 1}, region_other=other)


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
    opcode, other = BULK_COPIES[f"tma_{dim}d"]
    shape, box = TMA_SHAPES[dim]
    return KernelSpec("tma_load.cu", "tma_tensor", {"PASSES": 2, "DIM": dim}, grid=1, block=32,
                      args=lambda cp: (tensor_map(cp, shape, box, line), np.uint32(tma_bytes(dim)),
                                       cp.zeros(64, dtype=cp.uint32)),
                      region={**BULK_REGION, opcode: 1}, region_other=other)


class TensorMapArg(bytes):
    """A CUtensorMap's 128 bytes, passed by value (measure.kernel_params), holding the device array
    it describes so that the array lives as long as the launch arguments."""

    tensor = None


#: TMA stores (cp.async.bulk.tensor.2d.global.shared::cta.bulk_group), by wait: (the PTX wait, the SASS
#: beside the store). Lane 0 alone stores, commits and waits, the other lanes branch round it (BRA,
#: BSYNC); ptxas sets up the store's uniform operands in the region (4 instructions: UIADD3, 2 UMOV,
#: UIADD3.X). Waiting for the writes (wait_group 0) invalidates L1 after the DEPBAR (CCTL.IVALL) so
#: that later loads see them; waiting for the source read (wait_group.read 0) does not.
TMA_STORE_WAITS = {
    "written": ("cp.async.bulk.wait_group 0", {"UTMASTG.2D": 1, "UTMACMDFLUSH": 1, "DEPBAR.LE": 1, "CCTL.IVALL": 1,
                                              "BRA": 1, "BSYNC": 1}),
    "source_read": ("cp.async.bulk.wait_group.read 0", {"UTMASTG.2D": 1, "UTMACMDFLUSH": 1, "DEPBAR.LE": 1,
                                                        "BRA": 1, "BSYNC": 1}),
}
TMA_STORE_DIM = 2


def tma_store(wait: str) -> KernelSpec:
    """A TMA store of the TMA_SHAPES[2] box from shared memory to the origin of an fp32 tensor, timed
    until ``wait`` (TMA_STORE_WAITS) returns."""
    import numpy as np  # noqa: F401  (the args build CuPy arrays only)
    _, region = TMA_STORE_WAITS[wait]
    shape, box = TMA_SHAPES[TMA_STORE_DIM]
    return KernelSpec("tma_load.cu", "tma_store", {"PASSES": 2, "DIM": TMA_STORE_DIM,
                                                   "WAIT_READ": int(wait == "source_read")}, grid=1, block=32,
                      args=lambda cp: (tensor_map(cp, shape, box), cp.zeros(64, dtype=cp.uint32)),
                      region=dict(region), region_other=4)


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
    from pytest_gpuprops.measure import cuda_driver, driver_error
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


def builds() -> dict[str, KernelSpec]:
    """Every build the GPU tests launch, by id (launch-only differences aside: the cluster size, the
    chase's hop, the bulk copy's size and the L2 line of the L2 copies are arguments of one build)."""
    out = {f"mbarrier_{w}": mbarrier(w) for w in MBARRIER_WAITS}
    out.update({f"cp_async_{v}": cp_async(v, 0 if v in L2_COPIES else None) for v in CP_ASYNC})
    out["dsmem_chase"] = dsmem_chase(2, 1)
    out.update({f"dsmem_{'store' if st else 'load'}_bandwidth": dsmem_bandwidth(st) for st in (False, True)})
    out.update({f"cluster_barrier_{'relaxed' if r else 'release'}": cluster_barrier(2, r) for r in (True, False)})
    out["bulk_copy"] = bulk_copy(BULK_BYTES[0])
    out.update({f"tma_{d}d": tma_tensor(d) for d in TMA_SHAPES})
    out.update({f"tma_store_{w}": tma_store(w) for w in TMA_STORE_WAITS})
    return out
