"""Architectures as data: the spec of one AMFL client's model (docs/protocols.md, Track 4).

A client model follows the paper's three steps (§4.2): one encoder per input modality,
a fusion block when there are several, then a trunk MLP and the client's personal head
(Appendix A: "a common 2-layer MLP ... after the fusion", "the final layer on each client
is a dense layer"). A spec names each block by its registered kind
(``benchmark.amfl.blocks.BLOCKS``) plus that kind's options, so a population is plain data
that hashes, prints and goes into a record, and a new fusion is one registered class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from benchmark.errors import ConfigError


@dataclass(frozen=True)
class BlockSpec:
    """One block: its registered kind and its options (sorted (name, value) pairs, so the
    spec is hashable and its JSON form is canonical)."""

    kind: str
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def make(cls, kind: str, **options: Any) -> "BlockSpec":
        return cls(kind, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items())))

    def opts(self) -> dict[str, Any]:
        return dict(self.options)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: list(v) if isinstance(v, tuple) else v for k, v in self.options}}


@dataclass(frozen=True)
class ArchSpec:
    """A client's whole architecture: encoders per modality (in the spec's modality order),
    the fusion (None for a unimodal client), the trunk and the personal head."""

    encoders: tuple[tuple[str, BlockSpec], ...]
    fusion: BlockSpec | None
    trunk: BlockSpec
    head: BlockSpec = field(default_factory=lambda: BlockSpec.make("head"))

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.encoders)

    def to_dict(self) -> dict[str, Any]:
        return {"encoders": {m: b.to_dict() for m, b in self.encoders},
                "fusion": None if self.fusion is None else self.fusion.to_dict(),
                "trunk": self.trunk.to_dict(), "head": self.head.to_dict()}

    def key(self) -> str:
        """Canonical JSON: two clients with equal keys have the same architecture."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def check(self, kinds: Any) -> None:
        """One-line ConfigError for a spec that cannot be built: an unknown block kind, a
        block in the wrong role, a multimodal client without a fusion (or the reverse).
        ``kinds`` is the block registry."""
        blocks = [(f"encoder of '{m}'", b, "encoder") for m, b in self.encoders]
        if self.fusion is not None:
            blocks.append(("fusion", self.fusion, "fusion"))
        blocks += [("trunk", self.trunk, "trunk"), ("head", self.head, "head")]
        for where, b, role in blocks:
            if b.kind not in kinds:
                from benchmark.errors import unknown

                raise ConfigError(f"architecture spec: {where}: " + str(unknown("block", b.kind, kinds.names())))
            cls = kinds.get(b.kind)
            if role not in cls.roles:
                raise ConfigError(f"architecture spec: {where} is block '{b.kind}', which can serve as "
                                  f"{' or '.join(cls.roles)}, not {role}")
        if not self.encoders:
            raise ConfigError("architecture spec: a client needs at least one modality encoder")
        if len(self.encoders) > 1 and self.fusion is None:
            raise ConfigError(f"architecture spec: {len(self.encoders)} modalities but no fusion block")
        if len(self.encoders) == 1 and self.fusion is not None:
            raise ConfigError("architecture spec: a unimodal client has no fusion block")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ArchSpec":
        """Inverse of ``to_dict`` (a spec written in YAML or JSON)."""
        def block(x: dict[str, Any]) -> BlockSpec:
            if not isinstance(x, dict) or "kind" not in x:
                raise ConfigError(f"architecture spec: a block must be a mapping with 'kind', got {x!r}")
            return BlockSpec.make(x["kind"], **{k: v for k, v in x.items() if k != "kind"})

        try:
            enc = tuple((m, block(b)) for m, b in d["encoders"].items())
            fusion = None if d.get("fusion") is None else block(d["fusion"])
            return cls(enc, fusion, block(d["trunk"]), block(d.get("head", {"kind": "head"})))
        except (KeyError, AttributeError, TypeError) as e:
            raise ConfigError(f"architecture spec: malformed ({type(e).__name__}: {e})") from None
