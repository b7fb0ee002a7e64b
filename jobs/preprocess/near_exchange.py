"""NearDedupFilter as a distributed exchange on Ray Data: bands, candidates, verification, the greedy
keep rule in rounds, marking.

Each step is a plain callable on a ``pyarrow.Table`` (unit-tested without Ray), run on whole
partitions of a sort on ``_npart``. Frames (live, dropped, statistics) are always routed by their
row id, so a row's frame and every record about it meet in the same partition; shingle sets travel
only with candidate pairs.

1. :class:`NearBands` (per batch): every live row's features (:meth:`NearDedupFilter.features`);
   one light *band record* per distinct band key (row id, length, set digest), routed by the key.
2. :func:`near_candidates`: each bucket, best-ranked first (:func:`bucket_candidates`), yields
   *copy* records (an exact copy and the best row of its set, routed to the copy) and *candidate*
   records (a row and a better representative, routed to the representative). Band records end here.
3. :class:`NearAttach`: a candidate meets its representative's frame and takes its shingle set
   along, routed on to the row it may drop.
4. :class:`NearVerify`: candidates are verified exactly (Jaccard on the shingle sets). What is left
   is the graph of the rule (:mod:`twinkle_agentic.preprocessor.near_dedup_select`): *links* from a
   row to each verified better row, or from a copy to its best row, routed by that parent, and one
   *pending* record per row that has links, routed by the row. Frames are set aside here.
5. Rounds over the links only, until none is left (:func:`near_pass_state` at the parents, then
   :func:`near_decide` at the rows): a link learns its parent's state (a parent with no record is
   kept: no link leaves it); a row whose better rows are all decided is decided greedily, as in one
   process, and leaves a *decision* (the kept row it names) and a *state* record for its own links.
   Each round decides at least the best undecided row; most near-copy groups need one round.
6. :class:`NearMark`: frames meet the decisions of their rows; a dropped row becomes
   ``near_duplicate`` with ``near_duplicate_of`` naming the kept row's source and line.

Nothing is collected on the driver but, per round, the number of links left. The rule and the
features are the one-process filter's, so both keep the same rows and name the same kept rows.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from twinkle_agentic.io.inputs import LINE_BITS, MAX_LINE
from twinkle_agentic.io.records import dumps, escape_surrogates
from twinkle_agentic.preprocessor import near_dedup_select as rule
from twinkle_agentic.preprocessor.batch import gc_paused
from twinkle_agentic.preprocessor.near_dedup import DUPLICATE_OF_KEY, NEAR_DUPLICATE, NearDedupFilter
from twinkle_agentic.preprocessor.near_dedup_select import bucket_candidates, jaccard
from twinkle_agentic.preprocessor.stats import StepStats

from .frame import (
    DROPPED,
    KIND,
    LEDGER,
    LINE,
    LIVE,
    PART_SPACE,
    REASON,
    ROW,
    SRC,
    STATS,
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
NSTATE = "_nstate"  # the parent's state (links), or the row's own (state records)
NNAMED = "_nnamed"  # the kept row a dropped parent names (links), or the row names (state, decision)
# Record kinds that live only inside the exchange.
BAND, COPY, CANDIDATE = 8, 9, 10
LINK, COPY_LINK, PENDING, STATE, DECISION = 11, 12, 13, 14, 15
FRAME_KINDS = (LIVE, DROPPED, STATS, LEDGER)  # the job's own records, which pass the exchange


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
            pa.field(NSTATE, pa.int8()),
            pa.field(NNAMED, pa.int64()),
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


def _routed(table: Any, ids: Any) -> Any:
    """``table`` with each record routed to the partition of the row ``ids`` names (as frames are)."""
    import numpy as np

    where = _records({SRC: (ids >> LINE_BITS).astype(np.int32), LINE: ids & MAX_LINE}, ids.size)
    return table.set_column(table.schema.get_field_index(NPART), NPART, id_partitions(where))


def _id_records(kind: Any, ids: Any, route: Any, columns: dict[str, Any] | None = None) -> Any:
    """Exchange records of ``kind`` (one, or one per record) about the rows ``ids`` (as src/line),
    routed to the rows ``route``, with ``columns`` set (the rest null)."""
    import numpy as np

    n = ids.size
    table = _records(
        {
            SRC: (ids >> LINE_BITS).astype(np.int32),
            LINE: ids & MAX_LINE,
            KIND: np.full(n, kind, np.int8),
            ROW: [""] * n,
            **(columns or {}),
        },
        n,
    )
    return _routed(table, route)


def _edges(kind: int, children: Any, parents: Any, msgs: Any, chars: Any, route_by_parent: bool) -> Any:
    """Copy, candidate or link records: child ids, parent ids and the parents' lengths."""
    columns = {NMSGS: msgs, NCHARS: chars, NPARENT: parents}
    return _id_records(kind, children, parents if route_by_parent else children, columns)


def _of_kinds(table: Any, kinds: Sequence[int]) -> Any:
    """Boolean mask of the records of ``table`` whose kind is one of ``kinds``."""
    import numpy as np

    return np.isin(table.column(KIND).to_numpy(), np.array(kinds, np.int8))


class _NearPhase:
    """A ``map_batches`` callable of one phase of the exchange: holds the step, runs ``_process`` with
    the collector paused and errors reported as the named phase's."""

    phase = ""

    def __init__(self, step: NearDedupFilter):
        self.step = step

    def __call__(self, table: Any) -> Any:
        with gc_paused(), errors_as_user_code(self.phase):
            return self._process(table)

    def _process(self, table: Any) -> Any:
        raise NotImplementedError


class NearBands(_NearPhase):
    """Step 1, a ``map_batches`` function: frames routed by id, plus the band records of live rows."""

    phase = "near_dedup_bands"

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


class NearAttach(_NearPhase):
    """Step 3 on one partition (``batch_size=None``): each candidate record takes its parent's
    shingle set, from the parent's frame here, and is routed on to its child."""

    phase = "near_dedup_attach"

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


class NearVerify(_NearPhase):
    """Step 4 on one partition (``batch_size=None``): verifies the candidates of each live row here and
    returns the rule's graph for the rounds: a link per verified candidate and per copy record
    (routed by the parent), a pending record per row with links (routed by the row), and the frames,
    unchanged."""

    phase = "near_dedup_verify"

    def _process(self, table: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        if table.num_rows == 0:
            return near_schema().empty_table()
        is_edge = _of_kinds(table, (COPY, CANDIDATE))
        edges = table.filter(pa.array(is_edge))
        frames = table.filter(pa.array(~is_edge))
        if not edges.num_rows:
            return frames
        children = _row_ids(edges)
        candidate = edges.column(KIND).to_numpy() == CANDIDATE
        mine = _shingles_of(self.step, frames, children[candidate]) if candidate.any() else {}
        parent_sets = edges.column(NSHINGLES)
        verified = ~candidate
        for index in np.flatnonzero(candidate).tolist():
            theirs = parent_sets[index].values.to_numpy()
            verified[index] = jaccard(theirs, mine[int(children[index])]) >= self.step.threshold
        edges = edges.filter(pa.array(verified))
        children = children[verified]
        if not children.size:
            return frames
        parents = edges.column(NPARENT).to_numpy()
        columns = {
            NMSGS: edges.column(NMSGS),
            NCHARS: edges.column(NCHARS),
            NPARENT: parents,
            NSTATE: np.full(children.size, rule.UNKNOWN, np.int8),
        }
        links = _id_records(np.where(candidate[verified], LINK, COPY_LINK), children, parents, columns)
        rows = np.unique(children)
        return pa.concat_tables([frames, links, _id_records(PENDING, rows, rows)])


def near_pass_state(table: Any) -> Any:
    """Round, first half, on one partition: each link of unknown state whose parent is here learns it
    from the parent's state record; a parent that is neither decided nor pending has no link of its
    own, so it is kept. Links go on to their rows; state and pending records end here; decisions
    pass."""
    with gc_paused(), errors_as_user_code("near_dedup_rounds"):
        return _pass_state(table)


def _pass_state(table: Any) -> Any:
    import pyarrow as pa

    if table.num_rows == 0:
        return near_schema().empty_table()
    is_link = _of_kinds(table, (LINK, COPY_LINK))
    links = table.filter(pa.array(is_link))
    passing = table.filter(pa.array(_of_kinds(table, (DECISION,))))
    if not links.num_rows:
        return passing
    records = table.filter(pa.array(_of_kinds(table, (STATE,))))
    decided = dict(
        zip(
            _row_ids(records).tolist(),
            zip(records.column(NSTATE).to_pylist(), records.column(NNAMED).to_pylist(), strict=True),
            strict=True,
        )
    )
    pending = set(_row_ids(table.filter(pa.array(_of_kinds(table, (PENDING,))))).tolist())
    states = links.column(NSTATE).to_numpy().copy()
    named = links.column(NNAMED).to_pylist()
    for index, parent in enumerate(links.column(NPARENT).to_pylist()):
        if states[index] != rule.UNKNOWN:
            continue
        if parent in decided:
            states[index], named[index] = decided[parent]
        elif parent not in pending:
            states[index] = rule.KEPT
    links = links.set_column(links.schema.get_field_index(NSTATE), NSTATE, pa.array(states, pa.int8()))
    links = links.set_column(links.schema.get_field_index(NNAMED), NNAMED, pa.array(named, pa.int64()))
    return pa.concat_tables([passing, _routed(links, _row_ids(links))])


def near_decide(table: Any) -> Any:
    """Round, second half, on one partition: each row here whose better rows are all decided is
    decided by the greedy rule (:func:`decide`; a copy follows its best row): a decision record
    when it is dropped, and a state record for the rows that link to it. An undecided row's links
    go back to their parents with a pending record for it. Decisions pass."""
    with gc_paused(), errors_as_user_code("near_dedup_rounds"):
        return _decide(table)


def _decide(table: Any) -> Any:
    import numpy as np
    import pyarrow as pa

    if table.num_rows == 0:
        return near_schema().empty_table()
    links = table.filter(pa.array(_of_kinds(table, (LINK, COPY_LINK))))
    parts = [table.filter(pa.array(_of_kinds(table, (DECISION,))))]
    if not links.num_rows:
        return parts[0]
    children = _row_ids(links)
    parents = links.column(NPARENT).to_numpy()
    msgs = links.column(NMSGS).to_numpy().astype(np.int64)
    chars = links.column(NCHARS).to_numpy()
    order = np.lexsort((parents, -chars, -msgs, children))  # by row, its parents best-ranked first
    states = links.column(NSTATE).to_numpy()
    named = links.column(NNAMED).to_pylist()
    is_copy = links.column(KIND).to_numpy() == COPY_LINK
    sorted_children = children[order]
    starts = np.flatnonzero(np.r_[True, sorted_children[1:] != sorted_children[:-1]])
    ends = np.r_[starts[1:], order.size]
    dropped: list[tuple[int, int]] = []
    kept: list[int] = []
    waiting: list[int] = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        group = order[start:end].tolist()
        row = int(children[group[0]])
        first = group[0]
        if is_copy[first]:  # one link, to its best row: dropped for it, or for what it names
            state = states[first]
            if state == rule.UNKNOWN:
                outcome = (rule.UNKNOWN, None)
            else:
                outcome = (rule.DROPPED, int(parents[first]) if state == rule.KEPT else named[first])
        else:
            outcome = rule.decide([(int(states[i]), int(parents[i])) for i in group])
        if outcome[0] == rule.DROPPED:
            dropped.append((row, outcome[1]))
        elif outcome[0] == rule.KEPT:
            kept.append(row)
        else:
            waiting.extend(group)
    if dropped:
        rows, names = (np.array(column, np.int64) for column in zip(*dropped, strict=True))
        parts.append(_id_records(DECISION, rows, rows, {NNAMED: names}))
        parts.append(
            _id_records(STATE, rows, rows, {NSTATE: np.full(rows.size, rule.DROPPED, np.int8), NNAMED: names})
        )
    if kept:
        rows = np.array(kept, np.int64)
        parts.append(_id_records(STATE, rows, rows, {NSTATE: np.full(rows.size, rule.KEPT, np.int8)}))
    if waiting:
        rows = np.unique(children[waiting])
        parts += [_routed(links.take(pa.array(waiting)), parents[waiting]), _id_records(PENDING, rows, rows)]
    return pa.concat_tables(parts)


class NearMark:
    """Step 6 on one partition (``batch_size=None``): drops each live row here that has a decision,
    for the kept row it names, and returns frames in the job's layout with one statistics record."""

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
        decisions = table.filter(pa.array(_of_kinds(table, (DECISION,))))
        frames = table.filter(pa.array(_of_kinds(table, FRAME_KINDS))).select(list(frame_schema().names))
        parent_of = dict(zip(_row_ids(decisions).tolist(), decisions.column(NNAMED).to_pylist(), strict=True))
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

    def _drop(self, frames: Any, losers: Any, ids: Any, parent_of: dict[int, int]) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        texts = frames.column(ROW).to_pylist()
        for index in np.flatnonzero(losers).tolist():
            parent = parent_of[int(ids[index])]
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


class KindFilter:
    """A ``map_batches`` function keeping the records of the given kinds."""

    def __init__(self, kinds: Sequence[int]):
        self.kinds = tuple(kinds)

    def __call__(self, table: Any) -> Any:
        import pyarrow as pa

        return table.filter(pa.array(_of_kinds(table, self.kinds)))


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
    """The exchange on a Ray dataset of frames: bands, then sorts on ``_npart`` cut at ``boundaries``
    (the dedup exchange's partitions), each followed by a whole-partition step. The verified graph is
    materialized (the steps before it run now) so that the rounds move links only, as many rounds as
    links are left; the frames then meet the decisions in one last sort."""
    whole = {"batch_size": None, "batch_format": "pyarrow"}  # whole partitions: every key lies in one
    ds = ds.map_batches(NearBands(step), batch_size=batch_size, batch_format="pyarrow")
    ds = ds.sort(NPART, boundaries=boundaries).map_batches(near_candidates, **whole)
    ds = ds.sort(NPART, boundaries=boundaries).map_batches(NearAttach(step), **whole)
    verified = ds.sort(NPART, boundaries=boundaries).map_batches(NearVerify(step), **whole).materialize()
    frames = verified.map_batches(KindFilter(FRAME_KINDS), batch_format="pyarrow")
    graph = verified.map_batches(KindFilter((LINK, COPY_LINK, PENDING)), batch_format="pyarrow")
    while graph.map_batches(KindFilter((LINK, COPY_LINK)), batch_format="pyarrow").count():
        graph = graph.sort(NPART, boundaries=boundaries).map_batches(near_pass_state, **whole)
        graph = graph.sort(NPART, boundaries=boundaries).map_batches(near_decide, **whole).materialize()
    decisions = graph.map_batches(KindFilter((DECISION,)), batch_format="pyarrow")
    marked = frames.union(decisions).sort(NPART, boundaries=boundaries)
    return marked.map_batches(NearMark(step, name, position, uris), **whole)
