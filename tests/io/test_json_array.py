"""Reading a file that holds one JSON array: elements as raw bytes, any piece size, broken structure (no Ray)."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinkle_agentic.io import (
    JSON,
    MALFORMED_JSON,
    UNREADABLE_FILE,
    UnreadableInputError,
    expand_inputs,
    iter_json_text,
    parse_read,
    read_source,
)
from twinkle_agentic.io.json_array import JSONLayoutError, array_records


def records(document: bytes, piece: int) -> list:
    """array_records over ``document`` cut into pieces of ``piece`` bytes; a broken structure ends the
    list with ("broken", message)."""
    out: list = []
    try:
        out.extend(array_records(iter([document[i : i + piece] for i in range(0, len(document), piece)])))
    except JSONLayoutError as exc:
        out.append(("broken", str(exc)))
    return out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(json_values, max_size=8),
    st.sampled_from([None, 0, 2]),
    st.booleans(),
    st.integers(min_value=1, max_value=17),
)
def test_every_element_comes_back_whole_whatever_the_pieces(values, indent, ascii_only, piece):
    document = json.dumps(values, indent=indent, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    got = records(document, piece)
    assert [number for number, _ in got] == list(range(1, len(values) + 1))
    assert [json.loads(raw) for _, raw in got] == values


CASES = [
    # an element that is not JSON, or JSON with something after it, is one malformed record; the read goes on
    (b'[{"a": 1}x, {bad}, 2, "s", NaN]', [b'{"a": 1}x', b"{bad}", b"2", b'"s"', b"NaN"]),
    (b'[{"a":1} {"b":2}]', [b'{"a":1} {"b":2}']),
    (b"[1,,2,]", [b"1", b"", b"2", b""]),
    # nested deeper than Python's decoder recurses: measured without recursion, a drop like in JSON Lines
    (b"[" + b"[" * 100_000 + b"]" * 100_000 + b', {"a": 1}]', [b"[" * 100_000 + b"]" * 100_000, b'{"a": 1}']),
    (b" \r\n[ ]\n", []),
    # strings hide brackets and commas; escapes, non-UTF-8 bytes and a surrogate half stay as they were
    (b'[{"b": "x,]}\\"\\\\"}, "\\ud83d\xc3\xa9\xff"]', [b'{"b": "x,]}\\"\\\\"}', b'"\\ud83d\xc3\xa9\xff"']),
    # broken structure: the elements before the break, then the break
    (b'[{"a":1}, {"b":', [b'{"a":1}', ("broken", "the file ends inside element 2")]),
    (b"[1, 2", [b"1", ("broken", "the file ends inside element 2")]),
    (b"[1,\n", [b"1", ("broken", "the file ends inside the array, before element 2")]),
    (b'[{"a":1}} , 2]', [("broken", "a '}' without its '{' in element 1")]),
    (b"[1] [2]", [b"1", ("broken", "something follows the array's closing ']'")]),
    (b'{"a": 1}', [("broken", "the file does not start with a JSON array")]),
]


@pytest.mark.parametrize("document, expected", CASES)
@pytest.mark.parametrize("piece", [1, 2, 3, 1 << 20])
def test_malformed_elements_and_broken_arrays(document, expected, piece):
    got = [item if item[0] == "broken" else item[1] for item in records(document, piece)]
    assert got == expected


def test_a_json_file_is_an_array_or_json_lines_by_its_first_byte(tmp_path):
    rows = [{"id": i, "messages": [{"role": "user", "content": f"hi {i}, [ok]"}]} for i in range(5)]
    array = tmp_path / "array.json"
    array.write_bytes(b"\xef\xbb\xbf\n " + json.dumps(rows, indent=2).encode())
    lines = tmp_path / "lines.json"
    lines.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    packed = tmp_path / "array.json.gz"
    packed.write_bytes(gzip.compress(json.dumps(rows).encode()))
    # a .jsonl file is always JSON Lines: a first line that is an array is one record (not a row)
    jsonl = tmp_path / "array.jsonl"
    jsonl.write_text(json.dumps(rows) + "\n")
    sources = expand_inputs([str(array), str(lines), str(packed), str(jsonl)])
    assert [s.format for s in sources] == [JSON, JSON, JSON, "jsonl"]
    for source in sources[:3]:
        got = [(number, parse_read(raw, error)[0]) for number, raw, error in read_source(source)]
        assert got == list(enumerate(rows, start=1))
    ((number, raw, _),) = read_source(sources[3])
    assert number == 1 and parse_read(raw, None)[1] == "invalid_row"


def test_a_broken_array_is_an_unreadable_file_after_its_last_whole_element(tmp_path):
    rows = [{"id": i, "messages": [{"role": "user", "content": "q" * 40}]} for i in range(50)]
    path = tmp_path / "cut.json"
    text = json.dumps(rows).encode()
    path.write_bytes(text[: len(text) * 2 // 3])
    (source,) = expand_inputs([str(path)])
    with pytest.raises(
        UnreadableInputError, match=r"cut\.json: unreadable from record \d+ on \(JSONLayoutError"
    ):
        list(read_source(source))
    *whole, (line, raw, error) = read_source(source, "drop")
    assert [parse_read(r, e)[0] for _, r, e in whole] == rows[: len(whole)]
    assert line == len(whole) + 1 and parse_read(raw, error)[1] == UNREADABLE_FILE
    assert "the file ends inside element" in error
    # a malformed element in the middle is a drop of its own, with its number
    path.write_bytes(b'[{"id": 1}, {"id": 2,}, {"id": 3}]')
    got = [(n, parse_read(r, e)[1]) for n, r, e in read_source(source)]
    assert got == [(1, None), (2, MALFORMED_JSON), (3, None)]
    assert [n for n, _ in iter_json_text(str(path), JSON)] == [1, 2, 3]


def test_a_json_file_holding_one_object_over_lines_reads_line_by_line(tmp_path):
    """Not an array, so JSON Lines: each line of a pretty-printed object (a dataset's manifest next to
    its data, say) is a malformed drop and the run goes on, as a bad line of a .jsonl file is."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"rows": 3, "kinds": {"clean": 2, "bad_line": 1}}, indent=2))
    (source,) = expand_inputs([str(path)])
    got = [(line, parse_read(raw, error)[1]) for line, raw, error in read_source(source)]
    assert got == [(n, MALFORMED_JSON) for n in range(1, 8)]
