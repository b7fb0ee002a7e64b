"""NearDedupFilter as a distributed exchange on Ray Data: bands, candidates, verification, marking.

Four steps, each a plain callable on a ``pyarrow.Table`` (unit-tested without Ray), three sorts.
Frames (live, dropped, statistics) are always routed by their row id, so a row's frame and every
record about it meet in the same partition; shingle sets travel only with candidate pairs.

1. :class:`NearBands` (per batch): every live row's features (:meth:`NearDedupFilter.features`);
   one light *band record* per distinct band key (row id, length, set digest), routed by the key.
2. :func:`near_candidates` (per partition; every key's records are in it): each bucket, best-ranked
   first (:func:`bucket_candidates`), yields *copy* records (an exact copy and the best row of its
   set, routed to the copy) and *candidate* records (a row and a better representative, routed to
   the representative). Band records end here.
3. :func:`near_attach` (per partition): a candidate meets its representative's frame and takes its
   shingle set along, routed on to the row it may drop.
4. :func:`near_mark` (per partition): a live row meets its copy and candidate records; candidates are
   verified exactly (Jaccard on the shingle sets) and the best-ranked parent drops the row as
   ``near_duplicate``, with ``near_duplicate_of`` naming the parent's source and line.

Nothing is collected on the driver. The rule and the features are the one-process filter's
(:mod:`twinkle_agentic.preprocessor.near_dedup_select`), so both keep the same rows.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from twinkle_agentic.io.inputs import LINE_BITS, MAX_LINE
from twinkle_agentic.io.records import dumps, escape_surrogates
from twinkle_agentic.preprocessor.batch import gc_paused
from twinkle_agentic.preprocessor.near_dedup import DUPLICATE_OF_KEY, NEAR_DUPLICATE, NearDedupFilter
from twinkle_agentic.preprocessor.near_dedup_select import Rank, bucket_candidates, jaccard, rank
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
NPART = "_npart"  # routing for the next sort: a band key's low 32 bits, or a row id's spread
NKEY = "_nkey"  # band key (band records)
NMSGS, NCHARS = "_nmsgs", "_nchars"  # length of the row (band records) or of the parent (the others)
NDIGEST = "_ndigest"  # the row's set digest (band records)
NPARENT = "_nparent"  # the parent's row id (copy and candidate records); src/line name the child
NSHINGLES = "_nsh"  # the parent's shingle set (candidate records, after near_attach)
# Record kinds that live only inside the exchange.
BAND, COPY, CANDIDATE = 8, 9, 10


def near_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        list(frame_schema())
        + [
            pa.field(NPART, pa.int64()),
            pa.field(NKEY, pa.int64()),
            pa.field(NMSGS, pa.int32()),
            pa.field(NCHARS, pa.int64()),
            pa.field(NDIGEST, pa.int64()),
            pa.field(NPARENT, pa.int64()),
            pa.field(NSHINGLES, pa.large_list(pa.uint64())),
        ]
    )


def _records(columns: dict[str, Any], n: int) -> Any:
    """A table of ``n`` exchange records from the columns given (the rest null)."""
    import pyarrow as pa

    arrays = []
    for field in near_schema():
        value = columns.get(field.name)
        if value is None:
            arrays.append(pa.nulls(n, field.type))
        elif isinstance(value, (pa.Array, pa.ChunkedArray)):
            arrays.append(value)
        else:
            arrays.append(pa.array(value, field.type))
    return pa.Table.from_arrays(arrays, schema=near_schema())


def _frames(table: Any) -> Any:
    """Frames in the exchange layout, routed by their row id."""
    frames = table.select(list(frame_schema().names))
    return _records(
        {**{name: frames.column(name) for name in frames.column_names}, NPART: id_partitions(frames)},
        frames.num_rows,
    )


def _row_ids(table: Any) -> Any:
    import numpy as np

    src = table.column(SRC).to_numpy().astype(np.int64)
    return (src << LINE_BITS) | table.column(LINE).to_numpy().astype(np.int64)


def _edges(kind: int, children: Any, parents: Any, msgs: Any, chars: Any, route_by_parent: bool) -> Any:
    """Copy or candidate records: child ids (as src/line), parent ids and the parents' lengths."""
    import numpy as np

    n = children.size
    columns = {
        SRC: (children >> LINE_BITS).astype(np.int32),
        LINE: children & MAX_LINE,
        KIND: np.full(n, kind, np.int8),
        ROW: [""] * n,
        NMSGS: msgs,
        NCHARS: chars,
        NPARENT: parents,
    }
    table = _records(columns, n)
    target = parents if route_by_parent else children
    route = _records({SRC: (target >> LINE_BITS).astype(np.int32), LINE: target & MAX_LINE}, n)
    return table.set_column(table.schema.get_field_index(NPART), NPART, id_partitions(route))


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
        frames = _frames(table)
        live = table.filter(pc.equal(table.column(KIND), LIVE))
        srcs, lines, keys, msgs, chars, digests = [], [], [], [], [], []
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
            keys.append(features.bands)
            for column, value in (
                (srcs, src),
                (lines, line),
                (msgs, features.messages),
                (chars, features.chars),
            ):
                column.append(np.full(n, value, np.int64))
            digests.append(np.full(n, features.digest, np.int64))
        if not keys:
            return frames
        key = np.concatenate(keys)
        n = key.size
        bands = _records(
            {
                SRC: np.concatenate(srcs).astype(np.int32),
                LINE: np.concatenate(lines),
                KIND: np.full(n, BAND, np.int8),
                ROW: [""] * n,
                NPART: (key.view(np.uint64) & np.uint64(PART_SPACE - 1)).astype(np.int64),
                NKEY: key,
                NMSGS: np.concatenate(msgs).astype(np.int32),
                NCHARS: np.concatenate(chars),
                NDIGEST: np.concatenate(digests),
            },
            n,
        )
        return pa.concat_tables([frames, bands])


def near_candidates(table: Any) -> Any:
    """Step 2 on one partition (``batch_size=None``): each bucket of two or more rows, sorted
    best-ranked first, yields copy records (routed to the copy) and candidate records (routed to the
    representative, whose shingle set the next step attaches). Frames pass through."""
    with gc_paused(), errors_as_user_code("near_dedup_candidates"):
        return _candidates(table)


def _candidates(table: Any) -> Any:
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
    digests = bands.column(NDIGEST).to_numpy()
    ids = _row_ids(bands)
    order = np.lexsort((ids, -chars, -msgs.astype(np.int64), keys))
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    ends = np.r_[starts[1:], order.size]
    found: dict[int, list[tuple[int, int]]] = {COPY: [], CANDIDATE: []}
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if end - start < 2:
            continue
        members = order[start:end]
        copies, pairs = bucket_candidates(digests[members].tolist())
        found[COPY] += [(int(members[j]), int(members[i])) for j, i in copies]
        found[CANDIDATE] += [(int(members[j]), int(members[i])) for j, i in pairs]
    parts = [rest]
    for kind, edges in found.items():
        if edges:
            # one record per (child, parent): a pair that shares several bands is found in each
            unique = np.unique(np.array([(ids[c], ids[p], p) for c, p in edges], np.int64), axis=0)
            _, first = np.unique(unique[:, :2], axis=0, return_index=True)
            unique = unique[first]
            at = unique[:, 2]
            parts.append(_edges(kind, unique[:, 0], unique[:, 1], msgs[at], chars[at], kind == CANDIDATE))
    return pa.concat_tables(parts) if len(parts) > 1 else rest


class NearAttach:
    """Step 3 on one partition (``batch_size=None``): each candidate record takes its parent's
    shingle set, from the parent's frame here, and is routed on to its child."""

    def __init__(self, step: NearDedupFilter):
        self.step = step

    def __call__(self, table: Any) -> Any:
        with gc_paused(), errors_as_user_code("near_dedup_attach"):
            return self._process(table)

    def _process(self, table: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if table.num_rows == 0:
            return near_schema().empty_table()
        kinds = table.column(KIND)
        candidates = table.filter(pc.equal(kinds, CANDIDATE))
        if not candidates.num_rows:
            return table
        rest = table.filter(pc.not_equal(kinds, CANDIDATE))
        parents = candidates.column(NPARENT).to_numpy()
        sets = _shingles_of(self.step, rest, parents)
        shingles = pa.array([sets[p] for p in parents.tolist()], pa.large_list(pa.uint64()))
        children = _row_ids(candidates)
        routed = _edges(
            CANDIDATE,
            children,
            parents,
            candidates.column(NMSGS),
            candidates.column(NCHARS),
            route_by_parent=False,
        )
        routed = routed.set_column(routed.schema.get_field_index(NSHINGLES), NSHINGLES, shingles)
        return pa.concat_tables([rest, routed])


def _shingles_of(step: NearDedupFilter, frames: Any, wanted: Any) -> dict[int, Any]:
    """Row id -> shingle set of the live frames among ``frames`` whose id is in ``wanted``."""
    import numpy as np

    ids = _row_ids(frames)
    hit = np.flatnonzero((frames.column(KIND).to_numpy() == LIVE) & np.isin(ids, wanted))
    texts = frames.column(ROW).take(hit).to_pylist()
    cache: dict[str, int] = {}
    return {
        int(ids[i]): step.shingles(json.loads(text), cache)
        for i, text in zip(hit.tolist(), texts, strict=True)
    }


class NearMark:
    """Step 4 on one partition (``batch_size=None``): verifies the candidates of each live row here,
    drops the row for its best-ranked parent (a copy's parent, or a verified candidate) and returns
    frames in the job's layout with one statistics record."""

    def __init__(self, step: NearDedupFilter, name: str, position: int, uris: Sequence[str]):
        self.step, self.name, self.position, self.uris = step, name, position, list(uris)

    def __call__(self, table: Any) -> Any:
        with gc_paused(), errors_as_user_code("near_dedup_mark"):
            return self._process(table)

    def _process(self, table: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        if table.num_rows == 0:
            return frame_schema().empty_table()
        start = time.perf_counter()
        kinds = table.column(KIND).to_numpy()
        is_edge = (kinds == COPY) | (kinds == CANDIDATE)
        edges = table.filter(pa.array(is_edge))
        frames = table.filter(pa.array(~is_edge)).select(list(frame_schema().names))
        children = _row_ids(edges)
        candidate = edges.column(KIND).to_numpy() == CANDIDATE
        mine = _shingles_of(self.step, frames, children[candidate]) if candidate.any() else {}
        parent_sets = edges.column(NSHINGLES)
        parent_of: dict[int, tuple[Rank, int]] = {}
        for index, (child, p_msgs, p_chars, p_id) in enumerate(
            zip(
                children.tolist(),
                edges.column(NMSGS).to_pylist(),
                edges.column(NCHARS).to_pylist(),
                edges.column(NPARENT).to_pylist(),
                strict=True,
            )
        ):
            parent_rank = rank(p_msgs, p_chars, p_id)
            if child in parent_of and parent_of[child][0] <= parent_rank:
                continue
            if candidate[index]:
                theirs = parent_sets[index].values.to_numpy()
                if jaccard(theirs, mine[child]) < self.step.threshold:
                    continue
            parent_of[child] = (parent_rank, p_id)
        is_live = frames.column(KIND).to_numpy() == LIVE
        ids = _row_ids(frames)
        losers = is_live & np.isin(ids, np.fromiter(parent_of, np.int64, len(parent_of)))
        if losers.any():
            frames = self._drop(frames, losers, ids, parent_of)
        n_live, n_losers = int(is_live.sum()), int(losers.sum())
        stats = StepStats(
            self.name,
            n_live,
            n_live - n_losers,
            n_losers,
            time.perf_counter() - start,
            Counter({NEAR_DUPLICATE: n_losers}) if n_losers else Counter(),
        )
        tail = FrameBuilder()
        tail.add_stats([stats_record(self.position, stats)])
        return pa.concat_tables([frames, tail.build()])

    def _drop(self, frames: Any, losers: Any, ids: Any, parent_of: dict[int, tuple[Rank, int]]) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        texts = frames.column(ROW).to_pylist()
        for index in np.flatnonzero(losers).tolist():
            parent = parent_of[int(ids[index])][1]
            row = json.loads(texts[index])
            row[DUPLICATE_OF_KEY] = {"source": self.uris[parent >> LINE_BITS], "line": parent & MAX_LINE}
            texts[index] = _arrow_safe(dumps(row))
        mask = pa.array(losers)
        for column, value in (
            (KIND, pa.scalar(DROPPED, pa.int8())),
            (STEP, pa.scalar(self.name)),
            (REASON, pa.scalar(NEAR_DUPLICATE)),
        ):
            frames = frames.set_column(
                frames.schema.get_field_index(column), column, pc.if_else(mask, value, frames.column(column))
            )
        return frames.set_column(frames.schema.get_field_index(ROW), ROW, pa.array(texts, pa.large_string()))


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
    """The exchange on a Ray dataset of frames: bands, then three sorts on ``_npart`` cut at
    ``boundaries`` (the dedup exchange's partitions), each followed by a whole-partition step."""
    whole = {"batch_size": None, "batch_format": "pyarrow"}  # whole partitions: every key lies in one
    ds = ds.map_batches(NearBands(step), batch_size=batch_size, batch_format="pyarrow")
    ds = ds.sort(NPART, boundaries=boundaries).map_batches(near_candidates, **whole)
    ds = ds.sort(NPART, boundaries=boundaries).map_batches(NearAttach(step), **whole)
    return ds.sort(NPART, boundaries=boundaries).map_batches(NearMark(step, name, position, uris), **whole)
