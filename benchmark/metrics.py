"""Metric functions with input validation (the OGB Evaluator idea): a wrong shape or dtype
is an error, never a silently wrong number."""

from __future__ import annotations

import torch
from torch import Tensor

from benchmark.registry import METRICS


def _check_labels(pred: Tensor, target: Tensor) -> None:
    if pred.shape != target.shape or pred.dim() != 1:
        raise ValueError(f"pred and target must be 1-D of equal length, got {tuple(pred.shape)} and {tuple(target.shape)}")
    if pred.dtype.is_floating_point or target.dtype.is_floating_point:
        raise ValueError("pred and target must be integer class ids")


@METRICS.register("accuracy")
def accuracy(pred: Tensor, target: Tensor) -> float:
    """Fraction of correct class predictions."""
    _check_labels(pred, target)
    if target.numel() == 0:
        return float("nan")
    return float((pred == target).float().mean())


@METRICS.register("macro_f1")
def macro_f1(pred: Tensor, target: Tensor, num_classes: int | None = None) -> float:
    """Unweighted mean of per-class F1 over the classes present in target or pred."""
    _check_labels(pred, target)
    if target.numel() == 0:
        return float("nan")
    k = int(num_classes or int(max(pred.max(), target.max())) + 1)
    idx = target * k + pred
    conf = torch.bincount(idx, minlength=k * k).reshape(k, k).double()
    tp = conf.diag()
    support = conf.sum(1)
    predicted = conf.sum(0)
    present = (support + predicted) > 0
    f1 = torch.where(present, 2 * tp / (support + predicted).clamp_min(1), torch.zeros_like(tp))
    return float(f1[present].mean())


def weighted_mean(values: list[float], weights: list[float]) -> float:
    """Mean of client values weighted by their evaluation-set sizes (NaNs and 0 weights skipped)."""
    pairs = [(v, w) for v, w in zip(values, weights) if w > 0 and v == v]
    total = sum(w for _, w in pairs)
    return float(sum(v * w for v, w in pairs) / total) if total > 0 else float("nan")
