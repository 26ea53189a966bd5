"""A node's log file stays bounded however long the node runs: past its size limit it becomes
`<name>.1` and the node goes on writing a fresh file, tracebacks included (they follow stderr)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="reads the log's path from /proc (Linux)")

CHILD = """
import sys
from node.log import EventLog
log = EventLog(max_bytes=4000)
for i in range(2000):
    log("tick", i=i, pad="x" * 40)
print("after-rotation", file=sys.stderr, flush=True)
raise SystemExit("exiting with a message on stderr")
"""


def test_a_node_log_on_a_file_rotates_to_two_bounded_files(tmp_path):
    log_path = tmp_path / "node.log"
    with open(log_path, "ab") as err:
        code = subprocess.run([sys.executable, "-c", CHILD], stderr=err, timeout=60,
                              cwd=Path(__file__).resolve().parents[2]).returncode
    assert code == 1
    older = tmp_path / "node.log.1"
    assert older.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["node.log", "node.log.1"]
    # each file holds at most the limit plus the lines written between two checks
    assert older.stat().st_size < 4000 + 256 * 80 and log_path.stat().st_size < 4000 + 256 * 80
    last = log_path.read_text().splitlines()
    assert "i=1999" in last[-3] and last[-2] == "after-rotation" and "exiting with a message" in last[-1]
    assert "tick i=0 " not in older.read_text() + log_path.read_text()  # the oldest lines are gone


def test_a_log_that_is_not_a_file_is_left_alone(tmp_path):
    from io import StringIO

    from node.log import rotate_if_large

    assert rotate_if_large(StringIO("x" * 100), 10) is False
    with open(tmp_path / "gone", "w") as f:
        f.write("x" * 100)
        f.flush()
        (tmp_path / "gone").unlink()  # deleted under the writer: no path names it any more
        assert rotate_if_large(f, 10) is False
    assert list(tmp_path.iterdir()) == []
