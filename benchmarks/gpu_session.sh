#!/usr/bin/env bash
# The GPU checks of the "paper scale on a GPU" work, in one command for one device call.
#
# A session is lent a GPU for 30 minutes at most (../shared/docs/GPU.md), so everything that
# needs one runs here, in order of value, each step's log written under $OUT as it goes (what
# is there comes back even if the call is cut off):
#   1. the test suite on CUDA (pytest --device cuda): pass/fail counts;
#   2. bench kg on CUDA: harness vs bare RotatE, positives/s, aten ops, filtered eval seconds per
#      distance kernel; then bench kg --imputers --profile: MMFedE-AE and MMFeD3-HidE batches profiled;
#   3. bench (graph FedAvg) on CUDA: harness over bare loop;
#   4. one paper-scale round of MMFedE and of MMFeD3-HidE on FB15K-237 Fed3 (seconds per round), and
#      on CUDA one more of each with train.distance_kernel: triton;
#   5. paper-scale records of Table VI's S-Ind and MMCen (Fed3, seed 0) at ROUNDS5 (3) rounds.
#
# Before the call, here: bash benchmarks/gpu_pack.sh (it fills .gpu with the FB15K-237 files and
# the result stores, compressed, .whl with the wheels the image lacks, moves the bulky tracked
# files aside and checks the 64 MiB the device tool moves); after it: bash benchmarks/gpu_pack.sh restore.
# This script unpacks what gpu_pack.sh packed. The call: carry [".gpu", ".whl"] (docs/performance.md).
# STEPS="1 2" runs a subset; DEVICE=cpu and SMALL=1 try the script itself on a CPU machine.
# Each step has its own cap (T1..T5 seconds: 240, 160 (+ T2B 120), 60, 75 per run, 150 per run): 15 min if every
# step ran to its cap, more than one device call's 10; steps 1-4 took 4 min on an H200 (2026-11-27);
# T1B (seconds, 0 by default) then runs the rest of the suite on CUDA inside step 1;
# ROUNDS4 sets the paper-scale rounds (2; at about a minute a round, MMFeD3-HidE needs 1 within 75-100 s);
# PRECISION4=high runs them with TF32 matmuls (MMFeD3-HidE 41.0 s a round on an H200, 55.6 s at highest).
# Wheels in .whl (carry it too) are installed first: mnist1d, which the AMFL tests need.
# The device tool returns at most 8 files from $OUT; all steps together write 8 (the paper rounds
# share one record file and one log), so do not tee the whole session into $OUT as well.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fedmm_gpu_session}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-"1 2 3 4 5"}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
[ -d .gpu/data ] && export FEDMM_DATA_ROOT=$PWD/.gpu/data
# data files carried gzipped (not the dataset's own .tar.gz), unpacked beside themselves
for z in .gpu/data/*/*.gz; do
  case "$z" in *.tar.gz|'.gpu/data/*/*.gz') ;; *) gunzip -kf "$z" ;; esac
done
PY=${PY:-python3}
# the result stores, carried compressed by gpu_pack.sh (only the files not already here)
if [ -f .gpu/results.tar.xz ]; then
  "$PY" -c '
import os, tarfile
with tarfile.open(".gpu/results.tar.xz") as tar:
    todo = [m for m in tar.getmembers() if not os.path.exists(m.name)]
    tar.extractall(members=todo, filter="data")
print(f"unpacked {len(todo)} result files")'
fi
# wheels the image lacks (mnist1d for the AMFL tests), carried in .whl (GPU.md, the device README)
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fedmm_site .whl/*.whl \
    && export PYTHONPATH=/tmp/fedmm_site:$PYTHONPATH
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee "$OUT/device.txt"

small() { [ "${SMALL:-0}" = "1" ]; }

for step in $STEPS; do
  case "$step" in
    1)
      # the CUDA-relevant files first (loop, determinism, checkpoint, engine, KG, AMFL), capped
      tests=(tests/test_training_loop.py tests/test_determinism.py tests/test_checkpoint.py tests/test_engine.py
             tests/test_kg_kge.py tests/test_kg_track.py tests/test_kg_imputers.py tests/test_mmfed3.py tests/test_amfl.py
             tests/test_audit_transformed.py tests/test_ledger.py tests/test_kge_triton.py)
      small && tests=(tests/test_training_loop.py tests/test_determinism.py tests/test_checkpoint.py)
      workers=(); small || workers=(-n "${WORKERS:-8}")
      # (pyproject's addopts already has -q: a second -q would drop the "N passed" line)
      # (T1=0 skips them: a second call that only runs more of the rest, T1B)
      [ "${T1:-240}" -gt 0 ] && timeout "${T1:-240}" "$PY" -m pytest --device "$DEVICE" -rfE -p no:cacheprovider \
        "${workers[@]}" "${tests[@]}" 2>&1 | tee "$OUT/pytest_$DEVICE.log" | tail -5
      # then the rest of the suite while T1B lasts (0 skips it); xdist names failures only at its
      # end, so every result line is kept as it comes and the FAILED ones survive a cap
      if ! small && [ "${T1B:-0}" -gt 0 ]; then
        # the files the last lease's cap did not reach go first (benchmarks/gpu_rest_first.txt),
        # then every other test file not run above
        rest=($("$PY" benchmarks/gpu_rest.py order "${tests[@]}"))
        timeout "${T1B}" "$PY" -m pytest --device "$DEVICE" -vv -rfE -p no:cacheprovider -n "${WORKERS_REST:-16}" \
          "${rest[@]}" 2>&1 | grep -E "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS|passed|failed" > "$OUT/pytest_rest_$DEVICE.log"
        # counts, failures and the files the cap left out, appended to the same log (8 files come back)
        "$PY" benchmarks/gpu_rest.py summary "$OUT/pytest_rest_$DEVICE.log" "${tests[@]}" | tee -a "$OUT/pytest_rest_$DEVICE.log"
      fi
      ;;
    2)
      extra=(); small && extra=(--dim 32 --batch 256 --negatives 32 --timed 2 --warmup 1 --eval-limit 100)
      timeout "${T2:-160}" "$PY" run_benchmark.py bench kg --device "$DEVICE" "${extra[@]}" 2>&1 | tee "$OUT/bench_kg_$DEVICE.log"
      # where a paper-size MMFeD3-HidE batch spends its time (kernels or launches), beside MMFedE-AE's,
      # appended to the same log (T2B, 0 skips it)
      extra=(--dim 256 --block 4 --timed 2 --warmup 1 --profile 25); small && extra=(--dim 8 --block 1 --timed 1 --warmup 0 --profile 5)
      [ "${T2B:-120}" -gt 0 ] && timeout "${T2B:-120}" "$PY" run_benchmark.py bench kg --imputers --device "$DEVICE" \
        --matmul-precision "${PRECISION4:-highest}" "${extra[@]}" 2>&1 | grep -v "^USDT:" | tee -a "$OUT/bench_kg_$DEVICE.log"
      ;;
    3)
      extra=(); small && extra=(--nodes 2000 --rounds 3)
      timeout "${T3:-60}" "$PY" run_benchmark.py bench --device "$DEVICE" "${extra[@]}" 2>&1 | tee "$OUT/bench_graph_$DEVICE.log"
      ;;
    4)
      # algorithm, imputer, training distance kernel; the triton one runs on CUDA only
      runs=("mmfede none eager" "mmfed3 hide eager" "mmfede none triton" "mmfed3 hide triton")
      [ "$DEVICE" = cpu ] && runs=("mmfede none eager" "mmfed3 hide eager")
      for run in "${runs[@]}"; do
        set -- $run
        data=(--set dataset.name=fb15k237 --set dataset.text_encoder=hashing)
        small && data=(--set dataset.name=fb15k237_small)
        sets=("${data[@]}" --set partition.name=relation_id
              --set partition.num_clients=3 --set missing.name=kg_items --set missing.rate=0.5 --set task.name=kg_completion
              --set task.decoder=rotate --set task.dim=256 --set task.num_negatives=256 --set task.batch_size=1024
              --set train.local_epochs=3 --set train.rounds="${ROUNDS4:-2}" --set train.lr=0.001 --set train.device="$DEVICE"
              --set train.matmul_precision="${PRECISION4:-highest}" --set train.distance_kernel="$3"
              --set algorithm.name="$1" --set algorithm.imputer="$2")
        small && sets+=(--set task.dim=16 --set task.num_negatives=32 --set train.local_epochs=1 --set train.rounds=1)
        timeout "${T4:-75}" "$PY" run_benchmark.py run "${sets[@]}" --out "$OUT/paper_rounds.jsonl" 2>&1 \
          | tee -a "$OUT/paper_rounds.log" | tail -4
      done
      ;;
    5)
      # paper-scale records of Table VI's S-Ind and MMCen (concat fusion) on Fed3, seed 0, for
      # ROUNDS5 rounds, the device in their provenance: $OUT/mmfed3_table6/paper.jsonl
      for sel in "algorithm.name=s_ind" "algorithm.name=mmcen"; do
        only=(--only "$sel" --only partition.num_clients=3 --only seed=0)
        [ "$sel" = algorithm.name=mmcen ] && only+=(--only algorithm.fusion=concat)
        sets=(--set dataset.text_encoder=hashing --set train.rounds="${ROUNDS5:-3}" --set train.device="$DEVICE")
        small && sets=(--set dataset.name=fb15k237_small --set task.dim=16 --set task.num_negatives=32
                       --set train.rounds=1 --set train.device="$DEVICE")
        timeout "${T5:-150}" "$PY" run_benchmark.py sweep mmfed3_table6 --scale paper "${only[@]}" "${sets[@]}" \
          --results "$OUT" 2>&1 | tee -a "$OUT/paper_rounds.log" | tail -3
      done
      rm -rf "$OUT"/mmfed3_table6/*.claims  # the sweep's lock folder: not a result, and one file too many
      ;;
  esac
done
echo "logs in $OUT"
