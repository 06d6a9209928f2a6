"""``integrate`` / ``integrate_batch``: the gradient flow ``dθ/dt = −∇L(θ)`` of any JAX loss over
any pytree of float arrays, on the engine (:mod:`gradflow._engine`).

Every user function (``loss``, ``field``, ``observe`` and ``quadratures`` entries) is called as
``f(params)`` when ``args is None`` and as ``f(params, args)`` otherwise. Everything is checked on
the host before the solve is traced (``jax.eval_shape`` of each function, then one compiled
evaluation of the loss and its gradient at ``params0``), so a bad argument raises a
:class:`gradflow.GradflowValueError` naming it, never a tracing error from inside the solver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._engine import batch as _batch
from ._engine import solve as _solve
from ._engine.policy import AutoPolicy
from ._engine.settings import DEFAULTS, SolveOptions
from ._engine.solve import Flow
from ._errors import GradflowValueError, bad_arg, describe
from ._validate import working_dtype
from .solution import Solution

__all__ = ["integrate", "integrate_batch", "check_params", "UserFunctions"]


# --------------------------------------------------------------------------- user functions
@dataclasses.dataclass(frozen=True)
class _Call:
    """A user function called as ``fn(params)`` or ``fn(params, args)`` (hashable: equal for the
    same function, so a new call with the same functions reuses the compiled solve)."""

    fn: Callable
    with_args: bool

    def __call__(self, params, args):
        return self.fn(params, args) if self.with_args else self.fn(params)


@dataclasses.dataclass(frozen=True)
class _NegGrad:
    """``−∇L(params)`` (the gradient-flow field)."""

    loss: _Call

    @property
    def fn(self):
        """The user's loss (named in error messages)."""
        return self.loss.fn

    def __call__(self, params, args):
        return jax.tree.map(jnp.negative, jax.grad(self.loss)(params, args))


@dataclasses.dataclass(frozen=True)
class _Dict:
    """``{name: fn(params, args)}`` for named user functions (quadrature integrands)."""

    items: tuple

    def __call__(self, params, args):
        return {name: fn(params, args) for name, fn in self.items}


def _norm(tree):
    return jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(tree)))


@dataclasses.dataclass(frozen=True)
class _Observe:
    """What is saved at the save points: the loss, the speed ``‖field‖`` and the user's observables."""

    loss: _Call
    field: Callable
    items: tuple

    def __call__(self, params, args):
        return dict(loss=_solve.call_user(self.loss, params, args),
                    grad_norm=_norm(_solve.call_user(self.field, params, args)),
                    observed={name: _solve.call_user(fn, params, args) for name, fn in self.items})


@dataclasses.dataclass(frozen=True)
class UserFunctions:
    """The checked user functions of one call: ``loss``, the ``field`` (``−∇L`` unless given),
    quadrature integrands and observables, each a hashable wrapper taking ``(params, args)``."""

    loss: _Call
    field: Callable
    quadratures: tuple
    observe: tuple

    def flow(self, rest_stop: bool = True, detect_stiffness: bool = True) -> Flow:
        return Flow(field=self.field, rates=_Dict(self.quadratures) if self.quadratures else None,
                    observe=_Observe(self.loss, self.field, self.observe), rest_stop=rest_stop,
                    detect_stiffness=detect_stiffness)


# --------------------------------------------------------------------------- checks
def check_params(name: str, params0, batch: bool):
    """``params0`` as a pytree of float NumPy arrays in the working dtype (float64).

    Accepted: a non-empty pytree (dict, list, tuple, equinox Module, …) whose leaves are all real
    floating arrays or Python floats, non-empty and finite; with ``batch``, every leaf has a
    leading axis of one common size ``B ≥ 1``.

    **Raises:** :class:`gradflow.GradflowValueError` naming the leaf (e.g. ``params0['W']``)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params0)
    if not leaves:
        raise bad_arg(name, params0, "a non-empty pytree of float arrays (e.g. {'W': W, 'b': b})")
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(working_dtype()))
    out, sizes = [], set()
    for path, leaf in leaves:
        where = name + jax.tree_util.keystr(path)
        if isinstance(leaf, jax.core.Tracer):
            raise bad_arg(where, leaf, "a concrete array (integrate runs on the host: do not call it inside jax.jit)")
        if isinstance(leaf, (str, bytes)) or (isinstance(leaf, (bool, int, np.integer, np.bool_))):
            raise bad_arg(where, leaf, "a float array or Python float (pass float values, e.g. 1.0 not 1)")
        try:
            arr = np.asarray(leaf)
        except Exception:
            raise bad_arg(where, leaf, "a float array") from None
        if np.iscomplexobj(arr):
            raise bad_arg(where, leaf, "a real float array (complex parameters are not supported)")
        if not np.issubdtype(arr.dtype, np.floating):
            raise bad_arg(where, leaf, f"a float array (got dtype {arr.dtype}; cast it, e.g. jnp.asarray(x, float))")
        if arr.size == 0:
            raise bad_arg(where, leaf, "a non-empty array")
        if not np.all(np.isfinite(arr)):
            raise bad_arg(where, leaf, "finite values (no NaN or inf)")
        cast = np.asarray(arr, dtype=dtype)
        if not np.all(np.isfinite(cast)):
            raise bad_arg(where, leaf, f"values representable in {dtype} (JAX's float64 mode is off)")
        if batch:
            if cast.ndim < 1:
                raise bad_arg(f"{where}.shape", cast.shape, "a leading batch axis B on every leaf")
            sizes.add(cast.shape[0])
        out.append(cast)
    if batch and len(sizes) != 1:
        raise bad_arg(f"{name} batch sizes", sorted(sizes), "one common leading batch size B on every leaf")
    return jax.tree_util.tree_unflatten(treedef, out)


def _refuse(name: str, got: str, accepted: str) -> GradflowValueError:
    """:func:`gradflow._errors.bad_arg` for a value described in words (``got`` not quoted)."""
    return GradflowValueError(f"{name}: got {got}; expected {accepted}")


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


def _named(name: str, fns, args) -> tuple:
    """``{name: fn}`` as a sorted tuple of ``(name, _Call)``; checks the mapping and callables."""
    if fns is None:
        return ()
    if not isinstance(fns, Mapping):
        raise bad_arg(name, fns, "a dict {name: function(params)} (or None)")
    items = []
    for key, fn in fns.items():
        if not isinstance(key, str) or not key:
            raise bad_arg(name, key, "non-empty str names as keys")
        if not callable(fn):
            raise bad_arg(f"{name}[{key!r}]", fn, "a function of params" + (" and args" if args is not None else ""))
        items.append((key, _Call(fn, args is not None)))
    return tuple(sorted(items, key=lambda kv: kv[0]))


def _shape_of(name: str, what: str, fn, params, args):
    """``eqx.filter_eval_shape(fn, params, args)``, a failure reported as a bad ``name``."""
    try:
        return eqx.filter_eval_shape(fn, params, args)
    except Exception as err:  # any error of the user's function while traced
        raise bad_arg(name, getattr(fn, "fn", fn), f"{what} ({_first_line(err)})") from err


def _is_real_array(s, floating: bool) -> bool:
    if not isinstance(s, jax.ShapeDtypeStruct):
        return False
    kind = np.dtype(s.dtype).kind
    return kind == "f" if floating else kind in "fiub"


def _probe(user: UserFunctions, params, args, explicit_field: bool) -> None:
    """Trace every user function once on one lane (``jax.eval_shape``) and check what it returns."""
    sig = "params" + (" and args" if user.loss.with_args else "")
    out = _shape_of("loss", f"a JAX-traceable function of {sig}", user.loss, params, args)
    if not (_is_real_array(out, True) and out.shape == ()):
        raise _refuse("loss", f"a function returning {_describe_shape(out)}", "a function returning a real float scalar (shape ())")
    _shape_of("loss", "a differentiable function (jax.grad of it failed)", _NegGrad(user.loss), params, args)
    if explicit_field:
        f = _shape_of("field", f"a JAX-traceable function of {sig}", user.field, params, args)
        want = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), params)
        same = jax.tree.structure(f) == jax.tree.structure(want) and all(
            _is_real_array(a, True) and a.shape == b.shape for a, b in zip(jax.tree.leaves(f), jax.tree.leaves(want)))
        if not same:
            raise _refuse("field", f"a function returning {_describe_shape(f)}",
                          "a function returning d params/dt: a pytree of float arrays shaped like params0")
    for key, fn in user.quadratures:
        q = _shape_of(f"quadratures[{key!r}]", f"a JAX-traceable function of {sig}", fn, params, args)
        if not (_is_real_array(q, True) and q.shape == ()):
            raise _refuse(f"quadratures[{key!r}]", f"a function returning {_describe_shape(q)}",
                          "a function returning a real float scalar (the integrand g(params))")
    for key, fn in user.observe:
        o = _shape_of(f"observe[{key!r}]", f"a JAX-traceable function of {sig}", fn, params, args)
        if not _is_real_array(o, False):
            raise _refuse(f"observe[{key!r}]", f"a function returning {_describe_shape(o)}",
                          "a function returning one real numeric array (any shape)")


def _describe_shape(tree) -> str:
    if isinstance(tree, jax.ShapeDtypeStruct):
        return f"shape {tuple(tree.shape)}, dtype {np.dtype(tree.dtype).name}"
    return describe(jax.tree.map(lambda s: f"{tuple(s.shape)} {np.dtype(s.dtype).name}"
                                 if isinstance(s, jax.ShapeDtypeStruct) else s, tree))


def _key(user, params, args, explicit_field):
    """A hashable key of what :func:`_probe` depends on (``None``: do not cache)."""
    try:
        spec = lambda tree: (jax.tree.structure(tree), tuple(
            (np.shape(x), np.asarray(x).dtype.str) if eqx.is_array_like(x) else x for x in jax.tree.leaves(tree)))
        key = (user, spec(params), spec(args), explicit_field)
        hash(key)
        return key
    except Exception:
        return None


@eqx.filter_jit
def _at_start(loss, field, params0, args, batched_params, args_batched):
    """The loss and whether the field is finite at ``params0`` (per lane for a batch)."""
    one = lambda p, a: (loss(p, a), jax.tree.reduce(
        jnp.logical_and, jax.tree.map(lambda x: jnp.all(jnp.isfinite(x)), field(p, a))))
    if not batched_params:
        return one(params0, args)
    return eqx.filter_vmap(one, in_axes=(0, 0 if args_batched else None))(params0, args)


def _check_start(user, params0, args, batch, args_batched, explicit_field):
    """Raise if the loss or its field is non-finite at ``params0`` (one compiled evaluation)."""
    value, finite = _at_start(user.loss, user.field, params0, args, batch, args_batched)
    value, finite = np.atleast_1d(np.asarray(value)), np.atleast_1d(np.asarray(finite))
    name = "params0s" if batch else "params0"
    bad = np.flatnonzero(~np.isfinite(value))
    if bad.size:
        where = f" (lanes {bad.tolist()[:8]})" if batch else ""
        raise _refuse("loss", f"a loss of {value[bad[0]]} at {name}{where}", f"a loss that is finite at {name}")
    bad = np.flatnonzero(~finite)
    if bad.size:
        where = f" (lanes {bad.tolist()[:8]})" if batch else ""
        what = "field" if explicit_field else "loss"
        raise _refuse(what, f"a non-finite {'field' if explicit_field else 'gradient'} at {name}{where}",
                      f"a {'field' if explicit_field else 'loss whose gradient is'} finite at {name}")


def prepare_user(loss, params0, args, field, observe, quadratures, batch: bool, args_batched: bool = False):
    """Check the user's functions and initial parameters; returns ``(UserFunctions, params0)``."""
    if not callable(loss):
        raise bad_arg("loss", loss, "a function loss(params) (or loss(params, args)) returning a float scalar")
    if field is not None and not callable(field):
        raise bad_arg("field", field, "a function returning d params/dt (or None for −∇loss)")
    params0 = check_params("params0s" if batch else "params0", params0, batch)
    with_args = args is not None
    lcall = _Call(loss, with_args)
    user = UserFunctions(loss=lcall, field=_NegGrad(lcall) if field is None else _Call(field, with_args),
                         quadratures=_named("quadratures", quadratures, args), observe=_named("observe", observe, args))
    B = jax.tree.leaves(params0)[0].shape[0] if batch else None
    if args_batched:
        arrays = [x for x in jax.tree.leaves(args) if eqx.is_array_like(x) and not isinstance(x, (bool, int, float, complex))]
        if not arrays or any(np.ndim(x) < 1 or np.shape(x)[0] != B for x in arrays):
            raise bad_arg("args", args, f"with args_batched=True, a pytree whose array leaves have a leading axis B = {B}")
        args = jax.tree.map(lambda x: jnp.asarray(x) if eqx.is_array(x) or isinstance(x, np.ndarray) else x, args)
    lane = (lambda t: jax.tree.map(lambda x: x[0], t)) if batch else (lambda t: t)
    lane_args = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, args) if args_batched else args
    probe_args = (user, lane(params0), lane_args, field is not None)
    key = _key(*probe_args)
    if key is None:
        _probe(*probe_args)
    else:
        _probe_cached_call(key, probe_args)
    _check_start(user, params0, args, batch, args_batched, field is not None)
    return user, params0, args


_PROBED: dict = {}


def _probe_cached_call(key, probe_args):
    """:func:`_probe` once per key (functions, shapes, dtypes): repeated calls skip the tracing."""
    if key in _PROBED:
        return
    _probe(*probe_args)
    if len(_PROBED) > 256:
        _PROBED.clear()
    _PROBED[key] = True


def _meta(settings, rest_stop, t0, phases):
    """The metadata of a flow: its settings, its start time ``t0`` (checked) where that is not 0,
    and ``phases``, the solvers its rounds ran (comma-separated, in the order first run)."""
    start = {"t0": float(t0)} if t0 else {}
    return {"method": "flow", **settings.describe(), **start, "rest_stop": rest_stop, "time": "log1p",
            "phases": ",".join(phases)}


def _solution(out, ts, meta, batch_shape=(), tau0=None) -> Solution:
    obs = out.observed
    t = jnp.asarray(np.broadcast_to(ts, batch_shape + ts.shape))
    t_end = out.t_end
    if meta.get("t0") and tau0 is not None:
        # a lane that ended at its start log time ``tau0`` (e.g. failed at its first step) ended at
        # ``t0`` itself, not at the round trip ``expm1(log1p(t0))``, which can differ in the last bits
        t_end = jnp.where(t_end == jnp.expm1(jnp.asarray(tau0)), meta["t0"], t_end)
    return Solution(t=t, params=out.params, loss=obs["loss"], grad_norm=obs["grad_norm"], observed=obs["observed"],
                    quadratures=out.quadratures, valid=out.valid, num_steps=out.num_steps,
                    status_code=out.status_code, t_end=t_end, t_steady=out.t_steady,
                    params_end=out.params_end, quadratures_end=out.quadratures_end,
                    meta=tuple(sorted(meta.items())))


def integrate(
    loss: Callable,
    params0: Any,
    *,
    t1: float,
    t0: float = 0.0,
    ts=DEFAULTS.ts,
    args: Any = None,
    rtol: float = DEFAULTS.rtol,
    atol: float | None = DEFAULTS.atol,
    solver: str = DEFAULTS.solver,
    max_steps: int = DEFAULTS.max_steps,
    observe: Mapping[str, Callable] | None = None,
    quadratures: Mapping[str, Callable] | None = None,
    rest_stop: bool = DEFAULTS.rest_stop,
    field: Callable | None = None,
    policy: AutoPolicy | None = DEFAULTS.policy,
) -> Solution:
    """Integrate the gradient flow ``dθ/dt = −∇L(θ)`` of any JAX loss from ``θ(0) = params0`` to flow time ``t1``.

    The flow is integrated in float64 in the log time ``τ = log(1 + t)`` with an adaptive
    diffrax solver (as :func:`gradflow.simulate`, which runs on the same engine), so long
    horizons (``t1 = 1e12``, ``1e30``) are cheap when the late flow is slow in ``t``.

    **Arguments:**

    - ``loss``: a JAX-traceable function ``loss(params)`` (or ``loss(params, args)`` when
      ``args`` is given) returning a real float scalar; differentiated with ``jax.grad``.
      Autodiff of ``jax.nn.softmax`` loses digits once one weight is near 1 (its derivative
      ``s ⊙ (g − ⟨s, g⟩)`` cancels): use :func:`gradflow.softmax` / :func:`gradflow.log_softmax`
      in the loss instead (drop-ins with the exact centred derivative, any ``axis``), e.g.
      ``loss = lambda p: -jnp.log(gradflow.softmax(p["a"])[0])``; or pass an exact field as
      ``field``. Like a function under :func:`jax.jit`, the loss (and every user function) is
      traced once per function object and argument shapes, and that trace is reused by every
      later call in the process, whatever its other settings: a value it reads from a global
      is the one it had at the first call. Pass values that change through ``args``, or call
      :func:`jax.clear_caches` after changing them.
    - ``params0``: any pytree (dict, list, tuple, an equinox Module whose leaves are arrays, …)
      of real float arrays or Python floats: finite, non-empty; cast to float64. (For a Module
      with non-array leaves, pass ``eqx.partition(model, eqx.is_inexact_array)[0]`` and the
      static part through ``args``.)
    - ``t1``: final flow time, ``0 < t1 < ∞``.
    - ``t0``: the flow time of ``params0`` (default ``0``), ``0 ≤ t0 < t1``. The flow is
      autonomous, so the path from ``θ(t0) = params0`` is the same for any ``t0``; what ``t0``
      sets is the origin of the log time, which stays at ``t = 0``. To resume a run, pass
      ``params0=sol.params_end, t0=float(sol.t_end)``: the steps go on from where they were
      (their length in ``t`` grows like ``1 + t``) instead of restarting from steps sized for
      ``t = 0``. (Each call still starts ``solver="auto"`` in its explicit phase; docs:
      Performance, "Large models".) ``[t0, t1]`` must be resolved in log time: ``t1 − t0`` at
      least about ``1e6`` float64 spacings of ``log1p(t1)`` times ``1 + t1``. Far from the origin
      log time cannot resolve fast dynamics either: a transient of time scale ``1/λ`` at ``t0``
      spans ``≈ 1/(λ·t0)`` in log time, and a run whose steps must fall below ``1024`` ulps of
      ``log1p(t1)`` (``6e-12`` at ``t1 = 1e12``, so ``λ·t0 ≳ 5e11``) ends ``stalled``. Start such a
      flow nearer the origin, where its fast modes decay before ``t`` is large.
    - ``ts``: flow times to save at, strictly increasing in ``[t0, t1]``; default ``t0`` and 400
      log-spaced points from ``t0 + 1e-3`` to ``t1`` (for ``t0 > 0``, the default grid of a run of
      length ``t1 − t0`` shifted by ``t0``).
    - ``args``: any pytree passed to every user function (not differentiated); ``None``: the
      functions take ``params`` only.
    - ``rtol``, ``atol``: tolerances of the PID step-size controller on the state in log time
      (default ``1e-8`` and ``rtol/100``).
    - ``solver``: one of :data:`gradflow.SOLVERS` (default ``"auto"``, for every flow: Dopri8
      with stiffness detection per lane, switching to an implicit method once its steps are
      stability-limited, and back when they are not: Rodas4 with its linear systems solved by a
      few sweeps preconditioned by one eigendecomposition of the Hessian per round for gradient
      flows of at least 128 parameters, Rodas4 with an LU factorisation per step otherwise; see
      :data:`gradflow.SOLVERS` and the docs' solver guide).
    - ``max_steps``: solver step budget (default 16384); reaching it gives status ``max_steps``,
      and ``sol.params_end`` is the state at ``sol.t_end`` to resume from.
    - ``observe``: ``{name: f}``, each ``f(params)`` returning one real array (any shape),
      saved at ``ts`` into ``sol.observed[name]``.
    - ``quadratures``: ``{name: g}``, each ``g(params)`` returning a float scalar; ``∫₀ᵗ g dt``
      is integrated as ODE state (same tolerances) into ``sol.quadratures[name]`` (from ``t0``:
      ``∫_{t0}^t g dt``).
    - ``rest_stop``: ``True`` (default): stop once the flow is at rest, i.e. once the movement
      left to it, bounded through its local linearisation in log time, is below 1% of
      the tolerance (:func:`gradflow._engine.solve.at_rest`; the argument, and where it could
      still be fooled, in the docs' solver guide). It cannot fire while the flow moves in log
      time (a logistic loss whose margin grows like ``log t``, max-margin token selection) nor
      near a saddle the flow is leaving. After the stop the later save points hold the rest state
      (``sol.t_steady`` says when), observables are evaluated there and each quadrature
      continues exactly as ``g(θ_rest)·(t − t_rest)``. ``False``: integrate to ``t1`` whatever
      happens (stiffness is still detected under ``auto``).
    - ``field``: optional ``field(params)`` returning ``dθ/dt`` (a pytree like ``params``) used
      instead of ``−∇loss``, e.g. an exactly rewritten gradient; ``loss`` is then only observed.
    - ``policy``: the phase policy of ``solver="auto"``, a :class:`gradflow.AutoPolicy` (default
      ``None``: ``AutoPolicy()``, whose thresholds and their arguments are in the docs' solver
      guide, "The auto policy"); ignored by the other solvers.

    **Returns:** a :class:`gradflow.Solution` (``t``, ``params`` with a leading time axis, ``loss``,
    ``grad_norm``, ``observed``, ``quadratures``, ``valid``, ``status``, ``t_end``, ``t_steady``,
    ``num_steps``). Solver failures do not raise: see ``sol.status``. ``sol.metadata`` holds the
    settings, and ``"phases"``: the solvers the run went through, comma-separated in the order
    first run (under ``auto`` e.g. ``"dopri8,rkc"``; for ``integrate_batch``, those of any lane).

    **Raises:** :class:`gradflow.GradflowValueError` for a loss that is not a function, fails to
    trace, is not a real float scalar, cannot be differentiated or is non-finite (or has a
    non-finite gradient) at ``params0``; an empty ``params0`` or one with non-float, complex or
    non-finite leaves; bad ``t1``, ``t0``, ``ts``, ``rtol``, ``atol``, ``max_steps``, ``solver``, ``policy`` or ``rest_stop``;
    ``observe``/``quadratures`` that are not dicts of functions, fail to trace or return the
    wrong kind of value.

    >>> import gradflow, jax.numpy as jnp
    >>> loss = lambda p: 0.5 * (2.0 - p["w2"] * p["w1"]) ** 2      # two-layer scalar linear net
    >>> sol = gradflow.integrate(loss, {"w1": 0.1, "w2": 0.1}, t1=1e6)
    >>> w1 = sol.params["w1"]                                       # (T,): w1 at each save point
    >>> sol.status, round(float(w1[-1] ** 2), 6)                    # w² → y
    ('ok', 2.0)
    """
    opts = SolveOptions(ts=ts, rtol=rtol, atol=atol, max_steps=max_steps, solver=solver, rest_stop=rest_stop, policy=policy)
    user, params0, args = prepare_user(loss, params0, args, field, observe, quadratures, batch=False)
    settings, ts = opts.settings(t1, t0)
    lanes = jax.tree.map(lambda x: x[None], params0)
    phases: list = []
    out = _batch.run(user.flow(rest_stop, settings.solver == "auto"), args, lanes, settings.replace(lane=0),
                     devices=jax.local_devices()[:1], phases=phases)
    return _solution(out, ts, _meta(settings, rest_stop, t0, phases), tau0=settings.tau0)


def integrate_batch(
    loss: Callable,
    params0s: Any,
    *,
    t1: float,
    t0: float = 0.0,
    ts=DEFAULTS.ts,
    args: Any = None,
    args_batched: bool = False,
    rtol: float = DEFAULTS.rtol,
    atol: float | None = DEFAULTS.atol,
    solver: str = DEFAULTS.solver,
    max_steps: int = DEFAULTS.max_steps,
    observe: Mapping[str, Callable] | None = None,
    quadratures: Mapping[str, Callable] | None = None,
    rest_stop: bool = DEFAULTS.rest_stop,
    field: Callable | None = None,
    devices: Sequence[jax.Device] | None = None,
    fixed_width: bool = False,
    policy: AutoPolicy | None = DEFAULTS.policy,
) -> Solution:
    """:func:`integrate` for ``B`` initial conditions at once (``jax.vmap`` over lanes).

    Every leaf of ``params0s`` carries a leading batch axis ``B``. ``t0`` is one start time for
    every lane (lanes that ended at different times are resumed by one call each). ``args`` is shared by all
    lanes, or, with ``args_batched=True``, has a leading axis ``B`` on every array leaf (one
    data set or teacher per lane). Every array of the returned :class:`gradflow.Solution` gains
    a leading axis ``B``; ``status`` is per lane. Lanes are solved in rounds (lanes still
    running after a round continue alone) and sharded over ``devices`` (default all of
    ``jax.local_devices()``), as in :func:`gradflow.simulate_batch`; results on another number of
    devices, or of a lane in another batch, agree within the tolerances, not bit for bit (on a CPU,
    ``JAX_NUM_CPU_DEVICES`` = the number of cores gives one device per core; see
    :func:`gradflow.simulate_batch`). ``fixed_width`` (default ``False``): every round runs all ``B``
    lanes, so a lane's result is bit for bit the same whichever other lanes share its batch, for the
    same ``B`` and ``devices`` (as in :func:`gradflow.simulate_batch`). Shapes and static settings
    are compiled once per process.

    **Raises:** as :func:`integrate`, plus leaves of differing batch sizes, batched ``args``
    without the batch axis, or a bad ``devices``.
    """
    opts = SolveOptions(ts=ts, rtol=rtol, atol=atol, max_steps=max_steps, solver=solver, rest_stop=rest_stop, policy=policy)
    user, params0s, args = prepare_user(loss, params0s, args, field, observe, quadratures, batch=True,
                                        args_batched=bool(args_batched))
    settings, ts = opts.settings(t1, t0)
    devices = _batch.check_devices(devices)
    B = jax.tree.leaves(params0s)[0].shape[0]
    phases: list = []
    out = _batch.run(user.flow(rest_stop, settings.solver == "auto"), args, params0s,
                     settings.replace(args_batched=bool(args_batched), fixed_width=bool(fixed_width)), devices=devices,
                     phases=phases)
    return _solution(out, ts, _meta(settings, rest_stop, t0, phases), batch_shape=(B,), tau0=settings.tau0)
