"""Makes training batches in a child process, a few ahead of the step that uses them.

Writing a trace and tokenizing it is Python, and so is much of a small model's training step (its kernel launches):
in one process the two take turns, and the GPU waits while the next batch is written. A thread would share the
interpreter lock with the step; a forked child does not. The child runs the same seeded generator, so the batches and
their order are exactly those of the single-process loop.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Generator, Iterator
from typing import Any

_END = ("end", None)


def _produce(make: Callable[[], Iterator[Any]], queue: Any) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        for item in make():
            queue.put(("item", item))
        queue.put(_END)
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def _drain(queue: Any, child: Any) -> Generator[Any, None, None]:
    try:
        while True:
            kind, item = queue.get()
            if kind == "error":
                raise RuntimeError(f"the batch-making process failed:\n{item}")
            if kind == "end":
                return
            yield item
    finally:
        child.terminate()
        child.join()


def prefetched(make: Callable[[], Iterator[Any]], depth: int = 8) -> Generator[Any, None, None]:
    """The items of `make()`, made in a forked child (started now) at most `depth` ahead. Call it before CUDA is
    initialised in this process: a fork copies the parent's state. Close the generator to end the child early."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue(depth)
    child = context.Process(target=_produce, args=(make, queue), daemon=True, name="reasoner-batches")
    child.start()
    return _drain(queue, child)
