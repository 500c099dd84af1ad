#!/bin/bash
# The reasoner on one GPU, from the repository root (../shared/gpu/README.md; payload split by
# scripts/gpu_payload_split.sh). Three device calls, each within 30 s of the last (a machine idle for 30 s is given
# back); training runs in the background while the vLLM payload is staged:
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s, .gpu/c2]:
#        bash .gpu/s/stage1.sh && cp .gpu/c2/* /tmp/stage/ && MINUTES=7.4 bash scripts/gpu_reasoner.sh start
#      starts training reasoner-large ($SIZES, default large) from scratch, capped at $MINUTES (default 7.4), in its
#      own process session (it outlives the call), then saves it in bfloat16 in /tmp/reasoner-NAME. Training needs
#      no vLLM, only the wheels stage1.sh installs into /tmp/site.
#   2. carry [.gpu/c3, .gpu/c4, .gpu/s]: cp .gpu/c3/* .gpu/c4/* /tmp/stage/
#   3. carry [.gpu/c5, .gpu/s]: cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh && bash scripts/gpu_reasoner.sh bench
#      waits for the training (at most 400 s: if it is not done, call bench again), measures /tmp/reasoner-large with vLLM on the GPU into $OUT/bench-large (results.json,
#      README.md, the plot), and puts train.log and the weights in $OUT (reasoner-large.tar.part-0N; join with cat),
#      within its 8 files and 64 MiB.
# Call 1 fits only with loadtest/results out of the tree but for its gpu/ folder (gpu_offload.sh's header says how).
# `bash scripts/gpu_reasoner.sh train` trains in the foreground instead (both sizes unless $SIZES says otherwise).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
minutes=${MINUTES:-7.4}
DONE=/tmp/reasoner-train.done

send_large() {  # into $OUT in parts under its 16 MiB a file
  tar -C /tmp -cf - reasoner-large | split -b 15000000 -d -a 2 - "$OUT/reasoner-large.tar.part-"
}

train_sizes() {
  for name in $1; do
    python3 scripts/gpu_reasoner.py train "$name" "/tmp/reasoner-$name" "$minutes" > "/tmp/train-$name.log" 2>&1 &
  done
  wait
  for name in $1; do
    python3 scripts/gpu_reasoner.py bf16 "/tmp/reasoner-$name" >> "/tmp/train-$name.log" 2>&1
  done
}

case "$1" in
  start)
    rm -f "$DONE"
    setsid nohup bash -c "bash scripts/gpu_reasoner.sh _train '${SIZES:-large}'; touch $DONE" > /tmp/train-bg.log 2>&1 < /dev/null &
    sleep 20
    grep -h -E "step|Error|error" /tmp/train-*.log | tail -n 3
    echo "training in the background; next call within 30 s"
    ;;
  _train)
    train_sizes "$2"
    ;;
  train)
    train_sizes "${SIZES:-small large}"
    for name in ${SIZES:-small large}; do
      echo "== $name"; grep -E "step [0-9]+/" "/tmp/train-$name.log" | tail -n 3; tail -n 2 "/tmp/train-$name.log"
    done
    [ -d /tmp/reasoner-small ] && tar -C /tmp -cf "$OUT/reasoner-small.tar" reasoner-small
    [ -d /tmp/reasoner-large ] && send_large
    cat /tmp/train-*.log > "$OUT/train.log"
    ;;
  bench)
    started=$SECONDS
    while [ ! -f "$DONE" ] && [ $((SECONDS - started)) -lt 400 ]; do sleep 5; done
    [ -f "$DONE" ] || { echo "TRAINING_NOT_DONE after $((SECONDS - started)) s: call bench again"; tail -n 2 /tmp/train-large.log; exit 4; }
    echo "waited $((SECONDS - started)) s for the training"
    cp /tmp/train-large.log "$OUT/train.log"
    grep -E "step [0-9]+/" /tmp/train-large.log | tail -n 2; grep -E "stopped|final_loss" /tmp/train-large.log | tail -n 2
    timeout $((560 - SECONDS + started)) python3 scripts/gpu_reasoner.py bench large /tmp/reasoner-large \
      "$OUT/bench-large" > /tmp/bench-large.log 2>&1
    status=$?
    grep -E "^(met|MISSED)" /tmp/bench-large.log
    tail -n 3 /tmp/bench-large.log
    send_large
    exit $status
    ;;
  *)
    echo "usage: bash scripts/gpu_reasoner.sh start|bench|train (see the header)"; exit 3
    ;;
esac
