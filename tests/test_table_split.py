"""``split_wide``: a paper table wider than MAX_MARKDOWN_COLUMNS prints one markdown table per
value of its first column key (per dataset, as papers split theirs), under one caption."""

from __future__ import annotations

from typing import Any

import pytest
from markdown_tables import table_widths

from benchmark.errors import ConfigError
from benchmark.report.tables import make_table

DATASETS = ("alpha", "beta", "gamma")
RATES = (0.1, 0.2, 0.3, 0.4, 0.5)


def _records() -> list[dict[str, Any]]:
    out = []
    for d in DATASETS:
        for alg, base in (("fedavg", 0.7), ("local", 0.5)):
            for r in RATES:
                for seed in (0, 1):
                    acc = base - 0.1 * r + 0.01 * seed
                    out.append({"suite": "t", "scale": "tiny", "cell_id": f"{d}-{alg}-{r}",
                                "params": {"dataset.name": d, "algorithm.name": alg, "missing.rate": r},
                                "seed": seed, "status": "ok", "error": None,
                                "metrics": {"test/accuracy": acc, "test/macro_f1": acc - 0.1},
                                "provenance": {"artifact_recipe": "r", "protocol": "p"},
                                "timestamp": "2025-01-01T00:00:00"})
    return out


SPEC: dict[str, Any] = {"rows": "algorithm.name", "columns": ["dataset.name", "missing.rate"],
                        "metrics": ["accuracy", "macro_f1"], "column_labels": {"beta": "Beta (paper split)"}}


def test_a_wide_table_splits_per_first_column_key() -> None:
    whole = make_table(_records(), SPEC)
    assert [n for _, n in table_widths(whole.markdown)] == [1 + 3 * 5 * 2]  # one table, 31 columns
    split = make_table(_records(), {**SPEC, "split_wide": True})
    widths = table_widths(split.markdown)
    assert [n for _, n in widths] == [11, 11, 11]  # per dataset: the row key + 5 rates x 2 metrics
    headings = [line for line in split.markdown.splitlines() if line.startswith("*") and not line.startswith("**")]
    assert headings == ["*Dataset = alpha*", "*Beta (paper split)*", "*Dataset = gamma*"]
    assert split.markdown.count("In bold: every method tied for first") == 1  # one caption for all the parts
    lines = split.markdown.splitlines()
    labels = ["Dataset=alpha", "Beta (paper split)", "Dataset=gamma"]  # in the column headers
    for own, (line, _) in zip(labels, widths):  # each part's columns are its dataset's only
        header = lines[line - 1]
        assert header.count(own) == 10 and not any(other in header for other in labels if other != own)
    assert split.latex == whole.latex  # LaTeX keeps the paper's one wide table


def test_split_wide_leaves_a_narrow_table_whole() -> None:
    narrow = [r for r in _records() if r["params"]["missing.rate"] in (0.1, 0.2)]
    out = make_table(narrow, {**SPEC, "split_wide": True})
    assert [n for _, n in table_widths(out.markdown)] == [1 + 3 * 2 * 2]


def test_split_wide_spec_errors() -> None:
    with pytest.raises(ConfigError, match="split_wide must be true or false"):
        make_table(_records(), {**SPEC, "split_wide": "yes"})
    with pytest.raises(ConfigError, match="no table.columns"):
        make_table(_records(), {"rows": "algorithm.name", "metrics": ["accuracy"], "split_wide": True,
                                "filters": {"dataset.name": "alpha", "missing.rate": 0.1}})
