"""Size and SHA-256 of an input file, as stored (compressed bytes as they are), read through the
same file systems the readers use (:mod:`.location`): local paths and URIs such as ``s3://``.

A run records them beside its outputs so that a result can be traced to exactly the bytes it read.
"""

from __future__ import annotations

import hashlib

from .location import locate

# Read in large pieces: hashing costs about a second per GB, the reads of an object store far more.
CHUNK_BYTES = 8 << 20
ALGORITHM = "sha256"


def file_digest(uri: str) -> dict:
    """``{"uri", "size_bytes", "sha256"}`` of the file at ``uri``, from one pass over its bytes."""
    where = locate(uri)
    digest = hashlib.new(ALGORITHM)
    size = 0
    with where.filesystem.open_input_stream(where.path, compression=None) as stream:
        while chunk := stream.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return {"uri": uri, "size_bytes": size, ALGORITHM: digest.hexdigest()}
