#!/bin/bash
# The reasoner on one H200, from the repository root (../shared/gpu/README.md; payload split by
# scripts/gpu_payload_split.sh). Five device calls, each within 30 s of the last (a machine idle for 30 s is given back):
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s]:
#        bash .gpu/s/stage1.sh && MINUTES=7.5 bash scripts/gpu_reasoner.sh train
#      trains reasoner-small and reasoner-large ($SIZES, default both) from scratch side by side, each capped at
#      $MINUTES (default 7.5), saves them in bfloat16 and puts them in $OUT within its 64 MiB: reasoner-small.tar,
#      reasoner-large.tar.part-0N (join with cat) and train.log. Training needs no vLLM, only the wheels stage1.sh
#      installs into /tmp/site. The large folder stays in /tmp for the bench.
#   2-4. carry [.gpu/cN, .gpu/s] for N = 2, 3, 4: cp .gpu/cN/* /tmp/stage/
#   5. carry [.gpu/c5, .gpu/s]: cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh && bash scripts/gpu_reasoner.sh bench
#      measures /tmp/reasoner-large with vLLM on the GPU: $OUT/bench-large (results.json, README.md, the plot).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
minutes=${MINUTES:-7.5}
if [ "$1" = train ]; then
  sizes=${SIZES:-small large}
  for name in $sizes; do
    python3 scripts/gpu_reasoner.py train "$name" "/tmp/reasoner-$name" "$minutes" > "/tmp/train-$name.log" 2>&1 &
  done
  wait
  for name in $sizes; do
    python3 scripts/gpu_reasoner.py bf16 "/tmp/reasoner-$name" >> /tmp/train-$name.log 2>&1
    echo "== $name"; grep -E "step [0-9]+/" "/tmp/train-$name.log" | tail -n 3; tail -n 2 "/tmp/train-$name.log"
  done
  [ -d /tmp/reasoner-small ] && tar -C /tmp -cf "$OUT/reasoner-small.tar" reasoner-small
  [ -d /tmp/reasoner-large ] && tar -C /tmp -cf - reasoner-large | split -b 15000000 -d -a 2 - "$OUT/reasoner-large.tar.part-"
  cat /tmp/train-*.log > "$OUT/train.log"
else
  timeout 540 python3 scripts/gpu_reasoner.py bench large /tmp/reasoner-large "$OUT/bench-large" \
    > "$OUT/bench-large.log" 2>&1
  grep -E "^(met|MISSED)" "$OUT/bench-large.log"
  tail -n 5 "$OUT/bench-large.log"
fi
