#!/bin/bash
# The reasoner on one H200, from the repository root after `source .gpu/s/assemble.sh` (../shared/gpu/README.md).
#   bash scripts/gpu_reasoner.sh train   trains reasoner-large, reasoner-small from scratch and reasoner-small
#                                        continued from the shipped one side by side, each capped at $MINUTES
#                                        (default 8); $OUT gets the two small model folders as reasoner-small.tar and
#                                        reasoner-small-continued.tar (one is committed as
#                                        deployments/tier/artifacts/reasoner-small) and the large one's record; the
#                                        large folder stays in /tmp for the bench in the next call.
#   bash scripts/gpu_reasoner.sh bench   measures /tmp/reasoner-large with vLLM on the GPU ($OUT/bench-large).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
minutes=${MINUTES:-8}
if [ "$1" = train ]; then
  python3 scripts/gpu_reasoner.py train small /tmp/reasoner-small "$minutes" > "$OUT/train-small.log" 2>&1 &
  small=$!
  python3 scripts/gpu_reasoner.py train small /tmp/reasoner-small-continued "$minutes" \
    deployments/tier/artifacts/reasoner-small 1e-3 > "$OUT/train-small-continued.log" 2>&1 &
  continued=$!
  python3 scripts/gpu_reasoner.py train large /tmp/reasoner-large "$minutes" > "$OUT/train-large.log" 2>&1
  wait $small $continued
  cp /tmp/reasoner-large/thinktier-training.json "$OUT/train-large.json"
  tar -C /tmp -cf "$OUT/reasoner-small.tar" reasoner-small
  tar -C /tmp -cf "$OUT/reasoner-small-continued.tar" reasoner-small-continued
  for f in "$OUT"/train-*.log; do echo "$f"; tail -n 3 "$f"; done
else
  python3 scripts/gpu_reasoner.py bench large /tmp/reasoner-large "$OUT/bench-large" > "$OUT/bench-large.log" 2>&1
  grep -E "^(met|MISSED)" "$OUT/bench-large.log"
  tail -n 5 "$OUT/bench-large.log"
fi
