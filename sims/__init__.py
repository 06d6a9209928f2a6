"""gradflow.sims: the figures (``gradflow figures``) and the experiments behind them."""

if __name__ == "sims":  # the folder imported under its own name: a second copy of every module
    raise ImportError("import gradflow.sims, not sims: the folder sims/ is installed (and mapped "
                      "in a source checkout) as the subpackage gradflow.sims")
