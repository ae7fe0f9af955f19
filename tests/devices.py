"""The device the test suite runs on: ``pytest --device cuda`` or ``FEDMM_TEST_DEVICE=cuda``.

The default is the CPU, so CI's numbers never depend on what hardware happens to be
present. ``tests/conftest.py`` reads the option once and exports it, so the engine
(``train.device: auto`` resolves through ``FEDMM_DEVICE``) and the tests' own tensors land
on the same device.
"""

from __future__ import annotations

import os

import torch

TEST_DEVICE_ENV = "FEDMM_TEST_DEVICE"


def test_device() -> torch.device:
    """The device the tests' own tensors should be created on."""
    return torch.device(os.environ.get(TEST_DEVICE_ENV, "") or "cpu")


test_device.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test
