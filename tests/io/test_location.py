"""Locations: paths and URIs to a pyarrow file system and back (options kept), files written whole."""

from __future__ import annotations

import os

import pytest

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.io import locate, read_bytes, remove, split_query, write_bytes
from twinkle_agentic.io.location import open_output


def test_local_paths_and_file_uris_are_the_local_file_system(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for spec in (str(tmp_path / "out"), f"file://{tmp_path}/out", "~/out"):
        where = locate(spec)
        assert where.local and where.path == str(tmp_path / "out") and where.uri == str(tmp_path / "out")
    assert locate("a?b").path.endswith("/a?b")  # a local name may hold '?'


def test_a_uri_keeps_its_scheme_authority_and_options_on_every_child():
    where = locate("s3://bucket/runs/out/?region=us-east-1&scheme=http")
    assert (
        not where.local and where.path == "bucket/runs/out" and where.query == "?region=us-east-1&scheme=http"
    )
    assert where.child("trajectories", "part-1.jsonl").uri == (
        "s3://bucket/runs/out/trajectories/part-1.jsonl?region=us-east-1&scheme=http"
    )
    assert split_query("s3://b/k?x=1") == ("s3://b/k", "?x=1") and split_query("file:///a?b") == (
        "file:///a?b",
        "",
    )


def test_a_uri_pyarrow_cannot_open_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"cannot open 'nope://x/y'"):
        locate("nope://x/y")


def test_write_bytes_replaces_a_local_file_whole(tmp_path):
    where = locate(str(tmp_path / "f.json"))
    write_bytes(where, b"one")
    write_bytes(where, b"two")
    assert read_bytes(where) == b"two" and os.listdir(tmp_path) == ["f.json"]
    remove(where)
    remove(where)  # already gone: fine
    assert not where.exists()


def test_open_output_leaves_the_old_file_when_the_writer_fails(tmp_path):
    where = locate(str(tmp_path / "t.parquet"))
    write_bytes(where, b"old")
    with pytest.raises(RuntimeError), open_output(where) as stream:
        stream.write(b"partial")
        raise RuntimeError("conversion failed")
    assert read_bytes(where) == b"old" and os.listdir(tmp_path) == ["t.parquet"]
    with open_output(where) as stream:
        stream.write(b"new")
    assert read_bytes(where) == b"new"
