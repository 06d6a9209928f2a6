"""``Trajectory.to_xarray`` (labelled data) and ``gradflow.attention.plot`` (figure-style plots)."""

import json

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import gradflow  # noqa: E402
import gradflow.attention.plot  # noqa: E402

BETA = np.array([0.6, 0.0, 0.8])
V0 = 0.1 * np.arange(9.0).reshape(3, 3)
TS = np.array([0.0, 1.0, 10.0, 100.0])


@pytest.fixture(scope="module")
def batch():
    """Two lanes, solved as ``gradflow sweep`` solves a chunk (a list of losses, the same shapes
    and settings as the sweep test below, so one compiled solve serves both)."""
    V0s = np.stack([V0, V0[::-1]])
    return gradflow.simulate_batch([gradflow.LogisticTeacher(BETA)] * 2, V0s, np.zeros((2, 3)), t1=10.0,
                                   ts=TS[:3], rtol=1e-8, atol=1e-10, max_steps=16384)


@pytest.fixture(scope="module")
def flow():
    return gradflow.simulate(gradflow.LogisticTeacher(BETA), V0, np.zeros(3), t1=100.0, ts=TS)


def test_to_xarray_labels_every_field(flow):
    """Dims, coordinates and values: each variable is the trajectory's own array under its
    label; u equals Vᵀβ* recomputed from the stored V (an independent formula); attrs carry the
    run's settings and the package versions."""
    ds = flow.to_xarray()
    assert ds["V"].dims == ("t", "dim", "token") and ds["s"].dims == ("t", "token") and ds["Gamma"].dims == ("t",)
    np.testing.assert_array_equal(ds["t"].values, TS)
    for name in ("V", "a", "s", "u", "loss", "Gamma", "entropy", "valid"):
        np.testing.assert_array_equal(ds[name].values, np.asarray(getattr(flow, name)))
    np.testing.assert_allclose(ds["u"].values, np.einsum("tdn,d->tn", ds["V"].values, BETA), rtol=1e-12)
    assert ds["status"].item() == "ok" and int(ds["num_steps"]) == int(flow.num_steps)
    assert ds.attrs["meta_normalization"] == "softmax" and ds.attrs["meta_t1"] == 100.0
    assert json.loads(ds.attrs["meta_json"]) == json.loads(json.dumps(flow.metadata))
    assert ds.attrs["version_jax"] and "version_gradflow" in ds.attrs
    # labels select the right point: t = 10 is the third saved point
    np.testing.assert_array_equal(ds["s"].sel(t=10.0).values, np.asarray(flow.s)[2])


def test_to_xarray_batch_and_gd(batch):
    """A batch gains a leading ``run`` dim (lane i is ``traj[i]``); GD carries ``k`` with t = lr·k."""
    ds = batch.to_xarray()
    assert ds["s"].dims == ("run", "t", "token") and ds.sizes["run"] == 2
    np.testing.assert_array_equal(ds["s"].isel(run=1).values, np.asarray(batch[1].s))
    assert list(ds["status"].values) == batch.status
    gd = gradflow.descend(gradflow.LogisticTeacher(BETA), V0, np.zeros(3), lr=0.1, steps=50, record=np.array([0, 10, 50]))
    gds = gd.to_xarray()
    np.testing.assert_array_equal(gds["k"].values, [0, 10, 50])
    np.testing.assert_allclose(gds["t"].values, 0.1 * gds["k"].values)


def test_to_xarray_rowwise_logits_have_a_row_dim():
    loss = gradflow.LogisticTeacher(np.array([1.0, 0.0]))
    traj = gradflow.simulate(loss, 0.1 * np.ones((2, 3)), np.zeros((3, 3)), t1=1.0, ts=np.array([0.0, 1.0]), model="rowwise")
    ds = traj.to_xarray()
    assert ds["a"].dims == ("t", "row", "token") and ds["s"].shape == (2, 3, 3)


def test_plot_trajectory_draws_the_runs_own_data(flow):
    """Each weight line holds the run's valid (t > 0) points; the panels are the requested ones.
    Control: a GD overlay adds marker-only lines."""
    fig = gradflow.attention.plot.trajectory(flow, panels=("s", "Gamma"))
    ax_s, ax_g = fig.axes
    lines = [ln for ln in ax_s.get_lines() if ln.get_linestyle() != "None"]
    assert len(lines) == 3
    order = np.argsort(-np.asarray(flow.u)[0])
    np.testing.assert_array_equal(lines[0].get_xdata(), TS[1:])
    np.testing.assert_array_equal(lines[0].get_ydata(), np.asarray(flow.s)[1:, order[0]])
    np.testing.assert_array_equal(ax_g.get_lines()[0].get_ydata(), np.asarray(flow.Gamma)[1:])
    assert ax_s.get_yscale() == "log" and ax_s.get_xscale() == "log"
    assert not [ln for ln in ax_s.get_lines() if ln.get_linestyle() == "None"]
    gd = gradflow.descend(gradflow.LogisticTeacher(BETA), V0, np.zeros(3), lr=0.1, steps=200)
    fig = gradflow.attention.plot.trajectory(flow, gd=gd)
    assert len(fig.axes) == 4 and [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "None"]


@pytest.mark.bad_input
@pytest.mark.parametrize("bad, match", [("batch", "traj: got 'a batch of 2 runs'"), ("panels", "panels: got"),
                                        ("notraj", "traj: got 'ndarray'")])
def test_plot_trajectory_refuses_bad_input(flow, batch, bad, match):
    if bad == "batch":
        arg, kw = batch, {}
    elif bad == "panels":
        arg, kw = flow, {"panels": ("s", "weights")}
    else:
        arg, kw = np.zeros(3), {}
    with pytest.raises(gradflow.GradflowValueError, match=match):
        gradflow.attention.plot.trajectory(arg, **kw)


def test_plot_sweep_histograms_the_final_weights(tmp_path):
    """The left histogram counts every written, ok seed once, at its final largest weight."""
    from gradflow.attention.sweep import SweepSpec, load_sweep, run_sweep

    run_sweep(SweepSpec(seed_stop=2, chunk=2, n=(3,), t1=(10.0,), points=2), tmp_path / "sw.zarr", progress=False)
    ds = load_sweep(tmp_path / "sw.zarr")
    fig = gradflow.attention.plot.sweep(ds)
    counts = sum(p.get_height() for p in fig.axes[0].patches)
    assert counts == 2
    smax = ds["s"].isel(t=-1).max("token").values.ravel()
    lo, hi = fig.axes[0].patches[0].get_x(), fig.axes[0].patches[-1].get_x() + fig.axes[0].patches[-1].get_width()
    assert lo == pytest.approx(smax.min()) and hi == pytest.approx(smax.max())
    with pytest.raises(gradflow.GradflowValueError, match="ds: got"):
        gradflow.attention.plot.sweep({"s": 1})
