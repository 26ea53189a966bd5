"""Standby trainers: follow the active trainer's chain, take over when it falls silent, step down when beaten.

A task's `trainer_keys` order is the rank. Rank 0 starts active; every other trainer starts as a
standby: it installs every version like any follower (`PolicyFollower`) and remembers recent rollout
commitments, and publishes nothing. It takes over when the head chain's trainer (swarm/forkchoice.py)
has been silent (no manifest, re-announcements included) for `takeover_after` seconds, plus
`takeover_after` more for each better-ranked trainer that is alive (its heartbeats arrive) and holds a
version: that one takes over first, and the wait only matters if it does not. Taking over opens term
`max term heard + 1`, numbers its first version above every version heard (so a peer's versions go
backwards only when it switches to a better chain), and continues from the newest version it holds.
Its first version is a full encoding, so every term's chain back to its last full version is its
own. Its first train job continues from the newest trainer checkpoint it fetched (swarm/roles/
trainerstate.py): the optimizer moments, step and RNG always, the master weights when the checkpoint is
of the version it continues from. **What is lost** when the checkpoint is older (the active trainer
packs one every `state_every` versions): the master weights' low bits of the versions since (it
continues from the published, rounded weights) and up to `state_every` steps of moment updates;
with no checkpoint at all, the moments (fresh AdamW). Trained-on rollouts of versions the standby had
not installed are not trained on again. A trainer that sees a better chain (a higher term, or its own
term from a better rank) steps down: it drops its chain, discards a train step in flight, and follows.

A returning trainer (its `init` resumed a version past 0) of a task with several trainers stands by
whatever its rank, and knows the term it last signed (recorded with each version it trained:
trainer/trainstate.py). Only if it hears no chain at all for `takeover_after` (every trainer
restarted) does it resume its own version as before, in that term.
"""

from __future__ import annotations

from swarm.forkchoice import chain_key
from swarm.io import Emit
from swarm.roles import checking, trainerstate
from swarm.roles.checking import Check
from swarm.roles.follower import PolicyFollower

MIN_RECHECK = 1.0
MAX_PENDING = 256  # commitments a standby holds in checks (the active trainer's bound too)


def timer_name(task_id: str) -> str:
    return f"trainer:{task_id}:takeover"


def new_follower(state) -> PolicyFollower:
    return PolicyFollower(state.spec.task_id, keep=state.async_level + 1)


def beaten_by(state, term: int, rank: int) -> bool:
    """An active trainer sees a better chain than its own."""
    return state.active and chain_key(term, rank) > chain_key(state.term, state.rank)


def patience(ctx, state, task_keys: tuple[bytes, ...]) -> float:
    """takeover_after, plus one more for every better-ranked trainer alive and holding a version
    (the head's own trainer aside: its silence is what is being judged)."""
    fork = ctx.chain(state.spec.task_id)
    head_signer = (ctx.signer(task_keys[fork.head[1]]) if fork.head is not None and fork.head[1] < len(task_keys)
                   else None)
    alive = set(ctx.alive_with_role("trainer"))
    better = 0
    for key in task_keys[:state.rank]:
        peer = ctx.signer(key)
        info = ctx.peer_info(peer)
        if peer != head_signer and peer in alive and info is not None \
                and info.versions.get(state.spec.task_id, -1) >= 0:
            better += 1
    return state.params.takeover_s * (1 + better)


def check(ctx, role, now: float, state, task_keys: tuple[bytes, ...]) -> list:
    """The takeover timer: take over, or look again when the silence could be long enough."""
    if state.active:
        return []
    fork = ctx.chain(state.spec.task_id)
    wait, silent = patience(ctx, state, task_keys), fork.silent_for(now, ctx.awake_since)
    if state.policy.newest_held() is None or silent < wait:
        left = wait - silent if silent < wait else state.params.takeover_s
        ctx.timer(timer_name(state.spec.task_id), now + max(MIN_RECHECK, left))
        return []
    return take_over(ctx, role, now, state)


def on_commitment(ctx, role, now: float, state, signed, signer: str) -> list:
    """A commitment heard while standing by: kept to train on if we take over. With the task's
    `standby_checks`, one of the followed chain's versions is fetched and checked now, like the active
    trainer checks (verdicts published), until one step's worth has passed: a takeover's first step then
    starts at once, with a job process that has the model loaded. Never refused here: the active trainer
    judges it."""
    msg = signed.message
    policy = state.policy
    if state.params.standby_checks and msg.policy_term == policy.term and msg.policy_version in policy.held \
            and msg.samples_per_prompt == state.params.group_size and signed.msg_id not in state.pending:
        for cid, p in list(state.pending.items()):  # what a takeover could no longer train on
            if p.commitment.policy_version not in policy.held and not p.verifying:
                del state.pending[cid]
        if len(state.pending) < MAX_PENDING:
            check = state.pending[signed.msg_id] = Check(msg, signed.msg_id, signer, signed.signer)
            effects = checking.fetch_blob(ctx, role, now, check)
            checking.arm_retry(ctx, state.pending.values(), f"trainer:{msg.task_id}:blobs")
            return effects
    state.heard.append((signed, signer))
    return []


def take_over(ctx, role, now: float, state) -> list:
    fork = ctx.chain(state.spec.task_id)
    policy = state.policy
    newest = policy.newest_held()
    old_term, silent = policy.term, fork.silent_for(now, ctx.awake_since)
    state.term = max(fork.max_term, state.term) + 1
    state.takeovers += 1
    state.version = max(fork.max_version, newest)
    state.weights = policy.held[newest]
    state.weights_by_version = dict(policy.held)
    state.chain_terms = {v: old_term for v in policy.held}
    for digest in set(policy.held.values()):
        ctx.hold_blob(role, digest)
    state.manifests, state.active = {}, True
    state.resume_state, state.states.packed_at = state.states.newest, -1  # the first step packs our own
    fork.own(now, state.term, state.rank, state.version)
    effects = ctx.release_blobs(policy, list(policy.held.values()))
    for m in policy.manifests.values():
        effects += ctx.release_shards(now, m.root, policy)
    if state.states.fetching is not None:  # too late for it
        effects += ctx.release_shards(now, state.states.fetching.root, state.states)
        state.states.fetching = state.states.queued = None
    state.policy = new_follower(state)
    effects.append(Emit("trainer-takeover", {"task_id": state.spec.task_id, "term": state.term, "rank": state.rank,
                                             "from_version": newest, "from_term": old_term,
                                             "version": state.version, "silent": round(silent, 3),
                                             "state_version": state.resume_state.version if state.resume_state else None}))
    return effects


def returning(ctx, role, now: float, state, weights: bytes) -> list:
    """Init resumed a version: listen first (the module's docstring says why)."""
    ctx.hold_blob(role, weights)
    effects = ctx.release_blobs(role, [weights])
    state.active = False
    ctx.timer(f"trainer:{state.spec.task_id}:resume", now + state.params.takeover_s)
    ctx.timer(timer_name(state.spec.task_id), now + state.params.takeover_s)
    return effects + [Emit("trainer-standby", {"task_id": state.spec.task_id, "rank": state.rank, "returning": True,
                                               "takeover_after": state.params.takeover_s})]


def resume(ctx, role, now: float, state) -> list:
    """No chain heard since we came back: run init again and publish what it resumes."""
    if state.active or ctx.chain(state.spec.task_id).head is not None:
        return []
    state.active, state.resumed = True, True
    return role.on_timer(now, f"trainer:{state.spec.task_id}:init")


def step_down(ctx, role, now: float, state, term: int, rank: int) -> list:
    """A better chain exists: drop ours (a step in flight is discarded when it ends) and follow."""
    task_id = state.spec.task_id
    effects = []
    for m in state.manifests.values():
        effects += ctx.release_shards(now, m.root, role)
    effects += ctx.release_blobs(role, list(set(state.weights_by_version.values())))
    state.active, state.manifests, state.weights_by_version, state.chain_terms = False, {}, {}, {}
    state.pending.clear()
    effects += trainerstate.drop_all(ctx, now, state.states)
    state.resume_state = None
    state.version, state.weights = -1, b""
    state.policy = new_follower(state)
    ctx.cancel_timer(f"trainer:{task_id}:announce")
    ctx.timer(timer_name(task_id), now + state.params.takeover_s)
    return effects + [Emit("trainer-stepped-down", {"task_id": task_id, "term": state.term, "rank": state.rank,
                                                    "to_term": term, "to_rank": rank})]
