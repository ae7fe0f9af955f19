"""Metrics: hand-computed values and input validation."""

import pytest
import torch

from benchmark.metrics import accuracy, macro_f1, weighted_mean


def test_accuracy_and_macro_f1_by_hand():
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    p = torch.tensor([0, 1, 1, 1, 2, 0])
    assert accuracy(p, y) == pytest.approx(4 / 6)
    # class 0: tp1 fp1 fn1 -> f1 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp1 fp0 fn1 -> 2/3
    assert macro_f1(p, y, 3) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)


def test_metric_input_validation():
    with pytest.raises(ValueError):
        accuracy(torch.tensor([0.1, 0.2]), torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        accuracy(torch.tensor([0, 1, 1]), torch.tensor([0, 1]))


def test_weighted_mean_skips_empty_clients():
    assert weighted_mean([0.5, 1.0, float("nan")], [1, 3, 0]) == pytest.approx(0.875)
