"""``gradflow sweep``: one zarr store, resumability, refusal of a different spec, cache opt-out."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gradflow
from gradflow.app import cli
from gradflow.attention.sweep import load_sweep

ARGS = ["--seeds", "0:6", "--chunk", "3", "--n", "3", "--t1", "1e3,1e5", "--points", "6", "--no-progress", "--no-cache"]


def _chunk_files(out):
    return {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.glob("*/*") if not p.name.startswith(".")}


def test_sweep_store_resumes_only_the_missing_chunk(tmp_path, capsys, monkeypatch):
    """A sweep killed during its third chunk leaves that chunk not ``done``; the rerun computes
    exactly that chunk, touches no other chunk file, and the store then equals an uninterrupted
    sweep's bit for bit; every run equals a direct ``simulate`` of its draw."""
    import xarray as xr

    from gradflow.attention import sweep as sweep_mod

    out = tmp_path / "sw.zarr"
    real, calls = sweep_mod._run_chunk, []

    def dies_on_third(spec, cfg, lo, hi, devices=None):
        calls.append((lo, hi))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(spec, cfg, lo, hi, devices)

    monkeypatch.setattr(sweep_mod, "_run_chunk", dies_on_third)
    assert cli.main(["sweep", str(out), *ARGS]) == 130
    monkeypatch.setattr(sweep_mod, "_run_chunk", real)
    partial = load_sweep(out)
    assert partial["done"].values.squeeze().tolist() == [[True] * 6, [False] * 6]  # config 1 (t1 = 1e5) not written
    before = _chunk_files(out)
    capsys.readouterr()
    assert cli.main(["sweep", str(out), *ARGS]) == 0
    assert "2 chunks computed, 2 already done" in capsys.readouterr().out
    after = _chunk_files(out)
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed and all(k.split("/")[1].split(".")[3] == "1" for k in changed if k.split("/")[0] == "V")  # t1 index 1 only
    assert all(after[k] == before[k] for k in before if k.split("/")[0] == "V" and k.split("/")[1].split(".")[3] == "0")
    resumed = xr.open_zarr(out)
    assert cli.main(["sweep", str(tmp_path / "fresh.zarr"), *ARGS]) == 0
    fresh = xr.open_zarr(tmp_path / "fresh.zarr")
    assert set(resumed.variables) == set(fresh.variables)
    for name in fresh.variables:
        np.testing.assert_array_equal(resumed[name].values, fresh[name].values, err_msg=name)
    assert set(resumed.sizes.items()) >= {("seed", 6), ("t1", 2), ("n", 1), ("t", 7), ("token", 3), ("dim", 3)}
    assert (resumed["status"].values == "ok").all()
    # the data are the runs themselves: seed 4 at t1 = 1e5 equals a direct simulate of that draw
    rng = np.random.RandomState(4)
    V0 = 0.1 * rng.randn(3, 3)
    rng.randn(3)  # a = 0·randn(n), consumed as in Fig. 2
    bs = rng.randn(3)
    one = resumed.sel(t1=1e5, seed=4).squeeze()
    direct = gradflow.simulate(gradflow.LogisticTeacher(bs / np.linalg.norm(bs)), V0, np.zeros(3), t1=1e5,
                               ts=one["time"].values, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(one["s"].values, direct.s, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(one["beta_star"].values, bs / np.linalg.norm(bs), rtol=1e-15)
    assert not np.allclose(resumed.sel(t1=1e5, seed=3)["s"].values.squeeze(), direct.s)  # another seed differs


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_sweep_pads_smaller_sizes_with_nan(tmp_path):
    """A grid over n stores every run in one array, padded to the largest n: the padding is NaN,
    the run's own entries are finite and sum to 1 (weights)."""
    out = tmp_path / "sw.zarr"
    assert cli.main(["sweep", str(out), "--seeds", "0:2", "--chunk", "2", "--n", "2,3", "--t1", "1e2", "--points", "3",
                     "--no-progress", "--no-cache"]) == 0
    ds = load_sweep(out).squeeze()
    s2 = ds["s"].sel(n=2).values  # (seed, t, token)
    assert np.isnan(s2[..., 2]).all() and np.isfinite(s2[..., :2]).all()
    np.testing.assert_allclose(s2[..., :2].sum(-1), 1.0, rtol=1e-12)
    assert np.isfinite(ds["V"].sel(n=3).values).all()


def test_sweep_draws_are_fig2s_draws():
    """Seed 123, n = 8, init 0.1 is Fig. 2's run (the authors' draw order, the a-draw consumed);
    compared with the figure module's independent definition; a different seed is a control."""
    from gradflow.attention.sweep import _draws
    from gradflow.sims.draws import fig2_init

    V0, a0, bs = fig2_init(123, 8)
    V0s, a0s, losses = _draws(dict(n=8, init_scale=0.1, loss="logistic"), [123, 124])
    np.testing.assert_array_equal(V0s[0], V0)
    np.testing.assert_array_equal(a0s[0], a0)
    np.testing.assert_array_equal(np.asarray(losses[0].beta_star), bs)
    assert not np.allclose(np.asarray(losses[1].beta_star), bs)


@pytest.mark.parametrize("argv", [["--seeds", "5:1"], ["--loss", "hinge"], ["--t1", "abc"], ["--seeds", "x"],
                                  ["--normalization", "l1"], ["--max-steps", "0"], ["--rtol", "2"], ["--chunk", "0"],
                                  ["--lanes", "0"], ["--lanes", "257"]])
def test_sweep_bad_arguments_exit_2(tmp_path, argv):
    with pytest.raises(SystemExit) as exc:
        code = cli.main(["sweep", str(tmp_path / "sw"), "--no-cache", *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    assert not (tmp_path / "sw").exists()  # a refused spec creates no store


def test_cache_location_and_opt_out(tmp_path, monkeypatch):
    from gradflow import _cache

    monkeypatch.setenv("GRADFLOW_CACHE_DIR", str(tmp_path / "c"))
    assert _cache.cache_dir() == str(tmp_path / "c")
    monkeypatch.delenv("GRADFLOW_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert _cache.cache_dir() == str(tmp_path / "x" / "gradflow" / "jax")
    monkeypatch.setenv("GRADFLOW_NO_CACHE", "1")
    assert gradflow.enable_compilation_cache(tmp_path / "never") is None and not (tmp_path / "never").exists()


def test_unwritable_cache_folder_warns_in_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("GRADFLOW_CACHE_DIR", str(blocker / "jax"))
    monkeypatch.delenv("GRADFLOW_NO_CACHE", raising=False)
    assert cli.main(["figures", "--list"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("gradflow: warning: compilation cache off") and err.count("\n") == 1


@pytest.mark.bad_input
@pytest.mark.parametrize("devices", [[], "cpu", [0], "repeat"])
def test_simulate_batch_refuses_bad_devices(devices):
    import jax

    if devices == "repeat":
        devices = [jax.devices()[0]] * 2
    with pytest.raises(gradflow.GradflowValueError, match="devices: got .*distinct jax devices"):
        gradflow.simulate_batch(gradflow.LogisticTeacher(np.ones(2)), np.zeros((1, 2, 2)), np.zeros((1, 2)), t1=1.0,
                                devices=devices)


def test_atomic_write_exclusive(tmp_path):
    """``atomic_write(exclusive=True)`` does not replace an existing file and leaves no temporary.
    Control: a plain (non-exclusive) write does replace it."""
    from gradflow.io import atomic_write

    path = str(tmp_path / "sweep.json")
    assert atomic_write(path, lambda f: f.write(b'{"first": 1}'), exclusive=True)
    assert not atomic_write(path, lambda f: f.write(b'{"second": 2}'), exclusive=True)
    assert (tmp_path / "sweep.json").read_bytes() == b'{"first": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.json"]
    assert atomic_write(path, lambda f: f.write(b'{"third": 3}'))
    assert (tmp_path / "sweep.json").read_bytes() == b'{"third": 3}'



def test_release_executables_drops_compiled_code_only_above_the_limit():
    """Above the mapping limit JAX's jit caches are emptied (the next call compiles again);
    below it (control) they are kept."""
    import jax
    import jax.numpy as jnp

    from gradflow import _cache

    f = jax.jit(lambda x: jnp.sin(x) * 3.0)
    f(1.0)
    assert f._cache_size() == 1
    assert _cache.release_executables(limit=10**9) is False and f._cache_size() == 1  # control
    n = _cache._mappings()
    assert n is None or n > 0
    released = _cache.release_executables(limit=0)
    assert released is (n is not None)
    if released:
        assert f._cache_size() == 0


def test_sweep_cpu_devices_default_and_precedence(monkeypatch, capsys):
    """``gradflow sweep`` asks JAX for one CPU device per usable core, ``--cpu-devices`` overrides
    that, ``jax.distributed`` runs keep JAX's default unless told, and the user's own
    ``JAX_NUM_CPU_DEVICES`` / ``XLA_FLAGS`` host device count win (nothing is set then)."""
    import jax

    from gradflow.internal import usable_cores

    calls = []
    monkeypatch.setattr(jax.config, "update", lambda name, value: calls.append((name, value)))
    monkeypatch.delenv("JAX_NUM_CPU_DEVICES", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=true")
    cli._cpu_devices(None, distributed=False)
    cli._cpu_devices(3, distributed=False)
    cli._cpu_devices(None, distributed=True)  # control: no default under jax.distributed
    cli._cpu_devices(5, distributed=True)
    assert calls == [("jax_num_cpu_devices", usable_cores()), ("jax_num_cpu_devices", 3),
                     ("jax_num_cpu_devices", 5)], calls
    calls.clear()
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    cli._cpu_devices(2, distributed=False)
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "2")
    cli._cpu_devices(None, distributed=False)
    assert calls == [], calls
    monkeypatch.delenv("JAX_NUM_CPU_DEVICES")
    monkeypatch.undo()  # the real config: the backend of this process is running, so it is left alone
    jax.devices()
    cli._cpu_devices(7, distributed=False)
    assert jax.config.jax_num_cpu_devices != 7
    assert "--cpu-devices 7 ignored" in capsys.readouterr().err  # said, not silent
    cli._cpu_devices(None, distributed=False)  # control: the default is not worth a warning
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # two fresh processes, each compiling a batched solve
def test_sweep_spreads_lanes_over_cpu_devices(tmp_path):
    """In a fresh process the sweep runs on ``--cpu-devices 2`` devices (its summary line says
    so) and writes the same runs as on one device, bit for bit (each group of ``--lanes`` seeds
    on one device)."""
    import xarray as xr

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(GRADFLOW_NO_CACHE="1", JAX_PLATFORMS="cpu", PYTHONPATH=root)
    stores = {}
    for k in (1, 2):
        out = tmp_path / f"k{k}.zarr"
        r = subprocess.run([sys.executable, "-m", "gradflow.app.cli", "sweep", str(out), "--seeds", "0:6", "--chunk", "6",
                            "--n", "4", "--t1", "1e6", "--points", "8", "--lanes", "3", "--cpu-devices", str(k),
                            "--no-progress"],
                           cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"on {k} CPU device(s)" in r.stdout, r.stdout
        stores[k] = xr.open_zarr(out).load()
    a1, a2 = (np.asarray(stores[k]["a"]) for k in (1, 2))
    assert np.all(np.isfinite(a1))
    for name in ("V", "a", "u", "Gamma", "t_end", "num_steps"):
        np.testing.assert_array_equal(stores[1][name].values, stores[2][name].values, err_msg=name)


_BUCKETS = r'''
import json
import numpy as np, jax
jax.config.update("jax_enable_x64", True)
import gradflow
from gradflow._engine import batch
sizes, real = [], batch._lanes
def spy(fields, fargs, pending, B, args_batched, devices, pad_all=False):
    out = real(fields, fargs, pending, B, args_batched, devices, pad_all)
    sizes.append((int(pending.size), int(out[0].size)))
    return out
batch._lanes = spy
rng = np.random.RandomState(5)
V0s = np.stack([s * rng.randn(2, 2) for s in (0.1, 1.0, 3.0)])
losses = [gradflow.LogisticTeacher(b / np.linalg.norm(b)) for b in rng.randn(3, 2)]
ts = np.geomspace(1e-2, 1e4, 5)
run = lambda: gradflow.simulate_batch(losses, V0s, np.zeros((3, 2)), t1=1e4, ts=ts, devices=jax.devices())
first = run()
batch.ROUND_STEPS = int(np.sort(np.asarray(first.num_steps))[-2])  # the longest lane goes on alone
sizes.clear()
out = run()
print(json.dumps(dict(devices=len(jax.devices()), sizes=sizes, status=list(out.status), a=np.asarray(out.a).tolist(),
                      V0s=V0s.tolist(), betas=[np.asarray(l.beta_star).tolist() for l in losses], ts=ts.tolist())))
'''


def test_sharded_batch_rounds_a_lone_lanes_bucket_to_the_device_count():
    """On 2 CPU devices (a fresh process), a batch of 3 lanes whose longest lane goes on alone
    into a second round (``ROUND_STEPS`` set just below its steps): that round's bucket of 1
    pending lane is 2 rows (one per device; 1 row cannot be sharded over 2 devices). Every lane
    agrees with its own ``simulate`` on one device (no rounds, no sharding) within the tolerance."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env.update(JAX_NUM_CPU_DEVICES="2", JAX_PLATFORMS="cpu", GRADFLOW_NO_CACHE="1",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _BUCKETS], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["devices"] == 2 and res["status"] == ["ok"] * 3
    assert [1, 2] in res["sizes"], res["sizes"]  # the lone lane's round, on both devices
    for V0, beta, a in zip(res["V0s"], res["betas"], res["a"]):
        one = gradflow.simulate(gradflow.LogisticTeacher(np.asarray(beta)), np.asarray(V0), np.zeros(2), t1=1e4,
                                ts=np.asarray(res["ts"]))
        np.testing.assert_allclose(np.asarray(a), one.a, rtol=1e-6, atol=1e-9)
