"""What a role (worker, trainer, validator, mirror) must answer; what it may ask is `RoleContext`.

A role is a small state machine per task. The core routes to it the inputs that concern it and
returns its effects. A role is built with a `RoleContext` (swarm/context.py), never the core: it
asks the context for publishing, jobs, requests and timers, so every job and request is tracked in
one place (the core knows which role to wake).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gossip.envelope import SignedMessage
    from swarm.io import JobFinished, ResponseReceived
    from swarm.tasks import KnownTask


class Role:
    name = "role"

    def on_task(self, now: float, known: "KnownTask") -> list:
        return []

    def forget_task(self, now: float, task_id: str) -> list:
        """The task left this peer's table (expired or evicted): its state goes, so a job, request or timer
        of it that ends later finds nothing to act on. A role that holds weights blobs for it lets go of
        them here (the exchange drops the task's shards: ShardsRole.forget_task)."""
        getattr(self, "tasks", {}).pop(task_id, None)
        return []

    def on_message(self, now: float, signed: "SignedMessage", signer: str) -> list:
        """A validated task message (rollout, verdict, manifest); may raise Rejected."""
        return []

    def on_job_finished(self, now: float, tag: Any, done: "JobFinished") -> list:
        return []

    def on_response(self, now: float, tag: Any, response: "ResponseReceived") -> list:
        return []

    def on_timer(self, now: float, name: str) -> list:
        return []

    def on_connected(self, now: float, peer: str) -> list:
        """A link to `peer` opened: work that waited on a dial to it (a checker's blob fetch) goes now."""
        return []

    def snapshot(self) -> dict:
        return {}
