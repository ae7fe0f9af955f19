"""Building a FedMKGC client (``benchmark.kg_client.KGClientData``) from global-id triples:
local entity and relation ids, the split masks, the audit's edge list."""

from __future__ import annotations

import torch
from torch import Tensor

from benchmark.kg_client import KGClientData, empty_triples  # the client type lives in the core; built here


def make_kg_client(
    cid: int,
    entities: Tensor,
    relations: Tensor,
    triples: tuple[Tensor, Tensor, Tensor],
    features: dict[str, Tensor],
    available: Tensor,
) -> KGClientData:
    """Turn global-id triples into a ``KGClientData`` with local entity and relation ids.

    ``entities`` and ``relations`` are sorted global ids; every triple must use them.
    """
    entities = entities.long()
    relations = relations.long()
    n = int(entities.numel())

    def local(t: Tensor) -> Tensor:
        t = t.long().contiguous()
        if not t.numel():
            return empty_triples()
        h = torch.searchsorted(entities, t[:, 0].contiguous())
        r = torch.searchsorted(relations, t[:, 1].contiguous())
        tail = torch.searchsorted(entities, t[:, 2].contiguous())
        return torch.stack([h, r, tail], dim=1)

    tr, va, te = (local(t) for t in triples)

    def occurs(t: Tensor) -> Tensor:
        m = torch.zeros(n, dtype=torch.bool)
        if t.numel():
            m[t[:, 0]] = True
            m[t[:, 2]] = True
        return m

    return KGClientData(
        cid=cid,
        global_ids=entities,
        features={m: x.float().contiguous() for m, x in features.items()},
        available=available.bool(),
        edge_index=tr[:, [0, 2]].t().contiguous() if tr.numel() else torch.empty(2, 0, dtype=torch.long),
        y=None,
        train_mask=occurs(tr),
        val_mask=occurs(va),
        test_mask=occurs(te),
        num_classes=0,
        relations=relations,
        train_triples=tr,
        valid_triples=va,
        test_triples=te,
    )
