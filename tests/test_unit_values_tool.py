"""tools/unit_values.py: a unit's memory-system values per report, and the verdicts that read beyond
the units measured so far (new samples for a population fact)."""

import json

from gp_testing import load_tool

uv = load_tool("unit_values")


def _report(path, uuid, facts):
    path.write_text(json.dumps({"meta": {"gpu": {"name": "NVIDIA H100 80GB HBM3", "uuid": uuid}}, "facts": facts}))
    return str(path)


def test_values_per_unit_and_the_new_samples(tmp_path, capsys):
    gpu = {"index": 0}
    inside = {"fact": "dram_latency_cycles", "measured": 683.1, "status": "PASS", "gpu": gpu, "flags": []}
    beyond = {"fact": "dram_latency_p10_cycles", "measured": 552.0, "status": "PASS", "gpu": gpu,
              "flags": ["beyond the units measured so far (538.8 .. 551.35): a new sample of this fact's population; "
                        "tools/population_fact.py"]}
    sm_fact = {"fact": "lds_latency_cycles", "measured": 23.0, "status": "PASS", "gpu": gpu, "flags": []}
    stress = {"fact": "sustained_sm_clock_tensor_mhz", "measured": 1598.3, "status": "PASS", "gpu": gpu, "flags": [],
              "measurement": {"launch": {"rate_second_half": 861.25, "rate_unit": "TFLOP/s",
                                                    "early_sustained_mhz": 1601.5}}}
    a = _report(tmp_path / "run1.json", "GPU-41172d06-69b3", [inside, beyond, sm_fact, stress])
    b = _report(tmp_path / "run2.json", "GPU-500f5c5f-b7cc", [dict(inside, measured=682.5)])
    assert uv.main([a, b]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("run")]
    assert rows[0][:2] == ["run1.json", "NVIDIA"] and "683.10" in rows[0] and "552.00" in rows[0]
    assert "682.50" in rows[1] and rows[1][-1] == "-"  # run 2 has no p10
    assert "lds_latency_cycles" not in out  # an SM fact is not a unit's memory-system value
    assert "stress_rate_tensor" in out and "861.25" in rows[0]
    assert "stress_early_mhz_tensor" in out and "1601.50" in rows[0]
    assert "new samples (beyond the units measured so far):" in out
    assert "run1.json: dram_latency_p10_cycles PASS at 552.000: beyond the units measured so far (538.8 .. 551.35)" in out
    assert out.count("beyond the units measured so far (") == 1
    assert "--fact NAME --reports <these reports> --write" in out


def test_no_new_sample_no_section(tmp_path, capsys):
    a = _report(tmp_path / "run1.json", "GPU-1", [{"fact": "l2_read_gbps", "measured": 7100.0, "status": "PASS",
                                                   "gpu": {"index": 0}, "flags": []}])
    assert uv.main([a]) == 0
    assert "new samples" not in capsys.readouterr().out
