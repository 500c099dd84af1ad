"""The request path inside the Ingress: admission, routing and its decision, the call to a tier, OpenAI shapes, metrics."""
