"""Controls of the session's moto server that tests need beyond the AWS API."""

from __future__ import annotations

import json
import urllib.request


def moto_transition(s3_endpoint_url: str, body: dict | None) -> None:
    """Set (body) or unset (None) moto's state transition of RestoreObject (`s3::keyrestore`): how many reads
    until a requested restore of a GLACIER / DEEP_ARCHIVE object completes."""
    path = "set-transition" if body else "unset-transition"
    data = json.dumps(body or {"model_name": "s3::keyrestore"}).encode()
    req = urllib.request.Request(f"{s3_endpoint_url}/moto-api/state-manager/{path}", data=data, method="POST")
    urllib.request.urlopen(req, timeout=10).read()
