"""The core local-training loop (benchmark/training.py): the same steps as a hand-written
loop, a penalty hook, a mini-batch form, NaN detection, and no host sync per step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmark.training import LocalLoop, NonFiniteLoss, shuffled_batches
from devices import test_device


def _problem(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    dev = test_device()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 5, generator=g)
    y = x @ torch.randn(5, 1, generator=g) + 0.1 * torch.randn(64, 1, generator=g)
    torch.manual_seed(seed)
    return nn.Linear(5, 1).to(dev), x.to(dev), y.to(dev)


def test_full_batch_loop_equals_a_hand_written_loop_with_penalty_and_clipping():
    model, x, y = _problem()
    ref, _, _ = _problem()
    anchor = [p.detach().clone() for p in model.parameters()]

    def penalty_of(m: nn.Module):
        return lambda: 0.3 * sum(((p - a) ** 2).sum() for p, a in zip(m.parameters(), anchor))

    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    LocalLoop(epochs=4, grad_clip=0.5).run(lambda: ((model(x) - y) ** 2).mean(), opt, model.parameters(), cid=0,
                                           penalty=penalty_of(model))
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    pen = penalty_of(ref)
    for _ in range(4):
        ref_opt.zero_grad(set_to_none=True)
        loss = ((ref(x) - y) ** 2).mean() + pen()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    # the penalty did something: without it the weights end elsewhere
    plain, _, _ = _problem()
    LocalLoop(epochs=4, grad_clip=0.5).run(lambda: ((plain(x) - y) ** 2).mean(),
                                           torch.optim.Adam(plain.parameters(), lr=0.1), plain.parameters(), cid=0)
    assert not torch.equal(plain.weight, model.weight)


def test_minibatch_epochs_visit_every_item_once_in_a_seeded_order():
    items = torch.arange(10, device=test_device())
    seen = [torch.cat(list(shuffled_batches(items, 3, torch.Generator(device=items.device).manual_seed(5))(e)))
            for e in range(2)]
    again = torch.cat(list(shuffled_batches(items, 3, torch.Generator(device=items.device).manual_seed(5))(0)))
    assert torch.equal(seen[0], again)
    for order in seen:
        assert sorted(order.tolist()) == list(range(10))
    assert [len(b) for b in shuffled_batches(items, 3, torch.Generator(device=items.device).manual_seed(5))(0)] \
        == [3, 3, 3, 1]


def test_minibatch_loop_logs_mean_loss_of_each_epoch():
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the loss of every batch is known in advance
    batches = lambda e: (slice(s, s + 16) for s in range(0, 64, 16))  # noqa: E731
    log = LocalLoop(epochs=2).run(lambda sl: ((model(x[sl]) - y[sl]) ** 2).mean(), opt, model.parameters(), cid=0,
                                  batches=batches)
    with torch.no_grad():
        expected = sum(float(((model(x[s:s + 16]) - y[s:s + 16]) ** 2).mean()) for s in range(0, 64, 16)) / 4
    assert log.epoch_steps == [4, 4]
    assert log.last_loss == pytest.approx(expected, rel=1e-6)


def test_a_non_finite_loss_raises_and_names_the_client():
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    def loss_fn(i: int) -> torch.Tensor:
        calls.append(i)
        loss = ((model(x) - y) ** 2).mean()
        return loss * float("nan") if i == 1 else loss

    with pytest.raises(NonFiniteLoss, match="client 7"):
        LocalLoop(epochs=3).run(loss_fn, opt, model.parameters(), cid=7, batches=lambda e: range(3))
    assert calls == [0, 1, 2]  # found at the end of the first epoch, not later
    with pytest.raises(NonFiniteLoss, match="client 3"):
        LocalLoop(epochs=2).run(lambda: ((model(x) - y) ** 2).mean() * float("inf"), opt, model.parameters(), cid=3)


class _SyncCounter:
    """Counts reads of a tensor's value by Python (each one is a host sync on a GPU)."""

    NAMES = ("__bool__", "__float__", "__int__", "item", "tolist")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)

            def counted(t, *a, _orig=original, **k):  # noqa: ANN001, ANN202
                self.count += 1
                return _orig(t, *a, **k)

            monkeypatch.setattr(torch.Tensor, name, counted)


def test_the_loop_reads_the_device_once_per_epoch_not_per_step(monkeypatch):
    model, x, y = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # SGD keeps no step counter to read
    anchor = model.weight.detach().clone()
    counter = _SyncCounter(monkeypatch)
    LocalLoop(epochs=3, grad_clip=1.0).run(lambda sl: ((model(x[sl]) - y[sl]) ** 2).mean(), opt,
                                           model.parameters(), cid=0,
                                           batches=lambda e: (slice(s, s + 8) for s in range(0, 64, 8)),
                                           penalty=lambda: (model.weight - anchor).pow(2).sum())
    assert counter.count == 3  # 3 epochs x 8 steps, one finiteness read per epoch
    counter.count = 0
    LocalLoop(epochs=5).run(lambda: ((model(x) - y) ** 2).mean(), opt, model.parameters(), cid=0)
    assert counter.count == 1  # full batch: one read when local training ends
