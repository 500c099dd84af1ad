#!/bin/bash
# Issue 30 on one GPU (the issue names the H200): vLLM priority by SLO deadline (routing.priority_order: deadline,
# config fp8-deadline) against FCFS (fp8) and the class order (fp8-prio), on the gpu-scaling bench's workload B
# (h200-7b.yaml's budgets and SLOs, 212 requests over 30 s, dummy R1-Distill-Qwen-7B weights, FP8 KV capped at
# 2 GiB), each on a fresh engine, drained in full (240 s) so every hard request's completion counts; the same workload
# (seed 1) for all three, the policy's engine settings otherwise (token sampling unseeded, as in the earlier runs).
# Then the figure the aim is stated against: an easy request's TTFVT on an idle engine (workload-idle.json beside the
# results: 21 easy requests 6 to 10 s apart, one in flight at a time), on the fp8-deadline engine once B has drained; its
# engine arguments are those of fp8-prio, and with one request in flight the priority order cannot matter. The idle
# workload was written on the CPU with
#   thinktier bench gpu workload --policy policies/examples/h200-7b.yaml --name idle --rate 0.125 --shape 100 \
#     --duration 160 --mix easy=1 --seed 1 --out loadtest/results/gpu-deadline/workload-idle.json
# Aims: easy TTFVT p99 (deadline) within 1.5x of the idle easy TTFVT; hard E2E p50 and p90 within 5 % of FCFS's.
# Preemptions are reported per run and per class of the finished requests (deployments/tier/preemption_count.py).
# Run from the repository root on the device machine, after the vLLM payload is staged (no Ray needed: the bench
# drives the tier engine in process); .gpu/ is the main checkout's (ignored; copy it into a worktree first):
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s, .gpu/c2]: bash .gpu/s/stage1.sh && cp .gpu/c2/* /tmp/stage/
#   2. carry [.gpu/c3, .gpu/c4, .gpu/s]: cp .gpu/c3/* .gpu/c4/* /tmp/stage/
#   3. carry [.gpu/c5, .gpu/s]: cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh && bash scripts/gpu_deadline.sh a
#   4. carry [.gpu/s]: source .gpu/s/assemble.sh && bash scripts/gpu_deadline.sh b
# Call 1 fits only with loadtest/results out of the tree but for its gpu/ and gpu-deadline/ folders (the workloads):
#   mv loadtest/results /tmp/ && mkdir -p loadtest/results
#   cp -r /tmp/results/gpu /tmp/results/gpu-deadline loadtest/results/   (back after)
# Both parts on the same warm machine, so that the three orders and the idle figure come from one card (timings
# compare only on the same card; device-PART.txt names it).
# PART a: fp8 then fp8-prio, on B (about 9 minutes); b: fp8-deadline on B, then the idle workload on the same engine
# (about 7 minutes). Each writes $OUT/run-PART.json, $OUT/log-PART.txt and $OUT/device-PART.txt; copy them into
# loadtest/results/gpu-deadline/ and print the table with
#   thinktier bench gpu table loadtest/results/gpu-deadline/run-a.json loadtest/results/gpu-deadline/run-b.json
# The heavier loads (the 1.5x and 2x): B's generator at 12 and 16 requests/s, 1.53x and 1.96x B's tokens
# (364 and 469 requests; thinking plus answer budgets summed), written on the CPU with
#   thinktier bench gpu workload --policy policies/examples/h200-7b.yaml --name Bx1.5 --rate 12 --duration 30 \
#     --seed 1 --languages en --out loadtest/results/gpu-deadline/workload-Bx1.5.json   (Bx2: --rate 16)
# (the same command at --rate 6 writes workload-B.json byte for byte). PART c: FCFS, d: the class order, e: the
# deadline order, each on one fresh engine through Bx1.5 then Bx2 (about 6 minutes a part).
# A sustained overload, where the simulator has the deadline order collapse and the class order hold
# (loadtest/results/plan-deadline/matched-B/): Bx1.5's generator for 120 s instead of 30 (1,465 requests),
#   thinktier bench gpu workload --policy policies/examples/h200-7b.yaml --name Bx1.5-120s --rate 12 --duration 120 \
#     --seed 1 --languages en --out loadtest/results/gpu-deadline/workload-Bx1.5-120s.json
# PART f: the class order, g: the deadline order, 300 s of drain (about 8 minutes a part); h: FCFS, 360 s of drain
# (about 9 minutes: a fresh engine starts in 35-50 s on a warm machine, 115 s on a cold one, and a call has 600 s). The
# engine replay finishes all three near 300 s after the last arrival (`bench gpu simulate`, h100_step_profile.json).
set -u
part=${1:?usage: bash scripts/gpu_deadline.sh a|b|c|d|e|f|g|h}
B=loadtest/results/gpu/workload-B.json
idle=loadtest/results/gpu-deadline/workload-idle.json
B15=loadtest/results/gpu-deadline/workload-Bx1.5.json
B20=loadtest/results/gpu-deadline/workload-Bx2.json
B15L=loadtest/results/gpu-deadline/workload-Bx1.5-120s.json
drain=240
case "$part" in
  a) plan=(--workload "B=$B" --config fp8:B --config fp8-prio:B) ;;
  b) plan=(--workload "B=$B" --workload "idle=$idle" --config fp8-deadline:B,idle) ;;
  c) plan=(--workload "Bx1.5=$B15" --workload "Bx2=$B20" --config fp8:Bx1.5,Bx2) ;;
  d) plan=(--workload "Bx1.5=$B15" --workload "Bx2=$B20" --config fp8-prio:Bx1.5,Bx2) ;;
  e) plan=(--workload "Bx1.5=$B15" --workload "Bx2=$B20" --config fp8-deadline:Bx1.5,Bx2) ;;
  f) plan=(--workload "Bx1.5-120s=$B15L" --config fp8-prio:Bx1.5-120s); drain=300 ;;
  g) plan=(--workload "Bx1.5-120s=$B15L" --config fp8-deadline:Bx1.5-120s); drain=300 ;;
  h) plan=(--workload "Bx1.5-120s=$B15L" --config fp8:Bx1.5-120s); drain=360 ;;
  *) echo "GPU_DEADLINE_UNKNOWN_PART: $part (a to h)"; exit 3 ;;
esac
python3 -c "import vllm" 2>/dev/null || { echo "GPU_DEADLINE_NOT_STAGED: see this script's header"; exit 3; }
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 > "$OUT/device-$part.txt"
timeout 575 python3 -m thinktier bench gpu run --policy policies/examples/h200-7b.yaml --model /tmp/r1q7b \
  "${plan[@]}" --drain-s "$drain" --out "$OUT/run-$part.json" > "$OUT/log-$part.txt" 2>&1
status=$?
grep -E "^\[" "$OUT/log-$part.txt" | tail -n 8
python3 -m thinktier bench gpu table "$OUT/run-$part.json" 2>/dev/null
exit $status
