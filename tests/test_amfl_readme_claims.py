"""The AMFL tiny-scale sentence of docs/findings.md is the committed tiny regression reference,
read back.

``results/reference/fedmbridge_table2.json`` comes from ``regress --suite fedmbridge_table2
--update`` (5 seeds at tiny scale) and CI's ``regress`` holds the code to it; this test holds
the findings page to the reference, so neither can drift from the other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABELS = {"FedMBridge": "fedmbridge", "Local": "amfl_local", "FedGKD*": "amfl_fedgkd", "APFL": "amfl_apfl",
          "HeteroFL": "amfl_heterofl", "HyperPFL": "amfl_hyperpfl"}


def _reference_acc() -> dict[str, float]:
    ref = json.loads((ROOT / "results" / "reference" / "fedmbridge_table2.json").read_text())
    return {label.split(",")[0].split("=")[1]: cell["metrics"]["test/accuracy"]["mean"]
            for label, cell in ref["cells"].items()}


def test_readme_tiny_amfl_accuracies_are_the_reference_and_fedmbridge_is_above_hyperpfl_only():
    acc = _reference_acc()
    page = " ".join((ROOT / "docs" / "findings.md").read_text().split())
    sentence = re.search(r"At tiny scale FedMBridge, generating each layer whole, is above HyperPFL and below the "
                         r"rest \(ACC ([0-9.]+); ([^)]*)\)", page)
    assert sentence, "docs/findings.md's AMFL tiny-scale sentence is gone or reworded; update this test with it"
    stated = {"FedMBridge": float(sentence.group(1))}
    stated.update({name: float(v) for name, v in re.findall(r"([A-Za-z*]+) ([0-9.]+)", sentence.group(2))})
    assert set(stated) == set(LABELS)
    for name, value in stated.items():
        assert abs(acc[LABELS[name]] - value) <= 0.005 + 1e-9, (name, value, acc[LABELS[name]])  # 2 decimals
    others = {k: v for k, v in acc.items() if k in LABELS.values() and k != "fedmbridge"}
    assert acc["amfl_hyperpfl"] < acc["fedmbridge"] < min(v for k, v in others.items() if k != "amfl_hyperpfl")
