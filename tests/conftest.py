import os

# The test process never reads or writes JAX's persistent compilation cache: in-process calls
# of the CLI would otherwise turn it on in the user's cache folder for every later test, and a
# full CI run once died in a segmentation fault while deserialising an executable from it. The
# one test of the cache runs its own subprocesses (with a folder of their own).
os.environ["GRADFLOW_NO_CACHE"] = "1"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import matplotlib  # noqa: E402

matplotlib.use("Agg")


import pytest  # noqa: E402

from gradflow._cache import release_executables  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_executables():
    """After each test module, drop JAX's compiled executables once the process holds many memory
    mappings (each CPU executable holds some; one module leaves ~5,000): a full run in one process
    passed Linux's default limit of 65,530 and XLA's next compilation aborted."""
    yield
    release_executables()
