"""The trainer's check quorum: who checks a batch, when it may be trained on, and who lied.

With the task's `check_quorum` q > 0 the active trainer stops re-checking every batch (a full check
costs about 0.4x of generating it, so a trainer that checks everything is saturated by two or three
workers). For each commitment it accepts it asks q checkers over `/swarm/check/1` and trains on the
batch once q of them gossiped a passing verdict. The checkers are the task's trusted validators and,
with `peer_checks`, workers whose batches this trainer has already trained on (proven work: a fresh
identity costs nothing, a worker that did accepted work does). The batch's own worker never checks
it.

**The trainer picks, by its own signature.** Checkers are ranked by their outstanding requests, then
by blake2b over (the trainer's Ed25519 signature of the commitment id, the checker's id). Ed25519 is
deterministic, so the choice is fixed once the commitment exists, yet nobody without the trainer's
key can predict it: a worker cannot grind its commitment until a colluder is chosen, and a checker
cannot choose what it checks. The same kind of draw decides the spot checks: the trainer checks a
`spot_check` share of the batches itself too, and trains on those only if its own check passes.

**What is trained on**: a batch whose q asked checkers passed it and that was not drawn for a spot
check; or one the trainer passed itself. Any failing verdict makes the trainer check the batch
itself (a second opinion) before anything is decided, so one lying checker can neither get an honest
batch dropped nor, alone, a bad one trained. A quorum that does not form (checkers gone, `busy`, no
answer within `quorum_wait`) degrades to the trainer checking itself, never to training unchecked.

**Who lied**: every verdict the trainer hears on a batch it checked itself is compared with its own
result, whichever came first (`Opinions`). A checker whose signed verdict contradicts it is banned by
the trainer (a pass on a failed batch, or a fail on a passed one; `duplicate` is no contradiction:
the checker saw the same content before). docs/security.md derives how many bad batches a cheater
with colluding checkers gets trained on before its ban.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable

from gossip import errors
from gossip.errors import Rejected
from swarm import protocols
from swarm.io import Emit
from swarm.roles import checking
from swarm.roles.checking import Check

ASKED, PASSED, FAILED, GONE = "asked", "passed", "failed", "gone"
REQUEST_TIMEOUT = 10.0  # the answer is only "accepted" (or busy); the verdict comes by gossip
OPINIONS_KEPT = 4096  # commitments whose verdicts and own results a trainer remembers


def on_verdict(ctx, role, now: float, verdict, key: bytes, checker: str) -> list:
    """A trusted key's verdict, or one from a checker we asked: it counts towards the batch's quorum
    (a failure makes us check it ourselves), and is held against our own check (`Opinions`)."""
    state = role.tasks.get(verdict.task_id)
    if state is None or checker == ctx.peer_id:
        return []
    check = state.pending.get(verdict.commitment_id)
    asked = check is not None and checker in check.asked
    if not asked and not ctx.trusts_verdicts_of(verdict.task_id, key):
        return []
    effects = ban_liars(ctx, role, now, state, state.opinions.heard(verdict.commitment_id, checker, verdict.passed,
                                                                    verdict.reason))
    if check is not None and not ctx.is_banned(checker):
        heard(check, checker, verdict.passed)
        effects += role.maybe_train(now, state)
    return effects


def ban_liars(ctx, role, now: float, state, wrong: list[tuple[str, str]]) -> list:
    """Checkers whose signed verdicts our own check contradicts lose their say."""
    effects = []
    for checker, reason in wrong:
        effects += ctx.ban(now, checker, reason) + lost_say(ctx, role, now, state, checker)
    return effects


def within_share(ctx, state, worker: str) -> None:
    """With a quorum (a swarm of many workers), one worker's batches waiting at the trainer are bounded
    by its share of the steps the async window holds (the workers split a step: swarm/roles/worker.py),
    with one batch to spare per step, so a worker flooding more is refused (`capacity`, no penalty: a
    burst proves nothing) before it crowds out anyone else's; the total stays bounded by MAX_PENDING."""
    if not state.params.check_quorum:
        return
    workers = len(set(ctx.workers_of(state.spec.task_id, state.version)) | {worker})
    share = -(-state.params.step_limit // (state.params.prompts_per_commit * workers))
    cap = (state.async_level + 1) * (share + 1)
    if sum(1 for p in state.pending.values() if p.worker == worker) >= cap:
        raise Rejected(errors.CAPACITY, f"{cap} batches of this worker already waiting (its share of "
                                        f"{state.async_level + 1} steps)")


def draw(ctx, purpose: bytes, commitment_id: bytes) -> float:
    """A number in [0, 1) fixed by our signature over the commitment id: unpredictable to anyone else."""
    signature = ctx.sign(b"swarm/" + purpose + b"/1\x00" + commitment_id)
    return int.from_bytes(hashlib.blake2b(signature, digest_size=8).digest(), "big") / 2**64


def rank(ctx, commitment_id: bytes, peers) -> list[str]:
    signature = ctx.sign(b"swarm/check-assign/1\x00" + commitment_id)
    return sorted(peers, key=lambda p: hashlib.blake2b(signature + p.encode(), digest_size=8).digest())


def start(ctx, owner, now: float, state, check: Check) -> list:
    """A commitment the trainer accepted: draw the spot check, ask the checkers."""
    check.spot = draw(ctx, b"spot-check", check.commitment_id) < state.params.spot_check
    check.own = check.spot
    return ask_more(ctx, owner, now, state, check)


def candidates(ctx, state, check: Check) -> list[str]:
    """Who may check this batch: trusted validators and, with peer_checks, workers with proven work;
    alive, linked to us, not banned, not the batch's worker, not already asked."""
    pool = {ctx.signer(k) for k in state.validators} & set(ctx.alive_with_role("validator"))
    if state.params.peer_checks:
        pool |= {w for w in ctx.alive_with_role("worker") if state.worked.get(w, 0) > 0}
    pool -= {check.worker, ctx.peer_id, *check.asked}
    return [p for p in pool if not ctx.is_banned(p) and (info := ctx.peer_info(p)) is not None and info.connected]


def ask_more(ctx, owner, now: float, state, check: Check) -> list:
    """Ask checkers until q are asked or have passed; if there are too few, check it ourselves."""
    q = state.params.check_quorum
    need = q - sum(1 for s in check.asked.values() if s in (ASKED, PASSED))
    if need <= 0 or check.own:
        return []
    pool = candidates(ctx, state, check)
    if len(pool) < need:
        check.own = True
        return [Emit("quorum-short", {"task_id": state.spec.task_id, "worker": check.worker, "checkers": len(pool),
                                      "quorum": q})]
    load = outstanding(state)
    order = {p: i for i, p in enumerate(rank(ctx, check.commitment_id, pool))}
    chosen = sorted(pool, key=lambda p: (load.get(p, 0), order[p]))[:need]
    effects = []
    for peer in chosen:
        check.asked[peer] = ASKED
        effects.append(ctx.request(now, owner, ("check", state.spec.task_id, check.commitment_id, peer), peer,
                                   protocols.CHECK, check.wire, timeout=REQUEST_TIMEOUT))
    check.asked_at = now
    arm(ctx, state)
    return effects


def arm(ctx, state) -> None:
    """The quorum timer, at the earliest time a batch's checkers run out of time."""
    due = [c.asked_at + state.params.quorum_wait for c in state.pending.values()
           if not c.own and c.asked_at is not None and ASKED in c.asked.values()]
    if due:
        ctx.timer(f"trainer:{state.spec.task_id}:quorum", min(due))


def outstanding(state) -> dict[str, int]:
    load: dict[str, int] = {}
    for check in state.pending.values():
        for peer, status in check.asked.items():
            if status == ASKED:
                load[peer] = load.get(peer, 0) + 1
    return load


def refused(ctx, owner, now: float, state, check: Check, peer: str, error: str) -> list:
    """An asked checker answered with an error (busy, not following, gone): ask another."""
    if check.asked.get(peer) != ASKED:
        return []
    check.asked[peer] = GONE
    return [Emit("check-refused", {"task_id": state.spec.task_id, "checker": peer, "error": error[:80]})] + \
        ask_more(ctx, owner, now, state, check)


def heard(check: Check, peer: str, passed: bool) -> None:
    """A verdict on a pending batch from a checker we asked (or a trusted key): every failure makes us
    check the batch ourselves before anything is decided."""
    check.asked[peer] = PASSED if passed else FAILED
    if not passed:
        check.own = True


def trainable(ctx, state, check: Check) -> bool:
    if not check.blob_ok:
        return False
    if check.own:
        return check.result is not None and check.result.passed
    passes = sum(1 for peer, s in check.asked.items() if s == PASSED and not ctx.is_banned(peer))
    return passes >= state.params.check_quorum


def lost_say(ctx, owner, now: float, state, checker: str) -> list:
    """A checker we banned: its passes count no more; its batches are asked of others."""
    effects = []
    for check in list(state.pending.values()):
        if check.asked.get(checker) in (ASKED, PASSED):
            check.asked[checker] = GONE
            effects += ask_more(ctx, owner, now, state, check)
    return effects


def overdue(ctx, now: float, state) -> list:
    """The quorum timer: batches whose checkers did not all answer in time are checked by us."""
    effects = []
    wait = state.params.quorum_wait
    for check in state.pending.values():
        if check.own or check.asked_at is None or trainable(ctx, state, check):
            continue
        if check.asked_at + wait <= now:
            check.own = True
            late = sorted(p for p, s in check.asked.items() if s == ASKED)
            effects.append(Emit("quorum-timeout", {"task_id": state.spec.task_id, "worker": check.worker,
                                                   "late": late[:8]}))
    arm(ctx, state)
    return effects


def verify_more(ctx, role, now: float, state) -> list:
    """Start the next verify job, one at a time, of the batches we must check ourselves (all of
    them without a check quorum) while the passed and in-check prompts do not cover the next step's
    `step_limit`. Candidates are fetched batches, newest policy version first, then the worker
    checked least so far (every worker's batches get checked and trained on). Checking every batch
    on arrival spent the trainer's job process on batches that went stale before a step needed them
    and queued each train job behind those checks (bench/learning.py measured steps several times
    slower on 2 cores); one job at a time lets the train job go first. With a quorum, what we check
    ourselves (spot checks, disputes, quorums that did not form) gates those batches, so it is
    checked whatever else is ready."""
    if state.refused or any(p.verifying for p in state.pending.values()):
        return []
    gate = state.params.check_quorum and state.active
    have = sum(len(p.commitment.prompt_indices) for p in state.pending.values() if trainable(ctx, state, p))
    effects = []
    while gate or have < state.params.step_limit:
        waiting = [p for p in state.pending.values()
                   if p.own and p.blob_ok and not p.verifying and p.result is None]
        if not waiting:
            break
        check = min(waiting, key=lambda p: (-p.commitment.policy_version, state.checked.get(p.worker, 0)))
        held = state.weights_by_version if state.active else state.policy.held  # a standby's checks
        weights = held.get(check.commitment.policy_version)
        if weights is None:  # older than anything we kept: cannot be checked, so not trained on
            del state.pending[check.commitment_id]
            state.dropped += 1
            effects.append(Emit("rollout-dropped", {"task_id": state.spec.task_id, "worker": check.worker,
                                                    "reason": errors.TOO_OLD}))
            continue
        state.checked[check.worker] = state.checked.get(check.worker, 0) + 1
        state.own_checks += 1
        effects.append(checking.verify_job(ctx, role, state.spec, check, weights))
        break
    return effects


class Opinions:
    """The verdicts a trainer heard and the results of its own checks, per commitment, so a checker
    whose signed verdict contradicts the trainer's check is found whichever arrives first. Kept while
    the commitment book knows the commitment (`known`; 64 versions) and OPINIONS_KEPT at most: a
    soak's trainer filled the count cap over its first hour, node memory that never came back."""

    def __init__(self, known: Callable[[bytes], bool] = lambda cid: True) -> None:
        self.known = known
        self.said: OrderedDict[bytes, dict[str, tuple[bool, str]]] = OrderedDict()  # cid -> checker -> verdict
        self.own: OrderedDict[bytes, tuple[bool, str]] = OrderedDict()  # cid -> our check's (passed, reason)

    def heard(self, commitment_id: bytes, checker: str, passed: bool, reason: str) -> list[tuple[str, str]]:
        said = self.said.setdefault(commitment_id, {})
        said[checker] = (passed, reason)
        self.said.move_to_end(commitment_id)
        self._trim(self.said)
        return self._contradicted(commitment_id, {checker: (passed, reason)})

    def checked(self, commitment_id: bytes, passed: bool, reason: str) -> list[tuple[str, str]]:
        self.own[commitment_id] = (passed, reason)
        self.own.move_to_end(commitment_id)
        self._trim(self.own)
        return self._contradicted(commitment_id, self.said.get(commitment_id, {}))

    def _trim(self, d: OrderedDict) -> None:
        """Oldest first: past the count cap, and while the oldest is a commitment the book forgot."""
        while d and (len(d) > OPINIONS_KEPT or not self.known(next(iter(d)))):
            d.popitem(last=False)

    def _contradicted(self, commitment_id: bytes, verdicts: dict) -> list[tuple[str, str]]:
        if commitment_id not in self.own:
            return []
        own, own_reason = self.own[commitment_id]
        return [(checker, f"wrong verdict on {commitment_id.hex()[:16]}: {reason}, the trainer's check says "
                          f"{own_reason if not own else 'ok'}")
                for checker, (passed, reason) in sorted(verdicts.items())
                if passed != own and errors.DUPLICATE not in (reason, own_reason)]


