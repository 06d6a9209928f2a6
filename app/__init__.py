"""gradflow.app: the ``gradflow`` command (:mod:`gradflow.app.cli`) and its worker processes
(:mod:`gradflow.app._jobs`). The top layer: it imports the library (``gradflow``), the paper's
model (``gradflow.attention``), the checks (``gradflow.theory``) and the figures
(``gradflow.sims``); nothing imports it."""

if __name__ == "app":  # the folder imported under its own name: a second copy of every module
    raise ImportError("import gradflow.app, not app: the folder app/ is installed (and mapped "
                      "in a source checkout) as the subpackage gradflow.app")
