"""Nothing lost: `gradflow figures` killed midway and rerun resumes from what
finished — the finished figure is not recomputed — and leaves no partial or temporary file."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

BLOCKER = '''
import os, time
import numpy as np
from gradflow.io import atomic_write
from gradflow.sims.build import Figure

def compute(cfg, progress=False):
    if os.environ.get("BLOCK_FIGURE"):
        def hang(f):  # killed while writing: half a file, then wait for the kill
            f.write(b"PK partial")
            open(os.environ["BLOCK_FIGURE"], "w").close()
            time.sleep(600)
        atomic_write(os.path.join(cfg["out"], "blocker.npz"), hang)
    return {"x": np.arange(3.0)}

def plot(data, cfg):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot(data["x"])
    return fig

FIGURE = Figure(title="test figure that hangs mid-write", config=lambda quick: {"out": os.environ["OUT"]},
                compute=compute, plot=plot)
'''

DRIVER = '''
import sys
sys.path.insert(0, sys.argv[1])
from gradflow.sims import registry as _registry
_registry.FIGURES["blocker"] = "blocker_fig"
from gradflow.app import cli
# no --jobs: a figure registered at run time makes gradflow build in this process (a worker would not know it)
sys.exit(cli.main(["figures", "softmax-temperature", "blocker", "--quick", "--no-progress", "--out", sys.argv[2]]))
'''


def _start(tmp_path, out, block):
    env = dict(os.environ, OUT=str(out), PYTHONWARNINGS="ignore")
    if block:
        env["BLOCK_FIGURE"] = str(tmp_path / "blocking")
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_figures_run_resumes_without_recomputing(tmp_path):
    (tmp_path / "blocker_fig.py").write_text(textwrap.dedent(BLOCKER))
    out = tmp_path / "out"
    proc = _start(tmp_path, out, block=True)
    deadline = time.time() + 240
    while not (tmp_path / "blocking").exists():  # the first figure is done, the second is mid-write
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    names = set(os.listdir(out))
    assert {f"softmax-temperature.{e}" for e in ("png", "pdf", "npz", "json")} <= names
    assert "blocker.npz" not in names  # never a partial file under the real name
    assert any(n.startswith(".blocker.npz.tmp-") for n in names)  # only the hard kill's temporary
    done = out / "softmax-temperature.npz"
    stamp = (done.stat().st_mtime_ns, json.loads((out / "softmax-temperature.json").read_text())["compute_seconds"])

    proc = _start(tmp_path, out, block=False)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    assert "softmax-temperature: re-plotted from cache" in stdout and "blocker: computed" in stdout
    record = json.loads((out / "softmax-temperature.json").read_text())
    assert record["cached"] and (done.stat().st_mtime_ns, record["compute_seconds"]) == stamp
    assert not [n for n in os.listdir(out) if ".tmp-" in n]  # the stale temporary is gone
    import numpy as np

    with np.load(out / "blocker.npz") as z:  # a complete, readable file
        np.testing.assert_array_equal(z["x"], np.arange(3.0))


def test_atomic_write_keeps_the_old_file_when_the_writer_fails(tmp_path):
    from gradflow.io import atomic_write

    path = tmp_path / "data.json"
    atomic_write(path, lambda f: f.write(b"old"))

    def broken(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(path, broken)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["data.json"]


def test_stale_temporaries_of_live_writers_are_kept(tmp_path):
    """Two builds into one folder: a temporary whose writer still runs is a write in progress
    and stays; one whose writer is gone (hard kill) or that carries no PID is removed."""
    import subprocess
    import sys

    from gradflow.io import remove_stale_temporaries

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    names = {
        "live": f".fig2.npz.tmp-{os.getpid()}-abc.npz",  # this process: alive
        "dead": f".fig2.npz.tmp-{int(dead.stdout)}-def.npz",  # exited above
        "old": ".fig2.npz.tmp-xyz.npz",  # written before temporaries carried a PID
        "other": f".kl.npz.tmp-{int(dead.stdout)}-ghi.npz",  # another figure: not ours to touch
    }
    for name in names.values():
        (tmp_path / name).write_text("x")
    removed = remove_stale_temporaries(tmp_path, "fig2.")
    assert sorted(removed) == sorted([names["dead"], names["old"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names["live"], names["other"]])
