#!/bin/bash
# Issue 13 on nvidia-h200-x2: the reasoning tier autoscaled 1-2 replicas, each with (most of) a GPU of its own
# (gpu_fraction 0.75; the chat replica's 0.25 shares GPU 0 with the first), under a load of few long requests (1 req/s
# for 180 s, medium 0.3 / hard 0.7, Gamma shape 0.5, seed 1), where the planner says the KV and ongoing-requests
# signals part. One signal per device call: bash run-x2.sh kv | ongoing. Usage (device, repository root):
# source loadtest/results/gpu-scaling/device_env.sh && bash $R/loadtest/results/gpu-scaling/autoscaling-x2/run-x2.sh kv
set -u
name=$1
P=policies/examples/gpu-autoscaling.yaml
sets="--set $name:server.http_proxy=serve --set $name:tiers.reasoning.pool.gpu_fraction=0.75 --set $name:tiers.chat.pool.gpu_fraction=0.25"
sets="$sets --set $name:tiers.reasoning.replicas.max=2"
[ "$name" = ongoing ] && sets="$sets --set ongoing:tiers.reasoning.autoscaling.signal=ongoing_requests"
python3 -u -m thinktier bench fullstack --config "$name=$P" $sets --rate 1 --shape 0.5 --duration 180 --seed 1 \
  --mix medium=0.3,hard=0.7 --request-timeout 150 --out "$OUT" --deadline 555 > "$OUT/driver-$name.log" 2>&1
tail -n 25 "$OUT/driver-$name.log"
