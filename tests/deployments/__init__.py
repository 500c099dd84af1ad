"""Tests of what runs in Serve replicas: the request path, the tier replica and its vLLM engine."""
