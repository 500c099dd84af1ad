"""Each request's preemption count, handed back with its last output.

vLLM counts preemptions per request in its scheduler (`Request.num_preemptions`) but 0.24 gives its outputs and
stat loggers only the engine's total, so which requests the scheduler evicts (the hard ones under priority, the
newest under FCFS) cannot be seen from outside the engine process. This scheduler adds the count to a finished
request's `kv_transfer_params`: the one per-request dict that travels from the scheduler to the caller's
`RequestOutput` (vLLM's KV connectors use it to hand a finished request's transfer parameters back; whatever a
connector returns is kept). The tier engine reads it with `preemptions_of`.

`engine.scheduler_cls` names `counting_scheduler`, a factory rather than a class: it subclasses the scheduler
vLLM would have chosen itself (the asynchronous one when async scheduling is on), which naming a class could not.
"""

from __future__ import annotations

import functools
from typing import Any

SCHEDULER = f"{__name__}.counting_scheduler"
"""What vLLM's `scheduler_cls` gets (a qualified name: the engine core process imports it)."""
KEY = "thinktier_num_preemptions"


def counting_scheduler(*args: Any, vllm_config: Any, **kwargs: Any) -> Any:
    """vLLM's scheduler for this configuration, reporting each finished request's preemptions."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    base = AsyncScheduler if vllm_config.scheduler_config.async_scheduling else Scheduler
    return _counting(base)(*args, vllm_config=vllm_config, **kwargs)


@functools.cache
def _counting(base: type) -> type:
    class Counting(base):  # type: ignore[misc]
        def _connector_finished(self, request: Any) -> tuple[bool, dict[str, Any] | None]:
            delay_free, params = super()._connector_finished(request)
            return delay_free, {**(params or {}), KEY: request.num_preemptions}

    Counting.__name__ = Counting.__qualname__ = f"PreemptionCounting{base.__name__}"
    return Counting


def preemptions_of(output: Any) -> int:
    """A finished `RequestOutput`'s preemption count (0 from a scheduler that does not report it)."""
    params = getattr(output, "kv_transfer_params", None) or {}
    return int(params.get(KEY, 0))
