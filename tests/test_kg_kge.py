"""KGE decoders, fused kernels, losses and filtered tie-aware evaluation (hand-computed cases)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmark.errors import ConfigError
from benchmark.kge import (
    DECODERS, FilterIndex, KGEModel, build_decoder, evaluate_filtered, kge_loss, make_queries, rank_metrics,
    tie_aware_ranks, train_epoch,
)
from benchmark.kge.evaluation import both_directions, filtered_ranks
from benchmark.kge.losses import self_adversarial_loss, softmax_ce_loss
from benchmark.kge.ops import pairwise_distance, pairwise_distance_reference
from data_prep.kg.synthetic import make_synthetic_kg


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------------------- fused kernel


@pytest.mark.parametrize("kind", ["complex", "l1", "l2"])
@pytest.mark.parametrize("mode", ["all", "subset", "per_query"])
def test_fused_distance_matches_reference(kind, mode):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(7, 8, dtype=torch.double, generator=g, requires_grad=True)
    c = torch.randn(9, 8, dtype=torch.double, generator=g, requires_grad=True)
    index = {"all": None, "subset": torch.tensor([1, 4, 4, 8]), "per_query": torch.randint(0, 9, (7, 5), generator=g)}[mode]
    # tiny chunks so that the chunk loop and its boundaries are exercised
    got = pairwise_distance(q, c, index, kind, chunk_elements=24)
    ref = pairwise_distance_reference(q, c, index, kind)
    assert torch.allclose(got, ref)
    w = torch.randn(got.shape, dtype=torch.double, generator=g)
    ga = torch.autograd.grad((got * w).sum(), (q, c))
    gb = torch.autograd.grad((ref * w).sum(), (q, c))
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, atol=1e-10)


def test_fused_distance_gradcheck():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, dtype=torch.double, generator=g, requires_grad=True)
    c = torch.randn(5, 4, dtype=torch.double, generator=g, requires_grad=True)
    idx = torch.randint(0, 5, (3, 2), generator=g)
    assert torch.autograd.gradcheck(lambda a, b: pairwise_distance(a, b, idx, "complex", chunk_elements=8), (q, c))


# --------------------------------------------------------------------------- decoders


def test_registry_and_bad_options():
    assert {"rotate", "transe", "complex"} <= set(DECODERS.names())
    with pytest.raises(ConfigError, match="did you mean 'rotate'"):
        DECODERS.get("rotat")
    with pytest.raises(ConfigError):
        build_decoder("rotate", 3, inverse="both")


def test_rotate_conventions_and_hand_score():
    dec = build_decoder("rotate", num_relations=1, dim=2, gamma=6.0)
    assert dec.embedding_range == pytest.approx((6.0 + 2.0) / 2)
    assert dec.relation.shape == (2, 2)          # 1 relation + its separate inverse, 2 phases each
    assert float(dec.relation.detach().abs().max()) <= dec.embedding_range
    with torch.no_grad():                       # phase pi/2 on coordinate 0, 0 on coordinate 1
        dec.relation[0] = torch.tensor([0.5 * dec.embedding_range, 0.0])
    h = torch.tensor([[1.0, 2.0, 0.0, 0.0]])    # (1 + 0i, 2 + 0i)
    t = torch.tensor([[0.0, 2.0, 1.0, 1.0]])    # (0 + 1i, 2 + 1i)
    # h*r = (0 + 1i, 2 + 0i); |h*r - t| = (0, 1) -> score 6 - 1 = 5
    assert dec.score_triples(h, torch.tensor([0]), t).item() == pytest.approx(5.0, abs=1e-5)
    assert dec(h, torch.tensor([0]), t).item() == pytest.approx(5.0, abs=1e-5)


@pytest.mark.parametrize("name", ["rotate", "transe", "complex"])
def test_tied_inverse_scores_the_reversed_triple_identically(name):
    torch.manual_seed(0)
    dec = build_decoder(name, num_relations=3, dim=4, gamma=5.0, inverse="tied")
    ent = dec.init_entities(6)
    h, r, t = torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5])
    fwd = dec.score_triples(ent[h], r, ent[t])
    inv = dec.score_triples(ent[t], dec.inverse_of(r), ent[h])
    assert torch.allclose(fwd, inv, atol=1e-5)


@pytest.mark.parametrize("name", ["rotate", "transe", "complex"])
def test_candidate_modes_agree_with_pair_scores(name):
    torch.manual_seed(0)
    dec = build_decoder(name, num_relations=2, dim=3)
    ent = dec.init_entities(5)
    h, r = torch.tensor([0, 3]), torch.tensor([1, 2])
    all_scores = dec(ent[h], r, ent)
    per_query = dec(ent[h], r, ent, torch.tensor([[4, 0], [1, 1]]))
    subset = dec(ent[h], r, ent, torch.tensor([2, 4]))
    assert torch.allclose(per_query, torch.stack([all_scores[0, [4, 0]], all_scores[1, [1, 1]]]), atol=1e-5)
    assert torch.allclose(subset, all_scores[:, [2, 4]], atol=1e-5)
    pair = dec.score_triples(ent[h], r, ent[torch.tensor([1, 2])])
    assert torch.allclose(pair, torch.stack([all_scores[0, 1], all_scores[1, 2]]), atol=1e-5)


# --------------------------------------------------------------------------- losses


def test_losses_match_their_formulas():
    pos = torch.tensor([2.0, -1.0])
    neg = torch.tensor([[1.0, 0.0, 3.0], [0.5, -2.0, 1.0]])
    expected = F.cross_entropy(torch.cat([pos[:, None], neg], 1), torch.zeros(2, dtype=torch.long))
    assert softmax_ce_loss(pos, neg).item() == pytest.approx(expected.item())
    mask = torch.tensor([[False, False, True], [False, False, False]])
    masked = F.cross_entropy(torch.tensor([[2.0, 1.0, 0.0], [-1.0, 0.5, -2.0]]), torch.zeros(2, dtype=torch.long))
    assert softmax_ce_loss(pos, neg[:, [0, 1, 2]], mask).item() == pytest.approx(
        (F.cross_entropy(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0])).item()
         + F.cross_entropy(torch.tensor([[-1.0, 0.5, -2.0, 1.0]]), torch.tensor([0])).item()) / 2)
    assert masked.item() != expected.item()
    w = torch.softmax(neg, 1)
    sa = -(F.logsigmoid(pos).mean() + (w * F.logsigmoid(-neg)).sum(1).mean()) / 2
    assert self_adversarial_loss(pos, neg).item() == pytest.approx(sa.item())
    assert kge_loss("self_adversarial", pos, neg).item() == pytest.approx(sa.item())
    with pytest.raises(ConfigError):
        kge_loss("margin", pos, neg)


# --------------------------------------------------------------------------- ranking


def test_tie_aware_ranks_by_hand():
    scores = torch.tensor([
        [5.0, 3.0, 5.0, 7.0, 1.0],   # pos 0: one higher (7), one tie (col 2) -> 1 + 1 + 0.5
        [5.0, 3.0, 5.0, 7.0, 1.0],   # same, col 3 filtered -> 1 + 0 + 0.5
        [5.0, 3.0, 5.0, 7.0, 1.0],   # cols 2 and 3 filtered -> 1
        [2.0, 2.0, 2.0, 2.0, 2.0],   # constant scorer: middle rank 1 + 0.5 * 4 = 3
        [float("nan"), 0.0, 1.0, float("-inf"), 2.0],  # NaN positive counts as -inf: 3 higher, ties col 3
    ])
    pos = torch.tensor([0, 0, 0, 2, 0])
    rows = torch.tensor([1, 2, 2, 2])
    cols = torch.tensor([3, 2, 3, 0])       # row 2 also lists the positive itself: ignored
    ranks = tie_aware_ranks(scores, pos, rows, cols)
    assert ranks.tolist() == [2.5, 1.5, 1.0, 3.0, 4.5]
    m = rank_metrics(torch.tensor([1.0, 2.5, 4.0, 20.0]))
    assert m["mrr"] == pytest.approx((1 + 1 / 2.5 + 1 / 4 + 1 / 20) / 4)
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (0.25, 0.5, 0.75)


def test_filter_index_answers_both_directions():
    known = torch.tensor([[0, 0, 1], [0, 0, 2], [3, 1, 0], [2, 0, 1]])
    fi = FilterIndex(known, num_entities=4, num_relations=2)
    rows, ents = fi.answers(torch.tensor([0, 1, 0, 0]), torch.tensor([0, 2, 3, 1]))
    got = sorted(zip(rows.tolist(), ents.tolist()))
    # (0, r0) -> {1, 2}; (1, r0^-1) -> {0, 2}; (0, r1^-1) -> {3}; (0, r1) -> {}
    assert got == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 3)]


def test_evaluate_filtered_hand_computed():
    """Scores are a fixed table over 4 entities; ranks are worked out by hand."""
    E, R = 4, 1
    known = torch.tensor([[0, 0, 1], [0, 0, 2], [3, 0, 1]])
    test = torch.tensor([[0, 0, 1]])
    table = torch.tensor([
        [0.0, 5.0, 9.0, 5.0],   # query (0, r0): tail 1 scores 5; 2 (9) is a known answer -> filtered; 3 ties -> 1.5
        [7.0, 0.0, 1.0, 7.0],   # query (1, r0^-1): head 0 scores 7; 3 ties but is a known head of (.., r0, 1) -> rank 1
    ])

    def score(h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return table[(r >= R).long()]

    fi = FilterIndex(known, E, R)
    res = evaluate_filtered(score, test, fi)
    assert res["tail"]["mrr"] == pytest.approx(1 / 1.5)
    assert res["head"]["mrr"] == pytest.approx(1.0)
    assert res["mrr"] == pytest.approx((1 / 1.5 + 1.0) / 2)
    assert res["count"] == 2
    # candidates restricted to {1, 2, 3}: the tail query is unchanged; the head answer 0 is
    # not a candidate, which is an error rather than a silent skip
    ranks = filtered_ranks(lambda h, r: table[(r >= R).long()][:, [1, 3]], torch.tensor([[0, 0, 1]]), fi,
                           candidates=torch.tensor([1, 3]))
    assert ranks.tolist() == [1.5]
    with pytest.raises(ValueError, match="not in the candidate set"):
        filtered_ranks(lambda h, r: table[:, [1, 3]], torch.tensor([[1, 1, 0]]), fi, candidates=torch.tensor([1, 3]))


def _brute_force_ranks(table: torch.Tensor, queries: torch.Tensor, known: torch.Tensor, R: int,
                       candidates: list[int]) -> list[float]:
    """Filtered mean-of-ties ranks, one query at a time from the definition."""
    truth = {(int(h), int(r), int(t)) for h, r, t in known} | {(int(t), int(r) + R, int(h)) for h, r, t in known}
    out = []
    for h, r, a in queries.tolist():
        row = table[h * 2 * R + r]
        target = float(row[a])
        others = [e for e in candidates if e != a and (h, r, e) not in truth]
        out.append(1 + sum(float(row[e]) > target for e in others) + 0.5 * sum(float(row[e]) == target for e in others))
    return out


@pytest.mark.parametrize("batch_size", [1, 3, 7, 500])
@pytest.mark.parametrize("subset", [False, True])
def test_filtered_ranks_match_a_per_query_count_at_any_batch_size(batch_size, subset):
    """The filter is resolved once for all queries and sliced per batch: every batch size,
    with or without a candidate subset, gives the per-query definition's ranks (ties made
    common by rounding the scores); and the known answers are looked up once per call."""
    g = torch.Generator().manual_seed(batch_size)
    E, R = 12, 2
    known = torch.unique(torch.stack([torch.randint(0, E, (60,), generator=g), torch.randint(0, R, (60,), generator=g),
                                      torch.randint(0, E, (60,), generator=g)], 1), dim=0)
    table = torch.randn(E * 2 * R, E, generator=g).round()
    cands = list(range(0, E, 2)) if subset else list(range(E))
    tail, head = both_directions(known[:25], R)
    queries = torch.cat([tail, head])
    queries = queries[torch.isin(queries[:, 2], torch.tensor(cands))]
    fi = FilterIndex(known, E, R)
    lookups = []
    answers = fi.answers
    fi.answers = lambda h, r: lookups.append(len(h)) or answers(h, r)
    got = filtered_ranks(lambda h, r: table[h * 2 * R + r][:, cands], queries, fi,
                         candidates=torch.tensor(cands) if subset else None, batch_size=batch_size)
    assert got.tolist() == _brute_force_ranks(table, queries, known, R, cands)
    assert lookups == [len(queries)]


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("name,loss,shared", [("rotate", "softmax_ce", False), ("rotate", "self_adversarial", True),
                                              ("transe", "softmax_ce", True), ("complex", "softmax_ce", False)])
def test_training_learns_synthetic_kg(name, loss, shared):
    kg = make_synthetic_kg(num_entities=150, seed=0)
    R = kg.num_relations
    model = KGEModel(kg.num_entities, R, name, dim=16, gamma=6.0, seed=0)
    fi = FilterIndex(kg.all_triples(), kg.num_entities, R)
    before = evaluate_filtered(model.scorer(), kg.test, fi)["mrr"]
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    gen = torch.Generator().manual_seed(0)
    q = make_queries(kg.train, R)
    losses = [train_epoch(model, q, opt, 256, 32, loss, shared, None, 1.0, gen) for _ in range(25)]
    after = evaluate_filtered(model.scorer(), kg.test, fi)["mrr"]
    assert losses[-1] < losses[0]
    assert after > before + 0.15, (before, after)


def test_training_with_candidate_subset_and_determinism():
    kg = make_synthetic_kg(num_entities=80, seed=2)
    R = kg.num_relations
    cand = torch.unique(kg.train[:, [0, 2]])

    def run() -> torch.Tensor:
        m = KGEModel(kg.num_entities, R, "rotate", dim=8, seed=3)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        train_epoch(m, make_queries(kg.train, R), opt, 64, 8, "softmax_ce", False, cand, 1.0, torch.Generator().manual_seed(1))
        return m.entity.detach().clone()

    a, b = run(), run()
    assert torch.equal(a, b)
    untouched = torch.ones(kg.num_entities, dtype=torch.bool)
    untouched[cand] = False
    init = KGEModel(kg.num_entities, R, "rotate", dim=8, seed=3).entity.detach()
    # entities outside the candidate set and outside every training triple never move
    assert torch.equal(a[untouched], init[untouched])
    assert math.isfinite(float(a.sum()))
