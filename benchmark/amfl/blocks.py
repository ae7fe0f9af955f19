"""The block kinds an AMFL architecture is made of, one registered class each.

A block is an ``nn.Module`` that takes the list of its inputs (one tensor for an encoder,
the trunk and the head; one per modality for a fusion) and returns one tensor. Besides
computing, it describes itself as operators (``ops``): the nodes of the architecture
graph A_i (§4.2 of the paper: one node per parametric layer or non-parametric operator,
edges along the data flow). ``benchmark.amfl.graph`` joins the blocks' operators into the
graph, so the graph is derived from what the model really is, never written by hand.

Roles: ``encoder`` (per modality), ``fusion``, ``trunk`` (after the fusion), ``head``
(the personal final layer). A kind that reads the client's graph says so with the class
flag ``uses_edges`` (the GNN encoders of ``benchmark.amfl.gnn_blocks``): the model hands
such a block the client's ``edge_index`` and every other block only its inputs, so a block
that ignores the graph is written, called and merged as before. A kind's options are its ``Options`` dataclass (field
metadata gives help and constraints, checked by the same validator as every config option
when the block is built); they come from an architecture spec, not from a run-config
section, hence ``Options`` rather than ``Config``. LayerNorms carry no affine parameters,
so every trainable tensor is a weight matrix, a bias or a position table, which the
hypernetworks generate.
"""

from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from benchmark.config import build_dataclass
from benchmark.errors import ConfigError
from benchmark.registry import Registry

BLOCKS: Registry[type["Block"]] = Registry("block")


@dataclass(frozen=True)
class Op:
    """One operator of a block: a graph node. ``preds`` name its inputs: ``k >= 0`` is
    operator k of the same block, ``-(j + 1)`` is the block's input j. ``params`` are the
    block's parameters this operator owns (attribute paths). ``fan_in``/``fan_out`` are the
    widths it maps between (0 for a non-parametric operator: the paper's held-out scale)."""

    op: str
    preds: tuple[int, ...]
    params: tuple[str, ...] = ()
    fan_in: int = 0
    fan_out: int = 0


class Block(nn.Module, metaclass=ABCMeta):
    """Base of every block kind (see the module docstring)."""

    roles: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type] = object
    #: the model passes the client's edge_index as ``forward(xs, edge_index)`` (graph blocks)
    uses_edges: ClassVar[bool] = False
    #: the population draws a hidden width from ``partition.widths`` for this encoder kind
    draws_width: ClassVar[bool] = False

    @classmethod
    def encoder_options(cls, depth: int, width: int, out_width: int) -> dict:
        """The options the ``amfl_population`` partitioner gives this kind as an encoder of
        ``depth`` layers, hidden ``width`` (drawn only when ``draws_width``) and output
        ``out_width``: each kind maps the population's knobs onto its own options."""
        return {}

    def __init__(self, in_dims: list[int], opts: dict, *, token_dim: int | None = None,
                 out_dim: int | None = None) -> None:
        super().__init__()
        self.in_dims = list(in_dims)
        self.cfg = build_dataclass(self.Options, dict(opts), f"block '{self.registry_name}'")
        self.token_dim = token_dim
        self.requested_out = out_dim
        self.out_dim = 0

    @abstractmethod
    def ops(self) -> list[Op]:
        """The block's operators, in data-flow order (nodes of the architecture graph)."""

    @abstractmethod
    def forward(self, xs: list[Tensor]) -> Tensor:
        """The block's output from its inputs (one per incoming edge)."""


def _linear(a: int, b: int) -> nn.Linear:
    return nn.Linear(a, b)


WIDTHS_META = {"help": "layer widths, first to last", "min": 1}


class LayerWidths:
    """Mixin of the encoders whose ``widths`` option lists their layers (depth = its length):
    how a population's (depth, width) draw becomes options, and the one check they share."""

    draws_width = True

    @classmethod
    def encoder_options(cls, depth: int, width: int, out_width: int) -> dict:
        return {"widths": [width] * (depth - 1) + [out_width]}

    def check_widths(self) -> None:
        if not self.cfg.widths:  # type: ignore[attr-defined]
            raise ConfigError(f"block '{self.registry_name}': widths must name at least one layer")  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- encoders / trunk


@BLOCKS.register("mlp")
class MLPBlock(LayerWidths, Block):
    """MLP: Linear + ReLU layers of the given widths (an encoder, or the trunk after the fusion)."""

    roles = ("encoder", "trunk")

    @dataclass
    class Options:
        widths: list[int] = field(default_factory=lambda: [64, 32], metadata=WIDTHS_META)

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        self.check_widths()
        dims = [in_dims[0], *self.cfg.widths]
        self.layers = nn.ModuleList(_linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out_dim = dims[-1]

    def ops(self) -> list[Op]:
        return [Op("linear", (k - 1,) if k else (-1,), (f"layers.{k}.weight", f"layers.{k}.bias"), l.in_features,
                   l.out_features) for k, l in enumerate(self.layers)]

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        for layer in self.layers:
            x = F.relu(layer(x))
        return x


class _SelfAttention(nn.Module):
    """Multi-head self-attention with a residual and a parameter-free LayerNorm."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ConfigError(f"attention width {dim} is not divisible by its {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, mask: Tensor | None = None, residual: bool = True) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        if mask is not None:
            att = att.masked_fill(mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        y = self.out(y)
        return F.layer_norm(x + y if residual else y, (d,))

    def ops(self, prefix: str, pred: int, base: int) -> list[Op]:
        d = self.out.in_features
        return [Op("attn_qkv", (pred,), (f"{prefix}.qkv.weight", f"{prefix}.qkv.bias"), d, 3 * d),
                Op("attn_out", (base,), (f"{prefix}.out.weight", f"{prefix}.out.bias"), d, d),
                Op("add_norm", (pred, base + 1))]


@BLOCKS.register("attn")
class AttentionAdaptor(Block):
    """Self-attention adaptor: the feature vector cut into tokens, embedded, ``depth`` attention layers, mean-pooled."""

    roles = ("encoder",)

    @dataclass
    class Options:
        depth: int = field(default=1, metadata={"help": "self-attention layers", "min": 1})
        width: int = field(default=32, metadata={"help": "token width (key/query/value size)", "min": 1})
        heads: int = field(default=2, metadata={"help": "attention heads (must divide width)", "min": 1})

    @classmethod
    def encoder_options(cls, depth: int, width: int, out_width: int) -> dict:
        """Tokens of ``out_width`` (the adaptor's width is its output width)."""
        return {"depth": depth, "width": out_width, "heads": 2}

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        tok = self.token_dim or in_dims[0]
        if in_dims[0] % tok:
            raise ConfigError(f"block 'attn': input width {in_dims[0]} is not a whole number of {tok}-wide tokens")
        self.tokens = in_dims[0] // tok
        c = self.cfg
        self.embed = nn.Linear(tok, c.width)
        self.pos = nn.Parameter(torch.randn(self.tokens, c.width) * 0.02)
        self.layers = nn.ModuleList(_SelfAttention(c.width, c.heads) for _ in range(c.depth))
        self.out_dim = c.width

    def ops(self) -> list[Op]:
        c = self.cfg
        ops = [Op("token_embed", (-1,), ("embed.weight", "embed.bias"), self.embed.in_features, c.width),
               Op("pos_embed", (0,), ("pos",), self.tokens, c.width)]
        for k, layer in enumerate(self.layers):
            ops += layer.ops(f"layers.{k}", len(ops) - 1, len(ops))
        return ops + [Op("mean", (len(ops) - 1,))]

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        h = self.embed(x.view(x.shape[0], self.tokens, -1)) + self.pos
        for layer in self.layers:
            h = layer(h)
        return h.mean(1)


# --------------------------------------------------------------------------- fusions


class _ProjectedFusion(Block):
    """Shared part of the fusions that first map every modality to ``dim`` (one Linear each)."""

    roles = ("fusion",)

    def _projections(self, dim: int) -> None:
        self.proj = nn.ModuleList(_linear(d, dim) for d in self.in_dims)

    def _proj_ops(self) -> list[Op]:
        return [Op("align", (-(j + 1),), (f"proj.{j}.weight", f"proj.{j}.bias"), p.in_features, p.out_features)
                for j, p in enumerate(self.proj)]


@BLOCKS.register("avg_align")
class AverageAlignment(_ProjectedFusion):
    """Average alignment: each modality mapped onto a common latent space by its own Linear, then averaged."""

    @dataclass
    class Options:
        dim: int = field(default=32, metadata={"help": "width of the common latent space", "min": 1})

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        self._projections(self.cfg.dim)
        self.out_dim = self.cfg.dim

    def ops(self) -> list[Op]:
        ops = self._proj_ops()
        return ops + [Op("mean", tuple(range(len(ops))))]

    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.stack([p(x) for p, x in zip(self.proj, xs)]).mean(0)


@BLOCKS.register("concat")
class Concatenation(Block):
    """Concatenation of the modality features (no parameters)."""

    roles = ("fusion",)

    @dataclass
    class Options:
        """Concatenation has no options."""

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        self.out_dim = sum(in_dims)

    def ops(self) -> list[Op]:
        return [Op("concat", tuple(-(j + 1) for j in range(len(self.in_dims))))]

    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.cat(xs, dim=-1)


@BLOCKS.register("sum")
class Summation(Block):
    """Element-wise sum of the modality features (no parameters; the encoders must end at one width)."""

    roles = ("fusion",)

    @dataclass
    class Options:
        """Summation has no options."""

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        if len(set(in_dims)) != 1:
            raise ConfigError(f"block 'sum' needs encoders of one output width, got {', '.join(map(str, in_dims))}")
        self.out_dim = in_dims[0]

    def ops(self) -> list[Op]:
        return [Op("sum", tuple(-(j + 1) for j in range(len(self.in_dims))))]

    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.stack(xs).sum(0)


@BLOCKS.register("tensor")
class TensorFusion(_ProjectedFusion):
    """Tensor fusion (Zadeh et al., 2017): outer product of the [h_m; 1] vectors, each h_m first mapped to ``dim``."""

    @dataclass
    class Options:
        dim: int = field(default=8, metadata={"help": "width of each modality before the outer product "
                                                      "(the output is (dim + 1)^M wide)", "min": 1})

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        self._projections(self.cfg.dim)
        self.out_dim = (self.cfg.dim + 1) ** len(in_dims)

    def ops(self) -> list[Op]:
        ops = self._proj_ops()
        return ops + [Op("outer", tuple(range(len(ops))))]

    def forward(self, xs: list[Tensor]) -> Tensor:
        out: Tensor | None = None
        for p, x in zip(self.proj, xs):
            h = torch.cat([p(x), x.new_ones(x.shape[0], 1)], dim=-1)
            out = h if out is None else (out.unsqueeze(-1) * h.unsqueeze(1)).flatten(1)
        assert out is not None
        return out


@BLOCKS.register("cross_attn")
class CrossAttentionFusion(_ProjectedFusion):
    """Cross-attention fusion: each modality token attends to the other modalities' tokens, then the tokens are averaged."""

    @dataclass
    class Options:
        dim: int = field(default=32, metadata={"help": "token width", "min": 1})
        heads: int = field(default=2, metadata={"help": "attention heads (must divide dim)", "min": 1})

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        self._projections(self.cfg.dim)
        self.attn = _SelfAttention(self.cfg.dim, self.cfg.heads)
        self.out_dim = self.cfg.dim

    def ops(self) -> list[Op]:
        ops = self._proj_ops()
        stack = len(ops)
        ops.append(Op("stack", tuple(range(stack))))
        ops += self.attn.ops("attn", stack, stack + 1)
        return ops + [Op("mean", (len(ops) - 1,))]

    def forward(self, xs: list[Tensor]) -> Tensor:
        tokens = torch.stack([p(x) for p, x in zip(self.proj, xs)], dim=1)
        m = tokens.shape[1]
        own = torch.eye(m, dtype=torch.bool, device=tokens.device)  # a token never attends to itself
        return self.attn(tokens, mask=own, residual=True).mean(1)


# --------------------------------------------------------------------------- head


@BLOCKS.register("head")
class Head(Block):
    """Personal head: one Linear to the client's own label space."""

    roles = ("head",)

    @dataclass
    class Options:
        """The head's width is the client's number of classes."""

    def __init__(self, in_dims: list[int], opts: dict, **kw) -> None:
        super().__init__(in_dims, opts, **kw)
        if not self.requested_out:
            raise ConfigError("block 'head' needs the client's number of classes")
        self.linear = _linear(in_dims[0], self.requested_out)
        self.out_dim = self.requested_out

    def ops(self) -> list[Op]:
        return [Op("linear", (-1,), ("linear.weight", "linear.bias"), self.linear.in_features, self.out_dim)]

    def forward(self, xs: list[Tensor]) -> Tensor:
        return self.linear(xs[0])


#: the operators of the GNN encoder layers (``benchmark.amfl.gnn_blocks``)
GRAPH_OPERATORS = ("gcn_conv", "sage_conv", "gat_conv")
#: every operator name a block may emit (the graph's operator-type vocabulary); the GNN
#: layers' operators come last so the earlier ids keep their values
OPERATORS = ("input", "linear", "token_embed", "pos_embed", "attn_qkv", "attn_out", "add_norm", "align", "mean",
             "concat", "sum", "outer", "stack", *GRAPH_OPERATORS)
ROLES = ("input", "encoder", "fusion", "trunk", "head")
