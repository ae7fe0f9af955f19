"""Float32 matmul precision (``train.matmul_precision``) in one place.

Why a function: the setting has two halves in PyTorch, the matmul precision of
``torch.set_float32_matmul_precision`` (TF32 or bf16 passes for float32 matmuls on
tensor-core GPUs) and cuDNN's own TF32 switch for convolutions, which that call leaves
alone. Setting both from one name keeps a run's numerics a function of its config.
On the CPU both are no-ops for the kernels used here, so CPU numbers never change.
"""

from __future__ import annotations

import torch

from benchmark.errors import ConfigError

MATMUL_PRECISIONS = ("highest", "high", "medium")


def apply_matmul_precision(name: str) -> None:
    """Set float32 matmul precision ``name`` (highest = full fp32, high = TF32 allowed,
    medium = bf16 passes allowed) and cuDNN's TF32 convolutions to match (off at highest)."""
    if name not in MATMUL_PRECISIONS:
        raise ConfigError(f"matmul precision must be one of {', '.join(MATMUL_PRECISIONS)}, got '{name}'")
    torch.set_float32_matmul_precision(name)
    torch.backends.cudnn.allow_tf32 = name != "highest"
