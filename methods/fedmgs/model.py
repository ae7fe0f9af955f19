"""The FedMGS network: availability-aware encoding (Eq. 2), prototype-guided synthesis (Eq. 4),
reliability-calibrated fusion (Eqs. 5, 7, 8) and the readouts (Eq. 9).

One forward pass returns every intermediate the local objective (Eq. 10) needs, so the
task loss, L_rec and L_proto come from the same computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from benchmark.config import ModelConfig
from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from methods.fedmgs.prototypes import Bank

READOUTS = ("class", "link", "modality")


@dataclass
class Switches:
    """The three Table 4 components (all on = full FedMGS)."""

    avail_enc: bool = True
    proto_synth: bool = True
    rel_fusion: bool = True


@dataclass
class Forward:
    """Intermediates of one pass (n nodes, M modalities, hidden d)."""

    z: Tensor          # [n, M, d] z_i^m (gated by availability when avail_enc)
    s: Tensor          # [n, d] initial semantic representation s_i
    h: Tensor          # [n, d] graph context h_i^g
    z_hat: Tensor      # [n, M, d] synthesized latents
    eta: Tensor        # [n, M] calibrated confidence eta~ (ones without rel_fusion)
    f: Tensor          # [n, M, d] fused modality representations f_i^m
    out: Tensor        # readout: class logits [n, C], link embeddings [n, k], or e_i^m [n, M, k]


def _conv(kind: str, d: int) -> nn.Module:
    if kind == "gcn":
        return GCNConv(d, d)
    if kind == "sage":
        return SAGEConv(d, d, aggr="mean")
    if kind == "gat":
        return GATConv(d, d, heads=1)
    if kind == "mlp":
        return nn.Linear(d, d)
    raise ConfigError(f"fedmgs supports model.backbone gcn, sage, gat or mlp, got '{kind}'")


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out))


class FedMGSNet(nn.Module):
    """Encoders e_m, L_g GNN layers with LayerNorm, psi_syn^m, psi_conf^m, beta_m, phi_fuse/phi_m and a head.

    ``readout``: ``class`` (g_cls(r_i), node classification), ``link`` (a projection of r_i
    whose dot products are g_link, link prediction) or ``modality`` (e_i^m = phi_m(f_i^m),
    retrieval and matching). Only the parts that readout uses are built, so nothing idle
    is communicated. With ``readout_graph`` g_cls / g_link first pass r over one conv.

    The bank (prototypes, counts, spreads) is set by the algorithm before each pass
    (``self.bank``): it is server state received by the client, not a parameter, so it is
    not part of the uploaded state dict. ``labeled`` says whether class labels are the
    anchors (node classification): then the query q_i of a training node is the one-hot of
    its label (Sec. 4.3), otherwise q_i is the model's soft anchor estimate.
    """

    def __init__(self, feature_dims: dict[str, int], cfg: ModelConfig, readout: str, out_dim: int,
                 switches: Switches, labeled: bool, eps: float, query_tau: float, beta_init: float,
                 readout_graph: bool = False) -> None:
        super().__init__()
        if readout not in READOUTS:
            raise ConfigError(f"unknown FedMGS readout '{readout}'")
        d = cfg.hidden
        self.modalities = list(feature_dims)
        self.readout, self.switches, self.labeled = readout, switches, labeled
        self.eps, self.query_tau = eps, query_tau
        m_count = len(self.modalities)
        self.encoders = nn.ModuleDict({m: nn.Linear(dim, d) for m, dim in feature_dims.items()})
        # LayerNorm puts z^m at the scale of h^g (also a LayerNorm output), which Eq. 7 mixes with z_hat
        self.enc_norms = nn.ModuleDict({m: nn.LayerNorm(d) for m in self.modalities})
        self.convs = nn.ModuleList([_conv(cfg.backbone, d) for _ in range(cfg.layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(cfg.layers)])
        self.graph_uses_edges = cfg.backbone != "mlp"
        self.dropout = nn.Dropout(cfg.dropout)
        # u_i^m = [z_i^m' || h_i^g || pi_i^m || 0]: four d-wide blocks (the last one always zero)
        self.synth = nn.ModuleDict({m: _mlp(4 * d, d, d) for m in self.modalities})
        self.conf = nn.ModuleDict({m: _mlp(2 * d, d, 1) for m in self.modalities})
        self.beta = nn.Parameter(torch.full((m_count,), float(beta_init)))
        if readout == "modality":
            self.phi = nn.ModuleDict({m: nn.Linear(d, out_dim) for m in self.modalities})
        else:
            self.fuse = nn.Linear(m_count * d, d)
            self.readout_conv = _conv(cfg.backbone, d) if readout_graph else None
            self.head = nn.Linear(d, out_dim)
        self.bank: Bank | None = None
        self.last: Forward | None = None

    def __getstate__(self) -> dict:
        """Checkpoints and deep copies skip the cached pass (it may hold an autograd graph)."""
        state = self.__dict__.copy()
        state["last"] = None
        return state

    # ------------------------------------------------------------------ Eq. 2
    def encode(self, client: ClientData) -> Tensor:
        """[n, M, d] ungated encodings e_m(x_i^m) = LN(W_m x_i^m + b_m)."""
        return torch.stack([self.enc_norms[m](self.encoders[m](client.features[m])) for m in self.modalities], dim=1)

    def graph_context(self, s: Tensor, edge_index: Tensor) -> Tensor:
        """H^(l+1) = LN(GNN^(l)(H^(l), E)), GNN^(l) a conv with ReLU except on the last layer; h^g = H^(L_g)."""
        h = self.dropout(s)
        last = len(self.convs) - 1
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            h = conv(h, edge_index) if self.graph_uses_edges else conv(h)
            if i < last:
                h = torch.relu(h)
            h = norm(h)
            if i < last:
                h = self.dropout(h)
        return h

    # ------------------------------------------------------------------ Eq. 4
    def query(self, s: Tensor, client: ClientData, num_anchors: int, fused: Tensor, ok: Tensor) -> Tensor:
        """q_i [n, A]: one-hot label on labeled training nodes; otherwise the soft anchor estimate.

        The estimate is softmax_c(cos(s_i, p_bar_c) / query_tau) over valid anchors, the
        prototype classifier that L_proto trains (detached: it selects, it is not trained through).
        """
        q = torch.zeros(s.shape[0], num_anchors, device=s.device, dtype=s.dtype)
        if bool(ok.any()):
            sim = F.normalize(s.detach(), dim=-1) @ F.normalize(fused, dim=-1).T / self.query_tau
            q = torch.softmax(sim.masked_fill(~ok.unsqueeze(0), float("-inf")), dim=1)
        if self.labeled and client.y is not None:
            lab = client.train_mask
            onehot = F.one_hot(client.y.clamp(0, num_anchors - 1), num_anchors).to(q.dtype)
            q = torch.where(lab.unsqueeze(1), onehot, q)
        return q

    def synthesize(self, z: Tensor, a: Tensor, h: Tensor, s: Tensor, client: ClientData) -> Tensor:
        """z_hat_i^m = psi_syn^m([z_i^m' || h_i^g || pi_i^m || 0]) for every node and modality."""
        m_count = z.shape[1]
        if m_count > 1:  # the complementary modality; with M > 2, the mean of the observed others
            others = a.sum(1, keepdim=True) - a if self.switches.avail_enc else torch.full_like(a, m_count - 1.0)
            comp = (z.sum(1, keepdim=True) - z) / others.clamp_min(1.0).unsqueeze(-1)
        else:
            comp = torch.zeros_like(z)
        bank = self.bank
        if self.switches.proto_synth and bank is not None and not bank.is_empty:
            fused, ok = bank.fused()
            q = self.query(s, client, bank.protos.shape[1], fused, ok)
            pi = torch.einsum("na,mad->nmd", q, bank.protos)             # pi_i^m = q_i^T P_bar^m
        else:
            pi = torch.zeros_like(z)
        zero = torch.zeros_like(h)
        return torch.stack([self.synth[m](torch.cat([comp[:, j], h, pi[:, j], zero], dim=-1))
                            for j, m in enumerate(self.modalities)], dim=1)

    # ------------------------------------------------------------------ Eqs. 5-8
    def calibrate(self, z_hat: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """eta~_i^m = sigma(psi_conf^m([z_hat || h])) * sigma(-beta_m Delta_m); z~ = eta~ z_hat + (1 - eta~) h."""
        eta = torch.cat([torch.sigmoid(self.conf[m](torch.cat([z_hat[:, j], h], dim=-1)))
                         for j, m in enumerate(self.modalities)], dim=1)          # [n, M]
        delta = self.bank.spread if self.bank is not None else torch.zeros_like(self.beta)
        eta = eta * torch.sigmoid(-self.beta * delta.to(eta.dtype)).unsqueeze(0)
        z_tilde = eta.unsqueeze(-1) * z_hat + (1.0 - eta.unsqueeze(-1)) * h.unsqueeze(1)
        return eta, z_tilde

    # ------------------------------------------------------------------ full pass
    def initial(self, client: ClientData) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Eq. 2 before propagation: availability a [n, M], encodings e_m(x) [n, M, d], z [n, M, d], s [n, d]."""
        a = client.available.to(client.features[self.modalities[0]].dtype)
        enc = self.encode(client)
        if self.switches.avail_enc:
            z = a.unsqueeze(-1) * enc                                            # z = a e_m(x)
            s = z.sum(1) / (a.sum(1, keepdim=True) + self.eps)
        else:  # ablation: every modality, fill values included, enters propagation
            z = enc
            s = z.mean(1)
        return a, enc, z, s

    def run(self, client: ClientData) -> Forward:
        a, _, z, s = self.initial(client)
        h = self.graph_context(s, client.edge_index)
        z_hat = self.synthesize(z, a, h, s, client)
        if self.switches.rel_fusion:
            eta, z_tilde = self.calibrate(z_hat, h)
        else:  # ablation: the synthesized latent replaces the missing one directly
            eta, z_tilde = torch.ones_like(a), z_hat
        f = torch.where(client.available.unsqueeze(-1), z, z_tilde)              # Eq. 8
        if self.readout == "modality":
            out = torch.stack([self.phi[m](f[:, j]) for j, m in enumerate(self.modalities)], dim=1)
        else:
            r = torch.relu(self.fuse(f.flatten(1)))                              # r_i = phi_fuse([f^v || f^t])
            if self.readout_conv is not None:  # g_cls / g_link with one propagation step (readout_graph)
                r = self.dropout(r)
                r = torch.relu(self.readout_conv(r, client.edge_index) if self.graph_uses_edges
                               else self.readout_conv(r))
            out = self.head(self.dropout(r))
        return Forward(z=z, s=s, h=h, z_hat=z_hat, eta=eta, f=f, out=out)

    def forward(self, client: ClientData) -> Tensor:
        """The readout only; the last pass is kept in ``self.last`` for the auxiliary losses."""
        fw = self.run(client)
        self.last = fw
        return fw.out
