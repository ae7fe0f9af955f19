"""Synthetic multimodal graph: a degree-corrected SBM with two complementary modalities.

Why synthetic: it is the one dataset whose difficulty we control (homophily, degree
heterogeneity, class imbalance, how much each modality knows), so missing-modality and
federation effects can be shown on purpose and at any scale, offline.

Structure. Every class is cut into a few communities. Each node has a degree propensity
``theta`` (power law) and its own homophily ``h_i`` (Beta around ``homophily``). Exactly
``round(homophily * M)`` edges are intra-class: both ends are drawn proportionally to
``theta * h``, inside one community with probability ``community_strength``. The other
edges join a source drawn proportionally to ``theta * (1 - h)`` to a node of a random other
class, drawn the same way. So the edge homophily is ``homophily`` exactly, while nodes
with a low ``h_i`` sit mostly among other classes, where neighbours mislead a GNN, as in
real graphs whose local homophily is uneven.

Features. Each node has a latent made of three parts:

* a *shared* part ``s = mu_s[y] + e`` seen (through independent view noise) by both
  modalities: it carries a weak full-class signal and is what lets one modality, or the
  neighbours, recover a missing one;
* a *text-private* part that only separates a coarse grouping of the classes
  (classes ``{0,1}, {2,3}, ...``: group ``y // 2``);
* an *image-private* part that separates a different grouping (``{0}, {1,2}, {3,4}, ...``:
  group ``(y + 1) // 2``).

Either modality alone tells its coarse group but the class within the group only weakly;
the two groupings intersect in single classes, so both modalities together identify the
class much better. Each modality's view of the latent goes through its own fixed random
two-layer network (tanh for text, a shifted ReLU for image), then isotropic noise is added.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset
from benchmark.registry import DATASETS
from benchmark.seeding import spawned_rngs

# Latent geometry, tuned so that at the defaults (60/20/20 split) a linear probe or MLP gets
# roughly 0.5-0.6 on text alone or image alone and ~0.8 on both, and a 2-layer GCN on both ~0.9.
SHARED_SEP = 0.6     # norm of the shared class means (full-class signal, weak)
PRIVATE_SEP = 1.8    # norm of the coarse-group means in each private part
VIEW_NOISE = 0.5     # independent noise each modality adds to the shared part
HIDDEN = 128         # width of the random feature networks
_MAX_EDGE_ROUNDS = 60


@DATASETS.register("synthetic")
class SyntheticGraph:
    """Degree-corrected SBM with class-conditional text (768-d) and image (512-d) features."""

    @dataclass
    class Config:
        num_nodes: int = field(default=2000, metadata={"help": "number of nodes", "min": 1, "max": 50_000_000})
        num_classes: int = field(default=5, metadata={"help": "number of node classes (>= 2)", "min": 2, "max": 100_000})
        avg_degree: float = field(default=10.0, metadata={"help": "mean node degree", "positive": True})
        homophily: float = field(
            default=0.75, metadata={"help": "fraction of edges joining two nodes of the same class, in [0, 1]", "probability": True}
        )
        homophily_concentration: float = field(
            default=1.0,
            metadata={"help": "Beta concentration of per-node homophily (small = some nodes sit among other classes)", "positive": True},
        )
        communities_per_class: int = field(
            default=4, metadata={"help": "communities each class is cut into (Louvain finds them)", "min": 1, "max": 100_000}
        )
        community_strength: float = field(
            default=0.7, metadata={"help": "share of same-class edges kept inside one community, in [0, 1]", "probability": True}
        )
        degree_exponent: float = field(
            default=2.5,
            metadata={"help": "power-law exponent of the degree propensities (> 2; larger = more uniform degrees)", "above": 2},
        )
        imbalance: float = field(
            default=1.0, metadata={"help": "size ratio of the largest to the smallest class (>= 1; 1 = balanced)", "min": 1}
        )
        text_dim: int = field(default=768, metadata={"help": "dimension of the text modality", "min": 1, "max": 65_536})
        image_dim: int = field(default=512, metadata={"help": "dimension of the image modality", "min": 1, "max": 65_536})
        latent_dim: int = field(
            default=32, metadata={"help": "latent size: half shared by both modalities, a quarter private to each", "min": 4, "max": 65_536}
        )
        class_sep: float = field(
            default=1.0, metadata={"help": "scale of the class means in the latent (larger = easier task)", "min": 0}
        )
        noise: float = field(default=1.0, metadata={"help": "std of the isotropic noise added to every feature", "min": 0})
        seed: int = field(
            default=0, metadata={"help": "dataset seed: the graph is fixed for a given seed, whatever the run seed", "min": 0, "max": 2**32 - 1}
        )

        def __post_init__(self) -> None:
            if self.num_nodes < 4 * self.num_classes:
                raise ConfigError(
                    f"dataset.num_nodes must be >= 4 * num_classes ({4 * self.num_classes}), got {self.num_nodes}"
                )
            if not self.avg_degree <= (self.num_nodes - 1) / 4:
                raise ConfigError(f"dataset.avg_degree must be <= (num_nodes - 1) / 4, got {self.avg_degree}")

    def __init__(self, cfg: Config | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> GraphDataset:
        """Generate the graph; ``root`` is unused (nothing is read from disk)."""
        c = self.cfg
        # separate streams: changing a graph knob leaves labels and features as they were
        label_rng, graph_rng, feat_rng = spawned_rngs(c.seed, 3)
        y = class_labels(c.num_nodes, c.num_classes, c.imbalance, label_rng)
        comm = community_ids(y, c.communities_per_class, graph_rng)
        theta = degree_propensities(c.num_nodes, c.degree_exponent, c.avg_degree, graph_rng)
        h = node_homophily(c.num_nodes, c.homophily, c.homophily_concentration, graph_rng)
        edges = dc_sbm_edges(y, comm, theta, h, c.avg_degree, c.homophily, c.community_strength, graph_rng)
        text, image = modality_features(y, c, feat_rng)
        edge_index = torch.from_numpy(np.concatenate([edges, edges[::-1]], axis=1))
        return GraphDataset(
            name="synthetic",
            features={"text": torch.from_numpy(text), "image": torch.from_numpy(image)},
            edge_index=edge_index,
            y=torch.from_numpy(y),
            num_classes=c.num_classes,
            # rows are centred and unit-scale by construction: dataset.normalize: standard leaves
            # them so (per-client z-scoring under label skew would remove label signal)
            meta={"generator": "dc-sbm", "config": asdict(c), "community": torch.from_numpy(comm),
                  "standardized": True},
        )


# --------------------------------------------------------------------------- labels and nodes


def class_sizes(n: int, k: int, imbalance: float) -> np.ndarray:
    """Class sizes decaying geometrically from the largest to about ``largest / imbalance``."""
    w = imbalance ** (-np.arange(k) / (k - 1))
    raw = n * w / w.sum()
    sizes = np.maximum(np.floor(raw).astype(np.int64), 1)
    short = n - int(sizes.sum())  # largest-remainder rounding: sizes sum to n exactly
    order = np.argsort(-(raw - np.floor(raw)), kind="stable")
    i = 0
    while short != 0:
        j = order[i % k]
        if short > 0:
            sizes[j] += 1
            short -= 1
        elif sizes[j] > 1:
            sizes[j] -= 1
            short += 1
        i += 1
    return sizes


def class_labels(n: int, k: int, imbalance: float, rng: np.random.Generator) -> np.ndarray:
    """A shuffled label vector with the exact class sizes of :func:`class_sizes`."""
    return rng.permutation(np.repeat(np.arange(k, dtype=np.int64), class_sizes(n, k, imbalance)))


def community_ids(y: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Global community of each node: every class is cut into ``per_class`` random blocks.

    Ids are ``class * per_class + block``, so sorting by community also sorts by class.
    Block sizes vary (Dirichlet(2) shares) so that communities are not all alike.
    """
    comm = np.empty_like(y)
    for c in range(int(y.max()) + 1):
        idx = rng.permutation(np.flatnonzero(y == c))
        m = min(per_class, idx.size)
        cuts = np.round(np.cumsum(rng.dirichlet(np.full(m, 2.0)))[:-1] * idx.size).astype(np.int64)
        block = np.searchsorted(cuts, np.arange(idx.size), side="right")
        comm[idx] = c * per_class + block
    return comm


def degree_propensities(n: int, exponent: float, avg_degree: float, rng: np.random.Generator) -> np.ndarray:
    """Pareto propensities (mean 1), capped at the structural cutoff to limit multi-edges."""
    theta = (1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0))
    cap = math.sqrt(n * avg_degree) / avg_degree * theta.mean()
    theta = np.minimum(theta, max(cap, 1.0))
    return theta / theta.mean()


def node_homophily(n: int, mean: float, concentration: float, rng: np.random.Generator) -> np.ndarray:
    """Per-node homophily ~ Beta(mean * c, (1 - mean) * c), kept off exact 0 and 1."""
    eps = 1e-3
    m = min(max(mean, eps), 1 - eps)
    return np.clip(rng.beta(m * concentration, (1 - m) * concentration, size=n), eps, 1 - eps)


# --------------------------------------------------------------------------- edges


class _GroupSampler:
    """Draws nodes of a given group with probability proportional to a weight, vectorized."""

    def __init__(self, groups: np.ndarray, weight: np.ndarray, size: int = 0) -> None:
        self.order = np.argsort(groups, kind="stable")
        counts = np.bincount(groups, minlength=size)
        self.end = np.cumsum(counts)
        self.start = self.end - counts
        self.cum = np.concatenate([[0.0], np.cumsum(weight[self.order])])

    def mass(self) -> np.ndarray:
        """Total weight of every group."""
        return self.cum[self.end] - self.cum[self.start]

    def draw(self, group: np.ndarray, u: np.ndarray) -> np.ndarray:
        lo, hi = self.cum[self.start[group]], self.cum[self.end[group]]
        pos = np.searchsorted(self.cum, lo + u * (hi - lo), side="right") - 1
        return self.order[np.clip(pos, self.start[group], self.end[group] - 1)]


def _distinct_pairs(draw: Callable[[int], tuple[np.ndarray, np.ndarray]], target: int, n: int) -> np.ndarray:
    """Keys ``i * n + j`` (i < j) of the first ``target`` distinct non-loop pairs ``draw`` yields."""
    keys = np.empty(0, dtype=np.int64)
    for _ in range(_MAX_EDGE_ROUNDS):
        missing = target - keys.size
        if missing <= 0:
            break
        src, dst = draw(int(missing * 1.3) + 64)
        ok = src != dst
        lo, hi = np.minimum(src[ok], dst[ok]), np.maximum(src[ok], dst[ok])
        merged = np.concatenate([keys, lo.astype(np.int64) * n + hi])
        _, first = np.unique(merged, return_index=True)
        keys = merged[np.sort(first)]
    if keys.size < target:
        raise ConfigError(f"could not draw {target} distinct edges; lower dataset.avg_degree")
    return keys[:target]


def dc_sbm_edges(
    y: np.ndarray,
    comm: np.ndarray,
    theta: np.ndarray,
    h: np.ndarray,
    avg_degree: float,
    homophily: float,
    community_strength: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Undirected edges [2, M] with i < j, no self-loops, no duplicates (see module doc).

    ``round(homophily * M)`` intra-class and the rest cross-class edges are drawn apart, so
    the edge homophily is exact. Batches are drawn until enough distinct edges exist and
    the first ones in draw order are kept, so the result depends only on the generator.
    """
    n = y.shape[0]
    k = int(y.max()) + 1
    total = int(round(n * avg_degree / 2))
    n_in = int(round(homophily * total))
    w_in, w_out = theta * h, theta * (1.0 - h)
    class_in, comm_in = _GroupSampler(y, w_in, size=k), _GroupSampler(comm, w_in)
    class_out = _GroupSampler(y, w_out, size=k)
    src_in = np.cumsum(w_in) / w_in.sum()
    src_out = np.cumsum(w_out) / w_out.sum()

    def draw_in(b: int) -> tuple[np.ndarray, np.ndarray]:
        src = np.searchsorted(src_in, rng.random(b), side="right").clip(max=n - 1)
        u = rng.random(b)
        in_comm = rng.random(b) < community_strength
        dst = class_in.draw(y[src], u)
        dst[in_comm] = comm_in.draw(comm[src[in_comm]], u[in_comm])
        return src, dst

    # the other class of a cross edge is drawn in proportion to its cross-edge mass
    pair = np.tile(class_out.mass(), (k, 1))
    np.fill_diagonal(pair, 0.0)
    empty_rows = pair.sum(1) <= 0
    pair[empty_rows] = 1.0 - np.eye(k)[empty_rows]
    pair_cum = (np.cumsum(pair / pair.sum(1, keepdims=True), axis=1) + np.arange(k)[:, None]).ravel()

    def draw_out(b: int) -> tuple[np.ndarray, np.ndarray]:
        src = np.searchsorted(src_out, rng.random(b), side="right").clip(max=n - 1)
        row = y[src]
        pos = np.searchsorted(pair_cum, row + rng.random(b), side="right") - row * k
        other = pos.clip(0, k - 1)
        return src, class_out.draw(other, rng.random(b))

    keys = np.sort(np.concatenate([_distinct_pairs(draw_in, n_in, n), _distinct_pairs(draw_out, total - n_in, n)]))
    return np.stack([keys // n, keys % n]).astype(np.int64)


# --------------------------------------------------------------------------- features


def _orthogonal_means(k: int, dim: int, norm: float, rng: np.random.Generator) -> np.ndarray:
    """``k`` means of the given norm, orthonormal directions (hence equidistant) when k <= dim."""
    if k <= dim:
        means = np.linalg.qr(rng.standard_normal((dim, dim)).T)[0][:k]
    else:  # too many for orthogonality: random directions
        means = rng.standard_normal((k, dim))
    return norm * means / np.linalg.norm(means, axis=1, keepdims=True).clip(1e-12)


def _random_mlp(v: np.ndarray, out_dim: int, act: str, rng: np.random.Generator) -> np.ndarray:
    """A fixed random two-layer network (float32); each modality has its own weights and activation."""
    w1 = (rng.standard_normal((v.shape[1], HIDDEN)) / math.sqrt(v.shape[1])).astype(np.float32)
    b1 = (0.5 * rng.standard_normal(HIDDEN)).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, out_dim)) / math.sqrt(HIDDEN)).astype(np.float32)
    hid = v.astype(np.float32) @ w1
    hid += b1
    if act == "tanh":
        np.tanh(hid, out=hid)
    else:
        hid += 0.5
        np.maximum(hid, 0.0, out=hid)
        hid -= 0.5
    out = hid @ w2
    out -= out.mean(0)
    out /= out.std(0).clip(1e-6)
    return out


def modality_features(
    y: np.ndarray, c: "SyntheticGraph.Config", rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Text and image features from the shared and private latent parts (see module doc)."""
    n, k = y.shape[0], c.num_classes
    ds = c.latent_dim // 2
    dp = (c.latent_dim - ds) // 2
    classes = np.arange(k)
    text_groups, image_groups = classes // 2, (classes + 1) // 2
    mu_shared = _orthogonal_means(k, ds, SHARED_SEP * c.class_sep, rng)
    mu_text = _orthogonal_means(int(text_groups.max()) + 1, dp, PRIVATE_SEP * c.class_sep, rng)[text_groups]
    mu_image = _orthogonal_means(int(image_groups.max()) + 1, dp, PRIVATE_SEP * c.class_sep, rng)[image_groups]
    latent_noise = rng.standard_normal((n, ds + 2 * dp))

    shared = mu_shared[y] + latent_noise[:, :ds]
    text_view = np.concatenate(
        [shared + VIEW_NOISE * rng.standard_normal((n, ds)), mu_text[y] + latent_noise[:, ds : ds + dp]], axis=1
    )
    image_view = np.concatenate(
        [shared + VIEW_NOISE * rng.standard_normal((n, ds)), mu_image[y] + latent_noise[:, ds + dp :]], axis=1
    )
    text = _random_mlp(text_view, c.text_dim, "tanh", rng)
    image = _random_mlp(image_view, c.image_dim, "relu", rng)
    for x in (text, image):
        x += np.float32(c.noise) * rng.standard_normal(x.shape, dtype=np.float32)
    return text, image
