"""HidE's per-batch cost (issue 27) and the bench that measures it.

``bench kg --imputers`` prints the per-batch seconds of MMFedE-AE and MMFeD3-HidE side by
side with their ratio; here it runs at a tiny size through the same code path (the CLI, the
engine's federation and ``client_update``), so it cannot rot; no timing is asserted. The
imputer tests pin where HidE's cost comes from: its training forward is one stacked
reconstruction pass (L_DI rows and imputation rows), evaluation imputes with the same kind of
pass (the T-step reverse chain is opt-in, ``sampler: chain``), and both stay seeded.
"""

from __future__ import annotations

import re

import pytest
import torch

from baselines.kg.imputers import AE, ImputerOptions, build_imputer, masked_mse
from benchmark import bench_kg
from benchmark.bench_kg import KGSizes, bench_imputers
from fedmm_bench.cli import main
from benchmark.errors import ConfigError

torch.set_num_threads(1)

D = 16  # block width of the hyper-modal test matrices


def tiny_data(tmp_path) -> list[str]:
    return ["dataset.name=synthetic_kg", "dataset.num_entities=60", "partition.name=relation_id",
            "partition.num_clients=2", "missing.name=kg_items", "missing.rate=0.5", "missing.fill=random",
            f"output.cache_dir={tmp_path / 'cache'}", f"output.checkpoint_dir={tmp_path / 'ckpt'}"]


# --------------------------------------------------------------------------- the bench


def test_bench_kg_imputers_prints_both_methods_and_their_ratio(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_kg, "IMPUTER_DATA", tuple(tiny_data(tmp_path)))
    assert main(["bench", "kg", "--imputers", "--device", "cpu", "--dim", "8", "--batch", "16", "--negatives", "4",
                 "--block", "2", "--timed", "2", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bench kg --imputers: synthetic_kg")
    rows = {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\|\s*(MMFedE-AE|MMFeD3-HidE)\s*\|\s*([0-9.]+)\s*\|\s*([0-9.]+)x", out, re.M)}
    assert set(rows) == {"MMFedE-AE", "MMFeD3-HidE"}, out
    (ae_s, ae_ratio), (hide_s, hide_ratio) = rows["MMFedE-AE"], rows["MMFeD3-HidE"]
    assert ae_s > 0 and hide_s > 0 and ae_ratio == 1.0 and hide_ratio > 0


def test_bench_kg_imputers_profile_prints_each_methods_block(tmp_path, monkeypatch, capsys):
    """``--profile N``: one profiled block per method, its summary line and its N costliest ops;
    without --imputers the flag is one line of error."""
    monkeypatch.setattr(bench_kg, "IMPUTER_DATA", tuple(tiny_data(tmp_path)))
    assert main(["bench", "kg", "--imputers", "--device", "cpu", "--dim", "8", "--batch", "16", "--negatives", "4",
                 "--block", "2", "--timed", "1", "--warmup", "0", "--profile", "4"]) == 0
    out = capsys.readouterr().out
    heads = re.findall(r"^profile of one block of 2 batches, (\S+): wall [0-9.]+ s under the profiler, 0 kernel launches, "
                       r"([0-9,]+) aten calls \(nested ones included\)$", out, re.M)
    assert [h[0] for h in heads] == ["MMFedE-AE", "MMFeD3-HidE"] and all(int(h[1].replace(",", "")) > 0 for h in heads)
    assert out.count("Self CPU time total") == 2
    assert main(["bench", "kg", "--profile", "4"]) == 2
    assert "--profile profiles the --imputers steps" in capsys.readouterr().err


def test_profile_step_counts_the_ops_of_one_call():
    x = torch.randn(8, 8)
    prof = bench_kg.profile_step(lambda: (x @ x).relu().sum(), torch.device("cpu"), 3)
    assert prof.ops >= 3 and prof.launches == 0 and prof.device_busy_s == 0.0 and prof.wall_s > 0
    assert "aten::" in prof.table


def test_bench_imputers_returns_the_seconds_and_the_ratio(tmp_path, capsys):
    res = bench_imputers(KGSizes(dim=8, batch=16, negatives=4, timed=1, warmup=0, block=2), "cpu", tiny_data(tmp_path))
    assert res["labels"] == ["MMFedE-AE", "MMFeD3-HidE"]
    ae, hide = res["seconds_per_batch"]
    assert ae > 0 and hide > 0 and res["ratio"] == [1.0, pytest.approx(hide / ae)]
    assert all(o > 0 for o in res["ops_per_batch"]) and res["entities"] > 0
    assert "MMFeD3-HidE" in capsys.readouterr().out


# --------------------------------------------------------------------------- where HidE's passes come from


def low_rank(n: int = 200, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 3, generator=g)
    H = torch.cat([z @ torch.randn(3, D, generator=g) for _ in range(3)], dim=1) / 2
    M = torch.ones_like(H)
    for b in (1, 2):
        M[torch.rand(n, generator=g) < 0.5, b * D:(b + 1) * D] = 0.0
    return H, M


def hide(**opts):  # type: ignore[no-untyped-def]
    imp = build_imputer("hide", 3 * D, D, ImputerOptions(**{"hidden": [24, 12, 4], **opts}), seed=7)
    assert imp is not None
    return imp


def ae_rows(imp, fn) -> list[int]:  # type: ignore[no-untyped-def]
    """Rows seen by each AE-block forward (a CRA is three) while ``fn`` runs."""
    seen: list[int] = []
    handles = [m.register_forward_hook(lambda _m, inp, _o: seen.append(inp[0].shape[0]))
               for m in imp.modules() if isinstance(m, AE)]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("drop, rows", [(0.3, 2), (0.0, 1)])
def test_hide_training_forward_is_one_reconstruction_pass(drop, rows):
    """Training: one CRA pass (3 AE blocks) over the L_DI rows and the imputation rows
    stacked (2n with hidden blocks, n without); the T-step chain is not run."""
    H, M = low_rank(40)
    imp = hide(drop=drop, steps=5).train()
    torch.manual_seed(0)
    assert ae_rows(imp, lambda: imp(H, M)) == [rows * 40] * 3
    assert imp.pop_loss() is not None


def test_hide_evaluation_is_one_seeded_pass_and_the_chain_is_opt_in():
    """Evaluation imputes with the training estimator (one pass, n rows, draws seeded by the
    client: the same numbers twice); ``sampler: chain`` runs the T-step reverse chain."""
    H, M = low_rank(40)
    imp = hide(steps=5).eval()
    with torch.no_grad():
        assert ae_rows(imp, lambda: imp(H, M)) == [40] * 3
        assert torch.equal(imp(H, M), imp(H, M))
        imp.sampler = "chain"
        assert ae_rows(imp, lambda: imp(H, M)) == [40] * 15  # T = 5 steps x 3 CRA blocks
        assert torch.equal(imp(H, M), imp(H, M))
    assert imp.pop_loss() is None
    with pytest.raises(ConfigError, match="sampler"):
        ImputerOptions(sampler="ddim")


def test_hide_evaluation_draws_like_training():
    """The evaluation pass is the training imputation with the client's generator in place
    of the global RNG (same steps and noise given the same draws)."""
    H, M = low_rank(30)
    imp = hide()
    with torch.no_grad():
        got = imp.eval()(H, M)
        gen = torch.Generator().manual_seed(imp.seed)
        t = torch.randint(1, imp.steps + 1, (30,), generator=gen)
        noise = torch.randn(H.shape, generator=gen)
        want = M * H + (1 - M) * imp.x0_hat(imp.q_sample(M * H, t, noise), t)
    assert torch.allclose(got, want, atol=1e-6)


def test_hide_training_forward_is_seeded_by_the_global_rng():
    H, M = low_rank(40)
    imp = hide().train()
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        outs.append((imp(H, M), imp.pop_loss()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    torch.manual_seed(4)
    assert not torch.equal(imp(H, M), outs[0][0])


def test_hide_training_loss_is_the_masked_one_step_loss_of_the_hidden_input():
    """With hidden blocks, L_DI is masked_mse(x0_hat(q_sample(K*H, t), t), H, M) with its
    own step and noise draws, as ``di_loss`` computes it alone."""
    H, M = low_rank(30)
    imp = hide(drop=0.3).train()
    torch.manual_seed(5)
    out = imp(H, M)
    loss = imp.pop_loss()
    torch.manual_seed(5)
    K = imp.hide_blocks(M)
    n = H.shape[0]
    t = torch.randint(1, imp.steps + 1, (2 * n,))
    inp = torch.cat([M * H, K * H])
    pred = imp.x0_hat(imp.q_sample(inp, t, torch.randn_like(inp)), t)
    assert torch.allclose(loss, masked_mse(pred[n:], H, M), atol=1e-6)
    assert torch.allclose(out, M * H + (1 - M) * pred[:n], atol=1e-6)


def test_hide_imputation_fills_missing_blocks_in_training_and_evaluation():
    """After training, the one-pass imputation (training and evaluation) and the opt-in
    reverse chain all beat mean fill on low-rank data by far."""
    H, M = low_rank()
    miss = 1 - M
    err = lambda X: float(((X - H) ** 2 * miss).sum() / miss.sum())  # noqa: E731
    mean_fill = err(M * H + miss * ((H * M).sum(0) / M.sum(0)))
    imp = hide()
    opt = torch.optim.Adam(imp.parameters(), lr=3e-3)
    for step in range(150):
        torch.manual_seed(step)
        opt.zero_grad()
        imp.train()
        imp(H, M)
        imp.pop_loss().backward()
        opt.step()
    with torch.no_grad():
        torch.manual_seed(0)
        errs = [err(imp.train()(H, M)), err(imp.eval()(H, M))]
        imp.sampler = "chain"
        errs.append(err(imp(H, M)))
    assert all(e < 0.3 * mean_fill for e in errs), (errs, mean_fill)
