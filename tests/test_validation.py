"""Bad input at every public boundary: one GradflowValueError (a ValueError) per case, whose one-line
message names the argument, the value received and what is accepted."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradflow
from gradflow import theory
from gradflow import maps
from gradflow.app import cli
from gradflow._validate import FLOAT32_MAX_HORIZON, check_time_resolution
from tests.test_simulate import fig2_problem

V0, A0, BS = fig2_problem()
LOSS = gradflow.LogisticTeacher(BS)
sim = lambda **kw: (lambda: gradflow.simulate(kw.pop("loss", LOSS), kw.pop("V0", V0), kw.pop("a0", A0), **{"t1": 10.0, **kw}))
batch = lambda loss, V0s, a0s, **kw: (lambda: gradflow.simulate_batch(loss, V0s, a0s, t1=10.0, **kw))
gd = lambda **kw: (lambda: gradflow.descend(LOSS, kw.pop("V0", V0), kw.pop("a0", A0), **{"lr": 0.1, "steps": 10, **kw}))
with np.errstate(divide="ignore"):
    LOG_P = np.log(np.r_[0.5, 0.5, np.zeros(6)])  # log-probabilities with zeros where logits are expected
nan_at = lambda x, i=0: np.where(np.arange(x.size).reshape(x.shape) == i, np.nan, x)

# (case id, call, regex the one-line message must match)
CASES = [
    # --- simulate: arrays
    ("V0 NaN", sim(V0=nan_at(V0)), r"^V0: got array of shape \(8, 8\), dtype float64, with 1 NaN and 0 inf; expected finite values"),
    ("a0 inf", sim(a0=np.full(8, np.inf)), r"^a0: got .* 8 inf; expected finite logits"),
    ("a0 = log(p), p with zeros", sim(a0=LOG_P), r"^a0: got .*6 inf \(6 of them -inf\); .*no finite logit .*not log\(0\)"),
    ("beta_star NaN", lambda: gradflow.LogisticTeacher([1.0, np.nan]), r"^beta_star: got .*1 NaN.*; expected finite values"),
    ("design NaN", lambda: gradflow.SquareLoss(np.ones(3), design=nan_at(np.ones((3, 3)))), r"^design: got .*1 NaN"),
    ("target inf", lambda: gradflow.SquareLoss([1.0, np.inf]), r"^target: got .*1 inf"),
    ("V0 (5, 8) vs beta_star (8,)", sim(V0=V0[:5]), r"^V0.shape: got \(5, 8\); expected \(d, n\) with d = 8"),
    ("teacher (4,) vs V0 (8, 8)", sim(loss=gradflow.LogisticTeacher(BS[:4])),
     r"^V0.shape: got \(8, 8\); expected \(d, n\) with d = 4, the length of the loss's beta_star "
     r"\(LogisticTeacher.beta_star has shape \(4,\)\): V0 has d = 8 rows"),
    ("target (3,) vs V0 (8, 8)", sim(loss=gradflow.SquareLoss(np.ones(3))),
     r"^V0.shape: got \(8, 8\); expected .*d = 3, the length of the loss's target, the teacher beta_star \(SquareLoss.target has shape \(3,\)\)"),
    ("design (3, 5) vs V0 (8, 8)", sim(loss=gradflow.SquareLoss(np.ones(3), design=np.ones((3, 5)))),
     r"^V0.shape: .*d = 5, the columns of the loss's design \(SquareLoss.design has shape \(3, 5\)\)"),
    ("p_star (3,) vs V0 (8, 8)", sim(loss=gradflow.SoftTargetCrossEntropy(np.ones(3) / 3)),
     r"^V0.shape: .*d = 3, the length of the loss's p_star"),
    ("rowwise V0 (8, 4) vs teacher (3,)",
     lambda: gradflow.simulate(gradflow.LogisticTeacher(BS[:3]), V0[:, :4], np.zeros((4, 4)), t1=10.0, model="rowwise"),
     r"^V0.shape: got \(8, 4\); expected \(d, T\) with d = 3, the length of the loss's beta_star"),
    ("a0 (8,) vs V0 (8, 5)", sim(V0=V0[:, :5]), r"^a0.shape: got \(8,\); expected \(5,\) to match V0.shape"),
    ("V0 1-D", sim(V0=np.ones(8)), r"^V0.shape: got \(8,\); expected \(d, n\)"),
    ("beta_star 2-D", lambda: gradflow.LogisticTeacher(np.ones((2, 2))), r"^beta_star.shape: got \(2, 2\); expected an array with 1 dimension"),
    ("rowwise a0 not (T, T)", sim(a0=A0.reshape(2, 4), model="rowwise"), r"^a0.shape: got \(2, 4\); expected \(8, 8\)"),
    ("V0 empty", sim(V0=np.zeros((8, 0))), r"^V0: got .*\(8, 0\).*; expected a non-empty array"),
    ("V0 complex", sim(V0=V0 + 1j), r"^V0: got .*complex.*; expected a real"),
    ("V0 strings", sim(V0="V0"), r"^V0: got 'V0'; expected a real numeric array"),
    ("a0 ragged list", sim(a0=[[0.0], [0.0, 1.0]]), r"^a0: got .*; expected a real numeric array"),
    ("a0 outside relu's domain", sim(a0=-np.ones(8), normalization="relu"), r"^a0: got .*'relu' map is defined"),
    # --- simulate: times, tolerances, budget, names
    ("t1 = 0", sim(t1=0.0), r"^t1: got 0.0; expected a positive finite number$"),
    ("t1 < 0", sim(t1=-5.0), r"^t1: got -5.0; expected a positive finite number$"),
    ("t1 = inf", sim(t1=float("inf")), r"^t1: got inf;"),
    ("t1 = nan", sim(t1=float("nan")), r"^t1: got nan;"),
    ("t1 = True", sim(t1=True), r"^t1: got True;"),
    ("t1 a string", sim(t1="1e6"), r"^t1: got '1e6';"),
    ("ts unsorted", sim(ts=[0.0, 5.0, 2.0]), r"^ts: got .*; expected strictly increasing flow times$"),
    ("ts repeated", sim(ts=[0.0, 2.0, 2.0]), r"^ts: .*strictly increasing"),
    ("ts negative", sim(ts=[-1.0, 2.0]), r"^ts: got .*; expected flow times in \[0, t1 = 10\]$"),
    ("ts beyond t1", sim(ts=[0.0, 20.0]), r"^ts: .*\[0, t1 = 10\]"),
    ("ts NaN", sim(ts=[0.0, np.nan]), r"^ts: .*; expected finite flow times"),
    ("ts empty", sim(ts=[]), r"^ts: got .*; expected a non-empty 1-D array"),
    ("ts 2-D", sim(ts=[[0.0, 1.0]]), r"^ts: got .*; expected a non-empty 1-D array"),
    ("ts strings", sim(ts=["a", "b"]), r"^ts: got .*1-D array of flow times"),
    ("rtol = 0", sim(rtol=0.0), r"^rtol: got 0.0; expected a number in \(0, 1\)$"),
    ("rtol < 0", sim(rtol=-1e-8), r"^rtol: got -1e-08;"),
    ("rtol >= 1", sim(rtol=2.0), r"^rtol: got 2.0; expected a number in \(0, 1\)"),
    ("atol < 0", sim(atol=-1e-9), r"^atol: got -1e-09; expected a positive finite number"),
    ("atol = nan", sim(atol=float("nan")), r"^atol: got nan;"),
    ("max_steps = 0", sim(max_steps=0), r"^max_steps: got 0; expected a positive integer"),
    ("max_steps fractional", sim(max_steps=2.7), r"^max_steps: got 2.7; expected a positive integer"),
    ("unknown solver", sim(solver="rk4"), r"^solver: got 'rk4'; expected one of \['auto', "),
    ("unknown normalization", sim(normalization="softplus"), r"^normalization: got 'softplus'; expected one of \["),
    ("unknown model", sim(model="mlp"), r"^model: got 'mlp'; expected one of \['rowwise', 'tied', 'value-softmax'\]"),
    ("loss given as a name", sim(loss="logistic"), r"^loss: got 'logistic'; expected a gradflow loss"),
    ("temperature = 0", sim(temperature=0.0), r"^temperature: got 0.0; expected a positive finite number"),
    ("temperature = nan", sim(temperature=float("nan")), r"^temperature: got nan;"),
    ("temperature = True", sim(temperature=True), r"^temperature: got True;"),
    # --- simulate_batch
    ("batch of size 0", batch(LOSS, np.zeros((0, 8, 8)), np.zeros((0, 8))), r"^V0s: got .*\(0, 8, 8\).*; expected a non-empty array"),
    ("batch sizes differ", batch(LOSS, np.zeros((3, 8, 8)), np.zeros((2, 8))), r"^V0s/a0s: got \(\(3, 8, 8\), \(2, 8\)\); expected .*same leading batch size"),
    ("batch V0s 2-D", batch(LOSS, np.zeros((3, 8)), np.zeros((3, 8))), r"^V0s.shape: got \(3, 8\); expected \(B, d, n\)"),
    ("batch a0s NaN", batch(LOSS, np.zeros((2, 8, 8)), nan_at(np.zeros((2, 8)), 9)), r"^a0s: got .*1 NaN"),
    ("batch losses of two shapes", batch([gradflow.LogisticTeacher(np.ones(8)), gradflow.LogisticTeacher(np.ones(4))],
                                         np.zeros((2, 8, 8)), np.zeros((2, 8))), r"^loss: .*equal array shapes"),
    ("batch losses of two types", batch([LOSS, gradflow.SquareLoss(BS)], np.zeros((2, 8, 8)), np.zeros((2, 8))),
     r"^loss: .*of one type"),
    ("batch wrong number of losses", batch([LOSS] * 3, np.zeros((2, 8, 8)), np.zeros((2, 8))), r"^loss: got '3 losses'; expected one loss per lane \(B = 2\)"),
    ("batch empty loss list", batch([], np.zeros((2, 8, 8)), np.zeros((2, 8))), r"^loss: got \[\]; expected one loss or a non-empty sequence"),
    # --- descend
    ("lr = 0", gd(lr=0.0), r"^lr: got 0.0; expected a positive finite number"),
    ("lr < 0", gd(lr=-1.0), r"^lr: got -1.0;"),
    ("lr = inf", gd(lr=float("inf")), r"^lr: got inf;"),
    ("steps = 0", gd(steps=0), r"^steps: got 0; expected an integer ≥ 1"),
    ("steps fractional", gd(steps=2.5), r"^steps: got 2.5; expected an integer ≥ 1"),
    ("steps = True", gd(steps=True), r"^steps: got True;"),
    ("record unsorted", gd(record=[0, 5, 3]), r"^record: .*strictly increasing iteration indices"),
    ("record beyond steps", gd(record=[0, 11]), r"^record: .*iteration indices in \[0, steps = 10\]"),
    ("record fractional", gd(record=[0.5, 2.0]), r"^record: .*integer iteration indices"),
    ("optimizer a name", gd(optimizer="adam"), r"^optimizer: got 'adam'; expected an optax.GradientTransformation"),
    ("descend V0 NaN", gd(V0=nan_at(V0)), r"^V0: got .*1 NaN"),
    ("descend unknown model", gd(model="mlp"), r"^model: got 'mlp'"),
    # --- losses
    ("zero teacher", lambda: gradflow.LogisticTeacher(np.zeros(3)), r"^beta_star: got .*; expected a non-zero teacher vector"),
    ("teacher of strings", lambda: gradflow.LogisticTeacher(["a", "b"]), r"^beta_star: got .*; expected a real numeric array"),
    ("zero square target", lambda: gradflow.SquareLoss(np.zeros(4)), r"^target: .*non-zero target"),
    ("design rows != len(target)", lambda: gradflow.SquareLoss(np.ones(4), design=np.ones((3, 2))), r"^design.shape: got \(3, 2\); expected \(m, d\) with m = len\(target\) = 4"),
    ("scale < 0", lambda: gradflow.SquareLoss(np.ones(4), scale=-1), r"^scale: got -1; expected a positive finite number"),
    ("scale a string", lambda: gradflow.SquareLoss(np.ones(4), scale="half"), r"^scale: got 'half';"),
    ("p_star not summing to 1", lambda: gradflow.SoftTargetCrossEntropy([0.5, 0.6]), r"^p_star: got .*; expected probabilities"),
    ("p_star negative", lambda: gradflow.SoftTargetCrossEntropy([1.5, -0.5]), r"^p_star: .*non-negative"),
    # --- maps and models
    ("apply_map unknown name", lambda: maps.apply_map(jnp.zeros(3), "softplus"), r"^normalization: got 'softplus'"),
    ("apply_map temperature < 0", lambda: maps.apply_map(jnp.zeros(3), "softmax", -1.0), r"^temperature: got -1.0;"),
    ("get_model unknown name", lambda: gradflow.get_model("mlp"), r"^model: got 'mlp'"),
    ("get_model temperature inf", lambda: gradflow.get_model("tied", temperature=float("inf")), r"^temperature: got inf"),
    ("model instance temperature 0", lambda: gradflow.ValueSoftmax(temperature=0.0), r"^temperature: got 0.0"),
    ("winners NaN", lambda: gradflow.winners([0.5, np.nan]), r"^weights: got .*1 NaN"),
    ("winners rtol < 0", lambda: gradflow.winners([0.5, 0.5], rtol=-1.0), r"^rtol: got -1.0; expected a finite number ≥ 0"),
    # --- theory checks
    ("unknown check id", lambda: theory.run_check("thm9"), r"^check id: got 'thm9'; expected one of \['thm3.2a'"),
    ("trials = 0", lambda: theory.run_check("thm3.2a", trials=0), r"^trials: got 0; expected a positive integer"),
    ("trials = True", lambda: theory.run_checks(["thm3.2a"], trials=True), r"^trials: got True;"),
    ("seed < 0", lambda: theory.run_check("thm3.2a", seed=-1), r"^seed: got -1; expected a non-negative integer"),
    ("unknown id among several", lambda: theory.run_checks(["thm3.2a", "nope"]), r"^check id: got 'nope'"),
    # --- float32 time
    ("float32 horizon 1e12", lambda: check_time_resolution("t1", 1e12, jnp.float32),
     r"^t1: got 1000000000000.0; expected at most 8.39e\+06 in float32.*jax_enable_x64"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("call, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_one_clear_line(call, match):
    with pytest.raises(gradflow.GradflowValueError, match=match) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and "; expected " in message and isinstance(info.value, ValueError)


def test_float32_resolution_limit_is_exactly_where_unit_steps_vanish():
    """Accepted up to 2²³ in float32 (t + 1 still representable) and anything in float64."""
    check_time_resolution("t1", FLOAT32_MAX_HORIZON, jnp.float32)
    check_time_resolution("t1", 1e30, jnp.float64)
    t = np.float32(FLOAT32_MAX_HORIZON)
    assert t + np.float32(1) != t and np.float32(2 * t) + np.float32(1) == np.float32(2 * t)  # the limit's reason


def test_float32_mode_refuses_long_horizons_in_a_fresh_process():
    """With x64 switched off (possible only in a separate process: the suite keeps x64 on),
    a paper horizon is refused with the one-line message, a short one still runs."""
    import subprocess
    import sys

    code = (
        "import jax, numpy as np, gradflow\n"
        "jax.config.update('jax_enable_x64', False)\n"
        "loss = gradflow.LogisticTeacher(np.ones(2))\n"
        "for kw in (dict(t1=1e12), dict(t1=10.0)):\n"
        "    try:\n"
        "        print(gradflow.simulate(loss, np.eye(2), np.zeros(2), **kw).status)\n"
        "    except gradflow.GradflowValueError as e:\n"
        "        print(e)\n"
        "try:\n"
        "    gradflow.descend(loss, np.eye(2), np.zeros(2), lr=0.1, steps=10**8)\n"
        "except gradflow.GradflowValueError as e:\n"
        "    print(e)\n"
        "try:\n"  # finite in float64, inf once cast to float32
        "    gradflow.simulate(loss, np.eye(2), np.array([1e39, 0.0]), t1=10.0)\n"
        "except gradflow.GradflowValueError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("t1: got 1000000000000.0; expected at most 8.39e+06 in float32"), out
    assert lines[1] == "ok"
    assert lines[2].startswith("steps: got 100000000; expected at most 8.39e+06 in float32")
    assert lines[3].startswith("a0: got ") and "representable in float32" in lines[3], out


def test_integer_and_float32_inputs_give_identical_results():
    V = np.array([[1, -1, 0], [0, 2, 1]])
    a = np.array([0, 0, 0])
    t_int = gradflow.simulate(gradflow.LogisticTeacher(np.array([1, 2])), V, a, t1=100.0)
    t_flt = gradflow.simulate(gradflow.LogisticTeacher(np.array([1.0, 2.0])), V.astype(float), a.astype(float), t1=100.0)
    t_f32 = gradflow.simulate(gradflow.LogisticTeacher(np.float32([1, 2])), V.astype(np.float32), a.astype(np.float32), t1=100.0)
    for other in (t_int, t_f32):
        for name in ("V", "a", "s", "Gamma", "loss"):
            np.testing.assert_array_equal(getattr(other, name), getattr(t_flt, name))
    assert t_int.V.dtype == jnp.float64


CLI_CASES = [
    ([], "the following arguments are required: command"),
    (["bogus"], "argument command: invalid choice: 'bogus'"),
    (["figures", "fig99"], "figure id: got 'fig99'; expected one of ['fig2'"),
    (["figures", "--bogus"], "unrecognized arguments: --bogus"),
    (["check", "thm9"], "check id: got 'thm9'; expected one of"),
    (["check", "--trials", "abc"], "argument --trials: got 'abc'; expected an integer ≥ 1"),
    (["check", "--trials", "0"], "argument --trials: got '0'; expected an integer ≥ 1"),
    (["check", "--seed", "-1"], "argument --seed: got '-1'; expected an integer ≥ 0"),
    (["check", "--trials"], "argument --trials: expected one argument"),
]


@pytest.mark.parametrize("argv, expected", CLI_CASES, ids=[" ".join(c[0]) or "(none)" for c in CLI_CASES])
def test_cli_bad_arguments_print_one_line_and_exit_2(argv, expected, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("gradflow") and expected in err, err
    assert "Traceback" not in err


def test_cli_unwritable_out_folder_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert cli.main(["figures", "softmax-temperature", "--quick", "--no-progress", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gradflow: error: ") and str(blocker) in err


def test_optax_receives_float_parameters_from_integer_input():
    """Integer initial parameters through an optax optimiser: identical to the float run."""
    V, a = np.array([[1, 0], [0, 1]]), np.array([0, 0])
    loss = gradflow.LogisticTeacher(np.array([1.0, -1.0]))
    runs = [gradflow.descend(loss, V_, a_, lr=0.01, steps=50, optimizer=optax.adam(0.01))
            for V_, a_ in ((V, a), (V.astype(float), a.astype(float)))]
    for name in ("V", "a", "s", "loss", "Gamma"):
        np.testing.assert_array_equal(getattr(runs[0], name), getattr(runs[1], name))
    assert runs[0].status == "ok" and float(runs[0].loss[-1]) < float(runs[0].loss[0])


def test_apply_map_under_jit_and_hessian_with_concrete_temperature():
    """A Python-float temperature is checked with Python math, so the map traces under jit and
    jax.hessian (the gd-vs-flow figure's use); the NumPy softmax is the reference."""
    import jax
    import jax.numpy as jnp

    from gradflow.attention.maps import apply_map

    a = np.array([0.3, -1.2, 2.0])
    f = jax.jit(lambda z: jnp.sum(apply_map(z, "softmax", 2.0) ** 2))
    w = np.exp(a / 2.0) / np.exp(a / 2.0).sum()
    np.testing.assert_allclose(float(f(a)), float(np.sum(w**2)), rtol=1e-12)
    assert np.all(np.isfinite(np.asarray(jax.jit(jax.hessian(f))(a))))


@pytest.mark.parametrize(
    "kw, a0",
    [
        (dict(normalization="sigmoid-norm"), -800.0 * np.ones(3)),  # every σ underflows to 0
        (dict(normalization="elu-norm"), -800.0 * np.ones(3)),
        (dict(normalization="sparsemax"), np.array([1e17, -1e17, 0.0])),  # support test rounds to false
        (dict(temperature=1e-300), np.array([1e10, 0.0, 0.0])),  # a / T overflows
    ],
)
def test_initial_weights_still_checked_where_finite_logits_are_not_enough(kw, a0):
    """The compiled weights check is skipped only for maps finite at every finite logit
    (softmax, sigmoid, elu, linear at T = 1): these cases must still be refused."""
    with pytest.raises(gradflow.GradflowValueError, match=r"^a0: got .*map is defined"):
        gradflow.simulate(gradflow.LogisticTeacher(np.ones(3)), np.eye(3), a0, t1=1.0, **kw)


def test_weights_check_skipped_only_where_safe():
    """Softmax at logits −800 (all exp underflow without the max shift) runs; the tied model,
    whose logits are U a, is still checked (an overflowing U a is refused)."""
    loss = gradflow.LogisticTeacher(np.ones(3))
    assert gradflow.simulate(loss, np.eye(3), -800.0 * np.ones(3), t1=1.0).status == "ok"
    with pytest.raises(gradflow.GradflowValueError, match=r"^a0: got .*map is defined"):
        gradflow.simulate(loss, 1e200 * np.ones((3, 3)), 1e200 * np.ones(3), t1=1.0, model="tied")


def _truncated(tmp_path, name, full: bytes, keep: float = 0.5):
    path = tmp_path / name
    path.write_bytes(full[: int(len(full) * keep)])
    return path


def test_truncated_or_foreign_result_files_raise_one_clear_line(tmp_path):
    """``Trajectory.load`` and the transformer's ``load_result`` on a file cut short (a full disk, a
    copy killed midway), a missing file and an ``.npz`` of something else: a GradflowValueError
    naming the file, never NumPy's ``zipfile.BadZipFile``/``KeyError``. Control: the intact file
    loads and equals what was saved."""
    from gradflow.sims.sec4.train import load_result

    traj = gradflow.simulate(LOSS, V0, A0, t1=10.0, ts=np.array([0.0, 1.0, 10.0]))
    good = tmp_path / "run.npz"
    traj.save(good)
    back = gradflow.Trajectory.load(good)  # control
    assert np.array_equal(np.asarray(back.a), np.asarray(traj.a)) and back.metadata == traj.metadata
    full = good.read_bytes()
    for keep in (0.5, 0.99, 0.0):
        bad = _truncated(tmp_path, f"cut{keep}.npz", full, keep)
        with pytest.raises(gradflow.GradflowValueError, match=rf"^path: got '{bad}'; expected a Trajectory saved by "
                           r"Trajectory.save; the file is truncated or not an .npz archive \((BadZipFile|EOFError)"):
            gradflow.Trajectory.load(bad)
    with pytest.raises(gradflow.GradflowValueError, match=r"^path: got '.*nope.npz'; expected an existing file"):
        gradflow.Trajectory.load(tmp_path / "nope.npz")
    other = tmp_path / "other.npz"
    np.savez(other, x=np.ones(3))
    with pytest.raises(gradflow.GradflowValueError, match=r"lacks the arrays \['t', 'V', 'a', '_meta_json'\]"):
        gradflow.Trajectory.load(other)
    with pytest.raises(gradflow.GradflowValueError, match=r"^path: got '.*cut0.5.npz'; expected a transformer run's result file"):
        load_result(str(tmp_path / "cut0.5.npz"))
    with pytest.raises(gradflow.GradflowValueError, match=r"lacks the arrays \['meta'\]"):
        load_result(str(other))
