#!/bin/bash
# Issue 32's matrix on two H100s, forecast by the planner (the two-GPU matrix no lent machine could run): the targets
# of the one-H100 matrix (loadtest/results/gpu-matrix/, their policies as run) doubled, at twice its middle rate,
# seeds 0-2, on the H100's measured step profile with the serving overhead fitted on the bare engine; then the
# load test's own summary of ratios within each seed. About two minutes on two cores. From the repository root:
#   bash scripts/plan_matrix_2xh100.sh [OUT]   (default loadtest/results/plan/matrix-2xh100)
set -euo pipefail
M=loadtest/results/gpu-matrix
OUT=${1:-loadtest/results/plan/matrix-2xh100}
H100="--step-profile loadtest/results/gpu-deadline/h100_step_profile.json --serving-overhead-us 14.9"
LOAD="--rate 6 --duration 45 --shape 0.5 --mix easy=0.5,medium=0.3,hard=0.1,chat=0.1 --languages en --no-autoscale"
two_reasoning='tiers.reasoning.replicas={"min":2,"max":2}'
two_chat='tiers.chat.replicas={"min":2,"max":2}'
declare -A POLICY=(
  [one-pool]="$M/one-pool/policy.yaml --set $two_reasoning"
  [one-pool-budgets]="$M/one-pool-budgets/policy.yaml --set $two_reasoning"
  [tiered-no-degradation]="$M/tiered-no-degradation/policy.yaml --set $two_reasoning --set $two_chat"
  [tiered]="$M/tiered/policy.yaml --set $two_reasoning --set $two_chat"
  [tiered-split]="$M/tiered/policy.yaml --set tiers.reasoning.pool.gpu_fraction=1 --set tiers.chat.pool.gpu_fraction=1
    --set tiers.reasoning.engine.kv_cache_memory_gib=2.25 --set tiers.chat.engine.kv_cache_memory_gib=2.25"
)
declare -A WHAT=(
  [one-pool]="one pool, 2 replicas (a GPU each, 2.25 GiB KV), every request the default budget"
  [one-pool-budgets]="one pool, 2 replicas, the classifier's per-class budgets and priorities"
  [tiered-no-degradation]="tiered on shared GPUs (each GPU: a reasoning replica at 0.75, 1.75 GiB KV, and a chat replica at 0.25, 0.5 GiB), degradation off"
  [tiered]="tiered on shared GPUs as tiered-no-degradation, degradation and lending on as the policy ships"
  [tiered-split]="tiered on split GPUs: the reasoning tier one whole GPU, the chat tier the other (2.25 GiB KV each), degradation and lending on"
)
for target in one-pool one-pool-budgets tiered-no-degradation tiered tiered-split; do
  mkdir -p "$OUT/$target"
  printf '{"kind": "simulated", "policy": "%s", "what": "%s"}\n' "${POLICY[$target]%% *}" "${WHAT[$target]}" > "$OUT/$target/target.json"
  for seed in 0 1 2; do
    # shellcheck disable=SC2086
    python3 -m thinktier plan --policy ${POLICY[$target]} $H100 $LOAD --seed "$seed" --requests --out "$OUT/$target/seed-$seed" \
      | tail -n 1
    gzip -f "$OUT/$target/seed-$seed/requests.jsonl"
  done
done
python3 -m thinktier loadtest compare --summarize "$OUT" --baseline one-pool
