"""The file header every dmpo file carries (dmpo.utils.formats): what a writer puts, which versions a
reader takes (older ones, and the schemes used before the header), and the one-line refusals."""

from __future__ import annotations

import pytest

from dmpo.utils.formats import AGENT, CHECKPOINT, STATE, FileFormat, read_header

EXAMPLE = FileFormat("dmpo.example", 3, {"old-example": ("version", 2)})


def test_the_header_is_the_name_and_the_newest_version():
    assert EXAMPLE.header() == {"format": "dmpo.example", "format_version": 3}
    assert CHECKPOINT.header() == {"format": "dmpo.checkpoint", "format_version": 2}


@pytest.mark.parametrize(("record", "version"), [
    ({"format": "dmpo.example", "format_version": 3}, 3),
    ({"format": "dmpo.example", "format_version": 1}, 1),  # an older version of the same header
    ({"format": "old-example", "version": 2}, 2),  # the scheme before the header
    ({"format": "old-example"}, 1),  # ... before it had versions
])
def test_every_older_version_reads_and_says_which_it_is(record, version):
    assert read_header(record, EXAMPLE, "f.bin") == version


def test_files_written_before_the_header_read():
    assert read_header({"env_steps": 3}, STATE, "state.json") == 1  # no header at all
    assert read_header({"format_version": 1, "env_steps": 3}, STATE, "state.json") == 1
    assert read_header({"format": 2, "seed": 0}, AGENT, "agent.json") == 2  # agent.json's integer "format"
    assert read_header({"format": 1, "seed": 0}, AGENT, "agent.json") == 1


@pytest.mark.parametrize(("record", "message"), [
    ({"format": "dmpo.example", "format_version": 4},
     "f.bin has format version 4, but this dmpo reads dmpo.example format version 3 at most; upgrade dmpo"),
    ({"format": "old-example", "version": 3},
     "f.bin has the pre-header format 'old-example' with version 3, which no dmpo wrote (the last was 2)"),
    ({"format": "dmpo.other", "format_version": 1},
     "f.bin is not a dmpo.example file (its format is 'dmpo.other')"),
    ({"format_version": 1}, "f.bin is not a dmpo.example file (its format is None)"),
    ([1, 2], "f.bin is not a dmpo.example file (its top level is not a record)"),
    ({"format": "dmpo.example", "format_version": "2"}, "f.bin: format_version must be a positive integer"),
    ({"format": "dmpo.example"}, "f.bin: format_version must be a positive integer, got None"),
    ({"format": "dmpo.example", "format_version": True}, "must be a positive integer"),
])
def test_newer_foreign_and_malformed_files_are_refused_in_one_line(record, message):
    with pytest.raises(KeyError) as refused:
        read_header(record, EXAMPLE, "f.bin", KeyError)  # the caller's error type
    assert message in str(refused.value.args[0]) and "\n" not in str(refused.value.args[0])
