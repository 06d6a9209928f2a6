"""Default random experiments (the draws and runs) shared by several checks, and small helpers.

Every experiment draws trial ``k`` from ``numpy.random.default_rng([seed, k])``, groups trials by
shape so that each group is one :func:`gradflow.simulate_batch` call (``vmap`` over seeds),
and is cached per ``(trials, seed)`` so that the checks that share it integrate it once.

Logistic experiment (Assumption 3.1: ``a(0) = 0``; ``u(0)`` distinct almost surely):
trial ``k`` has shape ``(d, n) = SHAPES[k % len(SHAPES)]``, ``V(0) = c·randn(d, n)`` with
``c = 10^U(-1.3, 0)`` and a teacher ``β* = ρ·g/‖g‖``, ``g ~ N(0, I)``, ``ρ = 10^U(-0.3, 0.3)``.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import gradflow
from gradflow import maps as _maps

__all__ = [
    "SHAPES",
    "LOGISTIC_T1",
    "SQUARE_T1",
    "lanes",
    "logistic_trials",
    "square_trials",
    "AscentLoss",
    "SwitchMapModel",
    "late_window",
    "fit_line",
]

SHAPES = ((6, 6), (4, 8))
"""``(d, n)`` of the logistic experiment's shape groups (trial ``k`` uses ``SHAPES[k % 2]``)."""

LOGISTIC_T1 = 1e12
"""Horizon of the logistic experiment (flow time); cheap in log time (a few dozen Dopri8 steps)."""

SQUARE_T1 = 1e4
"""Horizon of the square-loss experiment (Lemma 3.5); Γ has converged long before."""


def lanes(traj: gradflow.Trajectory) -> list[dict]:
    """Split a (batched or single) trajectory into per-run dicts of NumPy arrays,
    keeping only the saved points the run reached (``valid``)."""
    names = ("t", "V", "a", "s", "loss", "Gamma", "entropy", "u")
    out = []
    batch = [traj[i] for i in range(np.shape(traj.status_code)[0])] if traj.batched else [traj]
    for tr in batch:
        valid = np.asarray(tr.valid, bool)
        lane = {k: (None if getattr(tr, k) is None else np.asarray(getattr(tr, k))[valid]) for k in names}
        lane["ok"] = int(np.asarray(tr.status_code)) == 0
        lane["status"] = tr.status
        out.append(lane)
    return out


def as_list(x, n: int) -> list:
    """``x`` repeated ``n`` times unless it already is a sequence of length ``n``."""
    if isinstance(x, (list, tuple)):
        if len(x) != n:
            raise gradflow.GradflowValueError(f"losses: got {len(x)}; expected one per trajectory ({n})")
        return list(x)
    return [x] * n


def late_window(t: np.ndarray, t1: float, decades: float = 4.0) -> np.ndarray:
    """Mask of saved times in the last ``decades`` decades before ``t1`` (``t ≥ t1·10^-decades``)."""
    return t >= t1 * 10.0 ** (-decades)


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares ``y ≈ slope·x + intercept``; returns ``(slope, intercept)``."""
    if x.size < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


class AscentLoss(gradflow.AbstractLoss):
    """``−ℓ`` for a wrapped loss: the flow of this loss is the *reversed* field (gradient ascent
    on ``ℓ``). Used as a negative control. Keeps the wrapped loss's teacher (so ``u = Vᵀβ*`` is
    still recorded) and its ``γ``."""

    inner: gradflow.AbstractLoss

    def __call__(self, beta):
        return -self.inner(beta)

    @property
    def teacher(self):
        return self.inner.teacher

    @property
    def dim(self) -> int:
        return self.inner.dim

    def gamma(self, beta):
        return self.inner.gamma(beta)


_SWITCH_MAPS = ("softmax", "l1", "sum", "l2", "relu", "sigmoid")


class SwitchMapModel(gradflow.ValueSoftmax):
    """Value-softmax model ``β = V·map_k(a)`` whose map index ``k`` is a traced array, so that one
    compiled solve serves all the maps of :data:`_SWITCH_MAPS` (the paper's appendix normalisation experiments).
    Uses the engine's maps from :data:`gradflow.attention.maps.MAPS`; entropy of ``|s|/Σ|s|``."""

    map_index: jax.Array = eqx.field(default=0, converter=lambda x: jnp.asarray(x, jnp.int32))

    def weights(self, V, a):
        z = a / self.temperature
        return jax.lax.switch(self.map_index, [_maps.MAPS[name] for name in _SWITCH_MAPS], z)

    def entropy(self, V, a):
        return _maps.weights_entropy(self.weights(V, a))


def _logistic_draw(rng: np.random.Generator, d: int, n: int):
    scale_v = 10.0 ** rng.uniform(-1.3, 0.0)
    rho = 10.0 ** rng.uniform(-0.3, 0.3)
    g = rng.standard_normal(d)
    beta = rho * g / np.linalg.norm(g)
    V0 = scale_v * rng.standard_normal((d, n))
    return V0, beta, scale_v, rho


@functools.lru_cache(maxsize=8)
def logistic_draws(trials: int, seed: int) -> tuple:
    """Initial conditions of the logistic experiment, grouped by shape.

    **Returns:** a tuple of groups, one per used shape; each group is a dict with ``shape``,
    ``trial_ids``, ``V0s (B, d, n)``, ``a0s (B, n)`` (zeros), ``betas (B, d)``, ``scales_V``, ``rhos``.
    """
    groups = []
    for g, (d, n) in enumerate(SHAPES):
        ids = [k for k in range(trials) if k % len(SHAPES) == g]
        if not ids:
            continue
        draws = [_logistic_draw(np.random.default_rng([seed, k]), d, n) for k in ids]
        groups.append(
            dict(
                shape=(d, n),
                trial_ids=ids,
                V0s=np.stack([x[0] for x in draws]),
                a0s=np.zeros((len(ids), n)),
                betas=np.stack([x[1] for x in draws]),
                scales_V=[x[2] for x in draws],
                rhos=[x[3] for x in draws],
            )
        )
    return tuple(groups)


@functools.lru_cache(maxsize=8)
def logistic_trials(trials: int, seed: int) -> tuple:
    """The logistic-teacher flow of every trial of :func:`logistic_draws` to ``t1 = 1e12``.

    **Returns:** a tuple of ``(traj, losses, group)`` per shape group, ``traj`` batched over the
    group's trials, ``losses`` the list of :class:`gradflow.LogisticTeacher`.
    """
    out = []
    for grp in logistic_draws(trials, seed):
        losses = [gradflow.LogisticTeacher(b) for b in grp["betas"]]
        traj = gradflow.simulate_batch(losses, grp["V0s"], grp["a0s"], t1=LOGISTIC_T1)
        out.append((traj, losses, grp))
    return tuple(out)


@functools.lru_cache(maxsize=8)
def ascent_trials(trials: int, seed: int, t1: float = 1e4) -> tuple:
    """Negative control: the *reversed* field (ascent on the logistic loss) from the first shape
    group's initial conditions. Returns ``(traj, losses)``."""
    grp = logistic_draws(trials, seed)[0]
    losses = [AscentLoss(gradflow.LogisticTeacher(b)) for b in grp["betas"]]
    traj = gradflow.simulate_batch(losses, grp["V0s"], grp["a0s"], t1=t1, solver="dopri8")
    return traj, losses


def reversed_logits_trials(trials: int, seed: int, t1: float = 1e4, spread: float = 3.0) -> tuple:
    """Negative control breaking Assumption 3.1: the logistic flow from the first shape group's
    ``V(0)``, ``β*`` but with ``a(0)`` ordered *against* ``u(0)`` (``a_i(0) = spread·(rank_i − mean)``,
    rank 0 = largest ``u``). Then ``s_i < s_j`` for ``u_i > u_j`` at the start, so every
    ``u`` gap shrinks at first. Returns ``(traj, losses)``."""
    grp = logistic_draws(trials, seed)[0]
    u0 = np.einsum("bdn,bd->bn", grp["V0s"], np.asarray(grp["betas"]))
    ranks = np.argsort(np.argsort(-u0, axis=1), axis=1).astype(float)
    a0s = spread * (ranks - ranks.mean(axis=1, keepdims=True))
    losses = [gradflow.LogisticTeacher(b) for b in grp["betas"]]
    traj = gradflow.simulate_batch(losses, grp["V0s"], a0s, t1=t1, solver="dopri8")
    return traj, losses


@functools.lru_cache(maxsize=8)
def square_trials(trials: int, seed: int, zero_V: bool) -> tuple:
    """Square loss ``½‖β* − β‖²`` (paper Eq. 8) from the first shape group's teachers, with
    ``V(0) = 0`` (Lemma 3.5) or ``V(0)`` the logistic experiment's random draw (``zero_V=False``,
    a negative control), and a small random ``a(0) = c·randn(n)``, ``c = 10^U(-2, -0.5)``
    (with ``V(0) = 0`` all ``u_i(0) = 0``, so ``a(0)`` breaks the symmetry). Horizon
    :data:`SQUARE_T1`, implicit solver (``"auto"`` → Kvaerno5).

    **Returns:** ``(traj, losses, a0s)``.
    """
    grp = logistic_draws(trials, seed)[0]
    n = grp["shape"][1]
    a0s = np.stack(
        [10.0 ** r.uniform(-2, -0.5) * r.standard_normal(n) for r in (np.random.default_rng([seed, k, 35]) for k in grp["trial_ids"])]
    )
    V0s = np.zeros_like(grp["V0s"]) if zero_V else grp["V0s"]
    losses = [gradflow.SquareLoss(b) for b in grp["betas"]]
    traj = gradflow.simulate_batch(losses, V0s, a0s, t1=SQUARE_T1)
    return traj, losses, a0s


@functools.lru_cache(maxsize=8)
def logistic_from_square_init(trials: int, seed: int) -> tuple:
    """Negative control for Lemma 3.5(b): the logistic loss from the square-loss experiment's start
    (``V(0) = 0``, same ``a(0)``) to ``t1 = 1e12``. Returns ``(traj, losses)``."""
    grp = logistic_draws(trials, seed)[0]
    _, _, a0s = square_trials(trials, seed, True)
    losses = [gradflow.LogisticTeacher(b) for b in grp["betas"]]
    traj = gradflow.simulate_batch(losses, np.zeros_like(grp["V0s"]), a0s, t1=LOGISTIC_T1)
    return traj, losses
