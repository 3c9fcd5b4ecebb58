"""What the local stack keeps on disk: moto's recording, and `down --purge` removing only a dir `up` made."""

import json

import pytest

from s3_archive.local.moto_server import compact_recording
from s3_archive.local.processes import StackError
from s3_archive.local.stack import TAG_FILE, down


def test_compacting_keeps_the_requests_that_change_state_in_order_and_drops_a_cut_line(tmp_path):
    f = tmp_path / "moto" / "recording.jsonl"
    f.parent.mkdir()
    entries = [{"method": m, "url": f"http://127.0.0.1:1/b/{i}"} for i, m in
               enumerate(["PUT", "GET", "HEAD", "POST", "DELETE", "GET", "PUT"])]
    lines = [json.dumps(e) for e in entries]
    # two threads' entries on one line, then both newlines; a last entry cut short
    f.write_text("\n".join(lines[:5]) + "\n" + lines[5] + lines[6] + "\n\n" + '{"method": "PUT", "url": "http://1')
    assert compact_recording(f) == 4
    assert [json.loads(line)["url"][-1] for line in f.read_text().splitlines()] == ["0", "3", "4", "6"]
    assert f.stat().st_mode & 0o777 == 0o600
    assert compact_recording(tmp_path / "new" / "recording.jsonl") == 0  # none yet: an empty private file
    assert (tmp_path / "new" / "recording.jsonl").read_text() == ""


def test_purge_removes_the_local_dir_up_made_and_refuses_any_other(tmp_path):
    ours = tmp_path / "local"
    (ours / "kafka").mkdir(parents=True)
    (ours / TAG_FILE).touch()
    assert down(ours, purge=True) == [] and not ours.exists()
    down(ours, purge=True)  # nothing there: nothing to do

    other = tmp_path / "home"
    (other / "documents").mkdir(parents=True)
    with pytest.raises(StackError, match=rf"{other} was not made by `s3-archive local up` \(there is no "
                                         rf"{TAG_FILE} in it\); not removing it"):
        down(other, purge=True)
    assert (other / "documents").exists()
