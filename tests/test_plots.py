"""The plots (plots.py): what each draws from given points, checked on the figure itself (line data,
labels, scales, a grid with holes, bar heights, colours the default style does not decide), not by
the PNG header alone; and that without matplotlib each says how to install it."""

import sys

import pytest

from pytest_gpuprops import plots

# ----------------------------------------------------------------------------------------------
# plots: what was drawn


@pytest.fixture
def drawn(monkeypatch):
    """Keep every figure the plot functions make (they close them after saving)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    real_close = plt.close

    def keep(fig=None):
        figures.append(fig)

    monkeypatch.setattr(plt, "close", keep)
    yield figures
    for f in figures:
        real_close(f)


MODEL_LABEL = "model max(L/(ILP·W), i/W, p)"


def test_hmma_plot_draws_one_line_per_warp_count(tmp_path, drawn):
    # points carry the issue model's value; each warp count gets its measured line and its model's
    # curve, dashed in the same colour (the floor argument is gone: the model includes the pipe)
    pts = [{"ilp": i, "warps": w, "cycles": 24.0 / (i * w), "model": max(24.0 / (i * w), 2.0)}
           for i in (4, 1, 2) for w in (4, 1)]
    p = plots.plot_hmma(pts, tmp_path / "h.png", "title")
    (fig,) = drawn
    ax = fig.axes[0]
    one, one_model, four, four_model, key = ax.get_lines()
    assert (one.get_label(), four.get_label(), key.get_label()) == ("1 warp(s)/SMSP", "4 warp(s)/SMSP", MODEL_LABEL)
    assert list(one.get_xdata()) == [1, 2, 4]  # sorted by ILP
    assert list(one.get_ydata()) == [24.0, 12.0, 6.0]
    assert list(four.get_ydata()) == [6.0, 3.0, 1.5]
    assert list(one_model.get_xdata()) == [1, 2, 4] and list(one_model.get_ydata()) == [24.0, 12.0, 6.0]
    assert list(four_model.get_ydata()) == [6.0, 3.0, 2.0]
    assert one_model.get_color() == one.get_color() == "C0" and four_model.get_color() == four.get_color() == "C1"
    assert list(key.get_xdata()) == [] and list(key.get_ydata()) == []  # the legend's entry only
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1 warp(s)/SMSP", "4 warp(s)/SMSP", MODEL_LABEL]
    assert ax.get_yscale() == "log" and ax.get_title() == "title"
    assert ax.get_xlabel() == "independent HMMA chains per warp (ILP)"
    assert p.read_bytes()[:4] == b"\x89PNG"


def test_hmma_plot_without_a_floor(tmp_path, drawn):
    # without the model's values (or with one missing) no model curve is drawn; the legend's model
    # entry stays
    plots.plot_hmma([{"ilp": 1, "warps": 1, "cycles": 24.0}, {"ilp": 2, "warps": 1, "cycles": 12.0, "model": 12.0}],
                     tmp_path / "h.png", "t")
    data, key = drawn[0].axes[0].get_lines()
    assert (data.get_label(), key.get_label()) == ("1 warp(s)/SMSP", MODEL_LABEL)
    assert list(data.get_ydata()) == [24.0, 12.0] and list(key.get_ydata()) == []


def test_regbank_plot_is_the_grid_with_holes(tmp_path, drawn):
    cells = {(8, 10): 3.0, (8, 11): 2.0, (9, 10): 2.0}
    plots.plot_regbank(cells, 16, tmp_path / "r.png", "t")
    ax = drawn[0].axes[0]
    grid = ax.get_images()[0].get_array()
    assert grid.shape == (2, 2)
    assert grid[0][0] == 3.0 and grid[0][1] == 2.0 and grid[1][0] == 2.0 and grid.mask[1][1]  # (9, 11) missing
    assert [t.get_text() for t in ax.get_yticklabels()] == ["R8", "R9"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["R10", "R11"]
    assert ax.get_xlabel() == "Rb" and ax.get_ylabel() == "Ra" and "FFMA Rd, Ra, Rb, R16" in ax.get_title()


def test_bandwidth_plot_bars_and_peak(tmp_path, drawn):
    plots.plot_bandwidth({"STS float": 127.0, "STS float4": 64.0}, 128.0, tmp_path / "b.png", "t")
    ax = drawn[0].axes[0]
    assert [b.get_height() for b in ax.patches] == [127.0, 64.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["STS float", "STS float4"]
    (peak,) = ax.get_lines()
    assert list(peak.get_ydata()) == [128.0, 128.0] and peak.get_label() == "theory 128 B/clk"


def test_plots_need_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(plots.PlotsUnavailable, match=r"^--gpuprops-plots needs matplotlib: pip install "
                                                      r"'pytest-gpuprops\[plots\]'$"):
        plots._plt()


def _png_size(path):
    import struct
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_hmma_plot_style(tmp_path, drawn):
    import matplotlib.colors as mcolors
    p = plots.plot_hmma([{"ilp": 1, "warps": 1, "cycles": 24.0, "model": 23.0}], tmp_path / "h.png", "t")
    ax = drawn[0].axes[0]
    assert _png_size(p) == (704, 462)  # 6.4 x 4.2 inches at 110 dpi
    data, model, key = ax.get_lines()
    assert data.get_marker() == "o" and mcolors.to_hex(data.get_color()) == "#1f77b4"  # C0
    assert (model.get_linestyle(), model.get_linewidth(), mcolors.to_hex(model.get_color())) == ("--", 1.0, "#1f77b4")
    assert (key.get_linestyle(), key.get_linewidth(), mcolors.to_hex(key.get_color())) == ("--", 1.0, "#000000")
    assert ax.get_ylabel() == "cycles per HMMA.16816.F32 per SMSP"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1 warp(s)/SMSP", MODEL_LABEL]
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8.0
    assert ax.xaxis.get_gridlines()[0].get_visible() and ax.xaxis.get_gridlines()[0].get_alpha() == 0.3


def test_regbank_plot_style(tmp_path, drawn):
    p = plots.plot_regbank({(8, 10): 3.0, (9, 11): 2.0}, 16, tmp_path / "r.png", "title")
    fig = drawn[0]
    ax = fig.axes[0]
    assert _png_size(p) == (704, 594)  # 6.4 x 5.4 inches at 110 dpi
    im = ax.get_images()[0]
    assert im.origin == "lower" and im.get_cmap().name == "viridis"
    assert len(fig.axes) == 2 and fig.axes[1].get_label() == "<colorbar>"  # the colour bar beside the map
    assert [t.get_rotation() for t in ax.get_xticklabels()] == [90.0, 90.0]
    assert {t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()} == {7.0}
    assert ax.get_title() == "title\nFFMA Rd, Ra, Rb, R16 (no reuse): cycles per FFMA"


def test_bandwidth_plot_style(tmp_path, drawn):
    import matplotlib.colors as mcolors
    p = plots.plot_bandwidth({"STS float": 127.0}, 128.0, tmp_path / "b.png", "title")
    ax = drawn[0].axes[0]
    assert _png_size(p) == (704, 440)  # 6.4 x 4.0 inches at 110 dpi
    assert mcolors.to_hex(ax.patches[0].get_facecolor()) == mcolors.to_hex("tab:blue")
    (peak,) = ax.get_lines()
    assert (peak.get_linestyle(), peak.get_linewidth(), mcolors.to_hex(peak.get_color())) == ("--", 1.0, "#000000")
    assert ax.get_ylabel() == "bytes per cycle per SM" and ax.get_title() == "title"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["theory 128 B/clk"]


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    p1 = plots.plot_hmma([{"ilp": i, "warps": w, "cycles": max(24 / (i * w), 6), "model": max(24 / (i * w), 6)}
                           for i in (1, 2, 4) for w in (1, 4)], tmp_path / "h.png", "t")
    p2 = plots.plot_regbank({(a, b): 1 + (a % 2 == b % 2) for a in range(4) for b in range(4)}, 9,
                             tmp_path / "r.png", "t")
    p3 = plots.plot_bandwidth({"STS float": 127.0}, 128, tmp_path / "b.png", "t")
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in (p1, p2, p3))


def test_regbank_colour_bar_spans_the_measured_cycles(tmp_path, drawn):
    path = tmp_path / "r.png"
    assert plots.plot_regbank({(8, 10): 3.0, (8, 11): 2.0, (9, 10): 2.5}, 16, path, "t") == path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = drawn[0]
    ax, bar = fig.axes
    assert bar.get_ylim() == (2.0, 3.0)  # the colour scale is the cycles', not 0..1
    assert ax.get_images()[0].get_clim() == (2.0, 3.0)


def test_regbank_is_viridis_whatever_the_default_colour_map(tmp_path, drawn):
    matplotlib = pytest.importorskip("matplotlib")
    with matplotlib.rc_context({"image.cmap": "gray"}):
        plots.plot_regbank({(8, 10): 3.0, (9, 11): 2.0}, 16, tmp_path / "r.png", "t")
    assert drawn[0].axes[0].get_images()[0].get_cmap().name == "viridis"


def test_bandwidth_bars_are_tab_blue_whatever_the_colour_cycle(tmp_path, drawn):
    matplotlib = pytest.importorskip("matplotlib")
    cycler = pytest.importorskip("cycler").cycler
    mcolors = pytest.importorskip("matplotlib.colors")
    path = tmp_path / "b.png"
    with matplotlib.rc_context({"axes.prop_cycle": cycler(color=["#ff0000", "#00ff00"])}):
        assert plots.plot_bandwidth({"STS float": 127.0, "STS float4": 64.0}, 128.0, path, "t") == path
    ax = drawn[0].axes[0]
    assert [mcolors.to_hex(b.get_facecolor()) for b in ax.patches] == ["#1f77b4", "#1f77b4"]  # tab:blue
    assert [b.get_height() for b in ax.patches] == [127.0, 64.0]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dsmem_plot_is_latency_by_cluster_size_with_the_own_shared_memory_line(tmp_path, drawn):
    pts = [{"cluster": 8, "cycles": 195.0}, {"cluster": 2, "cycles": 187.0}, {"cluster": None, "cycles": 27.6},
           {"cluster": 16, "cycles": 200.0}, {"cluster": 4, "cycles": 190.0}]
    p = plots.plot_dsmem(pts, tmp_path / "d.png", "H100")
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
    plots.plot_wgmma_rate(pts, tmp_path / "w.png", "t")
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
    plots.plot_clock(pts, tmp_path / "c.png", "t")
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
    made = plots.write_plots(pts, tmp_path / "plots", {"gpu": {"name": "NVIDIA H200"}, "arch": "sm_90"})
    assert sorted(p.name for p in made) == ["dsmem_latency_vs_cluster_size.png", "smem_bandwidth.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in made) and len(drawn) == 2
    assert {f.axes[0].get_title() for f in drawn} == {"NVIDIA H200 (sm_90)"}
    assert plots.write_plots({}, tmp_path / "none", {}) == []
