"""Speed of gradflow against the baselines researchers use instead, measured in one run.

``python -m benchmarks`` writes ``benchmarks/RESULTS.md``; ``python -m benchmarks --quick`` is a
smoke run at small sizes (used by the test suite). See ``benchmarks/__main__.py``.
"""

import gradflow as _gradflow
from gradflow.internal import install_source_finder as _install_source_finder

# gradflow.theory / gradflow.sims from this checkout also when it is run with PYTHONPATH = its root
# and another checkout is installed (what `gradflow`'s own command does; `import gradflow` does not)
_install_source_finder(_gradflow.__path__[0])
