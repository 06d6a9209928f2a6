"""Grids of seeds × configurations, run in chunks of seeds (one :func:`simulate_batch` each),
one data file per chunk, resumable (``gradflow sweep``).

A sweep lives in one folder: ``sweep.json`` (the spec) and ``cNNN-sAAAAAA-BBBBBB.npz`` per
chunk (configuration ``NNN``, seeds ``AAAAAA ≤ seed < BBBBBB``), each written atomically. A
rerun with the same spec skips chunks whose file exists; a different spec in the same folder
is refused.

Per seed (NumPy ``RandomState(seed)``, Fig. 2's order, as the authors' notebook draws them): ``V0 = init_scale·randn(d, n)``,
``a0 = 0·randn(n)`` (the draw is consumed, as the authors did), ``β* = randn(d)/‖·‖``; so seed 123,
``n = 8``, ``init_scale = 0.1`` is Fig. 2's run. Every run starts from ``a0 = 0``, so only maps
defined there (non-zero denominator at ``a = 0``) are accepted; the loss is ``LogisticTeacher(β*)`` (``loss="logistic"``) or
``SquareLoss(β*)`` (``loss="square"``, paper Eq. 8).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm.auto import tqdm

import jax.numpy as jnp

from ._errors import bad_arg
from ._validate import check_positive, check_positive_int
from ._engine.solve import SOLVERS, default_ts
from .simulate import simulate_batch
from .losses import LogisticTeacher, SquareLoss
from .maps import MAPS, apply_map
from .trajectory import atomic_write

__all__ = ["SweepSpec", "run_sweep", "load_sweep", "GRID_KEYS"]

GRID_KEYS = ("loss", "n", "normalization", "t1", "rtol", "init_scale")
"""Spec fields that take a list of values; the grid is their Cartesian product."""
LOSSES = ("logistic", "square")
_AT_ZERO = "e.g. softmax, sigmoid, sigmoid-norm, elu, elu-norm, sparsemax; not l1, sum, l2, relu (0/0 at a = 0)"


@dataclass(frozen=True)
class SweepSpec:
    """A sweep: seeds ``seed_start ≤ seed < seed_stop`` × the grid of :data:`GRID_KEYS`.

    - ``loss``: list of ``"logistic"``/``"square"``; ``n``: list of sizes (``d = n``);
      ``normalization``: list of map names; ``t1``: list of flow horizons; ``rtol``: list of
      tolerances (``atol = rtol/100``); ``init_scale``: list of scales of ``V0``.
    - ``chunk``: seeds per chunk (one batch, one file); ``points``: save points per run
      (:func:`gradflow._engine.solve.default_ts`); ``solver``, ``max_steps`` as in :func:`simulate`.
    """

    seed_start: int = 0
    seed_stop: int = 64
    chunk: int = 64
    loss: tuple = ("logistic",)
    n: tuple = (8,)
    normalization: tuple = ("softmax",)
    t1: tuple = (1e12,)
    rtol: tuple = (1e-8,)
    init_scale: tuple = (0.1,)
    points: int = 50
    solver: str = "auto"
    max_steps: int = 16384
    configs: list = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not (0 <= self.seed_start < self.seed_stop):
            raise bad_arg("seeds", f"{self.seed_start}:{self.seed_stop}", "START:STOP with 0 ≤ START < STOP")
        for key in ("chunk", "points", "max_steps"):
            check_positive_int(key, getattr(self, key))
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
        """``(config_index, seed_lo, seed_hi, file_name)`` for every chunk."""
        for c in range(len(self.configs)):
            for lo in range(self.seed_start, self.seed_stop, self.chunk):
                hi = min(lo + self.chunk, self.seed_stop)
                yield c, lo, hi, f"c{c:03d}-s{lo:06d}-{hi:06d}.npz"


def _draws(cfg: dict, seeds):
    d = n = int(cfg["n"])
    V0s, losses = [], []
    for seed in seeds:
        rng = np.random.RandomState(seed)
        V0s.append(cfg["init_scale"] * rng.randn(d, n))
        rng.randn(n)  # a = 0·randn(n): consumed, as in Fig. 2 (the authors' notebook)
        beta_star = rng.randn(d)
        beta_star /= np.linalg.norm(beta_star)
        losses.append(LogisticTeacher(beta_star) if cfg["loss"] == "logistic" else SquareLoss(beta_star))
    return np.stack(V0s), np.zeros((len(seeds), n)), losses


def _run_chunk(spec: SweepSpec, cfg: dict, lo: int, hi: int) -> dict:
    seeds = np.arange(lo, hi)
    V0s, a0s, losses = _draws(cfg, seeds)
    ts = default_ts(cfg["t1"], spec.points)
    traj = simulate_batch(
        losses, V0s, a0s, t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["rtol"] / 100,
        normalization=cfg["normalization"], solver=spec.solver, max_steps=spec.max_steps,
    )
    arrays = {name: np.asarray(getattr(traj, name)) for name in ("t", "V", "a", "s", "loss", "Gamma", "entropy", "u", "num_steps", "status_code", "t_end")}
    arrays["seeds"] = seeds
    arrays["config_json"] = np.asarray(json.dumps(cfg))
    return arrays


def run_sweep(spec: SweepSpec, out: str | os.PathLike, progress: bool = True) -> dict:
    """Run (or resume) the sweep ``spec`` in folder ``out``; returns counts of chunks
    ``computed`` and ``skipped`` and the ``files``.

    **Raises:** :class:`gradflow.GradflowValueError` if ``out`` holds a different sweep.
    """
    out = os.fspath(out)
    os.makedirs(out, exist_ok=True)
    manifest = os.path.join(out, "sweep.json")
    spec_json = spec.to_json()
    if not os.path.exists(manifest):  # exclusive: of two sweeps started together, the first spec wins
        atomic_write(manifest, lambda f: f.write(json.dumps(spec_json, indent=1).encode()), exclusive=True)
    with open(manifest) as f:  # ours, or the one another sweep created first
        old = json.load(f)
    if old != spec_json:
        raise bad_arg("out", out, "a new folder, or the folder of the same sweep (it holds a different sweep.json)")
    chunks = list(spec.chunks())
    computed, skipped = [], []
    with tqdm(total=len(chunks), desc="sweep", unit="chunk", disable=not progress) as bar:
        for c, lo, hi, name in chunks:
            path = os.path.join(out, name)
            if os.path.exists(path):
                skipped.append(name)
            else:
                arrays = _run_chunk(spec, spec.configs[c], lo, hi)
                atomic_write(path, lambda f: np.savez(f, **arrays))
                computed.append(name)
            bar.update(1)
    return dict(computed=computed, skipped=skipped, files=[name for *_, name in chunks])


def load_sweep(out: str | os.PathLike) -> list[dict]:
    """All chunks of the sweep in ``out``: one dict per configuration with its ``config`` and
    the arrays of its chunks concatenated along the seed axis (missing chunks are left out)."""
    out = os.fspath(out)
    with open(os.path.join(out, "sweep.json")) as f:
        spec = SweepSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.load(f).items()})
    per_config: dict[int, list] = {}
    for c, _, _, name in spec.chunks():
        path = os.path.join(out, name)
        if os.path.exists(path):
            with np.load(path) as z:
                per_config.setdefault(c, []).append({k: z[k] for k in z.files if k != "config_json"})
    return [
        dict(config=spec.configs[c], **{k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "t"},
             t=parts[0]["t"][0])
        for c, parts in sorted(per_config.items())
    ]
