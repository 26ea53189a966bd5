"""Evidence that a peer works on a task: what a relay asks before it carries a heartbeat naming one.

Naming a task in a heartbeat is free, and so is the key that signs it: a flood of fresh keys naming the
task everybody holds was relayed by every honest peer to every other (issue 27, attack 1; 172,740
relayed copies in the 31-peer simulation). So a gossiped heartbeat that nothing else vouches for is
relayed only when one of the tasks it names, that we hold, has something costly standing behind its
signer:

- the task names the signer as a trainer or validator (the announcer signed that);
- the task's trainer lists the signer in its summary among the workers whose batches it trained
  (swarm/summaries.py; a relay that joined after those commitments went by still has it);
- we hold a rollout commitment the signer made for the task (swarm/commitments.py): commitments are
  checked, and a fake one gets its signer banned everywhere.

An honest worker's heartbeats before its first commitment then reach its neighbours' neighbours only; a
worker therefore gossips a heartbeat soon after its first commitment to a task, which carries the
addresses its trainer dials for the batch (swarm/context.py `FIRST_WORK_BEAT`).
"""

from __future__ import annotations

from gossip.messages import StatusHeartbeat
from swarm.summaries import TaskSummaries
from swarm.tasks import TaskBook
from swarm.trust import Trust


class Evidence:
    def __init__(self, tasks: TaskBook, trust: Trust, summaries: TaskSummaries) -> None:
        self._tasks = tasks
        self._trust = trust
        self._summaries = summaries

    def works_on_held_task(self, signer: str, beat: StatusHeartbeat) -> bool:
        """Whether `beat` names a task we hold that `signer` is shown to work on."""
        held = self._tasks.tasks
        return any(task_id in held and self.works_on(signer, task_id) for task_id in beat.tasks)

    def works_on(self, peer: str, task_id: str) -> bool:
        if self._tasks.names(peer, frozenset((task_id,))) or self._summaries.lists(task_id, peer):
            return True
        book = self._trust.commitments.get(task_id)
        return book is not None and book.works(peer)
