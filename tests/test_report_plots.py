"""The report layer's plots of the Hopper facts (report.plot_dsmem, plot_wgmma_rate, plot_clock): what
each draws from given points, checked on the figure itself."""

from __future__ import annotations

import pytest

from pytest_gpuprops import report


@pytest.fixture
def drawn(monkeypatch):
    """Keep every figure the plot functions make (they close them after saving)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    yield figures
    for f in figures:
        real_close(f)


def test_dsmem_plot_is_latency_by_cluster_size_with_the_own_shared_memory_line(tmp_path, drawn):
    pts = [{"cluster": 8, "cycles": 195.0}, {"cluster": 2, "cycles": 187.0}, {"cluster": None, "cycles": 27.6},
           {"cluster": 16, "cycles": 200.0}, {"cluster": 4, "cycles": 190.0}]
    p = report.plot_dsmem(pts, tmp_path / "d.png", "H100")
    ax = drawn[0].axes[0]
    remote, own = ax.get_lines()
    assert list(remote.get_xdata()) == [2, 4, 8, 16] and list(remote.get_ydata()) == [187.0, 190.0, 195.0, 200.0]
    assert list(own.get_ydata()) == [27.6, 27.6] and own.get_label() == "own shared memory (27.6)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8", "16"]
    assert ax.get_ylim()[0] == 0 and ax.get_title() == "H100" and p.read_bytes()[:4] == b"\x89PNG"


def test_wgmma_plot_draws_each_type_and_operand_source_with_its_model(tmp_path, drawn):
    pts = [{"dtype": "e4m3", "n": 256, "operands": "ss", "measured": 8100.0, "model": 8192.0},
           {"dtype": "e4m3", "n": 64, "operands": "ss", "measured": 8000.0, "model": 8192.0},
           {"dtype": "e4m3", "n": 64, "operands": "rs", "measured": 8050.0, "model": 8192.0},
           {"dtype": "tf32", "n": 64, "operands": "ss", "measured": 2040.0, "model": 2048.0}]
    report.plot_wgmma_rate(pts, tmp_path / "w.png", "t")
    ax = drawn[0].axes[0]
    lines = ax.get_lines()
    labels = [ln.get_label() for ln in lines if not ln.get_label().startswith("_")]
    assert labels == ["e4m3 ss", "e4m3 rs", "tf32 ss", "model"]
    e4m3_ss, e4m3_ss_model = lines[0], lines[1]
    assert list(e4m3_ss.get_xdata()) == [64, 256] and list(e4m3_ss.get_ydata()) == [8000.0, 8100.0]
    assert list(e4m3_ss_model.get_ydata()) == [8192.0, 8192.0] and e4m3_ss_model.get_linestyle() == "--"
    assert lines[2].get_linestyle() == ":" and lines[2].get_color() == e4m3_ss.get_color()
    assert lines[4].get_color() != e4m3_ss.get_color()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_clock_plot_draws_the_series_its_sustained_value_and_throttle_reasons(tmp_path, drawn):
    pts = [{"load": "FFMA", "series": [(0.0, 1755.0), (0.01, 1980.0), (0.02, 1980.0)], "sustained": 1980.0,
            "throttle": []},
           {"load": "bf16 wgmma", "series": [(0.0, 1980.0), (0.01, 1600.0)], "sustained": 1590.0,
            "throttle": ["sw_power_cap"]}]
    report.plot_clock(pts, tmp_path / "c.png", "t")
    ax = drawn[0].axes[0]
    ffma, ffma_sustained, tensor, tensor_sustained = ax.get_lines()
    assert list(ffma.get_xdata()) == [0.0, 0.01, 0.02] and list(ffma.get_ydata()) == [1755.0, 1980.0, 1980.0]
    assert list(ffma_sustained.get_ydata()) == [1980.0, 1980.0]
    assert ffma.get_label() == "FFMA (sustained 1980 MHz)"
    assert tensor.get_label() == "bf16 wgmma (sustained 1590 MHz; sw_power_cap)"
    assert list(tensor_sustained.get_ydata()) == [1590.0, 1590.0]


def test_write_plots_draws_what_a_report_json_holds_and_nothing_else(tmp_path, drawn):
    """A report's plot points (a live run's, or a JSON's "plot_points" afterwards) -> one PNG per plot
    they allow, titled with the GPU and arch; points of unplotted kinds are ignored."""
    pts = {"dsmem_latency": [{"cluster": 2, "cycles": 197.5}, {"cluster": 4, "cycles": 198.7}],
           "smem_bandwidth": [{"label": "LDS.128", "bytes_per_cycle": 127.9}],
           "chase_hops_l2": [{"cycles": 260.0}]}
    made = report.write_plots(pts, tmp_path / "plots", {"gpu": {"name": "NVIDIA H200"}, "arch": "sm_90"})
    assert sorted(p.name for p in made) == ["dsmem_latency_vs_cluster_size.png", "smem_bandwidth.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in made) and len(drawn) == 2
    assert {f.axes[0].get_title() for f in drawn} == {"NVIDIA H200 (sm_90)"}
    assert report.write_plots({}, tmp_path / "none", {}) == []
