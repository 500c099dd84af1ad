#!/bin/bash
# Issue 13 on nvidia-h200-x2: workload B (../../gpu/workload-B.json) on one engine per GPU, two configurations at a
# time, every request finished (drain up to 240 s). GPU 0: FCFS with thinktier's thinking-budget processor, then FCFS
# with vLLM's thinking_token_budget. GPU 1: easy-first priority (0/1/1), then plain priority (0/1/2), both with
# thinktier's processor. Usage (device, repository root): source loadtest/results/gpu-scaling/device_env.sh &&
# bash $R/loadtest/results/gpu-scaling/budget/run-x2.sh
set -u
W="--workload B=$R/loadtest/results/gpu/workload-B.json"
W="$W --workload Bef=$R/loadtest/results/gpu-scaling/priority/workload-B-easy-first.json"
common="--policy policies/examples/h200-7b.yaml --model /tmp/r1q7b $W --drain-s 240"
CUDA_VISIBLE_DEVICES=0 python3 -u -m thinktier bench gpu run $common --config fp8:B --config fp8-vllm-budget:B \
  --out "$OUT/run-fcfs.json" > "$OUT/log-gpu0.txt" 2>&1 &
CUDA_VISIBLE_DEVICES=1 python3 -u -m thinktier bench gpu run $common --config fp8-prio:Bef --config fp8-prio:B \
  --out "$OUT/run-priority.json" > "$OUT/log-gpu1.txt" 2>&1 &
wait
grep -h -E "engine up|done,|Error|Traceback" "$OUT"/log-gpu*.txt | tail -20
python3 -m thinktier bench gpu table "$OUT"/run-*.json
