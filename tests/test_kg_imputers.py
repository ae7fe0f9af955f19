"""The FedMKGC missing-modality imputers (none, ae, cra, mmin, hide; baselines/kg/imputers.py):
the masked loss never sees an unobserved entry, observed entries pass through unchanged,
HidE's noise schedule and posterior are the paper's, each imputer recovers masked blocks of a
low-rank hyper-modal matrix far better than mean or random fill, and every multimodal KG
algorithm trains with each imputer on the tiny synthetic KG, audited, with the imputer's
parameters never uploaded."""

from __future__ import annotations

import pytest
import torch

from baselines.kg.imputers import KG_IMPUTERS, HidEImputer, ImputerOptions, build_imputer, masked_mse
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from data_prep.build import build_federation
from test_kg_track import kg_cfg, random_mrr

torch.set_num_threads(1)

IMPUTERS = ("ae", "cra", "mmin", "hide")
D, RANK = 16, 3  # block width and rank of the generated hyper-modal matrix


def low_rank(n: int = 200, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``H = [S || V || D]`` of rank 3 and a mask hiding V and/or D of about half the rows."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, RANK, generator=g)
    H = torch.cat([z @ torch.randn(RANK, D, generator=g) for _ in range(3)], dim=1) / 2
    M = torch.ones_like(H)
    for b in (1, 2):
        M[torch.rand(n, generator=g) < 0.5, b * D:(b + 1) * D] = 0.0
    return H, M


def make(name: str, **opts) -> torch.nn.Module:
    imp = build_imputer(name, 3 * D, D, ImputerOptions(**{"hidden": [24, 12, 4], **opts}), seed=7)
    assert imp is not None
    return imp


def train_loss(imp: torch.nn.Module, H: torch.Tensor, M: torch.Tensor, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)  # HidE's noise and the hidden blocks come from the global RNG
    imp.train()
    imp(H, M)
    return imp.pop_loss()


def test_registry_options_and_none(tmp_path):
    assert {"none", *IMPUTERS} <= set(KG_IMPUTERS.names())
    assert build_imputer("none", 48, 16, ImputerOptions(), 0) is None
    with pytest.raises(ConfigError, match="recon_net"):
        ImputerOptions(recon_net="unet")
    with pytest.raises(ConfigError, match="three integers"):
        ImputerOptions(hidden=[8, 4])
    with pytest.raises(ConfigError, match="algorithm.imputer"):
        kg_cfg(tmp_path, "mmfede", algo_params={"imputer": "gan"})
    with pytest.raises(ConfigError, match="imputer options"):
        kg_cfg(tmp_path, "mmfede", algo_params={"imputer": "hide", "beta_low": 0.1, "beta_up": 0.01})


def test_masked_mse_gradient_is_zero_on_unobserved_entries():
    pred = torch.randn(5, 6, requires_grad=True)
    target = torch.randn(5, 6)
    mask = (torch.rand(5, 6) < 0.5).float()
    masked_mse(pred, target, mask).backward()
    assert torch.all(pred.grad[mask == 0] == 0) and torch.any(pred.grad[mask == 1] != 0)
    changed = target + (1 - mask) * 100.0
    assert masked_mse(pred, changed, mask) == masked_mse(pred, target, mask)


@pytest.mark.parametrize("name", IMPUTERS)
def test_imputer_loss_ignores_unobserved_entries(name):
    """Changing H where it is unobserved changes neither L_DI nor any gradient; the loss
    has no gradient with respect to unobserved entries of H."""
    H, M = low_rank(40)
    imp = make(name)
    H1 = H.clone().requires_grad_(True)
    loss1 = train_loss(imp, H1, M)
    loss1.backward()
    grads1 = [p.grad.clone() for p in imp.parameters()]
    assert torch.all(H1.grad[M == 0] == 0)
    imp.zero_grad()
    H2 = (H + (1 - M) * 50.0 * torch.randn_like(H)).requires_grad_(True)
    loss2 = train_loss(imp, H2, M)
    loss2.backward()
    assert loss2.item() == pytest.approx(loss1.item(), rel=1e-6, abs=1e-7)
    for g1, p in zip(grads1, imp.parameters()):
        assert torch.allclose(g1, p.grad, atol=1e-6)


@pytest.mark.parametrize("name", IMPUTERS)
def test_observed_entries_pass_through_unchanged(name):
    H, M = low_rank(30)
    imp = make(name)
    for mode in (imp.train, imp.eval):
        mode()
        out = imp(H, M)
        assert torch.equal(out[M == 1], H[M == 1]) and torch.isfinite(out).all()
    imp.eval()
    with torch.no_grad():
        assert torch.equal(imp(H, M), imp(H, M)), "evaluation must be deterministic"
        assert imp.pop_loss() is None


def test_hide_noise_schedule_and_posterior():
    opts = ImputerOptions(steps=10)
    hide = make("hide", steps=10)
    s = opts.noise_scale
    betas = torch.linspace(s * 5e-4, s * 5e-2, 10, dtype=torch.float64)
    assert torch.allclose(hide.betas.double(), betas, rtol=1e-6)
    assert hide.betas[0].item() == pytest.approx(5e-8) and hide.betas[-1].item() == pytest.approx(5e-6)
    abar = torch.cumprod(1 - betas, 0)
    assert torch.allclose(hide.sqrt_abar.double(), abar.sqrt(), rtol=1e-7)
    assert torch.allclose(hide.sqrt_one_minus_abar.double(), (1 - abar).sqrt(), rtol=1e-4)
    # posterior mean coefficients (Eq. 15): t = 1 returns x0_hat exactly (abar_0 = 1)
    assert hide.coef_xt[0].item() == 0.0 and hide.coef_x0[0].item() == pytest.approx(1.0, rel=1e-6)
    t = 6
    ab, ab_prev, b = abar[t - 1], abar[t - 2], betas[t - 1]
    assert hide.coef_xt[t - 1].item() == pytest.approx(float((1 - b).sqrt() * (1 - ab_prev) / (1 - ab)), rel=1e-4)
    assert hide.coef_x0[t - 1].item() == pytest.approx(float(ab_prev.sqrt() * b / (1 - ab)), rel=1e-4)
    # q(x_t | x0) = N(sqrt(abar_t) x0, (1 - abar_t) I), checked where the noise is visible
    loud = HidEImputer(48, 16, ImputerOptions(steps=4, beta_low=0.1, beta_up=0.4, noise_scale=1.0, hidden=[8, 4, 2]), 0)
    x0 = torch.full((20000, 48), 2.0)
    tt = torch.full((20000,), 3)
    xt = loud.q_sample(x0, tt, torch.randn_like(x0))
    ab3 = float(torch.cumprod(1 - torch.linspace(0.1, 0.4, 4, dtype=torch.float64), 0)[2])
    assert xt.mean().item() == pytest.approx(2.0 * ab3 ** 0.5, abs=0.01)
    assert xt.var().item() == pytest.approx(1 - ab3, rel=0.02)


@pytest.mark.parametrize("name", IMPUTERS)
def test_imputation_beats_mean_and_random_fill_on_low_rank_data(name):
    H, M = low_rank()
    miss = 1 - M
    err = lambda X: float(((X - H) ** 2 * miss).sum() / miss.sum())  # noqa: E731
    mean_fill = err(M * H + miss * ((H * M).sum(0) / M.sum(0)))
    random_fill = err(M * H + miss * torch.randn(H.shape, generator=torch.Generator().manual_seed(1)) * H.std())
    imp = make(name)
    opt = torch.optim.Adam(imp.parameters(), lr=3e-3)
    for step in range(150):
        opt.zero_grad()
        train_loss(imp, H, M, seed=step).backward()
        opt.step()
    imp.eval()
    with torch.no_grad():
        imputed = err(imp(H, M))
    assert imputed < 0.3 * mean_fill and imputed < 0.3 * random_fill, (name, imputed, mean_fill, random_fill)


# ------------------------------------------------------------------ through the engine

ALLOWED = {"entity_ids", "entity", "num_train", "proj.text.weight", "proj.text.bias", "proj.image.weight",
           "proj.image.bias", "fusion.logits"}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_imputers")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(kg_cfg(tmp))


def run(tmp, fed, alg: str, rounds: int = 5, **params):
    eng = Engine(kg_cfg(tmp, alg, rounds=rounds, algo_params=params), fed=fed)
    return eng.run(), eng


@pytest.mark.parametrize("alg,imputer,extra", [
    ("mmfede", "ae", {}),
    ("mmfedprox", "cra", {}),
    ("mmfedec", "mmin", {}),
    ("mmind", "hide", {"recon_net": "mlp", "diffusion_steps": 3}),
    ("mmfede", "hide", {"diffusion_steps": 3}),
])
def test_algorithm_with_imputer_trains_audited_and_keeps_imputer_local(tmp, fed, alg, imputer, extra):
    rec, eng = run(tmp, fed, alg, imputer=imputer, **extra)
    assert rec["status"] == "ok", rec["error"]
    assert not rec["comm"]["violations"]
    ref = random_mrr(fed)
    assert rec["metrics"]["test/mrr"] > 2.0 * ref, (alg, imputer, rec["metrics"]["test/mrr"], ref)
    names = set(rec["comm"]["upload_names"])
    assert names <= ALLOWED, names - ALLOWED
    model = eng.sim.states[fed.clients[0].cid]["model"]
    assert model.imputer is not None and type(model.imputer) is KG_IMPUTERS.get(imputer)
    assert sum(p.numel() for p in model.imputer.parameters()) > 0


def test_hide_runs_are_deterministic_and_none_adds_nothing(tmp, fed):
    a, _ = run(tmp, fed, "mmfede", rounds=3, imputer="hide", diffusion_steps=3)
    b, _ = run(tmp, fed, "mmfede", rounds=3, imputer="hide", diffusion_steps=3)
    assert a["metrics"] == b["metrics"] and a["curves"]["val/mrr"] == b["curves"]["val/mrr"]
    plain, eng = run(tmp, fed, "mmfede", rounds=2)
    model = eng.sim.states[fed.clients[0].cid]["model"]
    assert model.imputer is None and not any(k.startswith("imputer") for k in model.state_dict())


def test_hide_sampler_option_reaches_the_imputer(tmp, fed):
    """algorithm.hide_sampler picks HidE's evaluation imputation (step by default, chain: the
    paper's reverse chain); a bad value is a ConfigError naming the option."""
    for sampler in ("step", "chain"):
        eng = Engine(kg_cfg(tmp, "mmfede", rounds=1, algo_params={"imputer": "hide", "hide_sampler": sampler}), fed=fed)
        eng.run()
        model = next(iter(eng.sim.states.values()))["model"]
        assert isinstance(model.imputer, HidEImputer) and model.imputer.sampler == sampler
    with pytest.raises(ConfigError, match="hide_sampler"):
        kg_cfg(tmp, "mmfede", algo_params={"imputer": "hide", "hide_sampler": "ddim"})
