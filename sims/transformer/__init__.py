"""Sec. 4 of the paper in JAX: attention kernels (Table 1), the induction and group tasks, a small
decoder-only transformer (equinox) trained with optax AdamW, and the measurements (sink heads,
induction accuracy, one-token flip rate, per-head sparsity). SPEC §7."""

from .kernels import KERNELS, attention_weights
from .model import Transformer, init_transformer
from .tasks import group_batch, induction_batch
from .train import RunConfig, load_result, measure_groups, measure_induction, run, train

__all__ = ["KERNELS", "attention_weights", "Transformer", "init_transformer", "group_batch", "induction_batch",
           "RunConfig", "load_result", "measure_groups", "measure_induction", "run", "train"]
