#!/usr/bin/env python3
"""Where does the L2 read rate's process-to-process term come from? One process measures the
64-window mean (tp.measure_placed_rate, as test_memory_bandwidth[l2_read] does) in REGIONS separate
allocations, each twice, and prints each with the SM clock. If the regions differ as much as
processes do (2-3 %), the term is the allocation's physical placement and a measurement over several
allocations averages it out; if they agree and processes still differ, it is the process's (its
clock state, its context), and no placement averages it. Run it in several processes:

    for i in 1 2 3; do python3 tools/probes/l2_region_probe.py --regions 4; done
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pytest_gpuprops import measure  # noqa: E402
from pytest_gpuprops import throughput as tp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--regions", type=int, default=4)
    ap.add_argument("--gpu", type=int, default=0)
    a = ap.parse_args()
    import cupy
    info = measure.gpu_info(a.gpu)
    runner = measure.Runner(info, ROOT / "kernels")
    fn = runner.load(runner.compile("stream_bandwidth.cu", tp.STREAM_DEFINES).cubin, tp.STREAM_KERNELS["l2_read"])
    props = cupy.cuda.runtime.getDeviceProperties(a.gpu)
    l2_bytes, mtps = int(props["l2CacheSize"]), int(props["maxThreadsPerMultiProcessor"])
    free = cupy.cuda.runtime.memGetInfo()[0]
    layout = tp.l2_placements(l2_bytes, free_bytes=free // a.regions)
    regions = [cupy.zeros(layout.region_bytes // 4, dtype=cupy.uint32) for _ in range(a.regions)]
    means = []
    for rep in range(2):
        for k, region in enumerate(regions):
            wls = tp.l2_placement_workloads(cupy, fn, layout, region, sms=info.sm_count, max_threads_per_sm=mtps)
            m = tp.measure_placed_rate(cupy, wls, name="l2_read_gbps", info=info, target_launch_s=0.001, launches=1)
            means.append(m.median)
            print(f"{info.uuid[:12]} pass {rep} region {k} ptr {tp.device_ptr(region):#x}: {m.median:.1f} GB/s "
                  f"(windows {m.launch['placement_lowest']}-{m.launch['placement_highest']}) SM {m.sm_clock_mhz} MHz",
                  flush=True)
    print(f"{info.uuid[:12]} regions: {min(means):.1f}-{max(means):.1f} "
          f"({(max(means) - min(means)) / statistics.median(means):.2%} apart)")


if __name__ == "__main__":
    main()
