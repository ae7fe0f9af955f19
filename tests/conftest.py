"""Shared fixtures: a tiny hand-made federation for fast engine tests."""

from __future__ import annotations

import os

import pytest
import torch

from benchmark.engine import DEVICE_ENV
from benchmark.federation import ClientData, FederatedData
from devices import TEST_DEVICE_ENV, test_device

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("FEDMM_THREADS", "1")
os.environ.setdefault("FEDMM_FLOWER_CPUS", "2")  # a Flower simulation in a test starts Ray with at most 2 CPUs
torch.set_num_threads(1)  # tiny graphs: one thread is fastest and avoids contention on 2 cores
try:  # the same for numpy/scipy/sklearn BLAS pools
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
    pass


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default=None,
                     help="cpu, cuda or cuda:N: where the engine and the tests' tensors run "
                          "(default: $FEDMM_TEST_DEVICE, else cpu)")


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--device") or os.environ.get(TEST_DEVICE_ENV) or "cpu"
    dev = torch.device(name)  # a malformed name fails here, before any test
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"--device {name}: CUDA is not available on this machine")
    os.environ[TEST_DEVICE_ENV] = name
    os.environ[DEVICE_ENV] = name  # train.device: auto -> this device


# Files whose tests start Ray or Flower (a local cluster, a SuperLink and SuperNodes, or a
# Flower simulation, which runs on Ray: `submit`'s Flower gate): two of them at once on one
# host fight over Ray's session and Flower's ports, and `ray stop` in one kills the other's
# instance, so under pytest-xdist they share one group and run one after another on one worker.
RAY_OR_FLOWER = {"test_ray_sweep.py", "test_ray_sweep_driver.py", "test_flower_backend.py",
                 "test_cost.py", "test_env_values.py", "test_ray_cluster_running.py",
                 "test_flower_deploy_guide.py", "test_submit.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``-n N --dist loadgroup`` (``make test``) a test file stays on one worker, so its
    module fixtures (federations, built datasets) are built once, not once per worker."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            name = item.path.name
            item.add_marker(pytest.mark.xdist_group("ray_or_flower" if name in RAY_OR_FLOWER else name))


def pytest_report_header(config: pytest.Config) -> str:
    return f"fedmm test device: {test_device()}"


@pytest.fixture
def device() -> torch.device:
    """The test device (see tests/devices.py)."""
    return test_device()


def make_tiny_federation(n: int = 300, k: int = 3, classes: int = 3, seed: int = 0) -> FederatedData:
    """Class-clustered features on a homophilous random graph, split randomly into k clients."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    centers = torch.randn(classes, 8, generator=g) * 1.5
    feats = {"text": centers[y] @ torch.randn(8, 12, generator=g) + torch.randn(n, 12, generator=g) * 2,
             "image": centers[y] @ torch.randn(8, 10, generator=g) + torch.randn(n, 10, generator=g) * 2}
    order = torch.argsort(y * n + torch.randperm(n, generator=g))
    src = order[:-1]
    dst = order[1:]
    keep = y[src] == y[dst]
    ei = torch.stack([src[keep], dst[keep]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    part = torch.randint(0, k, (n,), generator=g)
    avail = torch.rand(n, 2, generator=g) > 0.2
    feats = {m: x * avail[:, j:j + 1] for j, (m, x) in enumerate(feats.items())}
    u = torch.rand(n, generator=g)
    train, val, test = u < 0.4, (u >= 0.4) & (u < 0.7), u >= 0.7
    clients = []
    for c in range(k):
        ids = torch.nonzero(part == c).flatten()
        loc = torch.full((n,), -1, dtype=torch.long)
        loc[ids] = torch.arange(ids.numel())
        inside = (part[ei[0]] == c) & (part[ei[1]] == c)
        cross = (part[ei[0]] == c) & (part[ei[1]] != c)
        clients.append(ClientData(cid=c, global_ids=ids, features={m: x[ids] for m, x in feats.items()},
                                  available=avail[ids], edge_index=loc[ei[:, inside]], y=y[ids],
                                  train_mask=train[ids], val_mask=val[ids], test_mask=test[ids], num_classes=classes,
                                  boundary_edges=torch.stack([loc[ei[0, cross]], ei[1, cross]])))
    pooled = ClientData(cid=-1, global_ids=torch.arange(n), features=feats, available=avail, edge_index=ei, y=y,
                        train_mask=train, val_mask=val, test_mask=test, num_classes=classes, members=clients)
    return FederatedData(clients=clients, modalities=list(feats), feature_dims={m: x.shape[1] for m, x in feats.items()},
                         num_classes=classes, artifact_hash="tiny", num_global_nodes=n, pooled=pooled,
                         stats={"artifact_recipe": "tiny"})


@pytest.fixture
def tiny_fed() -> FederatedData:
    return make_tiny_federation()
