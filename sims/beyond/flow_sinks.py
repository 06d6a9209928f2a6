"""``flow-sinks``: does the exact gradient flow itself make attention sinks in the Sec. 4 transformer?

Beyond the paper. The paper (Sec. 3) shows that gradient flow polarises softmax outputs and
offers this as the mechanism behind attention sinks, but its Sec. 4 evidence trains transformers
with Adam. Here the Sec. 4 induction transformer (:mod:`gradflow.sims.sec4`: pre-LN blocks, MLP,
``N(0, 1)`` embeddings, biased projections, shifted query ids, loss = last-position cross-entropy
+ 0.2 × next-token cross-entropy of positions 0…10; the authors' initialisation of run seed 0)
is trained three ways from the **same** initial parameters on the **same** fixed training set
(``n_train`` sequences, full batch, float64):

- **flow**: :func:`gradflow.integrate` of ``dθ/dt = −∇L(θ)`` (gallery: ``solver="auto"``, Dopri8
  in log time until the flow turns stiff, then the Hessian-free ``rodas4-krylov``; quick:
  Dopri8), ``max_steps`` solver steps, saves log-spaced in flow time ``t``;
- **GD**: :func:`gradflow.descend_params` with ``optax.sgd(lr_gd)``, at flow time ``t = lr_gd·k``,
  run to the flow time the flow reached (GD is the explicit Euler scheme of the flow);
- **Adam**: the authors' optimiser (``optax.adamw(1e-3, weight_decay=0.01)``, as
  :mod:`gradflow.sims.sec4.train` runs it) on the same full-batch loss, on its own axis of steps.

Along each: the layer-2 BOS share of every head (:func:`gradflow.sims.sec4.train.bos_share`:
per evaluation sequence Σ BOS weight / Σ all weights over the rows of ``t_1 … t_9``, averaged;
a sink head has share > 0.9), the induction accuracy on ``n_test`` fresh evaluation sequences
(:func:`gradflow.sims.sec4.train.measure`) and the training loss. One row per attention kernel:
softmax and a kernel without sinks under Adam in the paper (``linear`` without normalisation;
paper Table 1).

Scale: the paper runs d_model 128 on 100k fresh sequences; a flow needs a fixed loss, and every
solver step costs several full-batch gradients or Hessian–vector products, so the sizes here are
far smaller (``config``): d_model 8, 2 heads, 32 sequences, in the gallery (300 flow steps, Adam
3000) and ``--quick`` (CI: Dopri8, 30 steps, Adam 200). ``LARGER`` (d_model 16, 4 heads, 256
sequences) is defined but not built. On so few sequences the model memorises instead of learning
induction (under Adam too), which the figure states.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradflow

from gradflow.sims import style
from gradflow.sims._common import phases
from gradflow.sims.build import Figure
from gradflow.sims.grids import flow_times
from gradflow.sims.sec4.train import _data, _loss, _model, _seeds, induction_config, measure

__all__ = ["config", "setup", "flow", "descent", "compute", "plot", "summary", "FIGURE"]

OPTIMISERS = ("flow", "gd", "adam")


def config(quick: bool) -> dict:
    """Settings (JSON): the model and data (``d_model``, ``n_layers``, ``n_heads``, ``n_train``
    fixed training sequences, ``n_test`` evaluation sequences, ``seed``), the kernels
    (``[kernel, normalization]`` pairs), the flow (``t1``, ``max_steps``, ``rtol``, ``points``
    log-spaced saves from ``t_min``), GD (``lr_gd``, ``gd_points`` records, ``gd_max_steps`` cap)
    and Adam (``adam_lr``, ``adam_wd``, ``adam_steps``, ``adam_points``)."""
    base = dict(seed=0, n_layers=2, vocab=50, aux_weight=0.2, kernels=[["softmax", True], ["linear", False]],
                t1=1e4, t_min=1e-2, rtol=1e-6, solver="dopri8", lr_gd=0.03, adam_lr=1e-3, adam_wd=0.01)
    quick_sizes = {"scale": "quick", "d_model": 8, "n_heads": 2, "n_train": 32, "n_test": 200, "max_steps": 30,
                   "points": 16, "gd_points": 12, "gd_max_steps": 400, "adam_steps": 200, "adam_points": 12}
    if quick:
        return {**base, **quick_sizes}
    # The gallery: the same model and data, followed 10x further: solver "auto" (Dopri8 until the
    # flow turns stiff, then the Hessian-free Rosenbrock-Krylov method: 3,556 states are above
    # gradflow's Krylov threshold; pinned by KRYLOV_POLICY, as the committed figure was computed
    # before auto ran rkc there), 300 steps; Adam 3000 steps (its loss then below the flow's).
    return {**base, **quick_sizes, "scale": "gallery", "solver": "auto", "max_steps": 300, "points": 20,
            "gd_points": 16, "gd_max_steps": 6000, "adam_steps": 3000, "adam_points": 16}


LARGER = {"scale": "larger", "d_model": 16, "n_heads": 4, "n_train": 256, "n_test": 500, "max_steps": 200,
          "points": 30, "gd_points": 24, "gd_max_steps": 2000, "adam_steps": 1500, "adam_points": 24}
"""A larger size (one Dopri8 step ~1.8 s on busy cores; AdamW memorises there too: 4000 steps,
loss 0.29, no sink, accuracy at chance): defined, not built."""


def run_config(cfg: dict, kernel: str, normalization: bool):
    """The :class:`gradflow.sims.sec4.train.RunConfig` of one kernel at the figure's sizes
    (full batch: ``batch = n_train``)."""
    return induction_config(kernel, normalization, cfg["seed"], d_model=cfg["d_model"], n_layers=cfg["n_layers"],
                            n_heads=cfg["n_heads"], vocab=cfg["vocab"], n_train=cfg["n_train"],
                            batch=cfg["n_train"], n_test=cfg["n_test"], aux_weight=cfg["aux_weight"])


def setup(run_cfg):
    """The flow's ingredients for run ``run_cfg`` (a Sec. 4 ``RunConfig``).

    **Returns:** ``(loss, params0, args, static)``: ``loss(params, args)`` the full-batch Sec. 4
    induction loss (last-position cross-entropy + ``aux_weight`` × the mean next-token
    cross-entropy of the other positions) on the fixed training set; ``params0`` the float64
    pytree of the model's inexact leaves at the authors' initialisation (run seed
    ``run_cfg.seed``); ``args = (x (n_train, T) int32, y (n_train, T) int32)``; ``static`` the
    rest of the model (``eqx.combine(params, static)`` rebuilds it).
    """
    train_seed, _ = _seeds(run_cfg)
    x, y = _data(run_cfg, train_seed, run_cfg.n_train)
    params, static = eqx.partition(_model(run_cfg), eqx.is_inexact_array)
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
    aux = float(run_cfg.aux_weight)

    def loss(p, args):
        return _loss(eqx.combine(p, static), args[0], args[1], "induction", aux)

    return loss, params, (jnp.asarray(x), jnp.asarray(y)), static


KRYLOV_POLICY = gradflow.AutoPolicy(stabilised_min_state=2**62)
"""``auto`` with ``rodas4-krylov`` as the stiff phase of large gradient flows (the stabilised
explicit ``rkc`` out of reach): the policy the committed gallery figure was computed with, before
``auto`` ran ``rkc`` there. :func:`flow` runs every ``solver="auto"`` flow (the gallery build's)
under it, so that a rebuild computes the committed figure."""


def flow(loss, params0, args, *, t1: float, ts, max_steps: int, rtol: float, solver: str = "dopri8"):
    """:func:`gradflow.integrate` of the full-batch loss (no rest stop: a transformer's loss is not
    at rest within reach); returns its :class:`gradflow.Solution` (status ``max_steps`` when the
    step budget ends the run before ``t1``; ``t_end`` says how far it got). ``solver="auto"`` runs
    under :data:`KRYLOV_POLICY` (Dopri8, then ``rodas4-krylov``)."""
    extra = {"policy": KRYLOV_POLICY} if solver == "auto" else {}
    return gradflow.integrate(loss, params0, t1=t1, ts=ts, args=args, solver=solver, max_steps=max_steps,
                              rtol=rtol, rest_stop=False, **extra)


def descent(loss, params0, args, *, steps: int, record, lr: float, optimizer=None):
    """:func:`gradflow.descend_params`: GD (``optimizer=None``: ``θ ← θ − lr·∇L``, flow time
    ``t = lr·k``) or any optax optimiser on the same loss, recorded at iterations ``record``."""
    return gradflow.descend_params(loss, params0, lr=lr, steps=steps, record=np.asarray(record), args=args,
                                   optimizer=optimizer)


def _int_grid(n: int, points: int) -> np.ndarray:
    """``0`` and about ``points`` log-spaced iterations in ``[1, n]`` (``n`` included)."""
    return np.unique(np.concatenate([[0], np.round(np.geomspace(1, n, points)).astype(int), [n]]))


def _measure(sol, static, run_cfg) -> dict:
    """Layer-2 BOS share ``(P, H)`` and induction accuracy ``(P,)`` at each saved point of ``sol``."""
    bos, acc = [], []
    for i in range(len(np.asarray(sol.t))):
        p = jax.tree.map(lambda a: a[i], sol.params)
        m = measure(eqx.combine(p, static), run_cfg)
        bos.append(m["bos_share"][-1])
        acc.append(m["induction_acc"])
    return {"bos": np.asarray(bos), "acc": np.asarray(acc)}


def _pad(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` along axis 0 padded to length ``n`` with its last entry (the npz holds fixed shapes)."""
    a = np.asarray(a)
    return np.concatenate([a, np.repeat(a[-1:], n - len(a), axis=0)]) if len(a) < n else a


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    """Per kernel ``i`` and optimiser ``o`` in :data:`OPTIMISERS`: ``o_t (K, P)`` flow time (Adam:
    the step), ``o_k (K, P)`` iteration (flow: solver steps are not saved per point; 0),
    ``o_valid (K, P)``, ``o_loss (K, P)``, ``o_bos (K, P, H)``, ``o_acc (K, P)``; and the flow's
    ``flow_t_end``, ``flow_status``, ``flow_steps``, ``gd_steps`` and wall seconds ``o_seconds``."""
    P = max(cfg["points"] + 1, cfg["gd_points"] + 2, cfg["adam_points"] + 2)
    out: dict[str, list] = {}
    names = [f"{k}-{'norm' if n else 'raw'}" for k, n in cfg["kernels"]]
    with phases([f"{n} {o}" for n in names for o in OPTIMISERS], progress, "flow-sinks") as advance:
        for (kernel, norm), name in zip(cfg["kernels"], names):
            rc = run_config(cfg, kernel, bool(norm))
            loss, p0, args, static = setup(rc)
            runs = {}
            t0 = time.perf_counter()
            ts = flow_times(cfg["t1"], cfg["points"], t_min=cfg["t_min"])
            sol = flow(loss, p0, args, t1=cfg["t1"], ts=ts, max_steps=cfg["max_steps"], rtol=cfg["rtol"],
                       solver=cfg["solver"])
            runs["flow"] = (sol, time.perf_counter() - t0)
            advance(f"{name} flow")
            t_end = float(sol.t_end)
            gd_steps = int(min(cfg["gd_max_steps"], max(1, np.ceil(t_end / cfg["lr_gd"]))))
            t0 = time.perf_counter()
            gd = descent(loss, p0, args, steps=gd_steps, record=_int_grid(gd_steps, cfg["gd_points"]), lr=cfg["lr_gd"])
            runs["gd"] = (gd, time.perf_counter() - t0)
            advance(f"{name} gd")
            t0 = time.perf_counter()
            adam = descent(loss, p0, args, steps=cfg["adam_steps"], record=_int_grid(cfg["adam_steps"], cfg["adam_points"]),
                           lr=1.0, optimizer=optax.adamw(cfg["adam_lr"], weight_decay=cfg["adam_wd"]))
            runs["adam"] = (adam, time.perf_counter() - t0)  # lr = 1: its t is the step k
            advance(f"{name} adam")
            for o, (s, secs) in runs.items():
                m = _measure(s, static, rc)
                k = np.zeros(len(np.asarray(s.t)), int) if s.k is None else np.asarray(s.k)
                for key, val in (("t", np.asarray(s.t)), ("k", k), ("valid", np.asarray(s.valid)),
                                 ("loss", np.asarray(s.loss)), ("bos", m["bos"]), ("acc", m["acc"])):
                    out.setdefault(f"{o}_{key}", []).append(_pad(val, P))
                out.setdefault(f"{o}_seconds", []).append(secs)
                out.setdefault(f"{o}_steps", []).append(int(np.asarray(s.num_steps)))
                out.setdefault(f"{o}_status", []).append(str(s.status))
                out.setdefault(f"{o}_t_end", []).append(float(s.t_end))
    return {k: np.asarray(v) for k, v in out.items()}


def _curve(data: dict, o: str, i: int):
    keep = np.asarray(data[f"{o}_valid"][i], bool)
    return (data[f"{o}_t"][i][keep], data[f"{o}_bos"][i][keep], data[f"{o}_acc"][i][keep],
            data[f"{o}_loss"][i][keep])


def _label(kernel: str, norm: bool) -> str:
    return kernel + (" (normalised)" if norm else " w/o norm")


def _acc_loss(ax, curves, xlabel: str, title: str) -> tuple[list, list]:
    """Induction accuracy (left axis, black) and training loss (right axis, blue) of ``curves``:
    ``[(t, acc, loss, style kwargs, label)]``; returns the legend's ``(handles, labels)`` (the
    curves fill the panel, so the figure draws one legend for every row under the panels)."""
    ax_l = ax.twinx()
    for t, acc, loss, kw, label in curves:
        pos = t > 0
        ax.plot(t[pos], acc[pos], color="k", label=f"induction acc., {label}", **kw)
        ax_l.plot(t[pos], loss[pos], color="C0", label=f"training loss, {label}", **kw)
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("induction accuracy (evaluation set)", fontsize=style.NOTE)
    ax_l.set_ylabel("training loss", fontsize=style.NOTE, color="C0")
    ax.set_xlabel(xlabel)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax_l.get_legend_handles_labels()
    ax.set_title(title, fontsize=style.NOTE)
    return h1 + h2, l1 + l2


def plot(data: dict, cfg: dict):
    K = len(cfg["kernels"])
    fig, axes = style.figure(K, 4, height=2.6 * K)
    fig.set_size_inches(style.WIDTH * 1.5, 2.6 * K)  # four panels a row: wider than the paper's column
    for i, (kernel, norm) in enumerate(cfg["kernels"]):
        ax_b, ax_a, ax_adam, ax_adam_a = axes[i]
        H = data["flow_bos"].shape[-1]
        cols = style.colors(H)
        tf, bf, af, lf = _curve(data, "flow", i)
        tg, bg, ag, lg = _curve(data, "gd", i)
        ta, ba, aa, la = _curve(data, "adam", i)
        pos_f, pos_g, pos_a = tf > 0, tg > 0, ta > 0
        for h in range(H):
            ax_b.plot(tf[pos_f], bf[pos_f, h], color=cols[h], label=f"head {h}", **style.FLOW)
            ax_b.plot(tg[pos_g], bg[pos_g, h], color=cols[h], **style.GD)
            ax_adam.plot(ta[pos_a], ba[pos_a, h], color=cols[h], marker=".", markersize=3, linewidth=1.0,
                         label=f"head {h}")
        lo = min(0.0, float(np.min(bf)), float(np.min(bg)), float(np.min(ba)))
        hi = max(1.0, float(np.max(bf)), float(np.max(bg)), float(np.max(ba)))
        for ax in (ax_b, ax_adam):
            ax.axhline(0.9, color="0.4", linestyle="--", linewidth=0.7)
            ax.set_xscale("log")
            ax.set_ylim(lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo))
            signed = "\n(signed weights: not a fraction)" if hi > 1.0 or lo < 0.0 else ""
            ax.set_ylabel(f"layer-2 BOS share — {_label(kernel, norm)}{signed}", fontsize=style.NOTE)
            ax.legend(fontsize=style.NOTE, loc="upper left")
        ax_b.axvline(float(data["flow_t_end"][i]), color="0.3", linestyle=":", linewidth=0.8)
        ax_b.set_xlabel("flow time $t$ (GD: $t = \\eta k$)")
        t_end, t_last = float(data["flow_t_end"][i]), float(np.max(tf))
        # a run ended by max_steps stops between save points: its line ends at the last one saved
        reach = (f"flow (lines) to $t$ = {t_end:.3g} (dotted)" if t_last >= t_end * (1 - 1e-9) else
                 f"flow (lines) saved to $t$ = {t_last:.3g}, ran to {t_end:.3g} (dotted)")
        ax_b.set_title(f"{reach}\n{data['flow_status'][i]}, {int(data['flow_steps'][i])} steps; "
                       f"GD $\\eta$ = {cfg['lr_gd']:g} (o), same $t$", fontsize=style.NOTE)
        h_flow, l_flow = _acc_loss(ax_a, [(tf, af, lf, style.FLOW, "flow"), (tg, ag, lg, style.GD, "GD")],
                                   "flow time $t$ (GD: $t = \\eta k$)", "flow and GD:\naccuracy, training loss")
        ax_adam.set_xlabel("Adam step $k$ (not flow time)")
        ax_adam.set_title(f"AdamW lr {cfg['adam_lr']:g}, wd {cfg['adam_wd']:g},\nfull batch, "
                          f"{int(data['adam_steps'][i])} steps", fontsize=style.NOTE)
        h_adam, l_adam = _acc_loss(ax_adam_a, [(ta, aa, la, dict(marker=".", markersize=3, linewidth=1.0), "Adam")],
                                   "Adam step $k$", "Adam:\naccuracy, training loss")
    fig.legend(h_flow + h_adam, l_flow + l_adam, loc="outside lower center", ncol=6, fontsize=style.NOTE)
    fig.suptitle(f"Sinks under the exact flow? Sec. 4 induction transformer, d_model {cfg['d_model']}, "
                 f"{cfg['n_layers']} layers × {cfg['n_heads']} heads, {cfg['n_train']} fixed training sequences "
                 f"(full batch, float64), one init; {cfg['scale']} scale. Dashed: sink threshold 0.9", fontsize=8)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    """Per kernel and optimiser: the optimiser, how far it ran (flow: ``t_end``, ``status``,
    solver ``steps``; GD: ``lr`` and iterations; Adam: steps), and at each recorded point the
    flow time (Adam: step), the layer-2 BOS share of every head, the induction accuracy and the
    training loss; plus the largest final BOS share and wall seconds."""
    out = {}
    for i, (kernel, norm) in enumerate(cfg["kernels"]):
        row = {}
        for o in OPTIMISERS:
            t, b, a, lo = _curve(data, o, i)
            rec = {"optimiser": {"flow": f"gradient flow ({cfg['solver']}, rtol {cfg['rtol']:g})",
                                 "gd": f"GD, lr {cfg['lr_gd']:g}",
                                 "adam": f"AdamW lr {cfg['adam_lr']:g} wd {cfg['adam_wd']:g}"}[o],
                   "axis": "step" if o == "adam" else "flow time",
                   "t_end": float(data[f"{o}_t_end"][i]), "status": str(data[f"{o}_status"][i]),
                   "steps": int(data[f"{o}_steps"][i]), "seconds": round(float(data[f"{o}_seconds"][i]), 1),
                   "t": [float(f"{v:.6g}") for v in t],
                   "bos_share": [[round(float(v), 4) for v in r] for r in b],
                   "induction_acc": [round(float(v), 4) for v in a],
                   "loss": [round(float(v), 5) for v in lo],
                   "final_max_bos_share": round(float(np.max(b[-1])), 4),
                   "final_sink_heads": int(np.sum(b[-1] > 0.9))}
            row[o] = rec
        out[f"{kernel}-{'norm' if norm else 'raw'}"] = row
    return out


FIGURE = Figure(
    title="Beyond the paper: layer-2 BOS share and induction accuracy of the Sec. 4 transformer under the exact "
          "gradient flow, GD and Adam (same init, same fixed data)",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
    long_paper_scale=True,  # the gallery build is ~20 min of 2 cores: reproduce builds it quick
)
