"""KGE decoders (TransE, RotatE, ComplEx) following the RotatE reference code's conventions.

A decoder owns the *relation* parameters and the scoring function; entity vectors are
passed in. That split is what the FedMKGC methods need: their entity vectors are built
per client (structural table fused with text/visual features, imputed, aggregated on a
server), while each client's relations never leave it.

Conventions (RotatE code, ``-de`` for complex entities):

- ``dim`` is the hidden size k. RotatE and ComplEx entities are ``[2k]`` real vectors
  (real parts, then imaginary parts); TransE entities are ``[k]``.
- ``embedding_range = (gamma + epsilon) / k`` with epsilon = 2; entities and relations
  start uniform in ``+-embedding_range``.
- RotatE relations are k phases stored as values: ``phase = value / (embedding_range /
  pi)``; score ``gamma - sum_k |h_k r_k - t_k|`` (complex modulus per coordinate, summed).
- TransE: ``gamma - ||h + r - t||_1``. ComplEx: ``Re(<h, r, conj(t)>)`` (no gamma).
- Head prediction is tail prediction on an inverse relation: ids ``r + R`` for
  ``R`` base relations. ``inverse="separate"`` gives inverse relations their own
  parameters (reciprocal relations, the default); ``"tied"`` derives them exactly from
  the base relation (RotatE: negated phase; TransE: -r; ComplEx: conjugate), no extra
  parameters; ``"none"`` has no inverse ids (ids must be < R).
"""

from __future__ import annotations

import abc
import math
from typing import Any

import torch
from torch import Tensor, nn

from benchmark.errors import ConfigError
from benchmark.kge.ops import pairwise_distance
from benchmark.registry import Registry

#: the KGE decoders a config can name (independently of the FL algorithm, imputer and fusion)
DECODERS: Registry[Any] = Registry("kge decoder")

INVERSE_MODES = ("separate", "tied", "none")


class KGEDecoder(nn.Module, abc.ABC):
    """Base class: relation table, inverse-relation handling and the scoring contract.

    Subclasses define ``entity_width(k)``, ``relation_width(k)``, ``query`` (apply the
    relation to the head: ``[B, d]``) and ``score_query`` (score a query against candidate
    entity vectors).
    """

    epsilon = 2.0
    uses_gamma = True

    def __init__(self, num_relations: int, dim: int = 256, gamma: float = 12.0, inverse: str = "separate") -> None:
        super().__init__()
        if inverse not in INVERSE_MODES:
            raise ConfigError(f"kge inverse mode must be one of {', '.join(INVERSE_MODES)}, got '{inverse}'")
        if num_relations < 1 or dim < 1:
            raise ConfigError(f"kge decoder needs num_relations >= 1 and dim >= 1, got {num_relations}, {dim}")
        self.num_base_relations = num_relations
        self.inverse = inverse
        self.dim = dim
        self.gamma = float(gamma)
        self.embedding_range = (self.gamma + self.epsilon) / dim
        rows = 2 * num_relations if inverse == "separate" else num_relations
        self.relation = nn.Parameter(torch.empty(rows, self.relation_width(dim)))
        nn.init.uniform_(self.relation, -self.embedding_range, self.embedding_range)

    # ------------------------------------------------------------- shapes
    @classmethod
    def entity_width(cls, dim: int) -> int:
        return 2 * dim

    @classmethod
    def relation_width(cls, dim: int) -> int:
        return dim

    @property
    def entity_dim(self) -> int:
        return self.entity_width(self.dim)

    @property
    def num_relation_ids(self) -> int:
        """Valid relation ids: ``2R`` with inverse relations, else ``R``."""
        return self.num_base_relations if self.inverse == "none" else 2 * self.num_base_relations

    def inverse_of(self, r: Tensor) -> Tensor:
        """Id of the inverse relation (``r + R``), used to turn head into tail prediction."""
        if self.inverse == "none":
            raise ConfigError("this decoder was built with inverse='none': head prediction needs inverse relations")
        return r + self.num_base_relations

    def init_entities(self, num_entities: int, generator: torch.Generator | None = None) -> Tensor:
        """A fresh ``[E, entity_dim]`` entity table, uniform in ``+-embedding_range``."""
        x = torch.empty(num_entities, self.entity_dim)
        x.uniform_(-self.embedding_range, self.embedding_range, generator=generator)
        return x

    # ------------------------------------------------------------- relations
    def relation_vectors(self, r: Tensor) -> tuple[Tensor, Tensor]:
        """Rows of the relation table for ids ``r`` (on any device) and a bool saying which
        are tied inverses."""
        r = r.long().to(self.relation.device)
        if self.inverse == "tied":
            inv = r >= self.num_base_relations
            return self.relation[r - inv.long() * self.num_base_relations], inv
        return self.relation[r], torch.zeros_like(r, dtype=torch.bool)

    # ------------------------------------------------------------- scoring contract
    @abc.abstractmethod
    def query(self, h: Tensor, r: Tensor) -> Tensor:
        """Apply relations ``r`` ``[B]`` to head vectors ``h`` ``[B, d]``: the query ``[B, d]``."""

    @abc.abstractmethod
    def score_query(self, q: Tensor, cand: Tensor, index: Tensor | None = None) -> Tensor:
        """Scores ``[B, N]`` of queries against candidate vectors (see ``forward``)."""

    def forward(self, h: Tensor, r: Tensor, cand: Tensor, index: Tensor | None = None) -> Tensor:
        """Scores ``[B, N]`` of tails for queries (h ``[B, d]``, relation ids ``r`` ``[B]``).

        ``cand`` ``[M, d]`` are candidate entity vectors; ``index`` selects them: ``None``
        (all M, shared), ``[N]`` (a shared subset) or ``[B, N]`` (per-query candidates).
        """
        return self.score_query(self.query(h, r), cand, index)

    def score_triples(self, h: Tensor, r: Tensor, t: Tensor) -> Tensor:
        """Scores ``[B]`` of the triples (h ``[B, d]``, r ``[B]``, t ``[B, d]``)."""
        q = self.query(h, r)
        return self._score_pairs(q, t)

    @abc.abstractmethod
    def _score_pairs(self, q: Tensor, t: Tensor) -> Tensor:
        """Scores ``[B]`` of queries ``[B, d]`` against their own tails ``[B, d]``."""


@DECODERS.register("rotate")
class RotatE(KGEDecoder):
    """RotatE: relations rotate complex entity coordinates; score gamma - sum_k |h_k r_k - t_k|."""

    def query(self, h: Tensor, r: Tensor) -> Tensor:
        rel, inv = self.relation_vectors(r)
        phase = rel / (self.embedding_range / math.pi)
        phase = torch.where(inv.unsqueeze(1), -phase, phase)
        cos, sin = torch.cos(phase), torch.sin(phase)
        k = self.dim
        h_re, h_im = h[:, :k], h[:, k:]
        return torch.cat([h_re * cos - h_im * sin, h_re * sin + h_im * cos], dim=1)

    def score_query(self, q: Tensor, cand: Tensor, index: Tensor | None = None) -> Tensor:
        return self.gamma - pairwise_distance(q, cand, index, kind="complex")

    def _score_pairs(self, q: Tensor, t: Tensor) -> Tensor:
        k = self.dim
        d = q - t
        # the clamp only guards 0/0 in the gradient at an exact match (where the fused
        # kernel also uses the subgradient 0); values match the kernel's plain sqrt
        return self.gamma - torch.sqrt((d[:, :k] ** 2 + d[:, k:] ** 2).clamp_min(1e-30)).sum(-1)


@DECODERS.register("transe")
class TransE(KGEDecoder):
    """TransE with the L1 norm (RotatE code): score gamma - ||h + r - t||_1."""

    @classmethod
    def entity_width(cls, dim: int) -> int:
        return dim

    def query(self, h: Tensor, r: Tensor) -> Tensor:
        rel, inv = self.relation_vectors(r)
        return h + torch.where(inv.unsqueeze(1), -rel, rel)

    def score_query(self, q: Tensor, cand: Tensor, index: Tensor | None = None) -> Tensor:
        return self.gamma - pairwise_distance(q, cand, index, kind="l1")

    def _score_pairs(self, q: Tensor, t: Tensor) -> Tensor:
        return self.gamma - (q - t).abs().sum(-1)


@DECODERS.register("complex")
class ComplEx(KGEDecoder):
    """ComplEx: score Re(<h, r, conj(t)>), a bilinear form, so candidate scoring is one matmul."""

    uses_gamma = False

    @classmethod
    def relation_width(cls, dim: int) -> int:
        return 2 * dim

    def query(self, h: Tensor, r: Tensor) -> Tensor:
        rel, inv = self.relation_vectors(r)
        k = self.dim
        r_re, r_im = rel[:, :k], rel[:, k:]
        r_im = torch.where(inv.unsqueeze(1), -r_im, r_im)
        h_re, h_im = h[:, :k], h[:, k:]
        # Re(<h, r, conj t>) = <h*r, t> over (re, im) stacked: q = h*r as a complex product
        return torch.cat([h_re * r_re - h_im * r_im, h_re * r_im + h_im * r_re], dim=1)

    def score_query(self, q: Tensor, cand: Tensor, index: Tensor | None = None) -> Tensor:
        if index is None:
            return q @ cand.t()
        index = index.to(cand.device)
        if index.dim() == 1:
            return q @ cand[index].t()
        return torch.bmm(cand[index], q.unsqueeze(2)).squeeze(2)

    def _score_pairs(self, q: Tensor, t: Tensor) -> Tensor:
        return (q * t).sum(-1)


def build_decoder(name: str, num_relations: int, dim: int = 256, gamma: float = 12.0, inverse: str = "separate") -> KGEDecoder:
    """Construct a registered decoder by name (``rotate``, ``transe``, ``complex``)."""
    cls = DECODERS.get(name)
    return cls(num_relations=num_relations, dim=dim, gamma=gamma, inverse=inverse)
