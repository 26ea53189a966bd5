"""PolicyFollower without a core: which manifests it keeps and which unpack it asks for next."""

from __future__ import annotations

from types import SimpleNamespace

from swarm import jobs
from swarm.io import JobFinished
from swarm.roles.follower import PolicyFollower
from tests.swarm.test_forkchoice import manifest

TASK = "ab" * 8


class Ctx:
    """Records the unpack jobs asked for; every other effect is empty."""

    def __init__(self) -> None:
        self.unpacks: list[int] = []

    def job(self, owner, tag, kind, payload):
        assert kind == jobs.UNPACK
        self.unpacks.append(payload.version)
        return ("job", tag)

    def want_shards(self, now, m, owner, source=""):
        return []

    def release_shards(self, now, root, owner):
        return []

    def release_blobs(self, owner, digests):
        return []

    def hold_blob(self, owner, digest):
        pass

    def hold_version(self, task_id, version):
        pass

    def timer(self, name, at):
        pass


def chain(first: int, last: int) -> list:
    """A full version `first` and deltas on it up to `last`, each naming its parent's root."""
    out = [manifest(TASK, first, 0, 0)]
    for v in range(first + 1, last + 1):
        m = manifest(TASK, v, 0, 0, parent_root=out[-1].root)
        out.append(m)
    return out


def installed(f: PolicyFollower, version: int) -> list:
    done = JobFinished(0, True, jobs.VersionResult(version=version, weights=b"w%d" % version, size=1), "")
    return f.on_job_finished(100.0, ("unpack", version), done)


def test_a_follower_far_behind_installs_every_delta_to_the_latest_however_old():
    """A worker back from a crash learns the chain 16 (full) .. 22 while the window (keep 3) starts at
    18: installing 16 must not drop 17, or no delta chain reaches 22 and it never generates again."""
    ctx = Ctx()
    owner = SimpleNamespace(name="worker", on_timer=lambda now, name: [])
    f = PolicyFollower(TASK, keep=3)
    manifests = chain(16, 22)
    for m in manifests:
        f.on_manifest(ctx, owner, 90.0, m, "trainer")
    for m in manifests:
        f.on_shards_done(90.0, m.root)
    assert ctx.unpacks == [16]
    for v in range(16, 23):
        installed(f, v)
        assert ctx.unpacks[-1] == min(v + 1, 22), ctx.unpacks
    assert max(f.held) == 22 and min(f.held) >= 22 - 3 - 1


def test_a_delta_past_the_newest_held_is_taken_even_below_the_window():
    """The trainer re-announces its chain; a follower holding 16 with 22 heard takes 17 again."""
    ctx = Ctx()
    owner = SimpleNamespace(name="worker", on_timer=lambda now, name: [])
    f = PolicyFollower(TASK, keep=3)
    manifests = chain(16, 22)
    f.on_manifest(ctx, owner, 90.0, manifests[0], "trainer")
    f.on_shards_done(90.0, manifests[0].root)
    installed(f, 16)
    f.on_manifest(ctx, owner, 91.0, manifests[-1], "trainer")  # the latest, live
    for m in manifests[1:-1]:  # then the re-announced chain
        f.on_manifest(ctx, owner, 92.0, m, "trainer")
    assert sorted(f.manifests) == list(range(16, 23))
    f.on_manifest(ctx, owner, 93.0, manifest(TASK, 15, 0, 0), "trainer")  # behind what we hold: not taken
    assert 15 not in f.manifests
