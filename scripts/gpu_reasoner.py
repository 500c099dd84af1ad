"""The reasoner's GPU steps without the CLI (the GPU image has no Ray, which `thinktier`'s command modules import).

    python3 scripts/gpu_reasoner.py train SIZE OUT_DIR [MAX_MINUTES [INIT_FROM LEARNING_RATE]]
    python3 scripts/gpu_reasoner.py bench SIZE MODEL_DIR OUT_DIR [SEED]
    python3 scripts/gpu_reasoner.py bf16 MODEL_DIR     (rewrites the saved weights in bfloat16: half the bytes to carry)
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path

from thinktier.loadtest.bench.reasoner.behaviours import BehaviourSettings
from thinktier.loadtest.bench.reasoner.run import run
from thinktier.policies.loader import load_policy_with
from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.train import TrainingOptions, train

GPU_POLICY = "policies/examples/reasoner-large.yaml"


def main(argv: list[str]) -> int:
    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if argv[0] == "bf16":
        from transformers import LlamaForCausalLM

        LlamaForCausalLM.from_pretrained(argv[1]).to(torch.bfloat16).save_pretrained(argv[1], safe_serialization=True)
        return 0
    step, size = argv[0], SIZES[argv[1]]
    if step == "train":
        minutes = float(argv[3]) if len(argv) > 3 else None
        options = TrainingOptions(device="cuda", max_minutes=minutes, log_every=100)
        if len(argv) > 5:
            options = replace(options, init_from=Path(argv[4]), learning_rate=float(argv[5]))
        print(train(size, Path(argv[2]), options))
        return 0
    policy = load_policy_with(GPU_POLICY, [("tiers.reasoning.model", argv[2])])
    settings = BehaviourSettings(per_class=30, budget_per_class=8, vote_per_class=24, concurrency=128,
                                 budgets=(256, 1024, 2048, 4096, 8192, 11000),
                                 seed=int(argv[4]) if len(argv) > 4 else 0)
    report = run(("reasoning", policy.tiers["reasoning"]), size, settings, Path(argv[3]),
                 f"python3 scripts/gpu_reasoner.py {' '.join(argv)}", f"one {torch.cuda.get_device_name(0)}")
    for aim in report["aims"]:
        print(("met    " if aim["met"] else "MISSED ") + aim["name"] + ": " + aim["measured"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
