"""HTTPS for the gateway: config rules, the self-signed cert (made once, reused, renewed), a real
gateway process serving HTTPS, and the supervisor's https:// ready line. No model is loaded."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import ipaddress
import json
import socket
import ssl
import stat
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from core.config import ConfigError, add_cli_arguments, config_from_cli, load_config
from gateway.tls import TlsError, ensure_self_signed, fingerprint, tls_files, wanted_names
from launcher import supervisor
from launcher.processes import free_port, spawn_module, stop
from launcher.supervisor import Supervisor

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable




def san(cert_path: Path) -> tuple[set[str], set[str]]:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(ext.get_values_for_type(x509.DNSName)), {str(i) for i in ext.get_values_for_type(x509.IPAddress)}


# ------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("host", "mode", "enabled"),
    [
        ("127.0.0.1", "auto", False),
        ("127.8.0.1", "auto", False),
        ("::1", "auto", False),
        ("localhost", "auto", False),
        ("0.0.0.0", "auto", True),
        ("192.168.1.20", "auto", True),
        ("omni.example", "auto", True),
        ("127.0.0.1", "on", True),
        ("0.0.0.0", "off", False),
    ],
)
def test_tls_mode_decides_by_host(host, mode, enabled):
    config = load_config(None, {"gateway.host": host, "gateway.tls.mode": mode})
    assert config.gateway.tls_enabled() is enabled


def test_tls_defaults_to_auto_without_files():
    tls = load_config(None).gateway.tls
    assert (tls.mode, tls.certfile, tls.keyfile) == ("auto", None, None)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gateway.tls.mode": "yes"}, "gateway.tls.mode: Input should be 'auto', 'on' or 'off'"),
        ({"gateway.tls.certfile": "CERT"}, "gateway.tls: certfile is set but keyfile is not"),
        ({"gateway.tls.keyfile": "KEY"}, "gateway.tls: keyfile is set but certfile is not"),
        ({"gateway.tls.certfile": "missing.pem", "gateway.tls.keyfile": "KEY"},
         "gateway.tls.certfile: no such file (got 'missing.pem')"),
        ({"gateway.tls.certfile": "CERT", "gateway.tls.keyfile": "missing.pem"},
         "gateway.tls.keyfile: no such file (got 'missing.pem')"),
    ],
)
def test_bad_tls_config_names_the_field(tmp_path, monkeypatch, overrides, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "CERT").write_text("x")
    (tmp_path / "KEY").write_text("x")
    with pytest.raises(ConfigError) as exc:
        load_config(None, overrides)
    assert message in str(exc.value)


def test_cli_tls_flag_beats_config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"gateway": {"tls": {"mode": "off"}}}))
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    assert config_from_cli(parser.parse_args(["--config", str(path), "--tls", "on"])).gateway.tls.mode == "on"
    assert config_from_cli(parser.parse_args(["--config", str(path)])).gateway.tls.mode == "off"


# ------------------------------------------------------------------ the self-signed certificate


def test_self_signed_covers_the_names_and_keeps_the_key_private(tmp_path):
    cert, key = ensure_self_signed(tmp_path / "tls", wanted_names("omni.example"))
    assert (cert, key) == (tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem")
    dns, ips = san(cert)
    assert {"omni.example", "localhost", socket.gethostname().lower()} <= dns
    assert {"127.0.0.1", "::1"} <= ips
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert sorted(p.name for p in cert.parent.iterdir()) == ["cert.pem", "key.pem"]  # no temp files left
    parsed = x509.load_pem_x509_certificate(cert.read_bytes())
    lifetime = parsed.not_valid_after_utc - parsed.not_valid_before_utc
    assert dt.timedelta(days=364) < lifetime < dt.timedelta(days=367)
    assert wanted_names("192.168.1.20")[1][-1] == ipaddress.ip_address("192.168.1.20")


def test_self_signed_is_reused_then_renewed_when_needed(tmp_path):
    folder, names = tmp_path / "tls", wanted_names("127.0.0.1")
    cert, key = ensure_self_signed(folder, names)
    first = cert.read_bytes(), key.read_bytes()
    assert (ensure_self_signed(folder, names)[0].read_bytes(), key.read_bytes()) == first  # reused

    # expired: same key, re-signed with an end date in the past
    private = serialization.load_pem_private_key(first[1], password=None)
    old = x509.load_pem_x509_certificate(first[0])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder().subject_name(old.subject).issuer_name(old.issuer)
        .public_key(private.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=400)).not_valid_after(now - dt.timedelta(days=35))
    )
    for ext in old.extensions:
        builder = builder.add_extension(ext.value, ext.critical)
    cert.write_bytes(builder.sign(private, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    ensure_self_signed(folder, names)
    renewed = x509.load_pem_x509_certificate(cert.read_bytes())
    assert renewed.not_valid_after_utc > now + dt.timedelta(days=300)
    assert key.read_bytes() != first[1]

    cert.write_text("not a certificate")  # unreadable
    ensure_self_signed(folder, names)
    assert x509.load_pem_x509_certificate(cert.read_bytes())

    before = cert.read_bytes()  # a new host name the old cert does not cover
    ensure_self_signed(folder, wanted_names("omni.example"))
    assert cert.read_bytes() != before and "omni.example" in san(cert)[0]


def test_tls_files_off_own_cert_and_fingerprint_line(tmp_path, capsys):
    assert tls_files(load_config(None, {"data_dir": str(tmp_path)})) is None
    assert not (tmp_path / "tls").exists()

    own_cert, own_key = ensure_self_signed(tmp_path / "own", wanted_names("omni.example"))
    config = load_config(None, {
        "data_dir": str(tmp_path), "gateway.host": "0.0.0.0",
        "gateway.tls.certfile": str(own_cert), "gateway.tls.keyfile": str(own_key),
    })
    assert tls_files(config) == (own_cert, own_key)
    assert not (tmp_path / "tls").exists()  # nothing generated when a cert is given
    expected = fingerprint(x509.load_pem_x509_certificate(own_cert.read_bytes()))
    out = capsys.readouterr().out
    assert f"HTTPS: certificate {own_cert} " in out and f"SHA-256 fingerprint {expected}" in out

    other_cert, _ = ensure_self_signed(tmp_path / "other", wanted_names("127.0.0.1"))
    mismatched = load_config(None, {
        "gateway.tls.mode": "on", "gateway.tls.certfile": str(other_cert), "gateway.tls.keyfile": str(own_key),
    })
    with pytest.raises(TlsError, match="cannot use certfile"):
        tls_files(mismatched)


def test_supervisor_refuses_a_bad_cert_pair_before_starting(tmp_path, capsys):
    (tmp_path / "cert.pem").write_text("not a cert")
    (tmp_path / "key.pem").write_text("not a key")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"gateway": {"tls": {
        "mode": "on", "certfile": str(tmp_path / "cert.pem"), "keyfile": str(tmp_path / "key.pem"),
    }}}))
    assert supervisor.main(["--config", str(path)]) == 2
    assert "gateway.tls: cannot use certfile" in capsys.readouterr().err


# ------------------------------------------------------------------ real processes


def tls_gateway_config(tmp_path: Path) -> tuple[Path, int]:
    port = free_port()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "data_dir": str(tmp_path / "data"),
        "gateway": {"host": "127.0.0.1", "port": port, "tls": {"mode": "on"}},
        "workers": {"count": 0},  # the gateway starts and answers /health without any worker
    }))
    return path, port


def test_real_gateway_serves_https_with_the_generated_cert(tmp_path):
    config, port = tls_gateway_config(tmp_path)
    log = tmp_path / "gateway.log"
    proc = spawn_module("gateway", "--config", str(config), log=log)
    cert = tmp_path / "data" / "tls" / "cert.pem"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            if cert.exists():
                try:  # verify=<the generated cert>, as an SSLContext (httpx 0.28 deprecates a path string)
                    response = httpx.get(f"https://127.0.0.1:{port}/health", trust_env=False,
                                         verify=ssl.create_default_context(cafile=str(cert)))
                    break
                except httpx.ConnectError:
                    pass
            time.sleep(0.1)
        assert response.status_code == 200 and response.json()["workers_total"] == 0
        with pytest.raises(httpx.TransportError):  # plain HTTP on the HTTPS port gets no answer
            httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=5)
        expected = fingerprint(x509.load_pem_x509_certificate(cert.read_bytes()))
        assert log.read_text().count(f"SHA-256 fingerprint {expected}") == 1
    finally:
        stop(proc)


async def test_supervisor_ready_line_is_https_when_tls_is_on(tmp_path):
    config_path, port = tls_gateway_config(tmp_path)
    config = load_config(config_path)
    out = io.StringIO()
    sup = Supervisor(config, {"gateway": [PY, "-m", "gateway", "--config", str(config_path)]},
                     poll_interval_s=0.1, out=out, err=io.StringIO())
    task = asyncio.create_task(sup.run())
    try:
        deadline = time.monotonic() + 30
        while "OmniDuplex is ready" not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            await asyncio.sleep(0.1)
    finally:
        await sup.stop()
        await task
    lines = out.getvalue().splitlines()
    assert f"OmniDuplex is ready: https://127.0.0.1:{port}/" in lines
    assert any(line.startswith("[gateway] HTTPS: self-signed certificate") for line in lines)
