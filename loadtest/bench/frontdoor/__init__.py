"""The front-door benchmark: the HTTP path alone, with synthetic tier replicas, against a bare FastAPI floor."""
