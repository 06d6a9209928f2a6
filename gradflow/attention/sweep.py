"""Grids of seeds × configurations, run in chunks of seeds (one :func:`simulate_batch` each)
into one zarr store, resumable (``gradflow sweep``).

A sweep is one zarr store (format 2, consolidated metadata) that ``xarray.open_zarr(OUT)`` (or
:func:`load_sweep`) reads as a Dataset with dims ``seed``, one per grid axis (``loss_fn``, ``n``,
``normalization``, ``t1``, ``rtol``, ``init_scale``; length 1 when not swept), ``t`` (saved
points; the flow time is ``time(t1, t)``), ``dim`` and ``token`` (rows and columns of ``V``,
padded with NaN to the largest ``n`` of the grid). Variables: ``V``, ``a``, ``s``, ``u``,
``beta_star``, ``loss``, ``Gamma``, ``entropy``, ``valid``, ``num_steps``, ``status`` (names of
:data:`gradflow.STATUS`), ``t_end``, ``t_steady``, the end state ``V_end``, ``a_end``,
``Gamma_end`` (as in :class:`gradflow.Trajectory`) and ``done`` (whether that chunk is
written). Each chunk of
seeds of one configuration is one zarr chunk of every variable, written by one region write; its
``done`` entries are written after its data, so a rerun with the same spec computes exactly the
chunks that are not ``done`` (a run killed mid-write recomputes that chunk). A different spec for
an existing store is refused. ``attrs``: ``spec`` (JSON) and package versions.

Per seed (NumPy ``RandomState(seed)`` in the order of the authors' Fig. 2 notebook; docs:
Figures): ``V0 = init_scale·randn(d, n)``, ``a0 = 0·randn(n)`` (the draw is consumed, as the
authors did), ``β* = randn(d)/‖·‖``; so seed 123, ``n = 8``, ``init_scale = 0.1`` is Fig. 2's run.
Every run starts from ``a0 = 0``, so only maps defined there (non-zero denominator at ``a = 0``)
are accepted; the loss is ``LogisticTeacher(β*)`` (``loss="logistic"``) or ``SquareLoss(β*)``
(``loss="square"``, paper Eq. 8).

Across processes (``jax.distributed``, one process per host): :func:`run_sweep` with
``process_index``/``process_count`` (``gradflow sweep --coordinator ... --num-processes N
--process-id I``); see the docs page "Labelled data and sweeps".

**The same bits however the sweep is split.** A chunk is solved as groups of ``spec.lanes``
consecutive seeds (:func:`_groups`, the last one padded), each group one
:func:`simulate_batch` on one device with ``fixed_width=True`` (every round runs all
``spec.lanes`` rows), the devices of a process solving groups in parallel threads. Every program
a seed runs in then has the same shape whatever else is computed, so a seed's stored state is
bit for bit the same for any number of processes, devices per process and ``chunk``, and any
resume, for the same spec on the same machine and library versions. Not bit-equal (the compiled
programs differ, and the step-size control carries a last-bit difference into differences of the
order of the tolerance): another ``lanes``, another machine or jax/jaxlib/``XLA_FLAGS``;
agreement there is within the tolerances (a batch sharded over the devices, as
``simulate_batch`` runs one by default, is another program than the same lanes on one device).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm.auto import tqdm

import jax
import jax.numpy as jnp

from .._errors import bad_arg
from .._validate import check_positive, check_positive_int
from .._engine.batch import LANES_PER_SOLVE
from .._engine.settings import DEFAULTS, default_ts
from .._engine.stiff import blas_threads
from .._engine.solvers import SOLVERS
from ._simulate import simulate_batch
from .losses import LogisticTeacher, SquareLoss
from .maps import MAPS, apply_map
from .trajectory import STATUS

__all__ = ["SweepSpec", "run_sweep", "load_sweep", "fig2_init", "GRID_KEYS", "GRID_DIMS"]

GRID_KEYS = ("loss", "n", "normalization", "t1", "rtol", "init_scale")
"""Spec fields that take a list of values; the grid is their Cartesian product."""
GRID_DIMS = ("loss_fn", "n", "normalization", "t1", "rtol", "init_scale")
"""The store's dimension for each of :data:`GRID_KEYS` (``loss`` is the loss value there)."""
LOSSES = ("logistic", "square")
_AT_ZERO = "e.g. softmax, sigmoid, sigmoid-norm, elu, elu-norm, sparsemax; not l1, sum, l2, relu (0/0 at a = 0)"


@dataclass(frozen=True)
class SweepSpec:
    """A sweep: seeds ``seed_start ≤ seed < seed_stop`` × the grid of :data:`GRID_KEYS`.

    - ``loss``: list of ``"logistic"``/``"square"``; ``n``: list of sizes (``d = n``);
      ``normalization``: list of map names; ``t1``: list of flow horizons; ``rtol``: list of
      tolerances (``atol = rtol/100``); ``init_scale``: list of scales of ``V0``.
    - ``chunk``: seeds per chunk (one zarr chunk, one region write); ``lanes``: seeds per solve
      (a chunk is solved as groups of ``lanes`` consecutive seeds, the last one padded; default
      16, at most :data:`gradflow._engine.batch.LANES_PER_SOLVE`); ``points``: save points per run
      (:func:`gradflow._engine.settings.default_ts`); ``solver``, ``max_steps`` as in :func:`simulate`.

    A seed's stored state depends on the spec, not on ``chunk``'s split of it into groups
    of another composition, the number of processes or the devices per process (see the module's
    docstring); ``lanes`` is the one field besides the grid that changes it, within the tolerances.
    """

    seed_start: int = 0
    seed_stop: int = 64
    chunk: int = 64
    lanes: int = 16
    loss: tuple = ("logistic",)
    n: tuple = (8,)
    normalization: tuple = ("softmax",)
    t1: tuple = (1e12,)
    rtol: tuple = (DEFAULTS.rtol,)
    init_scale: tuple = (0.1,)
    points: int = 50
    solver: str = DEFAULTS.solver
    max_steps: int = DEFAULTS.max_steps
    configs: list = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not (0 <= self.seed_start < self.seed_stop):
            raise bad_arg("seeds", f"{self.seed_start}:{self.seed_stop}", "START:STOP with 0 ≤ START < STOP")
        for key in ("chunk", "lanes", "points", "max_steps"):
            check_positive_int(key, getattr(self, key))
        if self.lanes > LANES_PER_SOLVE:
            raise bad_arg("lanes", self.lanes, f"at most {LANES_PER_SOLVE} (seeds per solve on one device)")
        for value in self.loss:
            if value not in LOSSES:
                raise bad_arg("loss", value, f"one of {list(LOSSES)}")
        for value in self.normalization:
            if value not in MAPS:
                raise bad_arg("normalization", value, f"one of {sorted(MAPS)}")
            if not np.all(np.isfinite(np.asarray(apply_map(jnp.zeros(2), value)))):
                raise bad_arg("normalization", value, f"a map defined at a0 = 0, where every sweep run starts ({_AT_ZERO})")
        if self.solver not in SOLVERS:
            raise bad_arg("solver", self.solver, f"one of {list(SOLVERS)}")
        for value in self.n:
            check_positive_int("n", value)
        for value in self.rtol:
            check_positive("rtol", value, upper=1.0)
        for key in ("t1", "init_scale"):
            for value in getattr(self, key):
                if isinstance(value, bool) or not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                    raise bad_arg(key, value, "positive finite numbers")
        grid = [dict(zip(GRID_KEYS, combo)) for combo in itertools.product(*(getattr(self, k) for k in GRID_KEYS))]
        object.__setattr__(self, "configs", grid)

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("configs")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def chunks(self):
        """``(config_index, seed_lo, seed_hi)`` for every chunk, configurations outermost."""
        for c in range(len(self.configs)):
            for lo in range(self.seed_start, self.seed_stop, self.chunk):
                yield c, lo, min(lo + self.chunk, self.seed_stop)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Lengths of the grid axes, in :data:`GRID_KEYS` order (``configs`` is their product, C order)."""
        return tuple(len(getattr(self, key)) for key in GRID_KEYS)


def fig2_init(seed: int = 123, n: int = 8, scale: float = 0.1):
    """The draws of the paper's Fig. 2 (the authors' notebook; docs: Figures), NumPy legacy
    ``RandomState(seed)`` in the authors' order: ``V = scale·randn(n, n)``, then ``a = 0·randn(n)``
    (the draw is consumed), then ``β* = randn(n)`` normalised to length 1.

    **Returns:** ``(V0 (n, n), a0 (n,), beta_star (n,))`` float64. The one copy of this draw: the
    sweeps here, the figures (``gradflow.sims.draws``) and the benchmarks use it."""
    rng = np.random.RandomState(seed)
    V0 = scale * rng.randn(n, n)
    a0 = 0.0 * rng.randn(n)
    beta_star = rng.randn(n)
    return V0, a0, beta_star / np.linalg.norm(beta_star)


def _draws(cfg: dict, seeds):
    n = int(cfg["n"])
    V0s, losses = [], []
    for seed in seeds:
        V0, _, beta_star = fig2_init(int(seed), n, cfg["init_scale"])
        V0s.append(V0)
        losses.append(LogisticTeacher(beta_star) if cfg["loss"] == "logistic" else SquareLoss(beta_star))
    return np.stack(V0s), np.zeros((len(seeds), n)), losses


_FLOAT_VARS = {  # name -> dims after the grid axes and `seed`
    "V": ("t", "dim", "token"), "a": ("t", "token"), "s": ("t", "token"), "u": ("t", "token"),
    "loss": ("t",), "Gamma": ("t",), "entropy": ("t",), "t_end": (), "t_steady": (),
    "V_end": ("dim", "token"), "a_end": ("token",), "Gamma_end": (), "beta_star": ("dim",),
}
_OTHER_VARS = {"valid": (("t",), "bool"), "num_steps": ((), "int64"), "status": ((), "<U16"), "done": ((), "bool")}


def _groups(lo: int, hi: int, lanes: int) -> list[np.ndarray]:
    """The seeds ``lo ≤ seed < hi`` of one chunk as solves of exactly ``lanes`` seeds each:
    consecutive seeds, the last group padded by repeating its last seed (the padding's results
    are dropped)."""
    groups = []
    for start in range(lo, hi, lanes):
        seeds = np.arange(start, min(start + lanes, hi))
        groups.append(np.concatenate([seeds, np.full(lanes - seeds.size, seeds[-1])]))
    return groups


def _solve_group(spec: SweepSpec, cfg: dict, seeds: np.ndarray, device) -> dict:
    """:func:`simulate_batch` of the draws of ``seeds`` on ``device`` alone (made this thread's
    default device), every round on all rows (``fixed_width``): each seed's result depends on
    the seed, the spec and ``len(seeds)`` only, bit for bit (not on the other seeds, the device,
    the process)."""
    V0s, a0s, losses = _draws(cfg, seeds)
    with jax.default_device(device):
        traj = simulate_batch(
            losses, V0s, a0s, t1=cfg["t1"], ts=default_ts(cfg["t1"], spec.points), rtol=cfg["rtol"],
            atol=cfg["rtol"] / 100, normalization=cfg["normalization"], solver=spec.solver, max_steps=spec.max_steps,
            devices=[device], fixed_width=True)
    out = {name: np.asarray(getattr(traj, name)) for name in _FLOAT_VARS if name != "beta_star"}
    out["beta_star"] = np.asarray([np.asarray(loss.beta_star) for loss in losses])
    out["valid"] = np.asarray(traj.valid)
    out["num_steps"] = np.asarray(traj.num_steps).astype(np.int64)
    out["status_code"] = np.asarray(traj.status_code)
    return out


def _run_chunk(spec: SweepSpec, cfg: dict, lo: int, hi: int, devices=None) -> dict:
    """Solve one chunk: its groups of ``spec.lanes`` seeds (:func:`_groups`), each on one device
    of ``devices`` (default: all of this process's), the devices in parallel (one thread each);
    its arrays padded to the grid's largest ``n`` (NaN)."""
    devices = list(devices) if devices is not None else jax.local_devices()
    groups = _groups(lo, hi, spec.lanes)
    if len(devices) == 1 or len(groups) == 1:
        parts = [_solve_group(spec, cfg, seeds, devices[0]) for seeds in groups]
    else:
        from concurrent.futures import ThreadPoolExecutor

        def work(k):  # device k solves groups k, k + len(devices), ...
            return [_solve_group(spec, cfg, groups[g], devices[k]) for g in range(k, len(groups), len(devices))]

        # BLAS threads held for the whole chunk: each group's own limit, entered and left at other
        # times in each thread, would otherwise restore the default under a running solve
        with blas_threads(spec.solver), ThreadPoolExecutor(len(devices)) as pool:
            per_device = list(pool.map(work, range(len(devices))))
        parts = [per_device[g % len(devices)][g // len(devices)] for g in range(len(groups))]
    kept = hi - lo
    arrays = {name: np.concatenate([p[name] for p in parts])[:kept] for name in parts[0]}
    n, n_max = int(cfg["n"]), max(spec.n)
    out = {}
    for name, dims in _FLOAT_VARS.items():
        arr = arrays[name]
        pad = [(0, 0)] * arr.ndim
        for axis, dim in enumerate(dims, start=1):
            if dim in ("dim", "token"):
                pad[axis] = (0, n_max - n)
        out[name] = np.pad(arr.astype(np.float64), pad, constant_values=np.nan)
    out["valid"] = arrays["valid"]
    out["num_steps"] = arrays["num_steps"]
    out["status"] = np.asarray([STATUS[int(c)] for c in arrays["status_code"]], dtype="<U16")
    return out


def _versions() -> dict:
    from .._provenance import versions

    return {f"version_{pkg}": v for pkg, v in versions().items()}


def _create_store(spec: SweepSpec, out: str) -> None:
    """Create the store's metadata and coordinates (no data chunks) in a temporary folder beside
    ``out``, then rename it into place (atomic: of two sweeps started together, one store wins)."""
    import shutil
    import tempfile

    import zarr

    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.tmp-{os.getpid()}-", dir=parent)
    try:
        root = zarr.open_group(tmp, mode="w", zarr_format=2)
        grid = spec.grid_shape
        n_seeds, n_max, n_t = spec.seed_stop - spec.seed_start, max(spec.n), spec.points + 1
        sizes = {"seed": n_seeds, "t": n_t, "dim": n_max, "token": n_max}
        chunk_of = {"seed": spec.chunk, "t": n_t, "dim": n_max, "token": n_max}

        def array(name, dims, dtype, fill, chunks=None, attrs=None):
            shape = tuple(len(getattr(spec, GRID_KEYS[GRID_DIMS.index(d)])) if d in GRID_DIMS else sizes[d] for d in dims)
            return root.create_array(name, shape=shape, dtype=dtype, fill_value=fill,
                                     chunks=chunks or shape, attributes={"_ARRAY_DIMENSIONS": list(dims), **(attrs or {})})

        for key, dim in zip(GRID_KEYS, GRID_DIMS):
            values = np.asarray(getattr(spec, key))
            array(dim, (dim,), "<U32" if values.dtype.kind in "UO" else values.dtype, None)[:] = values
        array("seed", ("seed",), "int64", None)[:] = np.arange(spec.seed_start, spec.seed_stop)
        array("time", ("t1", "t"), "float64", None,
              attrs={"long_name": "flow time t of each saved point"})[:] = np.stack([default_ts(t1, spec.points) for t1 in spec.t1])
        data_chunks = lambda dims: tuple([1] * len(grid) + [chunk_of[d] for d in dims])  # noqa: E731
        from .._xarray import LONG_NAMES

        for name, dims in _FLOAT_VARS.items():
            full = GRID_DIMS + ("seed",) + dims
            array(name, full, "float64", np.nan, data_chunks(("seed",) + dims),
                  {"long_name": LONG_NAMES.get(name, "teacher β* (unit norm)" if name == "beta_star" else name),
                   **({"coordinates": "time"} if "t" in dims else {})})
        for name, (dims, dtype) in _OTHER_VARS.items():
            full = GRID_DIMS + ("seed",) + dims
            array(name, full, dtype, None, data_chunks(("seed",) + dims),
                  {"long_name": LONG_NAMES.get(name, "whether this chunk of runs is written"),
                   **({"coordinates": "time"} if "t" in dims else {})})
        root.attrs.update({"spec": json.dumps(spec.to_json()), "source": "gradflow sweep", **_versions()})
        zarr.consolidate_metadata(tmp)
        try:
            os.rename(tmp, out)  # fails if `out` appeared meanwhile (a non-empty folder)
        except OSError:
            if not os.path.isdir(out):
                raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _stored_spec(out: str) -> dict | None:
    try:
        with open(os.path.join(out, ".zattrs")) as f:
            return json.loads(json.load(f)["spec"])
    except (OSError, KeyError, ValueError):
        return None


def run_sweep(spec: SweepSpec, out: str | os.PathLike, progress: bool = True, *, process_index: int = 0,
              process_count: int = 1, devices=None) -> dict:
    """Run (or resume) the sweep ``spec`` into the zarr store ``out``.

    Several processes (e.g. one per host, under ``jax.distributed``) share one sweep: process
    ``process_index`` of ``process_count`` takes the chunks ``k`` (in :meth:`SweepSpec.chunks`
    order) with ``k % process_count == process_index`` and writes their regions of the one store;
    any process may create the store (one creation wins, the others find the same spec). Each
    solves on ``devices`` (default: ``jax.local_devices()``, this process's own).

    A store created by an older gradflow, without some of today's variables (``t_steady`` and
    the end state ``V_end``, ``a_end``, ``Gamma_end``), resumes without them.

    **Returns:** ``dict(computed=[...], skipped=[...])``: this process's chunks
    ``(config_index, seed_lo, seed_hi)`` solved now and those already written.

    **Raises:** :class:`gradflow.GradflowValueError` if ``out`` exists and is not the store of
    the same sweep (another spec, or not a gradflow sweep store), or for ``process_count < 1``
    or ``process_index`` outside ``[0, process_count)``.
    """
    check_positive_int("process_count", process_count)
    if isinstance(process_index, bool) or not isinstance(process_index, (int, np.integer)) or not 0 <= process_index < process_count:
        raise bad_arg("process_index", process_index, f"an integer in [0, {process_count})")
    import xarray as xr
    import zarr

    out = os.fspath(out)
    spec_json = spec.to_json()
    if not os.path.exists(out) or (os.path.isdir(out) and not os.listdir(out)):
        if os.path.isdir(out):
            try:
                os.rmdir(out)
            except OSError:  # another process's store appeared meanwhile
                pass
        _create_store(spec, out)
    old = _stored_spec(out)
    if old != spec_json:
        raise bad_arg("out", out, "a new path, or the zarr store of the same sweep (it holds "
                      + ("a different sweep" if old is not None else "no gradflow sweep") + ")")
    done = np.asarray(zarr.open_array(os.path.join(out, "done"), mode="r")[...])
    grid = spec.grid_shape
    computed, skipped = [], []
    chunks = [chunk for k, chunk in enumerate(spec.chunks()) if k % process_count == process_index]
    with tqdm(total=len(chunks), desc="sweep", unit="chunk", disable=not progress) as bar:
        for c, lo, hi in chunks:
            index = np.unravel_index(c, grid)
            seeds = slice(lo - spec.seed_start, hi - spec.seed_start)
            if done[tuple(index) + (seeds,)].all():
                skipped.append((c, lo, hi))
            else:
                arrays = _run_chunk(spec, spec.configs[c], lo, hi, devices)
                region = {dim: slice(int(i), int(i) + 1) for dim, i in zip(GRID_DIMS, index)}
                region["seed"] = seeds
                lead = (1,) * len(grid)
                data = {}
                for name, value in arrays.items():
                    if not os.path.isdir(os.path.join(out, name)):  # a store written before the variable existed
                        continue
                    dims = _FLOAT_VARS[name] if name in _FLOAT_VARS else _OTHER_VARS[name][0]
                    data[name] = (GRID_DIMS + ("seed",) + dims, value.reshape(lead + value.shape))
                ds = xr.Dataset(data)
                ds.to_zarr(out, region=region, mode="r+", consolidated=False)
                flag = xr.Dataset({"done": (GRID_DIMS + ("seed",), np.ones(lead + (hi - lo,), bool))})
                flag.to_zarr(out, region=region, mode="r+", consolidated=False)  # after the data: marks it complete
                computed.append((c, lo, hi))
            bar.update(1)
    return dict(computed=computed, skipped=skipped)


def load_sweep(out: str | os.PathLike):
    """The sweep store ``out`` as a lazy ``xarray.Dataset`` (``xarray.open_zarr(out)``); runs
    not yet written have ``done == False`` (their values are NaN).

    **Raises:** :class:`gradflow.GradflowValueError` if ``out`` is not a gradflow sweep store.
    """
    import xarray as xr

    out = os.fspath(out)
    if _stored_spec(out) is None:
        raise bad_arg("out", out, "the zarr store written by gradflow sweep")
    return xr.open_zarr(out)
