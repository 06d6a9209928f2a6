"""``gradflow sweep`` across processes on JAX's multi-controller runtime (``jax.distributed``),
two processes on this machine's CPU: the store equals a single-process sweep bit for bit, and a
process killed midway, restarted, completes it (slow: ``python -m pytest -m slow``)."""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr
import zarr

from gradflow import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = ["--chunk", "2", "--n", "3", "--t1", "1e3", "--points", "4", "--no-progress", "--no-cache"]
SMALL, LARGE = ["--seeds", "0:12"], ["--seeds", "0:64"]  # 6 chunks; 32 chunks (room to kill a process midway)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out, port, pid, seeds):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), JAX_PLATFORMS="cpu")
    return subprocess.Popen(
        [sys.executable, "-m", "gradflow.cli", "sweep", str(out), *seeds, *GRID, "--coordinator", f"127.0.0.1:{port}",
         "--num-processes", "2", "--process-id", str(pid), "--init-timeout", "240"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _both(out, seeds):
    port = _port()
    procs = [_launch(out, port, pid, seeds) for pid in (0, 1)]
    results = [p.communicate(timeout=600) for p in procs]
    return [p.returncode for p in procs], results


def _done(out) -> np.ndarray:
    try:
        return np.asarray(zarr.open_array(os.path.join(out, "done"), mode="r")[...]).ravel()
    except Exception:  # noqa: BLE001 - the store is not created yet
        return np.zeros(0, bool)


def _single(tmp_path, seeds):
    out = tmp_path / "single.zarr"
    assert cli.main(["sweep", str(out), *seeds, *GRID]) == 0
    return xr.open_zarr(out)


def _assert_same(store, single):
    ds = xr.open_zarr(store)
    assert set(ds.variables) == set(single.variables)
    for name in single.variables:
        np.testing.assert_array_equal(ds[name].values, single[name].values, err_msg=name)
    assert ds["done"].values.all()


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_two_processes_write_the_single_process_store(tmp_path):
    out = tmp_path / "sw.zarr"
    codes, results = _both(out, SMALL)
    assert codes == [0, 0], results
    assert "process 0/2: 3 chunks computed" in results[0][0] and "process 1/2: 3 chunks computed" in results[1][0]
    assert "store complete: 12 of 12 runs written" in results[0][0]
    _assert_same(out, _single(tmp_path, SMALL))


@pytest.mark.slow
def test_a_killed_process_restarted_completes_the_store(tmp_path):
    """Process 1 is SIGKILLed after its first chunk, process 0 once its own chunks are written
    (its shutdown barrier waits for the dead peer); the same two commands again complete the
    store, recomputing only the missing chunks of process 1."""
    out = tmp_path / "sw.zarr"
    port = _port()
    procs = [_launch(out, port, pid, LARGE) for pid in (0, 1)]
    chunk_done = lambda d, parity: d.reshape(-1, 2)[parity::2, 0]  # noqa: E731 - per chunk (2 seeds), process = k % 2
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        d = _done(out)
        if d.size and chunk_done(d, 1).any():
            break
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    killed_at = chunk_done(_done(out), 1)
    assert killed_at.any() and not killed_at.all(), f"process 1 was not killed midway: {killed_at}"
    while time.monotonic() < deadline and procs[0].poll() is None and not chunk_done(_done(out), 0).all():
        time.sleep(0.1)
    if procs[0].poll() is None:
        procs[0].send_signal(signal.SIGKILL)
    procs[0].communicate()
    assert not _done(out).all()
    codes, results = _both(out, LARGE)
    assert codes == [0, 0], results
    assert "process 1/2: " in results[1][0] and " chunks computed" in results[1][0]
    recomputed = int(results[1][0].split("process 1/2: ")[1].split(" chunks computed")[0])
    assert recomputed == int((~killed_at).sum())  # only the chunks the killed process had not written
    _assert_same(out, _single(tmp_path, LARGE))


def test_partial_distributed_arguments_are_refused(tmp_path, capsys):
    assert cli.main(["sweep", str(tmp_path / "sw"), "--coordinator", "127.0.0.1:1", "--no-cache"]) == 2
    assert "expected all three" in capsys.readouterr().err
    assert cli.main(["sweep", str(tmp_path / "sw"), "--coordinator", "127.0.0.1:1", "--num-processes", "2",
                     "--process-id", "2", "--no-cache"]) == 2
    assert "--process-id: got 2" in capsys.readouterr().err
    assert not (tmp_path / "sw").exists()
