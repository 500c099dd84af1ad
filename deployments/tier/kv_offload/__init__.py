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
KV_ROLE = "kv_producer"
"""vLLM's `kv_role`. Not a consumer role ('kv_both', 'kv_consumer'): with a consumer connector and overlapped steps
(async scheduling, on by default on a GPU) vLLM's scheduler defers freeing a preempted request's blocks until the step
in flight is done (`defer_block_free`), and vLLM 0.24's preemption loop, which expects a preemption to free blocks at
once, then preempts every lower-priority running request in turn; a storm of preemptions, each stored to host memory.
The deferral guards loads that are not ordered with the step in flight; this connector's loads and stores run on the
engine's compute stream, before the step's forward pass, so blocks freed at once are safe, as they are without it."""
HOST_BYTES = "host_bytes"
"""`kv_connector_extra_config` key: host memory for preempted requests' KV per replica, bytes."""
