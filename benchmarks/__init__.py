"""Speed of gradflow against the baselines researchers use instead, measured in one run.

``python -m benchmarks`` writes ``benchmarks/RESULTS.md``; ``python -m benchmarks --quick`` is a
smoke run at small sizes (used by the test suite). See ``benchmarks/__main__.py``.
"""
