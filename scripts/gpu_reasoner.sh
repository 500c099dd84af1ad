#!/bin/bash
# The reasoner on one H200, from the repository root (../shared/gpu/README.md). Training needs no vLLM, only the
# project's own Python dependencies: install .gpu/whl into /tmp/site first (stage1.sh does, or pip --target).
#   bash scripts/gpu_reasoner.sh train   trains reasoner-large, reasoner-small from scratch and reasoner-small
#                                        continued from the shipped one side by side, each capped at $MINUTES
#                                        (default 8), saves them in bfloat16 and puts them in $OUT, all within its
#                                        64 MiB: reasoner-small.tar, reasoner-small-continued.tar,
#                                        reasoner-large.tar.part-0N (join with cat) and train.log. The large folder
#                                        also stays in /tmp for a bench later on the same warm machine.
#   bash scripts/gpu_reasoner.sh bench   measures /tmp/reasoner-large with vLLM on the GPU ($OUT/bench-large), after
#                                        `source .gpu/s/assemble.sh`.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.:${PYTHONPATH:-}
minutes=${MINUTES:-8}
if [ "$1" = train ]; then
  python3 scripts/gpu_reasoner.py train small /tmp/reasoner-small "$minutes" > /tmp/train-small.log 2>&1 &
  small=$!
  python3 scripts/gpu_reasoner.py train small /tmp/reasoner-small-continued "$minutes" \
    deployments/tier/artifacts/reasoner-small 1e-3 > /tmp/train-small-continued.log 2>&1 &
  continued=$!
  python3 scripts/gpu_reasoner.py train large /tmp/reasoner-large "$minutes" > /tmp/train-large.log 2>&1
  wait $small $continued
  for name in small small-continued large; do
    python3 scripts/gpu_reasoner.py bf16 "/tmp/reasoner-$name" >> /tmp/train-$name.log 2>&1
    echo "== $name"; tail -n 4 "/tmp/train-$name.log"
  done
  tar -C /tmp -cf "$OUT/reasoner-small.tar" reasoner-small
  tar -C /tmp -cf "$OUT/reasoner-small-continued.tar" reasoner-small-continued
  tar -C /tmp -cf - reasoner-large | split -b 15000000 -d -a 2 - "$OUT/reasoner-large.tar.part-"
  cat /tmp/train-*.log > "$OUT/train.log"
else
  python3 scripts/gpu_reasoner.py bench large /tmp/reasoner-large "$OUT/bench-large" > "$OUT/bench-large.log" 2>&1
  grep -E "^(met|MISSED)" "$OUT/bench-large.log"
  tail -n 5 "$OUT/bench-large.log"
fi
