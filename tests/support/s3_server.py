"""An S3-compatible server on this machine for the object-storage tests: moto's ``moto_server``
(``moto[server]``, in the dev extra) as a child process on a free port, stopped by its PID.

The jobs reach it as they reach S3: credentials and the endpoint in the standard AWS environment
variables, which pyarrow reads (and an embedded Ray cluster's workers inherit from the driver).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from twinkle_agentic.net import free_port
from twinkle_agentic.testing.local_server import LocalServer


@dataclass
class S3Server:
    server: LocalServer
    env: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return self.server.url

    def filesystem(self):
        """A pyarrow S3 file system on this server that may create buckets."""
        from pyarrow import fs

        return fs.S3FileSystem(
            endpoint_override=self.endpoint, scheme="http", region="us-east-1", access_key="testing",
            secret_key="testing", allow_bucket_creation=True,
        )  # fmt: skip

    def bucket(self, name: str) -> str:
        """Create bucket ``name``; returns ``s3://name``."""
        self.filesystem().create_dir(name)
        return f"s3://{name}"

    def upload(self, local: Path, uri: str) -> None:
        """Copy a local file, or a folder's files, to ``uri`` (``s3://bucket/prefix``)."""
        filesystem, root = self.filesystem(), uri.removeprefix("s3://")
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        for path in files:
            key = root if local.is_file() else f"{root}/{path.relative_to(local).as_posix()}"
            with filesystem.open_output_stream(key, compression=None) as stream:  # the bytes as they are
                stream.write(path.read_bytes())

    def download(self, uri: str, local: Path) -> Path:
        """Copy every object under ``uri`` into folder ``local``; returns it."""
        from pyarrow import fs

        filesystem, root = self.filesystem(), uri.removeprefix("s3://").rstrip("/")
        for info in filesystem.get_file_info(fs.FileSelector(root, recursive=True)):
            if info.type == fs.FileType.File:
                target = local / info.path[len(root) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                with filesystem.open_input_stream(info.path, compression=None) as stream:
                    target.write_bytes(stream.read())
        return local


@contextmanager
def s3_server(log_dir: Path) -> Iterator[S3Server]:
    """A running moto S3 server; the environment a client needs is in ``.env``."""
    executable = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which(
        "moto_server"
    )
    if executable is None:
        raise RuntimeError("moto_server not found: install the dev extra (pip install -e '.[dev]')")
    port = free_port()
    server = LocalServer(
        [executable, "-H", "127.0.0.1", "-p", str(port)], port, health_path="/moto-api/",
        startup_timeout_s=60, log_path=log_dir / "moto_server.log",
    )  # fmt: skip
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": server.url,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with server:
        yield S3Server(server, env)
