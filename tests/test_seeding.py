"""The seed derivations of benchmark/seeding.py draw exactly what the committed stores were
made with. The literals were drawn by the formulas these functions replaced (engine client
sampling, the data layer's ``seeded_rng``, the link-prediction ``task_rng``, the roles'
``hook_seed``, the AMFL ``stream_seed``, the KG ``_mix``, FedMGS's generator chain, the
relation-id partition's ``SeedSequence`` spawn, the FB15K-237 name-seeded vectors). A change
to any of them changes every artifact or record drawn from it, so it fails here first."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark import seeding as S


def _ints(rng: np.random.Generator) -> list[int]:
    return rng.integers(1 << 30, size=3).tolist()


def test_numpy_streams_draw_what_the_stores_were_made_with():
    assert _ints(S.seeded_rng(7, "iid")) == [610640954, 743910196, 527519264]  # partition / masker salt
    assert _ints(S.seeded_rng(7, 3, "edge-split")) == [252139489, 692425435, 274969074]  # task_rng(7, cid=2)
    assert _ints(S.seeded_rng(7, 4)) == [570591404, 219546406, 810181644]  # engine: client sampling, round 4
    assert [int(g.integers(1 << 30)) for g in S.spawned_rngs(7, 3)] == [327887588, 731643556, 425885317]
    assert int(S.name_rng("ent", "/m/0abc").integers(1 << 30)) == 104157587


def test_integer_seeds_are_the_ones_the_stores_were_made_with():
    assert S.hook_seed(7, "client", "update", 2, 5) == 62240933839960085
    assert S.text_seed(7, "amfl/init", 2) == 2108992957
    assert S.fnv_seed(7, 2, 5, 101) == 2500203305569201992
    assert S.chain_seed(7, 3, 4) == 7000046000080
    assert S.digest_seed("s2fgl:7:3") == 18250940672730020887


def test_streams_differ_by_key_and_repeat_by_key():
    assert _ints(S.seeded_rng(0, "a")) == _ints(S.seeded_rng(0, "a"))
    assert _ints(S.seeded_rng(0, "a")) != _ints(S.seeded_rng(0, "b"))
    assert _ints(S.seeded_rng(0, 1)) != _ints(S.seeded_rng(1, 1))
    assert S.hook_seed(0, "server", "aggregate", 1) != S.hook_seed(0, "server", "aggregate", 2)


def test_a_negative_key_part_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        S.seeded_rng(0, -1)


def test_seed_hook_seeds_all_three_global_generators():
    import random

    import torch

    S.seed_hook(3, "client", "update", 0, 1)
    a = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    S.seed_hook(3, "client", "update", 0, 1)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == a
