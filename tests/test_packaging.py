"""Every file a package reads at run time besides its modules is package data, so an installed
copy has it too, not only a checkout (the leaderboard's CSS and JS, the suites, the defaults)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_non_python_file_of_a_package_is_package_data() -> None:
    cfg = _setuptools()
    tops = [p.rstrip("*.") for p in cfg["packages"]["find"]["include"]]
    data: dict[str, list[str]] = cfg.get("package-data", {})
    covered: set[Path] = set()
    for package, patterns in data.items():
        base = ROOT.joinpath(*package.split("."))
        for pattern in patterns:
            matched = {p for p in base.glob(pattern) if p.is_file()}
            assert matched, f"package-data pattern {package}: {pattern} matches no file"
            covered |= matched
    files = {p for top in tops for p in (ROOT / top).rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    assert len(files) > 3
    assert sorted(str(p.relative_to(ROOT)) for p in files - covered) == []
