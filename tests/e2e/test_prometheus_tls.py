"""End to end (issue 35): `gpuwatch run` with a web config (TLS and bcrypt basic auth) scraped by a real
Prometheus through config/prometheus.yml's commented https job, uncommented as shipped; a job without
credentials and one with a wrong password are refused (401), one with a client certificate another CA
signed is refused in the TLS handshake; the server certificate replaced on disk is
served to the next scrapes without a restart (the expiry series Prometheus stores changes). Loopback only,
bounded waits, every process stopped."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import bcrypt
import pytest

from tests.support.certs import Authority
from tests.support.processes import Processes, get_json, wait_up
from tests.support.published import GPU_A, GPU_B, two_gpu_tree
from tests.support.stack import PROMETHEUS_CONFIG, daemon_config, missing, query, start_gpuwatch, start_prometheus

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.timeout(180),
    pytest.mark.skipif(bool(missing("prometheus")), reason=missing("prometheus")),
]

PASSWORD = "scrape-over-tls"


def shipped_tls_job(target: str, ca: Path, password_file: Path) -> str:
    """config/prometheus.yml's commented https job, uncommented, with this test's target and files."""
    lines = PROMETHEUS_CONFIG.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  # - job_name: gpuwatch"))
    job = []
    for line in lines[start:]:
        if not line.startswith("  # "):
            break
        job.append("  " + line[4:])
    text = "\n".join(job) + "\n"
    text = text.replace('["gpu-node-01:9840", "gpu-node-02:9840"]', f'["{target}"]')
    text = text.replace("/etc/prometheus/gpuwatch-ca.crt", str(ca))
    text = text.replace("/etc/prometheus/gpuwatch-password", str(password_file))
    text = re.sub(r"scrape_interval: \S+", "scrape_interval: 1s", text)
    assert "scheme: https" in text and "basic_auth:" in text and str(ca) in text
    return text


def refused_job(name: str, target: str, ca: Path, auth: str) -> str:
    return (f"  - job_name: {name}\n    scrape_interval: 1s\n    scheme: https\n"
            f"    tls_config:\n      ca_file: {ca}\n{auth}    static_configs:\n      - targets: ['{target}']\n")


def targets(base: str) -> dict[str, dict[str, str]]:
    return {t["labels"]["job"]: t for t in get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]}


def test_prometheus_scrapes_over_tls_with_basic_auth_and_follows_a_new_certificate(tmp_path: Path) -> None:
    tree = two_gpu_tree(tmp_path / "sys")
    ca = Authority(tmp_path / "ca")
    now = time.time()
    cert, key = ca.issue("gpuwatch", not_after=now + 10 * 86400)
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    shutil.copy(cert, tls_dir / "gpuwatch.crt")
    shutil.copy(key, tls_dir / "gpuwatch.key")
    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    # Client certificates verified when given: the shipped job sends none; one signed by another CA is refused.
    web.write_text("tls_server_config:\n  cert_file: tls/gpuwatch.crt\n  key_file: tls/gpuwatch.key\n"
                   f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {ca.cert}\n"
                   f"basic_auth_users:\n  prometheus: {hashed}\n")
    stranger_cert, stranger_key = Authority(tmp_path / "other-ca", "another CA").issue("prometheus", client=True)
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    wrong_file = tmp_path / "wrong"
    wrong_file.write_text("not-the-password\n")
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'sysfs_root = "{tree.root}"\n'
                      + daemon_config(tmp_path / "run", f'web_config = "{web}"\n[fan]\nmode = "off"\n'))
    with Processes(tmp_path / "logs") as processes:
        _, address = start_gpuwatch(processes, "gpuwatch", config)
        scrape = (shipped_tls_job(address, ca.cert, password_file)
                  + refused_job("anonymous", address, ca.cert, "")
                  + refused_job("wrong-password", address, ca.cert,
                                f"    basic_auth:\n      username: prometheus\n      password_file: {wrong_file}\n")
                  + refused_job("untrusted-certificate", address, ca.cert,
                                f"      cert_file: {stranger_cert}\n      key_file: {stranger_key}\n"
                                f"    basic_auth:\n      username: prometheus\n      password_file: {password_file}\n"))
        child, base = start_prometheus(processes, tmp_path / "prom", "global:\n  scrape_interval: 1s\n"
                                       "scrape_configs:\n" + scrape)
        up = wait_up("the https job to be up", lambda: (t := targets(base)).get("gpuwatch", {}).get("health") == "up"
                     and t, child, timeout_s=60)
        assert up
        gpus = {series["metric"]["gpu"] for series in query(base, 'gpuwatch_gpu_up{job="gpuwatch"}')}
        assert gpus == {GPU_A, GPU_B}
        for job in ("anonymous", "wrong-password"):
            refused = wait_up(f"{job} to be refused", lambda job=job: (t := targets(base)[job])["health"] == "down"
                              and t["lastError"], child, timeout_s=60)
            assert "401" in refused, refused
        refused = wait_up("the untrusted certificate refused", lambda: (t := targets(base)["untrusted-certificate"])
                          ["health"] == "down" and t["lastError"], child, timeout_s=60)
        # Refused in the handshake, before HTTP: Prometheus sees the connection end (asyncio's TLS does not
        # flush the alert), never an answer.
        assert "401" not in refused and "status" not in refused, refused

        def expiry() -> float | None:
            rows = query(base, 'gpuwatch_web_certificate_expiry_timestamp_seconds{job="gpuwatch"}')
            return float(rows[0]["value"][1]) if rows else None

        first = wait_up("the certificate's expiry scraped", expiry, child, timeout_s=60)
        assert abs(first - (now + 10 * 86400)) < 5
        # The certificate renewed on disk (new files renamed into place): the next scrapes use it, no restart.
        new_cert, new_key = ca.issue("renewed", not_after=now + 90 * 86400)
        for source, name in ((new_key, "gpuwatch.key"), (new_cert, "gpuwatch.crt")):
            shutil.copy(source, tls_dir / f"{name}.new")
            (tls_dir / f"{name}.new").replace(tls_dir / name)
        wait_up("the renewed certificate's expiry scraped",
                lambda: (value := expiry()) is not None and abs(value - (now + 90 * 86400)) < 5, child, timeout_s=60)
        assert targets(base)["gpuwatch"]["health"] == "up"
