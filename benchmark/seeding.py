"""Every random stream the harness derives from a run seed, in one module.

A run has one seed (``cfg.seed``). Everything random (splits, partitions, maskers, client
sampling, negatives, initializations, hook calls) draws from a stream derived from that seed
and a key naming the purpose, so that a stream does not depend on what ran before it.

New code uses :func:`seeded_rng` (a numpy generator) or :func:`hook_seed` (an integer for
torch). The other derivations below are kept, each bit for bit, because committed artifacts
and result records depend on their exact draws; moving their callers onto ``seeded_rng``
changes those draws and needs the affected stores re-run (a protocol change).
``tests/test_layering.py`` checks that no module outside this one derives a seed its own way.
"""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from typing import Any

import numpy as np
import torch

_MASK32 = 0xFFFFFFFF


def _word(part: int | str) -> int:
    """One 32-bit word of a stream key: an integer as is, a string by its CRC-32."""
    if isinstance(part, str):
        return zlib.crc32(part.encode())
    value = int(part)
    if value < 0:
        raise ValueError(f"a seed key part must be a non-negative integer or a string, got {part!r}")
    return value


def seeded_rng(seed: int, *key: int | str) -> np.random.Generator:
    """A numpy generator for one purpose: ``(seed, *key)`` with integers verbatim and strings
    by CRC-32, so the same run seed gives unrelated streams per key (data splits, partitions,
    maskers, client sampling, per-client task draws)."""
    return np.random.default_rng([int(seed) & _MASK32, *(_word(k) for k in key)])


def spawned_rngs(seed: int, n: int) -> list[np.random.Generator]:
    """``n`` independent numpy generators from numpy's ``SeedSequence(seed).spawn(n)``
    (the relation-id KG partition: one for the shuffle, one per client; the synthetic graph:
    labels, structure, features)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def name_rng(salt: str, name: str) -> np.random.Generator:
    """A numpy generator keyed by a name alone, not by the run seed (BLAKE2b of
    ``salt:name``): the same entity gets the same stand-in vector in every run."""
    return np.random.default_rng(int.from_bytes(hashlib.blake2b(f"{salt}:{name}".encode(), digest_size=8).digest(),
                                                "little"))


def digest_seed(text: str) -> int:
    """A 64-bit integer from the SHA-256 of ``text`` (its first 8 bytes, little-endian)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def hook_seed(seed: int, *key: Any) -> int:
    """A 63-bit seed for one hook call: a hash of the run seed and the call's key (role,
    hook, client id, round), so a client draws the same numbers whoever ran before it."""
    return digest_seed(json.dumps([int(seed), *key], default=str)) >> 1


def seed_globals(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators with one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def seed_hook(seed: int, *key: Any) -> None:
    """Seed the global generators for one hook call (:func:`hook_seed`)."""
    seed_globals(hook_seed(seed, *key))


def text_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed from the CRC-32 of ``seed/part/part...`` (the AMFL track's streams:
    per run, purpose, client and round, independent of call order)."""
    return zlib.crc32("/".join(map(str, (seed, *parts))).encode()) & 0x7FFFFFFF


def fnv_seed(*parts: int) -> int:
    """A 62-bit seed from integers by an FNV-1a-style fold (the KG track's streams: seed,
    client id, round, purpose)."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (1 << 62)
    return h


def chain_seed(seed: int, *salts: int, modulus: int = 2**63 - 1) -> int:
    """``seed`` folded with each salt as ``seed * 1_000_003 + salt + 1`` (mod ``modulus``)."""
    for s in salts:
        seed = (seed * 1_000_003 + s + 1) % modulus
    return seed


__all__ = ["chain_seed", "digest_seed", "fnv_seed", "hook_seed", "name_rng", "seed_globals", "seed_hook",
           "seeded_rng", "spawned_rngs", "text_seed"]
