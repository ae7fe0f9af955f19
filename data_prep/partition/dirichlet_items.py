"""Deal an entity's multimodal items to the clients that hold the entity (FedMKGC).

Items (sentences, images, attribute facts) carry no client id, so the MMFeD3-HidE
protocol deals them: for each entity, proportions ``p ~ Dirichlet(alpha * 1_k)`` over the
k clients that hold the entity, and each item goes to one of them drawn from ``p``
(alpha = 0.1: most of an entity's items land on one client, a strongly heterogeneous
split). With ``partitioned=False`` every holder gets all the entity's items (the "not
partitioned" rows of Table IV and the MMCen bound). A client's modality feature for an
entity is the mean of the encoded items it holds; an entity with no item there is
naturally missing. Then simulated missingness stacks on top: per client, entity and
modality an independent Bernoulli(r) availability (r = 0.5 by default); unavailable
features are replaced by random values (or zeros), never the true ones.

Everything is vectorized: Dirichlet draws are normalized Gamma draws per (entity, holder)
pair, and each item picks its holder with one ``searchsorted`` over cumulative weights.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from benchmark.errors import ConfigError
from data_prep.kg.dataset import KGDataset
from data_prep.partition.relation_id import KGPartition

_TOKEN = re.compile(r"[\w']+", re.UNICODE)
COVER_MODES = ("every_holder", "dealt")


def deal_items(
    item_entity: Tensor,
    client_entities: Sequence[Tensor],
    alpha: float = 0.1,
    partitioned: bool = True,
    seed: int = 0,
    cover: str = "every_holder",
) -> list[Tensor]:
    """Sorted item indices held by each client.

    ``item_entity`` ``[n]`` owner entity of each item; ``client_entities[c]`` the global
    entity ids client c holds. An item whose entity no client holds is dealt to nobody.
    ``cover``: ``every_holder`` copies one uniformly drawn item of an entity to each of its
    holders that the dealing left without any (the draws come after the dealing's, so the
    dealt part equals ``dealt``'s); ``dealt`` returns the dealing alone.
    """
    if alpha <= 0:
        raise ConfigError(f"dirichlet_items alpha must be > 0, got {alpha}")
    if cover not in COVER_MODES:
        raise ConfigError(f"dirichlet_items cover must be one of {', '.join(COVER_MODES)}, got '{cover}'")
    owner = item_entity.cpu().numpy().astype(np.int64)
    C = len(client_entities)
    if not partitioned:
        out = []
        for ents in client_entities:
            held = np.isin(owner, ents.cpu().numpy())
            out.append(torch.from_numpy(np.nonzero(held)[0]))
        return out
    rng = np.random.default_rng(seed)
    pair_ent = np.concatenate([e.cpu().numpy().astype(np.int64) for e in client_entities]) if C else np.zeros(0, np.int64)
    pair_cli = np.concatenate([np.full(len(e), c, dtype=np.int64) for c, e in enumerate(client_entities)]) if C else np.zeros(0, np.int64)
    order = np.lexsort((pair_cli, pair_ent))
    pair_ent, pair_cli = pair_ent[order], pair_cli[order]
    n_ent = int(max(owner.max(initial=-1), pair_ent.max(initial=-1)) + 1)
    weights = rng.gamma(alpha, 1.0, size=len(pair_ent))
    seg_sum = np.bincount(pair_ent, weights=weights, minlength=n_ent)
    seg_cnt = np.bincount(pair_ent, minlength=n_ent)
    degenerate = (seg_sum[pair_ent] <= 0)  # every draw underflowed: fall back to uniform
    weights = np.where(degenerate, 1.0, weights)
    seg_sum = np.bincount(pair_ent, weights=weights, minlength=n_ent)
    frac = weights / np.where(seg_sum[pair_ent] > 0, seg_sum[pair_ent], 1.0)
    # cumulative share within each entity's segment, offset by the entity id: one
    # globally sorted key array for every item's lookup
    starts = np.concatenate([[0], np.cumsum(seg_cnt)[:-1]])
    csum = np.cumsum(frac)
    seg_base = np.concatenate([[0.0], csum])[starts[pair_ent]]
    within = csum - seg_base
    last = np.concatenate([pair_ent[1:] != pair_ent[:-1], [True]]) if len(pair_ent) else np.zeros(0, bool)
    within[last] = 1.0  # exact 1 at each segment end (guards rounding)
    keys = pair_ent.astype(np.float64) + within
    u = rng.random(len(owner))
    pick = np.searchsorted(keys, owner.astype(np.float64) + u, side="right")
    has_holder = seg_cnt[owner] > 0 if len(owner) else np.zeros(0, bool)
    pick = np.minimum(pick, max(len(keys) - 1, 0))
    assigned = np.where(has_holder, pair_cli[pick] if len(keys) else -1, -1)
    if cover == "dealt" or not len(keys):
        return [torch.from_numpy(np.nonzero(assigned == c)[0]) for c in range(C)]
    # (entity, holder) pairs the dealing left empty although the entity has items
    item_count = np.bincount(owner, minlength=n_ent)
    dealt_pairs = np.bincount(pick[has_holder], minlength=len(pair_ent)) > 0
    empty = np.nonzero(~dealt_pairs & (item_count[pair_ent] > 0))[0]
    by_owner = np.argsort(owner, kind="stable")
    first = np.concatenate([[0], np.cumsum(item_count)[:-1]])
    ent = pair_ent[empty]
    copies = by_owner[first[ent] + np.minimum((rng.random(len(empty)) * item_count[ent]).astype(np.int64),
                                              item_count[ent] - 1)]
    copy_cli = pair_cli[empty]
    return [torch.from_numpy(np.union1d(np.nonzero(assigned == c)[0], copies[copy_cli == c]).astype(np.int64))
            for c in range(C)]


def client_item_features(item_feats: Tensor, item_entity: Tensor, held: Tensor, entities: Tensor) -> tuple[Tensor, Tensor]:
    """Mean of the held items per client entity: ``([n_c, d] float32, [n_c] has-any bool)``.

    ``entities`` are the client's sorted global entity ids; held items of entities the
    client does not hold are ignored.
    """
    n = len(entities)
    x = item_feats[held].float()
    own = item_entity[held]
    loc = torch.searchsorted(entities, own).clamp_max(max(n - 1, 0))
    ok = entities[loc] == own if n else torch.zeros(len(own), dtype=torch.bool)
    out = torch.zeros(n, item_feats.shape[1], dtype=torch.float32)
    cnt = torch.zeros(n, dtype=torch.float32)
    out.index_add_(0, loc[ok], x[ok])
    cnt.index_add_(0, loc[ok], torch.ones(int(ok.sum())))
    has = cnt > 0
    out[has] /= cnt[has].unsqueeze(1)
    return out, has


def bernoulli_availability(num_entities: int, num_modalities: int, rate: float, generator: torch.Generator) -> Tensor:
    """``[n, M]`` bool, each entry independently True with probability ``rate``."""
    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"availability rate must be in [0, 1], got {rate}")
    return torch.rand(num_entities, num_modalities, generator=generator) < rate


def effective_rates(natural: Tensor, rate: float) -> Tensor:
    """``[M]`` keep-probabilities that make ``rate`` the share of entities holding each
    modality, given which entities were dealt an item (``natural`` ``[n, M]``): rate /
    holding rate, capped at 1 (a client dealt too few items gets all it holds)."""
    holding = natural.float().mean(0) if natural.numel() else torch.zeros(natural.shape[1])
    return torch.where(holding > 0, (rate / holding.clamp_min(1e-12)).clamp(max=1.0), torch.zeros_like(holding))


def fill_unavailable(x: Tensor, available: Tensor, mode: str, generator: torch.Generator) -> Tensor:
    """Replace rows where ``available`` is False. ``random``: Gaussian noise with the
    per-dimension mean and std of the available rows (N(0, 1) when none is available),
    so a filled row is plausible in scale but carries no information; ``zeros``: 0."""
    out = x.clone()
    miss = ~available
    if not bool(miss.any()):
        return out
    if mode == "zeros":
        out[miss] = 0.0
        return out
    if mode != "random":
        raise ConfigError(f"fill must be 'random' or 'zeros', got '{mode}'")
    if int(available.sum()) >= 2:
        mu, sd = x[available].mean(0), x[available].std(0).clamp_min(1e-6)
    else:
        mu, sd = torch.zeros(x.shape[1]), torch.ones(x.shape[1])
    noise = torch.randn(int(miss.sum()), x.shape[1], generator=generator)
    out[miss] = noise * sd + mu
    return out


@dataclass
class ClientModalities:
    """One client's entity features (already filled where unavailable) and masks, rows
    aligned with the client's sorted ``entities``."""

    cid: int
    entities: Tensor
    features: dict[str, Tensor]
    available: Tensor       # [n_c, M] bool: natural & simulated availability
    natural: Tensor         # [n_c, M] bool: the client holds >= 1 item
    items: dict[str, Tensor]  # modality -> held item indices
    modalities: list[str] = field(default_factory=list)


def build_client_modalities(
    dataset: KGDataset,
    partition: KGPartition,
    alpha: float = 0.1,
    partitioned: bool = True,
    rate: float = 0.5,
    fill: str = "random",
    seed: int = 0,
    modalities: Sequence[str] | None = None,
    availability: str = "nominal",
    cover: str = "every_holder",
) -> list[ClientModalities]:
    """Deal items, average them per client entity, draw Bernoulli availability per
    (client, entity, modality) and fill what is unavailable. Seeds are derived per
    modality and per client, so adding a client or modality does not reshuffle others.

    ``availability``: ``nominal`` keeps each dealt entity's modality with probability r,
    so a client holds it for r x (its item-holding rate) of its entities; ``effective``
    raises the probability to r / holding rate per (client, modality), capped at 1, so the
    share is r wherever enough entities were dealt an item (see ``effective_rates``).
    ``cover``: see ``deal_items``."""
    mods = list(modalities) if modalities is not None else dataset.modalities
    ents = [c.entities for c in partition.clients]
    held = {m: deal_items(dataset.item_entity[m], ents, alpha, partitioned, seed=seed * 1000 + i, cover=cover)
            for i, m in enumerate(mods)}
    out = []
    for c, client in enumerate(partition.clients):
        gen = torch.Generator().manual_seed(seed * 7919 + c + 1)
        feats: dict[str, Tensor] = {}
        natural = torch.zeros(len(client.entities), len(mods), dtype=torch.bool)
        for j, m in enumerate(mods):
            x, has = client_item_features(dataset.item_feats[m], dataset.item_entity[m], held[m][c], client.entities)
            feats[m], natural[:, j] = x, has
        if availability == "effective":
            sim = torch.rand(len(client.entities), len(mods), generator=gen) < effective_rates(natural, rate)
        else:
            sim = bernoulli_availability(len(client.entities), len(mods), rate, gen)
        avail = natural & sim
        for j, m in enumerate(mods):
            feats[m] = fill_unavailable(feats[m], avail[:, j], fill, gen)
        out.append(ClientModalities(c, client.entities, feats, avail, natural, {m: held[m][c] for m in mods}, mods))
    return out


# --------------------------------------------------------------------------- similarity


def _pairwise_entity_means(values_per_pair: dict[int, list[float]]) -> float:
    if not values_per_pair:
        return float("nan")
    return float(np.mean([np.mean(v) for v in values_per_pair.values()]))


def cross_client_cosine(entities: Sequence[Tensor], features: Sequence[Tensor], valid: Sequence[Tensor] | None = None) -> float:
    """Mean cross-client cosine similarity of the same entity's features.

    For every pair of clients and every entity both hold (and, with ``valid``, both have a
    real feature for), the cosine of the two feature rows; averaged per entity over its
    client pairs, then over entities (each entity counts once).
    """
    per_entity: dict[int, list[float]] = {}
    for i, j in itertools.combinations(range(len(entities)), 2):
        common, ia, ib = np.intersect1d(entities[i].numpy(), entities[j].numpy(), return_indices=True)
        if not len(common):
            continue
        ia_t, ib_t = torch.from_numpy(ia), torch.from_numpy(ib)
        if valid is not None:
            ok = (valid[i][ia_t] & valid[j][ib_t]).numpy()
            common, ia_t, ib_t = common[ok], ia_t[ok], ib_t[ok]
        cos = torch.nn.functional.cosine_similarity(features[i][ia_t].float(), features[j][ib_t].float(), dim=1)
        for e, v in zip(common.tolist(), cos.tolist()):
            per_entity.setdefault(e, []).append(v)
    return _pairwise_entity_means(per_entity)


def text_token_sets(texts: Sequence[str], item_entity: Tensor, held: Tensor) -> dict[int, set[str]]:
    """Entity -> set of lower-cased word tokens over the text items a client holds."""
    out: dict[int, set[str]] = {}
    own = item_entity[held].tolist()
    for idx, e in zip(held.tolist(), own):
        out.setdefault(e, set()).update(t.lower() for t in _TOKEN.findall(texts[idx]))
    return out


def item_id_sets(item_entity: Tensor, held: Tensor) -> dict[int, set[int]]:
    """Entity -> set of item indices a client holds."""
    out: dict[int, set[int]] = {}
    for idx, e in zip(held.tolist(), item_entity[held].tolist()):
        out.setdefault(e, set()).add(idx)
    return out


def cross_client_jaccard(entities: Sequence[Tensor], sets: Sequence[dict[int, set]], skip_empty: bool = True) -> float:
    """Mean cross-client Jaccard similarity ``|A & B| / |A | B|`` of the same entity's sets.

    With ``skip_empty`` (default) only pairs where both clients hold something for the
    entity count, matching ``cross_client_cosine`` with ``valid`` masks (similarity of
    features that exist); otherwise a pair where one side is empty counts as 0 and only
    pairs where both are empty are skipped. Averaged per entity, then over entities. With
    token sets of text items this is the paper's textual similarity; with item-id sets it
    measures overlap of the dealt items themselves (0 under exclusive dealing, 1 when
    items are not partitioned).
    """
    per_entity: dict[int, list[float]] = {}
    for i, j in itertools.combinations(range(len(entities)), 2):
        common = np.intersect1d(entities[i].numpy(), entities[j].numpy())
        for e in common.tolist():
            a, b = sets[i].get(e, set()), sets[j].get(e, set())
            union = len(a | b)
            if union == 0 or (skip_empty and (not a or not b)):
                continue
            per_entity.setdefault(e, []).append(len(a & b) / union)
    return _pairwise_entity_means(per_entity)
