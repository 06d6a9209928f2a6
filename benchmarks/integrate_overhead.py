"""``integrate`` vs ``simulate`` on the Fig. 2 problem (t1 = 1e12, rtol 1e-8), warm, same process.

Three calls, each timed as the median of ``repeats`` warm calls, interleaved (the result copied to the host):

* ``simulate``: the value-softmax front end;
* ``integrate (exact field)``: the same flow through :func:`gradflow.integrate` with simulate's
  own field (``field=gradflow.gradient_field``) and Γ as a quadrature — the same solve, so the
  difference is the generic front end's checks and wrapping;
* ``integrate (autodiff)``: the loss written by hand with ``jax.nn.softmax``, differentiated by
  ``jax.grad`` (what a new user would write);
* ``integrate (autodiff, gradflow.softmax)``: the same with :func:`gradflow.softmax` (the
  centred derivative the docs recommend).

``python -m benchmarks`` runs it and writes its table into ``RESULTS.md`` (:func:`section`).

``python -m benchmarks.integrate_overhead [--repeats N]`` prints a Markdown table; :func:`run`
returns the numbers.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import gradflow
from gradflow.attention.sweep import fig2_init

from benchmarks._report import put_section
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
    centred = lambda p: jnp.logaddexp(0.0, -jnp.dot(bs_j, p[0] @ gradflow.softmax(p[1])))

    def sim():
        traj = gradflow.simulate(loss, V0, a0, t1=t1)
        return np.asarray(traj.a), int(traj.num_steps)

    def exact():
        sol = gradflow.integrate(exact_loss, (V0, a0), t1=t1, field=field, quadratures={"Gamma": gamma})
        return np.asarray(sol.params[1]), int(sol.num_steps)

    def auto():
        sol = gradflow.integrate(by_hand, (V0, a0), t1=t1)
        return np.asarray(sol.params[1]), int(sol.num_steps)

    def auto_centred():
        sol = gradflow.integrate(centred, (V0, a0), t1=t1)
        return np.asarray(sol.params[1]), int(sol.num_steps)

    timed = interleaved_medians({"simulate": sim, "integrate (exact field)": exact, "integrate (autodiff)": auto,
                                 "integrate (autodiff, gradflow.softmax)": auto_centred}, repeats)
    rows = {name: dict(seconds=sec, steps=steps, a_end=a[-1]) for name, (sec, (a, steps)) in timed.items()}
    base = rows["simulate"]
    for r in rows.values():
        r["ratio"] = r["seconds"] / base["seconds"]
    for r in rows.values():  # final logits against simulate's
        r["max_abs_diff_a"] = float(np.max(np.abs(r["a_end"] - base["a_end"])))
    for r in rows.values():
        del r["a_end"]
    return dict(repeats=repeats, t1=t1, rows=rows)


BEGIN = "<!-- integrate vs simulate: begin (benchmarks/integrate_overhead.py) -->"
END = "<!-- integrate vs simulate: end -->"


def section(res: dict, note: str = "") -> str:
    """The ``RESULTS.md`` section (between markers, so that it can be replaced in place)."""
    return (f"{BEGIN}\n## `integrate` vs `simulate` on the Fig. 2 problem\n\n{note}{markdown(res)}\n\n"
            "`integrate (exact field)` is the same solve as `simulate` through the generic front end (its "
            "checks, quadrature and observables); the autodiff rows are a user's loss written by hand.\n"
            f"{END}\n")


def insert(md: str, text: str, before: str = "\n## Stiff flows") -> str:
    """``md`` with its section replaced by ``text`` (inserted before ``before`` if absent)."""
    return put_section(md, text, BEGIN, END, md.find(before))


def markdown(res: dict) -> str:
    lines = [f"Fig. 2 problem, t1 = {res['t1']:g}, rtol 1e-8, warm, median of {res['repeats']} interleaved calls", "",
             "| call | ms | × simulate | steps | max abs diff of a(t1) vs simulate |", "|---|---|---|---|---|"]
    for name, r in res["rows"].items():
        lines.append(f"| {name} | {1e3 * r['seconds']:.2f} | {r['ratio']:.2f} | {r['steps']} | {r['max_abs_diff_a']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--into", metavar="RESULTS.md", help="also write the table into this report (replacing an "
                        "earlier one) and the numbers into the JSON beside it, key 'integrate'")
    args = parser.parse_args(argv)
    res = run(args.repeats)
    print(markdown(res))
    if args.into:
        import datetime
        import json
        import os

        from gradflow.io import atomic_write

        load = os.getloadavg()[0]
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        note = (f"Measured by `python -m benchmarks.integrate_overhead --into` ({when}, load average {load:.1f}; "
                "not the run of the rest of this file: read the ratios).\n\n")
        with open(args.into) as fh:
            text = insert(fh.read(), section(res, note))
        atomic_write(args.into, lambda f: f.write(text.encode()))
        path = os.path.splitext(args.into)[0] + ".json"
        with open(path) as fh:
            data = json.load(fh)
        data["integrate"] = dict(res, measured=when, load=load)
        atomic_write(path, lambda f: f.write(json.dumps(data, indent=1, default=str).encode()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
