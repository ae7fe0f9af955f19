"""Filtered, tie-aware link-prediction evaluation over a candidate entity set.

Protocol (FedMKGC, and the classic filtered setting of Bordes et al.):

- Both directions: a test triple (h, r, t) asks for the tail given (h, r) and for the
  head given (t, r^-1), i.e. tail prediction on the inverse relation id ``r + R``. The
  reported metric is the mean over both directions (equal query counts, so this is also
  the mean over all 2T queries); per-direction values are returned too.
- Candidates: only the given entity set is ranked (a client's own entities, FedE/FedLU
  practice); by default every entity.
- Filtering: every *other* known true answer of the query (from train+valid+test, and
  for inverse queries from the reversed triples) is removed from the ranking; the
  positive itself is never removed.
- Ties, "mean rank of ties" (PyKEEN's *realistic* rank): ``rank = 1 + #(candidates
  scoring strictly higher) + 0.5 * #(other candidates scoring exactly the same)``. This
  is the expected rank under random tie-breaking: a constant scorer gets the middle rank,
  not rank 1 (the optimistic bug) nor the last (the pessimistic one). A NaN score counts
  as ``-inf``. Hits@K uses the same (possibly fractional) rank: ``rank <= K``.

Devices: ids may live on any device; every function moves them to the device of the
scores (the model's), so CPU queries work with a CUDA model and CUDA queries with either.

Everything is batched tensor code: known answers of a batch of queries are found by
binary search in one sorted key array, the filter is a boolean mask scattered in one
``index_put_``, and ranks are row reductions; there is no Python loop per query.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

HITS_AT = (1, 3, 10)


class FilterIndex:
    """All known (query -> answer) pairs, in both directions, as one sorted key array.

    A triple (h, r, t) yields the key of (query (h, r), answer t) and the key of
    (query (t, r + R), answer h). Keys are ``(h * 2R + r) * E + answer`` (int64).
    """

    def __init__(self, known: Tensor, num_entities: int, num_relations: int) -> None:
        known = known.long().reshape(-1, 3)
        self.num_entities = num_entities
        self.num_relations = num_relations
        h, r, t = known[:, 0], known[:, 1], known[:, 2]
        R2 = 2 * num_relations
        fwd = (h * R2 + r) * num_entities + t
        inv = (t * R2 + r + num_relations) * num_entities + h
        self.keys = torch.unique(torch.cat([fwd, inv]))  # sorted
        self._on: dict[torch.device, Tensor] = {self.keys.device: self.keys}

    def keys_on(self, device: torch.device) -> Tensor:
        """The key array on ``device`` (copied once per device, then reused)."""
        if device not in self._on:
            self._on[device] = self.keys.to(device)
        return self._on[device]

    def answers(self, h: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
        """All known answers of queries (h, r) (r may be an inverse id): ``(row, entity)``
        pairs, ``row`` indexing the query batch, on the device of ``h``."""
        E = self.num_entities
        keys = self.keys_on(h.device)
        q = h.long() * (2 * self.num_relations) + r.long().to(h.device)
        lo = torch.searchsorted(keys, q * E)
        hi = torch.searchsorted(keys, (q + 1) * E)
        counts = hi - lo
        rows = torch.repeat_interleave(torch.arange(len(q), device=q.device), counts)
        starts = torch.repeat_interleave(lo - (torch.cumsum(counts, 0) - counts), counts)
        pos = torch.arange(int(counts.sum()), device=q.device) + starts
        return rows, keys[pos] % E


def tie_aware_ranks(scores: Tensor, pos_col: Tensor, filter_rows: Tensor | None = None, filter_cols: Tensor | None = None) -> Tensor:
    """Filtered mean-of-ties ranks ``[B]`` (float) of the positive column of each row.

    ``scores`` ``[B, N]``; ``pos_col`` ``[B]`` the positive's column; ``(filter_rows,
    filter_cols)`` the other true answers to remove (the positive's own entry is ignored
    if listed).
    """
    s = scores.detach().float()
    s = s.masked_fill(torch.isnan(s), float("-inf"))  # (nan_to_num would also clip +-inf)
    B = s.shape[0]
    rows = torch.arange(B, device=s.device)
    pos_col = pos_col.to(s.device)
    pos_score = s[rows, pos_col].unsqueeze(1)
    keep = torch.ones_like(s, dtype=torch.bool)
    if filter_rows is not None and filter_cols is not None and filter_rows.numel():
        keep[filter_rows.to(s.device), filter_cols.to(s.device)] = False
    keep[rows, pos_col] = True
    greater = ((s > pos_score) & keep).sum(1)
    ties = ((s == pos_score) & keep).sum(1) - 1  # the positive ties with itself
    return 1.0 + greater.double() + 0.5 * ties.double()


def rank_metrics(ranks: Tensor) -> dict[str, float]:
    """MRR, MR and Hits@{1,3,10} of a rank vector."""
    ranks = ranks.double()
    if ranks.numel() == 0:
        return {"mrr": float("nan"), "mr": float("nan"), **{f"hits@{k}": float("nan") for k in HITS_AT}, "count": 0}
    out = {"mrr": float((1.0 / ranks).mean()), "mr": float(ranks.mean())}
    for k in HITS_AT:
        out[f"hits@{k}"] = float((ranks <= k).double().mean())
    out["count"] = int(ranks.numel())
    return out


ScoreFn = Callable[[Tensor, Tensor], Tensor]


def row_spread(scores: Tensor) -> Tensor:
    """``[B]``: the standard deviation of each row's finite scores (0 when a query scores every
    candidate alike: the collapse the guard flags; NaN for a row with fewer than two)."""
    s = scores.detach().double()
    finite = torch.isfinite(s)
    n = finite.sum(1)
    x = torch.where(finite, s, torch.zeros_like(s))
    mean = x.sum(1) / n.clamp_min(1)
    var = (torch.where(finite, s - mean.unsqueeze(1), torch.zeros_like(s)) ** 2).sum(1) / n.clamp_min(1)
    return torch.where(n >= 2, var.sqrt(), torch.full_like(var, float("nan")))


@torch.no_grad()
def filtered_ranks(
    score_fn: ScoreFn,
    queries: Tensor,
    filter_index: FilterIndex,
    candidates: Tensor | None = None,
    batch_size: int = 256,
    spreads: list[Tensor] | None = None,
) -> Tensor:
    """Ranks ``[Q]`` of the answers of ``queries`` ``[Q, 3]`` = (head, relation id incl.
    inverse ids, answer). ``score_fn(h, r)`` returns ``[B, N]`` scores of the candidates
    (in the order of ``candidates``; all entities when ``None``). Ranks are computed on
    the device of the scores, whatever the device of ``queries``. With ``spreads``, each
    batch's per-query score spread (:func:`row_spread`, unfiltered) is appended to it."""
    E = filter_index.num_entities
    local_on: dict[torch.device, Tensor] = {}

    def local_ids(device: torch.device) -> Tensor:
        if device not in local_on:
            if candidates is None:
                local_on[device] = torch.arange(E, device=device)
            else:
                cand = candidates.long().to(device)
                local = torch.full((E,), -1, dtype=torch.long, device=device)
                local[cand] = torch.arange(len(cand), device=device)
                local_on[device] = local
        return local_on[device]

    # the answers' columns and the filter of every query, found once on the scores' device at
    # the first batch and sliced per batch after: two host reads per evaluation, not two per
    # batch (each one a device sync that idles a GPU between batches)
    found: dict[str, object] = {}

    def resolve(device: torch.device) -> None:
        local = local_ids(device)
        qa = queries.long().to(device)
        pos = local[qa[:, 2]]
        if bool((pos < 0).any()):
            bad = int(qa[pos < 0][0, 2])
            raise ValueError(f"answer entity {bad} of a test query is not in the candidate set")
        rows, ents = filter_index.answers(qa[:, 0], qa[:, 1])
        cols = local[ents]
        ok = cols >= 0
        rows, cols = rows[ok], cols[ok]  # rows ascend: answers() lists them query by query
        starts = torch.arange(0, len(qa) + batch_size, batch_size, device=device)
        found.update(pos=pos, rows=rows, cols=cols, bounds=torch.searchsorted(rows, starts).tolist())

    out = []
    for i, s in enumerate(range(0, len(queries), batch_size)):
        q = queries[s:s + batch_size].long()
        scores = score_fn(q[:, 0], q[:, 1])
        if not found:
            resolve(scores.device)
        lo, hi = found["bounds"][i], found["bounds"][i + 1]  # type: ignore[index]
        out.append(tie_aware_ranks(scores, found["pos"][s:s + batch_size],  # type: ignore[index]
                                   found["rows"][lo:hi] - s, found["cols"][lo:hi]))  # type: ignore[index]
        if spreads is not None:
            spreads.append(row_spread(scores))
    return torch.cat(out) if out else torch.empty(0, dtype=torch.double)


def both_directions(triples: Tensor, num_relations: int) -> tuple[Tensor, Tensor]:
    """Tail queries (h, r, t) and head queries as inverse tail queries (t, r + R, h)."""
    t = triples.long()
    inv = torch.stack([t[:, 2], t[:, 1] + num_relations, t[:, 0]], dim=1)
    return t, inv


def evaluate_filtered(
    score_fn: ScoreFn,
    triples: Tensor,
    filter_index: FilterIndex,
    candidates: Tensor | None = None,
    batch_size: int = 256,
) -> dict:
    """Filtered MRR / Hits@K over both directions of ``triples`` (base relation ids).

    Returns the averaged metrics at the top level plus ``tail`` and ``head`` sub-dicts, and
    ``spread``: the mean over queries of the spread of each query's candidate scores (0 when
    the model scores every candidate alike, which the pathology guard flags as collapsed).
    """
    tail_q, head_q = both_directions(triples, filter_index.num_relations)
    spreads: list[Tensor] = []
    tail = filtered_ranks(score_fn, tail_q, filter_index, candidates, batch_size, spreads)
    head = filtered_ranks(score_fn, head_q, filter_index, candidates, batch_size, spreads)
    out = rank_metrics(torch.cat([tail, head]))
    out["spread"] = float(torch.cat(spreads).nanmean()) if spreads else float("nan")
    out["tail"] = rank_metrics(tail)
    out["head"] = rank_metrics(head)
    return out


def decoder_scorer(decoder: torch.nn.Module, entity_emb: Tensor, candidates: Tensor | None = None) -> ScoreFn:
    """A ``score_fn`` for a KGE decoder and an entity-vector table: the candidate vectors
    are gathered once, then each batch is one fused ``[B, N]`` scoring call."""
    cand = entity_emb if candidates is None else entity_emb[candidates.long()]
    cand = cand.contiguous()

    def score(h: Tensor, r: Tensor) -> Tensor:
        return decoder(entity_emb[h.to(entity_emb.device)], r, cand)  # type: ignore[operator]

    return score


def views_scorer(views: list[tuple[torch.nn.Module, Tensor]], relation_map: Tensor | None = None) -> ScoreFn:
    """A ``score_fn`` over all rows of the entity tables of one or more *views*
    ``(decoder, entity table)`` that share entity ids.

    One view: the decoder's raw scores (ranks as ``decoder_scorer``). Several views (the
    split paradigm, one per modality): ``log((1/M) sum_m softmax_m)`` over the candidate
    set, i.e. the log of the averaged probability, which ranks exactly as the averaged
    probability does. ``relation_map`` (``[2R]`` long) translates the query's relation ids
    (inverse ids included) into the decoders' ids, for a model trained on a larger relation
    vocabulary (the centralized bound scoring one client's queries).
    """
    from benchmark.kge.losses import mean_softmax_log_probs

    tables = [(dec, ent.contiguous()) for dec, ent in views]

    def score(h: Tensor, r: Tensor) -> Tensor:
        rr = r if relation_map is None else relation_map[r.long().to(relation_map.device)]
        out = [dec(ent[h.to(ent.device)], rr, ent) for dec, ent in tables]  # type: ignore[operator]
        return out[0] if len(out) == 1 else mean_softmax_log_probs(out)

    return score
