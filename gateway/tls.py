"""HTTPS for the gateway: browsers grant microphone and camera only to secure origins.

Loopback over HTTP counts as secure; any other host needs HTTPS. Without a certificate of
the operator's own, a self-signed one is made once in ``<data_dir>/tls/`` and reused, and its
SHA-256 fingerprint is printed so the browser's warning can be checked against it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from core.config import AppConfig, is_loopback
from core.files import atomic_write_bytes

VALID_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=1)  # a cert about to expire would fail mid-run: make a new one now
WILDCARD_HOSTS = {"", "0.0.0.0", "::"}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TlsError(Exception):
    """The configured certificate cannot be used; the message says which file and why."""


def tls_files(config: AppConfig, *, announce: bool = True) -> tuple[Path, Path] | None:
    """(certfile, keyfile) for uvicorn, or None when the gateway serves plain HTTP.

    Uses ``gateway.tls.certfile``/``keyfile`` when given, else the self-signed pair in
    ``<data_dir>/tls/`` (made or renewed as needed). ``announce`` prints which cert and its
    fingerprint.
    """
    gateway = config.gateway
    if not gateway.tls_enabled():
        if announce and not is_loopback(gateway.host):
            print(
                f"HTTPS is off (gateway.tls.mode) on {gateway.host!r}: browsers on other machines "
                "will not give this page the microphone or camera",
                flush=True,
            )
        return None
    if gateway.tls.certfile and gateway.tls.keyfile:
        cert_path, key_path = Path(gateway.tls.certfile), Path(gateway.tls.keyfile)
        _check_pair(cert_path, key_path)
        kind = "certificate"
    else:
        folder = Path(config.data_dir) / "tls"
        try:
            cert_path, key_path = ensure_self_signed(folder, wanted_names(gateway.host))
        except OSError as exc:
            raise TlsError(f"cannot write the self-signed certificate to {folder}: {exc}") from None
        kind = "self-signed certificate"
    if announce:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        until = cert.not_valid_after_utc.date().isoformat()
        print(
            f"HTTPS: {kind} {cert_path} (valid until {until}), SHA-256 fingerprint {fingerprint(cert)}",
            flush=True,
        )
    return cert_path, key_path


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 as browsers show it in the certificate viewer (AB:CD:...)."""
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def wanted_names(host: str) -> tuple[list[str], list[IPAddress]]:
    """DNS names and IPs a browser may use to reach a gateway bound to ``host``."""
    dns = ["localhost"]
    ips: list[IPAddress] = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    candidates = [socket.gethostname(), socket.getfqdn()]
    if host.strip("[]") not in WILDCARD_HOSTS:
        candidates.insert(0, host.strip("[]"))
    for name in candidates:
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            if name and name.lower() not in dns:
                dns.append(name.lower())
        else:
            if ip not in ips:
                ips.append(ip)
    return dns, ips


def ensure_self_signed(folder: Path, names: tuple[list[str], list[IPAddress]]) -> tuple[Path, Path]:
    """``folder``/cert.pem and key.pem, reused when readable, matching, unexpired and covering ``names``."""
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    if not _reusable(cert_path, key_path, names):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        key_pem, cert_pem = _make_self_signed(*names)
        atomic_write_bytes(key_path, key_pem, 0o600, durable=True)  # key first: a cert never pairs with a stale key
        atomic_write_bytes(cert_path, cert_pem, 0o644, durable=True)
    return cert_path, key_path


def _reusable(cert_path: Path, key_path: Path, names: tuple[list[str], list[IPAddress]]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm, x509.ExtensionNotFound):
        return False
    if cert.public_key() != key.public_key():
        return False
    if dt.datetime.now(dt.UTC) + RENEW_BEFORE >= cert.not_valid_after_utc:
        return False
    dns, ips = names
    have_dns = {n.lower() for n in san.get_values_for_type(x509.DNSName)}
    return set(dns) <= have_dns and set(ips) <= set(san.get_values_for_type(x509.IPAddress))


def _make_self_signed(dns: list[str], ips: list[IPAddress]) -> tuple[bytes, bytes]:
    """(key PEM, cert PEM): P-256 (instant to make, accepted by every browser), CA:FALSE leaf."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, dns[1] if len(dns) > 1 else dns[0]),  # first non-localhost
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "OmniDuplex self-signed"),
    ])
    now = dt.datetime.now(dt.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate a client clock slightly behind
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName([*(x509.DNSName(n) for n in dns), *(x509.IPAddress(i) for i in ips)]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _check_pair(cert_path: Path, key_path: Path) -> None:
    """Fail at start with the file names rather than deep inside uvicorn."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_path, key_path, password="")
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"gateway.tls: cannot use certfile {cert_path} with keyfile {key_path}: {exc}") from None
