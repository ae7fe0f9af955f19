"""The documentation holds together: README.md is a short front page with a directory map,
the MkDocs site builds with strict link checking, every docs page is in its nav, and the
"Adding an algorithm" skeleton of docs/adding.md runs as written through the engine."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 150
# top-level folders that are not the project's own (environments, caches, build outputs)
NOT_PROJECT = {"site", "build", "runs", "__pycache__"}


def _top_level_dirs() -> list[str]:
    """The repository's top-level folders: tracked by git when git knows the checkout, else every
    visible folder that is not an environment, a cache or a build output."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        dirs = {line.split("/", 1)[0] for line in out.splitlines() if "/" in line}
    except (OSError, subprocess.CalledProcessError):
        dirs = {p.name for p in ROOT.iterdir() if p.is_dir()}
    return sorted(d for d in dirs if not d.startswith((".", "_")) and not d.endswith(".egg-info")
                  and d not in NOT_PROJECT and (ROOT / d).is_dir())


def test_readme_is_a_short_front_page_with_a_directory_map() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < MAX_README_LINES, f"README.md has {len(text.splitlines())} lines"
    dirs = _top_level_dirs()
    assert {"benchmark", "baselines", "methods", "data_prep", "deploy", "benchmarks", "data", "docs", "results",
            "tables", "tests"} <= set(dirs), dirs
    map_rows = [line for line in text.splitlines() if line.startswith("| `") and "/` |" in line]
    named = {re.match(r"\| `([^`/]+)/` \|", row).group(1) for row in map_rows if re.match(r"\| `([^`/]+)/` \|", row)}
    missing = [d for d in dirs if d not in named]
    assert not missing, f"README.md's directory map has no row for {missing}"


def _nav_pages(nav: object) -> list[str]:
    """Every page file named in an mkdocs nav (nested sections included)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def test_every_docs_page_is_in_the_nav_and_the_build_is_strict() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = _nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk, "every docs/*.md page must be in mkdocs.yml's nav, and only those"
    assert config.get("strict") is True
    links = config["validation"]["links"]
    assert all(links[k] == "warn" for k in ("not_found", "anchors", "absolute_links", "unrecognized_links"))
    assert config["validation"]["nav"]["omitted_files"] == "warn"


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]'); the docs build is not checked")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--config-file",
                          str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "adding" / "index.html").is_file()


def _skeleton() -> tuple[str, str]:
    """The first ```python block under "## Adding an algorithm" in docs/adding.md, and the name it registers."""
    text = (DOCS / "adding.md").read_text(encoding="utf-8")
    section = re.search(r"^## Adding an algorithm\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert section, "docs/adding.md has no '## Adding an algorithm' section"
    block = re.search(r"```python\n(.*?)```", section.group(1), flags=re.S)
    assert block, "the 'Adding an algorithm' section has no ```python block"
    name = re.search(r'@ALGORITHMS\.register\("([^"]+)"\)', block.group(1))
    assert name, "the skeleton registers no algorithm"
    return block.group(1), name.group(1)


def test_the_adding_an_algorithm_skeleton_runs_as_written(tmp_path: Path) -> None:
    """Saved as a module file and imported, as a user would, the skeleton registers its
    algorithm; a tiny cell of it runs through the engine (plain, and with its options set) and
    its record is ok, with a test accuracy and its uploads counted by the ledger."""
    from benchmark.config import build_run_config
    from benchmark.engine import run_config
    from benchmark.registry import ALGORITHMS, load_plugins
    from small_configs import tiny_config

    load_plugins()
    code, name = _skeleton()
    assert name not in ALGORITHMS, f"'{name}' is already registered: give the docs skeleton a name of its own"
    path = tmp_path / f"docs_skeleton_{name}.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
        cls = ALGORITHMS.get(name)
        assert cls.__doc__ and "node_cls" in cls.tasks and cls.upload_keys
        base = tiny_config(name, "node_cls", tmp_path / "cache").to_dict()
        for options in ({}, {"mu": 0.01, "weighting": "uniform"}):
            data = {**base, "algorithm": {**base["algorithm"], **options}}
            record = run_config(build_run_config(data))
            assert record["status"] == "ok", record.get("error")
            assert 0.0 <= record["metrics"]["test/accuracy"] <= 1.0
            assert record["comm"]["bytes_up"] > 0
    finally:
        ALGORITHMS.unregister(name)
        sys.modules.pop(path.stem, None)


def test_adding_starts_with_the_template_as_it_is() -> None:
    """docs/adding.md opens with the runnable skeleton, which is methods/template.py's code."""
    text = (DOCS / "adding.md").read_text(encoding="utf-8")
    first = text.index("## ")
    assert text[first:].startswith("## Your method beside the baselines")
    block = re.search(r"<!-- template:start -->\n```python\n(.*?)```\n<!-- template:end -->", text, flags=re.S)
    assert block, "docs/adding.md has no template block"
    src = (ROOT / "methods" / "template.py").read_text(encoding="utf-8")
    assert block.group(1) == src[src.index("from __future__"):].rstrip() + "\n"
