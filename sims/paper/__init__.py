"""The paper's figures: Fig. 2 (logistic teacher), Figs. 3/12 (conditioning), the appendix's
normalisation maps, massive activations and soft-target cross-entropy (``gradflow figures``)."""
