"""The ``gradflow`` command line (thin: parse, call, print).

Bad arguments print one line (``gradflow: error: …``) and exit with status 2. Every command
uses JAX's persistent compilation cache (:mod:`gradflow._cache`: ``$GRADFLOW_CACHE_DIR``,
default ``~/.cache/gradflow/jax``) unless ``--no-cache`` or ``GRADFLOW_NO_CACHE=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time

from gradflow import GradflowValueError
from gradflow.internal import DEFAULTS, ArgumentParser as _Parser, release_executables, usable_cores

from ._jobs import PieceFailed as _PieceFailed, default_jobs as _default_jobs

DEFAULT_OUT = os.path.join("out", "figures")
"""Where ``figures`` and ``reproduce`` write by default: git-ignored, so a run never dirties a clone.
The committed gallery ``figures/`` is rebuilt only on purpose (``--out figures``)."""
QUICK_TRIALS = 4  # trials per check for `reproduce --quick`


def _progress(args) -> bool:
    """Progress bars only on a terminal (a log file or pipe gets none) and never with ``--no-progress``."""
    return not args.no_progress and sys.stderr.isatty()


def _cmd_figures(args) -> int:
    from gradflow.sims.registry import figure_ids, get_figure

    if args.list:
        for fig_id in figure_ids():
            print(f"{fig_id:20s} {get_figure(fig_id).title}")
        return 0
    _validate_out(args.out)  # before any figure is computed
    ids = list(dict.fromkeys(args.ids or figure_ids()))  # an id given twice is built once
    for fig_id in ids:  # validate all ids before building any
        get_figure(fig_id)
    pieces = _figure_pieces(args, ids)
    if _jobs(args, len(pieces)) == 1:
        return _build_figures(ids, _figure_settings(args, ids), _progress(args))
    try:
        for _ in _in_parallel(args, pieces):
            pass
    except _PieceFailed as err:
        return _report_failures(err, pieces)
    return 0


def _figure_pieces(args, ids) -> list:
    """The figures as independent pieces (:func:`gradflow.sims.registry.figure_groups`), each a
    ``(_build_figures, args)`` for a worker; the piece of the Sec. 4 figures, whose paper scale
    trains for days, keeps its progress bars (on a terminal); the others print their lines only."""
    from gradflow.sims.registry import SHARED_RUNS, FIGURES, figure_groups

    return [(_build_figures, (group, _figure_settings(args, group),
                              _progress(args) and FIGURES[group[0]].startswith(SHARED_RUNS)))
            for group in figure_groups(ids)]


def _figure_settings(args, ids) -> dict:
    """What :func:`_build_figures` needs of the command's arguments (picklable, for a worker)."""
    from gradflow.sims.registry import get_figure

    # reproduce: figures whose paper scale takes hours stay quick unless --paper-scale
    quick = {fig_id: bool(args.quick or (getattr(args, "paper_scale", True) is False and get_figure(fig_id).long_paper_scale))
             for fig_id in ids}
    return dict(out=args.out, quick=quick, force=args.force, verbose=args.verbose)


def _build_figures(ids, settings: dict, progress: bool) -> int:
    """Build ``ids`` in order into ``settings["out"]``, one line each (the whole of a serial run, or
    one piece of a parallel one: :func:`_in_parallel`). Each figure's output is one write, so
    lines of workers building side by side do not interleave."""
    from gradflow.sims.build import build

    for fig_id in ids:
        start = time.perf_counter()
        record = build(fig_id, settings["out"], quick=settings["quick"][fig_id], force=settings["force"], progress=progress)
        release_executables()
        how = "re-plotted from cache" if record["cached"] else _how_computed(record.get("summary", {}).get("runs"))
        text = f"{fig_id}: {how} in {time.perf_counter() - start:.1f} s -> {os.path.join(settings['out'], fig_id)}.png\n"
        if settings["verbose"]:
            text += json.dumps(record["summary"], indent=2) + "\n"
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _jobs(args, pieces: int) -> int:
    """Worker processes for ``pieces`` independent pieces: ``--jobs`` (default
    :func:`gradflow.app._jobs.default_jobs`), at most one per piece; 1 means this process alone, and
    so do figures registered at run time (a worker, a fresh interpreter, would not know them)."""
    from gradflow.sims.registry import FIGURES, STOCK_FIGURES

    if FIGURES != STOCK_FIGURES:
        return 1
    return max(1, min(args.jobs or _default_jobs(), pieces))


def _in_parallel(args, pieces):
    """:func:`gradflow.app._jobs.run_pieces` with the command's ``--jobs`` and cache setting."""
    from ._jobs import run_pieces

    return run_pieces(pieces, _jobs(args, len(pieces)), use_cache=not getattr(args, "no_cache", False))


def _report_failures(err, pieces) -> int:
    """One ``gradflow: error:`` line per failed piece (naming its figures or the checks), then
    their tracebacks; returns exit status 1."""
    for index, why in sorted(err.failures.items()):
        fn, piece_args = pieces[index]
        what = "the checks" if fn is _run_all_checks else "figure(s) " + ", ".join(piece_args[0])
        first, _, rest = why.partition("\n")
        print(f"gradflow: error: {what} failed: {first}", file=sys.stderr)
        if rest.strip():
            print(rest.rstrip(), file=sys.stderr)
    return 1


def _how_computed(runs) -> str:
    """How a figure's data was made: ``computed``, or for a figure of trained runs (the Sec. 4
    figures' ``runs`` summary) ``loaded N runs from FOLDER`` / ``trained N runs into FOLDER``."""
    if not runs:
        return "computed"
    parts = []
    for how, prep in (("loaded", "from"), ("trained", "into")):
        folders: dict[str, int] = {}
        for r in runs:
            if r.get("how") == how:
                folder = os.path.dirname(r.get("path") or "")
                folders[folder] = folders.get(folder, 0) + 1
        parts += [f"{how} {n} run{'s' if n != 1 else ''} {prep} {folder}" for folder, n in folders.items()]
    return "; ".join(parts) or "computed"


def _grid(kind, name):
    def parse(text):
        try:
            values = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a comma-separated list of {kind.__name__} values") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{name}: give at least one value")
        return values

    return parse


def _seeds(text):
    try:
        lo, hi = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds: {text!r} is not START:STOP (e.g. 0:1024)") from None
    return lo, hi


def _init_distributed(args) -> bool:
    """Join JAX's multi-controller runtime when asked (before any JAX computation); returns
    whether this is a multi-process run."""
    explicit = (args.coordinator, args.num_processes, args.process_id)
    if all(v is None for v in explicit) and not args.distributed:
        return False
    if any(v is None for v in explicit) and not all(v is None for v in explicit):
        raise GradflowValueError("--coordinator, --num-processes, --process-id: got only some of them; expected all "
                                 "three, or none (with --distributed: detected from the cluster launcher's environment)")
    if args.process_id is not None and args.process_id >= args.num_processes:
        raise GradflowValueError(f"--process-id: got {args.process_id}; expected an integer in [0, {args.num_processes})")
    import jax

    jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, initialization_timeout=args.init_timeout,
                               **({} if args.peer_timeout is None else dict(heartbeat_timeout_seconds=args.peer_timeout,
                                                                            shutdown_timeout_seconds=args.peer_timeout)))
    return True


def _cpu_devices(n: int | None, distributed: bool) -> None:
    """Give JAX ``n`` CPU devices (default: one per usable core; ``1`` under ``jax.distributed``,
    where each process already has its share), so a batch's lanes, which are sharded over the
    devices, run on every core instead of one. Before any JAX computation; the user's own
    ``JAX_NUM_CPU_DEVICES`` or ``XLA_FLAGS=--xla_force_host_platform_device_count`` wins, and a
    JAX backend already running (a caller in the same process) is left as it is, with a warning
    if ``n`` was asked for."""
    if n is None and distributed:
        return
    if "JAX_NUM_CPU_DEVICES" in os.environ or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", usable_cores() if n is None else n)
    except RuntimeError:  # backends already initialised by the calling process
        if n is not None:
            print(f"gradflow: warning: --cpu-devices {n} ignored: JAX is already running with "
                  f"{len(jax.devices('cpu'))} CPU device(s) in this process", file=sys.stderr)


def _cmd_sweep(args) -> int:
    from gradflow.attention.sweep import SweepSpec, load_sweep, run_sweep

    _validate_out(args.out, "OUT")
    _cpu_devices(args.cpu_devices, distributed=args.distributed or args.coordinator is not None)
    distributed = _init_distributed(args)  # before anything starts a JAX backend
    spec = SweepSpec(
        seed_start=args.seeds[0], seed_stop=args.seeds[1], chunk=args.chunk, lanes=args.lanes, loss=args.loss, n=args.n,
        normalization=args.normalization, t1=args.t1, rtol=args.rtol, init_scale=args.init_scale,
        points=args.points, solver=args.solver, max_steps=args.max_steps,
    )
    import jax

    index, count = (jax.process_index(), jax.process_count()) if distributed else (0, 1)
    start = time.perf_counter()
    res = run_sweep(spec, args.out, progress=_progress(args), process_index=index, process_count=count,
                    devices=jax.local_devices())
    who = f"process {index}/{count}: " if distributed else ""
    print(f"sweep: {who}{len(res['computed'])} chunks computed, {len(res['skipped'])} already done, "
          f"{len(spec.configs)} configs x {spec.seed_stop - spec.seed_start} seeds in {time.perf_counter() - start:.1f} s "
          f"on {len(jax.local_devices())} {jax.default_backend().upper()} device(s) "
          f"-> {args.out} (read it with xarray.open_zarr)")
    if not distributed:
        return 0
    try:  # a barrier: every process has written its chunks
        jax.distributed.shutdown()
    except Exception as err:  # noqa: BLE001 - a peer that died: its chunks are left for a rerun
        print(f"gradflow: warning: distributed shutdown failed ({err}); rerun to complete the store", file=sys.stderr)
    done = load_sweep(args.out)["done"].values
    if index == 0:
        print(f"sweep: store {'complete' if done.all() else 'INCOMPLETE'}: {int(done.sum())} of {done.size} runs written")
    return 0 if done.all() else 1


STATEMENT_WIDTH = 60  # the statement column wraps at this width (never cut)


def _print_check_table(results) -> None:
    """One row per check; a statement longer than :data:`STATEMENT_WIDTH` wraps onto
    continuation lines of its own column (``textwrap``), so nothing is cut off."""
    rows = [(["id"], ["statement"], ["trials"], ["holds"], ["worst margin"], ["control"])]
    for r in results:
        rows.append(([r.id], textwrap.wrap(r.statement, STATEMENT_WIDTH) or [""], [str(r.trials)],
                     ["yes" if r.holds else ("no (exploratory)" if _exploratory(r.id) else "NO")],
                     [f"{r.worst_margin:.3g}"],
                     ["holds (DEFECT)" if r.control_holds else "fails"]))
    widths = [max(len(line) for row in rows for line in row[i]) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        for k in range(max(len(cell) for cell in row)):
            cells = [cell[k] if k < len(cell) else "" for cell in row]
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
    sys.stdout.write("\n".join(lines) + "\n")  # one write: workers' lines do not cut into it
    sys.stdout.flush()


def _exploratory(check_id: str) -> bool:
    from gradflow.theory import EXPLORATORY

    return check_id in EXPLORATORY


def _passed(results, named: bool = False) -> bool:
    """Every check holds with a failing control; an exploratory check (an open question beyond the
    paper, :data:`gradflow.theory.EXPLORATORY`) counts only when ``named`` on the command line."""
    return all((r.holds and not r.control_holds) or (not named and _exploratory(r.id) and not r.control_holds)
               for r in results)


def _check_progress(total: int):
    """An ``on_result`` callback for :func:`gradflow.theory.run_checks`: one line on stderr per
    finished check, with its wall time (lines, not a bar: readable in a log file too)."""
    done = [0]

    def report(result, seconds: float) -> None:
        done[0] += 1
        verdict = "holds" if result.holds and not result.control_holds else (
            ("does not hold (exploratory: an open question, reported)" if _exploratory(result.id) else "FAILS")
            if not result.holds else "holds, but its control holds too (DEFECT)")
        print(f"gradflow: check {done[0]}/{total} {result.id}: {verdict} ({seconds:.1f} s)", file=sys.stderr, flush=True)

    return report


def _validate_out(path: str, what: str = "--out") -> None:
    """Refuse an output folder that cannot be one, before any work starts: an existing file, or a
    path whose nearest existing ancestor is a file or is not writable.

    Raises:
        GradflowValueError: naming the option, the path and what is wrong.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise GradflowValueError(f"{what}: got {path!r}, an existing file; expected a folder (created if missing)")
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise GradflowValueError(f"{what}: got {path!r}; {probe!r} is a file, so the folder cannot be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise GradflowValueError(f"{what}: got {path!r}; {probe!r} is not writable")


def _check_statement(check_id: str) -> str:
    """The statement a check tests, from its module's ``STATEMENTS`` table ("" if it has none)."""
    import importlib

    from gradflow.theory import get_check

    module = importlib.import_module(get_check(check_id).__module__)
    return str(getattr(module, "STATEMENTS", {}).get(check_id, ""))


def _cmd_check(args) -> int:
    from gradflow.theory import canonical_id, check_ids, get_check, run_checks

    args.ids = [canonical_id(cid) for cid in args.ids]  # a deprecated id: a DeprecationWarning, then the new id
    if args.list:
        ids = args.ids or check_ids()
        for cid in ids:
            get_check(cid)
        width = max(len(cid) for cid in ids)
        for cid in ids:
            print(f"{cid:{width}s}  {_check_statement(cid)}".rstrip())
        return 0
    for cid in args.ids:  # unknown id: one-line error, exit 2 (before any computation)
        get_check(cid)
    results = run_checks(args.ids or None, trials=args.trials, seed=args.seed,
                         on_result=_check_progress(len(args.ids or check_ids())))
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
    else:
        _print_check_table(results)
    return 0 if _passed(results, named=bool(args.ids)) else 1


def _cmd_reproduce(args) -> int:
    from gradflow.sims.registry import figure_groups, figure_ids
    from gradflow.theory import DEFAULT_TRIALS

    _validate_out(args.out)  # before the checks: a bad --out must not cost their minutes
    trials = QUICK_TRIALS if args.quick else DEFAULT_TRIALS
    args.ids, args.list = [], False
    results, status = None, 0
    if _jobs(args, 1 + len(figure_groups(figure_ids()))) == 1:
        results = _run_all_checks(trials)
        _print_check_table(results)
        status = _cmd_figures(args)
    else:  # the checks (one piece: they share cached experiments) beside the figures
        pieces = [(_run_all_checks, (trials,))] + _figure_pieces(args, figure_ids())
        try:
            for index, result in _in_parallel(args, pieces):
                if index == 0:  # the table as soon as the checks are done, as one write
                    results = result
                    _print_check_table(results)
        except _PieceFailed as err:
            status = _report_failures(err, pieces)
        if results is None:
            return status
    checks_ok = _passed(results)
    n_ok = sum(r.holds and not r.control_holds for r in results)
    open_ = [r.id for r in results if _exploratory(r.id) and not r.holds]
    note = f" ({', '.join(open_)}: exploratory, does not hold; not counted)" if open_ else ""
    print(f"reproduce: {n_ok}/{len(results)} checks hold with failing controls{note}; figures in {args.out}/")
    return status if status else (0 if checks_ok else 1)


def _run_all_checks(trials: int) -> list:
    """Every check in registry order with its progress lines (``reproduce``'s checks, in this
    process or as a worker's piece), then the checks' compiled programs released."""
    from gradflow.theory import check_ids, run_checks

    results = run_checks(None, trials=trials, seed=0, on_result=_check_progress(len(check_ids())))
    release_executables()
    return results


def _count(name: str, minimum: int):
    """An argparse ``type`` for an integer ``≥ minimum`` with gradflow's message wording."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"got {text!r}; expected an integer ≥ {minimum}")
        return value

    parse.__name__ = name
    return parse


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--no-cache", action="store_true", default=argparse.SUPPRESS,
                        help="do not use the persistent compilation cache ($GRADFLOW_CACHE_DIR, default ~/.cache/gradflow/jax)")
    p = _Parser(prog="gradflow", description="Gradient-flow dynamics of softmax attention.", parents=[common])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add(name, **kw):
        return sub.add_parser(name, parents=[common], **kw)

    def figure_opts(sp):
        sp.add_argument("--quick", action="store_true", help="shorter horizons/iterations (CI scale)")
        sp.add_argument("--force", action="store_true", help="recompute even if cached data matches the config")
        sp.add_argument("--out", default=DEFAULT_OUT,
                        help=f"output folder (default: {DEFAULT_OUT}/, git-ignored; "
                             "--out figures rebuilds the committed gallery)")
        sp.add_argument("--no-progress", action="store_true",
                        help="hide progress bars (they are shown only when stderr is a terminal, and with --jobs "
                             "above 1 only for the Sec. 4 figures' training)")
        sp.add_argument("-v", "--verbose", action="store_true", help="print each figure's measured summary (JSON)")
        sp.add_argument("--jobs", type=_count("jobs", 1), default=None,
                        help="worker processes building independent pieces side by side (default: the usable "
                             f"cores, at most 8 and at most one per 3 GiB available: {_default_jobs()} here; 1: "
                             "everything in this process, in order); figures that share trained runs stay in one piece")

    f = add("figures", help="build figures: ID.png, ID.pdf, ID.npz, ID.json per id",
            description="Build figures into --out (default out/figures/). Paper scale unless --quick; the five "
                        "Sec. 4 transformer ids at paper scale train the sink and flip grids (11 kernels; 12-140 min "
                        "per induction run on 2 cores, by the load, days for the whole grid; resumable, committed runs reused), "
                        "--quick trains 3 induction and 6 group models (about 6 min). An unchanged config re-plots from the cached ID.npz.")
    f.add_argument("ids", nargs="*", help="figure ids (default: all; see --list)")
    f.add_argument("--list", action="store_true", help="list the figure ids and exit")
    figure_opts(f)
    f.set_defaults(func=_cmd_figures)

    c = add("check", help="run the paper's theorems (Thms 3.2, 3.3, Lemma 3.5, ...) as checks with negative controls",
            description="Each check runs a random experiment within the theorem's assumptions and a negative "
                        "control where the statement must fail. Exit 0 when every check holds and every control "
                        "fails, 1 otherwise; an exploratory check (an open question beyond the paper: "
                        "mm.kq-nuclear) counts only when named.")
    c.add_argument("ids", nargs="*", help="check ids (default: all; see --list)")
    c.add_argument("--list", action="store_true", help="list the check ids with the statement each tests, and exit")
    c.add_argument("--trials", type=_count("trials", 1), default=16, help="random trials per check (default: 16)")
    c.add_argument("--seed", type=_count("seed", 0), default=0, help="base seed (default: 0)")
    c.add_argument("--json", action="store_true", help="print a JSON list of results instead of a table")
    c.set_defaults(func=_cmd_check)

    r = add(
        "reproduce",
        help=f"the main job: run the checks and build every figure into {DEFAULT_OUT}/ "
             "(its measured time: docs/getting-started.md)",
        description="Run every theorem check and build every figure, side by side in --jobs worker processes "
                    "(with --jobs 1: the checks, then the figures, in this process): paper scale, except the five "
                    "Sec. 4 transformer figures and flow-sinks, which are built in quick mode unless --paper-scale; "
                    "--quick makes everything CI scale (fewer trials, shorter horizons). One progress line per check "
                    "and per figure as it finishes, the check table once the checks are done; --out is checked before "
                    "any work starts. A piece that fails is named (exit 1) while the others run to their end; a killed "
                    "run resumes from the finished figures; its measured time is in docs/getting-started.md.",
    )
    figure_opts(r)
    r.add_argument("--paper-scale", action="store_true",
                   help="build the Sec. 4 transformer figures at paper scale (the sink and flip grids of 11 "
                        "kernels: days on 2 CPU cores; resumable, committed runs reused) and flow-sinks at gallery "
                        "scale (about 20 min) instead of quick mode (3 induction and 6 group models, about 6 min; "
                        "flow-sinks about 4 min)")
    r.set_defaults(func=_cmd_reproduce)

    w = add(
        "sweep",
        help="seeds x configs grid into one zarr store (xarray.open_zarr reads it); resumable",
        description="Comma-separated values of --loss, --n, --normalization, --t1, --rtol, --init-scale form a grid; "
                    "every seed of every configuration is one run (V0 = init_scale*randn, a0 = 0, a random unit "
                    "teacher, as in the paper's Fig. 2). One zarr chunk per chunk of seeds, solved as simulate_batch "
                    "calls of --lanes seeds (a seed's numbers do not depend on --chunk, the devices or the processes); "
                    "a rerun computes only the chunks not yet written. Dims: seed, loss_fn, n, normalization, t1, "
                    "rtol, init_scale, t, dim, token.",
    )
    w.add_argument("out", help="the zarr store (a folder) to create, or to resume")
    w.add_argument("--seeds", type=_seeds, default=(0, 64), help="START:STOP (default 0:64)")
    w.add_argument("--chunk", type=int, default=64, help="seeds per chunk: one zarr chunk (default 64)")
    w.add_argument("--lanes", type=int, default=16,
                   help="seeds per solve: a chunk is solved in groups of this many seeds, one device each, the last "
                        "group padded (default 16; a chunk a multiple of it wastes nothing). A seed's numbers depend "
                        "on it, not on --chunk, the processes or the devices")
    w.add_argument("--loss", type=_grid(str, "--loss"), default=("logistic",), help="logistic,square (default logistic)")
    w.add_argument("--n", type=_grid(int, "--n"), default=(8,), help="sizes n = d (default 8)")
    w.add_argument("--normalization", type=_grid(str, "--normalization"), default=("softmax",), help="maps (default softmax)")
    w.add_argument("--t1", type=_grid(float, "--t1"), default=(1e12,), help="flow horizons (default 1e12)")
    w.add_argument("--rtol", type=_grid(float, "--rtol"), default=(1e-8,), help="tolerances, atol = rtol/100 (default 1e-8)")
    w.add_argument("--init-scale", type=_grid(float, "--init-scale"), default=(0.1,), help="V0 = scale*randn (default 0.1)")
    w.add_argument("--points", type=int, default=50, help="save points per run (default 50)")
    w.add_argument("--solver", default="auto", help="solver (default auto)")
    w.add_argument("--max-steps", type=int, default=DEFAULTS.max_steps,
                   help=f"step budget per run (default {DEFAULTS.max_steps})")
    w.add_argument("--cpu-devices", type=_count("cpu-devices", 1), default=None,
                   help="JAX CPU devices the lanes are spread over, one core each (default: the usable cores, "
                        f"{usable_cores()} here; 1 under jax.distributed); JAX_NUM_CPU_DEVICES or XLA_FLAGS' host "
                        "device count, if set, win")
    w.add_argument("--no-progress", action="store_true", help="hide the progress bar (shown only on a terminal)")
    d = w.add_argument_group(
        "across processes/hosts (jax.distributed)",
        "Start the same command once per process; each solves its share of the chunks on its own devices and "
        "writes its regions of the one store (a shared file system for OUT). A rerun completes what is missing.")
    d.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0's coordination service")
    d.add_argument("--num-processes", type=_count("num-processes", 1), help="number of processes")
    d.add_argument("--process-id", type=_count("process-id", 0), help="this process's index in [0, N)")
    d.add_argument("--distributed", action="store_true",
                   help="join jax.distributed with the settings a cluster launcher (SLURM, Open MPI, ...) exports")
    d.add_argument("--init-timeout", type=_count("init-timeout", 1), default=300,
                   help="seconds to wait for every process to join (default 300)")
    d.add_argument("--peer-timeout", type=_count("peer-timeout", 1), default=None,
                   help="seconds after which a silent process counts as dead, and the most the final barrier waits "
                        "for the others (default: JAX's, 100 and 300); a process that then finds the store "
                        "incomplete exits 1")
    w.set_defaults(func=_cmd_sweep)
    return p


def _own_process() -> None:
    """What the ``gradflow`` command does to its own process, and ``import gradflow`` does not.

    - From a source checkout run without an install (``PYTHONPATH`` = the repository root), it
      maps ``gradflow.theory`` / ``gradflow.sims`` onto the folders ``theory/`` and ``sims/``
      (an install, editable or not, needs nothing: ``pyproject.toml``'s ``package-dir``).
    - It moves the objects alive after start-up (jax, diffrax, gradflow: ~130,000) out of the
      cyclic garbage collector's reach with :func:`gc.freeze`, so full collections and the one at
      exit do not traverse them again (docs/performance.md, "Compilation cache and cold start"). ``GRADFLOW_GC_FREEZE=0``
      turns this off."""
    import gc

    from gradflow.internal import install_source_finder

    import gradflow

    install_source_finder(gradflow.__path__[0])
    if os.environ.get("GRADFLOW_GC_FREEZE", "1") != "0":
        gc.freeze()


def main(argv: list[str] | None = None) -> int:
    """The ``gradflow`` command: parse ``argv`` (``None``: ``sys.argv[1:]``), run the command,
    return its exit status (0 success, 1 a failed check or piece, 2 bad arguments or an
    unwritable output, 130 interrupted).

    Called as the command (``argv`` ``None``) it also prepares its own process
    (:func:`_own_process`); a call with an explicit ``argv`` (tests, scripts) leaves the caller's
    process as it was."""
    if argv is None:
        _own_process()
    args = _parser().parse_args(argv)
    if not getattr(args, "no_cache", False):
        from gradflow import enable_compilation_cache

        try:
            enable_compilation_cache()
        except OSError as err:  # an unwritable cache folder costs speed, not the run
            print(f"gradflow: warning: compilation cache off ({err.strerror or err}: {err.filename or ''})", file=sys.stderr)
    try:
        return args.func(args)
    except GradflowValueError as err:
        print(f"gradflow: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # e.g. an --out folder that cannot be created or written
        print(f"gradflow: error: {err.strerror or err}: {err.filename or ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # finished figures are kept; a rerun resumes from them
        print("gradflow: interrupted (finished outputs are kept; rerun to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
