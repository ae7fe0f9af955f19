#!/usr/bin/env bash
# Time one cell (deploy/flower/run.yaml, ROUNDS rounds, default 20) on Flower's simulation
# engine (run --backend flower) and on a loopback deployment (SuperLink, two SuperNodes with
# warm executors, deploy/flower/run_cell.py), and print both wall times and their ratio.
# Run it on an idle machine: Ray runs its actors niced, so other load skews the simulation.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
PY=${PY:-.venv/bin/python}
BIN=$(dirname "$PY")
export PATH="$BIN:$PATH" FLWR_TELEMETRY_ENABLED=0 FEDMM_THREADS=${FEDMM_THREADS:-1}
WORK=$(mktemp -d)
export FLWR_HOME="$WORK/flwr"
mkdir -p "$FLWR_HOME" && cp deploy/flower/flwr-config.toml "$FLWR_HOME/config.toml"

t0=$(date +%s.%N)
"$PY" run_benchmark.py run deploy/flower/run.yaml --backend flower --set train.rounds="$ROUNDS" \
  --out "$WORK/sim.jsonl" > "$WORK/sim.log" 2>&1
sim=$(echo "$(date +%s.%N) - $t0" | bc)

flower-superlink --insecure --disable-runtime-dependency-installation --host 127.0.0.1 --port 9093 > "$WORK/link.log" 2>&1 &
for i in 0 1; do
  "$PY" -m benchmark.backends.flower_warm supernode --insecure --isolation process --superlink 127.0.0.1:9093 --port $((9094 + i)) \
    --node-config "partition-id=$i" > "$WORK/node$i.log" 2>&1 &
  "$PY" -m benchmark.backends.flower_warm --insecure --runtime-api-address 127.0.0.1:$((9094 + i)) > "$WORK/warm$i.log" 2>&1 &
done
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
t0=$(date +%s.%N)
"$PY" deploy/flower/run_cell.py local-deployment --config deploy/flower/run.yaml --set train.rounds="$ROUNDS" \
  --results "$WORK/deployed.jsonl" > "$WORK/deploy.log" 2>&1
dep=$(echo "$(date +%s.%N) - $t0" | bc)

"$PY" - "$WORK" "$sim" "$dep" "$ROUNDS" <<'PYEOF'
import json, platform, sys
work, sim, dep, rounds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
s = json.loads(open(f"{work}/sim.jsonl").readline()); d = json.loads(open(f"{work}/deployed.jsonl").readline())
print(f"cell deploy/flower/run.yaml, {rounds} rounds, {platform.processor() or platform.machine()}")
print(f"simulation  wall {sim:7.1f} s  (engine {s['wall_time_s']:.1f} s)  test/accuracy {s['metrics']['test/accuracy']:.4f}")
print(f"deployment  wall {dep:7.1f} s  (engine {d['wall_time_s']:.1f} s)  test/accuracy {d['metrics']['test/accuracy']:.4f}")
print(f"deployment / simulation = {dep / sim:.2f}x; same metrics: {s['metrics'] == d['metrics']}")
PYEOF
