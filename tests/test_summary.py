"""The end-of-run summary (pytest_gpuprops/summary.py): which plots a run's points make and where
they go, and the note when --gpuprops-plots had nothing to plot; the terminal summary through
pytest is in tests/test_plugin.py."""

import types

import pytest

from pytest_gpuprops import plots, results, summary


def test_write_plots_picks_the_points(tmp_path, monkeypatch):
    calls = {}
    monkeypatch.setattr(plots, "plot_hmma", lambda pts, path, title: calls.setdefault("hmma", (pts, path, title)))
    monkeypatch.setattr(plots, "plot_regbank", lambda cells, rc, path, title: calls.setdefault("rb", (cells, rc, path)))
    monkeypatch.setattr(plots, "plot_bandwidth", lambda vals, peak, path, title: calls.setdefault("bw", (vals, peak,
                                                                                                         path)))
    hmma = [{"ilp": 1, "warps": 1, "cycles": 24.0, "model": 24.0}, {"ilp": 2, "warps": 1, "cycles": 12.0, "model": 12.0}]
    regbank = [{"ra": 8, "rb": 10, "rc": 16, "cycles": 3.0}, {"ra": 8, "rb": 10, "rc": 17, "cycles": 2.0},
               {"ra": 9, "rb": 10, "rc": 17, "cycles": 1.0}]
    bw = [{"label": "STS float", "bytes_per_cycle": 127.0}, {"label": "STS float2", "bytes_per_cycle": 120.0}]
    state = types.SimpleNamespace(plots_dir=str(tmp_path / "plots"), results=results.SessionResults(
        plot_points={"hmma": hmma, "regbank": regbank, "smem_bandwidth": bw}))
    made = summary.write_plots(state, {"gpu": {"name": "G"}, "arch": "sm_90"})
    assert (tmp_path / "plots").is_dir()
    assert calls["hmma"] == (hmma, tmp_path / "plots" / "hmma_cycles_vs_ilp.png", "G (sm_90)")
    assert calls["rb"] == ({(8, 10): 2.0, (9, 10): 1.0}, 17, tmp_path / "plots" / "regbank_heatmap.png")
    assert calls["bw"] == ({"STS float": 127.0, "STS float2": 120.0}, 128.0, tmp_path / "plots" / "smem_bandwidth.png")
    assert len(made) == 3
    calls.clear()
    only = types.SimpleNamespace(plots_dir=str(tmp_path / "p2"), results=results.SessionResults(
        plot_points={"hmma": hmma[:1]}))
    assert summary.write_plots(only, {}) == [(hmma[:1], tmp_path / "p2" / "hmma_cycles_vs_ilp.png", "? (?)")]


@pytest.fixture
def plot_calls(monkeypatch):
    calls = {}
    monkeypatch.setattr(plots, "plot_hmma", lambda pts, path, title: calls.setdefault("hmma", (path, title)) and path)
    monkeypatch.setattr(plots, "plot_regbank",
                        lambda cells, rc, path, title: calls.setdefault("regbank", (cells, rc, path, title)) and path)
    monkeypatch.setattr(plots, "plot_bandwidth",
                        lambda vals, peak, path, title: calls.setdefault("bw", (vals, peak, path, title)) and path)
    return calls


def _plot_state(folder, **points):
    return types.SimpleNamespace(plots_dir=str(folder), results=results.SessionResults(plot_points=points))


def test_plots_go_to_a_new_nested_folder_or_an_existing_one(tmp_path, plot_calls):
    hmma = [{"ilp": 1, "warps": 1, "cycles": 24.0, "model": 24.0}]
    nested = tmp_path / "a" / "b" / "plots"
    assert summary.write_plots(_plot_state(nested, hmma=hmma), {}) == [nested / "hmma_cycles_vs_ilp.png"]
    assert nested.is_dir()
    # a second run into the same folder
    plot_calls.clear()
    assert summary.write_plots(_plot_state(nested, hmma=hmma), {}) == [nested / "hmma_cycles_vs_ilp.png"]


def test_the_regbank_heatmap_is_drawn_for_the_rc_with_most_cells_and_every_plot_gets_the_title(tmp_path,
                                                                                               plot_calls):
    regbank = [{"ra": 8, "rb": 10, "rc": 16, "cycles": 3.0}, {"ra": 9, "rb": 10, "rc": 16, "cycles": 2.0},
               {"ra": 8, "rb": 10, "rc": 40, "cycles": 1.0}]  # rc 16 has two cells, the higher rc 40 one
    bw = [{"label": "LDS.128", "bytes_per_cycle": 128.0}]
    out = tmp_path / "p"
    summary.write_plots(_plot_state(out, regbank=regbank, smem_bandwidth=bw),
                       {"gpu": {"name": "Fake GPU"}, "arch": "sm_90"})
    assert plot_calls["regbank"] == ({(8, 10): 3.0, (9, 10): 2.0}, 16, out / "regbank_heatmap.png",
                                     "Fake GPU (sm_90)")
    assert plot_calls["bw"] == ({"LDS.128": 128.0}, 128.0, out / "smem_bandwidth.png", "Fake GPU (sm_90)")


def test_a_plots_folder_with_nothing_to_plot_is_said_with_why():
    state = types.SimpleNamespace(plots_dir="out", results=results.SessionResults(),
                                  _slots={0: types.SimpleNamespace(unavailable="no CUDA GPU visible")})
    assert summary.plots_note(state) == (
        "gpuprops plots: nothing to plot, no PNG written to out: plots come from the HMMA, register-bank and "
        "shared-memory bandwidth GPU facts, and none ran; GPU facts were skipped: no CUDA GPU visible")
    state.results.plot_points = {"hmma": [{"ilp": 1}]}
    assert summary.plots_note(state) is None
    state.plots_dir, state.results.plot_points = None, {}
    assert summary.plots_note(state) is None
