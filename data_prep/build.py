"""Build the federated artifact of a run: dataset -> partition -> missingness -> splits -> clients.

The expensive, seed-dependent part (who holds which node, which modality is available,
which node is train/val/test) is saved once as a small artifact keyed by a content hash,
so every algorithm of a suite cell sees exactly the same federation. Features are never
stored in the artifact: they are sliced from the dataset and masked at build time, and an
unavailable entry always holds the fill value (zeros, noise or a client mean), never the
true value.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tabulate import tabulate

import data_prep.datasets.synthetic  # noqa: F401  (registers the built-in components)
import data_prep.missing  # noqa: F401
import data_prep.partition.dirichlet_label  # noqa: F401
import data_prep.partition.iid  # noqa: F401
import data_prep.partition.louvain  # noqa: F401
from benchmark import registry as R
from benchmark.config import RunConfig
from benchmark.contracts import check_graph
from benchmark.errors import ConfigError, warn_rebuild
from benchmark.federation import ClientData, ClientIndex, FederatedData, GraphDataset, PartitionResult, register_builder
from data_prep.artifact import (
    ARTIFACT_VERSION,
    artifact_keys,
    artifact_path,
    component_params,
    plain,
    read_cached,
    resolve_component,
    save_atomic,
)
from data_prep.component_kinds import component_kind
from data_prep.normalize import NORMALIZATIONS, conditioned_features
from benchmark.seeding import seeded_rng
from data_prep.partition import owner_array

FILLS = ("zeros", "random", "mean")


# --------------------------------------------------------------------------- components


def _check_run(cfg: RunConfig) -> None:
    """The run-level checks the builder relies on (also done by config validation)."""
    if cfg.partition.num_clients < 1:
        raise ConfigError(f"partition.num_clients must be >= 1, got {cfg.partition.num_clients}")
    fr = (cfg.split.train, cfg.split.val, cfg.split.test)
    if any(not 0.0 <= f <= 1.0 for f in fr) or abs(sum(fr) - 1.0) > 1e-6:
        raise ConfigError(f"split fractions must be in [0, 1] and sum to 1, got {fr}")
    if cfg.dataset.normalize not in NORMALIZATIONS:
        raise ConfigError(f"dataset.normalize must be one of {', '.join(NORMALIZATIONS)}, got '{cfg.dataset.normalize}'")
    if cfg.missing.fill not in FILLS:
        raise ConfigError(f"missing.fill must be zeros, random or mean, got '{cfg.missing.fill}'")


def load_artifact(path: Path, num_nodes: int, num_modalities: int) -> dict[str, Any] | None:
    """A cached artifact, or None when absent, unreadable or not matching the dataset."""
    if not path.is_file():
        return None
    try:
        art = read_cached(path)
    except Exception as e:  # a truncated or foreign file is rebuilt, not trusted
        warn_rebuild(path, f"is unreadable ({type(e).__name__})")
        return None
    try:
        ok = (
            art.get("version") == ARTIFACT_VERSION
            and tuple(art["available"].shape) == (num_nodes, num_modalities)
            and all(art[k].shape == (num_nodes,) for k in ("train_mask", "val_mask", "test_mask"))
            and sum(int(ids.numel()) for ids in art["clients"]) + int(art["dropped_nodes"]) == num_nodes
        )
    except (AttributeError, KeyError, TypeError):
        ok = False
    return art if ok else None


# --------------------------------------------------------------------------- splits


def split_masks(
    partition: PartitionResult, dataset: GraphDataset, fractions: tuple[float, float, float], seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-client train/val/test masks [N], stratified by label within every client.

    A dataset with its own global split keeps it. Otherwise every (client, class) group is
    shuffled and its members are placed at ``(rank + offset) / size`` in [0, 1) with a
    random offset per group, then cut at the split fractions: every group follows the
    fractions in expectation, even groups of one or two nodes.
    """
    n = dataset.num_nodes
    owner = owner_array(partition.clients, n)
    held = torch.from_numpy(owner >= 0)
    if dataset.train_mask is not None:
        empty = torch.zeros(n, dtype=torch.bool)
        masks = [m if m is not None else empty for m in (dataset.train_mask, dataset.val_mask, dataset.test_mask)]
        return tuple(m.bool() & held for m in masks)  # type: ignore[return-value]
    rng = seeded_rng(seed, "split")
    label = dataset.y.numpy().astype(np.int64) if dataset.y is not None else np.zeros(n, dtype=np.int64)
    num_labels = int(label.max()) + 1 if n else 1
    group = (owner + 1) * num_labels + label
    order = np.lexsort((rng.random(n), group))
    sizes = np.bincount(group, minlength=int(group.max()) + 1)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - start[group[order]]
    offset = rng.random(sizes.size)
    pos = (rank + offset[group]) / np.maximum(sizes[group], 1)
    train_f, val_f, _ = fractions
    train = pos < train_f
    val = (pos >= train_f) & (pos < train_f + val_f)
    test = ~(train | val)
    return tuple(torch.from_numpy(m) & held for m in (train, val, test))  # type: ignore[return-value]


# --------------------------------------------------------------------------- features


def masked_features(
    dataset: GraphDataset, available: torch.Tensor, owner: np.ndarray, fill: str, seed: int,
    train_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Every modality with unavailable rows replaced by the fill value (never the true one).

    ``mean`` uses each client's own available training rows (``train_mask``; zeros where a
    client has none; nodes of no client use the mean of every training row), so no
    validation or test row shapes a fill; ``random`` draws standard normal values from a
    generator seeded by the run seed, the same for the clients and the pooled view.
    """
    out: dict[str, torch.Tensor] = {}
    num_clients = int(owner.max()) + 1 if owner.size else 0
    owner_t = torch.from_numpy(owner)
    fit = train_mask if train_mask is not None else torch.ones(owner.size, dtype=torch.bool)
    for j, m in enumerate(dataset.modalities):
        x = dataset.features[m].clone()
        miss = ~available[:, j]
        if not bool(miss.any()):
            out[m] = x
            continue
        if fill == "zeros":
            x[miss] = 0
        elif fill == "random":
            gen = torch.Generator().manual_seed(int(seeded_rng(seed, f"fill/{m}").integers(2**62)))
            x[miss] = torch.randn(int(miss.sum()), x.shape[1], generator=gen, dtype=torch.float32).to(x.dtype)
        else:
            for cid in range(-1, num_clients):
                rows = owner_t == cid
                have, lack = rows & ~miss & fit, rows & miss
                if not bool(lack.any()):
                    continue
                pool = have if cid >= 0 else ~miss & fit
                mean = x[pool].mean(0) if bool(pool.any()) else torch.zeros(x.shape[1], dtype=x.dtype)
                x[lack] = mean
        out[m] = x
    return out


def shuffled_content(dataset: GraphDataset, seed: int) -> dict[str, torch.Tensor]:
    """Each modality's rows permuted across the nodes that hold it, independently per modality
    (``missing.content: shuffle``).

    The structure-only control of the paired tasks: every feature is still a real row of its
    modality, but a node's image and text (visual and acoustic) now come from two unrelated
    nodes, so no content links a query to its true partner. A retrieval or matching score
    above chance is then the graph's doing: both views of a node share its neighbourhood.
    Partition, masks and splits are untouched (the artifact is the same).
    """
    out: dict[str, torch.Tensor] = {}
    for j, m in enumerate(dataset.modalities):
        x = dataset.features[m]
        holders = torch.nonzero(dataset.available[:, j]).flatten()
        perm = torch.from_numpy(seeded_rng(seed, f"shuffle/{m}").permutation(holders.numel()))
        shuffled = x.clone()
        shuffled[holders] = x[holders[perm]]
        out[m] = shuffled
    return out


# --------------------------------------------------------------------------- clients


def _client_data(
    cid: int,
    ids: torch.Tensor,
    features: dict[str, torch.Tensor],
    available: torch.Tensor,
    edge_index: torch.Tensor,
    boundary: torch.Tensor,
    dataset: GraphDataset,
    masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> ClientData:
    return ClientData(
        cid=cid,
        global_ids=ids,
        features={m: x[ids].contiguous() for m, x in features.items()},
        available=available[ids].contiguous(),
        edge_index=edge_index,
        y=None if dataset.y is None else dataset.y[ids].clone(),
        train_mask=masks[0][ids].clone(),
        val_mask=masks[1][ids].clone(),
        test_mask=masks[2][ids].clone(),
        num_classes=dataset.num_classes,
        boundary_edges=boundary,
    )


def feature_graph(dataset: GraphDataset, available: torch.Tensor) -> GraphDataset:
    """The dataset with its kNN graph rebuilt from the rows each node still holds.

    A dataset whose graph is a kNN over one modality's features (``meta["feature_graph"] =
    {"modality", "k"}``, e.g. Flickr30k) would otherwise carry a masked row's true value in
    its edges: a node keeps the neighbours its hidden image chose, and message passing
    hands that image back. Here only observed rows get or give neighbours, after masking
    (and after ``missing.content: shuffle``, so shuffled content draws its own graph). The
    partition is still computed on the loader's graph: it decides which client holds a
    node, and no feature value reaches a client through it.
    """
    spec = dataset.meta.get("feature_graph") if isinstance(dataset.meta, dict) else None
    if not spec:
        return dataset
    from data_prep.datasets.sources import knn_pairs, undirected_edge_index

    m = dataset.modalities.index(spec["modality"])
    x = dataset.features[spec["modality"]].numpy()
    src, dst = knn_pairs(x, int(spec["k"]), valid=available[:, m].numpy())
    return dataclasses.replace(dataset, edge_index=undirected_edge_index(src, dst, dataset.num_nodes))


def client_edges(
    edge_index: torch.Tensor, owner: np.ndarray, clients: list[ClientIndex]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For every client: (local induced edge_index, boundary edges as (local idx, remote global id))."""
    ei = edge_index.numpy()
    n = owner.size
    local = np.full(n, -1, dtype=np.int64)
    for c in clients:
        ids = c.node_ids.numpy()
        local[ids] = np.arange(ids.size)
    src_owner = owner[ei[0]]
    order = np.argsort(src_owner, kind="stable")
    bounds = np.searchsorted(src_owner[order], np.arange(len(clients) + 1))
    out = []
    for cid in range(len(clients)):
        sel = order[bounds[cid] : bounds[cid + 1]]
        src, dst = ei[0, sel], ei[1, sel]
        dst_owner = owner[dst]
        inside = dst_owner == cid
        cross = (dst_owner != cid) & (dst_owner >= 0)
        local_ei = torch.from_numpy(np.stack([local[src[inside]], local[dst[inside]]]))
        boundary = torch.from_numpy(np.stack([local[src[cross]], dst[cross]]))
        out.append((local_ei, boundary))
    return out


# --------------------------------------------------------------------------- main entry


@register_builder
def build_federation(cfg: RunConfig) -> FederatedData:
    """Load the dataset, partition it, simulate missingness, split, and build every client.

    All options are validated before anything is loaded or written; a cached artifact with
    the same hash is reused, otherwise it is computed and written atomically.
    """
    _check_run(cfg)
    ds_cls, ds_cfg = resolve_component(R.DATASETS, cfg.dataset, "dataset")
    resolve_component(R.PARTITIONERS, cfg.partition, "partition")  # every option checked before any load
    resolve_component(R.MASKERS, cfg.missing, "missing")
    root = Path(cfg.dataset.root) if cfg.dataset.root else None
    dataset = ds_cls(ds_cfg).load(root)
    kind = getattr(type(dataset), "kind", None)
    if not isinstance(kind, str) or kind not in R.FEDERATION_BUILDERS:  # one line naming the loader
        check_graph(f"dataset '{cfg.dataset.name}' ({ds_cls.__name__}.load)", dataset)
    return R.FEDERATION_BUILDERS.get(kind)(cfg, dataset, ds_cls)


@R.FEDERATION_BUILDERS.register("graph")
def build_graph_federation(cfg: RunConfig, dataset: GraphDataset, loader: type) -> FederatedData:
    """Partition a graph, simulate missingness, split, and build every client (cached by hash)."""
    part_cls, part_cfg = resolve_component(R.PARTITIONERS, cfg.partition, "partition")
    mask_cls, mask_cfg = resolve_component(R.MASKERS, cfg.missing, "missing")
    ds_cls = loader
    for what, cls, section in (("partition", part_cls, cfg.partition), ("missing", mask_cls, cfg.missing)):
        if component_kind(cls) != "graph":  # a KG or AMFL component: it has no graph method to call
            only = getattr(cls, "only_for", f"{component_kind(cls)} datasets")
            raise ConfigError(f"{what} '{section.name}' applies to {only}; dataset '{cfg.dataset.name}' is a graph")
    check_graph(f"dataset '{cfg.dataset.name}' ({ds_cls.__name__}.load)", dataset)  # one line, not an IndexError later
    n, mods = dataset.num_nodes, dataset.modalities
    if cfg.partition.num_clients > n:
        raise ConfigError(
            f"partition.num_clients ({cfg.partition.num_clients}) exceeds the {n} nodes of dataset '{dataset.name}'"
        )
    key, recipe = artifact_keys(dataset.fingerprint(), cfg, component_params(part_cfg), component_params(mask_cfg))
    path = artifact_path(cfg, key)
    art = load_artifact(path, n, len(mods))
    reused = art is not None
    if art is None:
        partition = part_cls(part_cfg, cfg.seed).split(dataset, cfg.partition.num_clients)
        masker = mask_cls(mask_cfg, cfg.seed)
        available = masker.apply(dataset, partition).bool()
        if tuple(available.shape) != (n, len(mods)):
            raise ValueError(
                f"masker {cfg.missing.name!r} returned shape {tuple(available.shape)}, want {(n, len(mods))}"
            )
        available &= dataset.available.bool()
        train, val, test = split_masks(partition, dataset, (cfg.split.train, cfg.split.val, cfg.split.test), cfg.seed)
        art = {
            "version": ARTIFACT_VERSION,
            "hash": key,
            "recipe": recipe,
            "clients": [c.node_ids for c in partition.clients],
            "available": available,
            "train_mask": train,
            "val_mask": val,
            "test_mask": test,
            "dropped_edges": int(partition.dropped_edges),
            "dropped_nodes": int(partition.dropped_nodes),
            "partition_info": plain(partition.info),
            "missing_info": plain(getattr(masker, "info", {})),
        }
        save_atomic(art, path)
    return assemble(dataset, art, cfg, key, recipe, reused)


def assemble(
    dataset: GraphDataset, art: dict[str, Any], cfg: RunConfig, key: str, recipe: str, reused: bool = False
) -> FederatedData:
    """Turn a dataset plus an artifact into clients, the pooled view and statistics."""
    clients_idx = [ClientIndex(node_ids=ids.long()) for ids in art["clients"]]
    n = dataset.num_nodes
    owner = owner_array(clients_idx, n)
    available: torch.Tensor = art["available"].bool()
    masks = (art["train_mask"].bool(), art["val_mask"].bool(), art["test_mask"].bool())
    if cfg.missing.content == "shuffle":
        dataset = dataclasses.replace(dataset, features=shuffled_content(dataset, cfg.seed))
    dataset = feature_graph(dataset, available)
    how = cfg.dataset.normalize
    if how == "standard" and isinstance(dataset.meta, dict) and dataset.meta.get("standardized"):
        how = "none"  # a generator whose rows are standardized by construction (data_prep/normalize.py)
    dataset = dataclasses.replace(
        dataset, features=conditioned_features(dataset.features, available, masks[0], owner, how))
    features = masked_features(dataset, available, owner, cfg.missing.fill, cfg.seed, masks[0])

    edges = client_edges(dataset.edge_index, owner, clients_idx)
    clients = [
        _client_data(cid, c.node_ids, features, available, local_ei, boundary, dataset, masks)
        for cid, (c, (local_ei, boundary)) in enumerate(zip(clients_idx, edges))
    ]
    pooled = dataclasses.replace(_client_data(
        -1, torch.arange(n), features, available, dataset.edge_index.clone(), torch.empty(2, 0, dtype=torch.long),
        dataset, masks,
    ), members=clients)
    rows = [client_row(c, dataset) for c in clients]
    stats = {
        "clients": rows,
        "dropped_edges": int(art["dropped_edges"]),
        "dropped_nodes": int(art["dropped_nodes"]),
        "artifact_hash": key,
        "artifact_recipe": recipe,
        "artifact_reused": reused,
        "partition_info": art.get("partition_info", {}),
        "missing_info": art.get("missing_info", {}),
        "dataset": dataset.name,
        "num_nodes": n,
        "num_edges": dataset.num_edges,
    }
    return FederatedData(
        clients=clients,
        modalities=dataset.modalities,
        feature_dims=dataset.feature_dims,
        num_classes=dataset.num_classes,
        artifact_hash=key,
        num_global_nodes=n,
        pooled=pooled,
        stats=stats,
    )


def client_row(c: ClientData, dataset: GraphDataset) -> dict[str, Any]:
    """One client's line of the statistics table."""
    hist: list[int] = []
    if c.y is not None and dataset.num_classes > 0:
        hist = torch.bincount(c.y, minlength=dataset.num_classes).tolist()
    avail = c.available.float().mean(0) if c.num_nodes else torch.zeros(len(c.modalities))
    return {
        "cid": c.cid,
        "nodes": c.num_nodes,
        "edges": int(c.edge_index.shape[1] // 2),
        "boundary_edges": int(c.boundary_edges.shape[1]),
        "train": int(c.train_mask.sum()),
        "val": int(c.val_mask.sum()),
        "test": int(c.test_mask.sum()),
        "labels": hist,
        "available": {m: round(float(a), 4) for m, a in zip(c.modalities, avail)},
    }


# --------------------------------------------------------------------------- CLI helpers


def prepare_stats_json(fed: FederatedData) -> dict[str, Any]:
    """What `prepare --json` prints: artifact ids, totals and the per-client rows."""
    s = fed.stats
    return {
        "dataset": s.get("dataset"),
        "artifact_hash": fed.artifact_hash,
        "artifact_recipe": s.get("artifact_recipe"),
        "num_clients": fed.num_clients,
        "num_nodes": fed.num_global_nodes,
        "num_edges": s.get("num_edges"),
        "num_classes": fed.num_classes,
        "modalities": list(fed.modalities),
        "feature_dims": dict(fed.feature_dims),
        "dropped_edges": s.get("dropped_edges"),
        "dropped_nodes": s.get("dropped_nodes"),
        "partition_info": s.get("partition_info", {}),
        "missing_info": s.get("missing_info", {}),
        "clients": s.get("clients", []),
    }


def prepare_stats_table(fed: FederatedData) -> str:
    """A grid table of the clients, with the artifact's totals underneath."""
    headers = ["client", "nodes", "edges", "train", "val", "test"] + [f"avail {m}" for m in fed.modalities] + ["labels"]
    body = []
    for r in fed.stats.get("clients", []):
        body.append(
            [r["cid"], r["nodes"], r["edges"], r["train"], r["val"], r["test"]]
            + [f"{r['available'].get(m, 0.0):.2f}" for m in fed.modalities]
            + ["/".join(str(v) for v in r["labels"])]
        )
    table = tabulate(body, headers=headers, tablefmt="grid")
    s = fed.stats
    footer = (
        f"dataset {s.get('dataset')}: {fed.num_global_nodes} nodes, {s.get('num_edges')} edges, "
        f"{fed.num_clients} clients; dropped edges {s.get('dropped_edges')}, dropped nodes {s.get('dropped_nodes')}; "
        f"artifact {fed.artifact_hash} (recipe {s.get('artifact_recipe')})"
    )
    extra = "".join(f"\n{line}" for line in s.get("summary", []))  # e.g. the KG track's Table II row
    return f"{table}\n{footer}{extra}"
