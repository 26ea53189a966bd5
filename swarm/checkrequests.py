"""A trainer's request that we check a worker's commitment (`/swarm/check/1`, swarm/roles/quorum.py).

The request is the worker's signed envelope, so it is checked as gossip would be; only a trainer the task
names may ask, and the check itself is a role's (a validator's or a worker's) job.
"""

from __future__ import annotations

from gossip import errors
from gossip.envelope import open_envelope
from gossip.errors import Rejected
from gossip.messages import RolloutCommitment
from swarm.io import RequestReceived, Respond


def answer_check_request(core, now: float, inp: RequestReceived) -> list:
    """`core`'s answer (a `PeerCore`): refused with a reason, or what its checking role makes of it."""
    try:
        signed = open_envelope(inp.data)
        msg = signed.message
        if not isinstance(msg, RolloutCommitment):
            raise Rejected(errors.SCHEMA, f"a check request holds a {signed.kind}, not a rollout commitment")
        known = core.tasks.tasks.get(msg.task_id)
        if known is None:
            return [Respond(inp.request_id, error=errors.UNKNOWN_TASK)]
        if inp.peer not in {core.context.signer(k) for k in known.task.trainer_keys}:
            raise Rejected(errors.UNAUTHORIZED, "check requested by a peer that is not the task's trainer")
    except Rejected as rej:
        return [Respond(inp.request_id, error=rej.reason)] + core.trust.penalise(now, inp.peer, rej)
    worker = core.context.signer(signed.signer)
    if core.ledger.is_banned(worker) or worker == core.peer_id:
        return [Respond(inp.request_id, error=errors.BANNED if worker != core.peer_id else "own-batch")]
    for role in core.roles:
        if hasattr(role, "on_check_request"):
            return role.on_check_request(now, inp.request_id, signed, worker)
    return [Respond(inp.request_id, error="not-a-checker")]
