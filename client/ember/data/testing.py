"""A local S3-compatible server for tests and examples: moto's standalone server as a
subprocess on loopback (the `dev` extra installs `moto[server]`).

    with LocalS3Server() as s3:          # sets AWS_ENDPOINT_URL & co. in os.environ
        s3.create_bucket("corpus")
        ember.init()                     # workers inherit the environment
        ds = ember.data.read_json("s3://corpus/raw/")
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalS3Server:
    """moto_server on 127.0.0.1; `env` holds the variables that point pyarrow's S3 at it."""

    def __init__(self, port: int = 0, set_environ: bool = True, start_timeout_s: float = 30.0) -> None:
        self.port = port or _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = dict(_ENV, AWS_ENDPOINT_URL=self.endpoint, AWS_ENDPOINT_URL_S3=self.endpoint)
        self.set_environ = set_environ
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._saved: dict[str, str | None] = {}

    def start(self) -> LocalS3Server:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1",
             "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=dict(os.environ, **self.env))
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with code {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"moto server did not answer on {self.endpoint}") from None
                time.sleep(0.1)
        if self.set_environ:
            for k, v in self.env.items():
                self._saved[k] = os.environ.get(k)
                os.environ[k] = v
        return self

    def filesystem(self) -> Any:
        """A pyarrow S3FileSystem pointed at this server."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                                 endpoint_override=self.endpoint, scheme="http",
                                 allow_bucket_creation=True)

    def create_bucket(self, name: str) -> None:
        """Creates a bucket."""
        self.filesystem().create_dir(name)

    def stop(self) -> None:
        """Stops the server and restores the environment."""
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved = {}
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
