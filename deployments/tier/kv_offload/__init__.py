"""Preempt-offload: a vLLM KV connector that copies a preempted request's KV blocks to host memory and loads them
back when the request resumes, instead of vLLM's recompute of its prompt and thinking so far.

`planner` is the scheduler's bookkeeping (pure Python), `copier` moves blocks between the engine's KV cache and the
host pool, and `connector` binds both to vLLM's KV connector interface (named in the engine arguments by module path
when a tier's policy says `engine.kv_offloading.mode: preempted`).
"""

CONNECTOR = "PreemptOffloadConnector"
"""vLLM's `kv_connector`: the class name in `CONNECTOR_MODULE`."""
CONNECTOR_MODULE = "thinktier.deployments.tier.kv_offload.connector"
"""vLLM's `kv_connector_module_path`."""
HOST_BYTES = "host_bytes"
"""`kv_connector_extra_config` key: host memory for preempted requests' KV per replica, bytes."""
