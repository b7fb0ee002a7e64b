"""The size and SHA-256 of every input file, for stats.json: a separate pass over each file's bytes
as stored, in Ray tasks beside the run (one per group of files of about equal size), so a large
corpus is hashed on the nodes that read it rather than on the driver; ``file_digest`` reads through
the job's file systems, so ``s3://`` and other URIs work as the reads do.
"""

from __future__ import annotations

from typing import Any

from twinkle_agentic.io import Source, file_digest

# Hashing is light next to parsing: each task takes a quarter CPU, like a read task.
DIGEST_TASK_CPUS = 0.25


def digest_group(uris: list[str]) -> list[dict]:
    return [file_digest(uri) for uri in uris]


def start_digests(sources: list[Source], tasks: int) -> list[Any]:
    """Submit the digest tasks now (at most ``tasks``); :func:`gather_digests` waits for them."""
    import ray

    from .read import split_sources

    remote = ray.remote(num_cpus=DIGEST_TASK_CPUS)(digest_group)
    return [remote.remote([s.uri for s in group]) for group in split_sources(sources, tasks)]


def gather_digests(refs: list[Any]) -> list[dict]:
    """The digests of every input, in input order."""
    import ray

    return [digest for group in ray.get(refs) for digest in group]
