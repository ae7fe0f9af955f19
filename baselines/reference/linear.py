"""Linear: the best a linear map of a node's own features does, fitted centrally on training rows.

Why. Between chance and the GNNs a table needs the score of the features alone, with no
graph and no federation: a federated GNN below it gains nothing from message passing (or
loses what federation costs), one above it uses the graph. It is fitted in closed form or
with a fixed budget, so it has no training schedule to tune.

What exactly it fits, on the pooled view (``centralized = True``), of the features as the
client sees them (already conditioned and filled by the data layer; the modalities
concatenated in the dataset's order), on TRAINING rows only:

* ``node_cls``: ``sklearn.linear_model.LogisticRegression`` (multinomial softmax, lbfgs,
  ``max_iter`` 1000, inverse L2 strength ``C``, ``random_state`` the run seed) on the pooled
  ``train_mask`` nodes. The model's logits are ``x W + b`` (classes absent from the training
  labels get a very negative bias; two classes become the logits ``[0, x w + b]``).
* ``retrieval`` / ``matching``: ``sklearn.cross_decomposition.CCA`` between the query rows and
  the gallery rows (``task.modalities``) of the pooled training pairs: the nodes of
  ``task.training_nodes(task.training_view(pooled))`` (training nodes holding both
  modalities; no validation or test node's row is read), each side standardized on those
  rows (``ddof`` 1, as CCA's own scaling), with ``n_components`` = min(option, both widths,
  pairs - 1). The model embeds a node as the sum over modalities of
  ``(x_m - mean_m) / std_m @ R_m``, each term only where the node holds the modality, with
  ``R_query`` / ``R_gallery`` CCA's x / y rotations (what ``CCA.transform`` applies: the
  canonical variates; they equal the weights up to scale for one component and account for
  the deflation for more). A view of the task holds one modality, so it is that modality's
  canonical projection; a linear model ignores edges, so the task's views (with and without
  edges under ``gallery_view: content``) hold the same projection.
* ``link_pred``: a symmetric bilinear score of the two nodes' rows, fitted in closed form on
  the pooled view's training edges (``task.known_edges``: the union of the clients' training
  edges and the edges between clients, never a validation or test edge). With ``x`` centred
  on the mean row, ``S`` the symmetrized mean of ``x_u x_v^T`` over the training edges (both
  directions) and ``V diag(l) V^T`` its eigendecomposition, the model embeds a node as
  ``(x - mean) V_k diag(sqrt(l_k))`` over the ``n_components`` largest positive eigenvalues,
  so the task's dot product is ``(x_u - mean)^T S_k (x_v - mean)``: high along the directions
  in which linked nodes agree (independent random pairs have zero such covariance). The
  task's default decoder (protocol 3) scores the cosine of these embeddings (already centred),
  so the score is that bilinear form normalized by the two nodes' lengths under ``S_k``; the
  ``dot`` decoder scores the bilinear form itself. Why not a
  trained encoder: a linear encoder trained with the task's loss (200 Adam steps) stayed at
  or below chance on the test graphs (test AUC 0.41-0.48 on the 300-node test federation),
  and a logistic regression on pair features (``x_u * x_v``) is not a dot product of node
  embeddings, which is what the task scores. Measured (seed 1, the FedMPO suites' splits):
  test AUC 0.64 on the synthetic DC-SBM graph, level with the GNNs, and 0.51 on TikTok,
  whose links the features alone do not predict.

The pooled client fits once (round 0) and uploads the weights through the ledger
(``linear.*``, float32); later rounds upload the same weights again. The server passes them
back as the broadcast, and each client's ``evaluate`` rebuilds the model from what it
received and scores it with the task's own ``evaluate`` on its own data.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from benchmark.algorithm import Algorithm
from benchmark.comm import Payload
from benchmark.errors import BenchmarkError
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS
from benchmark.tasks.paired import PairedModalityTask

#: the fit of each task this reference is defined for (by task registry name)
FITS = {"node_cls": "fit_logistic", "link_pred": "fit_bilinear", "retrieval": "fit_cca", "matching": "fit_cca"}

PREFIX = "linear."
WEIGHT = PREFIX + "weight."   # + modality: [d_m, out]
BIAS = PREFIX + "bias"        # [out], added to every node
MOD_BIAS = PREFIX + "bias."   # + modality: [out], added where the node holds the modality
ABSENT_CLASS_LOGIT = -1e9     # finite (uploads must be), far below any fitted logit
STD_FLOOR = 1e-8


@dataclass
class LinearConfig:
    C: float = field(default=1.0, metadata={"help": "node_cls: inverse L2 regularization strength of the logistic regression (scikit-learn's C)", "positive": True})
    n_components: int = field(default=16, metadata={"help": "retrieval/matching: CCA components (at most both modality widths and the number of training pairs - 1); link_pred: feature directions of the bilinear score", "min": 1, "max": 65_536})


class LinearModel(nn.Module):
    """``z = sum_m x_m W_m (+ b_m where the node holds m) + b``: a linear map of a node's own rows.

    Built from a payload's ``linear.*`` entries; edges are never read.
    """

    def __init__(self, weights: dict[str, Tensor], mod_bias: dict[str, Tensor] | None = None,
                 bias: Tensor | None = None) -> None:
        super().__init__()
        self.modalities = list(weights)
        self.weight = nn.ParameterDict({m: nn.Parameter(w) for m, w in weights.items()})
        self.mod_bias = nn.ParameterDict({m: nn.Parameter(b) for m, b in (mod_bias or {}).items()})
        self.bias = None if bias is None else nn.Parameter(bias)

    @classmethod
    def from_payload(cls, payload: Payload, device: torch.device | None = None) -> "LinearModel":
        weights = {k[len(WEIGHT):]: v for k, v in payload.items() if k.startswith(WEIGHT)}
        mod_bias = {k[len(MOD_BIAS):]: v for k, v in payload.items() if k.startswith(MOD_BIAS)}
        bias = payload.get(BIAS)
        if not weights:
            raise BenchmarkError("linear: the broadcast holds no fitted weights (evaluated before the fit)")

        def f32(t: Tensor) -> Tensor:
            return t.detach().to(device=device, dtype=torch.float32).clone()

        return cls({m: f32(w) for m, w in weights.items()}, {m: f32(b) for m, b in mod_bias.items()},
                   None if bias is None else f32(bias))

    def payload(self) -> Payload:
        out: Payload = {WEIGHT + m: w.detach().to(torch.float32).clone() for m, w in self.weight.items()}
        out.update({MOD_BIAS + m: b.detach().to(torch.float32).clone() for m, b in self.mod_bias.items()})
        if self.bias is not None:
            out[BIAS] = self.bias.detach().to(torch.float32).clone()
        return out

    def forward(self, client: ClientData) -> Tensor:
        z: Tensor | None = None
        for m in self.modalities:
            term = client.features[m] @ self.weight[m]
            if m in self.mod_bias:
                j = client.modalities.index(m)
                term = (term + self.mod_bias[m]) * client.available[:, j:j + 1].to(term.dtype)
            z = term if z is None else z + term
        assert z is not None
        return z if self.bias is None else z + self.bias


def _rows(client: ClientData, modalities: list[str], mask: Tensor) -> np.ndarray:
    """The concatenated modality rows of the ``mask`` nodes, float64 on the CPU."""
    x = torch.cat([client.features[m] for m in modalities], dim=1)
    return x[mask].detach().cpu().double().numpy()


def _split(w: np.ndarray, modalities: list[str], dims: dict[str, int]) -> dict[str, Tensor]:
    """A [sum of widths, out] matrix cut into one float32 block per modality."""
    out, start = {}, 0
    for m in modalities:
        out[m] = torch.from_numpy(np.ascontiguousarray(w[start:start + dims[m]])).to(torch.float32)
        start += dims[m]
    return out


@ALGORITHMS.register("linear")
class Linear(Algorithm):
    """Linear: logistic regression (node_cls), a bilinear edge score (link_pred) or CCA (retrieval, matching) of the features, fitted on the pooled training rows."""

    Config = LinearConfig
    centralized = True
    tasks = tuple(FITS)
    upload_keys = (r"linear\..+",)

    def init_server(self) -> Payload:
        self.fitted: Payload = {}
        return {}

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        if "fitted" not in state:
            state["fitted"] = self.fit(client).payload()
        return {k: v.clone() for k, v in state["fitted"].items()}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        if len(uploads) > 1:
            raise BenchmarkError("linear is centralized: it expects the pooled view as its only client")
        for payload in uploads.values():
            self.fitted = {k: v.clone() for k, v in payload.items()}
        return {k: v.clone() for k, v in self.fitted.items()}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(LinearModel.from_payload(received, client.device), client)

    # ------------------------------------------------------------------ fitting (pooled client)
    def fit(self, client: ClientData) -> LinearModel:
        name = self.ctx.run.task.name
        if name not in FITS:
            raise BenchmarkError(f"linear: no fit for task {name!r} (it fits {', '.join(FITS)})")
        return getattr(self, FITS[name])(client)

    def fit_logistic(self, client: ClientData) -> LinearModel:
        from sklearn.linear_model import LogisticRegression

        mods, dims, c = client.modalities, {m: int(x.shape[1]) for m, x in client.features.items()}, self.ctx.num_classes
        x = _rows(client, mods, client.train_mask)
        y = client.y[client.train_mask].cpu().numpy()
        w = np.zeros((sum(dims.values()), c))
        b = np.full(c, ABSENT_CLASS_LOGIT)
        present = np.unique(y)
        if present.size == 1:
            b[present[0]] = 0.0  # one training class: predict it
        elif present.size > 1:
            clf = LogisticRegression(C=self.cfg.C, solver="lbfgs", max_iter=1000, random_state=self.ctx.seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a ConvergenceWarning at max_iter is part of the fixed budget
                clf.fit(x, y)
            coef, icpt = clf.coef_, clf.intercept_
            if present.size == 2:  # binary: P(second class) = sigmoid(x w + b) = softmax([0, x w + b])
                coef = np.concatenate([np.zeros_like(coef), coef])
                icpt = np.concatenate([np.zeros_like(icpt), icpt])
            cls = clf.classes_.astype(int)
            w[:, cls] = coef.T
            b[cls] = icpt
        dev = client.device
        return LinearModel({m: t.to(dev) for m, t in _split(w, mods, dims).items()},
                           bias=torch.from_numpy(b).to(device=dev, dtype=torch.float32))

    def fit_bilinear(self, client: ClientData) -> LinearModel:
        mods, dims = client.modalities, {m: int(x.shape[1]) for m, x in client.features.items()}
        edges = self.ctx.task.known_edges(client).detach().cpu().numpy()  # training edges only
        every = torch.ones(client.num_nodes, dtype=torch.bool, device=client.train_mask.device)
        a, mean = _edge_directions(_rows(client, mods, every), edges, self.cfg.n_components)
        dev = client.device
        if a.shape[1] == 0:  # no direction along which linked nodes agree: every score ties
            a = np.zeros((a.shape[0], 1))
        return LinearModel({m: t.to(dev) for m, t in _split(a, mods, dims).items()},
                           bias=torch.from_numpy(-(mean @ a)).to(device=dev, dtype=torch.float32))

    def fit_cca(self, client: ClientData) -> LinearModel:
        from sklearn.cross_decomposition import CCA

        task: PairedModalityTask = self.ctx.task  # type: ignore[assignment]
        view = task.training_view(client)  # the validation/test pairs hidden
        nodes = task.training_nodes(view)
        qi, gi = task.modalities(view)
        mq, mg = view.modalities[qi], view.modalities[gi]
        x, y = _rows(view, [mq], nodes), _rows(view, [mg], nodes)
        k = min(self.cfg.n_components, x.shape[1], y.shape[1], x.shape[0] - 1)
        dev = client.device
        if k < 1:  # fewer than two training pairs: a constant embedding (every score ties)
            zeros = {m: torch.zeros(int(view.features[m].shape[1]), 1, device=dev) for m in (mq, mg)}
            return LinearModel(zeros, {m: torch.zeros(1, device=dev) for m in (mq, mg)})
        (xs, mx, sx), (ys, my, sy) = _standardized(x), _standardized(y)
        cca = CCA(n_components=k, scale=False, max_iter=500)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning: the fixed iteration budget is the fit
            cca.fit(xs, ys)
        weights, mod_bias = {}, {}
        for m, rot, mean, std, centred in ((mq, cca.x_rotations_, mx, sx, xs), (mg, cca.y_rotations_, my, sy, ys)):
            # CCA centres its (already standardized) input once more: fold that mean in too
            shift = centred.mean(0)
            w = rot / std[:, None]
            weights[m] = torch.from_numpy(np.ascontiguousarray(w)).to(device=dev, dtype=torch.float32)
            b = -(mean / std + shift) @ rot
            mod_bias[m] = torch.from_numpy(np.ascontiguousarray(b)).to(device=dev, dtype=torch.float32)
        return LinearModel(weights, mod_bias)


def _edge_directions(x: np.ndarray, edges: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, mean): the ``k`` feature directions along which linked nodes agree most, so that
    ``((x_u - mean) A) . ((x_v - mean) A)`` is the positive part of the training edges' centred
    feature cross-covariance as a bilinear score. A has no column when no direction agrees."""
    mean = x.mean(0)
    xc = x - mean
    if edges.shape[1] == 0:
        return np.zeros((x.shape[1], 0)), mean
    cross = xc[edges[0]].T @ xc[edges[1]] / edges.shape[1]
    lam, vec = np.linalg.eigh((cross + cross.T) / 2)
    order = np.argsort(lam)[::-1][:k]
    order = order[lam[order] > 0]
    return vec[:, order] * np.sqrt(lam[order]), mean


def _standardized(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x standardized per column, its mean, its std with ddof 1 floored), as CCA's own scaling."""
    mean = x.mean(0)
    std = x.std(0, ddof=1) if x.shape[0] > 1 else np.ones(x.shape[1])
    std = np.where(std < STD_FLOOR, 1.0, std)
    return (x - mean) / std, mean, std
