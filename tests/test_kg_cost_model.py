"""benchmarks/kg_cost_model.py: each aten call is charged its bytes, matrix-product FLOPs and a
launch; a tiny federation's batch runs through it from the command line, so it cannot rot."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("kg_cost_model", ROOT / "benchmarks" / "kg_cost_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_a_matrix_product_is_charged_its_bytes_and_flops_and_a_view_nothing():
    mod = _module()
    a, b = torch.randn(4, 8), torch.randn(8, 16)
    with mod.CostModel(mod.Device(bandwidth=1e3, matmul_flops=1e6, launch_s=1e-3)) as model:
        a.t()
        a @ b
    (view, mm) = model.calls
    assert view[0] == "t" and view[3] == 0 and view[2] == 0.0
    assert mm[0] == "mm" and mm[3] == (32 + 128 + 64) * 4 and mm[4] == 2 * 4 * 8 * 16
    assert mm[2] == mm[3] / 1e3 + mm[4] / 1e6
    total = re.search(r"modeled ([0-9.]+) ms of kernels \+ ([0-9.]+) ms of launches", model.summary(5))
    assert float(total.group(1)) == round(mm[2] * 1e3, 2) and float(total.group(2)) == 2.0


def test_one_tiny_batch_from_the_command_line(tmp_path, capsys):
    mod = _module()
    data = ["dataset.name=synthetic_kg", "dataset.num_entities=60", "partition.name=relation_id",
            "partition.num_clients=2", "missing.name=kg_items", "missing.rate=0.5", "missing.fill=random",
            f"output.cache_dir={tmp_path / 'cache'}"]
    argv = ["--dim", "8", "--batch", "16", "--negatives", "4", "--top", "3"]
    for kv in data:
        argv += ["--set", kv]
    assert mod.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("mmfed3 (hide), dim 8, batch 16, 4 negatives")
    calls = int(re.search(r"^([0-9,]+) aten calls", out, re.M).group(1).replace(",", ""))
    assert calls > 100
    rows = [ln for ln in out.splitlines() if re.match(r"^\s*[0-9.]+\s+\d+\s+[0-9.]+\s+\S", ln)]
    assert len(rows) == 3
    from benchmark.kge import ops
    assert ops.CHUNK_ELEMENTS < 1 << 40  # the CPU's chunk policy is back
