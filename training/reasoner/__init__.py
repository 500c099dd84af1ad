"""The project's own reasoning model: its task family, its training traces, its tokenizer and its training loop.

No model hub is reachable, so thinktier trains the reasoning model that its accuracy figures are measured with
(`builtin:reasoner-small`, `builtin:reasoner-large`). deployments/tier/models.py loads the artifacts.
"""
