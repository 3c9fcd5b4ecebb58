"""A Java truststore (PKCS12) for a PEM CA bundle, so the JVM's own TLS (s3a, through the AWS SDK) trusts a custom
S3 endpoint: the JDK's CAs plus the bundle's, made once with `keytool` and cached under `$S3_ARCHIVE_HOME`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from s3_archive.io import paths
from s3_archive.model.errors import InvalidConfig

# Guards public certificates only: not a secret (keytool wants one of at least 6 characters).
TRUSTSTORE_PASSWORD = "changeit"
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def _java_home() -> Path:
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    if java is None:
        raise InvalidConfig("java not found on PATH; install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)")
    return Path(java).resolve().parents[1]


def _keytool(*args: str) -> None:
    keytool = shutil.which("keytool") or str(_java_home() / "bin" / "keytool")
    done = subprocess.run([keytool, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", *args],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise InvalidConfig(f"keytool {args[0]} failed: {(done.stderr or done.stdout).strip()[-500:]}")


def java_truststore(bundle: str, where: str) -> Path:
    """The truststore for `bundle` (a PEM file of one or more CA certificates); `where` names the setting."""
    try:
        text = Path(bundle).read_text()
    except OSError as e:
        raise InvalidConfig(f"{where} is {bundle!r}, which cannot be read: {e.strerror}") from None
    certs = _PEM_CERT.findall(text)
    if not certs:
        raise InvalidConfig(f"{where} is {bundle!r}, which holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    store = paths.home() / "truststores" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.p12"
    if store.exists():
        return store
    store.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=store.parent) as tmp:
        draft = Path(tmp) / "truststore.p12"
        cacerts = _java_home() / "lib" / "security" / "cacerts"
        pw = ("-storepass", TRUSTSTORE_PASSWORD)
        if cacerts.exists():  # the JDK's CAs too: AWS's own endpoints (STS, KMS) must stay trusted
            _keytool("-importkeystore", "-noprompt", "-srckeystore", str(cacerts), "-srcstorepass", "changeit",
                     "-destkeystore", str(draft), "-deststoretype", "PKCS12", "-deststorepass", TRUSTSTORE_PASSWORD)
        for i, cert in enumerate(certs):
            pem = Path(tmp) / f"ca-{i}.pem"
            pem.write_text(cert + "\n")
            _keytool("-importcert", "-noprompt", "-alias", f"s3-archive-ca-{i}", "-file", str(pem),
                     "-keystore", str(draft), "-storetype", "PKCS12", *pw)
        os.replace(draft, store)  # whole or not at all: a concurrent session finds a complete one
    return store
