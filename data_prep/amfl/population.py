"""``amfl_population``: draw an AMFL client population like the paper's (Appendix A).

Clients come in groups by modality combination x fusion x encoder depth. The number of
clients per modality combination follows ``weights`` (largest remainder over
``partition.num_clients``; the default gives every unimodal combination weight 1 and every
multimodal one weight 3, the proportions of Scene and Object AMF); inside a combination
the clients cycle through its (fusion, depth) groups, so group counts differ by at most
one. Each client then draws, from its own seeded stream, an encoder family and width per
modality, its personal label space (``classes_per_client`` of the global classes, in a
random order: relative labels 0..C-1 as in the paper; the paper samples the classes
uniformly, here the least-used classes so far are taken, ties at random, so that a small
source such as the 1,797 8x8 digits fills a population evenly) and its sample count
n_i ~ Normal(mean, std). Samples are dealt without replacement, so no sample belongs to
two clients: a population that needs more samples of a class than the source holds is an
error, not a silent reuse.

Where the paper is silent or differs: every encoder ends at ``out_width`` (so ``sum``
works for any pair, as the paper's adaptors map to one width); MLP encoders vary their
hidden width, attention adaptors use ``out_width`` tokens; the trunk is the paper's
2-layer MLP [64, 32] for everyone (``trunk``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from benchmark.amfl.blocks import BLOCKS
from benchmark.amfl.spec import ArchSpec, BlockSpec
from benchmark.errors import ConfigError
from benchmark.registry import PARTITIONERS
from benchmark.seeding import seeded_rng

@dataclass
class ClientPlan:
    """One drawn client: its architecture, personal classes and samples per split."""

    arch: ArchSpec
    group: str
    classes: list[int]               # global class of each personal label 0..C-1
    samples: dict[str, np.ndarray]   # split -> global sample ids


@dataclass
class Population:
    clients: list[ClientPlan]
    info: dict = field(default_factory=dict)


@PARTITIONERS.register("amfl_population")
class AMFLPopulation:
    """AMFL clients grouped by modality combination x fusion x depth, each with its own architecture, label space and samples."""

    #: the datasets it applies to; the graph builder refuses it with this (the AMFL builder calls
    #: ``plan``, data_prep/amfl/build.py), so it has no graph-partitioner ``split`` at all
    only_for: ClassVar[str] = ("AMFL simulations (av_digits, multiview_digits); graph datasets take dirichlet_label, "
                               "iid or louvain")
    kind: ClassVar[str] = "amfl"  # the AMFL builder calls plan (data_prep/component_kinds.py)

    @dataclass
    class Config:
        modality_sets: list[str] = field(default_factory=list, metadata={
            "help": "modality combinations as '+'-joined sets, e.g. [image, signal, image+signal] (empty: every "
                    "non-empty subset of the data's modalities)"})
        weights: dict[str, float] = field(default_factory=dict, metadata={
            "help": "clients per combination as weights, e.g. {image: 1, image+signal: 3} (empty: 1 per unimodal, "
                    "3 per multimodal combination)", "min": 0.0})
        fusions: list[str] = field(default_factory=lambda: ["avg_align", "concat", "sum", "tensor", "cross_attn"],
                                   metadata={"help": "fusion block kinds multimodal clients cycle through"})
        encoders: list[str] = field(default_factory=lambda: ["mlp", "attn"], metadata={
            "help": "encoder block kinds a client draws from per modality: mlp, attn, or the GNN families gcn, "
                    "sage, gat over the client's subgraph (graph sources only: amfl_graph_digits, amfl_tiktok, "
                    "amfl_fb15k_typing)"})
        depths: list[int] = field(default_factory=lambda: [1, 2], metadata={
            "help": "encoder depths (layers; message-passing hops for a GNN) the groups cycle through", "min": 1, "max": 256})
        widths: list[int] = field(default_factory=lambda: [32, 64], metadata={
            "help": "hidden widths an MLP or GNN encoder draws from", "min": 1, "max": 65_536})
        out_width: int = field(default=32, metadata={"help": "output width of every encoder", "min": 1, "max": 65_536})
        trunk: list[int] = field(default_factory=lambda: [64, 32], metadata={
            "help": "widths of the MLP after the fusion (Appendix A)", "min": 1, "max": 65_536})
        classes_per_client: int = field(default=4, metadata={"help": "size of each personal label space "
                                                                     "(Mnist AMF: 4 of 10)", "min": 2, "max": 100_000})
        label_order: str = field(default="random", metadata={
            "help": "personal label ids: random (the paper: a client's relative labels 0..C-1 follow its own random "
                    "order) or global (in global class order, so clients with the same classes share a label space)",
            "choices": ("random", "global")})
        samples_mean: float = field(default=60.0, metadata={"help": "mean samples per client (all splits)",
                                                            "positive": True})
        samples_std: float = field(default=15.0, metadata={"help": "std of samples per client", "min": 0.0})
        noise: float = field(default=0.1, metadata={"help": "std of client-seeded Gaussian noise on every "
                                                            "feature (the paper's per-client noise, App. A.3)",
                                                    "min": 0.0})

        def __post_init__(self) -> None:
            for name in ("fusions", "encoders", "depths", "widths", "trunk"):
                if not getattr(self, name):
                    raise ConfigError(f"partition.{name} must name at least one value")

    def __init__(self, cfg: "AMFLPopulation.Config | None" = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed

    # ------------------------------------------------------------------ groups
    def combinations(self, modalities: list[str]) -> list[tuple[str, ...]]:
        if not self.cfg.modality_sets:
            return [c for r in range(1, len(modalities) + 1) for c in itertools.combinations(modalities, r)]
        out = []
        for text in self.cfg.modality_sets:
            combo = tuple(m for m in modalities if m in text.split("+"))
            unknown = [m for m in text.split("+") if m not in modalities]
            if unknown:
                raise ConfigError(f"partition.modality_sets names '{unknown[0]}', which the data lacks "
                                  f"(it has: {', '.join(modalities)})")
            out.append(combo)
        return out

    def counts(self, combos: list[tuple[str, ...]], num_clients: int) -> list[int]:
        """Clients per combination: largest remainder of the weights over ``num_clients``."""
        w = {c: (1.0 if len(c) == 1 else 3.0) for c in combos}
        if self.cfg.weights:
            given = {tuple(sorted(name.split("+"))): float(val) for name, val in self.cfg.weights.items()}
            for c in combos:
                w[c] = given.get(tuple(sorted(c)), 0.0)
            extra = set(given) - {tuple(sorted(c)) for c in combos}
            if extra:
                raise ConfigError(f"partition.weights names '{'+'.join(sorted(extra)[0])}', which is not one of "
                                  f"the modality_sets")
        total = sum(w.values())
        if total <= 0:
            raise ConfigError("partition.weights: at least one combination needs a positive weight")
        share = np.array([w[c] / total * num_clients for c in combos])
        n = np.floor(share).astype(int)
        order = np.argsort(-(share - n), kind="stable")
        n[order[: num_clients - n.sum()]] += 1
        return n.tolist()

    def groups(self, combo: tuple[str, ...]) -> list[tuple[str | None, int]]:
        depths = list(self.cfg.depths)
        if len(combo) == 1:
            return [(None, d) for d in depths]
        fusions = list(self.cfg.fusions)
        for f in fusions + list(self.cfg.encoders):
            if f not in BLOCKS:
                from benchmark.errors import unknown

                raise ConfigError("partition 'amfl_population': " + str(unknown("block", f, BLOCKS.names())))
        return [(f, d) for f in fusions for d in depths]

    # ------------------------------------------------------------------ clients
    def _encoder(self, rng: np.random.Generator, depth: int) -> BlockSpec:
        """One modality's encoder: a kind drawn from ``encoders``, a hidden width from
        ``widths`` when the kind takes one; the kind maps depth and widths onto its options."""
        kinds = list(self.cfg.encoders)
        cls = BLOCKS.get(kinds[rng.integers(len(kinds))])
        widths = list(self.cfg.widths)
        width = widths[rng.integers(len(widths))] if cls.draws_width else self.cfg.out_width
        return BlockSpec.make(cls.registry_name, **cls.encoder_options(depth, width, self.cfg.out_width))

    def check_blocks(self, source: Any) -> None:
        """One-line errors for block kinds the population cannot draw: unknown, not an
        encoder (or not a fusion), or a graph encoder on a source without edges."""
        from benchmark.errors import unknown

        for role, names in (("encoder", self.cfg.encoders), ("fusion", self.cfg.fusions)):
            for name in names:
                if name not in BLOCKS:
                    raise ConfigError(f"partition 'amfl_population': {role}s: "
                                      + str(unknown("block", name, BLOCKS.names())))
                if role not in BLOCKS.get(name).roles:
                    raise ConfigError(f"partition 'amfl_population': {role}s names block '{name}', which is not "
                                      f"a{'n' if role == 'encoder' else ''} {role}")
        graph = [k for k in self.cfg.encoders if BLOCKS.get(k).uses_edges]
        if graph and source.num_edges == 0:
            raise ConfigError(f"partition 'amfl_population': encoder '{graph[0]}' is a GNN, but '{source.name}' has "
                              f"no edges (use a graph source such as amfl_graph_digits, amfl_tiktok or "
                              f"amfl_fb15k_typing, or non-graph encoders such as mlp, attn)")

    def draw(self, source: Any, num_clients: int, fractions: tuple[float, float, float]) -> Population:
        """The population over ``source`` (an ``AMFLSource``)."""
        c = self.cfg
        if num_clients < 1:
            raise ConfigError(f"partition.num_clients must be >= 1, got {num_clients}")
        if c.classes_per_client > source.num_classes:
            raise ConfigError(f"partition.classes_per_client ({c.classes_per_client}) exceeds the "
                              f"{source.num_classes} classes of '{source.name}'")
        self.check_blocks(source)
        combos = self.combinations(source.modalities)
        counts = self.counts(combos, num_clients)
        trunk = BlockSpec.make("mlp", widths=list(c.trunk))
        dealer = source.dealer(self.seed)
        used = {k: 0 for k in range(source.num_classes)}
        clients: list[ClientPlan] = []
        group_counts: dict[str, int] = {}
        for combo, count in zip(combos, counts):
            groups = self.groups(combo)
            for j in range(count):
                cid = len(clients)
                rng = seeded_rng(self.seed, f"amfl/client/{cid}")
                fusion, depth = groups[j % len(groups)]
                arch = ArchSpec(tuple((m, self._encoder(rng, depth)) for m in combo),
                                None if fusion is None else BlockSpec.make(fusion), trunk)
                arch.check(BLOCKS)
                group = f"{'+'.join(combo)}|{fusion or '-'}|d{depth}"
                group_counts[group] = group_counts.get(group, 0) + 1
                # the least-used classes so far, ties broken at random: every class is drawn about
                # equally often, so a fixed pool of samples fills the population evenly
                order = np.lexsort((rng.random(source.num_classes), [used[k] for k in range(source.num_classes)]))
                classes = [int(k) for k in rng.permutation(order[:c.classes_per_client])]
                for k in classes:
                    used[k] += 1
                if c.label_order == "global":
                    classes = sorted(classes)
                n = max(3 * c.classes_per_client, int(round(rng.normal(c.samples_mean, c.samples_std))))
                per = [n // len(classes) + (1 if i < n % len(classes) else 0) for i in range(len(classes))]
                splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
                for (k, s), ids in zip(zip(classes, per), dealer.deal(list(zip(classes, per)), rng)):
                    n_val = max(1, int(round(s * fractions[1])))
                    n_test = max(1, int(round(s * fractions[2])))
                    n_train = s - n_val - n_test
                    splits["train"] += ids[:n_train].tolist()
                    splits["val"] += ids[n_train:n_train + n_val].tolist()
                    splits["test"] += ids[n_train + n_val:].tolist()
                clients.append(ClientPlan(arch, group, classes,
                                          {k: np.asarray(v, dtype=np.int64) for k, v in splits.items()}))
        short = dealer.shortage()
        if short:
            k, want, have = short
            raise ConfigError(f"AMFL population larger than '{source.name}' can fill: its {num_clients} clients "
                              f"need {want} samples of class {k}, the data has {have} (lower partition.num_clients, "
                              f"samples_mean or classes_per_client)")
        info = {"method": "amfl_population", "groups": group_counts,
                "combinations": {"+".join(cb): n for cb, n in zip(combos, counts)},
                "architectures": len({p.arch.key() for p in clients}), "pieces": dealer.pieces}
        return Population(clients, info)

