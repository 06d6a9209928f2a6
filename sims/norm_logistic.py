"""``norm-logistic``: six normalisation maps under the logistic teacher loss (paper appendix).

Paper setting: ``n = d = 10``, seed 42, GD lr 0.5 for 1e5 iterations (flow time 5e4). Claim:
the normalised non-negative maps (softmax, L1, L2, ReLU-normalised) polarise; the element-wise
sigmoid and the signed sum map do not. Rows: maps; columns ``α_i(t)``, ``a_i(t)`` (log-x).
"""

from __future__ import annotations

from . import normalisations as nz
from ._registry import Figure


def config(quick: bool) -> dict:
    return nz.config("logistic", quick)


def plot(data, cfg):
    return nz.plot(data, cfg, f"Normalisations, logistic teacher, $n=d={cfg['n']}$, seed {cfg['seed']}: "
                              f"flow to $t={cfg['t1']:g}$ with GD")


FIGURE = Figure(
    id="norm-logistic",
    title="Six normalisation maps under logistic loss: normalised maps polarise, sigmoid does not; flow + GD",
    config=config,
    compute=nz.compute,
    plot=plot,
    summary=nz.summary,
)
