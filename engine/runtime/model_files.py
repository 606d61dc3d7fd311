"""mlx-lm's model files import the functions they call by name (`from .base
import scaled_dot_product_attention`, `from .activations import swiglu`):
a CPU lane's kernels take them over by rebinding that name in the files
that define a model's classes (attention.py, swiglu.py)."""

from __future__ import annotations

import sys

import mlx.nn as nn


def rebind(model: nn.Module, name: str, theirs, ours) -> int:
    """Point `name` at `ours` in every module defining one of `model`'s
    classes where it is mlx-lm's `theirs`; how many of those files now call
    `ours` (rebound now or before)."""
    count = 0
    for module_name in {type(m).__module__ for _, m in model.named_modules()}:
        module = sys.modules.get(module_name)
        found = getattr(module, name, None)
        if found is theirs:
            setattr(module, name, ours)
        if found in (theirs, ours):
            count += 1
    return count
