"""Mutation harness: does the default test run catch a wrong engine?

Each mutation replaces one exact piece of source text with a deliberate bug. The harness copies
the repository to a temporary folder, applies the mutations one at a time, runs the default test
files (:data:`DEFAULT_FILES`) with ``pytest -x -q -p no:randomly`` against the copy, and prints a
table: mutation → caught? (by which test). A mutation is *caught* when the run fails. The test
most likely to catch a mutation (its ``hint``, a test of the default files) runs first on its
own, so a caught mutation usually costs one test, not the whole run; if it passes, the full
default files follow, so a wrong hint does not hide a catch.

Run on purpose (it is not collected by pytest; CPU-heavy, minutes per uncaught mutation)::

    nice -n 10 python -m tests.mutate                 # every mutation
    python -m tests.mutate --list                     # the list, and whether each text is found
    python -m tests.mutate --only tied_logits_term temperature_dropped

The last full run's table is kept in ``tests/MUTATION_RESULTS.md``.

A mutation whose text is not found (exactly once) in its file is reported loudly as
``TEXT NOT FOUND`` and counts as a failure of the harness: re-target it after a refactoring.
:data:`ENGINE_MUTATIONS` target the integrator's modules (``gradflow/attention/flow.py``,
``gradflow/_engine/``, ``gradflow/attention/_simulate.py``, ``gradflow/_integrate.py``, ``gradflow/_descend.py``), which a restructuring moves: they are kept
apart so that they can be re-targeted in one place. After moving a file: ``python -m
tests.mutate --list`` names every mutation whose text is no longer found in its file; give it the
file's new path (the text moves with the code) or the new text, and rerun ``--only`` those
mutations to see them caught again (CONTRIBUTING.md, "The mutation harness").

Exit status: 0 if every mutation was found and caught, 1 otherwise, 2 if the unmutated copy does not
even collect (an environment problem: nothing is run, nothing counted).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_FILES = (
    "tests/test_field.py",
    "tests/test_properties.py",
    "tests/test_extremes.py",
    "tests/test_descend.py",
    "tests/test_simulate.py",
    "tests/test_failures.py",
    "tests/test_determinism.py",
    "tests/test_reference_cases.py",
    "tests/test_sims_beyond.py",
    "tests/test_paper_figures.py",
    "tests/test_theory.py",
    "tests/test_integrate.py",
    "tests/test_stiff.py",
    "tests/test_kinks.py",
    "tests/test_corpus.py",
    "tests/test_softmax.py",
    "tests/test_erk.py",
    "tests/test_performance.py",
    "tests/test_loop.py",
    "tests/test_params_end.py",
    "tests/test_chebyshev.py",
    "tests/test_result_fields.py",
    "tests/test_sweep.py",
    "tests/test_sweep_distributed.py",
    "tests/test_guards.py",
)
"""The default test files the mutations must fail (run with the default ``-m 'not slow'``)."""


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    old: str
    new: str
    description: str
    hint: str = ""
    """A pytest node id or file to run first (the likeliest catcher); optional."""
    equivalent: str = ""
    """Non-empty for an *equivalent mutant*: why no test can catch it (the mutated engine gives the
    same results), with the evidence. It still runs; "survived" is then the expected outcome and
    is not counted as missed (if a test does catch it, the argument is wrong: it counts as caught)."""


MUTATIONS = (
    # ---- maps
    Mutation("softmax_vjp_plain", "gradflow/attention/maps.py",
             "gc = g - jnp.take_along_axis(g, m, axis=-1)", "gc = g",
             "plain (non-centred) softmax VJP", "tests/test_extremes.py"),
    Mutation("l2_map_is_l1", "gradflow/attention/maps.py",
             "return _normalize(z * z)", "return _normalize(jnp.abs(z))",
             "the l2 map normalises |z| instead of z²", "tests/test_field.py::test_maps_against_numpy"),
    Mutation("entropy_sign", "gradflow/attention/maps.py",
             "return -jnp.sum(jnp.exp(logp) * logp, axis=-1)", "return jnp.sum(jnp.exp(logp) * logp, axis=-1)",
             "softmax entropy with the wrong sign", "tests/test_field.py::test_entropy_from_logits_underflow_is_finite"),
    Mutation("sparsemax_threshold", "gradflow/attention/maps.py",
             "tau = (jnp.take_along_axis(cums, k_z.astype(jnp.int32) - 1, axis=-1) - 1) / k_z.astype(z.dtype)",
             "tau = (jnp.take_along_axis(cums, k_z.astype(jnp.int32) - 1, axis=-1) - 0.5) / k_z.astype(z.dtype)",
             "sparsemax threshold off (weights sum to 1/2 + ...)", "tests/test_field.py::test_sparsemax_two_active"),
    # ---- losses
    Mutation("logistic_gamma_sign", "gradflow/attention/losses.py",
             "return jax.nn.sigmoid(-jnp.dot(self.beta_star, beta))", "return jax.nn.sigmoid(jnp.dot(self.beta_star, beta))",
             "logistic γ = σ(+m) instead of σ(−m)", "tests/test_field.py::test_reduced_u_a_system"),
    Mutation("square_gamma_factor", "gradflow/attention/losses.py",
             "r = 2.0 * self.scale * (self.target - beta)", "r = self.scale * (self.target - beta)",
             "square-loss γ missing the factor 2", "tests/test_field.py::test_square_rank_one_gamma_lemma_3_5"),
    Mutation("square_scale_ignored", "gradflow/attention/losses.py",
             "return self.scale * jnp.sum(res * res)", "return 0.5 * jnp.sum(res * res)",
             "square loss ignores scale (always ½)", "tests/test_field.py::test_square_design_field_matches_hand_formula"),
    Mutation("cross_entropy_logits", "gradflow/attention/losses.py",
             "return -jnp.sum(self.p_star * log_softmax(beta))", "return -jnp.sum(self.p_star * log_softmax(beta / 2))",
             "soft-target cross-entropy on β/2", "tests/test_simulate.py::test_soft_target_cross_entropy_reaches_1e6_at_rest_on_the_minimiser"),
    # ---- models
    Mutation("tied_logits_transposed", "gradflow/attention/models.py",
             "        return V @ a\n", "        return V.T @ a\n",
             "tied model's logits Uᵀa instead of Ua", "tests/test_reference_cases.py::test_tied_field_matches_hand_formula"),
    Mutation("rowwise_sum_not_mean", "gradflow/attention/models.py",
             "return jnp.mean(jax.vmap(loss)(beta))", "return jnp.sum(jax.vmap(loss)(beta))",
             "row-wise loss summed over rows, not averaged", "tests/test_reference_cases.py::test_rowwise_field_matches_hand_formula_at_temperature"),
    Mutation("rowwise_gamma_sum", "gradflow/attention/models.py",
             "return jnp.mean(jax.vmap(loss.gamma)(beta))", "return jnp.sum(jax.vmap(loss.gamma)(beta))",
             "row-wise γ summed over rows (Γ T× too large)", "tests/test_reference_cases.py::test_rowwise_field_matches_hand_formula_at_temperature"),
    Mutation("u_normalized", "gradflow/attention/models.py",
             "return V.T @ teacher", "return V.T @ teacher / jnp.linalg.norm(teacher)",
             "u = Vᵀβ*/‖β*‖ instead of Vᵀβ*", "tests/test_reference_cases.py::test_flow_at_temperature_matches_scipy"),
    # ---- metrics
    Mutation("loss_metric_off", "gradflow/attention/trajectory.py",
             '"loss": model.loss(loss, V, a),', '"loss": model.loss(loss, V, a) * (1 + 1e-4),',
             "recorded loss 1e-4 too large", "tests/test_simulate.py::test_logistic_matches_scipy_to_1e12"),
    Mutation("winners_none", "gradflow/attention/trajectory.py",
             "return w >= top - rtol * np.abs(top)", "return w >= top + rtol * np.abs(top)",
             "winners() finds no winner for a positive maximum", "tests/test_theory.py::test_sink_violation_is_reported"),
    # ---- checks
    Mutation("kkt_rate_fall_from_half_log", "theory/kq_limits.py",
             "log_from = 0.5 * math.log(tb[-1]) if t_fall is None else math.log(t_fall)",
             "log_from = 0.5 * math.log(tb[-1])",
             "mm.kq-kkt-rate measures the residual's fall from sqrt(t1) whatever time it is given",
             "tests/test_kq_limits.py::test_kkt_verdict_measures_the_fall_from_the_time_it_is_given"),
    Mutation("check_holds_threshold", "theory/_result.py",
             "return Verdict(holds=bool(worst > 0 and all_ok)", "return Verdict(holds=bool(worst > -1 and all_ok)",
             "a check holds with a margin down to −1", "tests/test_theory.py::test_trend_and_tables_can_fail"),
    Mutation("ratio_bound_n_dropped", "theory/polarisation.py",
             "rhs = np.log1p(dl / n * lane[\"Gamma\"][pos])[:, None]", "rhs = np.log1p(dl * lane[\"Gamma\"][pos])[:, None]",
             "Thm 3.3(b) bound without the 1/n", "tests/test_theory.py::test_broken_bound_is_reported"),
    Mutation("order_check_abs", "theory/ordering.py",
             "rel = np.where(spread > 0, (x[:, :-1] - x[:, 1:]) / spread, -np.inf)",
             "rel = np.where(spread > 0, np.abs(x[:, :-1] - x[:, 1:]) / spread, -np.inf)",
             "Thm 3.2(a) check blind to crossings (|gap|)", "tests/test_theory.py::test_crossed_order_is_reported"),
    Mutation("exponent_default_wrong", "theory/polarisation.py",
             "exponent: float = -2.0", "exponent: float = -1.0",
             "Thm 3.3(c) checks 1 − s_0 = Θ(1/log t)", "tests/test_theory.py::test_wrong_exponent_and_small_gamma_are_reported"),
    Mutation("sum_a_check_blind", "theory/invariants.py",
             "err = float(np.max(np.abs(total - total[0])) / (1.0 + np.max(np.abs(a))))",
             "err = float(np.max(np.abs(total - total)) / (1.0 + np.max(np.abs(a))))",
             "Σa check compares Σa with itself", "tests/test_theory.py::test_broken_invariants_are_reported"),
    Mutation("lemD2_time_map", "theory/invariants.py",
             "want = (1.0 + t[k]) * formula[k]", "want = t[k] * formula[k]",
             "Lemma D.2 along the trajectory with dτ/dt = 1/t", "tests/test_theory.py::test_trajectory_not_integrated_along_the_field_is_reported"),
    # ---- result objects: aggregates, save/load, to_xarray, the sweep store
    Mutation("ok_any_lane", "gradflow/solution.py",
             "return bool(np.all(np.asarray(self.status_code) == Status.ok))",
             "return bool(np.any(np.asarray(self.status_code) == Status.ok))",
             "ok of a batch True when any lane is ok (not every lane)",
             "tests/test_result_fields.py::test_status_and_ok_of_a_mixed_batch_and_every_sub_batch"),
    Mutation("status_lanes_reversed", "gradflow/solution.py",
             "return [STATUS[int(c)] for c in code.ravel()]", "return [STATUS[int(c)] for c in code.ravel()[::-1]]",
             "a batch's status list in reverse lane order",
             "tests/test_result_fields.py::test_status_and_ok_of_a_mixed_batch_and_every_sub_batch"),
    Mutation("save_drops_gamma_end", "gradflow/attention/trajectory.py",
             '"k", "V_end", "a_end", "Gamma_end")', '"k", "V_end", "a_end")',
             "Trajectory.save omits Gamma_end (loads as None)", "tests/test_result_fields.py::test_trajectory_save_load_keeps_every_field"),
    Mutation("save_meta_dropped", "gradflow/attention/trajectory.py",
             'arrays["_meta_json"] = np.asarray(json.dumps(self.metadata, default=str))',
             'arrays["_meta_json"] = np.asarray(json.dumps({}, default=str))',
             "Trajectory.save writes an empty meta", "tests/test_result_fields.py::test_trajectory_save_load_keeps_every_field"),
    Mutation("xarray_drops_t_steady", "gradflow/_xarray.py",
             'for name in ("num_steps", "t_end", "t_steady", "Gamma_end"):', 'for name in ("num_steps", "t_end", "Gamma_end"):',
             "to_xarray leaves t_steady out", "tests/test_result_fields.py::test_trajectory_to_xarray_keeps_every_field"),
    Mutation("xarray_drops_u", "gradflow/_xarray.py",
             'for name in ("V", "a", "s", "u"):', 'for name in ("V", "a", "s"):',
             "to_xarray leaves u out", "tests/test_result_fields.py::test_trajectory_to_xarray_keeps_every_field"),
    Mutation("xarray_batch_status_shifted", "gradflow/_xarray.py",
             "np.vectorize(lambda c: STATUS[int(c)], otypes=[str])(codes)",
             "np.vectorize(lambda c: STATUS[(int(c) + 1) % len(STATUS)], otypes=[str])(codes)",
             "to_xarray of a batch names each lane's status by the next code",
             "tests/test_result_fields.py::test_trajectory_to_xarray_keeps_every_field"),
    Mutation("sweep_drops_t_end", "gradflow/attention/sweep.py",
             '"entropy": ("t",), "t_end": (), "t_steady": (),', '"entropy": ("t",), "t_steady": (),',
             "the sweep store leaves t_end out", "tests/test_result_fields.py::test_sweep_store_keeps_every_field"),
    Mutation("sweep_drops_end_state", "gradflow/attention/sweep.py",
             '"V_end": ("dim", "token"), "a_end": ("token",), "Gamma_end": (), ', "",
             "the sweep store leaves the end state V_end, a_end, Gamma_end out",
             "tests/test_result_fields.py::test_sweep_store_keeps_every_field"),
    # ---- sweeps (gradflow/attention/sweep.py, app/cli.py)
    Mutation("sweep_chunk_one_batch", "gradflow/attention/sweep.py",
             "    groups = _groups(lo, hi, spec.lanes)\n", "    groups = [np.arange(lo, hi)]\n",
             "a chunk solved as one batch of --chunk lanes (a seed's bits then depend on --chunk)",
             "tests/test_sweep_distributed.py::test_a_seed_is_bit_equal_however_the_sweep_is_split"),
    Mutation("sweep_last_group_unpadded", "gradflow/attention/sweep.py",
             "groups.append(np.concatenate([seeds, np.full(lanes - seeds.size, seeds[-1])]))", "groups.append(seeds)",
             "a chunk's last group solved with fewer lanes than --lanes (another program shape)",
             "tests/test_sweep_distributed.py::test_a_seed_is_bit_equal_however_the_sweep_is_split"),
    Mutation("sweep_group_sharded", "gradflow/attention/sweep.py",
             "devices=[device], fixed_width=True)", "devices=jax.local_devices(), fixed_width=True)",
             "each group sharded over all of the process's devices (bits depend on the devices per process)",
             "tests/test_sweep_distributed.py::test_a_seed_is_bit_equal_however_the_sweep_is_split"),
    Mutation("sweep_groups_reassembled_out_of_order", "gradflow/attention/sweep.py",
             "parts = [per_device[g % len(devices)][g // len(devices)] for g in range(len(groups))]",
             "parts = [per_device[(g + 1) % len(devices)][g // len(devices)] for g in range(len(groups))]",
             "the groups solved on a process's several devices put back in the wrong order",
             "tests/test_sweep_distributed.py::test_a_seed_is_bit_equal_however_the_sweep_is_split"),
    Mutation("sweep_pads_before_own_entries", "gradflow/attention/sweep.py",
             "pad[axis] = (0, n_max - n)", "pad[axis] = (n_max - n, 0)",
             "the runs of a smaller n padded with NaN before their own rows and columns",
             "tests/test_sweep_distributed.py::test_a_seed_is_bit_equal_however_the_sweep_is_split"),
    Mutation("sweep_dead_peer_exit_0", "app/cli.py",
             "    return 0 if done.all() else 1\n", "    return 0\n",
             "a distributed sweep exits 0 with the store incomplete (a peer died or stopped)",
             "tests/test_sweep_distributed.py::test_a_peer_gone_early_gives_exit_1_and_one_process_completes_the_same_store"),
)
"""Mutations outside the integrator's modules."""

ENGINE_MUTATIONS = (
    # ---- the field (gradflow/attention/flow.py)
    Mutation("da_sign", "gradflow/attention/flow.py",
             "    gV_logits, ga = logits_vjp(gz)\n    return -(gV + gV_logits).astype(V.dtype), -ga",
             "    gV_logits, ga = logits_vjp(gz)\n    return -(gV + gV_logits).astype(V.dtype), ga",
             "sign of da/dt flipped", "tests/test_field.py::test_logistic_field_matches_hand_formula"),
    Mutation("temperature_dropped", "gradflow/attention/flow.py",
             "gz = (_maps.softmax_vjp(s, gs) / model.temperature).astype(z.dtype)",
             "gz = (_maps.softmax_vjp(s, gs)).astype(z.dtype)",
             "temperature division dropped from the field", "tests/test_reference_cases.py::test_flow_at_temperature_matches_scipy"),
    Mutation("gamma_halved", "gradflow/attention/_simulate.py",
             'return {"Gamma": model.gamma(loss, *params)}', 'return {"Gamma": 0.5 * model.gamma(loss, *params)}',
             "Γ integrand halved", "tests/test_simulate.py::test_logistic_matches_scipy_to_1e12"),
    Mutation("tied_logits_term", "gradflow/attention/flow.py",
             "    gV_logits, ga = logits_vjp(gz)\n    return -(gV + gV_logits).astype(V.dtype), -ga",
             "    gV_logits, ga = logits_vjp(gz)\n    return -(gV).astype(V.dtype), -ga",
             "tied model's gV_logits term dropped", "tests/test_reference_cases.py::test_tied_field_matches_hand_formula"),
    Mutation("flow_field_gamma_halved", "gradflow/attention/flow.py",
             "return dV, da, model.gamma(loss, V, a)", "return dV, da, 0.5 * model.gamma(loss, V, a)",
             "public flow_field's Γ rate halved", "tests/test_field.py::test_public_flow_field_and_log_time_field_by_hand"),
    Mutation("log_time_field_t", "gradflow/attention/flow.py",
             "    scale = jnp.exp(tau)\n    return jax.tree.map(lambda f: scale * f, flow_field(model, loss, y))",
             "    scale = jnp.expm1(tau)\n    return jax.tree.map(lambda f: scale * f, flow_field(model, loss, y))",
             "public log_time_field scaled by t instead of 1 + t", "tests/test_field.py::test_public_flow_field_and_log_time_field_by_hand"),
    Mutation("l1_sliding_off", "gradflow/attention/flow.py",
             "gz = jnp.where(at_kink & (gm > 0), 0.0, side * gm)", "gz = jnp.where(at_kink & (gm > 0) & False, 0.0, side * gm)",
             "L1 map: no Filippov sliding at a kink (plain subgradient, chatters)",
             "tests/test_kinks.py::test_l1_flow_slides_through_its_kinks_to_t1"),
    Mutation("l1_release_sign", "gradflow/attention/flow.py",
             "gz = jnp.where(at_kink & (gm > 0), 0.0, side * gm)", "gz = jnp.where(at_kink & (gm < 0), 0.0, side * gm)",
             "L1 map: the kink's release test with the wrong sign (sticks when it should leave)",
             "tests/test_kinks.py::test_l1_flow_matches_gradient_descent_to_first_order"),
    Mutation("tied_sliding_off", "gradflow/attention/flow.py",
             "    convex = c > 0\n", "    convex = c > jnp.inf\n",
             "tied model: no logit slides at a kink (each keeps the side it is on; chatters)",
             "tests/test_kinks.py::test_tied_flow_slides_along_a_kink_to_t1"),
    # ---- the solve: events, statuses, the log-time map (gradflow/_engine/solve.py)
    Mutation("time_map", "gradflow/_engine/solve.py",
             "    scale = jnp.exp(tau)\n    return jax.tree.map(lambda f: scale * f, rhs(args.flow",
             "    scale = jnp.expm1(tau)\n    return jax.tree.map(lambda f: scale * f, rhs(args.flow",
             "log-time field scaled by t instead of 1 + t", "tests/test_simulate.py::test_logistic_matches_scipy_to_1e12"),
    Mutation("rest_fraction_looser", "gradflow/_engine/solve.py",
             "REST_FRACTION = 1e-2\n", "REST_FRACTION = 1e4\n",
             "rest stop 1e6x looser (stops with movement left)", "tests/test_corpus.py::test_corpus_flow_matches_its_reference_under_defaults"),
    Mutation("rest_ignores_contraction", "gradflow/_engine/solve.py",
             "rest = (fmax == 0) | ((kappa > 0) & (speed < REST_FRACTION * kappa))",
             "rest = (fmax == 0) | (speed * jnp.exp(-tau) < REST_FRACTION * 1e8)",
             "rest decided by the field's size alone (the old round-off test's failure)",
             "tests/test_corpus.py::test_corpus_flow_matches_its_reference_under_defaults"),
    Mutation("rest_kappa_sign", "gradflow/_engine/solve.py",
             "kappa = -scale * dot(u, ju) / dot(u, u) - 1.0", "kappa = scale * dot(u, ju) / dot(u, u) - 1.0",
             "contraction rate with the wrong sign (never rests at a minimiser)",
             "tests/test_corpus.py::test_corpus_flow_matches_its_reference_under_defaults"),
    Mutation("quadrature_frozen_at_rest", "gradflow/_engine/solve.py",
             "return held, {k: quads[k] + rates[k] * dt for k in quads}", "return held, {k: quads[k] + 0 * rates[k] * dt for k in quads}",
             "quadratures frozen after a rest stop", "tests/test_corpus.py::test_corpus_flow_matches_its_reference_under_defaults"),
    Mutation("stall_status_as_max_steps", "gradflow/_engine/solve.py",
             "jnp.where(result == diffrax.RESULTS.dt_min_reached, Status.stalled, Status.solver_failed)",
             "jnp.where(result == diffrax.RESULTS.dt_min_reached, Status.max_steps, Status.solver_failed)",
             "a stalled solve reported as max_steps", "tests/test_failures.py::test_engine_reports_a_blow_up_as_stalled_in_one_solve"),
    Mutation("compile_bound_rounds_bucketed", "gradflow/_engine/batch.py",
             "if B <= per_solve and local and (group.size == B or (compile_bound and not spec(code).implicit)):",
             "if B <= per_solve and local and (group.size == B):",
             "a compile-bound batch's later rounds compiled again for each number of pending lanes",
             "tests/test_performance.py::test_batch_whose_lanes_finish_in_different_rounds_equals_single_runs"),
    Mutation("stall_probe_skipped", "gradflow/_engine/batch.py",
             "    if stalled.size == 0:\n        return result", "    if True:\n        return result",
             "a stall with a non-finite field just ahead reported as stalled, not nonfinite",
             "tests/test_failures.py::test_field_undefined_past_a_wall_ends_nonfinite_at_the_wall"),
    Mutation("stall_probe_wrong_lanes", "gradflow/_engine/batch.py",
             "    codes[stalled[bad]] = Status.nonfinite", "    codes[stalled[::-1][bad]] = Status.nonfinite",
             "the stall probe's verdicts written to the wrong lanes of a batch",
             "tests/test_failures.py::test_stall_probe_marks_only_the_lanes_with_a_wall_ahead"),
    Mutation("end_field_unchecked", "gradflow/_engine/solve.py",
             "    bad_end = ~_all_finite(_log_time_rhs(tau_end, y_end, FlowArgs(flow, fargs)))",
             "    bad_end = jnp.zeros((), bool)",
             "a solve that ends on a non-finite field (a rest event fired by it) reported ok",
             "tests/test_failures.py::test_quadrature_nonfinite_at_the_start_ends_nonfinite_at_zero"),
    # ---- auto's phase policy and the stiffness detector (gradflow/_engine/stiff.py)
    Mutation("never_implicit", "gradflow/_engine/stiff.py",
             "codes = np.where(stiff, implicit, code_of(p.explicit))", "codes = np.where(stiff, code_of(p.explicit), code_of(p.explicit))",
             "auto never switches to the implicit solver", "tests/test_stiff.py::test_auto_on_a_stiff_flow_matches_radau_in_few_steps"),
    Mutation("stiff_on_factor_wrong", "gradflow/_engine/policy.py",
             "    stiff_on: float = 0.5\n", "    stiff_on: float = 50.0\n",
             "stiffness threshold 100× too high (switches far too late, or never)",
             "tests/test_stiff.py::test_detector_fires_on_the_stiff_flow_and_never_on_the_logistic_teacher"),
    Mutation("stiff_off_never", "gradflow/_engine/stiff.py",
             "~(h_rho < p.stiff_off * p.explicit_boundary)", "~(h_rho < 0.0)",
             "an implicit lane never switches back to explicit", "tests/test_stiff.py::test_phase_policy_switches_with_hysteresis"),
    Mutation("power_iterations_one", "gradflow/_engine/policy.py",
             "    power_iterations: int = 12\n", "    power_iterations: int = 1\n",
             "spectral radius from a single power iteration", "tests/test_stiff.py::test_stiffness_ratio_is_step_times_spectral_radius"),
    # ---- Rodas4 (gradflow/_engine/rosenbrock.py)
    Mutation("rodas4_coefficient", "gradflow/_engine/rosenbrock.py",
             "[1.544, 0.0, 0.0, 0.0, 0.0],", "[1.5, 0.0, 0.0, 0.0, 0.0],",
             "Rodas4 tableau a_21 = 1.5 instead of 1.544", "tests/test_stiff.py::test_rodas4_alone_matches_radau"),
    # ---- ROS34PW2, its step-size hold, the BLAS thread limit (gradflow/_engine/rosenbrock.py, stiff.py)
    Mutation("ros34pw2_coefficient", "gradflow/_engine/rosenbrock.py",
             "[0.84457060015369423, -0.11299064236484185, 0.0, 0.0],", "[0.84457060015369423, -0.1, 0.0, 0.0],",
             "ROS34PW2 tableau α_32 = −0.1 instead of −0.11299…",
             "tests/test_stiff.py::test_ros34pw2_keeps_its_order_with_a_wrong_jacobian_and_rodas4_does_not"),
    Mutation("ros34pw2_reuse_any_step", "gradflow/_engine/rosenbrock.py",
             "reuse = (age < MAX_AGE) & (jnp.abs(h - h_w) <= _SAME_H * jnp.abs(h))", "reuse = age < MAX_AGE",
             "ROS34PW2 reuses W⁻¹ at any step size",
             "tests/test_stiff.py::test_ros34pw2_reuses_its_matrix_only_at_the_same_step_size"),
    Mutation("hold_step_never", "gradflow/_engine/rosenbrock.py",
             "hold = keep & (proposed >= h) & (proposed <= self.hold * h)", "hold = keep & (proposed < 0)",
             "HoldStep never holds the step", "tests/test_stiff.py::test_hold_step_keeps_the_step_only_when_it_would_barely_grow"),
    # ---- ROS34PW2 with a symmetric eigendecomposition and its selection (rosenbrock.py, stiff.py)
    Mutation("eigen_quadrature_rows_dropped", "gradflow/_engine/rosenbrock.py",
             "return jnp.concatenate([xp, hg * (r[n_p:] + c0 * (R @ xp))])", "return jnp.concatenate([xp, hg * r[n_p:]])",
             "the eigen W⁻¹ ignores the quadrature rows of the Jacobian",
             "tests/test_stiff.py::test_eigen_solve_is_the_dense_inverse_for_a_symmetric_jacobian"),
    Mutation("symmetry_probe_ignored", "gradflow/_engine/stiff.py",
             "implicit = np.where(symmetric | (not eigen.gradient_only), eigen.code, fallback.code)",
             "implicit = np.where(True, eigen.code, fallback.code)",
             "auto runs its eigendecomposition solver on non-gradient fields too",
             "tests/test_stiff.py::test_auto_picks_the_eigen_w_method_only_for_gradient_flows"),
    Mutation("rodas4_eigh_refinement_sign", "gradflow/_engine/rosenbrock.py",
             "x = x + precond(r - x / hg + jvp(x))", "x = x + precond(r - x / hg - jvp(x))",
             "the refined solve's residual with the Jacobian's sign flipped",
             "tests/test_stiff.py::test_refined_solve_converges_to_the_solve_with_the_exact_jacobian"),
    Mutation("rodas4_eigh_one_sweep", "gradflow/_engine/rosenbrock.py",
             "REFINE = 3\n", "REFINE = 1\n",
             "rodas4-eigh with one refinement sweep (order 2 with a stale eigendecomposition)",
             "tests/test_stiff.py::test_eigen_rodas4_is_order_four_with_a_stale_eigendecomposition"),
    Mutation("krylov_quadrature_rows_dropped", "gradflow/_engine/rosenbrock.py",
             "xq = hg * (r[n_p:] + jvp(jnp.concatenate([xp, pad]))[n_p:])", "xq = hg * r[n_p:]",
             "the Krylov solve ignores the quadrature rows of the Jacobian",
             "tests/test_stiff.py::test_krylov_solve_is_the_dense_solve"),
    Mutation("krylov_threshold_ignored", "gradflow/_engine/stiff.py",
             "spec(p.krylov if state_size >= p.krylov_min_state else p.implicit)", "spec(p.krylov)",
             "auto runs rodas4-krylov at any state size",
             "tests/test_stiff.py::test_auto_picks_krylov_only_above_its_state_size"),
    Mutation("auto_rkc_cap_ignored", "gradflow/_engine/stiff.py",
             "else within_stage_cap(h_rho, rtol)", "else np.ones(num_steps.shape, bool)",
             "auto keeps rkc however many stages its steps need (never the Krylov method)",
             "tests/test_guards.py::test_stabilised_solver_until_its_stages_pass_the_cap"),
    Mutation("auto_rkc_safety_dropped", "gradflow/_engine/stiff.py",
             "chebyshev.stages_for(chebyshev.SAFETY * h_rho,", "chebyshev.stages_for(h_rho,",
             "auto's stage estimate without RKC's safety factor on rho",
             "tests/test_guards.py::test_stabilised_solver_until_its_stages_pass_the_cap"),
    Mutation("auto_rkc_cap_at_default_rtol", "gradflow/_engine/batch.py",
             "settings.policy, float(settings.rtol))", "settings.policy)",
             "auto's stage cap at rtol 1e-8 whatever the run's rtol",
             "tests/test_stiff.py::test_auto_rkc_cap_follows_the_run_rtol"),
    Mutation("auto_rkc_for_any_field", "gradflow/_engine/stiff.py",
             "implicit = np.where(symmetric & within, spec(p.stabilised).code, implicit)",
             "implicit = np.where(within, spec(p.stabilised).code, implicit)",
             "auto runs rkc on fields that are not gradient flows",
             "tests/test_stiff.py::test_auto_runs_rkc_through_the_engine"),
    Mutation("guard_stabilised_min_state_3x", "gradflow/_engine/policy.py",
             "    stabilised_min_state: int = 2000\n", "    stabilised_min_state: int = 6000\n",
             "rkc only from 6000 parameters", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_stabilised_min_state_third", "gradflow/_engine/policy.py",
             "    stabilised_min_state: int = 2000\n", "    stabilised_min_state: int = 667\n",
             "rkc from 667 parameters", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    # ---- the stabilised explicit solver (gradflow/_engine/chebyshev.py)
    Mutation("rkc_stage_time_dropped", "gradflow/_engine/chebyshev.py",
             "fj = f(t0 + h * th_jm1, y_jm1)", "fj = f(t0, y_jm1)",
             "RKC's stages evaluate the field at the step's start time (first order in a time-dependent field)",
             "tests/test_chebyshev.py::test_rkc_is_second_order_against_dop853"),
    Mutation("rkc_no_safety", "gradflow/_engine/chebyshev.py",
             "SAFETY = 1.2\n", "SAFETY = 0.12\n",
             "RKC's spectral estimate taken a tenth of its value (too few stages: unstable)",
             "tests/test_chebyshev.py::test_rkc_fixed_steps_are_stable_and_damp_stiff_modes_up_to_h_rho_1e4"),
    Mutation("rkc_rho_at_step_start", "gradflow/_engine/chebyshev.py",
             "jvp = lambda v: jax.jvp(lambda x: f(t1, x), (flat0,), (full(v),))[1][:n_p]",
             "jvp = lambda v: jax.jvp(lambda x: f(t0, x), (flat0,), (full(v),))[1][:n_p]",
             "RKC's spectral radius from the Jacobian at the step's start time (e^h too small in log time)",
             "tests/test_chebyshev.py::test_rkc_state_estimates_rho_at_the_step_end_time"),
    Mutation("rkc_power_cold_short", "gradflow/_engine/chebyshev.py",
             "POWER_COLD = 60\n", "POWER_COLD = 3\n",
             "RKC's cold power iteration stops after 3 products",
             "tests/test_chebyshev.py::test_spectral_radius_within_5_percent_of_eigvalsh"),
    Mutation("rkc_undamped", "gradflow/_engine/chebyshev.py",
             "DAMPING = 2.0 / 13.0\n", "DAMPING = 0.01\n",
             "RKC nearly undamped (R close to ±1 inside the interval: stiff modes barely damped)",
             "tests/test_chebyshev.py::test_rkc_fixed_steps_are_stable_and_damp_stiff_modes_up_to_h_rho_1e4"),
    Mutation("rkc_substeps_ignore_cap", "gradflow/_engine/chebyshev.py",
             "k = jnp.maximum(jnp.ceil(1.54 * h_rho / room), 1.0)", "k = jnp.ones_like(h_rho)",
             "RKC takes one substep whatever the stage cap (clipped stages: unstable past the cap)",
             "tests/test_chebyshev.py::test_stage_rules"),
    Mutation("rkc_failure_not_reported", "gradflow/_engine/chebyshev.py",
             "result = diffrax.RESULTS.where(ok, diffrax.RESULTS.successful, diffrax.RESULTS.breakdown)",
             "result = diffrax.RESULTS.successful",
             "a non-finite spectral estimate is not reported (the run goes on with a zero error estimate)",
             "tests/test_chebyshev.py::test_rkc_with_a_non_finite_spectral_estimate_fails_with_a_status"),
    Mutation("loop_failed_step_taken", "gradflow/_engine/loop.py",
             "tprev = jnp.where(failed, c.tprev, tprev)", "tprev = tprev",
             "a step the solver reports failed moves t to its end (t_end past the state)",
             "tests/test_chebyshev.py::test_rkc_with_a_non_finite_spectral_estimate_fails_with_a_status"),
    Mutation("blas_threads_noop", "gradflow/_engine/stiff.py",
             "    if not (solver_name == AUTO or spec(solver_name).implicit):\n", "    if True:\n",
             "implicit solves keep OpenBLAS's default threads", "tests/test_stiff.py::test_blas_threads_limits_only_implicit_solves"),
    # ---- the run's settings (gradflow/_engine/settings.py)
    Mutation("settings_end_point_dropped", "gradflow/_engine/settings.py",
             "taus = np.concatenate([taus, [np.log1p(t1)]])", "taus = taus",
             "the solve ends at the last save point instead of t1",
             "tests/test_engine_interior.py::test_the_solve_runs_to_t1_past_the_last_save_point"),
    Mutation("settings_meta_tolerances_swapped", "gradflow/_engine/settings.py",
             '"rtol": float(self.rtol), "atol": float(self.atol)', '"rtol": float(self.atol), "atol": float(self.rtol)',
             "the metadata records rtol and atol swapped",
             "tests/test_engine_interior.py::test_metadata_records_the_settings_asked_for"),
    Mutation("settings_rtol_unbounded", "gradflow/_engine/settings.py",
             'rtol = check_positive("rtol", rtol, upper=1.0)', 'rtol = check_positive("rtol", rtol)',
             "rtol >= 1 accepted", "tests/test_validation.py::test_bad_argument_is_one_clear_line"),
    # ---- the solver table (gradflow/_engine/solvers.py)
    Mutation("solvers_unknown_name_accepted", "gradflow/_engine/solvers.py",
             "    if not isinstance(solver, str) or solver not in SOLVERS:\n", "    if not isinstance(solver, str):\n",
             "an unknown solver name passes the check (a KeyError deep inside instead of a clear error)",
             "tests/test_validation.py::test_bad_argument_is_one_clear_line"),
    Mutation("solvers_rodas4_row_wrong", "gradflow/_engine/solvers.py",
             'SolverEntry("rodas4", 5, _rodas4,', 'SolverEntry("rodas4", 5, _kvaerno5,',
             "solver='rodas4' builds Kvaerno5",
             "tests/test_engine_interior.py::test_solver_table_builds_the_documented_methods"),
    Mutation("solvers_implicit_pid_default", "gradflow/_engine/solvers.py",
             "PID_IMPLICIT = Controller(pcoeff=0.3, icoeff=0.4)\n",
             "PID_IMPLICIT = Controller()\n",
             "implicit methods lose their PI step-size controller",
             "tests/test_engine_interior.py::test_solver_table_builds_the_documented_methods"),
    Mutation("rosenbrock_solution_weight", "gradflow/_engine/rosenbrock.py",
             "m=np.append(_A[5], 1.0),  # y1 = u_6 + k_6", "m=np.append(_A[5], 1.001),  # y1 = u_6 + k_6",
             "RODAS4's solution weight m_6 = 1.001 instead of 1",
             "tests/test_engine_interior.py::test_stability_functions_match_the_exponential_to_their_order"),
    # ---- rounds, buckets and the finish (gradflow/_engine/batch.py)
    Mutation("step_budget_ignored", "gradflow/_engine/solvers.py",
             "& (taken >= self.budget) &", "& (taken >= self.budget + 10**6) &",
             "a round's step budget ignored (every round runs to the longest round's cap)",
             "tests/test_engine_interior.py::test_step_budget_ends_a_solve_as_diffrax_max_steps_does"),
    Mutation("stiffness_never_measured", "gradflow/_engine/batch.py",
             "    if not flow.detect_stiffness:\n        return np.full(k, np.nan)",
             "    if True:\n        return np.full(k, np.nan)",
             "the stiffness detector never run between rounds (auto never sees a stiff lane)",
             "tests/test_stiff.py::test_auto_on_a_stiff_flow_matches_radau_in_few_steps"),
    Mutation("blas_limit_never_entered", "gradflow/_engine/batch.py",
             "if spec(code).implicit and not limited:", "if False:",
             "implicit rounds of a run keep OpenBLAS's default threads",
             "tests/test_stiff.py::test_auto_limits_blas_threads_from_its_first_implicit_round_only"),
    Mutation("fixed_width_rounds_bucketed", "gradflow/_engine/batch.py",
             "        (state.y_end, state.tau_end), fargs, pending, state.code.shape[0], settings.args_batched, devices,\n"
             "        settings.fixed_width)",
             "        (state.y_end, state.tau_end), fargs, pending, state.code.shape[0], settings.args_batched, devices,\n"
             "        False)",
             "fixed_width ignored after the first round: implicit rounds run buckets of the pending lanes",
             "tests/test_performance.py::test_fixed_width_gives_a_lane_the_same_bits_whichever_lanes_share_its_batch"),
    Mutation("start_time_save_not_reached", "gradflow/_engine/batch.py",
             "reached = state.reached | (taus == settings.tau0)", "reached = state.reached | (taus == 0)",
             "the save point at a start time t0 > 0 is not marked as reached (it is the initial state)",
             "tests/test_start_time.py::test_a_run_that_fails_at_its_first_step_still_returns_its_start_at_t0"),
    Mutation("start_time_origin_dropped", "gradflow/_engine/settings.py",
             "tau0=np.asarray(tau0, np.float64)", "tau0=np.zeros(())",
             "integrate(t0=...) starts the flow at t = 0 whatever t0 says",
             "tests/test_start_time.py::test_a_flow_from_t0_is_the_closed_form_shifted_and_its_quadrature_starts_at_t0"),
    Mutation("start_time_end_round_trip", "gradflow/_integrate.py",
             '    if meta.get("t0") and tau0 is not None:', '    if False:',
             "a run that ends at its start log time reports t_end = expm1(log1p(t0)), off t0 in the last bits",
             "tests/test_start_time.py::test_a_run_that_fails_at_its_first_step_still_returns_its_start_at_t0"),
    Mutation("phases_not_recorded", "gradflow/_engine/batch.py",
             "                phases.append(spec(code).name)", "                pass",
             "integrate's metadata lists no phase (the solvers its rounds ran)",
             "tests/test_stiff.py::test_auto_runs_rkc_through_the_engine"),
    Mutation("bucket_not_rounded_to_devices", "gradflow/_engine/batch.py",
             "    return -(-size // n_dev) * n_dev\n", "    return size\n",
             "a bucket of pending lanes not rounded up to a multiple of the device count",
             "tests/test_sweep.py::test_sharded_batch_rounds_a_lone_lanes_bucket_to_the_device_count"),
    Mutation("fused_result_stale", "gradflow/_engine/batch.py",
             "            fused = None\n", "            pass\n",
             "a round run in parts after a fused round returns the fused round's stale result",
             "tests/test_performance.py::test_batch_whose_lanes_finish_in_different_rounds_equals_single_runs"),
    Mutation("batch_steps_of_earlier_rounds_lost", "gradflow/_engine/batch.py",
             "num_steps=put(state.num_steps[idx] + out.num_steps, state.num_steps)",
             "num_steps=put(out.num_steps, state.num_steps)",
             "steps of earlier rounds forgotten (the step budget never runs out across rounds)",
             "tests/test_failures.py::test_quadrature_nonfinite_at_the_start_ends_nonfinite_at_zero"),
    Mutation("batch_save_points_overwritten", "gradflow/_engine/batch.py",
             "new_points = out.reached & ~old_reached", "new_points = out.reached | old_reached",
             "a later round overwrites the save points an earlier round reached",
             "tests/test_stiff.py::test_auto_on_a_stiff_flow_matches_radau_in_few_steps"),
    Mutation("batch_forward_fill_off", "gradflow/_engine/batch.py",
             "new = jax.tree.map(lambda r, p: jnp.where(ok, r, p), row, prev)",
             "new = jax.tree.map(lambda r, p: jnp.where(ok, r, r), row, prev)",
             "unreached save points not filled with the last reached state",
             "tests/test_simulate.py::test_step_budget_is_reported_not_raised"),
    # ---- Dopri8 with unrolled stages (gradflow/_engine/erk.py)
    Mutation("erk_error_estimate_halved", "gradflow/_engine/erk.py",
             "y_error = _dot(tab.b_error, ks)", "y_error = 0.5 * _dot(tab.b_error, ks)",
             "the unrolled Dopri8's error estimate halved (other steps than Dopri8's)",
             "tests/test_erk.py::test_one_step_matches_diffrax_dopri8"),
    Mutation("erk_stage_combination", "gradflow/_engine/erk.py",
             "            out = out + jnp.asarray(c, y.dtype) * k\n        return out\n\n    return jax.tree.map(leaf, y0,",
             "            out = out + jnp.asarray(1.0001 * c, y.dtype) * k\n        return out\n\n    return jax.tree.map(leaf, y0,",
             "the unrolled stages' inputs with coefficients off by 1e-4",
             "tests/test_erk.py::test_one_step_matches_diffrax_dopri8"),
    Mutation("erk_first_stage_stale", "gradflow/_engine/erk.py",
             "f0 = jax.lax.cond(eqxi.unvmap_any(first_step | made_jump),",
             "f0 = jax.lax.cond(eqxi.unvmap_any(first_step & made_jump),",
             "the first stage's field never evaluated afresh (a stale f0 at the first step)",
             "tests/test_erk.py::test_vmapped_solve_matches_closed_form_and_dopri8"),
    # ---- the compiled call and the serialised solves (gradflow/_engine/_fastjit.py, _export.py, _pinned.py)
    Mutation("fastjit_static_leaves_ignored", "gradflow/_engine/_fastjit.py",
             "self._hash = hash((treedef, leaves))", "self._hash = hash(treedef)",
             "the compiled call's key hashes the static structure only (leaves compared, still correct)",
             "tests/test_fastjit.py::test_filter_jit_matches_equinox_and_retraces_only_on_static_changes",
             equivalent="A weaker hash only adds collisions: __eq__ still compares the leaves, so every lookup "
                        "returns the executable of equal static arguments. Kept as a check of that argument."),
    Mutation("fastjit_static_equality_loose", "gradflow/_engine/_fastjit.py",
             "return type(other) is _Static and self._hash == other._hash and self.treedef == other.treedef and \\\n            self.leaves == other.leaves",
             "return type(other) is _Static and self.treedef == other.treedef",
             "two calls with different static settings share one executable",
             "tests/test_fastjit.py::test_filter_jit_matches_equinox_and_retraces_only_on_static_changes"),
    Mutation("fastjit_arrays_static", "gradflow/_engine/_fastjit.py",
             "arrays = [x for x in leaves if _is_array(x)]\n    return arrays, _Static(treedef, tuple(None if _is_array(x) else x for x in leaves))",
             "arrays = [x for x in leaves if _is_array(x) and x.ndim > 0]\n    return arrays, _Static(treedef, tuple(None if _is_array(x) and x.ndim > 0 else x for x in leaves))",
             "0-d arrays (tolerances, t1) treated as static: recompiles per value, or an unhashable key",
             "tests/test_performance.py::test_no_recompilation_across_tolerances_horizons_seeds_and_ts"),
    Mutation("export_key_without_shapes", "gradflow/_engine/_export.py",
             '"avals=" + ",".join(_aval_text(x) for x in arrays),', '"avals=",',
             "a stored solve keyed without its arrays' shapes (loaded for another shape)",
             "tests/test_export.py::test_key_names_every_static_setting_and_refuses_what_it_cannot_name"),
    Mutation("export_payload_unchecked", "gradflow/_engine/_export.py",
             "_write(path + _EXECUTABLE, _frame(key, payload))", "_write(path + _EXECUTABLE, payload)",
             "an executable stored without its key and checksum",
             "tests/test_export.py::test_new_process_loads_the_stored_solve_bitwise_and_falls_back_on_a_miss"),
    Mutation("export_stores_cached_executable", "gradflow/_engine/_export.py",
             'return program, getattr(_writes, "count", 0) > before',
             "return program, True",
             "an executable from JAX's persistent cache serialised again and stored (kernels lost)",
             "tests/test_export.py::test_an_executable_from_jaxs_cache_is_not_stored_again"),
    Mutation("jobs_workers_orphaned", "app/_jobs.py", "    _die_with_parent()\n", "    pass\n",
             "workers of a parent killed by SIGKILL compute on, orphaned",
             "tests/test_jobs.py::test_workers_stop_with_their_parent"),
    Mutation("field_traced_at_every_site", "gradflow/_engine/solve.py",
             "    return call_user(flow.field, params, args), ({} if flow.rates is None else call_user(flow.rates, params, args))",
             "    return flow.field(params, args), ({} if flow.rates is None else flow.rates(params, args))",
             "the user's field traced again at every site of a program (first call slower)",
             "tests/test_performance.py::test_the_field_is_traced_once_per_program_with_the_same_results"),
    # ---- the engine's own solve loop (gradflow/_engine/loop.py), against diffrax.diffeqsolve
    Mutation("loop_pid_initial_step", "gradflow/_engine/loop.py",
             "controller.init(term, t0, t1, y0, INITIAL_STEP, args, solver.func, error_order)",
             "controller.init(term, t0, t1, y0, None, args, solver.func, error_order)",
             "the first step from PID's heuristic, not diffeqsolve's (every solve's steps change)",
             "tests/test_loop.py::test_every_solver_takes_diffeqsolves_steps_bit_for_bit"),
    Mutation("loop_event_before_the_step", "gradflow/_engine/loop.py",
             "_event(event, tprev, y, args), diffrax.RESULTS.event_occurred, result)\n        return",
             "_event(event, c.tprev, c.y, args), diffrax.RESULTS.event_occurred, result)\n        return",
             "the event tested at the state before the step (the solve ends one step late)",
             "tests/test_loop.py::test_the_event_ends_the_solve_where_diffeqsolve_ends_it"),
    Mutation("loop_saves_rejected_steps", "gradflow/_engine/loop.py",
             "return keep & (ts[i] <= c.tnext) & (i < T)",
             "return (ts[i] <= c.tnext) & (i < T)",
             "save points interpolated inside rejected steps",
             "tests/test_loop.py::test_every_solver_takes_diffeqsolves_steps_bit_for_bit"),
    Mutation("loop_in_place_flipped", "gradflow/_engine/batch.py",
             "    vmapped = not _one_lane((y0, tau0))", "    vmapped = _one_lane((y0, tau0))",
             "a vmapped solve carries its save buffers (a copy per step), a single lane writes them in place",
             "tests/test_loop.py::test_the_engine_writes_in_place_exactly_when_it_vmaps"),
    Mutation("params_end_last_saved", "gradflow/_engine/batch.py",
             "t_steady=jnp.expm1(state.tau_steady), params_end=state.y_end[0],",
             "t_steady=jnp.expm1(state.tau_steady), params_end=jax.tree.map(lambda x: x[:, -1], res[\"params\"]),",
             "params_end the last saved point's state (forward-filled), not the state at t_end",
             "tests/test_params_end.py::test_a_run_stopped_by_max_steps_hands_back_its_end_state_not_its_last_saved_one"),
    Mutation("trajectory_a_end_last_saved", "gradflow/attention/_simulate.py",
             "    V_end, a_end = out.params_end\n",
             "    V_end, a_end = out.params_end[0], out.params[1][..., -1, :]\n",
             "simulate's a_end the last saved logits, not those at t_end",
             "tests/test_params_end.py::test_a_value_softmax_run_keeps_its_end_state_too"),
    Mutation("trajectory_V_end_unexpanded", "gradflow/attention/_simulate.py",
             "        V, V_end = expand(V), expand(V_end[None])[0]\n",
             "        V, V_end = expand(V), V_end\n",
             "a reduced solve's V_end left as the reduced (1, n) row instead of expanded to V",
             "tests/test_params_end.py::test_a_value_softmax_run_keeps_its_end_state_too"),
    Mutation("rest_end_quadratures_frozen", "gradflow/_engine/solve.py",
             "        y_end = jax.tree.map(lambda e, r: jnp.where(at_rest_, r[-1], e), y_end, rest)\n", "",
             "a resting lane's end quadratures left at the rest time instead of continued to t1",
             "tests/test_params_end.py::test_a_finished_run_ends_in_its_last_saved_state"),
    Mutation("loop_clip_floor_short", "gradflow/_engine/loop.py",
             "CLIP_ULPS = 100\n", "CLIP_ULPS = 10\n",
             "steps clipped to t1 only within 10 ulps of it",
             "tests/test_loop.py::test_clip_floor_is_diffraxs_unrolled_chain"),
    Mutation("rest_test_traces_the_field", "gradflow/_engine/solve.py",
             "f, lin = jax.linearize(lambda p: call_user(flow.field, p, fargs), params)",
             "f, lin = jax.linearize(lambda p: flow.field(p, fargs), params)",
             "the rest test traces the user's field again in every program",
             "tests/test_performance.py::test_the_field_is_traced_once_per_program_with_the_same_results"),
    Mutation("rest_test_traces_the_rates", "gradflow/_engine/solve.py",
             "(lambda p: call_user(args.flow.rates, p, args.fargs))",
             "(lambda p: args.flow.rates(p, args.fargs))",
             "the rest test traces the quadratures' integrands again in every program",
             "tests/test_performance.py::test_the_field_is_traced_once_per_program_with_the_same_results"),
    Mutation("detector_draws_in_its_program", "gradflow/_engine/stiff.py",
             "    return jnp.asarray(np.random.RandomState(seed).standard_normal(shape), dtype)",
             "    return jax.random.normal(jax.random.PRNGKey(seed), shape, dtype)",
             "the detector's start vectors drawn with jax.random inside its program (its compile ~3x longer)",
             "tests/test_stiff.py::test_detector_draws_no_random_numbers_in_its_program"),
    Mutation("fast_compile_for_batches", "gradflow/_engine/batch.py",
             "compile_fast=lambda flow, fargs, params0, state, *rest: not _throughput_bound(state.y_end)",
             "compile_fast=lambda *rest: True",
             "throughput-bound batches compiled with FAST_COMPILE (10-70 % slower warm)",
             "tests/test_fastjit.py::test_throughput_bound_picks_the_compile_options"),
    Mutation("export_options_ignored", "gradflow/_engine/_export.py",
             '"options=" + d(tuple(options)),', '"options=",',
             "a stored solve compiled with one set of XLA options loaded for the other",
             "tests/test_export.py::test_key_names_every_static_setting_and_refuses_what_it_cannot_name"),
    Mutation("export_memo_options_ignored", "gradflow/_engine/_export.py",
             "    memo = (fn, static, avals, options)", "    memo = (fn, static, avals)",
             "this process's program for one set of XLA options served to the other",
             "tests/test_export.py::test_this_process_keeps_one_program_per_compiler_options"),
    Mutation("export_engine_constants_ignored", "gradflow/_engine/_export.py",
             '"engine=" + _engine_constants(d),', '"engine=",',
             "a stored solve reused after an engine constant changed at run time",
             "tests/test_export.py::test_key_names_every_static_setting_and_refuses_what_it_cannot_name"),
    Mutation("pinned_export_off", "gradflow/_engine/_pinned.py",
             "EXPORT_ACTIVE = _jax_modules is not None and jax.__version__ in TESTED_JAX",
             "EXPORT_ACTIVE = False and jax.__version__ in TESTED_JAX",
             "serialised solves never used on the tested jax",
             "tests/test_engine_interior.py::test_library_internals_are_version_guarded"),
    Mutation("loop_checks_ts_on_the_host", "gradflow/_engine/loop.py",
             "    ts = jnp.asarray(ts, time_dtype)\n",
             "    ts = eqx.error_if(jnp.asarray(ts, time_dtype), jnp.any(ts[1:] < ts[:-1]), 'ts must increase')\n",
             "the solve checks its save times with a host callback, as diffeqsolve did (never written to the cache)",
             "tests/test_performance.py::test_solve_is_written_to_the_persistent_compilation_cache"),
    # ---- every guard on both sides of its threshold, moved 3x either way; rtol and max_steps in
    # every phase (tests/test_guards.py)
    Mutation("guard_rest_fraction_3x", "gradflow/_engine/solve.py",
             "REST_FRACTION = 1e-2\n", "REST_FRACTION = 3e-2\n",
             "rest stop at 3 % of the tolerance", "tests/test_guards.py::test_rest_stop_fires_just_below_one_percent_of_the_tolerance_and_not_just_above"),
    Mutation("guard_rest_fraction_third", "gradflow/_engine/solve.py",
             "REST_FRACTION = 1e-2\n", "REST_FRACTION = 3.3e-3\n",
             "rest stop at 0.33 % of the tolerance", "tests/test_guards.py::test_rest_stop_fires_just_below_one_percent_of_the_tolerance_and_not_just_above"),
    Mutation("guard_rate_growth_3x", "gradflow/_engine/solve.py",
             "RATE_GROWTH = 2.0\n", "RATE_GROWTH = 6.0\n",
             "quadrature guard lets an integrand grow 6-fold", "tests/test_guards.py::test_quadrature_guard_allows_growth_below_twice_and_refuses_above"),
    Mutation("guard_rate_growth_third", "gradflow/_engine/solve.py",
             "RATE_GROWTH = 2.0\n", "RATE_GROWTH = 0.67\n",
             "quadrature guard refuses an integrand that does not shrink", "tests/test_guards.py::test_quadrature_guard_allows_growth_below_twice_and_refuses_above"),
    Mutation("guard_stall_ulps_3x", "gradflow/_engine/solve.py",
             "STALL_ULPS = 1024\n", "STALL_ULPS = 3072\n",
             "a solve stalls below 3072 ulps of the end log time", "tests/test_guards.py::test_stall_step_is_1024_ulps_of_the_end_log_time"),
    Mutation("guard_stall_ulps_third", "gradflow/_engine/solve.py",
             "STALL_ULPS = 1024\n", "STALL_ULPS = 341\n",
             "a solve stalls below 341 ulps of the end log time", "tests/test_guards.py::test_stall_step_is_1024_ulps_of_the_end_log_time"),
    Mutation("guard_stiff_on_3x", "gradflow/_engine/policy.py",
             "    stiff_on: float = 0.5\n", "    stiff_on: float = 1.5\n",
             "switch to implicit at h·rho > 1.5 B", "tests/test_guards.py::test_explicit_lanes_switch_above_half_the_dopri8_boundary_only"),
    Mutation("guard_stiff_on_third", "gradflow/_engine/policy.py",
             "    stiff_on: float = 0.5\n", "    stiff_on: float = 0.17\n",
             "switch to implicit at h·rho > 0.17 B", "tests/test_guards.py::test_explicit_lanes_switch_above_half_the_dopri8_boundary_only"),
    Mutation("guard_stiff_off_3x", "gradflow/_engine/policy.py",
             "    stiff_off: float = 0.25\n", "    stiff_off: float = 0.75\n",
             "switch back to explicit at h·rho < 0.75 B", "tests/test_guards.py::test_implicit_lanes_switch_back_below_a_quarter_of_the_dopri8_boundary_only"),
    Mutation("guard_stiff_off_third", "gradflow/_engine/policy.py",
             "    stiff_off: float = 0.25\n", "    stiff_off: float = 0.083\n",
             "switch back to explicit at h·rho < 0.083 B", "tests/test_guards.py::test_implicit_lanes_switch_back_below_a_quarter_of_the_dopri8_boundary_only"),
    Mutation("guard_dopri8_boundary_3x", "gradflow/_engine/policy.py",
             "    explicit_boundary: float = 5.17\n", "    explicit_boundary: float = 15.5\n",
             "Dopri8's stability boundary taken 3x too large", "tests/test_guards.py::test_dopri8_boundary_is_where_its_stability_function_meets_the_real_axis"),
    Mutation("guard_dopri8_boundary_third", "gradflow/_engine/policy.py",
             "    explicit_boundary: float = 5.17\n", "    explicit_boundary: float = 1.72\n",
             "Dopri8's stability boundary taken 3x too small", "tests/test_guards.py::test_dopri8_boundary_is_where_its_stability_function_meets_the_real_axis"),
    Mutation("guard_eigen_min_state_3x", "gradflow/_engine/policy.py",
             "    eigen_min_state: int = 128\n", "    eigen_min_state: int = 384\n",
             "rodas4-eigh only from 384 parameters", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_eigen_min_state_third", "gradflow/_engine/policy.py",
             "    eigen_min_state: int = 128\n", "    eigen_min_state: int = 43\n",
             "rodas4-eigh from 43 parameters", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_krylov_min_state_3x", "gradflow/_engine/policy.py",
             "    krylov_min_state: int = 2000\n", "    krylov_min_state: int = 6000\n",
             "rodas4-krylov only from 6000 parameters", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_krylov_min_state_third", "gradflow/_engine/policy.py",
             "    krylov_min_state: int = 2000\n", "    krylov_min_state: int = 667\n",
             "rodas4-krylov from 667 parameters", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_symmetry_tol_3x", "gradflow/_engine/policy.py",
             "    symmetry_tol: float = 1e-8\n", "    symmetry_tol: float = 3e-8\n",
             "symmetric up to asymmetry 3e-8", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_symmetry_tol_third", "gradflow/_engine/policy.py",
             "    symmetry_tol: float = 1e-8\n", "    symmetry_tol: float = 3.3e-9\n",
             "symmetric only up to asymmetry 3.3e-9", "tests/test_guards.py::test_implicit_solver_by_state_size_and_symmetry"),
    Mutation("guard_explicit_round_3x", "gradflow/_engine/policy.py",
             "    explicit_round: int = 64\n", "    explicit_round: int = 192\n",
             "explicit rounds of 192 steps", "tests/test_guards.py::test_each_phase_round_is_its_length_or_the_budget_left"),
    Mutation("guard_explicit_round_third", "gradflow/_engine/policy.py",
             "    explicit_round: int = 64\n", "    explicit_round: int = 21\n",
             "explicit rounds of 21 steps", "tests/test_guards.py::test_each_phase_round_is_its_length_or_the_budget_left"),
    Mutation("guard_eigen_round_3x", "gradflow/_engine/rosenbrock.py",
             "EIGEN_RODAS4_ROUND = 64\n", "EIGEN_RODAS4_ROUND = 192\n",
             "rodas4-eigh rounds of 192 steps under auto", "tests/test_guards.py::test_each_phase_round_is_its_length_or_the_budget_left"),
    Mutation("guard_eigen_round_third", "gradflow/_engine/rosenbrock.py",
             "EIGEN_RODAS4_ROUND = 64\n", "EIGEN_RODAS4_ROUND = 21\n",
             "rodas4-eigh rounds of 21 steps under auto", "tests/test_guards.py::test_each_phase_round_is_its_length_or_the_budget_left"),
    Mutation("guard_krylov_fraction_3x", "gradflow/_engine/rosenbrock.py",
             "KRYLOV_FRACTION = 1e-2\n", "KRYLOV_FRACTION = 3e-2\n",
             "Krylov stage solves to 3 % of the step tolerance", "tests/test_guards.py::test_krylov_stage_solves_stop_at_one_percent_of_the_step_tolerance"),
    Mutation("guard_krylov_fraction_third", "gradflow/_engine/rosenbrock.py",
             "KRYLOV_FRACTION = 1e-2\n", "KRYLOV_FRACTION = 3.3e-3\n",
             "Krylov stage solves to 0.33 % of the step tolerance", "tests/test_guards.py::test_krylov_stage_solves_stop_at_one_percent_of_the_step_tolerance"),
    Mutation("guard_rkc_safety_3x", "gradflow/_engine/chebyshev.py",
             "SAFETY = 1.2\n", "SAFETY = 3.6\n",
             "RKC's spectral estimate times 3.6 (stages wasted)", "tests/test_guards.py::test_rkc_stage_number_covers_1_2_times_the_spectral_radius_and_no_more"),
    Mutation("guard_rkc_safety_third", "gradflow/_engine/chebyshev.py",
             "SAFETY = 1.2\n", "SAFETY = 0.4\n",
             "RKC's spectral estimate times 0.4 (too few stages)", "tests/test_guards.py::test_rkc_stage_number_covers_1_2_times_the_spectral_radius_and_no_more"),
    Mutation("guard_power_tol_3x", "gradflow/_engine/chebyshev.py",
             "POWER_TOL = 0.01\n", "POWER_TOL = 0.03\n",
             "RKC's power iteration stops at a 3 % change", "tests/test_guards.py::test_power_iteration_stops_at_the_first_change_of_at_most_one_percent"),
    Mutation("guard_power_tol_third", "gradflow/_engine/chebyshev.py",
             "POWER_TOL = 0.01\n", "POWER_TOL = 0.0033\n",
             "RKC's power iteration stops at a 0.33 % change", "tests/test_guards.py::test_power_iteration_stops_at_the_first_change_of_at_most_one_percent"),
    Mutation("guard_roundoff_3x", "gradflow/_engine/chebyshev.py",
             "ROUNDOFF = 10.0\n", "ROUNDOFF = 30.0\n",
             "RKC's stage cap with round-off 30x below rtol", "tests/test_chebyshev.py::test_stage_rules"),
    Mutation("guard_roundoff_third", "gradflow/_engine/chebyshev.py",
             "ROUNDOFF = 10.0\n", "ROUNDOFF = 3.3\n",
             "RKC's stage cap with round-off 3.3x below rtol", "tests/test_chebyshev.py::test_stage_rules"),
    Mutation("guard_unroll_lanes_3x", "gradflow/_engine/batch.py",
             "UNROLL_LANES = 64\n", "UNROLL_LANES = 192\n",
             "throughput-bound only from 192 lanes", "tests/test_guards.py::test_throughput_bound_from_64_lanes_or_2_to_18_floats_per_lane"),
    Mutation("guard_unroll_lanes_third", "gradflow/_engine/batch.py",
             "UNROLL_LANES = 64\n", "UNROLL_LANES = 21\n",
             "throughput-bound from 21 lanes", "tests/test_guards.py::test_throughput_bound_from_64_lanes_or_2_to_18_floats_per_lane"),
    Mutation("guard_unroll_state_3x", "gradflow/_engine/batch.py",
             "UNROLL_STATE = 2**18\n", "UNROLL_STATE = 3 * 2**18\n",
             "throughput-bound only from 3·2**18 floats per lane", "tests/test_guards.py::test_throughput_bound_from_64_lanes_or_2_to_18_floats_per_lane"),
    Mutation("guard_unroll_state_third", "gradflow/_engine/batch.py",
             "UNROLL_STATE = 2**18\n", "UNROLL_STATE = 2**18 // 3\n",
             "throughput-bound from 2**18/3 floats per lane", "tests/test_guards.py::test_throughput_bound_from_64_lanes_or_2_to_18_floats_per_lane"),
    Mutation("guard_lanes_per_solve_3x", "gradflow/_engine/batch.py",
             "LANES_PER_SOLVE = 256\n", "LANES_PER_SOLVE = 768\n",
             "solves of up to 768 lanes per device", "tests/test_guards.py::test_one_solve_holds_at_most_256_lanes_and_one_round_at_most_512_steps"),
    Mutation("guard_lanes_per_solve_third", "gradflow/_engine/batch.py",
             "LANES_PER_SOLVE = 256\n", "LANES_PER_SOLVE = 85\n",
             "solves of up to 85 lanes per device", "tests/test_guards.py::test_one_solve_holds_at_most_256_lanes_and_one_round_at_most_512_steps"),
    Mutation("guard_round_steps_3x", "gradflow/_engine/batch.py",
             "ROUND_STEPS = 512\n", "ROUND_STEPS = 1536\n",
             "rounds of up to 1536 steps", "tests/test_guards.py::test_one_solve_holds_at_most_256_lanes_and_one_round_at_most_512_steps"),
    Mutation("guard_round_steps_third", "gradflow/_engine/batch.py",
             "ROUND_STEPS = 512\n", "ROUND_STEPS = 170\n",
             "rounds of up to 170 steps", "tests/test_guards.py::test_one_solve_holds_at_most_256_lanes_and_one_round_at_most_512_steps"),
    Mutation("rtol_fixed_in_implicit_controllers", "gradflow/_engine/solvers.py",
             "ctrl = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=self.pcoeff,", "ctrl = diffrax.PIDController(rtol=1e-6 if self.pcoeff else rtol, atol=atol, pcoeff=self.pcoeff,",
             "the implicit phases' step control at rtol 1e-6 whatever the run's rtol", "tests/test_guards.py::test_rtol_reaches_every_phase"),
    Mutation("rtol_fixed_in_explicit_controller", "gradflow/_engine/solvers.py",
             "ctrl = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=self.pcoeff,", "ctrl = diffrax.PIDController(rtol=rtol if self.pcoeff else 1e-6, atol=atol, pcoeff=self.pcoeff,",
             "the explicit phases' (dopri8, rkc) step control at rtol 1e-6 whatever the run's rtol", "tests/test_guards.py::test_rtol_reaches_every_phase"),
    Mutation("krylov_inner_rtol_fixed", "gradflow/_engine/solvers.py",
             "return rosenbrock.KrylovRodas4(1e-8 if rtol is None else rtol, 1e-10 if atol is None else atol)", "return rosenbrock.KrylovRodas4(1e-8, 1e-10)",
             "rodas4-krylov's inner solves at the default tolerances whatever the run's", "tests/test_guards.py::test_krylov_inner_solves_follow_rtol"),
    Mutation("budget_ignored_by_implicit_controllers", "gradflow/_engine/solvers.py",
             "return ctrl if budget is None else StepBudget(ctrl, budget, tau1)", "return ctrl if budget is None or kind != \"pid\" else StepBudget(ctrl, budget, tau1)",
             "the implicit phases ignore the round's step budget (run to the round's cap)", "tests/test_guards.py::test_max_steps_is_honoured_in_every_phase"),
    Mutation("auto_implicit_round_ignores_budget", "gradflow/_engine/stiff.py",
             "left = np.where(stiff, np.minimum(budget, implicit_round), np.minimum(budget, p.explicit_round))", "left = np.where(stiff, implicit_round, np.minimum(budget, p.explicit_round))",
             "auto's implicit rounds take their full length past the budget left", "tests/test_guards.py::test_auto_spends_its_budget_in_the_implicit_phase"),
    # ---- the value-softmax front end (gradflow/attention/_simulate.py)
    Mutation("simulate_reduction_unnormalised", "gradflow/attention/_simulate.py",
             "v0 = (bhat @ V0)[None, :]", "v0 = (beta @ V0)[None, :]",
             "the rank-one reduction starts from β*ᵀV0 instead of β̂ᵀV0", "tests/test_reduction.py"),
    Mutation("simulate_expand_wrong_direction", "gradflow/attention/_simulate.py",
             "jnp.asarray(V0)[None] + jnp.asarray(bhat)[None, :, None] * (v - jnp.asarray(v0)[None])",
             "jnp.asarray(V0)[None] + jnp.asarray(beta)[None, :, None] * (v - jnp.asarray(v0)[None])",
             "the reduced flow expanded along β* instead of β̂", "tests/test_reduction.py"),
    Mutation("simulate_losses_shuffled", "gradflow/attention/_simulate.py",
             "[jnp.asarray(np.stack(col)) for col in zip(*leaves)]", "[jnp.asarray(np.stack(col[::-1])) for col in zip(*leaves)]",
             "per-lane losses assigned to the lanes in reverse order", "tests/test_simulate.py"),
    # ---- integrate's quadratures and observables (gradflow/_integrate.py)
    Mutation("integrate_quadrature_scaled", "gradflow/_integrate.py",
             "return {name: fn(params, args) for name, fn in self.items}", "return {name: 1.01 * fn(params, args) for name, fn in self.items}",
             "integrate's quadrature integrands scaled by 1.01",
             "tests/test_integrate.py::test_quadrature_and_grad_norm_against_closed_form"),
    Mutation("integrate_observe_scaled", "gradflow/_integrate.py",
             "observed={name: _solve.call_user(fn, params, args) for name, fn in self.items})",
             "observed={name: 1.01 * _solve.call_user(fn, params, args) for name, fn in self.items})",
             "integrate's user observables scaled by 1.01", "tests/test_integrate.py"),
    Mutation("integrate_grad_norm_l1", "gradflow/_integrate.py",
             "return jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(tree)))",
             "return jnp.sqrt(sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(tree)))",
             "integrate's grad_norm as sqrt of the L1 norm", "tests/test_integrate.py::test_quadrature_and_grad_norm_against_closed_form"),
    Mutation("integrate_quadratures_end_lost", "gradflow/_integrate.py",
             "params_end=out.params_end, quadratures_end=out.quadratures_end,",
             "params_end=out.params_end, quadratures_end=None,",
             "integrate's Solution without quadratures_end", "tests/test_result_fields.py::test_documented_fields_are_set_and_none_where_documented"),
    # ---- descend and descend_params (gradflow/_descend.py)
    Mutation("descend_half_lr", "gradflow/_descend.py",
             "opt = optax.sgd(lr) if optimizer is None else optimizer", "opt = optax.sgd(lr / 2) if optimizer is None else optimizer",
             "descend at lr/2", "tests/test_descend.py::test_gd_equals_numpy_euler"),
    Mutation("descend_gamma_right_sum", "gradflow/_descend.py",
             "new_quads = jax.tree.map(lambda q, r: q + lr * r, quads, rates(params))",
             "new_quads = jax.tree.map(lambda q, r: q + lr * r, quads, rates(new_params))",
             "GD's Γ as a right instead of left Riemann sum", "tests/test_descend.py::test_gd_equals_numpy_euler"),
    Mutation("descend_params_time_shift", "gradflow/_descend.py",
             "t=lr * k.astype(jnp.float64), k=k, params=out[\"params\"]",
             "t=lr * (k + 1).astype(jnp.float64), k=k, params=out[\"params\"]",
             "descend_params' time t = lr·(k + 1) instead of lr·k",
             "tests/test_integrate.py::test_descend_params_time_and_divergence_by_hand"),
    Mutation("descend_params_status_lost", "gradflow/_descend.py",
             "status_code=jnp.where(out[\"failed\"], Status.nonfinite, Status.ok)", "status_code=jnp.where(out[\"failed\"], Status.ok, Status.ok)",
             "descend_params reports a diverged run as ok", "tests/test_integrate.py::test_descend_params_time_and_divergence_by_hand"),
)
"""Mutations of the integrator's modules (re-target after the engine is restructured)."""

ALL = MUTATIONS + ENGINE_MUTATIONS


def _copy_repo(dst: Path) -> None:
    ignore = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.pyc", ".hypothesis", ".venv*")
    shutil.copytree(ROOT, dst, ignore=ignore, dirs_exist_ok=True)


def found(m: Mutation, root: Path = ROOT) -> int:
    """How many times the mutation's text occurs in its file (must be exactly 1)."""
    path = root / m.file
    return path.read_text().count(m.old) if path.exists() else 0


_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)


def run_one(m: Mutation, work: Path, timeout: float, files=DEFAULT_FILES) -> dict:
    """Apply ``m`` in the copy ``work``, run the tests, restore; returns a result row."""
    path = work / m.file
    original = path.read_text()
    count = original.count(m.old)
    if count != 1:
        return dict(name=m.name, status="TEXT NOT FOUND" if count == 0 else f"TEXT FOUND {count}x", test="", seconds=0.0)
    path.write_text(original.replace(m.old, m.new))
    base = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    out, rc = "", 0
    try:
        # the hint alone first (pytest would merge it into its file's order), then the default files
        for files_ in ([m.hint] if m.hint else [], list(files)):
            if not files_:
                continue
            left = max(1.0, timeout - (time.perf_counter() - t0))
            proc = subprocess.run(base + files_, cwd=work, env=env, capture_output=True, text=True, timeout=left)
            out, rc = proc.stdout + proc.stderr, proc.returncode
            if files_ != list(files) and rc in (4, 5):  # the hint names no test: say so, run the files
                print(f"{m.name}: HINT {m.hint!r} NOT FOUND (pytest exit {rc})", file=sys.stderr, flush=True)
                continue
            if rc != 0:
                break
    except subprocess.TimeoutExpired:
        out, rc = "", -1
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - t0
    hit = _FAILED.search(out)
    if rc == -1:
        status = "TIMEOUT"
    elif rc == 0:
        status = "NOT CAUGHT"
    elif rc == 1:
        status = "caught"
    else:
        status = f"caught (pytest exit {rc})"
    return dict(name=m.name, status=status, test=hit.group(2) if hit else "", seconds=seconds)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutate", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="mutation names to run, in this order (default: all, in list order)")
    p.add_argument("--list", action="store_true", help="list the mutations and whether each text is found; run nothing")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per mutation (default 3600)")
    args = p.parse_args(argv)
    by_name = {m.name: m for m in ALL}
    chosen = [by_name[n] for n in args.only if n in by_name] if args.only else list(ALL)  # in the order given
    unknown = set(args.only or ()) - {m.name for m in ALL}
    if unknown:
        p.error(f"unknown mutation names: {sorted(unknown)}")
    if args.list:
        bad = 0
        for m in chosen:
            n = found(m)
            bad += n != 1
            kind = "engine" if m in ENGINE_MUTATIONS else "other"
            kind += " (equivalent)" if m.equivalent else ""
            print(f"{m.name:28s} {kind:6s} {m.file:32s} {'ok' if n == 1 else ('TEXT NOT FOUND' if n == 0 else f'FOUND {n}x')}  {m.description}")
        return 1 if bad else 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="gradflow-mutate-") as tmp:
        work = Path(tmp) / "repo"
        _copy_repo(work)
        # the unmutated copy must collect cleanly: otherwise every mutation would "fail" for the
        # harness's own reason (an environment problem) and be counted as caught
        env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
        base = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                               "-n", "0", *DEFAULT_FILES], cwd=work, env=env, capture_output=True, text=True)
        if base.returncode != 0:
            print(f"the unmutated copy does not collect (pytest exit {base.returncode}); nothing run:\n"
                  f"{(base.stdout + base.stderr)[-3000:]}", file=sys.stderr)
            return 2
        for m in chosen:
            row = run_one(m, work, args.timeout)
            rows.append((m, row))
            print(f"{m.name}: {row['status']} {row['test']} ({row['seconds']:.0f} s)", file=sys.stderr, flush=True)
    print("| mutation | file | description | caught? | first failing test | s |")
    print("|---|---|---|---|---|---|")
    for m, row in rows:
        status = "survived (equivalent mutant)" if m.equivalent and row["status"] == "NOT CAUGHT" else row["status"]
        print(f"| {m.name} | {m.file} | {m.description} | {status} | {row['test']} | {row['seconds']:.0f} |")
    survived_equivalent = [m.name for m, row in rows if m.equivalent and row["status"] == "NOT CAUGHT"]
    missed = [m.name for m, row in rows if not row["status"].startswith("caught") and m.name not in survived_equivalent]
    caught = sum(row["status"].startswith("caught") for _, row in rows)
    counted = len(rows) - len(survived_equivalent)
    for name in survived_equivalent:
        print(f"\n{name}: survived, as expected of an equivalent mutant: {by_name[name].equivalent}")
    if missed:
        print(f"\n{len(missed)} of {counted} mutations NOT caught or NOT FOUND: {', '.join(missed)}")
        return 1
    print(f"\n{caught} of {counted} mutations caught" + (f" ({len(survived_equivalent)} equivalent mutant(s) "
          "survived, not counted)" if survived_equivalent else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
