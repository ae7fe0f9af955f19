"""benchmark.backends.flower_pulls: a message part that arrives a moment late is pulled a
moment later, not after Flower's default first wait of a second."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("flwr")

from flwr.supercore.inflatable import inflatable_utils  # noqa: E402
from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError  # noqa: E402

from benchmark.backends.flower_pulls import OBJECT_PULL_BACKOFF_S, quick_object_pulls  # noqa: E402


def test_a_part_that_arrives_late_is_pulled_soon_after():
    quick_object_pulls()
    for fn in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        assert fn.__kwdefaults__["initial_backoff"] == OBJECT_PULL_BACKOFF_S
    arrives = time.monotonic() + 0.1

    def pull(object_id: str) -> bytes:
        if time.monotonic() < arrives:
            raise ObjectUnavailableError(object_id)
        return object_id.encode()

    start = time.monotonic()
    got = inflatable_utils.pull_objects(["a", "b", "c"], pull)
    assert got == {"a": b"a", "b": b"b", "c": b"c"}
    assert time.monotonic() - start < 0.6  # Flower's default first wait alone is 0.8-1.2 s
