"""Certificates for the TLS tests, made with the ``openssl`` command line (OpenSSL 3): a test CA and the server
and client certificates it signs, with any validity dates (``openssl ca -startdate/-enddate``: an expired
one, one that runs out tomorrow) and subjectAltNames."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

OPENSSL = shutil.which("openssl")

_CA_CONFIG = """\
[ca]
default_ca = test_ca
[test_ca]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
certificate = $dir/ca.pem
private_key = $dir/ca-key.pem
default_md = sha256
default_days = 365
policy = any_name
unique_subject = no
copy_extensions = none
[any_name]
commonName = supplied
"""


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None, "openssl is not installed"
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def asn1_time(unix: float) -> str:
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(unix))


class Authority:
    """A test CA in ``directory``: ``ca.pem`` (its certificate) and what it issues."""

    def __init__(self, directory: Path, name: str = "gpuwatch test CA") -> None:
        self.dir = directory
        (directory / "issued").mkdir(parents=True)
        (directory / "index.txt").write_text("")
        (directory / "serial").write_text("1000\n")
        (directory / "ca.cnf").write_text(_CA_CONFIG.format(dir=directory))
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", "ca-key.pem", "-out", "ca.pem", "-subj", f"/CN={name}", "-days", "3650",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 cwd=directory)
        self.cert = directory / "ca.pem"

    def issue(self, name: str, san: str = "DNS:localhost,IP:127.0.0.1", *, not_before: float | None = None,
              not_after: float | None = None, client: bool = False) -> tuple[Path, Path]:
        """(certificate, key) files named ``name`` for ``san``, valid from ``not_before`` (default an hour ago)
        to ``not_after`` (default a year on)."""
        now = time.time()
        key, csr, cert, ext = (self.dir / f"{name}{suffix}" for suffix in ("-key.pem", ".csr", ".pem", ".ext"))
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
                 "-out", str(csr), "-subj", f"/CN={name}", cwd=self.dir)
        usage = "clientAuth" if client else "serverAuth"
        ext.write_text(f"[ext]\nsubjectAltName = {san}\nextendedKeyUsage = {usage}\nbasicConstraints = CA:FALSE\n")
        _openssl("ca", "-batch", "-config", "ca.cnf", "-notext", "-in", str(csr), "-out", str(cert),
                 "-startdate", asn1_time(not_before if not_before is not None else now - 3600),
                 "-enddate", asn1_time(not_after if not_after is not None else now + 365 * 86400),
                 "-extfile", str(ext), "-extensions", "ext", cwd=self.dir)
        return cert, key
