"""``integrate`` vs ``simulate`` on the Fig. 2 problem (t1 = 1e12, rtol 1e-8), warm, same process.

Three calls, each timed as the median of ``repeats`` warm calls, interleaved (the result copied to the host):

* ``simulate``: the value-softmax front end;
* ``integrate (exact field)``: the same flow through :func:`gradflow.integrate` with simulate's
  own field (``field=gradflow.gradient_field``) and Γ as a quadrature — the same solve, so the
  difference is the generic front end's checks and wrapping;
* ``integrate (autodiff)``: the loss written by hand with ``jax.nn.softmax``, differentiated by
  ``jax.grad`` (what a new user would write).

``python -m benchmarks.integrate_overhead [--repeats N]`` prints a Markdown table; :func:`run`
returns the numbers.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import gradflow
from gradflow.sweep import fig2_init

from benchmarks._timing import interleaved_medians


def _fig2():
    return fig2_init(123, 8)



def run(repeats: int = 50, t1: float = 1e12) -> dict:
    V0, a0, bs = _fig2()
    loss = gradflow.LogisticTeacher(bs)
    model = gradflow.get_model("value-softmax")
    bs_j = jnp.asarray(bs)
    field = lambda p: gradflow.gradient_field(model, loss, *p)
    gamma = lambda p: model.gamma(loss, *p)
    exact_loss = lambda p: model.loss(loss, *p)
    by_hand = lambda p: jnp.logaddexp(0.0, -jnp.dot(bs_j, p[0] @ jax.nn.softmax(p[1])))

    def sim():
        traj = gradflow.simulate(loss, V0, a0, t1=t1)
        return np.asarray(traj.a), int(traj.num_steps)

    def exact():
        sol = gradflow.integrate(exact_loss, (V0, a0), t1=t1, steady=False, field=field, quadratures={"Gamma": gamma})
        return np.asarray(sol.params[1]), int(sol.num_steps)

    def auto():
        sol = gradflow.integrate(by_hand, (V0, a0), t1=t1, steady=False)
        return np.asarray(sol.params[1]), int(sol.num_steps)

    timed = interleaved_medians({"simulate": sim, "integrate (exact field)": exact, "integrate (autodiff)": auto},
                                 repeats)
    rows = {name: dict(seconds=sec, steps=steps, a_end=a[-1]) for name, (sec, (a, steps)) in timed.items()}
    base = rows["simulate"]
    for r in rows.values():
        r["ratio"] = r["seconds"] / base["seconds"]
    for r in rows.values():  # final logits against simulate's
        r["max_abs_diff_a"] = float(np.max(np.abs(r["a_end"] - base["a_end"])))
    for r in rows.values():
        del r["a_end"]
    return dict(repeats=repeats, t1=t1, rows=rows)


def markdown(res: dict) -> str:
    lines = [f"Fig. 2 problem, t1 = {res['t1']:g}, rtol 1e-8, warm, median of {res['repeats']} interleaved calls", "",
             "| call | ms | × simulate | steps | max abs diff of a(t1) vs simulate |", "|---|---|---|---|---|"]
    for name, r in res["rows"].items():
        lines.append(f"| {name} | {1e3 * r['seconds']:.2f} | {r['ratio']:.2f} | {r['steps']} | {r['max_abs_diff_a']:.1e} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    print(markdown(run(parser.parse_args().repeats)))
