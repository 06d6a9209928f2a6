"""Every documented field of the result objects survives each way out of the process, and their
aggregate properties agree with the per-lane statuses.

The field lists are not written here: they are read from the classes (``dataclasses.fields`` of
:class:`gradflow.Trajectory` and :class:`gradflow.Solution`, equinox Modules), so a field added
later is covered by every test below without editing it. Each way out is compared field by field
with :func:`field_differences`: bitwise (dtype, shape and bytes) for arrays, ``None`` for ``None``,
the pytree structure for dicts and parameter trees, equality for ``meta``. The ways out:

- ``Trajectory.save``/``Trajectory.load`` (an ``.npz``, lossless);
- ``Trajectory.to_xarray()``, read back into the fields by the inverse of its documented naming
  (``status`` holds the names of ``status_code``, ``t``/``time`` and ``k`` are coordinates,
  ``attrs["meta_json"]`` holds ``meta``; every other field is the variable of its own name), each
  variable's leading dims checked against the field's annotation (``run`` for a batch, ``t`` for
  a field with a time axis ``T``);
- the sweep store (:func:`gradflow.attention.sweep.run_sweep`, :func:`gradflow.attention.sweep.load_sweep`) against a
  direct :func:`gradflow.simulate_batch` of the same draws;
- pickling (how Python hands a result to another process) and passing through ``jax.jit`` (a
  result is a pytree); :class:`gradflow.Solution` has no file format and no ``to_xarray``, so
  these two are its only ways out.

The aggregates (``ok``, ``status``, ``batched``, ``valid``, ``t_end``) are tested on a batch with
an ``ok``, a ``max_steps`` and a ``nonfinite`` lane, on every sub-batch of it, and on single runs,
against what the per-lane statuses and a hand calculation give.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pickle
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow.attention import sweep as sweep_mod
from gradflow.attention import trajectory as trajectory_mod
from tests.test_failures import CliffTeacher

BETA = np.array([0.6, 0.0, 0.8])
V0 = 0.1 * np.random.RandomState(0).randn(3, 3)
TS = np.array([0.0, 0.1, 1.0, 10.0, 100.0, 1e3])


# --------------------------------------------------------------------------- the comparison
def field_names(cls) -> list[str]:
    """The fields of a result class, in declaration order (``dataclasses.fields``)."""
    return [f.name for f in dataclasses.fields(cls)]


def field_dims(cls, name: str) -> tuple[str, ...] | None:
    """The dim names of field ``name``'s jaxtyping annotation (``("*B", "T", "d", "n")`` for
    ``Float[Array, "*B T d n"]``), or ``None`` for a field without one (``params``, ``meta``)."""
    annotation = {f.name: f.type for f in dataclasses.fields(cls)}[name]
    found = re.search(r'"([^"]*)"', str(annotation))
    return tuple(found.group(1).split()) if found else None


def _leaf_difference(where: str, got, want) -> str | None:
    if got is None or want is None:
        return None if got is None and want is None else f"{where}: {type(got).__name__} instead of {type(want).__name__}"
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype != w.dtype:
        return f"{where}: dtype {g.dtype} instead of {w.dtype}"
    if g.shape != w.shape:
        return f"{where}: shape {g.shape} instead of {w.shape}"
    if np.ascontiguousarray(g).tobytes() != np.ascontiguousarray(w).tobytes():
        differ = int(np.sum(~((g == w) | ((g != g) & (w != w)))))
        return f"{where}: different bits ({differ} of {w.size} entries differ in value)"
    return None


def field_differences(got, want) -> list[str]:
    """One line per field of ``want`` (a Trajectory or Solution) that ``got`` does not hold bit
    for bit: a missing or extra ``None``, another pytree structure, dtype, shape or value, or
    another ``meta``. Empty when every field survived."""
    out = []
    for name in field_names(type(want)):
        g, w = getattr(got, name, None), getattr(want, name)
        if name == "meta":
            if tuple(g) != tuple(w):
                out.append(f"meta: {g!r} instead of {w!r}")
            continue
        if g is None or w is None:
            if not (g is None and w is None):
                out.append(f"{name}: {'None' if g is None else 'a value'} instead of {'None' if w is None else 'a value'}")
            continue
        if jax.tree.structure(g) != jax.tree.structure(w):
            out.append(f"{name}: pytree {jax.tree.structure(g)} instead of {jax.tree.structure(w)}")
            continue
        for (path, gl), wl in zip(jax.tree_util.tree_leaves_with_path(g), jax.tree.leaves(w)):
            diff = _leaf_difference(name + jax.tree_util.keystr(path), gl, wl)
            if diff:
                out.append(diff)
    return out


def assert_same_fields(got, want):
    diffs = field_differences(got, want)
    assert not diffs, "fields lost or changed:\n" + "\n".join(diffs)


def _as_fields(fields: dict):
    """An object holding ``fields`` as attributes (what :func:`field_differences` reads), built
    without a result class's checks, so a test can hand it a broken field."""
    return type("Fields", (), fields)()


# --------------------------------------------------------------------------- results
def _loss(p, k):
    return -p["y"] + 0.5 * jnp.sum(p["w"] ** 2)


def _lane_field(p, k):
    """Per-lane field by ``k``: 1: ``y' = 1`` (reaches t1); 2: ``y' = −1000 y`` (stiff: Dopri8's
    steps are stability-limited, thousands needed); 0: ``y' = 1`` into a NaN wall at ``y = 1``
    (from ``y = 1/4``: at ``t = 3/4`` by hand). ``w' = −w`` on every lane."""
    y = p["y"]
    dy = jnp.where(k == 1.0, jnp.ones_like(y), jnp.where(k == 2.0, -1e3 * y, jnp.where(y < 1.0, 1.0, jnp.nan)))
    return {"y": dy, "w": -p["w"]}


SOL_TS = np.array([0.0, 0.5, 0.7, 1.0, 10.0])
SOL_KIND = np.array([1.0, 2.0, 0.0])
SOL_STATUS = ["ok", "max_steps", "nonfinite"]  # by construction (see _lane_field), max_steps = 200
SOL_OPTIONS = dict(t1=10.0, ts=SOL_TS, field=_lane_field, rest_stop=False, solver="dopri8", max_steps=200,
                   observe={"w2": lambda p, k: 2.0 * p["w"]}, quadratures={"one": lambda p, k: 1.0 + 0.0 * p["y"]})
SOL_P0 = {"y": np.full(3, 0.25), "w": np.ones((3, 2))}

# Trajectory lanes, (teacher scale, V0 scale, cliff): the first ends ok in 8 steps; the second
# would end nonfinite at its cliff (the field NaN past a margin of 5, at t = 212) after 97 steps
# (its steps collapse there), so max_steps = 60 stops it first; the third's cliff is just past its initial margin 0.0814,
# reached after 41 steps at t = 6e-8 (nonfinite).
TRAJ_LANES = [(100.0, 1.0, 1e300), (1.0, 1.0, 5.0), (100.0, 0.01, 0.0815)]
TRAJ_STATUS = ["ok", "max_steps", "nonfinite"]
TRAJ_OPTIONS = dict(t1=1e3, ts=TS, solver="dopri8", max_steps=60)


@pytest.fixture(scope="module")
def sol_batch():
    return gradflow.integrate_batch(_loss, SOL_P0, args=SOL_KIND, args_batched=True, **SOL_OPTIONS)


@pytest.fixture(scope="module")
def sol_singles():
    return [gradflow.integrate(_loss, jax.tree.map(lambda x: x[i], SOL_P0), args=SOL_KIND[i], **SOL_OPTIONS)
            for i in range(3)]


@pytest.fixture(scope="module")
def sol_gd():
    return gradflow.descend_params(lambda p: 0.5 * jnp.sum(p["w"] ** 2), {"w": np.ones(2)}, lr=0.1, steps=20,
                                   record=np.array([0, 5, 20]), observe={"w0": lambda p: p["w"][0]},
                                   quadratures={"one": lambda p: 1.0 + 0.0 * p["w"][0]})


def _traj_inputs(lanes):
    losses = [CliffTeacher(scale * BETA, cliff) for scale, _, cliff in lanes]
    return losses, np.stack([vs * V0 for _, vs, _ in lanes]), np.zeros((len(lanes), 3))


@pytest.fixture(scope="module")
def traj_batch():
    return gradflow.simulate_batch(*_traj_inputs(TRAJ_LANES), **TRAJ_OPTIONS)


@pytest.fixture(scope="module")
def traj_singles():
    return [gradflow.simulate(loss, V, a, **TRAJ_OPTIONS) for loss, V, a in zip(*_traj_inputs(TRAJ_LANES))]


@pytest.fixture(scope="module")
def trajectories(traj_batch, traj_singles):
    """Every kind of Trajectory: a single flow with a teacher (``u``), the mixed batch, a
    row-wise model (logits ``(T, T_tok, T_tok)``), a square loss with a design (no teacher:
    ``u`` is ``None``; at rest: finite ``t_steady``) and GD (``k``; no ``t_steady`` or end state)."""
    design = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.5]])
    return {
        "flow": traj_singles[0],
        "mixed-batch": traj_batch,
        "rowwise": gradflow.simulate(gradflow.LogisticTeacher(BETA[:2]), V0[:2], np.zeros((3, 3)), t1=10.0,
                                     ts=TS[:4], model="rowwise"),
        "square-at-rest": gradflow.simulate(gradflow.SquareLoss(np.array([1.0, -1.0]), design=design), V0,
                                            np.zeros(3), t1=1e6, ts=np.array([0.0, 1.0, 1e6])),
        "gd": gradflow.descend(gradflow.LogisticTeacher(BETA), V0, np.zeros(3), lr=0.1, steps=50,
                               record=np.array([0, 10, 50])),
    }


KINDS = ("flow", "mixed-batch", "rowwise", "square-at-rest", "gd")


# --------------------------------------------------------------------------- the helper itself
def fields_of(result) -> dict:
    return {name: getattr(result, name) for name in field_names(type(result))}


def test_field_differences_sees_every_kind_of_change(trajectories):
    """Negative controls of the comparison: a field set to ``None``, one ulp off, cast to
    float32, given another shape, a ``meta`` entry changed: each is reported under its field's
    name alone; the unchanged result gives no difference."""
    traj = trajectories["flow"]
    assert field_differences(traj, traj) == []
    fields = fields_of(traj)
    changed = {
        "Gamma_end": None,
        "t_steady": np.asarray(traj.t_steady, np.float32),
        "loss": np.asarray(traj.loss)[None],
        "meta": tuple((k, 2.0 if k == "rtol" else v) for k, v in traj.meta),
    }
    for name, value in changed.items():
        diffs = field_differences(_as_fields({**fields, name: value}), traj)
        assert len(diffs) == 1 and diffs[0].startswith(name + ":"), (name, diffs)
    ulp = _as_fields({**fields, "Gamma_end": np.nextafter(np.asarray(traj.Gamma_end), np.inf)})
    assert field_differences(ulp, traj) == ["Gamma_end: different bits (1 of 1 entries differ in value)"]


def test_field_differences_sees_a_lost_dict_entry(sol_batch):
    """Negative control on a Solution: an ``observed`` dict without its entry and a lost
    ``quadratures_end`` are reported, each under its field's name."""
    short = _as_fields({**fields_of(sol_batch), "observed": {}, "quadratures_end": None})
    assert [d.split(":")[0] for d in field_differences(short, sol_batch)] == ["observed", "quadratures_end"]


# --------------------------------------------------------------------------- documented None fields
def test_documented_fields_are_set_and_none_where_documented(trajectories, sol_batch, sol_gd):
    """A flow sets every field but ``k``; GD sets ``k`` and leaves ``t_steady`` and the end state
    ``None``; ``u`` is ``None`` without a teacher (the square loss with a design), as the
    classes' docstrings say. Generated from the fields: a new field must be set by the flow."""
    gd_none = {"t_steady", "V_end", "a_end", "Gamma_end", "params_end", "quadratures_end"}
    for kind, result in [*trajectories.items(), ("solution", sol_batch), ("solution-gd", sol_gd)]:
        none = {name for name in field_names(type(result)) if getattr(result, name) is None}
        want = gd_none & set(field_names(type(result))) if "gd" in kind else {"k"}
        if kind == "square-at-rest":
            want = want | {"u"}
        assert none == want, (kind, none)
    assert 0.0 < float(trajectories["square-at-rest"].t_steady) < 1e6  # a finite t_steady is among the cases


# --------------------------------------------------------------------------- Trajectory: save/load
@pytest.mark.parametrize("kind", KINDS)
def test_trajectory_save_load_keeps_every_field(trajectories, kind, tmp_path):
    """``save`` then ``load`` gives every field back bit for bit (``None`` fields as ``None``)."""
    traj = trajectories[kind]
    traj.save(tmp_path / "run.npz")
    assert_same_fields(gradflow.Trajectory.load(tmp_path / "run.npz"), traj)


OPTIONAL = [f.name for f in dataclasses.fields(gradflow.Trajectory) if f.default is None]


@pytest.mark.parametrize("name", OPTIONAL)
def test_a_save_that_drops_a_field_fails_the_comparison(trajectories, name, tmp_path, monkeypatch):
    """Negative control: ``save`` without one of the optional fields (a file then loads with
    ``None`` there) is reported under that field's name, for every optional field a run holds."""
    traj = trajectories["flow"] if name != "k" else trajectories["gd"]
    assert getattr(traj, name) is not None
    monkeypatch.setattr(gradflow.Trajectory, "_ARRAYS", tuple(n for n in gradflow.Trajectory._ARRAYS if n != name))
    traj.save(tmp_path / "run.npz")
    diffs = field_differences(gradflow.Trajectory.load(tmp_path / "run.npz"), traj)
    assert [d.split(":")[0] for d in diffs] == [name]


# --------------------------------------------------------------------------- Trajectory: xarray
def from_xarray(ds) -> dict:
    """The fields of a Trajectory read back from its ``to_xarray()`` Dataset by the documented
    naming; a field without a variable of its name reads as ``None``."""
    batched = "run" in ds.dims
    lead = (ds.sizes["run"],) if batched else ()
    out = {}
    for name in field_names(gradflow.Trajectory):
        if name == "meta":
            out[name] = tuple(sorted(json.loads(ds.attrs["meta_json"]).items()))
        elif name == "status_code":
            out[name] = np.vectorize(lambda s: gradflow.STATUS.index(str(s)), otypes=[np.int64])(ds["status"].values)
        elif name in ("t", "k"):
            coord = "time" if name == "t" and "time" in ds.coords else name
            value = ds.coords[coord].values if coord in ds.coords else None
            out[name] = None if value is None else np.broadcast_to(value, lead + value.shape[-1:])
        else:
            out[name] = ds[name].values if name in ds.data_vars else None
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_trajectory_to_xarray_keeps_every_field(trajectories, kind):
    """Every field, read back from ``to_xarray()``, is the trajectory's own, bit for bit; each
    variable's leading dims are ``run`` (a batch) and ``t`` where the field's annotation has a
    time axis ``T``; attrs hold ``meta`` entry by entry too."""
    traj = trajectories[kind]
    ds = traj.to_xarray()
    assert_same_fields(_as_fields(from_xarray(ds)), traj)
    lead = ("run",) if traj.batched else ()
    for name in field_names(gradflow.Trajectory):
        dims = field_dims(gradflow.Trajectory, name)
        var = "status" if name == "status_code" else name
        if dims is None or getattr(traj, name) is None or name in ("t", "k"):
            continue
        want = lead + (("t",) if "T" in dims else ())
        assert ds[var].dims[:len(want)] == want, (name, ds[var].dims)
    for key, value in traj.metadata.items():
        assert ds.attrs[f"meta_{key}"] == (value if isinstance(value, (str, int, float, bool)) else json.dumps(value))


def test_an_export_that_drops_a_variable_fails_the_comparison(trajectories):
    """Negative control: a Dataset without ``t_steady``, or with ``Gamma`` one ulp off, is
    reported under that field's name."""
    traj = trajectories["flow"]
    ds = traj.to_xarray()
    assert [d.split(":")[0] for d in field_differences(_as_fields(from_xarray(ds.drop_vars("t_steady"))), traj)] == ["t_steady"]
    gamma = ds["Gamma"].values.copy()
    gamma[-1] = np.nextafter(gamma[-1], np.inf)
    ds = ds.assign(Gamma=(ds["Gamma"].dims, gamma))
    assert [d.split(":")[0] for d in field_differences(_as_fields(from_xarray(ds)), traj)] == ["Gamma"]


# --------------------------------------------------------------------------- pickle and jit
@pytest.mark.parametrize("kind", ("flow", "mixed-batch", "gd", "solution", "solution-gd"))
def test_pickle_and_jit_keep_every_field(trajectories, sol_batch, sol_gd, kind):
    result = {"solution": sol_batch, "solution-gd": sol_gd}.get(kind) or trajectories[kind]
    assert_same_fields(pickle.loads(pickle.dumps(result)), result)
    assert_same_fields(jax.jit(lambda r: r)(result), result)


# --------------------------------------------------------------------------- the sweep store
# Trajectory fields the store holds under another name or not at all, and why.
SWEEP_ELSEWHERE = {
    "t": "the coordinate time(t1, t)",
    "status_code": "status, the names",
    "k": "GD only (a sweep runs the flow)",
    "meta": "the spec in attrs['spec']",
}


def test_sweep_store_keeps_every_field(tmp_path):
    """A one-chunk sweep read back with :func:`load_sweep` holds, for every Trajectory field
    (:data:`SWEEP_ELSEWHERE` aside), the values a direct ``simulate_batch`` of the same draws gives,
    bit for bit, plus ``beta_star`` and ``done``; and nothing else."""
    spec = sweep_mod.SweepSpec(seed_start=2, seed_stop=5, chunk=3, n=(3,), t1=(1e3,), points=4)
    sweep_mod.run_sweep(spec, tmp_path / "sw.zarr", progress=False)
    ds = sweep_mod.load_sweep(tmp_path / "sw.zarr").squeeze(["loss_fn", "n", "normalization", "t1", "rtol", "init_scale"])
    draws = [sweep_mod.fig2_init(seed, 3, 0.1) for seed in range(2, 5)]
    # as the sweep solves them: one group of spec.lanes seeds (the last one repeated), on one device,
    # every round on all rows (docs: data, "The same numbers however the sweep is split")
    group = draws + [draws[-1]] * (spec.lanes - len(draws))
    direct = gradflow.simulate_batch([gradflow.LogisticTeacher(b) for _, _, b in group], np.stack([v for v, _, _ in group]),
                                     np.zeros((len(group), 3)), t1=1e3, ts=ds["time"].values, rtol=1e-8, atol=1e-10,
                                     max_steps=spec.max_steps, devices=jax.local_devices()[:1],
                                     fixed_width=True)[:3]
    stored = [name for name in field_names(gradflow.Trajectory) if name not in SWEEP_ELSEWHERE]
    assert set(ds.data_vars) == {*stored, "status", "beta_star", "done"}
    fields = {name: ds[name].values for name in stored}
    fields.update(t=np.broadcast_to(ds["time"].values, np.shape(direct.t)), k=None, meta=direct.meta,
                  status_code=np.asarray([gradflow.STATUS.index(s) for s in ds["status"].values]))
    assert_same_fields(_as_fields(fields), direct)
    assert ds["done"].values.all() and json.loads(ds.attrs["spec"]) == spec.to_json()
    np.testing.assert_array_equal(ds["beta_star"].values, np.stack([b for _, _, b in draws]))
    assert ds["seed"].values.tolist() == [2, 3, 4]


def test_sweep_store_of_an_older_gradflow_resumes_without_the_new_variables(tmp_path, monkeypatch):
    """A store created before ``t_steady`` and the end state were stored (its chunk marked not
    done) resumes: the chunk is computed again into the variables the store has, the same values."""
    import zarr

    new = ("t_steady", "V_end", "a_end", "Gamma_end")
    spec = sweep_mod.SweepSpec(seed_start=2, seed_stop=5, chunk=3, n=(3,), t1=(1e3,), points=4)
    out = tmp_path / "old.zarr"
    monkeypatch.setattr(sweep_mod, "_FLOAT_VARS", {k: v for k, v in sweep_mod._FLOAT_VARS.items() if k not in new})
    sweep_mod.run_sweep(spec, out, progress=False)
    before = sweep_mod.load_sweep(out).load()
    monkeypatch.undo()
    zarr.open_array(str(out / "done"), mode="r+")[...] = False
    assert sweep_mod.run_sweep(spec, out, progress=False)["computed"] == [(0, 2, 5)]
    after = sweep_mod.load_sweep(out)
    assert not set(new) & set(after.data_vars) and set(after.data_vars) == set(before.data_vars)
    for name in before.data_vars:
        np.testing.assert_array_equal(after[name].values, before[name].values, err_msg=name)


# --------------------------------------------------------------------------- aggregates
def _subsets(n):
    return [list(c) for r in range(1, n + 1) for c in itertools.combinations(range(n), r)]


@pytest.mark.parametrize("which", ["solution", "trajectory"])
def test_status_and_ok_of_a_mixed_batch_and_every_sub_batch(which, sol_batch, traj_batch):
    """The lanes end ``ok``, ``max_steps``, ``nonfinite`` (by construction). ``status`` lists
    them in lane order; ``ok`` is True exactly for the sub-batches whose lanes are all ``ok``
    (hand-computed from the per-lane statuses: every sub-batch of the three lanes, by an index
    array); lane ``i`` is a single run (``batched`` False) with ``status[i]`` and ``ok`` iff
    that status is ``ok``; a single run cannot be indexed."""
    batch, want = (sol_batch, SOL_STATUS) if which == "solution" else (traj_batch, TRAJ_STATUS)
    assert batch.batched and batch.status == want and not batch.ok
    assert [gradflow.STATUS[c] for c in np.asarray(batch.status_code)] == want
    for lanes in _subsets(3):
        sub = batch[np.asarray(lanes)]
        assert sub.batched and sub.status == [want[i] for i in lanes]
        assert sub.ok is all(want[i] == "ok" for i in lanes), lanes
    for i, status in enumerate(want):
        lane = batch[i]
        assert not lane.batched and lane.status == status and lane.ok is (status == "ok")
        with pytest.raises(IndexError):
            lane[0]


@pytest.mark.parametrize("which", ["solution", "trajectory"])
def test_single_runs_status_ok_and_metadata(which, sol_singles, traj_singles):
    """Each lane run alone: the same status as in the batch, ``ok`` iff ``ok``, ``batched``
    False, and ``metadata`` holding the settings it was called with."""
    singles, want, options = ((sol_singles, SOL_STATUS, SOL_OPTIONS) if which == "solution"
                              else (traj_singles, TRAJ_STATUS, TRAJ_OPTIONS))
    for run, status in zip(singles, want):
        assert run.status == status and run.ok is (status == "ok") and not run.batched
        meta = run.metadata
        assert meta["max_steps"] == options["max_steps"] and meta["t1"] == options["t1"]
        assert meta["solver"] == "dopri8" and meta["method"] == "flow"


def test_valid_t_end_and_held_states_of_the_mixed_batch(sol_batch):
    """By hand: the ``ok`` lane reaches ``t1 = 10`` (every point valid); the wall lane stops at
    ``t = 3/4``; the stiff lane spends its 200 steps before ``t = 1`` (Dopri8's stable step on
    ``y' = −1000 y`` is ~3e-3). On every lane ``valid`` is ``ts ≤ t_end``, the unreached points
    hold the last valid state, and only the ``max_steps`` lane used the whole budget."""
    t_end = np.asarray(sol_batch.t_end)
    assert t_end[0] == 10.0 and t_end[2] == pytest.approx(0.75, rel=1e-6) and 0.0 < t_end[1] < 1.0
    np.testing.assert_array_equal(np.asarray(sol_batch.valid), SOL_TS[None, :] <= t_end[:, None])
    np.testing.assert_array_equal(np.asarray(sol_batch.num_steps) == 200, [False, True, False])
    valid = np.asarray(sol_batch.valid)
    for i in range(3):
        last = np.flatnonzero(valid[i])[-1]
        for leaf in jax.tree.leaves((sol_batch.params, sol_batch.observed, sol_batch.quadratures, sol_batch.loss)):
            x = np.asarray(leaf)[i]
            assert np.all(x[last + 1:] == x[last]), i
    # the w-part moves as e^{-t} on every lane, up to where it ended (an independent closed form)
    w = np.asarray(sol_batch.params["w"])
    np.testing.assert_allclose(w[valid], np.exp(-np.broadcast_to(SOL_TS, valid.shape)[valid])[:, None] * np.ones(2),
                               rtol=1e-6)


def test_trajectory_mixed_batch_valid_and_t_end(traj_batch):
    """The ``ok`` lane reaches ``t1`` with every point valid; on every lane ``valid`` is
    ``ts ≤ t_end``; the nonfinite lane ends before ``t = 0.1`` and the max_steps lane before
    ``t1`` with ``num_steps = max_steps``; the states past ``t_end`` are the last
    valid ones and every metric is finite."""
    t_end, steps = np.asarray(traj_batch.t_end), np.asarray(traj_batch.num_steps)
    assert t_end[0] == 1e3 and 0.0 < t_end[1] < 1e3 and 0.0 < t_end[2] < 0.1
    np.testing.assert_array_equal(steps == 60, [False, True, False])
    valid = np.asarray(traj_batch.valid)
    np.testing.assert_array_equal(valid, TS[None, :] <= t_end[:, None])
    for i in range(3):
        last = np.flatnonzero(valid[i])[-1]
        for name in ("V", "a", "s", "loss", "Gamma", "entropy", "u"):
            x = np.asarray(getattr(traj_batch, name))[i]
            assert np.all(np.isfinite(x)), (i, name)
            np.testing.assert_array_equal(x[last + 1:], np.broadcast_to(x[last], x[last + 1:].shape), err_msg=f"{i} {name}")
