"""Live reload of the policy file: poll it, validate it, swap it in whole, or keep the last good one.

On Kubernetes the policy is a ConfigMap mounted as a directory: `policy.yaml` is a symlink to
`..data/policy.yaml`, and the kubelet updates it by pointing the `..data` symlink at a new
timestamped directory in one rename. Change notifications on such a path are unreliable (the
watched file itself never changes), so the watcher polls: every `interval_s` it opens the path
afresh (which resolves the symlinks again) and compares the content with what it last acted on.

What happens to new content:
  * invalid: rejected. Every problem is logged, `last_error` holds them, the
    `thinktier_policy_reloads_total{outcome="rejected"}` counter goes up, and the last good
    policy keeps serving.
  * valid, but changing something that is built at deploy time (a field marked DEPLOY_TIME in
    policies/schema/: a model, engine arguments, pool, replicas, autoscaling targets, the
    classifier, the HTTP address, ...; or a tier added or removed): nothing of it is applied, not
    even its live parts, because a half-applied policy is one nobody wrote. Logged with the
    fields, counted as `needs_redeploy`; `last_error` says what to redeploy. Redeploying (Helm
    upgrade, or `thinktier up` locally) brings the whole policy in.
  * valid and live-applicable (routing, thresholds, budgets, degradation, SLOs, tenants):
    `on_change(new_policy, change)` is called, then `current` becomes the new policy; counted
    as `applied`.
  * valid but equal to the serving policy (a comment edited, or reverted to it): nothing to do.
Each distinct content is acted on once, however long it stays in the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin

from prometheus_client import Counter
from pydantic import BaseModel

from thinktier.policies.loader import PolicyError, parse_policy
from thinktier.policies.schema import Policy, is_deploy_time

log = logging.getLogger(__name__)

Outcome = Literal["applied", "rejected", "needs_redeploy"]
OUTCOMES: tuple[Outcome, ...] = ("applied", "rejected", "needs_redeploy")

RELOADS = Counter(
    "thinktier_policy_reloads",
    "Policy file changes seen by the live reloader, by outcome: applied; rejected (invalid, the last good "
    "policy keeps serving); needs_redeploy (changes what is built at deploy time; nothing applied).",
    ["outcome"],
)
for _outcome in OUTCOMES:
    RELOADS.labels(_outcome)


def _sections(annotation: object) -> Iterator[tuple[tuple[str, ...], type[BaseModel]]]:
    """The policy sections a field holds, with the path from the field to each: the field's own model, or the
    values of a dict of models (any key: `*`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield (), annotation
    elif get_origin(annotation) is dict:
        for path, model in _sections(get_args(annotation)[1]):
            yield ("*", *path), model


def deploy_time_fields(model: type[BaseModel] = Policy) -> Iterator[str]:
    """Dotted paths of the fields of `model` marked deploy-time in policies/schema/, `*` for any dict key."""
    for name, field in model.model_fields.items():
        if is_deploy_time(field):
            yield name
            continue
        for path, section in _sections(field.annotation):
            yield from (".".join((name, *path, sub)) for sub in deploy_time_fields(section))


# Policy fields built into deployments at deploy time (marked DEPLOY_TIME in policies/schema/); a
# change to any of them needs a redeploy. Adding or removing a tier also matches ("tiers.new" is
# above "tiers.*.model"). Everything else is read by the router per request and applies live.
REDEPLOY_FIELDS: tuple[str, ...] = tuple(deploy_time_fields())


@dataclass(frozen=True)
class PolicyChange:
    """What differs between two policies, as dotted field paths, split by how it can be applied."""

    live: tuple[str, ...] = ()
    redeploy: tuple[str, ...] = ()

    @property
    def needs_redeploy(self) -> bool:
        return bool(self.redeploy)

    def __bool__(self) -> bool:
        return bool(self.live or self.redeploy)

    def __str__(self) -> str:
        parts = []
        if self.redeploy:
            parts.append(f"needs a redeploy: {', '.join(self.redeploy)}")
        if self.live:
            parts.append(f"live: {', '.join(self.live)}")
        return "; ".join(parts) or "no change"


def _changed_paths(old: object, new: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys(), key=str):
            sub = (*path, str(key))
            if key in old and key in new:
                yield from _changed_paths(old[key], new[key], sub)
            else:
                yield sub
    elif old != new:
        yield path


def _needs_redeploy(path: tuple[str, ...]) -> bool:
    """Whether `path` lies under a REDEPLOY_FIELDS entry, or above one (a whole tier added or removed)."""
    for pattern in REDEPLOY_FIELDS:
        parts = pattern.split(".")
        common = min(len(parts), len(path))
        if all(p in ("*", q) for p, q in zip(parts[:common], path[:common], strict=True)):
            return True
    return False


def policy_change(old: Policy, new: Policy) -> PolicyChange:
    """The fields that differ between `old` and `new`, split into live-applicable and redeploy-needing."""
    paths = list(_changed_paths(old.model_dump(), new.model_dump()))
    return PolicyChange(
        live=tuple(".".join(p) for p in paths if not _needs_redeploy(p)),
        redeploy=tuple(".".join(p) for p in paths if _needs_redeploy(p)),
    )


class PolicyWatcher:
    """Polls a policy file and hands each valid, live-applicable new policy to `on_change`.

    `current` is the policy in force (the last one applied). `start()` runs the polling as an
    asyncio task when called inside a running event loop (then `on_change` runs on that loop,
    so it needs no locks against the loop's other code), else on a daemon thread. `poll()`
    checks once, for callers with their own schedule.
    """

    def __init__(
        self,
        path: str | Path,
        on_change: Callable[[Policy, PolicyChange], None],
        interval_s: float = 1.0,
        policy: Policy | None = None,
    ) -> None:
        """Watch `path`. `policy` is the one already serving; when None it is loaded from `path` (PolicyError if invalid)."""
        self.path = Path(path)
        self.on_change = on_change
        self.interval_s = interval_s
        self.last_error: str | None = None
        # This watcher's own counts, for a process whose default prometheus registry is not scraped
        # (a Serve replica): its owner can report them to whoever serves /metrics.
        self.reloads: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
        self._seen: str | None = None
        self._pending: str | None = None
        if policy is None:
            text = self.path.read_text()
            policy = parse_policy(text, str(self.path))
            self._seen = _digest(text)
        self.current: Policy = policy
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def poll(self) -> Outcome | None:
        """Check the file once. Returns the outcome of new content, None when nothing new was seen.

        A ConfigMap volume swaps its files atomically (the path is a symlink), so new content there applies at once.
        A plain file may be caught mid-write, and a truncated policy can still parse (without its `tenants:`, say): its
        new content applies only once two polls in a row read the same."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            text = f"<unreadable: {why}>"
            if self._seen == _digest(text):
                return None
            self._seen = _digest(text)
            return self._reject(f"{self.path}: cannot read policy file: {why}")
        digest = _digest(text)
        if digest == self._seen:
            self._pending = None
            return None
        if not self.path.is_symlink() and digest != self._pending:
            self._pending = digest
            return None
        self._pending = None
        self._seen = digest
        try:
            new = parse_policy(text, str(self.path))
        except PolicyError as exc:
            return self._reject(str(exc))
        change = policy_change(self.current, new)
        if not change:
            self.last_error = None
            log.info("policy %s: edited, no effective change", self.path)
            return None
        if change.needs_redeploy:
            self.last_error = (
                f"{self.path}: not applied: {', '.join(change.redeploy)} change what is built at deploy time; "
                "redeploy to apply this policy (the previous one keeps serving)"
            )
            log.warning("policy %s: %s", self.path, self.last_error)
            return self._count("needs_redeploy")
        try:
            self.on_change(new, change)
        except Exception as exc:
            log.exception("policy %s: applying the new policy failed", self.path)
            return self._reject(f"{self.path}: applying the new policy failed: {exc!r}")
        self.current = new
        self.last_error = None
        log.info("policy %s: applied (%s)", self.path, change)
        return self._count("applied")

    def _reject(self, error: str) -> Outcome:
        self.last_error = error
        log.error("policy %s rejected, the last good policy keeps serving: %s", self.path, error)
        return self._count("rejected")

    def _count(self, outcome: Outcome) -> Outcome:
        RELOADS.labels(outcome).inc()
        self.reloads[outcome] += 1
        return outcome

    def _poll_logged(self) -> None:
        try:
            self.poll()
        except Exception:  # the watcher must outlive any one bad poll
            log.exception("policy %s: poll failed", self.path)

    def start(self) -> None:
        """Start polling: an asyncio task on the running loop if there is one, else a daemon thread."""
        if self._task is not None or self._thread is not None:
            raise RuntimeError("the policy watcher is already running")
        self._stopping.clear()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._thread = threading.Thread(target=self._run_thread, name=f"policy-watcher:{self.path}", daemon=True)
            self._thread.start()
        else:
            self._task = loop.create_task(self._run_task(), name=f"policy-watcher:{self.path}")

    def stop(self) -> None:
        """Stop polling (returns at once for the task; waits for the thread's current poll)."""
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._thread is not None:
            self._thread.join(timeout=max(self.interval_s, 1.0) + 5)
            self._thread = None

    async def _run_task(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            while not self._stopping.is_set():
                await asyncio.sleep(self.interval_s)
                self._poll_logged()

    def _run_thread(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._poll_logged()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
