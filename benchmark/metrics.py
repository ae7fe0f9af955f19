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


def class_counts(pred: Tensor, target: Tensor, num_classes: int) -> dict[str, float]:
    """Per-class true positives, support and predicted counts (``_tp/c``, ``_sup/c``, ``_pred/c``,
    classes that occur only), from which ``pooled_macro_f1`` computes the F1 over several clients."""
    _check_labels(pred, target)
    k = max(int(num_classes), 1)
    tp = torch.bincount(target[pred == target], minlength=k)
    sup, prd = torch.bincount(target, minlength=k), torch.bincount(pred, minlength=k)
    out: dict[str, float] = {}
    for c in torch.nonzero((sup + prd) > 0).flatten().tolist():
        out[f"_tp/{c}"], out[f"_sup/{c}"], out[f"_pred/{c}"] = float(tp[c]), float(sup[c]), float(prd[c])
    return out


def pooled_macro_f1(counts: list[dict[str, float]]) -> float:
    """Macro-F1 over the union of several clients' predictions (their ``class_counts`` summed):
    the F1 a reader of a pooled test set expects, not a mean of per-client F1."""
    total: dict[str, float] = {}
    for row in counts:
        for k, v in row.items():
            if k.startswith(("_tp/", "_sup/", "_pred/")):
                total[k] = total.get(k, 0.0) + v
    classes = sorted({k.split("/", 1)[1] for k in total}, key=int)
    if not classes:
        return float("nan")
    f1 = []
    for c in classes:
        denom = total.get(f"_sup/{c}", 0.0) + total.get(f"_pred/{c}", 0.0)
        f1.append(2 * total.get(f"_tp/{c}", 0.0) / denom if denom > 0 else 0.0)
    return float(sum(f1) / len(f1))


def prediction_spread(pred: Tensor) -> float:
    """Share of predictions that differ from the most common one (0: one class for all; NaN:
    none): the ``spread`` of a classification task."""
    if pred.numel() == 0:
        return float("nan")
    return float(1.0 - torch.bincount(pred).max().item() / pred.numel())


def score_spread(scores: Tensor) -> float:
    """Standard deviation of the scores a metric ranks (0 when every score is equal: a collapsed
    model). NaN for fewer than two scores."""
    if scores.numel() < 2:
        return float("nan")
    return float(scores.double().std(unbiased=False))


def client_weighted_scores(per_client: dict[int, dict[str, dict[str, float]]], split: str) -> dict[str, float]:
    """Size-weighted mean over clients of every metric of one split (``n`` and the private
    ``_``-prefixed counts a task pools itself are left out)."""
    cids = sorted(per_client)
    if not cids:
        return {}
    names = [k for k in per_client[cids[0]][split] if k != "n" and not k.startswith("_")]
    weights = [per_client[c][split]["n"] for c in cids]
    return {m: weighted_mean([per_client[c][split].get(m, float("nan")) for c in cids], weights) for m in names}


def weighted_mean(values: list[float], weights: list[float]) -> float:
    """Mean of client values weighted by their evaluation-set sizes (NaNs and 0 weights skipped)."""
    pairs = [(v, w) for v, w in zip(values, weights) if w > 0 and v == v]
    total = sum(w for _, w in pairs)
    return float(sum(v * w for v, w in pairs) / total) if total > 0 else float("nan")


# --------------------------------------------------------------------------- ranking and scoring


def _check_scores(scores: Tensor, labels: Tensor) -> None:
    if scores.dim() != 1 or labels.shape != scores.shape:
        raise ValueError(f"scores and labels must be 1-D of equal length, got {tuple(scores.shape)} "
                         f"and {tuple(labels.shape)}")
    if not scores.dtype.is_floating_point:
        raise ValueError(f"scores must be floating point, got {scores.dtype}")
    if labels.dtype.is_floating_point or labels.dtype.is_complex:
        raise ValueError(f"labels must be integer or bool 0/1, got {labels.dtype}")
    if labels.numel() and not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError("labels must be 0 or 1")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite")


@METRICS.register("auc")
def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve (scikit-learn's, ties count one half); NaN when one class is absent.

    NaN rather than an error because a small client split can hold no negatives; the
    engine's size-weighted mean skips NaN values.
    """
    _check_scores(scores, labels)
    y = labels.detach().cpu().long().numpy()
    if y.size == 0 or y.min() == y.max():
        return float("nan")
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, scores.detach().cpu().double().numpy()))


@METRICS.register("ap")
def average_precision(scores: Tensor, labels: Tensor) -> float:
    """Average precision (scikit-learn's step-wise area under precision-recall); NaN without positives."""
    _check_scores(scores, labels)
    y = labels.detach().cpu().long().numpy()
    if y.size == 0 or y.max() == 0:
        return float("nan")
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(y, scores.detach().cpu().double().numpy()))


def _check_ranks(ranks: Tensor) -> None:
    if ranks.dim() != 1:
        raise ValueError(f"ranks must be 1-D, got shape {tuple(ranks.shape)}")
    if ranks.dtype.is_floating_point or ranks.dtype == torch.bool:
        raise ValueError(f"ranks must be integer (1 = best), got {ranks.dtype}")
    if ranks.numel() and int(ranks.min()) < 1:
        raise ValueError("ranks start at 1")


@METRICS.register("recall_at_k")
def recall_at_k(ranks: Tensor, k: int) -> float:
    """Fraction of queries whose true item is ranked within the top ``k``."""
    _check_ranks(ranks)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if ranks.numel() == 0:
        return float("nan")
    return float((ranks <= k).double().mean())


@METRICS.register("mrr")
def mean_reciprocal_rank(ranks: Tensor) -> float:
    """Mean of 1 / rank of the true item over the queries."""
    _check_ranks(ranks)
    if ranks.numel() == 0:
        return float("nan")
    return float((1.0 / ranks.double()).mean())


def ranks_of_diagonal(sim: Tensor) -> Tensor:
    """Rank (1 = best) of ``sim[i, i]`` within row ``i``; ties count against the true item.

    Pessimistic ties keep a constant scorer at the bottom instead of crediting it with rank 1.
    """
    if sim.dim() != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {tuple(sim.shape)}")
    true = sim.diagonal().unsqueeze(1)
    return (sim >= true).sum(1).long()
