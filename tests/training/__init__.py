"""Tests of model training: the reasoner's task family, its traces, tokenizer and training loop."""
