"""``kq-classify``: where the flow of factorised key–query attention goes, draw by draw.

Beyond the paper. The ``mm.kq-nuclear`` draws (:func:`gradflow.theory.maxmargin.kq_draws`:
``n = T = d = m = 4``, small random start) followed by the flow to ``t = 1e300`` (quick: 2 draws
to ``1e100``) under :func:`gradflow.integrate_batch`'s defaults, and each draw classified by
:func:`gradflow.theory.kq_limits.classify` (global nuclear att-SVM, another selection's SVM, a
non-global KKT point of the factorised att-SVM, not settled). Tarzanagh, Li, Thrampoulidis, Oymak,
"Transformers as Support Vector Machines" (2023) for the SVMs and the regularisation path;
Lyu & Li (2020) for KKT points.

Time axes are ``log₁₀ t``.

- (a) ``1 − cos`` of ``K Qᵀ(t)`` to the nuclear att-SVM ``W_*`` (solid), the Frobenius one
  ``W_F`` (dotted) and the KKT point a local solve finds near the flow's end (dashed, only
  where it is not ``W_*``), for the first draw of each class.
- (b) The KKT residual of the factorised att-SVM (:func:`gradflow.theory.kq_limits.kkt_residual`)
  along every flow from ``t = 100`` (stored as ``−1`` before, or where a margin is not positive),
  coloured by class; the dashed line is ``mm.kq-kkt``'s threshold at ``1e100``.
- (c) ``σ_2/σ_1`` and ``σ_3/σ_1`` of ``K Qᵀ(t)`` for the drawn draws, with ``W_*``'s values as
  horizontal ticks on the right.
- (d) The regularisation path ``argmin L`` over ``‖K‖² + ‖Q‖² ≤ 2R`` (best of three starts) against
  the flow at the same nuclear norm: ``1 − cos`` to ``W_*`` against ``‖KQᵀ‖_*/‖W_*‖_*``.
"""

from __future__ import annotations

import json
import math

import numpy as np

from gradflow.sims import style
from gradflow.sims._common import phases
from gradflow.sims.build import Figure
from gradflow.theory import kq_limits as kl
from gradflow.theory import maxmargin as tmm


def config(quick: bool) -> dict:
    return {
        "seed": 0,
        "draws": 2 if quick else 16,
        "t1": 1e100 if quick else 1e300,
        "regpath_radii": list(kl.REGPATH_RADII),
        "regpath_starts": ["random", "flow", "aligned"],
    }


def _starts(b: int, K1, Q1, W_nuc) -> dict:
    Ka, Qa = kl.balanced_factors(W_nuc)
    return {"random": np.random.default_rng(b).normal(size=2 * K1.size),
            "flow": np.concatenate([K1.ravel(), Q1.ravel()]),
            "aligned": np.concatenate([Ka.ravel(), Qa.ravel()])}


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    with phases(["flows", "kkt", "regpath"], progress, "kq-classify") as advance:
        W_kq, sol_kq, W_w, sol_w, draws, _ = tmm.kq_flows(cfg["draws"], cfg["seed"], float(cfg["t1"]))
        if not np.all(np.asarray(sol_kq.status_code) == 0):
            raise RuntimeError(f"kq-classify: factorised flow not ok: {sol_kq.status}")
        t = np.asarray(sol_kq.t, float)
        t = t[0] if t.ndim > 1 else t
        Ks, Qs = np.asarray(sol_kq.params["K"]), np.asarray(sol_kq.params["Q"])
        datas = [dr[0] for dr in draws]
        advance("flows")
        verdict = kl.kkt_verdict(t, Ks, Qs, datas)
        ev = kl.evidence(draws, t, W_kq, verdict)
        advance("kkt")
        B = len(draws)
        nuc = np.asarray([e["nuc_W"] for e in ev])
        fro = np.asarray([e["fro_W"] for e in ev])
        pol = np.asarray([e["polish_W"] for e in ev])
        c = {name: np.stack([tmm._one_minus_cos(W_kq[b], ref[b]) for b in range(B)])
             for name, ref in (("nuc", nuc), ("fro", fro), ("polish", pol))}
        sv = np.linalg.svd(W_kq, compute_uv=False)
        nuc_norm_flow = sv.sum(axis=-1) / np.linalg.norm(nuc, "nuc", axis=(1, 2))[:, None]
        radii_u = np.asarray(cfg["regpath_radii"], float)
        reg_c = np.zeros((B, len(cfg["regpath_starts"]), len(radii_u)))
        reg_val, reg_ok = np.zeros_like(reg_c), np.zeros_like(reg_c, dtype=bool)
        reg_c_flow = np.zeros_like(reg_c)
        for b, dr in enumerate(draws):
            starts = _starts(b, Ks[b, -1], Qs[b, -1], nuc[b])
            radii = radii_u * float(np.linalg.norm(nuc[b], "nuc"))
            for s, name in enumerate(cfg["regpath_starts"]):
                Wp, val, ok = kl.kq_regularisation_path(dr[0], radii, starts[name])
                reg_c[b, s], reg_val[b, s], reg_ok[b, s] = tmm._one_minus_cos(Wp, nuc[b]), val, ok
                reg_c_flow[b, s] = tmm._one_minus_cos(Wp, W_kq[b, -1])
        advance("regpath")
    return {
        "t": t, "c_nuc": c["nuc"], "c_fro": c["fro"], "c_polish": c["polish"],
        "kkt_r": np.nan_to_num(np.asarray(verdict.details["kkt_residual_t"], float), nan=-1.0, posinf=-1.0),
        "sv": sv / sv[..., :1],
        "nuc_norm_flow": nuc_norm_flow, "sv_nuc": np.linalg.svd(nuc, compute_uv=False) / np.linalg.norm(nuc, 2, axis=(1, 2))[:, None],
        "c_nuc_w": np.stack([tmm._one_minus_cos(W_w[b], nuc[b]) for b in range(B)]),
        "c_fro_w": np.stack([tmm._one_minus_cos(W_w[b], fro[b]) for b in range(B)]),
        "reg_c": reg_c, "reg_log_excess": reg_val, "reg_ok": reg_ok, "reg_c_flow": reg_c_flow,
        "steps": np.asarray(sol_kq.num_steps), "steps_w": np.asarray(sol_w.num_steps),
        "evidence_json": np.asarray(json.dumps(ev, default=float)),
    }


def _evidence(data: dict) -> list[dict]:
    return json.loads(str(data["evidence_json"]))


def summary(data: dict, cfg: dict) -> dict:
    ev = _evidence(data)
    best = np.argmin(data["reg_log_excess"][:, :, -1], axis=1)
    t = data["t"]
    late = t >= 1e30
    rows = []
    for b, e in enumerate(ev):
        cs, cf, cp = e["one_minus_cos_nuc_sel"], e["one_minus_cos_fro_sel"], e["one_minus_cos_polish"]
        rows.append({
            "offset": e["offset"], "class": e["class"], "selection_is_optimal": e["selection_is_optimal"],
            "one_minus_cos_nuc_1e30": cs["1e30"], "one_minus_cos_nuc_half": cs["half"], "one_minus_cos_nuc_t1": cs["t1"],
            "one_minus_cos_fro_t1": cf["t1"], "rate_k": e["rate_k_nuc_sel"],
            "kkt_r_half": e["kkt_r_half"], "kkt_r_t1": e["kkt_r_t1"], "kkt_G_op": e["kkt_G_op"],
            "rank_t1": e["rank_t1"], "rank_nuc": e["rank_nuc_sel"],
            # σ3/σ1 ∝ (log t)^s over t ≥ 1e30: a mode off a KKT point's range grows like (log t)^(g−1),
            # g its gain ‖G_⊥‖ (g − 1 = polish_G_op − 1 at a non-global KKT point, < 0 at the global one)
            "sigma3_slope_loglog_t": float(np.polyfit(np.log(np.log(t[late])), np.log(np.maximum(data["sv"][b, late, 2], 1e-300)), 1)[0]),
            "singular_values_t1": e["singular_values_t1"][:3], "singular_values_nuc": e["singular_values_nuc_sel"][:3],
            "polish_is_nuclear": bool(e["polish_excess"] <= kl.POLISH_EXCESS), "polish_excess": e["polish_excess"],
            "polish_G_op": e["polish_G_op"], "polish_one_minus_cos_nuc": e["polish_one_minus_cos_nuc"],
            "one_minus_cos_polish_t1": cp["t1"],
            "regpath_one_minus_cos_nuc_Rmax": float(data["reg_c"][b, best[b], -1]),
            "regpath_best_start": cfg["regpath_starts"][int(best[b])],
            "regpath_starts_one_minus_cos_nuc_Rmax": data["reg_c"][b, :, -1].tolist(),
            "regpath_starts_log_excess_Rmax": data["reg_log_excess"][b, :, -1].tolist(),
            "flow_nuclear_norm_over_nuc_t1": float(data["nuc_norm_flow"][b, -1]),
            "combined_w_one_minus_cos_fro_t1": float(data["c_fro_w"][b, -1]),
            "steps": int(data["steps"][b]), "steps_combined_w": int(data["steps_w"][b]),
        })
    counts = {k: sum(r["class"] == k for r in rows) for k in kl.CLASSES}
    return {"t1": float(cfg["t1"]), "class_counts": counts, "draws": rows,
            "regpath_radii_over_nuc": list(cfg["regpath_radii"]), "regpath_all_ok": bool(np.all(data["reg_ok"]))}


_CLASS_COLOUR = dict(zip(kl.CLASSES, ("C0", "C2", "C3", "C1")))


def plot(data: dict, cfg: dict):
    ev = _evidence(data)
    classes = [e["class"] for e in ev]
    shown = [classes.index(k) for k in kl.CLASSES if k in classes]
    fig, axes = style.figure(2, 2, height=5.2)
    (ax_a, ax_b), (ax_c, ax_d) = axes
    t = data["t"]
    keep = t >= 1.0
    lt = np.log10(np.where(keep, t, 1.0))  # log10 t on a linear axis: a log axis over 300 decades overflows its margins
    for b in shown:
        col = _CLASS_COLOUR[classes[b]]
        ax_a.plot(lt[keep], data["c_nuc"][b, keep], color=col, **style.FLOW, label=f"draw {ev[b]['offset']}: {classes[b]}")
        ax_a.plot(lt[keep], data["c_fro"][b, keep], color=col, linestyle=":", linewidth=1.0)
        if ev[b]["polish_excess"] > kl.POLISH_EXCESS:
            ax_a.plot(lt[keep], data["c_polish"][b, keep], color=col, linestyle="--", linewidth=1.0,
                      label=f"draw {ev[b]['offset']}: KKT point near its end")
        ax_c.plot(lt[keep], data["sv"][b, keep, 1], color=col, **style.FLOW, label=f"draw {ev[b]['offset']}")
        ax_c.plot(lt[keep], np.maximum(data["sv"][b, keep, 2], 1e-12), color=col, linestyle="--", linewidth=1.0)
        for k in (1, 2):
            if data["sv_nuc"][b, k] > 1e-6:
                ax_c.axhline(data["sv_nuc"][b, k], color=col, linestyle=":", linewidth=0.7)
    ax_a.set(yscale="log", xlabel=r"$\log_{10} t$", ylabel=r"$1-\cos(KQ^\top, \cdot)$",
             title=r"(a) to $W_*$ (solid), $W_F$ (dotted), other KKT point (dashed)")
    ax_a.legend(loc="lower left", fontsize=style.NOTE)
    seen = set()
    for b, k in enumerate(classes):
        ok = keep & (data["kkt_r"][b] > 0)
        ax_b.plot(lt[ok], data["kkt_r"][b, ok], color=_CLASS_COLOUR[k], linewidth=0.9, label=None if k in seen else k)
        seen.add(k)
    ax_b.axhline(kl.KKT_TOL, color="k", linestyle="--", linewidth=0.7)
    ax_b.set(yscale="log", xlabel=r"$\log_{10} t$", ylabel="KKT residual",
             title="(b) KKT residual (factorised att-SVM), all draws")
    ax_b.legend(loc="lower left", fontsize=style.NOTE)
    ax_c.set(yscale="log", xlabel=r"$\log_{10} t$", ylabel=r"$\sigma_k/\sigma_1$ of $KQ^\top$",
             title=r"(c) $\sigma_2/\sigma_1$ (solid), $\sigma_3/\sigma_1$ (dashed); $W_*$ dotted")
    ax_c.set_ylim(1e-5, 2)
    ax_c.legend(loc="lower left", fontsize=style.NOTE)
    best = np.argmin(data["reg_log_excess"][:, :, -1], axis=1)
    radii = np.asarray(cfg["regpath_radii"], float)
    for b, k in enumerate(classes):
        col = _CLASS_COLOUR[k]
        ax_d.plot(radii, data["reg_c"][b, best[b]], color=col, marker="o", markersize=2.5, linewidth=0.8,
                  label="regularisation path" if b == 0 else None)
        ax_d.plot(data["nuc_norm_flow"][b, keep], data["c_nuc"][b, keep], color=col, linewidth=0.6, alpha=0.6,
                  label="flow" if b == 0 else None)
    ax_d.set(xscale="log", yscale="log", xlim=(0.5, 2e3), xlabel=r"$\|KQ^\top\|_*/\|W_*\|_*$",
             ylabel=r"$1-\cos(KQ^\top, W_*)$", title="(d) regularisation path vs flow, equal nuclear norm")
    ax_d.legend(loc="lower left", fontsize=style.NOTE)
    return fig


FIGURE = Figure(
    title="Beyond the paper: where factorised key-query attention goes (t = 1e300): KKT points of the factorised att-SVM, draw by draw",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)


# --------------------------------------------------------------------------------------------
# the table on docs/kq-nuclear.md, generated from figures/kq-classify.json
# --------------------------------------------------------------------------------------------

DOCS_PAGE = "docs/kq-nuclear.md"
TABLE_OPEN, TABLE_CLOSE = "<!-- generated:kq-classify -->", "<!-- /generated:kq-classify -->"


def _g(x: float, digits: int = 2) -> str:
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return "—"
    return f"{x:.{digits}g}" if abs(x) >= 1e-3 else f"{x:.1e}"


def _sv(x: float) -> str:
    """A singular value of ``W_*`` over ``σ_1``: 0 below the rank tolerance of ``att_svm_nuclear`` (1e-6)."""
    return "0" if x < 1e-6 else _g(x)


def docs_table(summary: dict) -> str:
    """The per-draw table of :func:`summary` as Markdown (one row per draw, the class first)."""
    head = ("| draw | class | \\(1-\\cos\\) to \\(W_*\\) at \\(10^{30}\\) / \\(10^{150}\\) / \\(10^{300}\\) | \\(k\\) | "
            "to \\(W_F\\) at \\(10^{300}\\) | KKT residual \\(10^{150}\\) / \\(10^{300}\\) | "
            "\\(\\sigma_2/\\sigma_1\\), \\(\\sigma_3/\\sigma_1\\) of \\(KQ^\\top\\) (of \\(W_*\\)) | "
            "\\(\\sigma_3\\) slope in \\(\\log\\log t\\) | KKT point near the end | path at \\(R = 300\\lVert W_*\\rVert_*\\) | steps |")
    rows = [head, "|" + "---|" * 11]
    for r in summary["draws"]:
        sv, svn = r["singular_values_t1"], r["singular_values_nuc"]
        near = ("\\(W_*\\)" if r["polish_is_nuclear"] else
                f"other: excess {_g(r['polish_excess'])}, \\(\\lVert G\\rVert_{{op}}\\) {r['polish_G_op']:.3f}, "
                f"{_g(r['polish_one_minus_cos_nuc'])} from \\(W_*\\), flow {_g(r['one_minus_cos_polish_t1'])} from it")
        rows.append(
            f"| {r['offset']} | {r['class']}{'' if r['selection_is_optimal'] else ' (selection differs)'} | "
            f"{_g(r['one_minus_cos_nuc_1e30'])} / {_g(r['one_minus_cos_nuc_half'])} / {_g(r['one_minus_cos_nuc_t1'])} | "
            f"{r['rate_k']:.2f} | {_g(r['one_minus_cos_fro_t1'])} | {_g(r['kkt_r_half'])} / {_g(r['kkt_r_t1'])} | "
            f"{_g(sv[1])}, {_g(sv[2])} ({_sv(svn[1])}, {_sv(svn[2])}) | {r['sigma3_slope_loglog_t']:+.2f} | {near} | "
            f"{_g(r['regpath_one_minus_cos_nuc_Rmax'])} | {r['steps']} |")
    return "\n".join(rows) + "\n"


FRESH_JSON = "figures/kq-classify-fresh.json"
"""The classification of the fresh draws (data seed 1, the draws of ``mm.kq-kkt-rate``), written by
:func:`compute_fresh`."""
FRESH_OPEN, FRESH_CLOSE = "<!-- generated:kq-classify-fresh -->", "<!-- /generated:kq-classify-fresh -->"


def compute_fresh(root: str = ".", seed: int = kl.KKT_RATE_SEED_OFFSET) -> dict:
    """Classify the 16 draws of ``seed`` (default 1: the fresh draws of ``mm.kq-kkt-rate``) as the
    figure does its own (:func:`compute`, :func:`summary`, full settings) and write
    ``{"config", "summary", "seconds", "provenance"}`` to :data:`FRESH_JSON` (atomically)."""
    import os
    import time

    from gradflow.io import atomic_write
    from gradflow.sims.build import provenance

    cfg = {**config(False), "seed": seed}
    start = time.perf_counter()
    s = summary(compute(cfg), cfg)
    out = {"config": cfg, "summary": s, "seconds": round(time.perf_counter() - start, 1), "provenance": provenance()}
    text = json.dumps(out, indent=1, default=float)
    atomic_write(os.path.join(root, FRESH_JSON), lambda f: f.write(text.encode()))
    return out


def write_docs(root: str = ".", check: bool = False) -> bool:
    """Rewrite the blocks between :data:`TABLE_OPEN` and :data:`TABLE_CLOSE` (from
    ``figures/kq-classify.json``) and between :data:`FRESH_OPEN` and :data:`FRESH_CLOSE` (from
    :data:`FRESH_JSON`) on :data:`DOCS_PAGE`; with ``check`` write nothing. Returns whether the page
    was current."""
    import os

    from gradflow.sims._common import write_block

    current = True
    for name, opening, closing in (("figures/kq-classify.json", TABLE_OPEN, TABLE_CLOSE),
                                   (FRESH_JSON, FRESH_OPEN, FRESH_CLOSE)):
        with open(os.path.join(root, name)) as f:
            summary_ = json.load(f)["summary"]
        current &= write_block(os.path.join(root, DOCS_PAGE), opening, closing, docs_table(summary_), check)
    return current


if __name__ == "__main__":  # python -m gradflow.sims.beyond.kq_classify [--check | --fresh]
    import sys

    if "--fresh" in sys.argv:
        print(json.dumps(compute_fresh()["summary"]["class_counts"]))
    current = write_docs(check="--check" in sys.argv)
    sys.exit(0 if current or "--check" not in sys.argv else 1)
