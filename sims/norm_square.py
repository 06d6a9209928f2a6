"""``norm-square``: six normalisation maps under the square loss ``½‖Vα − β*‖²`` (paper appendix).

Paper setting: ``n = d = 10``, seed 42, GD lr 0.1 for 5000 iterations (flow time 500). Claim:
under square loss none of the maps polarises much (the loss reaches 0 at a spread ``α``).
Rows: maps; columns ``α_i(t)`` and ``a_i(t)`` (log-x); flow solid, GD markers.
"""

from __future__ import annotations

from . import normalisations as nz
from ._registry import Figure


def config(quick: bool) -> dict:
    return nz.config("square", quick)


def plot(data, cfg):
    return nz.plot(data, cfg, f"Normalisations, square loss $\\frac{{1}}{{2}}\\|V\\alpha-\\beta^*\\|^2$, $n=d={cfg['n']}$, "
                              f"seed {cfg['seed']}: flow to $t={cfg['t1']:g}$ with GD")


FIGURE = Figure(
    id="norm-square",
    title="Six normalisation maps under square loss: alpha_i(t), a_i(t); flow + GD (none polarise)",
    config=config,
    compute=nz.compute,
    plot=plot,
    summary=nz.summary,
)
