"""Flower's object pulls, without its one-second first wait (no torch import: a SuperNode
process uses it too)."""

from __future__ import annotations

OBJECT_PULL_BACKOFF_S = 0.02  # first wait before asking again for a message part not there yet


def quick_object_pulls() -> None:
    """Flower pulls a message's parts (its arrays, records) one object at a time, and when a
    part has not reached the store it asks from, it waits 1 s before asking again, doubling up
    to 10 s. On a deployment a message's parts are still on their way one hop back when the
    next hop asks for them (a ClientApp asks its SuperNode while the SuperNode still pulls
    them from the SuperLink), so an exchange paid that second on its path: the loopback
    deployment of deploy/flower/run.yaml took 144 s for 20 rounds before, 113 s after (2-core
    CPU, benchmarks/flower_deploy_vs_sim.sh). This makes the first wait
    ``OBJECT_PULL_BACKOFF_S`` in this process (the
    doubling and the cap stay Flower's). The defaults belong to the function objects every
    Flower module calls (``pull_and_inflate_object_from_tree`` passes its own on to
    ``pull_objects``), so this holds however they were imported."""
    from flwr.supercore.inflatable import inflatable_utils

    for fn in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        fn.__kwdefaults__["initial_backoff"] = OBJECT_PULL_BACKOFF_S


__all__ = ["OBJECT_PULL_BACKOFF_S", "quick_object_pulls"]
