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
