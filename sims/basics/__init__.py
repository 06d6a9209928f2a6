"""Attention basics: softmax and temperature, 1/sqrt(d_k) scaling, the causal mask, and a toy
coreference model (``gradflow figures``; helpers in :mod:`gradflow.sims.basics.attention_basics`)."""
