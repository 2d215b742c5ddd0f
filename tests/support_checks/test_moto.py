"""The suite's moto server (``tests/support/moto.py``) keeps S3's guarantees.

Per key, one request at a time (a conditional create is decided atomically, a read never
sees a replaced object's closed buffer), and a client frozen mid-request holds nothing:
its body is read before the key's lock is taken. Before that, a writer SIGSTOPped in the
middle of a PUT blocked every later request for its key (and for the keys sharing its
lock), and a takeover sidecar timed out (tests/dispatcher/lease/test_fencing_process.py).
"""

from __future__ import annotations

import socket
import urllib.parse

import botocore.session
import pytest
from botocore.config import Config

from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket

pytestmark = pytest.mark.s3


def test_a_client_frozen_mid_put_blocks_no_other_request_for_the_key(s3_bucket: S3Bucket) -> None:
    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=s3_bucket.endpoint_url, region_name=REGION,
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        config=Config(read_timeout=10, retries={"total_max_attempts": 1}),
    )  # fmt: skip
    client.put_object(Bucket=s3_bucket.name, Key="k", Body=b"before")
    host, port = urllib.parse.urlsplit(s3_bucket.endpoint_url).netloc.split(":")
    frozen = socket.create_connection((host, int(port)), timeout=30)
    try:
        # Headers and 10 of 100 body bytes, then nothing: a writer stopped mid-upload.
        frozen.sendall(
            f"PUT /{s3_bucket.name}/k HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Length: 100\r\n\r\n".encode()
            + b"x" * 10
        )
        # A blocked key fails these after the 10 s read timeout: never a hang.
        got = client.get_object(Bucket=s3_bucket.name, Key="k")["Body"].read()
        assert got == b"before"
        client.put_object(Bucket=s3_bucket.name, Key="k", Body=b"after")
        assert client.get_object(Bucket=s3_bucket.name, Key="k")["Body"].read() == b"after"
    finally:
        frozen.close()
        client.close()
