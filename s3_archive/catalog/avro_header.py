"""The avro table's `avro.schema.literal`: the writer schema Spark's avro writer put in the header of an archived
object, read with fastavro from the first object of the most recently committed window. Read, not derived: the
literal is then exactly what Hive's AvroSerDe finds in the files, whatever Spark version wrote them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import BinaryIO

import fastavro
from botocore.exceptions import ClientError

from s3_archive.catalog.tables import table_columns
from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.s3 import S3Client, error_code, list_objects, read_manifest
from s3_archive.keys.objects import manifest_prefix
from s3_archive.model.errors import InvalidManifest
from s3_archive.model.logger import Logger


class WriterSchemaUnreadable(ValueError):
    """The newest window's first object has no readable avro header."""


@dataclass(frozen=True)
class WriterSchema:
    """The writer schema of an archived avro object and where it was read."""

    literal: str  # the header's `avro.schema`, verbatim
    object_key: str
    manifest_key: str

    def field_names(self) -> list[str]:
        return [f["name"] for f in json.loads(self.literal)["fields"]]


def header_schema(stream: BinaryIO) -> str:
    """The writer schema in an avro object container's header, verbatim; only the header is read."""
    try:
        return fastavro.reader(stream).metadata["avro.schema"]
    except KeyError:
        raise ValueError("its header has no avro.schema") from None


def newest_writer_schema(s3: S3Client, bucket: str, prefix: str, topic: str, log: Logger) -> WriterSchema | None:
    """The writer schema of the first object of the most recently committed window that has objects (one LIST of
    the manifests, a GET of manifests newest first until one has objects, and the start of one object); None while
    no window with records is archived. A manifest that does not parse is a logged warning naming it; the next
    newest is read instead."""
    manifests = sorted(list_objects(s3, bucket, manifest_prefix(prefix, topic)),
                       key=lambda o: (o["LastModified"], o["Key"]), reverse=True)
    for listed in manifests:
        try:
            m = read_manifest(s3, bucket, listed["Key"])
        except InvalidManifest as e:
            log.warning(f"catalog of {topic!r}: {e}; the avro.schema.literal is read from an older window")
            continue
        if not m or not m.objects:
            continue  # gone since the listing, or a window without records
        key = m.objects[0].key
        what = f"s3://{bucket}/{key} (first object of the window committed by {listed['Key']})"
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        except ClientError as e:
            raise WriterSchemaUnreadable(f"{what}: GetObject failed: {error_code(e)}") from None
        try:
            return WriterSchema(header_schema(body), key, listed["Key"])
        except ValueError as e:
            raise WriterSchemaUnreadable(f"{what} is not readable as avro: {e}") from None
        finally:
            body.close()  # only the header was read
    return None


def table_writer_schema(s3: S3Client, cfg: ArchiveConfig, topic: str, qualified: str, log: Logger,
                        ) -> WriterSchema | None:
    """The avro table `qualified`'s writer schema, read from the newest archived object; None (said in the run log)
    before a window with records is archived. WriterSchemaUnreadable names the table."""
    try:
        writer = newest_writer_schema(s3, cfg.bucket, cfg.prefix, topic, log)
    except WriterSchemaUnreadable as e:
        raise WriterSchemaUnreadable(f"table {qualified} takes its avro.schema.literal from an archived object: "
                                     f"{e}") from None
    if writer is None:
        return None
    log.info(f"avro.schema.literal of {qualified}: the header of s3://{cfg.bucket}/{writer.object_key}")
    expected = [c["Name"] for c in table_columns(cfg)]
    if writer.field_names() != expected:  # the config changed since the newest window was archived
        log.warning(f"s3://{cfg.bucket}/{writer.object_key} has the fields {writer.field_names()}, the config "
                    f"declares the columns {expected}; the literal follows once a window is archived with this "
                    "config")
    return writer
