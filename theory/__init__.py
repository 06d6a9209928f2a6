"""theory: every theorem and claim of the paper (Thms 3.2, 3.3, Lemmas 3.5, D.2, Eqs. 2–5, Figs. 3/12, Sec. 4.1; docs: Theorem checks) as a check that can fail.

Each check has (1) functions that evaluate its statement on given trajectories and return a
:class:`Verdict` (``holds``, signed ``worst_margin``), and (2) a default experiment — random
draws over seeds (vmapped with :func:`gradflow.simulate_batch`), sizes and scales within the
theorem's assumptions — plus a negative control where the statement must fail, both run by
:func:`run_check` and reported as a :class:`CheckResult`.

>>> from gradflow import theory
>>> theory.check_ids()[:3]
['thm3.2a', 'thm3.2b', 'thm3.3a']
"""

if __name__ == "theory":  # the folder imported under its own name: a second copy of every module
    raise ImportError("import gradflow.theory, not theory: the folder theory/ is installed (and mapped "
                      "in a source checkout) as the subpackage gradflow.theory")


from ._result import CheckResult, Verdict
from .empirical import normalization_verdict, sink_verdict
from . import invariants, polarisation
from .maxmargin import att_svm, att_svm_nuclear, direction_verdict, nuclear_verdict, regpath_verdict
from .invariants import output_response, output_response_along, sum_a_conserved, v_perp_frozen
from .ordering import order_preserved, repulsion
from .polarisation import asymptotic_fits, gamma_log_growth, loss_vanishes, ratio_bound
from .registry import (CHECKS, DEFAULT_TRIALS, DEPRECATED_IDS, EXPLORATORY, canonical_id, check_ids, get_check, run_check,
                       run_checks)
from .replicator import replicator_agrees
from .square import conditioning_trend, partial_polarisation, rank_one

__all__ = [
    "CHECKS",
    "CheckResult",
    "DEFAULT_TRIALS",
    "DEPRECATED_IDS",
    "EXPLORATORY",
    "Verdict",
    "asymptotic_fits",
    "att_svm",
    "att_svm_nuclear",
    "canonical_id",
    "check_ids",
    "conditioning_trend",
    "direction_verdict",
    "gamma_log_growth",
    "get_check",
    "loss_vanishes",
    "normalization_verdict",
    "nuclear_verdict",
    "order_preserved",
    "output_response",
    "output_response_along",
    "partial_polarisation",
    "rank_one",
    "ratio_bound",
    "regpath_verdict",
    "repulsion",
    "replicator_agrees",
    "run_check",
    "run_checks",
    "sink_verdict",
    "sum_a_conserved",
    "v_perp_frozen",
]


def __getattr__(name):
    if name == "normalisation_verdict":  # deprecated spelling (the keyword everywhere is normalization=)
        import warnings

        warnings.warn("gradflow.theory.normalisation_verdict is deprecated; use normalization_verdict",
                      DeprecationWarning, stacklevel=2)
        return normalization_verdict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
