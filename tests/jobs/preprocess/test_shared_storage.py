"""The storage checks every read and write task makes, without Ray (see tests/jobs/preprocess/test_multi_node.py
for a node that really does not see the driver's files)."""

from __future__ import annotations

import pickle

import pytest
from pyarrow import fs
from twinkle_agentic.jobs.preprocess.read import read_blocks
from twinkle_agentic.jobs.preprocess.shared_storage import (
    StorageNotSharedError,
    check_input,
    check_output,
    claimed_output,
    marker_path,
    remove_marker,
    stale_markers,
    write_marker,
)
from twinkle_agentic.jobs.preprocess.steps import ConfigError

from twinkle_agentic.io import InputError, Source, expand_inputs


def test_a_listed_input_must_still_be_there_with_its_size(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"messages": []}\n')
    (source,) = expand_inputs([str(path)])
    check_input(source)
    assert [b.num_rows for b in read_blocks([source], 10)] == [1]

    path.write_text('{"messages": []}\n{"messages": []}\n')  # rewritten after the driver listed it
    with pytest.raises(
        StorageNotSharedError, match=r"a\.jsonl: 34 bytes where the driver listed 17 .* on (host|node) "
    ):
        list(read_blocks([source], 10))

    path.unlink()  # or a node whose disk does not hold it
    with pytest.raises(StorageNotSharedError, match="no such file, though the driver listed it"):
        check_input(source)


def test_objects_on_other_file_systems_are_not_checked():
    """An object store's URI names the same object from every node: no request per object."""
    check_input(Source(0, "mock:///bucket/never-written.jsonl", "jsonl", 123))


def test_the_check_holds_in_drop_mode_too(tmp_path):
    """``--unreadable-files drop`` records a damaged file's rest; a missing file is not that."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"messages": []}\n')
    (source,) = expand_inputs([str(path)])
    path.unlink()
    with pytest.raises(StorageNotSharedError):
        list(read_blocks([source], 10, unreadable="drop"))


def test_a_claimed_folder_holds_the_marker_until_the_block_ends_even_on_failure(tmp_path):
    filesystem, root = fs.LocalFileSystem(), str(tmp_path)
    with (
        pytest.raises(RuntimeError, match="the run failed"),
        claimed_output(filesystem, root, "r2") as marker,
    ):
        check_output(filesystem, marker)
        raise RuntimeError("the run failed")
    assert stale_markers(filesystem, root) == []
    with (
        pytest.raises(ConfigError, match="cannot write into the output folder '/proc'"),
        claimed_output(filesystem, "/proc", "r3"),
    ):
        pass


def test_marker_lifecycle(tmp_path):
    filesystem, root = fs.LocalFileSystem(), str(tmp_path)
    with pytest.raises(StorageNotSharedError, match=r"lacks the marker \.twinkle-run-r1"):
        check_output(filesystem, marker_path(root, "r1"))
    write_marker(filesystem, root, "r1")
    check_output(filesystem, marker_path(root, "r1"))
    assert stale_markers(filesystem, root) == [marker_path(root, "r1")]
    remove_marker(filesystem, root, "r1")
    remove_marker(filesystem, root, "r1")  # gone already: nothing to do
    assert stale_markers(filesystem, root) == [] == stale_markers(filesystem, str(tmp_path / "nowhere"))


def test_the_error_is_an_input_error_and_survives_pickling():
    error = StorageNotSharedError("/data/x.jsonl", "node 0123 (10.0.0.2)", "no such file")
    assert isinstance(error, InputError)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.node == "node 0123 (10.0.0.2)"
    assert "on node 0123 (10.0.0.2). Every node of the cluster must see" in str(error)
