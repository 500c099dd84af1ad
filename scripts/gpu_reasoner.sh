#!/bin/bash
# The reasoner on one H200, in one device call from the repository root after `source .gpu/s/assemble.sh`
# (../shared/gpu/README.md): trains reasoner-large (capped at $LARGE_MINUTES, default 4) and reasoner-small (capped at
# $SMALL_MINUTES, default 7.5) side by side, then measures the large one with vLLM on the GPU.
# $OUT/reasoner-small.tar is the small model folder (committed as deployments/tier/artifacts/reasoner-small).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
python3 scripts/gpu_reasoner.py train small /tmp/reasoner-small "${SMALL_MINUTES:-7.5}" > "$OUT/train-small.log" 2>&1 &
small=$!
python3 scripts/gpu_reasoner.py train large /tmp/reasoner-large "${LARGE_MINUTES:-4}" > "$OUT/train-large.log" 2>&1
cp /tmp/reasoner-large/thinktier-training.json "$OUT/train-large.json"
python3 scripts/gpu_reasoner.py bench large /tmp/reasoner-large "$OUT/bench-large" > "$OUT/bench-large.log" 2>&1 &
bench=$!
wait $small
tar -C /tmp -cf "$OUT/reasoner-small.tar" reasoner-small
wait $bench
grep -E "^(met|MISSED)" "$OUT/bench-large.log"
for f in "$OUT/train-small.log" "$OUT/train-large.log" "$OUT/bench-large.log"; do tail -n 2 "$f"; done
