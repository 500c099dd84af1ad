"""Labelled prompts: the problem sets from their PyPI packages, the external test set, and the hand-written chat prompts."""
