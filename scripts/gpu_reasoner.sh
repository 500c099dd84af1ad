#!/bin/bash
# The reasoner on one H200, in device calls made from the repository root after `source .gpu/s/assemble.sh`
# (../shared/gpu/README.md). Writes what comes back under $OUT.
#   train:       trains builtin:reasoner-large (capped at $LARGE_MINUTES, default 7) and builtin:reasoner-small side by
#                side on the GPU, then measures the small one with vLLM on the GPU (a check of the recipe);
#                $OUT/reasoner-small.tar is the small model folder, to commit as deployments/tier/artifacts/.
#   bench-large: measures the large model the train step left in the cache (the next call on the same warm machine).
set -u
export PYTHONUNBUFFERED=1 THINKTIER_CACHE=/tmp/tt-cache
GPU_POLICY=policies/examples/reasoner-large.yaml
case "${1:-}" in
train)
  python3 -m thinktier train reasoner --size large --device cuda --max-minutes "${LARGE_MINUTES:-7}" \
    > "$OUT/train-large.log" 2>&1 &
  large=$!
  python3 -m thinktier train reasoner --size small --device cuda --out /tmp/reasoner-small > "$OUT/train-small.log" 2>&1
  tar -C /tmp -cf "$OUT/reasoner-small.tar" reasoner-small
  python3 -m thinktier bench reasoner --policy $GPU_POLICY --set tiers.reasoning.model=/tmp/reasoner-small --size small \
    --per-class 30 --budget-per-class 10 --vote-per-class 15 --out "$OUT/bench-small" > "$OUT/bench-small.log" 2>&1
  grep -E "^(met|MISSED)" "$OUT/bench-small.log"
  wait $large
  cp "$THINKTIER_CACHE/models/reasoner-large/thinktier-training.json" "$OUT/train-large.json"
  tail -3 "$OUT/train-small.log" "$OUT/train-large.log"
  ;;
bench-large)
  python3 -m thinktier bench reasoner --policy $GPU_POLICY --size large --per-class 30 --budget-per-class 10 \
    --vote-per-class 15 --out "$OUT/bench-large" > "$OUT/bench-large.log" 2>&1
  grep -E "^(met|MISSED)" "$OUT/bench-large.log"; tail -5 "$OUT/bench-large.log"
  ;;
*) echo "usage: $0 train|bench-large" >&2; exit 2 ;;
esac
