"""The rest of the suite on a lent GPU (``gpu_session.sh`` step 1, after the CUDA files):
which test files to run in which order, and what a capped ``pytest -vv -n N`` run reached.

Why: a device call caps the rest of the suite, and xdist prints its own summary only at the end,
so a cut-off run says nothing about what it did not reach, and the same files would be cut
again next time. ``order`` puts the files the last lease left out first
(``benchmarks/gpu_rest_first.txt``); ``summary`` counts the outcomes, names the failures and
the files with no result line, for that list.

    python benchmarks/gpu_rest.py order [SKIP ...]
    python benchmarks/gpu_rest.py summary LOG [SKIP ...]

``SKIP``s are test files run elsewhere (step 1's CUDA files): never listed, never unreached.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(tests/[^\s:]+\.py)(::\S*)?")


def summarize(lines: list[str], test_files: list[str], ran_elsewhere: set[str]) -> dict[str, object]:
    """Counts per outcome, the failing ids, and the test files with no result line."""
    counts: dict[str, int] = {}
    failing: list[str] = []
    reached: set[str] = set()
    for line in lines:
        m = RESULT.search(line)
        if not m:
            continue
        outcome, path, rest = m.group(1), m.group(2), m.group(3) or ""
        counts[outcome] = counts.get(outcome, 0) + 1
        reached.add(path)
        if outcome in ("FAILED", "ERROR"):
            failing.append(path + rest)
    unreached = [f for f in test_files if f not in reached and f not in ran_elsewhere]
    return {"counts": counts, "failing": failing, "unreached": unreached}


def test_files() -> list[str]:
    """Every test file of the suite, sorted."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py"))


def order(first_list: str, files: list[str], skip: set[str]) -> list[str]:
    """``files`` without ``skip``, those named in ``first_list`` (one per line, ``#`` comments,
    names of files that no longer exist ignored) first, in its order."""
    named = [ln.strip() for ln in first_list.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    first = [f for f in dict.fromkeys(named) if f in files and f not in skip]
    return first + [f for f in files if f not in first and f not in skip]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("order", "summary") or (argv[0] == "summary" and len(argv) < 2):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "order":
        first = ROOT / "benchmarks" / "gpu_rest_first.txt"
        print("\n".join(order(first.read_text() if first.exists() else "", test_files(), set(argv[1:]))))
        return 0
    log, elsewhere = Path(argv[1]), set(argv[2:])
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    out = summarize(lines, test_files(), elsewhere)
    counts = out["counts"]
    print("# summary (benchmarks/gpu_rest.py)")
    print("counts: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no result lines"))
    for ident in out["failing"]:
        print(f"failing: {ident}")
    print(f"unreached ({len(out['unreached'])} files): " + " ".join(out["unreached"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
