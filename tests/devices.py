"""The device tests run on: ``FEDMM_TEST_DEVICE`` (default ``cpu``), so one test file checks
CPU everywhere and CUDA on a GPU machine (``FEDMM_TEST_DEVICE=cuda pytest ...``)."""

from __future__ import annotations

import os

import torch


def test_device() -> torch.device:
    """The device named by ``FEDMM_TEST_DEVICE`` (default ``cpu``)."""
    return torch.device(os.environ.get("FEDMM_TEST_DEVICE", "cpu"))


test_device.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test for pytest to collect
