"""NearDedupFilter as a distributed exchange on Ray Data: bands, verification, marking.

Three steps, each a plain callable on a ``pyarrow.Table`` (unit-tested without Ray), two shuffles:

1. :class:`NearBands` (per batch): every live row's features (:meth:`NearDedupFilter.features`);
   one *band record* per distinct band key, carrying the row's id, length and shingle set, routed
   by the key. Frames (live, dropped, statistics) are routed by their id.
2. :func:`near_candidates` (per partition): the band records of a key all lie in one partition; each
   bucket is verified exactly (:func:`bucket_parents`) and yields *edge records* (child id, parent id
   and length), routed like the child's frame. Band records end here.
3. :func:`near_mark` (per partition): a live row meets its edges; the best-ranked parent drops it as
   ``near_duplicate`` with ``near_duplicate_of`` naming the parent's source and line.

Nothing is collected on the driver. The rule and the features are the one-process filter's
(:mod:`twinkle_agentic.preprocessor.near_dedup_select`), so both keep the same rows.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from twinkle_agentic.io.inputs import LINE_BITS
from twinkle_agentic.io.records import dumps, escape_surrogates
from twinkle_agentic.preprocessor.batch import gc_paused
from twinkle_agentic.preprocessor.near_dedup import DUPLICATE_OF_KEY, NEAR_DUPLICATE, NearDedupFilter
from twinkle_agentic.preprocessor.near_dedup_select import bucket_parents, rank
from twinkle_agentic.preprocessor.stats import StepStats

from .frame import (
    DROPPED,
    KIND,
    LINE,
    LIVE,
    PART_SPACE,
    REASON,
    ROW,
    SRC,
    STEP,
    FrameBuilder,
    frame_schema,
    id_partitions,
)
from .stages import errors_as_user_code, stats_record

# Columns of the exchange (null where they do not apply).
NPART = "_npart"  # routing: a band key's low 32 bits, or a row id's spread (frame.id_partition)
NKEY = "_nkey"  # band key (band records)
NMSGS, NCHARS = "_nmsgs", "_nchars"  # length of the row (band records) or of the parent (edge records)
NPARENT = "_nparent"  # the parent's row id (edge records)
NSHINGLES = "_nsh"  # the row's shingle set (band records)
# Record kinds that live only inside the exchange.
BAND, EDGE = 8, 9


def near_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        list(frame_schema())
        + [
            pa.field(NPART, pa.int64()),
            pa.field(NKEY, pa.int64()),
            pa.field(NMSGS, pa.int32()),
            pa.field(NCHARS, pa.int64()),
            pa.field(NPARENT, pa.int64()),
            pa.field(NSHINGLES, pa.large_list(pa.uint64())),
        ]
    )


def _with_columns(frames: Any, part: Any) -> Any:
    """Frames in the exchange layout: routed by ``part``, no band or edge data."""
    import pyarrow as pa

    schema = near_schema()
    table = frames.select(list(frame_schema().names)).append_column(NPART, part)
    for name in (NKEY, NMSGS, NCHARS, NPARENT, NSHINGLES):
        table = table.append_column(schema.field(name), pa.nulls(table.num_rows, schema.field(name).type))
    return table


def _records(columns: dict[str, Any], n: int) -> Any:
    """A table of ``n`` band or edge records from the columns given (the rest null)."""
    import pyarrow as pa

    schema = near_schema()
    arrays = []
    for field in schema:
        value = columns.get(field.name)
        arrays.append(pa.nulls(n, field.type) if value is None else pa.array(value, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class NearBands:
    """Step 1, a ``map_batches`` function: frames routed by id, plus the band records of live rows."""

    def __init__(self, step: NearDedupFilter):
        self.step = step

    def __call__(self, table: Any) -> Any:
        with gc_paused(), errors_as_user_code("near_dedup_bands"):
            return self._process(table)

    def _process(self, table: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return near_schema().empty_table()
        frames = _with_columns(table, id_partitions(table))
        live = table.filter(pc.equal(table.column(KIND), LIVE))
        srcs, lines, keys, msgs, chars, sets = [], [], [], [], [], []
        cache: dict[str, int] = {}
        for src, line, text in zip(
            live.column(SRC).to_pylist(),
            live.column(LINE).to_pylist(),
            live.column(ROW).to_pylist(),
            strict=True,
        ):
            features = self.step.features(json.loads(text), cache)
            if features is None:
                continue
            n = features.bands.size
            srcs.append(np.full(n, src, np.int32))
            lines.append(np.full(n, line, np.int64))
            keys.append(features.bands)
            msgs.append(np.full(n, features.messages, np.int32))
            chars.append(np.full(n, features.chars, np.int64))
            sets.extend([features.shingles] * n)
        if not keys:
            return frames
        key = np.concatenate(keys)
        offsets = np.zeros(len(sets) + 1, np.int64)
        np.cumsum([s.size for s in sets], out=offsets[1:])
        shingles = pa.LargeListArray.from_arrays(
            pa.array(offsets), pa.array(np.concatenate(sets), pa.uint64())
        )
        n = key.size
        bands = _records(
            {
                SRC: np.concatenate(srcs),
                LINE: np.concatenate(lines),
                KIND: np.full(n, BAND, np.int8),
                ROW: [""] * n,
                NPART: (key.view(np.uint64) & np.uint64(PART_SPACE - 1)).astype(np.int64),
                NKEY: key,
                NMSGS: np.concatenate(msgs),
                NCHARS: np.concatenate(chars),
            },
            n,
        )
        bands = bands.set_column(
            bands.schema.get_field_index(NSHINGLES), near_schema().field(NSHINGLES), shingles
        )
        return pa.concat_tables([frames, bands])


def _row_ids(table: Any) -> Any:
    import numpy as np

    src = table.column(SRC).to_numpy().astype(np.int64)
    return (src << LINE_BITS) | table.column(LINE).to_numpy().astype(np.int64)


def near_candidates(table: Any, threshold: float) -> Any:
    """Step 2 on one partition (``batch_size=None``): every band key's records lie in it. Buckets of
    two or more rows are sorted best-ranked first and verified exactly; each member with a verified
    better match becomes an edge record routed to its own frame. Frames pass through."""
    with gc_paused(), errors_as_user_code("near_dedup_candidates"):
        return _candidates(table, threshold)


def _candidates(table: Any, threshold: float) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return near_schema().empty_table()
    kinds = table.column(KIND)
    rest = table.filter(pc.not_equal(kinds, BAND))
    bands = table.filter(pc.equal(kinds, BAND))
    if bands.num_rows < 2:
        return rest
    keys = bands.column(NKEY).to_numpy()
    msgs = bands.column(NMSGS).to_numpy()
    chars = bands.column(NCHARS).to_numpy()
    ids = _row_ids(bands)
    order = np.lexsort((ids, -chars, -msgs.astype(np.int64), keys))
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    ends = np.r_[starts[1:], order.size]
    shingles = bands.column(NSHINGLES).combine_chunks()
    offsets = shingles.offsets.to_numpy()
    values = shingles.values.to_numpy()
    best: dict[int, tuple[tuple[int, int, int], int]] = {}  # child index -> (parent rank, parent index)
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if end - start < 2:
            continue
        members = order[start:end]
        sets = [values[offsets[m] : offsets[m + 1]] for m in members.tolist()]
        for j, i in bucket_parents(sets, threshold):
            child, parent = int(members[j]), int(members[i])
            parent_rank = rank(int(msgs[parent]), int(chars[parent]), int(ids[parent]))
            child_id = int(ids[child])
            if child_id not in best or parent_rank < best[child_id][0]:
                best[child_id] = (parent_rank, parent)
    if not best:
        return rest
    children = np.fromiter(best, np.int64, len(best))
    parents = np.array([p for _, p in best.values()], np.int64)
    edges = _records(
        {
            SRC: (children >> LINE_BITS).astype(np.int32),
            LINE: children & ((1 << LINE_BITS) - 1),
            KIND: np.full(children.size, EDGE, np.int8),
            ROW: [""] * children.size,
            NMSGS: msgs[parents],
            NCHARS: chars[parents],
            NPARENT: ids[parents],
        },
        children.size,
    )
    edges = edges.set_column(edges.schema.get_field_index(NPART), NPART, id_partitions(edges))
    return pa.concat_tables([rest, edges])


def near_mark(table: Any, step: str, position: int, uris: Sequence[str]) -> Any:
    """Step 3 on one partition (``batch_size=None``): each live row with edges is dropped as
    ``near_duplicate`` for its best-ranked parent, named by ``near_duplicate_of``. Returns frames in
    the job's layout, with one statistics record."""
    with gc_paused(), errors_as_user_code("near_dedup_mark"):
        return _mark(table, step, position, uris)


def _mark(table: Any, step: str, position: int, uris: Sequence[str]) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return frame_schema().empty_table()
    start = time.perf_counter()
    kinds = table.column(KIND)
    edges = table.filter(pc.equal(kinds, EDGE))
    frames = table.filter(pc.not_equal(kinds, EDGE)).select(list(frame_schema().names))
    parent_of: dict[int, tuple[tuple[int, int, int], int]] = {}
    for child, p_msgs, p_chars, p_id in zip(
        _row_ids(edges).tolist(),
        edges.column(NMSGS).to_pylist(),
        edges.column(NCHARS).to_pylist(),
        edges.column(NPARENT).to_pylist(),
        strict=True,
    ):
        parent_rank = rank(p_msgs, p_chars, p_id)
        if child not in parent_of or parent_rank < parent_of[child][0]:
            parent_of[child] = (parent_rank, p_id)
    is_live = frames.column(KIND).to_numpy() == LIVE
    ids = _row_ids(frames)
    losers = is_live & np.isin(ids, np.fromiter(parent_of, np.int64, len(parent_of)))
    if losers.any():
        texts = frames.column(ROW).to_pylist()
        for index in np.flatnonzero(losers).tolist():
            parent = parent_of[int(ids[index])][1]
            row = json.loads(texts[index])
            row[DUPLICATE_OF_KEY] = {
                "source": uris[parent >> LINE_BITS],
                "line": parent & ((1 << LINE_BITS) - 1),
            }
            texts[index] = _arrow_safe(dumps(row))
        mask = pa.array(losers)
        frames = frames.set_column(
            frames.schema.get_field_index(KIND),
            KIND,
            pc.if_else(mask, pa.scalar(DROPPED, pa.int8()), frames.column(KIND)),
        )
        frames = frames.set_column(
            frames.schema.get_field_index(STEP), STEP, pc.if_else(mask, pa.scalar(step), frames.column(STEP))
        )
        frames = frames.set_column(
            frames.schema.get_field_index(REASON),
            REASON,
            pc.if_else(mask, pa.scalar(NEAR_DUPLICATE), frames.column(REASON)),
        )
        frames = frames.set_column(
            frames.schema.get_field_index(ROW), ROW, pa.array(texts, pa.large_string())
        )
    n_live, n_losers = int(is_live.sum()), int(losers.sum())
    stats = StepStats(
        step,
        n_live,
        n_live - n_losers,
        n_losers,
        time.perf_counter() - start,
        Counter({NEAR_DUPLICATE: n_losers}) if n_losers else Counter(),
    )
    tail = FrameBuilder()
    tail.add_stats([stats_record(position, stats)])
    return pa.concat_tables([frames, tail.build()])


def _arrow_safe(text: str) -> str:
    """``text`` with lone surrogates escaped (Arrow strings are UTF-8), as FrameBuilder does."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return escape_surrogates(text)
    return text


def near_exchange(
    ds: Any,
    step: NearDedupFilter,
    name: str,
    position: int,
    boundaries: list[int],
    uris: Sequence[str],
    batch_size: int,
) -> Any:
    """The exchange on a Ray dataset of frames: bands, then two sorts on ``_npart`` cut at
    ``boundaries`` (the dedup exchange's partitions), each followed by a whole-partition step."""
    ds = ds.map_batches(NearBands(step), batch_size=batch_size, batch_format="pyarrow")
    ds = ds.sort(NPART, boundaries=boundaries).map_batches(
        near_candidates, fn_kwargs={"threshold": step.threshold}, batch_size=None, batch_format="pyarrow"
    )
    return ds.sort(NPART, boundaries=boundaries).map_batches(
        near_mark,
        fn_kwargs={"step": name, "position": position, "uris": list(uris)},
        batch_size=None,
        batch_format="pyarrow",
    )
