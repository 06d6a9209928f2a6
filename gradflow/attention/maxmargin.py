"""Max-margin token selection: p-attention and key–query attention under a logistic loss, data
with a stated optimal token per sample, and the attention SVM (att-SVM) their flows approach.

Source: Tarzanagh, Li, Zhang, Oymak, "Max-Margin Token Selection in Attention Mechanism"
(NeurIPS 2023), and Tarzanagh, Li, Thrampoulidis, Oymak, "Transformers as Support Vector
Machines" (2023). Notation (theirs):

* ``n`` samples, each ``X_i ∈ R^{T×d}`` (tokens as rows) with a label ``Y_i = ±1``;
* p-attention ``f(X) = vᵀ Xᵀ softmax(X p)`` with ``p ∈ R^d`` (trained) and ``v ∈ R^d`` (fixed,
  or trained jointly); key–query attention ``f(X) = vᵀ Xᵀ softmax(X W z)`` with ``W ∈ R^{d×d}``
  and a query token ``z ∈ R^d`` per sample;
* loss ``L = (1/n) Σ_i ℓ(Y_i f(X_i))`` with the logistic ``ℓ(u) = log(1 + e^{−u})``;
* token scores ``γ_it = Y_i vᵀ x_it``; the optimal token ``opt_i = argmax_t γ_it``;
* att-SVM: ``p_mm = argmin ‖p‖ s.t. (x_{i,opt_i} − x_it)ᵀ p ≥ 1`` for all ``t ≠ opt_i``, all ``i``
  (their Eq. att-SVM); for ``W`` the same with ``(x_{i,opt_i} − x_it)ᵀ W z_i`` and the
  Frobenius norm. Gradient descent (and the flow) diverge in norm with direction
  ``p/‖p‖ → p_mm/‖p_mm‖``: globally when each sample's non-optimal tokens share one score,
  locally in general; the regularisation path ``argmin_{‖p‖≤R} L`` does so globally;
* factorised key–query attention ``softmax(X_i K Qᵀ z_i)`` with ``K, Q ∈ R^{d×m}``: its
  regularisation path (in ``‖K‖²_F + ‖Q‖²_F``) turns to the *nuclear-norm* att-SVM
  ``argmin ‖W‖_* s.t. (x_{i,opt_i} − x_it)ᵀ W z_i ≥ 1`` (for ``m`` at least that solution's rank)
  instead of the Frobenius one (Tarzanagh, Li, Thrampoulidis, Oymak 2023, the (K,Q) case of
  their regularisation-path theorem; gradient flow on the exponential loss: Sheen, Chen, Wang,
  Zhou, "Implicit Regularization of Gradient Flow on One-Layer Softmax Attention", 2024, under
  diagonal or aligned initialisations).

All softmaxes are :func:`gradflow.softmax` (exact derivatives at large logit gaps, which is where
the direction converges). Losses take ``(params, data)`` so that they plug into
``gradflow.integrate(loss, params0, args=data, ...)`` and ``jax.grad`` directly.
"""

from __future__ import annotations

import math
import operator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._errors import bad_arg
from .._softmax import softmax

__all__ = [
    "TokenData",
    "token_selection_data",
    "scores",
    "optimal_tokens",
    "p_attention",
    "kq_attention",
    "logistic",
    "p_loss",
    "pv_loss",
    "kq_loss",
    "kq_factored_attention",
    "kq_factored_loss",
    "kqv_factored_loss",
    "kq_factors_init",
    "log_excess_loss",
    "log_excess_from_logits",
    "SVMSolution",
    "att_svm",
    "att_svm_kq",
    "NuclearSVMSolution",
    "att_svm_nuclear",
    "numerical_rank",
    "value_svm",
    "cosine",
]


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


class TokenData(eqx.Module):
    """A token-selection data set (immutable pytree; pass as ``args`` to the losses).

    **Fields:**

    - ``X``: ``float[n, T, d]``, sample ``i``'s tokens as rows ``x_it``.
    - ``Y``: ``float[n]``, labels ``±1``.
    - ``v``: ``float[d]``, the (initial) value/head vector.
    - ``opt``: ``int[n]``, the stated optimal token per sample (``argmax_t Y_i vᵀ x_it``).
    - ``Z``: ``float[n, d]``, query tokens ``z_i`` of the key–query model.

    Build with :func:`token_selection_data`, or directly (checked by ``__check_init__``:
    shapes, finiteness, labels in ``{−1, +1}``, ``0 ≤ opt < T``).
    """

    X: Float[Array, "n T d"]
    Y: Float[Array, " n"]
    v: Float[Array, " d"]
    opt: Int[Array, " n"]
    Z: Float[Array, "n d"]

    def __init__(self, X, Y, v, opt, Z=None):
        X = _float_array("X", X, 3)
        n, T, d = X.shape
        self.X = X
        self.Y = _float_array("Y", Y, 1, (n,))
        self.v = _float_array("v", v, 1, (d,))
        self.opt = _opt_array(opt, n, T)
        self.Z = jnp.zeros((n, d), X.dtype) if Z is None else _float_array("Z", Z, 2, (n, d))

    def __check_init__(self):
        if isinstance(self.Y, jax.core.Tracer):
            return
        if not np.all(np.isin(np.asarray(self.Y), (-1.0, 1.0))):
            raise bad_arg("Y", self.Y, "labels in {-1, +1}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n, T, d)``."""
        return tuple(self.X.shape)


def _float_array(name, x, ndim, shape=None):
    if isinstance(x, jax.core.Tracer):
        return x
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError):
        raise bad_arg(name, x, f"a real array with {ndim} axes") from None
    if arr.dtype.kind not in "fiu" or arr.ndim != ndim or 0 in arr.shape:
        raise bad_arg(name, x, f"a non-empty real array with {ndim} axes" + (f" of shape {shape}" if shape else ""))
    if shape is not None and arr.shape != tuple(shape):
        raise bad_arg(name, x, f"shape {tuple(shape)}")
    if not np.all(np.isfinite(arr)):
        raise bad_arg(name, x, "finite values")
    return jnp.asarray(arr, dtype=jnp.float64 if arr.dtype.kind in "iu" else arr.dtype)


def _opt_array(opt, n, T):
    if isinstance(opt, jax.core.Tracer):
        return opt
    arr = np.asarray(opt)
    if arr.dtype.kind not in "iu" or arr.shape != (n,) or np.any(arr < 0) or np.any(arr >= T):
        raise bad_arg("opt", opt, f"integer token indices of shape ({n},) in [0, {T - 1}]")
    return jnp.asarray(arr, dtype=jnp.int32)


def _positive_int(name, x, minimum=1):
    try:
        val = operator.index(x)
    except TypeError:
        raise bad_arg(name, x, f"an int ≥ {minimum}") from None
    if val < minimum:
        raise bad_arg(name, x, f"an int ≥ {minimum}")
    return val


def token_selection_data(
    seed: int = 0,
    n: int = 3,
    T: int = 4,
    d: int = 10,
    *,
    shared_scores: bool = True,
    opt_score: float = 1.0,
    other_score: float = 0.5,
    noise: float = 1.0,
    labels: str = "random",
) -> TokenData:
    """Random data with a stated optimal token per sample (NumPy ``default_rng(seed)``).

    ``v`` is a random unit vector; labels ``Y_i`` are random ``±1`` (``labels="random"``) or all
    ``+1`` (``"positive"``); ``opt_i`` is uniform over the ``T`` tokens; query tokens ``z_i`` are
    random unit vectors. Tokens are ``x_it = Y_i γ_it v + ξ_it`` with ``ξ_it ~ N(0, noise² I)``
    projected orthogonally to ``v``, so that the scores are exactly ``γ_it = Y_i vᵀ x_it``:
    ``γ_{i,opt_i} = opt_score``, and for ``t ≠ opt_i``

    - ``shared_scores=True``: ``γ_it = other_score`` (one score per sample's non-optimal tokens,
      the setting of global convergence);
    - ``shared_scores=False``: ``γ_it`` uniform in ``[other_score − 0.5, opt_score − 0.1]``.

    With ``n(T−1) ≤ d`` the att-SVM is feasible for almost every draw (rows ``x_opt − x_t`` are
    then linearly independent).

    **Returns:** :class:`TokenData`, float64.
    **Raises:** :class:`GradflowValueError` for ``n, T, d`` not ints ≥ (1, 2, 2), ``opt_score ≤
    other_score`` (the stated token would not be optimal), non-finite scores, ``noise < 0`` or an
    unknown ``labels``.
    """
    n, T, d = _positive_int("n", n), _positive_int("T", T, 2), _positive_int("d", d, 2)
    seed = _positive_int("seed", seed, 0)
    for name, val in (("opt_score", opt_score), ("other_score", other_score), ("noise", noise)):
        if not isinstance(val, (int, float)) or isinstance(val, bool) or not math.isfinite(val):
            raise bad_arg(name, val, "a finite float")
    if not opt_score > other_score + (0 if shared_scores else 0.1):
        raise bad_arg("opt_score", opt_score, f"a score above other_score = {other_score}"
                      + ("" if shared_scores else " + 0.1 (shared_scores=False)"))
    if noise < 0:
        raise bad_arg("noise", noise, "a float ≥ 0")
    if labels not in ("random", "positive"):
        raise bad_arg("labels", labels, "'random' or 'positive'")
    rng = np.random.default_rng(seed)
    v = rng.normal(size=d)
    v /= np.linalg.norm(v)
    Y = rng.choice([-1.0, 1.0], size=n) if labels == "random" else np.ones(n)
    opt = rng.integers(T, size=n)
    if shared_scores:
        gamma = np.full((n, T), float(other_score))
    else:
        gamma = rng.uniform(other_score - 0.5, opt_score - 0.1, size=(n, T))
    gamma[np.arange(n), opt] = opt_score
    xi = noise * rng.normal(size=(n, T, d))
    xi -= (xi @ v)[..., None] * v
    X = (Y[:, None] * gamma)[..., None] * v + xi
    Z = rng.normal(size=(n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    return TokenData(X, Y, v, opt.astype(np.int32), Z)


def scores(data: TokenData, v: Float[ArrayLike, " d"] | None = None) -> Float[Array, "n T"]:
    """Token scores ``γ_it = Y_i vᵀ x_it``, shape ``(n, T)`` (``v`` defaults to ``data.v``)."""
    v = data.v if v is None else v
    return data.Y[:, None] * (data.X @ v)


def optimal_tokens(data: TokenData, v: Float[ArrayLike, " d"] | None = None) -> np.ndarray:
    """``argmax_t γ_it`` per sample, ``int[n]`` (NumPy).

    **Raises:** :class:`GradflowValueError` where a sample's top score is tied (no optimal token).
    """
    g = np.asarray(scores(data, v))
    top = np.sort(g, axis=1)
    tied = np.nonzero(top[:, -1] - top[:, -2] <= 1e-12 * np.maximum(1.0, np.abs(top[:, -1])))[0]
    if len(tied):
        raise bad_arg("data", f"samples {tied.tolist()} with tied top scores", "one strictly largest score per sample")
    return np.argmax(g, axis=1).astype(np.int32)


# --------------------------------------------------------------------------------------------
# models and losses
# --------------------------------------------------------------------------------------------


def p_attention(p: Float[ArrayLike, " d"], X: Float[ArrayLike, "T d"], v: Float[ArrayLike, " d"]) -> Float[Array, ""]:
    """p-attention output ``f(X) = vᵀ Xᵀ softmax(X p)`` for one sample (scalar; vmap for batches)."""
    return v @ (X.T @ softmax(X @ p))


def kq_attention(W: Float[ArrayLike, "d d"], X: Float[ArrayLike, "T d"], z: Float[ArrayLike, " d"],
                 v: Float[ArrayLike, " d"]) -> Float[Array, ""]:
    """Key–query attention output ``f(X) = vᵀ Xᵀ softmax(X W z)`` for one sample (scalar)."""
    return v @ (X.T @ softmax(X @ (W @ z)))


def logistic(u: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
    """``ℓ(u) = log(1 + e^{−u})`` element-wise, as ``logaddexp(0, −u)`` (no overflow)."""
    return jnp.logaddexp(0.0, -u)


def p_loss(p: Float[ArrayLike, " d"], data: TokenData) -> Float[Array, ""]:
    """``L(p) = (1/n) Σ_i ℓ(Y_i f(X_i))`` of p-attention with ``v = data.v`` fixed."""
    f = jax.vmap(p_attention, in_axes=(None, 0, None))(p, data.X, data.v)
    return jnp.mean(logistic(data.Y * f))


def pv_loss(params: dict, data: TokenData) -> Float[Array, ""]:
    """``L(p, v)`` of p-attention with ``v`` trained jointly; ``params = {"p": (d,), "v": (d,)}``."""
    f = jax.vmap(p_attention, in_axes=(None, 0, None))(params["p"], data.X, params["v"])
    return jnp.mean(logistic(data.Y * f))


def kq_loss(W: Float[ArrayLike, "d d"], data: TokenData) -> Float[Array, ""]:
    """``L(W)`` of key–query attention ``softmax(X_i W z_i)`` with ``v = data.v`` fixed."""
    f = jax.vmap(kq_attention, in_axes=(None, 0, 0, None))(W, data.X, data.Z, data.v)
    return jnp.mean(logistic(data.Y * f))


def kq_factored_attention(K: Float[ArrayLike, "d m"], Q: Float[ArrayLike, "d m"], X: Float[ArrayLike, "T d"],
                          z: Float[ArrayLike, " d"], v: Float[ArrayLike, " d"]) -> Float[Array, ""]:
    """Factorised key–query attention ``f(X) = vᵀ Xᵀ softmax(X K Qᵀ z)`` for one sample (scalar),
    ``K, Q`` ``float[d, m]``: :func:`kq_attention` with ``W = K Qᵀ`` (rank ≤ ``m``)."""
    return v @ (X.T @ softmax(X @ (K @ (Q.T @ z))))


def kq_factored_loss(params: dict, data: TokenData) -> Float[Array, ""]:
    """``L(K, Q)`` of :func:`kq_factored_attention` with ``v = data.v`` fixed;
    ``params = {"K": (d, m), "Q": (d, m)}``. Its value is :func:`kq_loss` at ``W = K Qᵀ``; its
    gradient flow is not that of ``W`` (``dW/dt = −(∇L Q Qᵀ + K Kᵀ ∇L)`` along it)."""
    f = jax.vmap(kq_factored_attention, in_axes=(None, None, 0, 0, None))(params["K"], params["Q"], data.X, data.Z,
                                                                          data.v)
    return jnp.mean(logistic(data.Y * f))


def kqv_factored_loss(params: dict, data: TokenData) -> Float[Array, ""]:
    """``L(K, Q, v)``: :func:`kq_factored_loss` with the head ``v`` trained jointly;
    ``params = {"K": (d, m), "Q": (d, m), "v": (d,)}``."""
    f = jax.vmap(kq_factored_attention, in_axes=(None, None, 0, 0, None))(params["K"], params["Q"], data.X, data.Z,
                                                                          params["v"])
    return jnp.mean(logistic(data.Y * f))


def kq_factors_init(seed: int, d: int, m: int | None = None, scale: float = 1e-2) -> dict:
    """A small random start of the factorised model: ``{"K": (d, m), "Q": (d, m)}`` with entries
    ``N(0, scale²)`` (NumPy ``default_rng(seed)``, ``K`` drawn first), float64.

    ``K = Q = 0`` is a stationary point (both gradients vanish there), so the factorised flow
    needs a non-zero start; ``W = K Qᵀ`` then starts at size ``~ scale²``.

    **Arguments:** ``seed`` int ≥ 0; ``d`` int ≥ 1; ``m`` int in ``[1, d]`` (default ``d``);
    ``scale`` finite float > 0 (default ``1e-2``).
    **Raises:** :class:`GradflowValueError` for values outside these ranges.
    """
    seed, d = _positive_int("seed", seed, 0), _positive_int("d", d)
    m = d if m is None else _positive_int("m", m)
    if m > d:
        raise bad_arg("m", m, f"an int in [1, d = {d}]")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale <= 0:
        raise bad_arg("scale", scale, "a finite float > 0")
    rng = np.random.default_rng(seed)
    K = scale * rng.normal(size=(d, m))
    Q = scale * rng.normal(size=(d, m))
    return {"K": jnp.asarray(K), "Q": jnp.asarray(Q)}


def log_excess_loss(p: Float[ArrayLike, " d"], data: TokenData) -> Float[Array, ""]:
    """``log(L(p) − L*)`` for p-attention with ``v`` fixed, where ``L* = (1/n) Σ ℓ(γ_{i,opt_i})``
    is the infimum when each ``opt_i`` has the sample's top score (all weight on it).

    ``L − L*`` falls like ``e^{−‖p‖/‖p_mm‖}``: below float epsilon relative to ``L*`` from
    ``‖p‖ ≈ 37 ‖p_mm‖`` on, where ``L`` itself no longer resolves the direction. Here every term
    is formed in the log domain: with ``δ_i = γ_{i,opt} − Y_i f_i = Σ_{t≠opt} s_it (γ_{i,opt} −
    γ_it) ≥ 0``, ``ℓ(γ_opt − δ) − ℓ(γ_opt) = log1p(σ(−γ_opt)·expm1(δ))``. Used for the
    regularisation path (``argmin_{‖p‖≤R} L`` = ``argmin`` of this). Requires ``opt`` to be the
    top-score tokens (see :func:`optimal_tokens`).
    """
    return log_excess_from_logits(data.X @ p, data)


def log_excess_from_logits(z: Float[ArrayLike, "n T"], data: TokenData) -> Float[Array, ""]:
    """:func:`log_excess_loss` from the attention logits ``z_it`` (``(n, T)``; ``x_itᵀ p`` for
    p-attention, ``x_itᵀ K Qᵀ z_i`` for factorised key–query attention)."""
    logs = z - jax.scipy.special.logsumexp(z, axis=1, keepdims=True)  # log s_it, exact to rounding
    g = scores(data)
    g_opt = jnp.take_along_axis(g, data.opt[:, None], axis=1)
    gap = g_opt - g  # ≥ 0, 0 at opt
    off = jnp.arange(g.shape[1])[None, :] != data.opt[:, None]
    safe_gap = jnp.where(off, gap, 1.0)
    log_delta = jax.scipy.special.logsumexp(jnp.where(off, logs + jnp.log(safe_gap), -jnp.inf), axis=1)
    delta = jnp.exp(log_delta)
    log_sig = jax.nn.log_sigmoid(-g_opt[:, 0])
    # log(log1p(x)) with x = σ(−γ_opt)·expm1(δ); for tiny x, log x + log1p(−x/2) to rounding
    log_x = log_sig + jnp.where(delta < 1e-8, log_delta + jnp.log1p(delta / 2), jnp.log(jnp.expm1(jnp.maximum(delta, 1e-8))))
    x = jnp.exp(log_x)
    small = x < 1e-8
    term = jnp.where(small, log_x + jnp.log1p(-x / 2), jnp.log(jnp.log1p(jnp.where(small, 1.0, x))))
    return jax.scipy.special.logsumexp(term) - jnp.log(g.shape[0])


def cosine(a, b) -> float:
    """``⟨a, b⟩ / (‖a‖ ‖b‖)`` of two flattened arrays (NumPy float)."""
    a, b = np.ravel(np.asarray(a, float)), np.ravel(np.asarray(b, float))
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------------------------
# att-SVM
# --------------------------------------------------------------------------------------------


class SVMSolution(eqx.Module):
    """A hard-margin SVM ``argmin ‖w‖ s.t. A w ≥ 1`` and its certificate.

    **Fields:** ``w`` (the solution, shaped as the parameter: ``(d,)`` for ``p``, ``(d, d)`` for
    ``W``), ``A`` (``float[m, D]`` constraint rows, ``D = w.size``), ``dual`` (``float[m]``, the
    multipliers ``λ ≥ 0`` with ``w = Aᵀλ``), ``active`` (``bool[m]``, support constraints),
    ``margin`` (``1/‖w‖``, the distance the SVM separates by).
    """

    w: np.ndarray
    A: np.ndarray
    dual: np.ndarray
    active: np.ndarray
    margin: float


def _min_norm(A: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``argmin ½‖w‖² s.t. A w ≥ 1`` with Clarabel (interior point), polished on its active set
    (``A_S A_Sᵀ λ_S = 1``, ``w = A_Sᵀ λ_S``) and accepted only if the KKT conditions hold to
    ``1e-9`` (primal and dual feasibility, complementary slackness, stationarity ``w = Aᵀλ``)."""
    import clarabel
    import scipy.sparse as sp

    m, D = A.shape
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = 1e-10
    settings.tol_feas = 1e-10
    solver = clarabel.DefaultSolver(sp.identity(D, format="csc"), np.zeros(D), sp.csc_matrix(-A), -np.ones(m),
                                    [clarabel.NonnegativeConeT(m)], settings)
    sol = solver.solve()
    status = str(sol.status)
    if "Infeasible" in status:
        raise bad_arg(name, f"{m} margin constraints in {D} dimensions",
                      "a separable token selection: no w satisfies (x_opt − x_t)ᵀ w ≥ 1 for all t ≠ opt")
    w, lam = np.asarray(sol.x, float), np.maximum(np.asarray(sol.z, float), 0.0)
    scale = max(float(np.abs(A).max()), 1.0)
    for rel in (1e-6, 1e-4, 1e-8):  # active-set thresholds on λ; the first whose polish passes KKT wins
        active = lam > rel * max(lam.max(), 1e-300)
        if not active.any():
            continue
        AS = A[active]
        lam_s = np.linalg.lstsq(AS @ AS.T, np.ones(int(active.sum())), rcond=None)[0]
        w_p = AS.T @ lam_s
        lam_p = np.zeros(m)
        lam_p[active] = lam_s
        if _kkt_ok(A, w_p, lam_p, scale):
            return w_p, lam_p
    if _kkt_ok(A, w, lam, scale, tol=1e-7):
        return w, lam
    raise RuntimeError(f"att-SVM: Clarabel ended with status {status} and no KKT point was found")


def _kkt_ok(A, w, lam, scale, tol=1e-9) -> bool:
    slack = A @ w - 1
    nw = max(float(np.linalg.norm(w)), 1e-300)
    return bool(lam.min() >= 0 and slack.min() >= -tol and np.max(np.abs(lam * slack)) <= tol * max(1.0, lam.max())
                and np.linalg.norm(w - A.T @ lam) <= tol * nw * scale)


def _selection_rows(X, opt, kind, Z=None):
    n, T, d = X.shape
    rows = []
    for i in range(n):
        xo = X[i, opt[i]]
        for t in range(T):
            if t == opt[i]:
                continue
            diff = xo - X[i, t]
            rows.append(diff if kind == "p" else np.outer(diff, Z[i]).ravel())
    return np.asarray(rows)


def _svm_inputs(X, Y, v, opt):
    data = TokenData(X, Y, v, opt)
    return np.asarray(data.X), np.asarray(data.opt)


def att_svm(X, Y, v, opt) -> SVMSolution:
    """The att-SVM of p-attention: ``p_mm = argmin ‖p‖ s.t. (x_{i,opt_i} − x_it)ᵀ p ≥ 1`` for all
    ``t ≠ opt_i`` and all ``i`` (Tarzanagh et al. 2023, Eq. (att-SVM)).

    ``Y`` and ``v`` do not enter the constraints (they decide which selection ``opt`` is optimal,
    :func:`optimal_tokens`); they are validated so the call states the full problem.

    **Arguments:** ``X`` ``float[n, T, d]``; ``Y`` ``float[n]`` (``±1``); ``v`` ``float[d]``;
    ``opt`` ``int[n]`` in ``[0, T)``.
    **Returns:** :class:`SVMSolution` with ``w = p_mm`` of shape ``(d,)`` and the rows
    ``A = [x_{i,opt_i} − x_it]`` in the order ``(i, t)``, ``t ≠ opt_i``.
    **Raises:** :class:`GradflowValueError` for malformed inputs or an infeasible selection.
    Solved with Clarabel (a conic interior-point solver) and polished on its active set.
    """
    Xn, optn = _svm_inputs(X, Y, v, opt)
    A = _selection_rows(Xn, optn, "p")
    w, lam = _min_norm(A, "X, opt")
    return SVMSolution(w=w, A=A, dual=lam, active=lam > 0, margin=float(1 / np.linalg.norm(w)))


def att_svm_kq(X, Y, v, opt, Z) -> SVMSolution:
    """The att-SVM of key–query attention: ``W_mm = argmin ‖W‖_F s.t. (x_{i,opt_i} − x_it)ᵀ W z_i ≥ 1``
    (Tarzanagh et al. 2023, Eq. (W-SVM)). ``Z`` is ``float[n, d]`` (query tokens ``z_i``).

    **Returns:** :class:`SVMSolution` with ``w = W_mm`` of shape ``(d, d)`` and rows
    ``vec((x_opt − x_t) z_iᵀ)``. **Raises:** as :func:`att_svm`.
    """
    data = TokenData(X, Y, v, opt, Z)
    Xn, optn, Zn = np.asarray(data.X), np.asarray(data.opt), np.asarray(data.Z)
    d = Xn.shape[2]
    A = _selection_rows(Xn, optn, "W", Zn)
    w, lam = _min_norm(A, "X, opt, Z")
    return SVMSolution(w=w.reshape(d, d), A=A, dual=lam, active=lam > 0, margin=float(1 / np.linalg.norm(w)))


def value_svm(X, Y, opt) -> SVMSolution:
    """The max-margin head for the selected tokens, ``v_mm = argmin ‖v‖ s.t. Y_i vᵀ x_{i,opt_i} ≥ 1``
    (the limit direction of ``v`` under joint training, Tarzanagh et al. 2023, Sec. on joint
    ``(p, v)`` convergence). **Returns:** :class:`SVMSolution` with ``w`` of shape ``(d,)``."""
    Xn = np.asarray(X, float)
    n = Xn.shape[0]
    optn = _opt_array(opt, n, Xn.shape[1])
    A = np.asarray(Y, float)[:, None] * Xn[np.arange(n), np.asarray(optn)]
    w, lam = _min_norm(A, "X, Y, opt")
    return SVMSolution(w=w, A=A, dual=lam, active=lam > 0, margin=float(1 / np.linalg.norm(w)))


class NuclearSVMSolution(eqx.Module):
    """The nuclear-norm att-SVM ``argmin ‖W‖_* s.t. A vec(W) ≥ 1`` and its dual certificate.

    **Fields:** ``w`` (``float[d, d]``, the solution ``W_*``), ``A`` (``float[m, d²]``, constraint
    rows ``vec((x_opt − x_t) z_iᵀ)``, row-major ``vec``), ``dual`` (``float[m]``, multipliers
    ``λ ≥ 0``), ``dual_matrix`` (``float[d, d]``, ``G = Σ_j λ_j A_j``: optimality means ``‖G‖_op ≤ 1``
    and ``⟨G, W_*⟩ = ‖W_*‖_* = Σ_j λ_j``, i.e. ``G ∈ ∂‖W_*‖_*``), ``active`` (``bool[m]``,
    constraints with ``λ_j > 0``), ``margin`` (``1/‖W_*‖_*``), ``rank`` (numerical rank of ``W_*``,
    :func:`numerical_rank` at ``rtol = 1e-6``), ``residuals`` (``dict``: primal infeasibility,
    ``‖G‖_op − 1``, relative duality gap, complementary slackness, as verified).
    """

    w: np.ndarray
    A: np.ndarray
    dual: np.ndarray
    dual_matrix: np.ndarray
    active: np.ndarray
    margin: float
    rank: int
    residuals: dict


def numerical_rank(W: Float[ArrayLike, "... d e"], rtol: float = 1e-3) -> int | np.ndarray:
    """Number of singular values of ``W`` above ``rtol · σ_max(W)`` (``int``, or an int array
    over leading axes); 0 for ``W = 0``. NumPy, float64."""
    s = np.linalg.svd(np.asarray(W, float), compute_uv=False)
    top = s[..., :1]
    r = np.sum((s > rtol * top) & (top > 0), axis=-1)
    return int(r) if r.ndim == 0 else r


SVM_CERT_TOL = 1e-7
"""Largest residual :func:`att_svm_nuclear` accepts in its certificate (relative, see there)."""


def att_svm_nuclear(X, Y, v, opt, Z) -> NuclearSVMSolution:
    """The nuclear-norm att-SVM of key–query attention:
    ``W_* = argmin ‖W‖_* s.t. (x_{i,opt_i} − x_it)ᵀ W z_i ≥ 1`` for all ``t ≠ opt_i``, all ``i`` —
    the constraints of :func:`att_svm_kq` (same rows, same order) under the nuclear norm
    (Tarzanagh, Li, Thrampoulidis, Oymak, "Transformers as Support Vector Machines", 2023,
    arXiv:2308.16898: the SVM that the regularisation path of ``W = K Qᵀ`` turns to).

    Solved with CVXPY's ``normNuc`` atom (a semidefinite program) and Clarabel at tolerances
    ``1e-10``; the multipliers ``λ`` of the margin constraints are returned with the certificate
    ``G = Σ_j λ_j A_j``, and the solution is accepted only if, to :data:`SVM_CERT_TOL` (relative
    to ``‖W_*‖_*`` where a scale enters): ``A vec(W_*) ≥ 1``, ``λ ≥ 0``, ``‖G‖_op ≤ 1``,
    ``Σ_j λ_j = ‖W_*‖_*`` (zero duality gap; with the former, ``G ∈ ∂‖W_*‖_*``) and
    ``λ_j (A_j vec(W_*) − 1) = 0``.

    **Arguments:** ``X`` ``float[n, T, d]``; ``Y`` ``float[n]`` (``±1``); ``v`` ``float[d]``;
    ``opt`` ``int[n]`` in ``[0, T)``; ``Z`` ``float[n, d]`` (query tokens ``z_i``). ``Y`` and ``v`` do
    not enter the constraints; they are validated so that the call states the full problem.
    **Returns:** :class:`NuclearSVMSolution`.
    **Raises:** :class:`GradflowValueError` for malformed inputs or an infeasible selection;
    ``ImportError`` without CVXPY (a dependency of the package); ``RuntimeError`` where the
    solver ends without a point that passes the certificate.
    """
    import cvxpy as cp

    data = TokenData(X, Y, v, opt, Z)
    Xn, optn, Zn = np.asarray(data.X), np.asarray(data.opt), np.asarray(data.Z)
    d = Xn.shape[2]
    A = _selection_rows(Xn, optn, "W", Zn)
    w = cp.Variable(d * d)
    margins = A @ w >= 1
    problem = cp.Problem(cp.Minimize(cp.normNuc(cp.reshape(w, (d, d), order="C"))), [margins])
    try:
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    except cp.error.SolverError as err:
        raise RuntimeError(f"nuclear att-SVM: Clarabel failed ({err})") from None
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise bad_arg("X, opt, Z", f"{A.shape[0]} margin constraints in {d}x{d} matrices",
                      "a separable token selection: no W satisfies (x_opt − x_t)ᵀ W z_i ≥ 1 for all t ≠ opt")
    if w.value is None or margins.dual_value is None:
        raise RuntimeError(f"nuclear att-SVM: Clarabel ended with status {problem.status} and no solution")
    W = np.asarray(w.value, float).reshape(d, d)
    raw = np.asarray(margins.dual_value, float)
    res = _nuclear_certificate(A, W, raw)  # dual feasibility checked on the solver's own multipliers
    lam = np.maximum(raw, 0.0)  # then round-off below 0 clipped for the returned certificate
    G = (A.T @ lam).reshape(d, d)
    if max(res.values()) > SVM_CERT_TOL:
        raise RuntimeError(f"nuclear att-SVM: Clarabel ended with status {problem.status}; certificate residuals {res}")
    return NuclearSVMSolution(w=W, A=A, dual=lam, dual_matrix=G, active=lam > 1e-6 * max(lam.max(), 1e-300),
                              margin=float(1 / np.linalg.norm(W, "nuc")), rank=int(numerical_rank(W, 1e-6)),
                              residuals=res)


def _nuclear_certificate(A, W, lam) -> dict:
    nuc = float(np.linalg.norm(W, "nuc"))
    slack = A @ W.ravel() - 1
    G = (A.T @ lam).reshape(W.shape)
    return dict(primal=max(0.0, -float(slack.min())), dual=max(0.0, -float(lam.min())),
                op_norm=max(0.0, float(np.linalg.norm(G, 2)) - 1), gap=abs(float(lam.sum()) - nuc) / nuc,
                slackness=float(np.max(np.abs(lam * slack))) / max(1.0, float(lam.max())))
