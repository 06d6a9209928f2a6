"""The ``gradflow`` command line (thin: parse, call, print).

Bad arguments print one line (``gradflow: error: …``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ._errors import GradflowValueError

DEFAULT_OUT = "figures"


def _cmd_figures(args) -> int:
    from sims._registry import build, figure_ids, get_figure

    if args.list:
        for fig_id in figure_ids():
            print(f"{fig_id:16s} {get_figure(fig_id).title}")
        return 0
    ids = args.ids or figure_ids()
    for fig_id in ids:  # validate all ids before building any
        get_figure(fig_id)
    for fig_id in ids:
        start = time.perf_counter()
        record = build(fig_id, args.out, quick=args.quick, force=args.force, progress=not args.no_progress)
        how = "re-plotted from cache" if record["cached"] else "computed"
        print(f"{fig_id}: {how} in {time.perf_counter() - start:.1f} s -> {os.path.join(args.out, fig_id)}.png")
        if args.verbose:
            print(json.dumps(record["summary"], indent=2))
    return 0


def _cmd_reproduce(args) -> int:
    args.ids, args.list, args.verbose = [], False, True
    return _cmd_figures(args)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradflow", description="Gradient-flow dynamics of softmax attention.")
    sub = p.add_subparsers(dest="command", required=True)

    def figure_opts(sp):
        sp.add_argument("--quick", action="store_true", help="shorter horizons/iterations (CI scale)")
        sp.add_argument("--force", action="store_true", help="recompute even if cached data matches the config")
        sp.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT}/)")
        sp.add_argument("--no-progress", action="store_true", help="hide progress bars")

    f = sub.add_parser("figures", help="build figures: ID.png, ID.pdf, ID.npz, ID.json per id")
    f.add_argument("ids", nargs="*", help="figure ids (default: all)")
    f.add_argument("--list", action="store_true", help="list the figure ids and exit")
    f.add_argument("-v", "--verbose", action="store_true", help="print each figure's measured summary")
    figure_opts(f)
    f.set_defaults(func=_cmd_figures)

    r = sub.add_parser("reproduce", help="the main job: build every figure (paper scale unless --quick)")
    figure_opts(r)
    r.set_defaults(func=_cmd_reproduce)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except GradflowValueError as err:
        print(f"gradflow: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
