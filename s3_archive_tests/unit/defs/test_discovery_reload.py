"""When the discovery sensor reloads the code location: only when the topic state gives an archive topics its loaded
definitions lack."""

from s3_archive.config.settings import parse_settings
from s3_archive.defs.archive.discovery import unloaded
from s3_archive.defs.webserver import WebserverResource

SETTINGS = parse_settings({"archives": [
    {"name": "fixed", "topics": ["orders.main"], "bucket": "bkt"},
    {"name": "pat", "topic_pattern": r"orders\..*", "bucket": "bkt"},
]})


def test_a_topic_the_state_knows_and_the_loaded_definitions_lack_needs_a_reload():
    loaded = {"fixed": ["orders.main"], "pat": ["orders.eu"]}
    assert unloaded(SETTINGS, {"pat": ["orders.eu"]}, loaded) == {}
    assert unloaded(SETTINGS, {"pat": ["orders.eu", "orders.us"]}, loaded) == {"pat": ["orders.us"]}
    # A topic listed explicitly elsewhere stays there: the pattern's archive never gets it, so no reload either.
    assert unloaded(SETTINGS, {"pat": ["orders.eu", "orders.main"]}, loaded) == {}


def test_without_a_webserver_url_nothing_is_reloaded():
    r = WebserverResource().reload("s3_archive")
    assert not r.ok and r.message == "$S3_ARCHIVE_DAGSTER_URL is not set"


def test_an_unreachable_webserver_is_reported_not_raised():
    r = WebserverResource(url="http://127.0.0.1:9").reload("s3_archive")
    assert not r.ok and "127.0.0.1:9" in r.message
