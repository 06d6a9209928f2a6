"""``max-margin``: max-margin token selection (Tarzanagh, Li, Zhang, Oymak, NeurIPS 2023;
Tarzanagh, Li, Thrampoulidis, Oymak, 2023) followed by the flow to ``t = 1e30``.

Beyond the paper. Data: :func:`gradflow.theory.maxmargin.mm_draws` (p-attention ``f(X) = vᵀXᵀsoftmax(Xp)``,
``n = 3`` samples, ``T = 4`` tokens, ``d = 10``, equal non-optimal scores: the setting of global
convergence), ``p(0) = 0``, logistic loss; the flow is :func:`gradflow.integrate_batch`
(rtol 1e-10) in log time.

- (a) ``1 − cos(p(t), p_mm)`` against ``t`` (flow, one line per draw). Markers: GD at the
  authors' published settings (their notebooks: 1000 steps from ``p = 0``-scale starts, plain GD
  ``lr = 1`` and normalised GD ``p ← p − 0.1·∇L/‖∇L‖``). Plain GD sits at flow time ``t = lr·k``;
  normalised GD has no flow time of its own and is drawn at the flow time where the flow's
  ``‖p‖`` equals the iterate's (``‖p‖`` grows monotonically along the flow).
- (b) ``‖p(t)‖`` against ``log t`` with the predicted asymptote slope ``‖p_mm‖`` (dashed).
- (c) The joint ``(p, v)`` flow from ``p(0) = 0``, ``v(0) = v``: ``1 − cos`` of ``p`` to the
  att-SVM and of ``v`` to the max-margin head :func:`gradflow.attention.maxmargin.value_svm`, both for the
  token selection the flow ends on (``argmax_t softmax(X_i p(t1))``; it can differ from the
  fixed-``v`` selection, since ``v`` moves the scores).
- (d) The paper's value-softmax logits as token selection: ``1 − cos(a(t), e_w − 1/n)`` for
  Fig. 2's draw (seed 123, ``n = d = 8``; paper scale adds seeds 124–130, quick stops at
  ``t = 1e12``), ``w`` the winner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import gradflow
from gradflow.attention import maxmargin as mm
from gradflow.theory import maxmargin as tmm

from gradflow.sims import style
from gradflow.sims._common import phases
from gradflow.sims.draws import fig2_init
from gradflow.sims.build import Figure


def config(quick: bool) -> dict:
    return {
        "seed": 0,
        "draws": 2 if quick else 8,
        "t1": 1e30,
        "per_decade": 3 if quick else 6,
        "rtol": 1e-10,
        "gd_steps": 1000,
        "gd_lr": 1.0,
        "ngd_lr": 0.1,
        "joint_draws": 1 if quick else 4,
        "vs_seeds": [123] if quick else list(range(123, 131)),
        "vs_t1": 1e12 if quick else 1e30,
    }


def _one_minus_cos(P, ref):
    return tmm._one_minus_cos(np.asarray(P), np.asarray(ref))


@jax.jit
def _gd(p0, data, lr, normalised, steps_arange):
    """``steps`` GD iterates on :func:`gradflow.attention.maxmargin.p_loss` (optionally normalised)."""

    def step(p, _):
        g = jax.grad(mm.p_loss)(p, data)
        g = jnp.where(normalised, g / (jnp.linalg.norm(g) + 1e-12), g)  # the authors' 1e-12 guard
        return p - lr * g, p

    _, ps = jax.lax.scan(step, p0, steps_arange)
    return ps


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    draws = tmm.mm_draws(cfg["draws"], cfg["seed"])
    datas = [dr[0] for dr in draws]
    p_mm = np.stack([dr[1].w for dr in draws])
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *datas)
    ts = tmm.save_times(cfg["t1"], cfg["per_decade"])
    d = datas[0].X.shape[2]
    out = {"t": ts, "p_mm_norm": np.linalg.norm(p_mm, axis=1)}
    with phases(["flow", "gd", "joint", "value-softmax"], progress, "max-margin") as advance:
        sol = gradflow.integrate_batch(mm.p_loss, jnp.zeros((len(datas), d)), t1=cfg["t1"], ts=ts, args=stacked,
                                       args_batched=True, rtol=cfg["rtol"])
        if not np.all(np.asarray(sol.status_code) == 0):
            raise RuntimeError(f"max-margin: flow not ok: {sol.status}")
        P = np.asarray(sol.params)
        out["flow_err"] = np.stack([_one_minus_cos(P[b], p_mm[b]) for b in range(len(P))])
        out["flow_norm"] = np.linalg.norm(P, axis=2)
        out["flow_steps"] = np.asarray(sol.num_steps)
        advance("flow")
        k = np.arange(cfg["gd_steps"] + 1)  # the iterates p_0 … p_{gd_steps} (gd_steps updates)
        gd_err, gd_norm = {}, {}
        for name, lr, norm in (("gd", cfg["gd_lr"], False), ("ngd", cfg["ngd_lr"], True)):
            ps = jax.vmap(_gd, in_axes=(0, 0, None, None, None))(jnp.zeros((len(datas), d)), stacked, lr, norm, jnp.asarray(k))
            ps = np.asarray(ps)
            gd_err[name] = np.stack([_one_minus_cos(ps[b], p_mm[b]) for b in range(len(ps))])
            gd_norm[name] = np.linalg.norm(ps, axis=2)
        out.update(gd_k=k, gd_err=gd_err["gd"], ngd_err=gd_err["ngd"], ngd_norm=gd_norm["ngd"])
        # normalised GD at the flow time of equal ‖p‖ (0 where its ‖p‖ is beyond the flow's range)
        ngd_t = np.stack([
            np.exp(np.interp(gd_norm["ngd"][b], out["flow_norm"][b, 1:], np.log(ts[1:]), left=np.nan, right=np.nan))
            for b in range(len(datas))
        ])
        out["ngd_t"] = np.where(np.isfinite(ngd_t), ngd_t, 0.0)
        advance("gd")
        J = cfg["joint_draws"]
        jdatas = datas[:J]
        jstack = jax.tree.map(lambda *xs: jnp.stack(xs), *jdatas)
        params0 = {"p": jnp.zeros((J, d)), "v": jnp.stack([dt.v for dt in jdatas])}
        jsol = gradflow.integrate_batch(mm.pv_loss, params0, t1=cfg["t1"], ts=ts, args=jstack, args_batched=True,
                                        rtol=cfg["rtol"])
        if not np.all(np.asarray(jsol.status_code) == 0):
            raise RuntimeError(f"max-margin: joint flow not ok: {jsol.status}")
        JP, JV = np.asarray(jsol.params["p"]), np.asarray(jsol.params["v"])
        jp_err, jv_err, changed = [], [], []
        for b, data in enumerate(jdatas):
            sel = np.argmax(np.asarray(data.X) @ JP[b, -1], axis=1).astype(np.int32)
            changed.append(int(np.sum(sel != np.asarray(data.opt))))
            jp_err.append(_one_minus_cos(JP[b], mm.att_svm(data.X, data.Y, JV[b, -1], sel).w))
            jv_err.append(_one_minus_cos(JV[b], mm.value_svm(data.X, data.Y, sel).w))
        out.update(joint_p_err=np.stack(jp_err), joint_v_err=np.stack(jv_err), joint_selection_changed=np.asarray(changed),
                   joint_v_norm=np.linalg.norm(JV, axis=2), joint_steps=np.asarray(jsol.num_steps))
        advance("joint")
        inits = [fig2_init(s, 8) for s in cfg["vs_seeds"]]
        vts = tmm.save_times(cfg["vs_t1"], cfg["per_decade"])
        traj = gradflow.simulate_batch([gradflow.LogisticTeacher(b) for _, _, b in inits],
                                       np.stack([x[0] for x in inits]), np.stack([x[1] for x in inits]),
                                       t1=cfg["vs_t1"], ts=vts)
        if not traj.ok:
            raise RuntimeError(f"max-margin: value-softmax flow not ok: {traj.status}")
        A = np.asarray(traj.a)
        winners = np.argmax(A[:, -1], axis=1)
        out.update(vs_t=vts, vs_err=np.stack([_one_minus_cos(A[b], tmm.identity_svm(8, int(w)).w)
                                               for b, w in enumerate(winners)]), vs_winner=winners)
        advance("value-softmax")
    return out


def _rates(t, err, t_min=1e6):
    return np.asarray([tmm.fitted_rate(t, e, t_min) for e in err])


def summary(data: dict, cfg: dict) -> dict:
    t, err = data["t"], data["flow_err"]

    def at(x, t0, tt=t):
        return [float(v) for v in x[:, int(np.argmin(np.abs(np.log(np.maximum(tt, 1e-300)) - np.log(t0))))]]

    w = t >= cfg["t1"] * 1e-10
    slopes = [float(np.polyfit(np.log(t[w]), data["flow_norm"][b, w], 1)[0]) / float(data["p_mm_norm"][b])
              for b in range(len(err))]
    return {
        "flow_one_minus_cos_1e4": at(err, 1e4),
        "flow_one_minus_cos_1e12": at(err, 1e12),
        "flow_one_minus_cos_1e30": at(err, 1e30),
        "flow_rate_k": _rates(t, err).tolist(),
        "flow_norm_slope_over_p_mm_norm": slopes,
        "flow_steps": data["flow_steps"].tolist(),
        "gd_lr1_one_minus_cos_step1000": data["gd_err"][:, -1].tolist(),
        "ngd_lr0.1_one_minus_cos_step1000": data["ngd_err"][:, -1].tolist(),
        "ngd_norm_step1000": data["ngd_norm"][:, -1].tolist(),
        "flow_norm_1e30": data["flow_norm"][:, -1].tolist(),
        "ngd_equal_norm_flow_time_step1000 (0: beyond t1)": data["ngd_t"][:, -1].tolist(),
        "joint_p_one_minus_cos_1e30": data["joint_p_err"][:, -1].tolist(),
        "joint_v_one_minus_cos_1e30": data["joint_v_err"][:, -1].tolist(),
        "joint_selection_changed_samples": data["joint_selection_changed"].tolist(),
        "joint_steps": data["joint_steps"].tolist(),
        "value_softmax_one_minus_cos_1e4": at(data["vs_err"], 1e4, data["vs_t"]),
        "value_softmax_t1": float(cfg["vs_t1"]),
        "value_softmax_one_minus_cos_t1": at(data["vs_err"], cfg["vs_t1"], data["vs_t"]),
        "value_softmax_rate_k": _rates(data["vs_t"], data["vs_err"]).tolist(),
    }


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(2, 2, height=4.6)
    (ax_a, ax_b), (ax_c, ax_d) = axes
    t = data["t"]
    keep = t > 0
    cols = style.colors(len(data["flow_err"]))
    for b, c in enumerate(cols):
        ax_a.plot(t[keep], data["flow_err"][b, keep], color=c, **style.FLOW, label="flow" if b == 0 else None)
        k = data["gd_k"][1:]
        sel = np.unique(np.round(np.geomspace(1, len(k), 25)).astype(int)) - 1
        ax_a.plot(cfg["gd_lr"] * k[sel], data["gd_err"][b, 1:][sel], color=c, **{**style.GD, "marker": "o"},
                  label=f"GD, lr {cfg['gd_lr']:g} (t = lr·k)" if b == 0 else None)
        nt = data["ngd_t"][b, 1:][sel]
        inside = nt > 0
        ax_a.plot(nt[inside], data["ngd_err"][b, 1:][sel][inside], color=c, **{**style.GD, "marker": "^"},
                  label=f"normalised GD, lr {cfg['ngd_lr']:g} (at equal ‖p‖)" if b == 0 else None)
        ax_b.plot(np.log(t[keep]), data["flow_norm"][b, keep], color=c, **style.FLOW)
        ax_b.plot(np.log(t[keep]), data["p_mm_norm"][b] * np.log(t[keep]), color=c, linestyle="--", linewidth=0.7)
    ax_a.set(xscale="log", yscale="log", xlabel="flow time t", ylabel=r"$1-\cos(p(t), p_{mm})$",
             title=f"(a) direction, {len(cols)} draws, {cfg['gd_steps']} GD steps")
    ax_a.legend(loc="lower left")
    ax_b.set(xlabel=r"$\log t$", ylabel=r"$\|p(t)\|$", title=r"(b) $\|p\|$ against $\log t$ (dashed: $\|p_{mm}\|\log t$)")
    ax_b.set_xlim(left=0)
    for b in range(len(data["joint_p_err"])):
        c = cols[b]
        ax_c.plot(t[keep], data["joint_p_err"][b, keep], color=c, **style.FLOW, label="p" if b == 0 else None)
        ax_c.plot(t[keep], data["joint_v_err"][b, keep], color=c, linestyle=":", linewidth=1.4, label="v" if b == 0 else None)
    ax_c.set(xscale="log", yscale="log", xlabel="flow time t", ylabel=r"$1-\cos$",
             title=r"(c) joint $(p, v)$ flow vs the SVMs of its final selection")
    ax_c.legend(loc="lower left")
    vt = data["vs_t"]
    vk = vt > 0
    vcols = style.colors(len(data["vs_err"]))
    for b, c in enumerate(vcols):
        ax_d.plot(vt[vk], data["vs_err"][b, vk], color=c, **style.FLOW,
                  label=f"seed {cfg['vs_seeds'][b]}" if b < 3 else None)
    ax_d.set(xscale="log", yscale="log", xlabel="flow time t", ylabel=r"$1-\cos(a(t), e_w - \mathbf{1}/n)$",
             title="(d) value-softmax logits (Fig. 2 draws) as token selection")
    ax_d.legend(loc="lower left")
    return fig


FIGURE = Figure(
    title="Beyond the paper: max-margin token selection followed to t = 1e30 (flow, GD, joint (p, v), value-softmax link)",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
    version=2,  # 2: GD keys at p_{gd_steps} (was p_{gd_steps - 1}); value-softmax at its own t1
)
