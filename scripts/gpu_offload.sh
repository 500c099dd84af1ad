#!/bin/bash
# Issue 31 on one GPU: priority scheduling under KV pressure with recompute (vLLM's own resume), with the project's
# preempt-offload, and with vLLM's native offloading of decode blocks, on the gpu-scaling bench's workload B
# (h200-7b.yaml's budgets, 212 requests over 30 s, dummy R1-Distill-Qwen-7B weights, FP8 KV capped at 2 GiB), each
# drained in full (240 s) so every hard request's completion counts. Run from the repository root on the device
# machine, after the vLLM payload is staged (no Ray needed: the bench drives the tier engine in process):
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s, .gpu/c2]: bash .gpu/s/stage1.sh && cp .gpu/c2/* /tmp/stage/
#   2. carry [.gpu/c3, .gpu/c4, .gpu/s]: cp .gpu/c3/* .gpu/c4/* /tmp/stage/
#   3. carry [.gpu/c5, .gpu/s]: cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh && bash scripts/gpu_offload.sh a
#   4. carry [.gpu/s]: source .gpu/s/assemble.sh && bash scripts/gpu_offload.sh b
# Call 1 fits only with loadtest/results out of the tree but for its gpu/ folder (workload B; 0.5 MB):
#   mv loadtest/results /tmp/ && mkdir -p loadtest/results && cp -r /tmp/results/gpu loadtest/results/   (back after)
# PART a: fp8-prio then fp8-preempt-offload-prio (about 6 minutes on an H100; run-a.json is the connector's old
# kv_role, which stormed, run-a2.json the fixed one: loadtest/results/gpu-offload/README.md). b: vLLM's native offload of
# decode blocks beside its own baseline, both with async scheduling off (fp8-prio-sync, fp8-offload-decode-prio-sync,
# about 6.5 minutes): with it on, vLLM 0.24 storms as the old connector did (gpu_configs.BenchConfig.async_scheduling).
# c and d (about 4.5 minutes each): workload B twice more on one engine, recompute (c) and preempt-offload with the
# batched copier (d), so each has three runs with a2's and a difference can be told from run-to-run spread (the second
# run of an engine finds the prompts in its prefix cache: 200 of each request's 2,000-6,000 tokens).
# e (about 8 minutes): preempt-offload under the sustained overload of issue 30 (workload B's generator at 12 requests/s
# held 120 s, 1,465 requests; call 1 then needs gpu-deadline/ copied too), where the class order
# preempted hard requests 7.6 times each and finished the median one 33 % later than FCFS: its recompute baseline is
# loadtest/results/gpu-deadline/run-f.json (bash scripts/gpu_deadline.sh f, the same configuration but the offload).
# f (about 8 minutes): that recompute baseline again (fp8-prio), so e and f run on one machine. e and f drain 330 s
# (a 300 s drain cut 21 hard requests of the first run of e).
# Each writes $OUT/run-PART.json; copy them into loadtest/results/gpu-offload/ (keep the first run-a.json, the old
# connector's: name the rerun run-a2.json; run-e.json is the second session's, so save e and f as
# overload-offload-N.json and overload-recompute-N.json) and print the table with
#   thinktier bench gpu table loadtest/results/gpu-offload/run-a2.json loadtest/results/gpu-offload/run-b.json
set -u
part=${1:?usage: bash scripts/gpu_offload.sh a|b|c|d|e|f}
B=loadtest/results/gpu/workload-B.json
held=loadtest/results/gpu-deadline/workload-Bx1.5-120s.json
workloads=(--workload "B=$B" --workload "B2=$B" --workload "B3=$B")
drain=240
case "$part" in
  a) configs=(--config fp8-prio:B --config fp8-preempt-offload-prio:B) ;;
  b) configs=(--config fp8-prio-sync:B --config fp8-offload-decode-prio-sync:B) ;;
  c) configs=(--config fp8-prio:B2,B3) ;;
  d) configs=(--config fp8-preempt-offload-prio:B2,B3) ;;
  e) workloads=(--workload "Bx1.5-120s=$held"); configs=(--config fp8-preempt-offload-prio:Bx1.5-120s); drain=330 ;;
  f) workloads=(--workload "Bx1.5-120s=$held"); configs=(--config fp8-prio:Bx1.5-120s); drain=330 ;;
  *) echo "GPU_OFFLOAD_UNKNOWN_PART: $part (a to f)"; exit 3 ;;
esac
python3 -c "import vllm" 2>/dev/null || { echo "GPU_OFFLOAD_NOT_STAGED: see this script's header"; exit 3; }
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 > "$OUT/device-$part.txt"
timeout 580 python3 -m thinktier bench gpu run --policy policies/examples/h200-7b.yaml --model /tmp/r1q7b \
  "${workloads[@]}" "${configs[@]}" --drain-s "$drain" --out "$OUT/run-$part.json" > "$OUT/log-$part.txt" 2>&1
status=$?
grep -E "^\[" "$OUT/log-$part.txt" | tail -n 8
python3 -m thinktier bench gpu table "$OUT/run-$part.json" 2>/dev/null
exit $status
