"""The topology-aware hypernetwork (TAHN, §4.3): h(A_i, c_i; phi) = Comb(c_i, Role(A_i; phi1); phi2).

* ``RoleEncoder`` (phi1, Eq. 7-8): the K categorical node features are embedded (one
  table per column, summed, width ``embed_dim``; the categories of graph blocks, GNN kinds
  and their operators, are drawn from a seeded stream of their own, ``extension_seed``, so
  a population without graph blocks starts from the TAHN it had before they existed) and passed through L layers of
  z_v = sigma(W_self z_v + W_in sum_{u->v} z_u + W_out sum_{v->w} z_w + b), messages
  from in- and out-neighbours kept apart. Table 5: L = 4, widths [32, 64, 64, 32], role
  embedding S = 32. Paper silent: the last layer has no activation (role embeddings are
  not clipped at zero); with L = 0 the role embedding is the embedded features.
* ``WeightGenerator`` (phi2, Eq. 9): an MLP node decoder on [c_i (+) z_v]; (+) is
  concatenation (default) or sum (Table 3's ablation; the task embedding is then mapped to
  S by a Linear, as F != S). Eq. 9 reads theta_{i,v} = g(c_i (+) z_v): one decoder output
  per layer node. Default (``decoder: per_layer``): a shared trunk, then one output head
  per layer size (the node's parameter count), so every layer is generated whole and two
  layers of one size share a head, told apart by their role embeddings. The alternative
  (``decoder: chunked``, for layers too large for a head of their own, say beyond ~10^5
  weights where a head's hidden x n matrix dominates the server's memory) cuts each node's
  parameters into chunks of ``chunk`` values sharing one output layer, the decoder also
  reading a learned embedding of the chunk's index (as graph hypernetworks do); on
  multiview_digits that one 64 -> 128 layer had to make 377,792 weights and starved the
  hypernetwork (issue 28: test ACC 0.36 at 60 rounds, against 0.63 generating whole layers).
  Either way each tensor is scaled by 1/sqrt(fan_in) so generated layers start in the range
  a standard initialization gives, whatever their width.
* ``ClientLayout``: for one uploaded graph, which decoder outputs make up the flat theta_i
  (in the client's ``model.parameters()`` order) and their scales; computed once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmark.amfl.graph import ArchGraph
from benchmark.errors import ConfigError


def _table(size: int, extension: int, dim: int, side: torch.Generator) -> nn.Embedding:
    """An embedding table whose first ``size - extension`` rows come from the global stream
    (as a plain ``nn.Embedding``) and whose last ``extension`` rows from ``side``."""
    table = nn.Embedding(size - extension, dim)
    if extension:
        rows = torch.randn(extension, dim, generator=side)
        table = nn.Embedding.from_pretrained(torch.cat([table.weight.detach(), rows]), freeze=False)
    return table


class RoleEncoder(nn.Module):
    """phi1: layer-role embeddings Z^(L) of every node of an architecture graph."""

    def __init__(self, vocab: tuple[int, ...], embed_dim: int, widths: list[int], extension: tuple[int, ...] = (),
                 extension_seed: int = 0) -> None:
        super().__init__()
        ext = tuple(extension) + (0,) * (len(vocab) - len(extension))
        side = torch.Generator().manual_seed(extension_seed)
        self.embeds = nn.ModuleList(_table(v, e, embed_dim, side) for v, e in zip(vocab, ext))
        dims = [embed_dim, *widths]
        self.self_w = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.in_w = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:]))
        self.out_w = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:]))
        self.out_dim = dims[-1]

    def forward(self, features: Tensor, edges: Tensor) -> Tensor:
        z = sum(emb(features[:, k]) for k, emb in enumerate(self.embeds))
        src, dst = edges[0], edges[1]
        for layer, (ws, wi, wo) in enumerate(zip(self.self_w, self.in_w, self.out_w)):
            from_in = torch.zeros_like(z).index_add_(0, dst, z[src])    # sum over u -> v
            from_out = torch.zeros_like(z).index_add_(0, src, z[dst])   # sum over v -> w
            z = ws(z) + wi(from_in) + wo(from_out)
            if layer < len(self.self_w) - 1:
                z = torch.relu(z)
        return z


DECODERS = ("per_layer", "chunked")


def _output_init(layer: nn.Linear, hidden: int, gen: torch.Generator | None = None) -> None:
    """Outputs of about unit scale at the start (normalized hidden layer, then this init), so
    that theta = output / sqrt(fan_in) begins at the scale of a standard initialization."""
    with torch.no_grad():
        layer.weight.normal_(0.0, math.sqrt(2.0 / hidden), generator=gen)
        layer.bias.zero_()


class WeightGenerator(nn.Module):
    """phi2: the node decoder g_nodec([c_i (+) z_v]) -> the node's weights: whole, through the
    head of its size (``per_layer``), or ``chunk`` at a time with a chunk index (``chunked``)."""

    def __init__(self, task_dim: int, role_dim: int, combine: str, hidden: int, chunk: int,
                 max_chunks: int, chunk_dim: int, decoder: str = "per_layer", head_seed: int = 0) -> None:
        super().__init__()
        if decoder not in DECODERS:
            raise ConfigError(f"fedmbridge decoder must be one of {', '.join(DECODERS)}, got '{decoder}'")
        self.combine = combine
        self.decoder = decoder
        self.task_proj = nn.Linear(task_dim, role_dim) if combine == "sum" else None
        width = role_dim if combine == "sum" else task_dim + role_dim
        chunked = decoder == "chunked"
        self.chunk_embed = nn.Embedding(max_chunks, chunk_dim) if chunked else None
        trunk = [nn.Linear(width + (chunk_dim if chunked else 0), hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                 nn.LayerNorm(hidden, elementwise_affine=False), nn.ReLU()]
        self.mlp = nn.Sequential(*trunk, nn.Linear(hidden, chunk)) if chunked else nn.Sequential(*trunk)
        if chunked:
            _output_init(self.mlp[-1], hidden)
        self.heads = nn.ModuleDict()  # per_layer: str(layer size) -> Linear(hidden, size)
        self.hidden = hidden
        self.head_seed = head_seed
        self.chunk = chunk
        self.max_chunks = max_chunks

    def ensure_heads(self, sizes: set[int]) -> list[nn.Parameter]:
        """Create the output heads of layer sizes not seen yet (per_layer), each from a seed of
        its own size, so the order in which clients arrive changes no weight; returns their
        parameters (for the server's optimizer)."""
        new: list[nn.Parameter] = []
        if self.decoder != "per_layer":
            return new
        device = next(self.mlp.parameters()).device
        dtype = next(self.mlp.parameters()).dtype
        for size in sorted(sizes):
            if str(size) in self.heads:
                continue
            head = nn.Linear(self.hidden, size)
            _output_init(head, self.hidden, torch.Generator().manual_seed((self.head_seed * 1_000_003 + size) % 2**63))
            self.heads[str(size)] = head.to(device=device, dtype=dtype)
            new += list(self.heads[str(size)].parameters())
        return new

    def forward(self, c: Tensor, z: Tensor, rows_node: Tensor, rows_chunk: Tensor,
                segments: tuple[tuple[int, int], ...] = ()) -> Tensor:
        """Decoder outputs, flat: [R * chunk] for rows (node, chunk index) when chunked; the
        concatenated heads' outputs for rows grouped by size (``segments``: (size, rows))."""
        if self.task_proj is not None:
            h = z[rows_node] + self.task_proj(c).expand(len(rows_node), -1)
        else:
            h = torch.cat([c.expand(len(rows_node), -1), z[rows_node]], dim=-1)
        if self.chunk_embed is not None:
            return self.mlp(torch.cat([h, self.chunk_embed(rows_chunk)], dim=-1)).reshape(-1)
        hidden = self.mlp(h)
        parts, row = [], 0
        for size, count in segments:
            parts.append(self.heads[str(size)](hidden[row:row + count]).reshape(-1))
            row += count
        return torch.cat(parts)


@dataclass
class ClientLayout:
    """Where each value of a client's flat theta comes from in the decoder's output."""

    graph: ArchGraph
    rows_node: Tensor     # [R] node of each decoder row
    rows_chunk: Tensor    # [R] chunk index within its node (chunked; zeros when per_layer)
    gather: Tensor        # [P_total] position in the flattened decoder output
    scale: Tensor         # [P_total] 1/sqrt(fan_in) of the tensor each value belongs to
    segments: tuple[tuple[int, int], ...] = ()  # per_layer: (layer size, rows) in row order

    @property
    def num_params(self) -> int:
        return int(self.gather.numel())

    @property
    def sizes(self) -> set[int]:
        """The layer sizes whose heads this client needs (per_layer)."""
        return {size for size, _ in self.segments}

    @classmethod
    def of(cls, graph: ArchGraph, chunk: int, max_chunks: int, device: torch.device,
           decoder: str = "per_layer") -> "ClientLayout":
        node, (numel, fan_in) = graph.param_node, graph.param_shape.t()
        per_node: dict[int, int] = {}
        for v, n in zip(node.tolist(), numel.tolist()):
            per_node[v] = per_node.get(v, 0) + n
        rows_node, rows_chunk, start = [], [], {}
        segments: list[tuple[int, int]] = []
        if decoder == "per_layer":  # one row per node, grouped by size (one head call per size)
            for size in sorted(set(per_node.values())):
                nodes = [v for v in sorted(per_node) if per_node[v] == size]
                for v in nodes:
                    start[v] = sum(s * k for s, k in segments) + size * nodes.index(v)
                segments.append((size, len(nodes)))
                rows_node += nodes
            rows_chunk = [0] * len(rows_node)
        else:
            for v in sorted(per_node):
                k = math.ceil(per_node[v] / chunk)
                if k > max_chunks:
                    raise ConfigError(f"fedmbridge: a layer of {per_node[v]} weights needs {k} chunks of {chunk}; "
                                      f"raise algorithm.max_chunks (now {max_chunks}) or algorithm.chunk")
                start[v] = len(rows_node) * chunk
                rows_node += [v] * k
                rows_chunk += list(range(k))
        gather, scale, used = [], [], {v: 0 for v in per_node}
        for v, n, f in zip(node.tolist(), numel.tolist(), fan_in.tolist()):
            gather.append(torch.arange(start[v] + used[v], start[v] + used[v] + n))
            scale.append(torch.full((n,), 1.0 / math.sqrt(max(f, 1))))
            used[v] += n
        return cls(graph, torch.as_tensor(rows_node, dtype=torch.long, device=device),
                   torch.as_tensor(rows_chunk, dtype=torch.long, device=device), torch.cat(gather).to(device),
                   torch.cat(scale).to(device), tuple(segments))


class TAHN(nn.Module):
    """phi = {phi1, phi2} plus the task embeddings c_i of every client (all on the server)."""

    def __init__(self, vocab: tuple[int, ...], num_clients: int, *, embed_dim: int, gnn_widths: list[int],
                 task_dim: int, combine: str, hidden: int, chunk: int, max_chunks: int, chunk_dim: int,
                 extension: tuple[int, ...] = (), extension_seed: int = 0, decoder: str = "per_layer",
                 head_seed: int = 0) -> None:
        super().__init__()
        self.role = RoleEncoder(vocab, embed_dim, gnn_widths, extension, extension_seed)
        self.tasks = nn.Embedding(num_clients, task_dim)
        nn.init.normal_(self.tasks.weight, std=1.0 / math.sqrt(task_dim))
        self.generator = WeightGenerator(task_dim, self.role.out_dim, combine, hidden, chunk, max_chunks, chunk_dim,
                                         decoder, head_seed)

    def phi(self) -> list[nn.Parameter]:
        """The shared parameters (phi1 and phi2), without the task embeddings."""
        return [*self.role.parameters(), *self.generator.parameters()]

    def forward(self, layout: ClientLayout, index: int) -> Tensor:
        """theta_i = h(A_i, c_i; phi), flat, in the client's parameter order."""
        g = layout.graph
        z = self.role(g.features.to(layout.gather.device), g.edges.to(layout.gather.device))
        c = self.tasks.weight[index:index + 1]
        out = self.generator(c, z, layout.rows_node, layout.rows_chunk, layout.segments)
        return out[layout.gather] * layout.scale


def chain_rule_step(tahn: TAHN, opt: torch.optim.Optimizer, layouts: dict[int, ClientLayout],
                    deltas: dict[int, Tensor]) -> None:
    """The server update of §4.4 / Algorithm 1 from the clients' Delta theta_i = theta~_i - theta_i:

    grad phi = -(1/|N_r|) sum_i (d theta_i / d phi)^T Delta theta_i   (phi1 and phi2)
    grad c_i = -(d theta_i / d c_i)^T Delta theta_i                   (each client's own)

    computed as one vector-Jacobian product per client (autograd of <theta_i, Delta theta_i>),
    then one step of ``opt`` (SGD in the paper). ``layouts`` and ``deltas`` are keyed by the
    client's row in the task-embedding table."""
    opt.zero_grad(set_to_none=True)
    n = len(deltas)
    for index, delta in deltas.items():
        theta = tahn(layouts[index], index)
        surrogate = -(theta * delta.to(theta.dtype)).sum()
        (surrogate / n).backward()
    # the backward above gave every c_i 1/|N_r| of its own gradient: c_i is not averaged
    if tahn.tasks.weight.grad is not None:
        tahn.tasks.weight.grad.mul_(n)
    opt.step()
