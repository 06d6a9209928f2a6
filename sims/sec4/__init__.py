"""Sec. 4 of the paper in JAX, as the authors' code (``tml-epfl/softmax``) runs it: attention
kernels (Table 1), the induction and group tasks, a small transformer (equinox) trained with
optax AdamW, and the measurements (BOS share and sink heads, induction accuracy, the one-token
flip attack, per-head sparsity)."""

from gradflow.sims.sec4.kernels import KERNELS, kernel_weights
from gradflow.sims.sec4.model import Transformer, init_transformer
from gradflow.sims.sec4.tasks import group_batch, induction_batch
from gradflow.sims.sec4.train import (RunConfig, bos_share, flip_attack, group_config, induction_config, load_result, measure, run,
                    train)

__all__ = ["KERNELS", "kernel_weights", "Transformer", "init_transformer", "group_batch", "induction_batch",
           "RunConfig", "induction_config", "group_config", "load_result", "measure", "run", "train", "bos_share",
           "flip_attack"]
