"""The GPU benchmark of one tier replica (`thinktier bench gpu`): workloads, configurations, the runner, results."""
