"""A tier replica and its vLLM engine: budgeted decoding, the reasoning/answer split, self-consistency, replica stats."""
