"""A GPU cost model of one KG training batch, from the aten calls the CPU makes for it.

Why: a GPU is lent rarely and for minutes, so what to optimize must be chosen before one is
there. Every aten call of one batch (the engine's ``client_update`` for one client, as
``bench kg --imputers`` runs it, with CUDA's one-chunk distance policy) is charged the bytes it
reads and writes at the device's memory bandwidth, its matrix products at the device's matmul
rate, and one launch; the sum is a floor the measured batch can be compared with, and the
costliest (op, shapes) groups say where the time would go.

    python benchmarks/kg_cost_model.py [--algorithm mmfed3 --imputer hide --dim 256]
        [--bandwidth-tbs 4.0 --matmul-tflops 150 --launch-us 5] [--top 20] [--set KEY=VALUE ...]

Defaults: FB15K-237 Fed3 client 0 as ``bench kg --imputers`` builds it, batch 1,024, 256
negatives; an H200's HBM (4 TB/s) and a TF32 matmul rate (150 TFLOP/s as reached, not the
datasheet's peak). Views (reshapes, transposes, slices) move no bytes. The CPU's optimizer
calls Adam per tensor where CUDA's runs it for all tensors at once, so launches are
overstated by about ten per parameter tensor.
"""

from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmark import bench_kg  # noqa: E402
from benchmark.kge import ops  # noqa: E402

VIEWS = frozenset({"detach", "t", "view", "expand", "unsqueeze", "squeeze", "slice", "select", "_unsafe_view", "alias",
                   "as_strided", "permute", "transpose", "split", "chunk", "split_with_sizes", "unbind"})


@dataclass(frozen=True)
class Device:
    """What the model charges: bytes/s of memory, matmul FLOP/s, seconds per launch."""

    bandwidth: float
    matmul_flops: float
    launch_s: float


def _bytes(x: object) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(y) for y in x)
    return 0


def _matmul_flops(name: str, args: tuple) -> int:
    if name == "mm":
        a, b = args[0], args[1]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]
    if name == "addmm":
        a, b = args[1], args[2]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]
    if name == "bmm":
        a, b = args[0], args[1]
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    return 0


class CostModel(TorchDispatchMode):
    """Charges every aten call made inside it (see the module docstring)."""

    def __init__(self, device: Device) -> None:
        super().__init__()
        self.device = device
        self.calls: list[tuple[str, str, float, int, int]] = []  # (op, shapes, seconds, bytes, flops)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        moved = 0 if name in VIEWS else _bytes(args) + _bytes(out)
        flops = _matmul_flops(name, args)
        seconds = moved / self.device.bandwidth + flops / self.device.matmul_flops
        shapes = str([tuple(a.shape) for a in args if isinstance(a, torch.Tensor)][:2])
        self.calls.append((name, shapes, seconds, moved, flops))
        return out

    def summary(self, top: int) -> str:
        kernels = sum(c[2] for c in self.calls)
        launches = len(self.calls) * self.device.launch_s
        lines = [f"{len(self.calls):,} aten calls: modeled {kernels * 1e3:.2f} ms of kernels + {launches * 1e3:.2f} ms of "
                 f"launches = {(kernels + launches) * 1e3:.2f} ms; {sum(c[3] for c in self.calls) / 1e9:.2f} GB moved, "
                 f"{sum(c[4] for c in self.calls) / 1e9:.1f} GFLOP of matrix products"]
        groups: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
        for name, shapes, seconds, moved, _ in self.calls:
            g = groups[(name, shapes)]
            g[0] += seconds
            g[1] += 1
            g[2] += moved
        lines.append(f"{'ms':>8} {'calls':>5} {'GB':>7}  op (first two input shapes)")
        for (name, shapes), (seconds, count, moved) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"{seconds * 1e3:8.3f} {count:5d} {moved / 1e9:7.3f}  {name} {shapes}")
        return "\n".join(lines)


def model_batch(algorithm: str, imputer: str, sizes: bench_kg.KGSizes, device: Device,
                data: tuple[str, ...] = bench_kg.IMPUTER_DATA, cid: int = 0) -> CostModel:
    """One batch of ``algorithm`` with ``imputer`` on client ``cid``, charged by ``device``."""
    from benchmark.config import load_config
    from benchmark.engine import Engine
    from benchmark.federation import build_federation
    from benchmark.registry import load_plugins

    load_plugins()
    cfg = load_config(None, [*data, "task.name=kg_completion", "task.decoder=rotate", "task.loss=softmax_ce",
                             f"task.dim={sizes.dim}", f"task.num_negatives={sizes.negatives}",
                             f"task.batch_size={sizes.batch}", "train.local_epochs=1", "train.device=cpu",
                             f"seed={sizes.seed}", f"algorithm.name={algorithm}", f"algorithm.imputer={imputer}"])
    engine = Engine(cfg, fed=build_federation(cfg), audit=False)
    step = bench_kg.imputer_step_fn(engine, cid, sizes)
    previous = ops.CHUNK_ELEMENTS
    ops.CHUNK_ELEMENTS = 1 << 62  # CUDA's policy: a paper-size batch is one chunk
    try:
        step()  # the first call builds the models and Adam's state
        with CostModel(device) as model:
            step()
    finally:
        ops.CHUNK_ELEMENTS = previous
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithm", default="mmfed3")
    p.add_argument("--imputer", default="hide")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--negatives", type=int, default=256)
    p.add_argument("--bandwidth-tbs", type=float, default=4.0, help="memory bandwidth, TB/s")
    p.add_argument("--matmul-tflops", type=float, default=150.0, help="matrix-product rate, TFLOP/s")
    p.add_argument("--launch-us", type=float, default=5.0, help="seconds per launch, microseconds")
    p.add_argument("--top", type=int, default=20, help="costliest (op, shapes) groups printed")
    p.add_argument("--set", dest="data", action="append", default=None, metavar="KEY=VALUE",
                   help="the federation's options instead of bench kg --imputers' (repeatable)")
    a = p.parse_args(argv)
    if min(a.dim, a.batch, a.negatives, a.top) < 1 or min(a.bandwidth_tbs, a.matmul_tflops, a.launch_us) <= 0:
        p.error("sizes and --top must be >= 1, the device's rates > 0")
    sizes = bench_kg.KGSizes(dim=a.dim, batch=a.batch, negatives=a.negatives, block=1)
    device = Device(a.bandwidth_tbs * 1e12, a.matmul_tflops * 1e12, a.launch_us * 1e-6)
    data = bench_kg.IMPUTER_DATA if a.data is None else tuple(a.data)
    model = model_batch(a.algorithm, a.imputer, sizes, device, data)
    print(f"{a.algorithm} ({a.imputer}), dim {a.dim}, batch {a.batch}, {a.negatives} negatives; device model "
          f"{a.bandwidth_tbs} TB/s, {a.matmul_tflops} TFLOP/s matmul, {a.launch_us} us a launch")
    print(model.summary(a.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
