"""Downloading an archived object for a restore (restore/sources.py `spool`)."""

from __future__ import annotations

import io

import pytest

from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.model.manifest import ManifestObject
from s3_archive.restore.sources import spool

pytestmark = pytest.mark.unit


class _S3:
    """Enough of an S3 client for `spool`: objects in memory, GETs counted."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects, self.gets = objects, []

    def get_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 - boto3's names
        self.gets.append(Key)
        return {"Body": io.BytesIO(self.objects[Key])}


def test_an_object_is_one_get_streamed_to_a_file_and_its_size_is_checked():
    data = bytes(range(256)) * 12_000  # 3 MB: more than one copy chunk
    s3 = _S3({"a": data})
    with spool(s3, "b", ManifestObject(key="a", size=len(data), etag="x")) as f:
        assert f.read() == data
    assert s3.gets == ["a"]
    with pytest.raises(ArchiveIntegrityError, match=f"is {len(data)} bytes, its manifest says 5"):
        spool(s3, "b", ManifestObject(key="a", size=5, etag="x"))


def test_an_object_over_the_one_get_size_goes_through_the_transfer_manager(monkeypatch):
    import s3_archive.restore.sources as sources

    class Ranged(_S3):
        def download_fileobj(self, bucket: str, key: str, f) -> None:
            self.gets.append(("ranged", key))
            f.write(self.objects[key])

    monkeypatch.setattr(sources, "ONE_GET_BYTES", 2)
    s3 = Ranged({"big": b"abc"})
    with spool(s3, "b", ManifestObject(key="big", size=3, etag="x")) as f:
        assert f.read() == b"abc"
    assert s3.gets == [("ranged", "big")]
