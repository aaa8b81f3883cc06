"""One-shot exploration on a GPU: print every raw number the facts need (no assertions).

Used once on a new GPU to see its numbers before recording facts; `pytest hwtests
--gpuprops-record` is the supported way to record them. Its first run (H200, 2026-11-21) gave the
register-bank table in docs/results.md; its HMMA numbers for ILP > 1 from that run predate the
kernel fix that gives each accumulator chain a distinct start (ptxas had merged identical chains).
"""
import json
import random
import time
from pathlib import Path

from pytest_gpuprops import measure, sass
from pytest_gpuprops.assertions import bank_read_cycles
from pytest_gpuprops.measure import KernelSpec, Runner, StopRule

out = {}
info = measure.gpu_info(0)
print(info)
out["gpu"] = info.as_dict()
r = Runner(info, Path("kernels"), stop=StopRule(noise_target=0.005, min_samples=5, max_samples=50, time_budget_s=1.0))
print("overhead", r.clock_overhead(), "sm clock", r.sm_clock_mhz(), measure.throttle_reasons(info))
out["overhead"] = r.clock_overhead()

def args_u32(n):
    return lambda cp: (cp.zeros(n, dtype=cp.uint32),)

def show(name, m):
    print(f"{name:40s} {m.summary()}  clk={m.sm_clock_mhz} thr={m.throttle}")
    out[name] = m.as_dict()

t0 = time.time()
for u in (50, 500):
    show(f"lds_latency_U{u}", r.measure("lds", KernelSpec("smem_latency_ld.cu", "smem_latency_ld", {"UNROLL": u}, 1, 32, args_u32(64)), divisor=u))
for u, then in ((50, 0), (1, 0), (1, 1), (0, 1)):
    spec = KernelSpec("smem_latency_st.cu", "smem_latency_st", {"UNROLL": u, "THEN_LDS": then}, 1, 32, args_u32(64),
                      patch=lambda cb, k: sass.chain_on_read_scoreboard(cb.instructions(k), ("STS", "LDS")))
    show(f"sts_chain_U{u}_lds{then}", r.measure("sts", spec, divisor=max(u, 1)) if u else r.measure("sts", KernelSpec("smem_latency_st.cu", "smem_latency_st", {"UNROLL": 0, "THEN_LDS": 1}, 1, 32, args_u32(64)), divisor=1))
    spec2 = KernelSpec("smem_latency_st.cu", "smem_latency_st", {"UNROLL": u, "THEN_LDS": then}, 1, 32, args_u32(64))
    show(f"sts_nochain_U{u}_lds{then}", r.measure("sts", spec2, divisor=max(u, 1)))
for load in (0, 1):
    for vec in (1, 2, 4):
        iters = 64
        spec = KernelSpec("smem_bandwidth.cu", "smem_bandwidth", {"VEC": vec, "LOAD": load, "UNROLL": 32}, 1, 1024,
                          lambda cp: (cp.zeros(1024, dtype=cp.float32), cp.int32(64)))
        nbytes = 1024 * vec * 4 * 32 * iters
        show(f"smem_bw_{'ld' if load else 'st'}_vec{vec}_Bpc", r.measure("bw", spec, divisor=1, mode="span", unit="B/clk", transform=lambda c, nb=nbytes: nb / c))
for ilp in (1, 2, 3, 4, 6, 8):
    for w in (1, 2, 4):
        spec = KernelSpec("hmma_16816.cu", "hmma_16816", {"ILP": ilp, "UNROLL": 64}, 1, 128 * w,
                          lambda cp: (cp.ones(32 * 6, dtype=cp.uint32) * 0x3c003c00, cp.zeros(128 * 4 * 4, dtype=cp.float32)))
        show(f"hmma_ilp{ilp}_w{w}_warp", r.measure("hmma", spec, divisor=64 * ilp))
        show(f"hmma_ilp{ilp}_w{w}_smsp", r.measure("hmma", spec, divisor=64 * ilp * w, mode="span"))
for ilp in (1, 2, 4, 8):
    for w in (1, 4):
        spec = KernelSpec("ffma.cu", "ffma", {"ILP": ilp, "UNROLL": 256}, 1, 128 * w,
                          lambda cp: (cp.ones(16, dtype=cp.float32), cp.zeros(128 * 4 * 4, dtype=cp.float32)))
        show(f"ffma_ilp{ilp}_w{w}_warp", r.measure("ffma", spec, divisor=256 * ilp))
        show(f"ffma_ilp{ilp}_w{w}_smsp", r.measure("ffma", spec, divisor=256 * ilp * w, mode="span"))
print("elapsed", time.time() - t0)

# register banks
comp = r.compile("regbank_ffma.cu", {"NFFMA": 128})
cb = sass.Cubin(comp.cubin, info.arch)
ins = cb.instructions("regbank_ffma")
scratch = sass.ffma_destinations(ins)
regcount = cb.nvinfo_register_count("regbank_ffma") or cb.kernels["regbank_ffma"].register_count
print("regcount", regcount, "scratch", sorted(scratch))
seeds = [(8,10,16,"--"),(8,10,16,"-R"),(8,10,16,"R-"),(8,10,16,"RR"),(8,8,16,"--"),(8,8,16,"-R"),(8,8,16,"R-"),(8,8,16,"RR"),
         (9,10,16,"--"),(9,10,16,"-R"),(9,10,16,"R-"),(9,10,16,"RR")]
for x in range(10, 17):
    seeds += [(8, 9, x, "--"), (7, 9, x, "--")]
cand = [r_ for r_ in range(regcount) if r_ not in scratch]
def shift(t):
    for k in range(0, 64, 4):
        if all((v + k) in cand for v in t[:3]):
            return tuple(v + k for v in t[:3]) + (t[3],)
    raise SystemExit(f"cannot place {t}")
rng = random.Random(1)
cases = [shift(s) for s in seeds]
for _ in range(60):
    cases.append((rng.choice(cand), rng.choice(cand), rng.choice(cand), rng.choice(["--", "R-", "-R", "RR"])))
def rm(s):
    return (1 if s[0] == "R" else 0) | (2 if s[1] == "R" else 0)
variants = [sass.ffma_operand_edits(ins, a, b, c, rm(s)) + sass.timing_edits(ins) for a, b, c, s in cases]
t1 = time.time()
results = sass.patch_many(cb, "regbank_ffma", variants, scratch=scratch)
print("patch_many", len(results), time.time() - t1)
iters = 64
rb = {}
for (a, b, c, s), res in zip(cases, results):
    for w in (1, 4):
        spec = KernelSpec("regbank_ffma.cu", "regbank_ffma", {"NFFMA": 128}, 1, 128 * w,
                          lambda cp: (cp.ones(64 * 32, dtype=cp.float32), cp.zeros(512 * 64, dtype=cp.float32), cp.int32(iters)))
        m = r.measure("rb", spec, divisor=128 * iters * (w if w > 1 else 1), mode="span" if w > 1 else "warp", built=(res.cubin, res.instructions),
                      stop=StopRule(0.01, 3, 20, 0.3))
        rb[f"R{a},R{b},R{c},{s},w{w}"] = (m.median, m.noise, bank_read_cycles(a, b, c, rm(s)), bank_read_cycles(a, b, c, rm(s), banks=4))
        print(f"regbank R{a:2d} R{b:2d} R{c:2d} {s} w{w}: {m.median:.3f} noise {m.noise:.2%} model2={rb[f'R{a},R{b},R{c},{s},w{w}'][2]} model4={rb[f'R{a},R{b},R{c},{s},w{w}'][3]}")
out["regbank"] = rb
print("total", time.time() - t0)
import os

Path(os.environ.get("OUT", "/tmp"), "explore.json").write_text(json.dumps(out, indent=1, default=str))
