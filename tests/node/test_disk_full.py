"""A data dir on a full or read-only filesystem: the node says so (status, log), takes no work that
writes, never serves anything half-written, and recovers when space returns. The data dir is a
small tmpfs (root: `mount -t tmpfs`); where mounting is not permitted these tests skip, saying so."""

import errno
import os
import subprocess
import sys
import time

import pytest

from gossip.hashing import blake2b256
from node import control
from node.blobstore import BlobStore
from node.diskwatch import DiskWatch
from node.driver import CoreDriver
from node.keystore import load_or_create_identity
from node.procs import start_peer, stop_processes
from node.status_text import render_status
from swarm import jobs
from swarm.io import JobFinished, RunJob, StoreBlob
from tests.node.helpers import wait_for

MB = 1 << 20


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MiB tmpfs at tmp_path/fs, unmounted after the test."""
    where = tmp_path / "fs"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _remount(where, mode):
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True, capture_output=True)


class _Nursery:
    def __init__(self):
        self.started = []

    def start_soon(self, fn, *args):
        self.started.append((fn, args))


def test_a_full_disk_refuses_writing_work_stores_nothing_half_and_recovers(tmpfs):
    blobs = BlobStore(tmpfs / "blobs")
    nursery, lines = _Nursery(), []
    driver = CoreDriver(None, None, nursery, lambda event, **f: lines.append(event), blobs=blobs)
    driver.disk = DiskWatch(tmpfs, 1 * MB)
    assert driver.disk.check() is None and driver.disk.ok
    filler = os.urandom(3 * MB)
    assert blobs.put(filler) == blake2b256(filler)
    big = os.urandom(2 * MB)
    driver._store_blob(StoreBlob(blake2b256(big), big))  # ENOSPC: no crash, nothing stored, not even half
    assert lines == ["disk-full"] and driver.disk.state == "full" and "No space left" in driver.disk.reason
    assert blobs.get(blake2b256(big)) is None and [p.name for p in (tmpfs / "blobs").iterdir()] == [filler_name(filler)]
    # while full: generate/train/unpack jobs are answered at once with a clear error; checks still run
    driver.job_runner = driver.check_runner = runner = _Runner()
    driver._run_job(RunJob(7, jobs.GENERATE, None))
    driver._run_job(RunJob(8, jobs.VERIFY, None))
    assert runner.jobs == [8] and driver.counters["job-refused-disk"] == 1
    fn, (done,) = nursery.started[-1]
    assert isinstance(done, JobFinished) and not done.ok and done.error.startswith("disk full:")
    assert not jobs.refused(done.error)  # a pause, not a refusal of the task: the role retries later
    # space returns: the next check finds it and a probe write succeeds
    blobs.drop([blake2b256(filler)])
    driver.disk_changed(driver.disk.check())
    assert driver.disk.ok and lines == ["disk-full", "disk-ok"]
    driver._store_blob(StoreBlob(blake2b256(big), big))
    assert blobs.get(blake2b256(big)) == big


def filler_name(data):
    return blake2b256(data).hex()


class _Runner:
    def __init__(self):
        self.jobs = []

    def submit(self, effect):
        self.jobs.append(effect.job_id)


def test_a_read_only_disk_is_told_apart_and_recovers(tmpfs):
    watch = DiskWatch(tmpfs, 1 * MB)
    assert watch.refused(OSError(errno.EROFS, "Read-only file system")) == "read-only"
    _remount(tmpfs, "ro")
    assert watch.check() is None and watch.state == "read-only"  # space is there, writes are not
    _remount(tmpfs, "rw")
    assert watch.check() == "ok"


@pytest.mark.slow
def test_a_node_on_a_full_tmpfs_says_so_and_recovers_when_space_returns(tmpfs, tmp_path):
    data = tmpfs / "node"
    log = tmp_path / "node.log"
    proc, _ = start_peer(["--bootstrap", "--port", "0", "--data-dir", str(data), "--min-free-mb", "1"], log)
    try:
        assert control.call(data, "status")["disk"]["state"] == "ok"
        (tmpfs / "filler").write_bytes(b"\0" * (int(3.5 * MB)))
        snap = wait_for(lambda: (s := control.call(data, "status"))["disk"]["state"] == "full" and s, 10, "disk full")
        assert "below the 1 MiB minimum" in snap["disk"]["reason"]
        assert "disk FULL" in render_status(snap) and "taking no work that writes" in render_status(snap)
        (tmpfs / "filler").unlink()
        wait_for(lambda: control.call(data, "status")["disk"]["state"] == "ok", 10, "disk ok again")
        assert proc.poll() is None
    finally:
        stop_processes([proc])
    text = log.read_text()
    assert "disk-full" in text and "disk-ok" in text and "Traceback" not in text


@pytest.mark.slow
def test_a_node_on_a_read_only_data_dir_says_so_and_exits_cleanly(tmpfs):
    data = tmpfs / "node"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    load_or_create_identity(data)  # a node that ran here before: its key is readable
    _remount(tmpfs, "ro")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "node.cli", "start", "--bootstrap", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0 and time.monotonic() - t0 < 60
    assert "cannot be written (Read-only file system)" in done.stderr and "Traceback" not in done.stderr
