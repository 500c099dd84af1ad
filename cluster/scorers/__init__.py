"""The request router's replica scorers, one per module, each registered by name in `registry.py`.

Modelled on llm-d's inference scheduler: a scorer is a small plugin that rates one replica for one request and knows
nothing of the others; the router (cluster/request_router.py) adds them up, each times its weight from the tier's
`router_weights` in the policy, and sends the request to the lowest total.
"""
