"""``apply_matmul_precision`` sets both halves of the precision switch and rejects bad names."""

from __future__ import annotations

import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.precision import MATMUL_PRECISIONS, apply_matmul_precision


@pytest.fixture(autouse=True)
def restore():
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[1]


@pytest.mark.parametrize("name", MATMUL_PRECISIONS)
def test_sets_matmul_and_cudnn_flags(name):
    apply_matmul_precision(name)
    assert torch.get_float32_matmul_precision() == name
    assert torch.backends.cuda.matmul.allow_tf32 == (name != "highest")
    assert torch.backends.cudnn.allow_tf32 == (name != "highest")


def test_highest_after_medium_turns_tf32_off():
    apply_matmul_precision("medium")
    apply_matmul_precision("highest")
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_unknown_name_is_refused():
    with pytest.raises(ConfigError, match="matmul precision"):
        apply_matmul_precision("low")
