"""A theorem check of your own, with a negative control

Under the logistic teacher the reduced system gives `du_i/dt = γ ‖β*‖² s_i ≥ 0`: every
`u_i(t) = ⟨v_i, β*⟩` is non-decreasing. As a check: a signed, dimensionless margin per trial
(the most negative step of `u` relative to its scale, plus a round-off allowance), evaluated on 32
random seeds with `gradflow.simulate_batch`. The negative control is a case where the statement is
false — the square loss `½‖β* − β‖²` started beyond its target (`V(0) ≈ 3 β* 1ᵀ`, flow to `t = 100`), where `β`
must shrink back and `u` decreases — and the check must report that it fails there. The margin is a
`gradflow.theory.Verdict`, the type of the built-in checks (`gradflow check`).
"""

import numpy as np

import gradflow
from gradflow import theory
N = D = 6
SEEDS = 32
ROUNDOFF = 1e-12  # allowed relative decrease: the flow is integrated to rtol 1e-10


def u_monotone(traj: gradflow.Trajectory) -> theory.Verdict:
    """Margin per trial: min over t and i of Δu_i / max|u| + ROUNDOFF (> 0: never decreased)."""
    u = np.asarray(traj.u)                                  # (B, T, n)
    step = np.diff(u, axis=1).min(axis=(1, 2))              # most negative change of any u_i
    margins = step / np.abs(u).max(axis=(1, 2)) + ROUNDOFF
    ok = np.asarray(traj.status_code) == 0                  # a failed run counts as a failure
    worst = float(np.where(ok, margins, -np.inf).min())
    return theory.Verdict(holds=worst > 0, worst_margin=worst, trials=len(margins), margins=tuple(margins))


def draws(seed, scale=0.1, overshoot=0.0):
    rng = np.random.default_rng(seed)
    beta_star = rng.standard_normal(D); beta_star /= np.linalg.norm(beta_star)
    V0 = scale * rng.standard_normal((D, N)) + overshoot * np.outer(beta_star, np.ones(N))
    return V0, beta_star


ts = np.concatenate([[0.0], np.geomspace(1e-3, 1e6, 60)])
a0s = np.zeros((SEEDS, N))

# the statement, within its assumptions: logistic teacher, random V(0), a(0) = 0
V0s, teachers = zip(*(draws(seed) for seed in range(SEEDS)))
main = u_monotone(gradflow.simulate_batch([gradflow.LogisticTeacher(b) for b in teachers], np.stack(V0s), a0s,
                                          t1=1e6, ts=ts, rtol=1e-10, atol=1e-12))

# negative control: square loss started beyond its target, where u must decrease
V0s, targets = zip(*(draws(seed, overshoot=3.0) for seed in range(SEEDS)))
control = u_monotone(gradflow.simulate_batch([gradflow.SquareLoss(b) for b in targets], np.stack(V0s), a0s,
                                             t1=1e2, ts=ts[ts <= 1e2], rtol=1e-10, atol=1e-12))

print(f"statement (logistic teacher): holds = {main.holds}, worst margin {main.worst_margin:.3g} over {main.trials} seeds")
print(f"control (square loss, overshoot): holds = {control.holds}, worst margin {control.worst_margin:.3g}")
assert main.holds, "u_i(t) must be non-decreasing under the logistic teacher"
assert not control.holds, "the control must fail, else the check cannot tell right from wrong"
print("check passed: the statement holds and its control fails")
