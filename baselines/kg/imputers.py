"""Missing-modality imputers of FedMKGC (seed paper Sec. IV-A..C and App. C.A), by name.

Every imputer acts on one client's *hyper-modal* matrix ``H = [S || V_1 || ... || V_M]``
``[n_ent, (1 + M) d]``: the structural rows ``S`` and the projected modality features
``V_m = W_m x_m``, all in the entity space of width ``d`` (the paper builds H "in structural
vector space", so the projected, not the raw, features). The mask ``M`` has the same shape,
1 where observed; the structural block is always observed and a modality block is 1 on an
entity's row iff the client holds that modality for it (``ClientData.available``).

Contract, shared by all of them:

- The network never sees an unobserved entry: its input is ``M * H`` (the data's random
  fill of a missing modality is replaced by zeros).
- Training signal: masked MSE on observed entries only, ``sum(M * (H_hat - H)^2) / sum(M)``
  (the paper's ``||M * H_hat - M * H||^2`` as a mean over observed entries, so that the
  weight ``lambda`` does not scale with the table size). The target ``H`` is detached:
  L_DI trains the imputer (and, through its input, S and W); letting it also move the
  target would reward shrinking H, a collapse direction.
- Output: ``H~ = M * H + (1 - M) * H_hat``: observed entries pass through unchanged.
- Hidden blocks (``drop``, an addition to the paper, default 0.3): in the forward that
  computes L_DI, each observed modality block of an entity is hidden from the network's
  input with probability ``drop`` while staying a target. Why: under the paper's literal
  objective (input = all observed entries, loss on the same entries) a residual network
  (CRA, MMIN, HidE with CRA; attention with its skip) reaches zero loss as the identity and
  never learns to fill a missing block (measured: a rank-3 test matrix is then imputed no
  better than by zeros). Hiding observed blocks gives imputation a supervised signal from
  observed entries only, which is the paper's intent ("self-supervision from the existing
  modalities"); ``imputer_drop: 0`` restores the literal objective. The imputation that
  feeds the KGE loss always sees every observed entry.
- In training mode ``forward`` also leaves its loss in ``self.loss`` (the KGE client adds
  ``lambda * loss`` to the batch loss); in eval mode it computes no loss.

Imputer parameters belong to the client's model but are never uploaded (the KG payloads
name only entity rows, projections and fusion parameters).

Imputers: ``none`` (no imputation: the data's fill stays), ``ae`` (3-layer MLP encoder and
decoder), ``cra`` (3 cascaded residual AEs), ``mmin`` (CRA encoder + CRA decoder with the
two-direction cycle loss) and ``hide`` (the paper's hyper-modal imputation diffusion).
Widths: the paper's ``[512, 256, 128]`` for a hyper-modal width of ``3 x 512``; by default
they scale with the actual width (``w/3, w/6, w/12``), so a tiny test model keeps the
paper's bottleneck ratio instead of an identity-capable over-wide AE.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from benchmark.errors import ConfigError
from benchmark.registry import Registry

KG_IMPUTERS: Registry[Any] = Registry("kg imputer")

RECON_NETS = ("ae", "mlp", "mha", "cra")
HIDE_SAMPLERS = ("step", "chain")  # HidE's evaluation imputation (HidEImputer)
TIME_DIM = 16  # width of the diffusion-step embedding fed to HidE's reconstruction net


@dataclass
class ImputerOptions:
    """Options of an imputer (the KG algorithms' Config carries them as ``imputer_*``)."""

    hidden: list[int] = field(default_factory=list)   # AE widths; empty = scaled paper widths
    steps: int = 5             # diffusion steps T
    beta_low: float = 5e-4     # first beta (before scaling by noise_scale)
    beta_up: float = 5e-2      # last beta (before scaling)
    noise_scale: float = 1e-4  # s: betas run linearly from s*beta_low to s*beta_up
    recon_net: str = "cra"     # HidE's x0-prediction network
    heads: int = 4             # attention heads of the mha reconstruction net
    drop: float = 0.3          # P(hide an observed modality block from the L_DI input)
    sampler: str = "step"      # HidE's evaluation imputation: step (as in training) or chain (T-step reverse chain)

    def __post_init__(self) -> None:
        if any(int(h) < 1 for h in self.hidden) or (self.hidden and len(self.hidden) != 3):
            raise ConfigError(f"imputer hidden widths must be three integers >= 1, got {self.hidden}")
        if self.steps < 1:
            raise ConfigError(f"diffusion steps must be >= 1, got {self.steps}")
        if not (0 < self.beta_low <= self.beta_up) or not (0 < self.noise_scale) or self.noise_scale * self.beta_up >= 1:
            raise ConfigError("need 0 < beta_low <= beta_up and 0 < noise_scale * beta_up < 1")
        if self.recon_net not in RECON_NETS:
            raise ConfigError(f"recon_net must be one of {', '.join(RECON_NETS)}, got '{self.recon_net}'")
        if self.heads < 1:
            raise ConfigError(f"attention heads must be >= 1, got {self.heads}")
        if not 0.0 <= self.drop < 1.0:
            raise ConfigError(f"imputer drop probability must be in [0, 1), got {self.drop}")
        if self.sampler not in HIDE_SAMPLERS:
            raise ConfigError(f"HidE sampler must be one of {', '.join(HIDE_SAMPLERS)}, got '{self.sampler}'")


def masked_mse(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Mean squared error over the observed entries (``mask == 1``) only."""
    return ((pred - target).pow(2) * mask).sum() / mask.sum().clamp_min(1.0)


def widths(total: int, hidden: list[int]) -> list[int]:
    """The AE widths: given ones, else the paper's [512, 256, 128] relative to 3 x 512."""
    if hidden:
        return [int(h) for h in hidden]
    return [max(1, round(total / 3)), max(1, round(total / 6)), max(1, round(total / 12))]


# --------------------------------------------------------------------------- networks


class AE(nn.Module):
    """MLP encoder ``in -> h1 -> h2 -> h3`` and decoder ``h3 -> h2 -> h1 -> out``, ReLU
    between layers, linear output (embedding entries are signed)."""

    def __init__(self, d_in: int, d_out: int, hidden: list[int]) -> None:
        super().__init__()
        h1, h2, h3 = hidden
        self.encoder = nn.Sequential(nn.Linear(d_in, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(),
                                     nn.Linear(h2, h3), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(h3, h2), nn.ReLU(), nn.Linear(h2, h1), nn.ReLU(), nn.Linear(h1, d_out))

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.encoder(x))


class CRA(nn.Module):
    """Cascaded residual autoencoder (Tran et al., 2017): ``x_k = x_{k-1} + AE_k([x_{k-1} || c])``,
    three blocks; ``c`` is an optional conditioning vector (HidE's step embedding)."""

    def __init__(self, width: int, hidden: list[int], cond: int = 0, blocks: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([AE(width + cond, width, hidden) for _ in range(blocks)])

    def forward(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        for ae in self.blocks:
            inp = x if cond is None else torch.cat([x, cond], dim=1)
            x = x + ae(inp)
        return x


class CondAE(nn.Module):
    """AE over ``[x || c]`` (HidE's ``ae`` reconstruction net)."""

    def __init__(self, width: int, hidden: list[int], cond: int) -> None:
        super().__init__()
        self.ae = AE(width + cond, width, hidden)

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        return self.ae(torch.cat([x, cond], dim=1))


class CondMLP(nn.Module):
    """Two-layer MLP over ``[x || c]`` with hidden width h1 (HidE's ``mlp`` net: no bottleneck)."""

    def __init__(self, width: int, hidden: list[int], cond: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width + cond, hidden[0]), nn.ReLU(), nn.Linear(hidden[0], width))

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        return self.net(torch.cat([x, cond], dim=1))


class CondMHA(nn.Module):
    """Multi-head self-attention over the modality blocks of H as tokens (HidE's ``mha``
    net): each block of width ``d`` is a token, plus a learned block embedding and the
    projected step embedding; one attention layer and a feed-forward layer, both residual.
    Cross-modal interaction is what the paper credits MHA with."""

    def __init__(self, width: int, block: int, heads: int, cond: int) -> None:
        super().__init__()
        if width % block or block % heads:
            raise ConfigError(f"mha reconstruction needs the block width ({block}) divisible by "
                              f"algorithm.imputer_heads ({heads})")
        self.tokens, self.block = width // block, block
        self.pos = nn.Parameter(torch.zeros(self.tokens, block))
        self.time = nn.Linear(cond, block)
        self.attn = nn.MultiheadAttention(block, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(block), nn.LayerNorm(block)
        self.ffn = nn.Sequential(nn.Linear(block, 2 * block), nn.ReLU(), nn.Linear(2 * block, block))

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        n = x.shape[0]
        tok = x.view(n, self.tokens, self.block) + self.pos + self.time(cond).unsqueeze(1)
        h = self.norm1(tok)
        tok = tok + self.attn(h, h, h, need_weights=False)[0]
        tok = tok + self.ffn(self.norm2(tok))
        return tok.reshape(n, -1)


def step_embedding(t: Tensor, dim: int = TIME_DIM) -> Tensor:
    """Sinusoidal embedding ``[n, dim]`` of integer steps ``t`` ``[n]`` (transformer style)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    ang = t.float().unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat([torch.cos(ang), torch.sin(ang)], dim=1)


# --------------------------------------------------------------------------- imputers


class KGImputer(nn.Module, ABC):
    """Base: ``forward(H, M) -> H~``; sets ``self.loss`` in training mode (see module doc).

    Subclasses give ``impute(x0) -> H_hat`` (the imputation, from the masked input) and
    ``di_loss(K, H, M, cached) -> L_DI``: the loss when the network is shown ``K * H``
    (``K`` = ``M`` or ``M`` with hidden blocks; ``cached`` = ``impute(K * H)`` if already
    done); the target is ``H.detach()``, the input keeps its gradient.
    """

    def __init__(self, width: int, block: int, opts: ImputerOptions, seed: int) -> None:
        super().__init__()
        self.width, self.block, self.seed = width, block, seed
        self.hidden = widths(width, opts.hidden)
        self.drop = float(opts.drop)
        self.loss: Tensor | None = None

    @abstractmethod
    def impute(self, x0: Tensor) -> Tensor:
        """The completed hyper-modal rows."""

    @abstractmethod
    def di_loss(self, K: Tensor, H: Tensor, M: Tensor, cached: Tensor | None) -> Tensor:
        """The masked imputation loss on observed entries."""

    def hide_blocks(self, M: Tensor) -> Tensor:
        """``M`` with each observed modality block of each entity zeroed with probability
        ``drop`` (never the structural block): the hidden blocks are still targets of the
        masked loss, so the network learns to *impute* from observed entries alone."""
        n, blocks = M.shape[0], self.width // self.block
        hide = (torch.rand(n, blocks - 1, device=M.device) < self.drop).to(M.dtype)
        keep = torch.cat([torch.ones(n, 1, device=M.device, dtype=M.dtype), 1.0 - hide], dim=1)
        return M * keep.repeat_interleave(self.block, dim=1)

    def forward(self, H: Tensor, M: Tensor) -> Tensor:
        M = M.to(H.dtype)
        x0 = M * H
        H_hat = self.impute(x0)
        self.loss = None
        if self.training:
            if self.drop > 0:
                self.loss = self.di_loss(self.hide_blocks(M), H, M, None)
            else:
                self.loss = self.di_loss(M, H, M, H_hat)
        return x0 + (1.0 - M) * H_hat

    def pop_loss(self) -> Tensor | None:
        """The loss of the last training forward, cleared so it is added once."""
        loss, self.loss = self.loss, None
        return loss


@KG_IMPUTERS.register("none")
class NoImputer(KGImputer):
    """No imputation: missing modalities keep the data's fill (random or zeros); no loss, no parameters."""

    def forward(self, H: Tensor, M: Tensor) -> Tensor:
        self.loss = None
        return H


@KG_IMPUTERS.register("ae")
class AEImputer(KGImputer):
    """AE: a 3-layer MLP encoder/decoder [512, 256, 128] (ReLU) maps M*H to H_hat; masked MSE."""

    def __init__(self, width: int, block: int, opts: ImputerOptions, seed: int) -> None:
        super().__init__(width, block, opts, seed)
        self.net = AE(width, width, self.hidden)

    def impute(self, x0: Tensor) -> Tensor:
        return self.net(x0)

    def di_loss(self, K: Tensor, H: Tensor, M: Tensor, cached: Tensor | None) -> Tensor:
        return masked_mse(self.net(K * H) if cached is None else cached, H.detach(), M)


@KG_IMPUTERS.register("cra")
class CRAImputer(KGImputer):
    """CRA: three cascaded AEs, each adding a residual to the running reconstruction of M*H; masked MSE on the output."""

    def __init__(self, width: int, block: int, opts: ImputerOptions, seed: int) -> None:
        super().__init__(width, block, opts, seed)
        self.net = CRA(width, self.hidden)

    def impute(self, x0: Tensor) -> Tensor:
        return self.net(x0)

    def di_loss(self, K: Tensor, H: Tensor, M: Tensor, cached: Tensor | None) -> Tensor:
        return masked_mse(self.net(K * H) if cached is None else cached, H.detach(), M)


@KG_IMPUTERS.register("mmin")
class MMINImputer(KGImputer):
    """MMIN (seed's adaptation): CRA encoder imagines H_f from M*H, CRA decoder maps the completed H_f back to H_b; cycle loss on observed entries in both directions; H_f imputes.

    The decoder reads the *completed* forward output ``M*H + (1-M)*H_f`` (the backward
    imagination of MMIN starts from the imagined full vector); both outputs are pulled to the
    observed entries, ``||M*(H_f - H)||^2 + ||M*(H_b - H)||^2`` (seed App. C.A).
    """

    def __init__(self, width: int, block: int, opts: ImputerOptions, seed: int) -> None:
        super().__init__(width, block, opts, seed)
        self.encoder = CRA(width, self.hidden)
        self.decoder = CRA(width, self.hidden)

    def impute(self, x0: Tensor) -> Tensor:
        return self.encoder(x0)

    def di_loss(self, K: Tensor, H: Tensor, M: Tensor, cached: Tensor | None) -> Tensor:
        forward = self.encoder(K * H) if cached is None else cached
        backward = self.decoder(K * H + (1.0 - K) * forward)
        target = H.detach()
        return masked_mse(forward, target, M) + masked_mse(backward, target, M)


@KG_IMPUTERS.register("hide")
class HidEImputer(KGImputer):
    """HidE: diffusion on x0 = M*H; the reconstruction net predicts x0 from (x_t, t); masked MSE at t ~ U(1, T); one reconstruction pass per row imputes, in training and evaluation alike; missing entries only are imputed.

    Schedule: ``beta_t`` linear from ``s * beta_low`` to ``s * beta_up`` (t = 1..T); the
    scale ``s`` multiplies both ends, as in DiffRec (the paper's reference [89] for s), so
    the paper's 5e-4..5e-2 with s = 1e-4 gives betas 5e-8..5e-6: a near-deterministic
    denoiser chain. ``q(x_t | x0) = N(sqrt(abar_t) x0, (1 - abar_t) I)``.

    One reconstruction pass (``one_step``): each row draws a step ``t ~ U(1, T)`` and
    noise, ``x_t ~ q(x_t | x0)``, and the net predicts ``x0_hat = net(x_t, t)`` once, as a
    DDPM/DiffRec denoiser is trained.

    - Training: ``L_DI = masked_mse(x0_hat, H)`` on observed entries (paper Eq. 7-8:
      ``L_DI = E_{t ~ U(1,T)} L_t``, "we uniformly sample t ~ U(1, T)"; App. B.B Eq. 21, the
      masked ELBO, is a sum of exactly these single-step terms). The imputation that feeds
      the KGE loss is the same kind of pass on the fully observed input ``M*H``: ``H~ =
      M*H + (1-M)*x0_hat`` (Eq. 6). With hidden blocks (``drop`` > 0) the L_DI rows (input
      ``K*H``) and the imputation rows (``M*H``) go through the net as one stacked batch of
      ``2 n`` rows (every reconstruction net is row-wise, so stacking changes nothing but
      the kernel count); with ``drop`` = 0 they are the same rows and one pass of ``n``
      rows gives both. Cost: one CRA pass (3 AE blocks) over ``2 n`` rows, against AE's two
      AE passes over ``n``.
    - Evaluation (``sampler: step``, the default): the same pass, its steps and noise drawn
      from a generator seeded by the client, so scoring the same model twice gives the
      same numbers and the KGE model is scored on the imputations it was trained on.
      ``sampler: chain`` runs the paper's reverse process instead (``reverse``): ``x_T ~
      q(x_T | x0)``, then for ``t = T..1`` ``x0_hat = net(x_t, t)`` and a step to the
      posterior mean ``mu~_t(x_t, x0_hat)`` (Eq. 15, 17; the last step returns ``x0_hat``
      since ``abar_0 = 1``).

    Why not the reverse chain (issue 27). It was run in training with gradient, ``T`` CRA
    passes plus the L_DI pass: 18 AE-block passes over every client entity per batch at
    T = 5, and MMFeD3-HidE's batch cost 3.5x MMFedE-AE's (``bench kg --imputers``,
    FB15K-237-Fed3 client 0, dim 32, batch 1024, 256 negatives, one CPU thread: 1.18 s
    against 0.34 s; now 2.3x, 0.86 s against 0.37 s). The paper's objective trains the net only through single-step
    predictions; the chain adds no term to it, and in DDPM/DiffRec it is the sampler of
    inference. The paper does not say which output feeds L_KGC in training (Alg. 2 line 6,
    "HidE processes E^c"). Training on the one-step imputation and evaluating on the chain
    was measured and rejected: the chain feeds the net its own partly filled predictions,
    inputs it never sees in training (there the missing entries are zero plus the step's
    noise), and a residual net (CRA) adds its fill again at each step. MMFeD3-HidE test
    MRR, (chain in training and evaluation) / (one pass in training, chain in evaluation) /
    (one pass in both): tiny synthetic KG (kg_smoke, 3 seeds) 0.530 / 0.413 / 0.552 with
    unbounded projections (``proj_norm: none``), 0.563 / 0.555 / 0.568 with ``rms``;
    fb15k237_small Fed3 (24 rounds, seeds 0-1, ``rms``) 0.333 / 0.317 / 0.329. Considered
    and not taken: imputing only a batch's rows saves nothing with uniform negatives (every
    row is touched, ``KGEClient.modality_blocks``), and reusing imputations across an epoch
    would train L_KGC on stale values that no longer depend on the current S, W_m and
    imputer (Eq. 12 trains them jointly).

    Noise: training draws steps, noise and hidden blocks from the global RNG (seeded by the
    engine; part of the checkpoint), so a run is reproduced by its seed. Nothing reads
    validation or test data: the input is the client's own rows and features.
    """

    def __init__(self, width: int, block: int, opts: ImputerOptions, seed: int) -> None:
        super().__init__(width, block, opts, seed)
        self.steps, self.sampler = opts.steps, opts.sampler
        betas = torch.linspace(opts.noise_scale * opts.beta_low, opts.noise_scale * opts.beta_up,
                               opts.steps, dtype=torch.float64)
        alphas = 1.0 - betas
        abar = torch.cumprod(alphas, 0)
        abar_prev = torch.cat([torch.ones(1, dtype=torch.float64), abar[:-1]])
        one_minus = -torch.expm1(torch.cumsum(torch.log1p(-betas), 0))  # 1 - abar_t, without cancellation
        one_minus_prev = torch.cat([torch.zeros(1, dtype=torch.float64), one_minus[:-1]])
        # index i holds step t = i + 1
        self.register_buffer("betas", betas.float())
        self.register_buffer("sqrt_abar", abar.sqrt().float())
        self.register_buffer("sqrt_one_minus_abar", one_minus.sqrt().float())
        self.register_buffer("coef_xt", (alphas.sqrt() * one_minus_prev / one_minus).float())
        self.register_buffer("coef_x0", (abar_prev.sqrt() * betas / one_minus).float())
        self.time = nn.Sequential(nn.Linear(TIME_DIM, TIME_DIM), nn.SiLU())
        h = self.hidden
        if opts.recon_net == "cra":
            self.net: nn.Module = CRA(width, h, cond=TIME_DIM)
        elif opts.recon_net == "ae":
            self.net = CondAE(width, h, TIME_DIM)
        elif opts.recon_net == "mlp":
            self.net = CondMLP(width, h, TIME_DIM)
        else:
            self.net = CondMHA(width, block, opts.heads, TIME_DIM)

    def x0_hat(self, x_t: Tensor, t: Tensor) -> Tensor:
        """The network's prediction of x0 from ``x_t`` at steps ``t`` ``[n]`` (1-based)."""
        return self.net(x_t, self.time(step_embedding(t)))

    def q_sample(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """``x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps`` for per-row steps ``t`` (1-based)."""
        i = (t - 1).long()
        return self.sqrt_abar[i].unsqueeze(1) * x0 + self.sqrt_one_minus_abar[i].unsqueeze(1) * noise

    def _generator(self) -> torch.Generator | None:
        """None in training (the global RNG); in evaluation a CPU generator seeded by the client."""
        return None if self.training else torch.Generator().manual_seed(self.seed)

    def _draw(self, like: Tensor, gen: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """Per-row steps ``t ~ U(1, T)`` and noise like ``like`` (drawn on the CPU from ``gen``
        when given, then moved)."""
        n = like.shape[0]
        if gen is None:
            return torch.randint(1, self.steps + 1, (n,), device=like.device), torch.randn_like(like)
        t = torch.randint(1, self.steps + 1, (n,), generator=gen)
        noise = torch.randn(like.shape, generator=gen, dtype=like.dtype)
        return t.to(like.device), noise.to(like.device)

    def _noise(self, like: Tensor) -> Tensor:
        gen = self._generator()
        if gen is None:
            return torch.randn_like(like)
        return torch.randn(like.shape, generator=gen, dtype=like.dtype).to(like.device)

    def reverse(self, x0: Tensor) -> Tensor:
        """x0_hat after the reverse chain from ``x_T ~ q(x_T | x0)`` (``sampler: chain``)."""
        n = x0.shape[0]
        T = self.steps
        x_t = self.q_sample(x0, torch.full((n,), T, device=x0.device), self._noise(x0))
        pred = x0
        for t in range(T, 0, -1):
            tt = torch.full((n,), t, device=x0.device)
            pred = self.x0_hat(x_t, tt)
            x_t = self.coef_xt[t - 1] * x_t + self.coef_x0[t - 1] * pred
        return pred

    def one_step(self, inp: Tensor, gen: torch.Generator | None = None) -> Tensor:
        """``x0_hat(x_t, t)``: one step ``t ~ U(1, T)`` and fresh noise per row, one pass."""
        t, noise = self._draw(inp, gen)
        return self.x0_hat(self.q_sample(inp, t, noise), t)

    def impute(self, x0: Tensor) -> Tensor:
        """The imputation of ``forward`` outside training: one pass with seeded draws, or the
        reverse chain (``sampler``)."""
        if self.sampler == "chain":
            return self.reverse(x0)
        return self.one_step(x0, self._generator())

    def di_loss(self, K: Tensor, H: Tensor, M: Tensor, cached: Tensor | None) -> Tensor:
        """One uniformly drawn step per entity; ``cached`` = ``one_step(K * H)`` if done."""
        return masked_mse(self.one_step(K * H) if cached is None else cached, H.detach(), M)

    def forward(self, H: Tensor, M: Tensor) -> Tensor:
        """Evaluation: the base rule with ``impute``. Training: one stacked reconstruction
        pass gives both L_DI and the imputation (see the class docstring)."""
        if not self.training:
            return super().forward(H, M)
        M = M.to(H.dtype)
        x0 = M * H
        n = x0.shape[0]
        if self.drop > 0:
            K = self.hide_blocks(M)
            pred = self.one_step(torch.cat([x0, K * H], dim=0))
            H_hat, self.loss = pred[:n], self.di_loss(K, H, M, pred[n:])
        else:
            H_hat = self.one_step(x0)
            self.loss = self.di_loss(M, H, M, H_hat)
        return x0 + (1.0 - M) * H_hat


def build_imputer(name: str, width: int, block: int, opts: ImputerOptions, seed: int) -> KGImputer | None:
    """The named imputer (None for ``none``, so a model without one is built exactly as
    before); its initialization depends on ``seed`` only, not on the global RNG."""
    cls = KG_IMPUTERS.get(name)
    if cls is NoImputer:
        return None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(width, block, opts, seed)


def hyper_modal(structure: Tensor, projected: dict[str, Tensor], available: Tensor,
                order: list[str], modalities: list[str]) -> tuple[Tensor, Tensor]:
    """``(H, M)``: ``[S || V_m ...]`` in the order ``order`` and its observation mask;
    ``available`` ``[n, len(modalities)]`` has one column per name of ``modalities``."""
    n, d = structure.shape
    blocks, masks = [structure], [torch.ones(n, d, device=structure.device, dtype=structure.dtype)]
    for m in order:
        blocks.append(projected[m])
        col = available[:, modalities.index(m)].to(structure.dtype)
        masks.append(col.unsqueeze(1).expand(n, projected[m].shape[1]))
    return torch.cat(blocks, dim=1), torch.cat(masks, dim=1)


def split_blocks(H: Tensor, order: list[str], block: int) -> dict[str, Tensor]:
    """The modality blocks of a hyper-modal matrix, by name (the structural block dropped)."""
    return {m: H[:, (j + 1) * block:(j + 2) * block] for j, m in enumerate(order)}
