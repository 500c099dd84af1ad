"""The reasoner's behaviours measured on the tier engine: thinking length, accuracy, budgets, overthinking, votes."""
