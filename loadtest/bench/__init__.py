"""Benchmarks: each compares thinktier against a baseline in the same run and writes results under loadtest/results/."""
