"""The device tests run on: CPU unless FEDMM_TEST_DEVICE names another (e.g. cuda)."""

from __future__ import annotations

import os

import torch


def test_device() -> torch.device:
    """torch.device of FEDMM_TEST_DEVICE, default cpu."""
    return torch.device(os.environ.get("FEDMM_TEST_DEVICE", "cpu"))
