import os

# The test process never reads or writes JAX's persistent compilation cache: in-process calls
# of the CLI would otherwise turn it on in the user's cache folder for every later test, and a
# full CI run once died in a segmentation fault while deserialising an executable from it. The
# one test of the cache runs its own subprocesses (with a folder of their own).
os.environ["GRADFLOW_NO_CACHE"] = "1"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
# Start the backend now: an in-process `gradflow sweep` run before any other JAX computation would
# otherwise give JAX one CPU device per core for the rest of the run, and the tests' results
# (some compared bit for bit) assume JAX's single device, also where the environment asks for more
# (JAX_NUM_CPU_DEVICES, XLA_FLAGS' host device count). Subprocesses choose their own devices.
jax.config.update("jax_num_cpu_devices", 1)
jax.devices()

import matplotlib  # noqa: E402

matplotlib.use("Agg")


import pytest  # noqa: E402

import gradflow  # noqa: E402
from gradflow._cache import release_executables  # noqa: E402
from gradflow._layout import install_source_finder  # noqa: E402

# gradflow.theory / gradflow.sims from the checkout under test also when it is run with
# PYTHONPATH = its root and another checkout is installed (a git worktree beside the installed one)
install_source_finder(gradflow.__path__[0])


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_executables():
    """After each test module, drop JAX's compiled executables once the process holds many memory
    mappings (each CPU executable holds some; one module leaves ~5,000): a full run in one process
    passed Linux's default limit of 65,530 and XLA's next compilation aborted."""
    yield
    release_executables()


@pytest.fixture(autouse=True)
def _annotation_checks_off_for_bad_input(request):
    """The test run checks every annotated call in gradflow against its annotations (jaxtyping +
    beartype, ``--jaxtyping-packages`` in pyproject.toml). A test marked ``bad_input`` checks what a
    *user* gets for an argument outside a function's annotation — the library's own
    :class:`gradflow.GradflowValueError` naming it — so it runs as a user's program does, without
    that checker (which would report the argument first, as a TypeCheckError)."""
    if request.node.get_closest_marker("bad_input") is None:
        yield
        return
    import jaxtyping

    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
