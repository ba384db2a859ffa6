"""benchcore.results.records.output_file: --out of both tools, checked before anything runs."""
import os

import pytest

from benchcore.errors import UserError
from benchcore.results.records import output_file


def test_no_file():
    assert output_file(None) is None and output_file("/dev/null") is None


def test_regular_file_and_missing_parent(tmp_path):
    (tmp_path / "old.jsonl").write_text("{}\n")
    assert output_file(tmp_path / "old.jsonl") == str(tmp_path / "old.jsonl")
    assert (tmp_path / "old.jsonl").read_text() == "{}\n"  # checked, never truncated
    new = tmp_path / "a" / "b" / "r.jsonl"
    assert output_file(new) == str(new) and new.parent.is_dir() and not new.exists()


@pytest.mark.parametrize("out,needle", [("/dev/full", "is not a regular file"), ("DIR", "is a directory")])
def test_not_a_regular_file_is_refused(tmp_path, out, needle):
    out = tmp_path if out == "DIR" else out
    with pytest.raises(UserError, match=needle) as exc:
        output_file(out)
    assert "\n" not in str(exc.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UserError, match="is not writable"):
        output_file(locked / "r.jsonl")
