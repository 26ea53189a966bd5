"""Links between the members of a members-only task (gossip/topics.py `MEMBERS`): how its gossip gets around.

Only the peers with a role subscribe to such a task's topics, and gossipsub carries a topic over links
between its subscribers only: a member linked to relays alone would hear none of it. So every member keeps
links to `want` of the task's other members, beside its random ones (swarm/membership.py `maintain`); a
random graph of that degree among them is connected, and gossipsub meshes over it.

Who counts as a member: a peer whose last heartbeat names the task and a role other than relay, and which
is shown to work on it (swarm/evidence.py): the task names it as a trainer or validator (the announcer
signed that; their heartbeats go to every peer, so a new member finds them first), its trainers' summary
lists it, or we hold a commitment it made. Naming a task is free: a flood of fresh keys declaring the
worker role is never dialled. A worker with no commitment yet is found by the members it dials, whose
links it then takes part in.
"""

from __future__ import annotations

from swarm.evidence import Evidence
from swarm.io import Dial
from swarm.peerinfo import ALIVE, PeerInfo
from swarm.rng import Rng
from swarm.tasks import TaskBook

MEMBER_LINKS = 4  # links to other members per task: gossipsub's mesh degree is about this


class MemberLinks:
    def __init__(self, tasks: TaskBook, evidence: Evidence, want: int = MEMBER_LINKS) -> None:
        self.tasks = tasks
        self.evidence = evidence
        self.want = want

    def is_member(self, info: PeerInfo, task_id: str) -> bool:
        return task_id in info.tasks and any(r != "relay" for r in info.roles) \
            and self.evidence.works_on(info.peer_id, task_id)

    def dials(self, now: float, rng: Rng, membership, is_banned) -> list[Dial]:
        """Dials that bring each of our members-only tasks up to `want` linked members (no draw from `rng`
        while we hold none: a swarm without such tasks runs as it did before them)."""
        task_ids = self.tasks.member_tasks()
        if not task_ids:
            return []
        peers, linked = membership.peers, membership.linked
        dials: list[Dial] = []
        for task_id in task_ids:
            have = sum(1 for p in linked if p in peers and self.is_member(peers[p], task_id))
            if have >= self.want:
                continue
            candidates = sorted(p for p, info in peers.items() if info.state == ALIVE and p not in linked
                                and membership.dialable(info, now) and not is_banned(p) and self.is_member(info, task_id))
            picked = candidates if len(candidates) <= self.want - have else rng.sample(candidates, self.want - have)
            dials += [membership.dial(peers[p], now) for p in picked]
        return dials
