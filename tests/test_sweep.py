"""``gradflow sweep``: chunk files, resumability, refusal of a different spec, cache opt-out."""

import os

import numpy as np
import pytest

import gradflow
from gradflow import cli
from gradflow.sweep import load_sweep

ARGS = ["--seeds", "0:6", "--chunk", "3", "--n", "3", "--t1", "1e3,1e5", "--points", "6", "--no-progress", "--no-cache"]


def test_sweep_resumes_only_the_missing_chunk(tmp_path, capsys):
    out = tmp_path / "sw"
    assert cli.main(["sweep", str(out), *ARGS]) == 0
    files = sorted(p.name for p in out.glob("c*.npz"))
    assert files == ["c000-s000000-000003.npz", "c000-s000003-000006.npz", "c001-s000000-000003.npz", "c001-s000003-000006.npz"]
    first = load_sweep(out)
    stamps = {name: os.stat(out / name).st_mtime_ns for name in files}
    os.unlink(out / files[2])
    capsys.readouterr()
    assert cli.main(["sweep", str(out), *ARGS]) == 0
    assert "1 chunks computed, 3 already done" in capsys.readouterr().out
    again = {name: os.stat(out / name).st_mtime_ns for name in files}
    assert [n for n in files if again[n] != stamps[n]] == [files[2]]  # only the deleted chunk was rewritten
    second = load_sweep(out)
    for a, b in zip(first, second):
        assert a["config"] == b["config"]
        for key in ("V", "a", "s", "Gamma", "num_steps", "status_code", "seeds"):
            np.testing.assert_array_equal(a[key], b[key])
    # the data are the runs themselves: seed 4 of config 1 equals a direct simulate of that draw
    rng = np.random.RandomState(4)
    V0 = 0.1 * rng.randn(3, 3)
    rng.randn(3)  # a = 0·randn(n), consumed as in Fig. 2
    bs = rng.randn(3)
    direct = gradflow.simulate(gradflow.LogisticTeacher(bs / np.linalg.norm(bs)), V0, np.zeros(3), t1=1e5,
                               ts=second[1]["t"], rtol=1e-8, atol=1e-10)
    assert second[1]["config"]["t1"] == 1e5 and second[1]["seeds"][4] == 4
    np.testing.assert_allclose(second[1]["s"][4], direct.s, rtol=1e-7, atol=1e-12)


def test_sweep_refuses_a_different_spec_in_the_same_folder(tmp_path, capsys):
    out = tmp_path / "sw"
    small = ["--seeds", "0:2", "--chunk", "2", "--n", "3", "--t1", "1e2", "--points", "3", "--no-progress", "--no-cache"]
    assert cli.main(["sweep", str(out), *small]) == 0
    assert cli.main(["sweep", str(out), *[a if a != "1e2" else "1e3" for a in small]]) == 2
    assert "holds a different sweep.json" in capsys.readouterr().err


def test_sweep_draws_are_fig2s_draws():
    """Seed 123, n = 8, init 0.1 is Fig. 2's run (SPEC §6 order, the a-draw consumed);
    compared with the figure module's independent definition; a different seed is a control."""
    from gradflow.sweep import _draws
    from sims._common import fig2_init

    V0, a0, bs = fig2_init(123, 8)
    V0s, a0s, losses = _draws(dict(n=8, init_scale=0.1, loss="logistic"), [123, 124])
    np.testing.assert_array_equal(V0s[0], V0)
    np.testing.assert_array_equal(a0s[0], a0)
    np.testing.assert_array_equal(np.asarray(losses[0].beta_star), bs)
    assert not np.allclose(np.asarray(losses[1].beta_star), bs)


@pytest.mark.parametrize("argv", [["--seeds", "5:1"], ["--loss", "hinge"], ["--t1", "abc"], ["--seeds", "x"],
                                  ["--normalization", "l1"], ["--max-steps", "0"], ["--rtol", "2"], ["--chunk", "0"]])
def test_sweep_bad_arguments_exit_2(tmp_path, argv):
    with pytest.raises(SystemExit) as exc:
        code = cli.main(["sweep", str(tmp_path / "sw"), "--no-cache", *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    assert not (tmp_path / "sw" / "sweep.json").exists()  # a refused spec locks nothing


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


@pytest.mark.parametrize("devices", [[], "cpu", [0], "repeat"])
def test_simulate_batch_refuses_bad_devices(devices):
    import jax

    if devices == "repeat":
        devices = [jax.devices()[0]] * 2
    with pytest.raises(gradflow.GradflowValueError, match="devices: got .*distinct jax devices"):
        gradflow.simulate_batch(gradflow.LogisticTeacher(np.ones(2)), np.zeros((1, 2, 2)), np.zeros((1, 2)), t1=1.0,
                                devices=devices)


def test_manifest_is_created_exclusively(tmp_path):
    """Two sweeps started together into one folder: the second ``sweep.json`` write does not
    replace the first (it is then compared with it and refused); no temporary is left.
    Control: a plain (non-exclusive) write does replace it."""
    from gradflow.trajectory import atomic_write

    path = str(tmp_path / "sweep.json")
    assert atomic_write(path, lambda f: f.write(b'{"first": 1}'), exclusive=True)
    assert not atomic_write(path, lambda f: f.write(b'{"second": 2}'), exclusive=True)
    assert (tmp_path / "sweep.json").read_bytes() == b'{"first": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.json"]
    assert atomic_write(path, lambda f: f.write(b'{"third": 3}'))
    assert (tmp_path / "sweep.json").read_bytes() == b'{"third": 3}'

