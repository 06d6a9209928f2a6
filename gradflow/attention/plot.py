"""Plots in the style of the paper's figures, for notebooks and scripts.

- :func:`trajectory` — one run: the attention weights ``s_i(t)`` (log–log, tokens ranked by
  ``u_i(0)`` as in the paper's Fig. 2), ``u_i(t) = ⟨v_i, β*⟩`` (log-x), the polarisation
  coefficient ``Γ(t)`` against ``log t`` and the entropy of ``s`` (nats), with an optional GD run
  overlaid as open markers at flow time ``t = lr·k``.
- :func:`sweep` — a sweep read with :func:`gradflow.attention.sweep.load_sweep` (or
  ``xarray.open_zarr``): per configuration, the distribution over seeds of the final largest
  weight and of the final slope ``dΓ/d log t`` (Thm 3.3(c): it tends to ``1/‖β*‖²``, i.e. 1 for a
  unit teacher).

Both return a :class:`matplotlib.figure.Figure` (not shown, not saved: call ``fig.savefig``).
The style (serif, the ICML two-column width 6.75 in) is applied only inside these functions
(``matplotlib.rc_context``), never to the caller's global settings; no backend is forced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import bad_arg
from .trajectory import Trajectory

__all__ = ["trajectory", "sweep", "STYLE", "WIDTH", "PANELS"]

WIDTH = 6.75
"""Figure width in inches (ICML two-column text width, as the paper's figures)."""

STYLE: dict[str, Any] = {
    "font.family": "serif",
    "font.serif": ["DejaVu Serif", "Times New Roman", "Times"],
    "mathtext.fontset": "dejavuserif",
    "font.size": 8,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.2,
    "legend.frameon": True,  # a legend inside the axes stays readable over the curves
    "legend.framealpha": 0.85,
    "legend.edgecolor": "none",
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
}
"""matplotlib rcParams of the figures (used inside a ``rc_context``)."""

PANELS = ("s", "u", "Gamma", "entropy")
"""Panel names of :func:`trajectory`, in their default order."""

_GD = dict(linestyle="none", marker="o", markersize=2.2, markerfacecolor="none", markeredgewidth=0.6)


def _colors(n: int):
    import matplotlib.pyplot as plt

    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    return [plt.get_cmap("viridis")(i / max(n - 1, 1)) for i in range(n)]


def _check_single(name: str, traj) -> None:
    if not isinstance(traj, Trajectory):
        raise bad_arg(name, type(traj).__name__, "a gradflow.Trajectory")
    if traj.batched:
        raise bad_arg(name, f"a batch of {np.shape(traj.status_code)[0]} runs", "a single run (index a batch: traj[i])")


def _thin(t: np.ndarray, k: int) -> np.ndarray:
    """At most ``k`` indices of the increasing positive times ``t``, evenly spaced in ``log t``."""
    if len(t) <= k:
        return np.arange(len(t))
    idx = np.searchsorted(t, np.geomspace(t[0], t[-1], k))
    return np.unique(np.clip(idx, 0, len(t) - 1))


def trajectory(traj: Trajectory, *, gd: Trajectory | None = None, panels: tuple[str, ...] = PANELS,
               title: str | None = None, max_markers: int = 45):
    """Plot one run: weights, ``u``, ``Γ`` and entropy against flow time.

    **Arguments:**

    - ``traj``: a single (unbatched) :class:`gradflow.Trajectory` from :func:`gradflow.simulate`
      (or :func:`gradflow.descend`). Only its ``valid`` points with ``t > 0`` are drawn (log axes).
      Weights of any shape ``(T, ...)`` are drawn one line per entry; tokens are coloured by the
      rank of ``u_i(0)`` (largest first) when the loss has a teacher, else by index.
    - ``gd``: optional second single run (e.g. :func:`gradflow.descend` of the same problem), drawn
      as open markers (at most ``max_markers`` per line, default 45) over the flow's lines.
    - ``panels``: any of :data:`PANELS` (default all four); ``"u"`` is skipped when the loss has
      no teacher (``traj.u is None``).
    - ``title``: figure title (default: model, map and status from ``traj.meta``).

    **Returns:** a matplotlib ``Figure`` with one axis per panel, width :data:`WIDTH` inches.

    **Raises:** :class:`gradflow.GradflowValueError` if ``traj``/``gd`` is not a single
    ``Trajectory``, or ``panels`` is empty or names an unknown panel.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    _check_single("traj", traj)
    if gd is not None:
        _check_single("gd", gd)
    panels = tuple(panels)
    if not panels or any(p not in PANELS for p in panels):
        raise bad_arg("panels", panels, f"a non-empty tuple of {list(PANELS)}")
    if traj.u is None:
        panels = tuple(p for p in panels if p != "u") or ("s",)

    def series(run):
        t = np.asarray(run.t)
        keep = np.asarray(run.valid) & (t > 0)
        out = {"t": t[keep]}
        out["s"] = np.asarray(run.s)[keep].reshape(int(keep.sum()), -1)
        out["u"] = None if run.u is None else np.asarray(run.u)[keep]
        out["Gamma"] = np.asarray(run.Gamma)[keep]
        out["entropy"] = np.asarray(run.entropy)[keep]
        return out

    flow = series(traj)
    other = series(gd) if gd is not None else None
    n_lines = flow["s"].shape[1]
    if traj.u is not None and np.ndim(traj.u) == 2 and np.shape(traj.u)[1] == n_lines:
        order = np.argsort(-np.asarray(traj.u)[0])
    else:
        order = np.arange(n_lines)
    cols = _colors(len(order))
    meta = traj.metadata
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH, 2.9), layout="constrained", squeeze=False)
        for ax, panel in zip(axes[0], panels):
            ax.set_xscale("log")
            ax.set_xlabel("flow time $t$" + ("  (GD: $t = \\eta k$)" if gd is not None else ""))
            if panel in ("s", "u"):
                for rank, i in enumerate(order):
                    ax.plot(flow["t"], flow[panel][:, i], color=cols[rank],
                            label=f"$i={rank}$" if n_lines <= 10 else None)
                    if other is not None and other[panel] is not None:
                        m = _thin(other["t"], max_markers)
                        ax.plot(other["t"][m], other[panel][m, i], color=cols[rank], **_GD)
            else:
                ax.plot(flow["t"], flow[panel], color="k")
                if other is not None:
                    m = _thin(other["t"], max_markers)
                    ax.plot(other["t"][m], other[panel][m], color="k", **_GD)
            if panel == "s":
                ax.set_yscale("log")
                ax.set_ylabel("attention weight $s_i(t)$")
                ax.set_title("weights" + (" (ranked by $u_i(0)$)" if traj.u is not None else ""))
            elif panel == "u":
                ax.set_ylabel("$u_i(t) = \\langle v_i, \\beta^*\\rangle$")
                ax.set_title("$u = V^\\top\\beta^*$")
            elif panel == "Gamma":
                ax.set_ylabel("$\\Gamma(t) = \\int_0^t \\gamma\\,d\\tau$")
                ax.set_title("polarisation coefficient")
            else:
                ax.set_ylabel("entropy of $s$ (nats)")
                ax.set_title("entropy")
        handles, labels = axes[0][0].get_legend_handles_labels()
        handles += [Line2D([], [], color="k")]
        labels += ["gradient flow"]
        if gd is not None:
            handles += [Line2D([], [], color="k", **_GD)]
            labels += ["gradient descent"]
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6))
        if title is None:
            t_end = float(np.asarray(traj.t_end))
            exp = int(np.floor(np.log10(t_end))) if t_end > 0 else 0
            t_txt = f"10^{{{exp}}}" if t_end == 10.0 ** exp else f"{t_end:.3g}"
            title = (f"{meta.get('model', 'value-softmax')} model, {meta.get('normalization', 'softmax')}: "
                     f"status {traj.status}, {int(np.asarray(traj.num_steps))} steps to $t = {t_txt}$")
        fig.suptitle(title, fontsize=9)
    return fig


def sweep(ds, *, title: str | None = None):
    """Plot a sweep: per configuration, histograms over seeds of the final largest weight
    ``max_i s_i(t1)`` and of the final slope ``dΓ/d log t`` (last two save points).

    **Arguments:** ``ds``: the ``xarray.Dataset`` of :func:`gradflow.attention.sweep.load_sweep` (dims
    ``seed``, the grid's configuration axes, ``t``, ``token``); only written runs (``done``) with
    status ``ok`` are counted. ``title``: figure title (default: the number of seeds and configs).

    **Returns:** a matplotlib ``Figure`` with two axes.

    **Raises:** :class:`gradflow.GradflowValueError` if ``ds`` lacks the sweep's variables.
    """
    import matplotlib.pyplot as plt

    needed = {"s", "Gamma", "time", "done", "status"}
    if not hasattr(ds, "data_vars") or not needed <= set(ds.variables):
        raise bad_arg("ds", type(ds).__name__, f"the xarray Dataset of a gradflow sweep (variables {sorted(needed)})")
    config_dims = [d for d in ds["done"].dims if d != "seed"]
    stacked = ds.stack(config=config_dims) if config_dims else ds.expand_dims(config=[0])
    n_cfg = stacked.sizes["config"]
    cols = _colors(n_cfg)
    with plt.rc_context(STYLE):
        fig, (ax_s, ax_g) = plt.subplots(1, 2, figsize=(WIDTH, 2.4), layout="constrained")
        for k in range(n_cfg):
            one = stacked.isel(config=k)
            keep = np.asarray(one["done"]) & (np.asarray(one["status"]) == "ok")
            if not keep.any():
                continue
            s_last = np.asarray(one["s"].isel(t=-1)).reshape(keep.size, -1)[keep]
            smax = np.nanmax(s_last, axis=1)
            time = np.asarray(one["time"])
            g = np.asarray(one["Gamma"])[keep]
            slope = (g[:, -1] - g[:, -2]) / (np.log(time[-1]) - np.log(time[-2]))
            label = ", ".join(f"{d}={np.asarray(one[d]).item()}" for d in config_dims if ds.sizes[d] > 1) or None
            ax_s.hist(smax, bins=30, color=cols[k], alpha=0.6, label=label)
            ax_g.hist(slope, bins=30, color=cols[k], alpha=0.6, label=label)
        ax_s.set_xlabel("final largest weight $\\max_i s_i(t_1)$")
        ax_s.set_ylabel("seeds")
        ax_s.set_title("how far the weights polarised")
        ax_g.set_xlabel("final slope $d\\Gamma/d\\log t$")
        ax_g.set_title("$\\Gamma = \\Theta(\\log t)$ (Thm 3.3(c))")
        if any(ds.sizes[d] > 1 for d in config_dims):
            ax_s.legend()
        if title is None:
            title = f"sweep: {ds.sizes['seed']} seeds × {n_cfg} configuration{'s' if n_cfg > 1 else ''}"
        fig.suptitle(title, fontsize=9)
    return fig
