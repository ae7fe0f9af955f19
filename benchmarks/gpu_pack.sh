#!/usr/bin/env bash
# Prepare the checkout for one device call of benchmarks/gpu_session.sh, and put it back after.
#
#   bash benchmarks/gpu_pack.sh           # before the call
#   bash benchmarks/gpu_pack.sh restore   # after it
#
# Why: the device tool moves the working tree and the carried folders, 64 MiB in all, and the
# tracked tree is larger (112 MB on 2026-11-28, 85 MB of it result stores). Leaving stores
# behind made the tests that read them fail on the device for that reason alone, so the
# stores travel compressed instead (xz: 85 MB -> 17 MB) and gpu_session.sh unpacks them there.
#
# pack:
#   1. the FB15K-237 files into .gpu/data (the side files gzipped; gpu_session.sh unpacks them),
#      from $SHARED/data (default ../shared/data);
#   2. the wheels the device image lacks (mnist1d, for the AMFL tests) into .whl, when pip can
#      reach an index (else a warning: those tests then fail on the device);
#   3. every tracked file under results/ into .gpu/results.tar.xz;
#   4. the stores, tables/leaderboard.html and the tracked tables/*.png (no test reads the last
#      two), and any untracked results/**/*.partial, moved under $ASIDE (outside the checkout);
#   5. the size check: tracked and untracked files left, plus .gpu and .whl, under $LIMIT_MB (64);
#      over it, everything is moved back and the script fails.
# Then one device call with carry [".gpu", ".whl"] (docs/performance.md has the command).
# restore: moves everything back from $ASIDE and checks that git sees results/ and tables/ as it
# did before the pack.
set -euo pipefail
cd "$(dirname "$0")/.."
ASIDE=${ASIDE:-/tmp/fedmm_gpu_aside}
SHARED=${SHARED:-../shared}
LIMIT_MB=${LIMIT_MB:-64}
PY=${PY:-python3}
[ -x .venv/bin/python ] && [ "$PY" = python3 ] && PY=.venv/bin/python

restore() {
  if [ ! -d "$ASIDE" ]; then echo "nothing to restore: $ASIDE does not exist"; return 0; fi
  (cd "$ASIDE" && find . -type f -print0) | while IFS= read -r -d '' f; do
    mkdir -p "$(dirname "$f")"; mv -f "$ASIDE/$f" "$f"
  done
  rm -rf "$ASIDE"
  # the same git status of results/ and tables/ as before the pack (local edits included)
  if [ -f .gpu/pack_status.txt ] && ! git status --porcelain -- results tables | cmp -s - .gpu/pack_status.txt; then
    echo "restore: results/ or tables/ differ from before the pack:" >&2; git status --short -- results tables >&2; exit 1
  fi
  rm -f .gpu/pack_status.txt
  echo "restored; results/ and tables/ are as before the pack"
}

if [ "${1:-pack}" = restore ]; then restore; exit 0; fi
if [ "${1:-pack}" != pack ]; then echo "usage: bash benchmarks/gpu_pack.sh [pack|restore]" >&2; exit 2; fi
if [ -d "$ASIDE" ] && [ -n "$(ls -A "$ASIDE")" ]; then
  echo "$ASIDE already holds files from an earlier pack: run 'bash benchmarks/gpu_pack.sh restore' first" >&2; exit 1
fi

# 1. data
src="$SHARED/data/fb15k237"
if [ -f "$src/FB15k-237.tar.gz" ]; then
  rm -rf .gpu/data; mkdir -p .gpu/data/fb15k237  # (the shared copies are read-only: start afresh)
  cp "$src/FB15k-237.tar.gz" .gpu/data/fb15k237/
  for f in FB15k_mid2name.txt entity2wikidata.json FB15K_NumericalTriples.txt; do
    gzip -9 -c "$src/$f" > ".gpu/data/fb15k237/$f.gz"
  done
  cp "$SHARED/data/SHA256SUMS" .gpu/data/
else
  echo "warning: $src has no FB15k-237.tar.gz: the KG steps will find no data on the device" >&2
fi

# 2. wheels
if ! compgen -G ".whl/mnist1d-*.whl" >/dev/null; then
  "$PY" -m pip download -q mnist1d --no-deps -d .whl \
    || echo "warning: could not download the mnist1d wheel: the AMFL tests will fail on the device" >&2
fi

# 3. the stores, compressed (sorted names, no owner or time: the same tree packs to the same bytes)
mkdir -p .gpu
git status --porcelain -- results tables > .gpu/pack_status.txt
git ls-files -z results | "$PY" -c '
import os, sys, tarfile
names = sorted(n for n in sys.stdin.read().split("\0") if n and os.path.isfile(n))
def plain(info):
    info.uid = info.gid = 0; info.uname = info.gname = ""; info.mtime = 0
    return info
with tarfile.open(".gpu/results.tar.xz", "w:xz", preset=6) as tar:
    for n in names:
        tar.add(n, filter=plain)
print(f"packed {len(names)} result files into .gpu/results.tar.xz")
'

# 4. move the bulky files aside
mkdir -p "$ASIDE"
{ git ls-files -z results tables/leaderboard.html 'tables/*.png'
  find results -name '*.partial' -type f -print0 2>/dev/null; } | while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  mkdir -p "$ASIDE/$(dirname "$f")"; mv "$f" "$ASIDE/$f"
done

# 5. what will travel
bytes=$({ git ls-files -z; git ls-files -z -o --exclude-standard; } | "$PY" -c '
import os, sys
names = {n for n in sys.stdin.read().split("\0") if n}
total = sum(os.path.getsize(n) for n in names if os.path.isfile(n))
for top in (".gpu", ".whl"):
    for root, _, files in os.walk(top):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
print(total)')
echo "the call will move $((bytes / 1048576)) MiB (limit $LIMIT_MB MiB); the moved files are under $ASIDE"
if [ "$bytes" -gt $((LIMIT_MB * 1048576)) ]; then
  echo "over the limit: moving everything back" >&2; restore; exit 1
fi
