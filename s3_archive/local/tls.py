"""TLS material for the local stack, made with Java's `keytool`: a self-signed CA and a server keystore it signed.

The CA's certificate is written as PEM (what clients are given: `ssl.ca.location`, a CA bundle); the keystores are
PKCS12. Store passwords reach keytool through the environment (`-storepass:env`), never its command line.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from s3_archive.local.processes import StackError

_PASS_VAR = "S3_ARCHIVE_KEYTOOL_PASS"
VALIDITY_DAYS = "3650"


@dataclass(frozen=True)
class ServerTls:
    """A CA (certificate as PEM) and a PKCS12 keystore holding a server key and its CA-signed chain."""

    ca_pem: Path
    keystore: Path
    password: str  # of the keystore and its key; the local stack's own, in a 0600 file


def _keytool() -> str:
    tool = shutil.which("keytool")
    if tool is None:
        raise StackError("keytool not found on PATH; install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)")
    return tool


def _run(password: str, *args: str) -> None:
    # A short-lived JVM: C1 only and the serial GC start it about twice as fast.
    done = subprocess.run([_keytool(), "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, _PASS_VAR: password})
    if done.returncode != 0:
        raise StackError(f"keytool {args[0]} failed: {(done.stderr or done.stdout).strip()[-500:]}")


def server_tls(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> ServerTls:
    """The CA and the server keystore in `directory`, made once (kept across restarts: clients trust the CA)."""
    tls = ServerTls(directory / "ca.pem", directory / "server.p12", "")
    secret = directory / "keystore.password"
    if tls.ca_pem.exists() and tls.keystore.exists() and secret.exists():
        return ServerTls(tls.ca_pem, tls.keystore, secret.read_text().strip())
    if directory.exists():
        shutil.rmtree(directory)  # a half-made set from an interrupted start
    directory.mkdir(parents=True, mode=0o700)
    password = secrets.token_hex(16)
    store = ("-storetype", "PKCS12", "-storepass:env", _PASS_VAR)
    # EC keys: generated in milliseconds where RSA takes seconds in a fresh JVM; OpenSSL, Java and Python take them.
    key = ("-keyalg", "EC", "-groupname", "secp256r1", "-validity", VALIDITY_DAYS)
    ca, server = str(directory / "ca.p12"), str(tls.keystore)
    csr, chain = directory / "server.csr", directory / "server-chain.pem"
    san = ",".join(f"ip:{h}" if h[0].isdigit() else f"dns:{h}" for h in hosts)
    _run(password, "-genkeypair", "-alias", "ca", *key, "-dname", "CN=s3-archive local CA", "-ext", "bc:c",
         "-keystore", ca, *store)
    _run(password, "-exportcert", "-rfc", "-alias", "ca", "-keystore", ca, "-file", str(tls.ca_pem), *store)
    _run(password, "-genkeypair", "-alias", "server", *key, "-dname", f"CN={hosts[-1]}", "-keystore", server, *store)
    _run(password, "-certreq", "-alias", "server", "-keystore", server, "-file", str(csr), *store)
    _run(password, "-gencert", "-rfc", "-alias", "ca", "-keystore", ca, "-infile", str(csr), "-outfile", str(chain),
         "-validity", VALIDITY_DAYS, "-ext", f"san={san}", "-ext", "ku:c=digitalSignature,keyAgreement",
         "-ext", "eku=serverAuth,clientAuth", *store)
    # The reply as a whole chain (server, then CA): keytool installs it without the CA in the keystore first.
    chain.write_text(chain.read_text() + tls.ca_pem.read_text())
    _run(password, "-importcert", "-noprompt", "-alias", "server", "-file", str(chain), "-keystore", server, *store)
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return ServerTls(tls.ca_pem, tls.keystore, password)
