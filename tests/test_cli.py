"""The gradflow CLI: figures fig2 end to end (quick), listing, one-line errors with exit 2."""

import json
import subprocess
import sys

import numpy as np

from gradflow import cli


def test_fig2_quick_builds_four_files_and_caches(tmp_path, capsys):
    assert cli.main(["figures", "fig2", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    for ext in ("png", "pdf", "npz", "json"):
        assert (tmp_path / f"fig2.{ext}").stat().st_size > 0
    record = json.loads((tmp_path / "fig2.json").read_text())
    assert record["seed"] == 123 and record["config"]["gd_steps"] == 20_000 and not record["cached"]
    assert record["summary"]["u_order_preserved"] and record["summary"]["s_order_preserved_t_gt_0"]
    assert record["summary"]["s_top_final"] > 0.99
    assert set(record["packages"]) >= {"jax", "diffrax", "optax", "numpy"} and record["git_revision"]
    with np.load(tmp_path / "fig2.npz") as z:
        assert all(np.all(np.isfinite(z[k])) for k in z.files if z[k].dtype.kind == "f")
        s = z["s"]
    # order of s is preserved for t > 0 (Thm 3.2a) in the plotted data, and s polarises
    order = np.argsort(-z_u0(tmp_path))
    assert np.all(np.diff(s[1:, order], axis=1) < 0) and s[-1].max() > 0.99
    assert cli.main(["figures", "fig2", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "re-plotted from cache" in capsys.readouterr().out
    assert json.loads((tmp_path / "fig2.json").read_text())["cached"]


def z_u0(path):
    with np.load(path / "fig2.npz") as z:
        return z["u"][0]


def test_unknown_figure_id_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "gradflow.cli", "figures", "fig99"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "figure id: got 'fig99'; expected one of" in proc.stderr and "Traceback" not in proc.stderr


def test_list_prints_ids(capsys):
    assert cli.main(["figures", "--list"]) == 0
    assert "fig2" in capsys.readouterr().out
