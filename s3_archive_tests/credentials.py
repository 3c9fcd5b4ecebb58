"""Credentials the tests give moto (which accepts any): a distinctive secret lets tests prove it never leaks."""

from s3_archive.local.stack import LOCAL_AWS

TEST_AWS = {**LOCAL_AWS, "AWS_ACCESS_KEY_ID": "test-access-key", "AWS_SECRET_ACCESS_KEY": "test-secret-never-logged"}
