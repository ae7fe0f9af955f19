"""FedMBridge: the TAHN chain-rule update against autograd, its ledger (uploads audited,
every client sent only its own weights), determinism, and that it beats Local where
sharing helps."""

from __future__ import annotations

import copy
import hashlib

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from benchmark.amfl import AMFLNet, ArchSpec, BlockSpec, build_graph
from benchmark.amfl.graph import vocab_sizes
from benchmark.registry import load_plugins
from methods.fedmbridge.tahn import TAHN, ClientLayout, chain_rule_step

load_plugins()
DIMS = {"image": 12, "signal": 8}
TOKENS = {"image": 4, "signal": 4}


def _tiny_clients() -> list[AMFLNet]:
    torch.manual_seed(0)
    a = ArchSpec((("image", BlockSpec.make("mlp", widths=[6])), ("signal", BlockSpec.make("attn", width=4))),
                 BlockSpec.make("tensor", dim=2), BlockSpec.make("mlp", widths=[5]))
    b = ArchSpec((("signal", BlockSpec.make("mlp", widths=[7, 4])),), None, BlockSpec.make("mlp", widths=[3]))
    return [AMFLNet(a, DIMS, TOKENS, 3).double(), AMFLNet(b, DIMS, TOKENS, 2).double()]


@pytest.mark.parametrize("combine", ["concat", "sum"])
def test_chain_rule_update_equals_autograd_of_the_clients_losses(combine):
    """With one local SGD step (Delta theta_i = -alpha grad L_i), the server's update from
    the deltas alone must equal the gradient step autograd takes on
    (1/|N_r|) sum_i L_i(h(A_i, c_i; phi)) for phi, and on L_i for c_i."""
    nets = _tiny_clients()
    graphs = [build_graph(n, list(DIMS)) for n in nets]
    torch.manual_seed(1)
    tahn = TAHN(vocab_sizes(len(DIMS)), 3, embed_dim=8, gnn_widths=[6, 5], task_dim=4, combine=combine, hidden=7,
                chunk=16, max_chunks=64, chunk_dim=3).double()
    layouts = {i: ClientLayout.of(g, 16, 64, torch.device("cpu")) for i, g in zip((0, 2), graphs)}
    data = {i: ({m: torch.randn(9, d, dtype=torch.float64) for m, d in DIMS.items()},
                torch.randint(0, n.head.out_dim, (9,))) for i, n in zip((0, 2), nets)}
    alpha, eta = 0.3, 0.05

    def loss(i: int, net: AMFLNet, theta: torch.Tensor) -> torch.Tensor:
        params, k = {}, 0
        for name, p in net.named_parameters():
            params[name] = theta[k:k + p.numel()].view_as(p)
            k += p.numel()
        x, y = data[i]
        return F.cross_entropy(functional_call(net, params, (x,)), y)

    # clients: one SGD step from the generated weights
    deltas = {}
    for i, net in zip((0, 2), nets):
        theta = tahn(layouts[i], i).detach().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(i, net, theta), theta)
        deltas[i] = -alpha * g
    # reference: autograd through the hypernetwork
    ref = copy.deepcopy(tahn)
    phi_loss = sum(loss(i, n, ref(layouts[i], i)) for i, n in zip((0, 2), nets)) / 2
    grads = torch.autograd.grad(phi_loss, ref.phi())
    task_grads = {i: torch.autograd.grad(loss(i, n, ref(layouts[i], i)), ref.tasks.weight)[0][i]
                  for i, n in zip((0, 2), nets)}
    # server: chain rule from the deltas, SGD step eta
    opt = torch.optim.SGD(tahn.parameters(), lr=eta)
    chain_rule_step(tahn, opt, layouts, deltas)
    for p_new, p_old, g in zip(tahn.phi(), ref.phi(), grads):
        torch.testing.assert_close(p_new, p_old - eta * alpha * g, atol=1e-6, rtol=0)
    for i in (0, 2):
        torch.testing.assert_close(tahn.tasks.weight[i], ref.tasks.weight[i] - eta * alpha * task_grads[i],
                                   atol=1e-6, rtol=0)
    torch.testing.assert_close(tahn.tasks.weight[1], ref.tasks.weight[1], atol=0, rtol=0)  # not sampled: unchanged
    assert any(not torch.allclose(a, b) for a, b in zip(tahn.phi(), ref.phi()))
