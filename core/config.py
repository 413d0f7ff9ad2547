"""Configuration: defaults < config.json < command line, validated once at start.

A bad value stops start-up with the field's path and the reason
(``workers.count: Input should be greater than or equal to 1 (got 0)``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: the only hosts where browsers allow the microphone over plain HTTP."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class TlsConfig(_Strict):
    """HTTPS for the gateway; without certfile/keyfile a self-signed pair is made in data_dir/tls."""

    mode: Literal["auto", "on", "off"] = Field("auto", description="auto: on unless gateway.host is loopback")
    certfile: str | None = None
    keyfile: str | None = None

    @field_validator("certfile", "keyfile")
    @classmethod
    def _file_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise PydanticCustomError("file_missing", "no such file")
        return value

    @model_validator(mode="after")
    def _both_or_neither(self) -> TlsConfig:
        if (self.certfile is None) != (self.keyfile is None):
            given, missing = ("certfile", "keyfile") if self.keyfile is None else ("keyfile", "certfile")
            raise PydanticCustomError(
                "tls_pair", "{given} is set but {missing} is not: give both or neither",
                {"given": given, "missing": missing},
            )
        return self


_HOST_ENTRY = re.compile(r"^(\*|(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?\.?|\[[0-9a-f:.]+\])(:[0-9]{1,5})?$")


def host_entries(hosts: list[str]) -> list[str]:
    """Host allow-list entries, lower-cased; a bad one names itself and what is allowed."""
    out = []
    for raw in hosts:
        host = raw.strip().lower()
        if not _HOST_ENTRY.match(host):
            raise PydanticCustomError(
                "host_name", "'{host}' is not a host name: give name or name:port (no scheme, path or "
                "spaces; IPv6 as [::1]), *.example.com for its subdomains, or * for any", {"host": raw})
        out.append(host)
    return out


class GatewayConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8006, ge=1, le=65535)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host names (name, name:port, *.domain, '*' = any) the gateway answers "
        "besides localhost, 127.0.0.1, ::1 and gateway.host; anything else gets 400 (stops DNS rebinding)")

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: list[str]) -> list[str]:
        return host_entries(hosts)

    def tls_enabled(self) -> bool:
        """Whether the gateway serves HTTPS (``tls.mode``; auto = on for any non-loopback host)."""
        if self.tls.mode == "auto":
            return not is_loopback(self.host)
        return self.tls.mode == "on"


class WorkersConfig(_Strict):
    count: int = Field(1, ge=0, le=64)
    host: str = "127.0.0.1"
    base_port: int = Field(22400, ge=1, le=65535)
    slots: int = Field(1, ge=1, le=64, description="sessions per worker; 1 = exclusive")
    per_gpu: int = Field(1, ge=1, le=16, description="workers per visible GPU for a backend that runs its model "
                         "on CUDA (each loads its own copy: sessions per card at real time, bench omni --workers)")
    urls: list[str] = Field(default_factory=list, description="extra workers on other hosts")
    secret: str | None = Field(None, min_length=16, description="the secret every call from the gateway (or the "
                               "launcher) to a worker carries; null: generated once into <data_dir>/worker_secret "
                               "(the environment's OMNIDUPLEX_WORKER_SECRET wins over both). Set the same value "
                               "on every host when workers run elsewhere")
    connect_timeout_s: float = Field(5.0, gt=0, description="a worker must accept a session's WebSocket, then "
                                     "send session.created, each within this, else worker_unavailable")
    ping_interval_s: float = Field(20.0, gt=0, description="WebSocket ping between gateway and worker, both ways; "
                                   "no pong within as long again ends the session: worker_failed on the gateway "
                                   "(a hung worker), the slot freed on the worker (a gateway it cannot reach)")


class BackendConfig(_Strict):
    """Which model backend workers run; ``options`` are validated by the backend (docs/backends.md)."""

    name: Literal["cascade", "qwen_omni", "minicpm_o", "remote_omni"] = "cascade"
    options: dict[str, Any] = Field(default_factory=dict)


class QueueConfig(_Strict):
    capacity: int = Field(100, ge=0, le=100_000)
    max_wait_s: float = Field(600.0, gt=0)
    default_session_s: float = Field(120.0, gt=0, description="ETA guess before any session ended")


class HealthConfig(_Strict):
    interval_s: float = Field(2.0, gt=0)
    timeout_s: float = Field(2.0, gt=0)
    jitter: float = Field(0.2, ge=0, le=1)
    healthy_after: int = Field(2, ge=1)
    unhealthy_after: int = Field(3, ge=1)


class ClusterConfig(_Strict):
    """Several gateways sharing one FIFO queue, the slot leases and the worker registry in Redis
    (docs/operations.md, "Several gateways (Redis)"). ``redis_url`` null: the in-process pool."""

    redis_url: str | None = Field(None, description="redis://host:port/db, rediss://… or unix://…; "
                                  "'local' = the private redis-server the launcher starts on local_port")
    local_port: int = Field(6390, ge=1, le=65535, description="port of the private redis-server ('local')")
    prefix: str = Field("omniduplex", pattern=r"^[A-Za-z0-9_.:-]{1,64}$",
                        description="key prefix; gateways with the same Redis and prefix share one queue")
    lease_ttl_s: float = Field(10.0, ge=1, le=300, description="a gateway that stops renewing its heartbeat "
                               "for this long loses its slots and queue entries")
    gateway_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,40}$",
                                   description="this gateway's name in the shared state (default: host-port)")

    @field_validator("redis_url")
    @classmethod
    def _url_scheme(cls, value: str | None) -> str | None:
        if value is None or value == "local":
            return value
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix:// (or be 'local')")
        return value

    def resolved_url(self) -> str | None:
        return f"redis://127.0.0.1:{self.local_port}/0" if self.redis_url == "local" else self.redis_url


class LimitsConfig(_Strict):
    """Enforced by the server; clients cannot choose them (docs/protocol.md, "Errors and close codes")."""

    max_session_s: float = Field(1800.0, gt=0)
    idle_timeout_s: float = Field(300.0, gt=0)
    pause_timeout_s: float = Field(120.0, gt=0)
    resume_grace_s: float = Field(30.0, ge=0, le=600, description="how long a session whose connection dropped "
                                  "is kept for its resume token (its worker slot stays taken); 0: never kept")
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_image_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="one image or camera frame, decoded")
    max_image_pixels: int = Field(4096 * 4096, ge=64, description="width x height of one image")
    max_frame_rate: float = Field(2.0, gt=0, description="camera frames per second (burst of 2 allowed)")
    queued_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024, description="what one session's client may have "
                              "sent that its worker has not taken yet (while queued, or on a call's data channel); "
                              "past it the session closes with 1008")
    read_ahead_bytes: int = Field(32 * 1024 * 1024, ge=64 * 1024, description="what a worker reads of its client's "
                                  "messages ahead of the session, so a client that leaves is known at once (what it "
                                  "sent and the session has not handled is dropped); past it the client is held back "
                                  "by its socket. At least max_message_bytes")

    @model_validator(mode="after")
    def _queue_holds_a_message(self) -> LimitsConfig:
        for name in ("queued_bytes", "read_ahead_bytes"):
            if getattr(self, name) < self.max_message_bytes:
                raise ValueError(f"{name} ({getattr(self, name)}) must hold at least one message of "
                                 f"max_message_bytes ({self.max_message_bytes})")
        return self

    @property
    def transport_max_bytes(self) -> int:
        """WebSocket frame cap: above max_message_bytes so the session can answer a clear error first."""
        return 2 * self.max_message_bytes + 65536


class McpConfig(_Strict):
    """MCP servers a realtime session may name in ``session.tools`` (``type: "mcp"``): the worker
    connects to them, so an operator opts in host by host (docs/operations.md, "MCP tools")."""

    allowed_hosts: list[str] = Field(
        default_factory=list, description="hosts (name, name:port, *.domain, '*' = any) a session's MCP "
        "server_url may name; empty = MCP tools refused. A name must resolve to public addresses: a loopback, "
        "private or link-local one is used only when listed itself (127.0.0.1, 10.0.0.5:8080, [::1])")
    list_timeout_s: float = Field(5.0, gt=0, le=60, description="connecting and listing one server's tools")
    call_timeout_s: float = Field(10.0, gt=0, le=300, description="one tool call, from request to result")
    max_result_chars: int = Field(16_000, ge=100, le=1_000_000, description="a result longer than this is cut "
                                  "(the model reads it; marked as cut)")
    max_tools_per_server: int = Field(64, ge=1, le=512)
    max_servers: int = Field(4, ge=1, le=32, description="MCP servers in one session")

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: list[str]) -> list[str]:
        return host_entries(hosts)

    @property
    def max_answer_bytes(self) -> int:
        """The most read of one answer from an MCP server (a JSON body, or one request's SSE stream):
        ``max_result_chars`` at 4 bytes a character twice over (a result may come as text and as
        structured content), plus 1 MiB for the protocol and a tool listing. Past it the answer is
        cut as it streams and the call fails: a server cannot make the worker hold more."""
        return 8 * self.max_result_chars + 1024 * 1024

    def allows(self, host: str, port: int) -> bool:
        """Whether ``host``:``port`` (lower case, IPv6 without brackets) is an allowed MCP server."""
        for entry in self.allowed_hosts:
            if entry == "*":
                return True
            name, entry_port = _name_and_port(entry)
            if entry_port and int(entry_port) != port:
                continue
            if name == host or (name.startswith("*.") and host.endswith(name[1:])):
                return True
        return False

    def lists_address(self, address: str, port: int) -> bool:
        """Whether an entry names ``address`` itself (an IP literal, with or without a port): the only
        way a loopback, private or link-local MCP server is allowed; a name, *.domain or '*' never is."""
        wanted = _ip(address)
        for entry in self.allowed_hosts:
            name, entry_port = _name_and_port(entry)
            if wanted is not None and _ip(name) == wanted and (not entry_port or int(entry_port) == port):
                return True
        return False


def _name_and_port(entry: str) -> tuple[str, str]:
    """An allow-list entry's host (IPv6 without brackets) and port ('' when none)."""
    if entry.startswith("["):  # [v6] or [v6]:port
        name, _, rest = entry[1:].partition("]")
        return name, rest.removeprefix(":")
    name, _, port = entry.partition(":")
    return name, port


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an address (a v6 zone dropped, IPv4-mapped v6 as IPv4); None for a name."""
    try:
        ip = ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
    return ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip


class ToolsConfig(_Strict):
    """Tools the server itself runs for a realtime session."""

    mcp: McpConfig = Field(default_factory=McpConfig)


class TelemetryConfig(_Strict):
    """OpenTelemetry traces (docs/operations.md, "Tracing (OpenTelemetry)"): off unless an OTLP/HTTP
    endpoint is set here or in ``OTEL_EXPORTER_OTLP_ENDPOINT`` (this key wins when both are)."""

    otlp_endpoint: str | None = Field(None, description="OTLP/HTTP base URL of a collector, e.g. "
                                      "http://collector:4318 (spans are POSTed to <url>/v1/traces); null = off")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="share of new traces kept (a worker follows the "
                                "gateway's decision)")
    include_content: bool = Field(False, description="put text on spans (tool arguments and results); "
                                  "never audio")
    service_name: str = Field("omniduplex", min_length=1, max_length=100, description="service.name on every span")

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", value):
            raise ValueError("must be an http:// or https:// base URL such as http://collector:4318 "
                             "(without /v1/traces, a query or a fragment)")
        if value.rstrip("/").endswith("/v1/traces"):
            raise ValueError("give the base URL: /v1/traces is added to it")
        return value


class RateLimit(_Strict):
    """What one client address or API key may use of the workers; 0 = no limit. Realtime and Live
    sessions and REST model requests (chat completions, speech, transcriptions) count alike."""

    sessions_per_minute: int = Field(0, ge=0, description="sessions and REST model requests started per minute")
    concurrent: int = Field(0, ge=0, description="open sessions (queued ones included) and REST requests in flight")


class AuthConfig(_Strict):
    """Who may use ``/v1/*``: API keys (empty = open) and the Origins allowed on WebSockets."""

    api_keys: list[str] = Field(default_factory=list, description="accepted keys; empty = no key needed")
    allowed_origins: list[str] = Field(
        default_factory=list, description="the only browser Origins besides our own that may open sessions, mint "
        "ephemeral keys, get CORS and send state-changing requests (POST, PUT, PATCH, DELETE) ('*' = any); keys "
        "or not: an open service allows no other site either")
    per_ip: RateLimit = Field(default_factory=lambda: RateLimit(sessions_per_minute=600, concurrent=32))
    per_key: RateLimit = Field(default_factory=RateLimit)
    trust_forwarded_for: bool = Field(False, description="take the client IP from X-Forwarded-For (behind a proxy)")
    forwarded_hops: int = Field(1, ge=1, le=16, description="with trust_forwarded_for: the trusted proxies "
                                "in front, each appending to X-Forwarded-For; the client is this many from the "
                                "right")

    @field_validator("api_keys")
    @classmethod
    def _keys_long_enough(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if len(key) < 8 or not key.isprintable() or " " in key:
                raise PydanticCustomError("api_key", "API keys need at least 8 printable characters, no spaces")
            if key.startswith("ek_"):
                raise PydanticCustomError("api_key", "API keys may not start with 'ek_' (the ephemeral keys' prefix)")
        return keys


class RecordingConfig(_Strict):
    """Session recordings under ``<data_dir>/sessions`` (a shared path when workers run elsewhere)."""

    enabled: bool = True
    retention_days: float = Field(30.0, gt=0)
    max_storage_gb: float = Field(10.0, gt=0)
    cleanup_interval_s: float = Field(3600.0, ge=10, description="how often the gateway runs cleanup")
    temp_max_age_s: float = Field(3600.0, gt=0, description="stale *.tmp files and diagnostics older than this go")


class SharesConfig(_Strict):
    """Saved chat transcripts (``POST /api/shares``): with ``auth.api_keys`` set, creating one needs a key."""

    expiry_days: float = Field(30.0, gt=0, le=3650, description="a share is deleted this long after it was made; "
                               "also the most a client may ask for (expires_in_days)")
    per_ip_per_minute: int = Field(10, ge=0, description="shares one client address may create per minute; 0 = no limit")
    per_key_per_minute: int = Field(0, ge=0, description="shares one API key may create per minute; 0 = no limit")


class AdminConfig(_Strict):
    """The operator's token for /admin, /api/admin/* and any recording; generated if not given."""

    token: str | None = Field(None, min_length=16)
    session_hours: float = Field(12.0, gt=0, le=720, description="an admin sign-in (the session cookie the "
                                 "token is exchanged for) lasts this long; sign-out, a restart or a new token ends it")
    secure_cookie: bool | None = Field(None, description="the sign-in cookie's Secure flag; null = auto: "
                                       "Secure unless the request is plain http to a loopback host")

    @field_validator("secure_cookie", mode="before")
    @classmethod
    def _strict_bool(cls, value: Any) -> Any:
        # Not pydantic's lax bool: "no" or 0 silently turning the flag off would weaken the cookie.
        if value is not None and not isinstance(value, bool):
            raise PydanticCustomError("secure_cookie", "must be true, false or null (auto: Secure unless "
                                      "plain http to localhost, 127.x or ::1)")
        return value


class IceServerConfig(_Strict):
    """A STUN or TURN server for the gateway's side of WebRTC calls (as in ``RTCIceServer``)."""

    urls: list[str] = Field(min_length=1, description="stun:host[:port], turn:host[:port][?transport=udp|tcp], turns:host[:port]?transport=tcp")
    username: str | None = None
    credential: str | None = None

    @field_validator("urls", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("urls")
    @classmethod
    def _schemes(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not re.match(r"^(stun|turn|turns):[^\s/?]+(:\d+)?(\?transport=(udp|tcp))?$", url):
                raise PydanticCustomError("ice_url", "'{url}' is not a stun:, turn: or turns: URL "
                                          "(host[:port][?transport=udp|tcp])", {"url": url})
        return urls

    @model_validator(mode="after")
    def _turn_needs_credentials(self) -> IceServerConfig:
        if any(u.startswith("turn") for u in self.urls) and (self.username is None or self.credential is None):
            raise ValueError("a TURN server needs username and credential")
        return self


class WebRTCConfig(_Strict):
    """How the gateway's end of a WebRTC call is reached (docs/operations.md, "WebRTC behind NAT")."""

    public_ip: str | None = Field(None, description="the address clients reach this gateway at, when it differs "
                                  "from the host's (NAT, containers): offered beside the host candidates")
    udp_port_min: int | None = Field(None, ge=1024, le=65535, description="media ports: the first of the range")
    udp_port_max: int | None = Field(None, ge=1024, le=65535, description="media ports: the last of the range")
    host_addresses: list[str] = Field(default_factory=list, description="interfaces to offer; empty = all")
    ice_servers: list[IceServerConfig] = Field(default_factory=list, description="STUN/TURN servers the gateway "
                                               "uses for its own candidates; none by default")
    reply_packet_ms: Literal[20, 40] = Field(40, description="the reply's Opus packet length on a call: 40 sends "
                                             "half the packets (about a fifth less of the gateway's CPU a call), 20 "
                                             "stops a reply cut on barge-in up to 20 ms sooner")

    @field_validator("public_ip")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise PydanticCustomError("ip", "'{value}' is not an IP address", {"value": value}) from None
        return value

    @field_validator("host_addresses")
    @classmethod
    def _addresses(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise PydanticCustomError("ip", "'{value}' is not an IP address", {"value": value}) from None
        return values

    @model_validator(mode="after")
    def _port_range(self) -> WebRTCConfig:
        if (self.udp_port_min is None) != (self.udp_port_max is None):
            raise ValueError("set both udp_port_min and udp_port_max, or neither")
        if self.udp_port_min is not None and self.udp_port_min > self.udp_port_max:
            raise ValueError(f"udp_port_min {self.udp_port_min} is above udp_port_max {self.udp_port_max}")
        return self

    @property
    def port_range(self) -> range | None:
        return None if self.udp_port_min is None else range(self.udp_port_min, self.udp_port_max + 1)


class AppConfig(_Strict):
    data_dir: str = "data"
    admin: AdminConfig = Field(default_factory=AdminConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    backend: BackendConfig = Field(default_factory=BackendConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    recording: RecordingConfig = Field(default_factory=RecordingConfig)
    shares: SharesConfig = Field(default_factory=SharesConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    webrtc: WebRTCConfig = Field(default_factory=WebRTCConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @model_validator(mode="after")
    def _ports_do_not_collide(self) -> AppConfig:
        worker_ports = range(self.workers.base_port, self.workers.base_port + self.workers.count)
        if self.gateway.port in worker_ports:
            raise ValueError(
                f"gateway.port {self.gateway.port} collides with worker ports "
                f"{worker_ports.start}-{worker_ports.stop - 1}"
            )
        if self.workers.base_port + self.workers.count - 1 > 65535:
            raise ValueError("workers.base_port + workers.count exceeds 65535")
        return self

    def worker_urls(self) -> list[str]:
        local = [
            f"http://{self.workers.host}:{self.workers.base_port + i}" for i in range(self.workers.count)
        ]
        return local + list(self.workers.urls)

    def backend_options(self) -> dict[str, Any]:
        return {"data_dir": self.data_dir, **self.backend.options}


class ConfigError(Exception):
    """Start-up stops with this; the message names each bad field and why."""


def _set_path(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {part} is not a section")
    node[parts[-1]] = value


def add_cli_arguments(parser) -> None:
    """The flags every entry point shares (CLI beats config.json beats defaults)."""
    parser.add_argument("--config", default="config.json", help="JSON config file (default: config.json)")
    parser.add_argument("--workers", type=int, help="number of local workers (overrides workers.count)")
    parser.add_argument("--port", type=int, help="gateway port (overrides gateway.port)")
    parser.add_argument(
        "--tls", choices=("auto", "on", "off"), help="gateway HTTPS (overrides gateway.tls.mode)"
    )
    parser.add_argument("--llm-url", help="cascade: OpenAI-compatible LLM server base URL "
                        "(overrides backend.options.llm_url)")
    parser.add_argument("--llm-model", help="cascade: model name on that server (overrides backend.options.llm_model)")
    parser.add_argument("--redis", metavar="URL", help="share the queue and workers with other gateways through "
                        "this Redis ('local': a private redis-server; overrides cluster.redis_url)")
    parser.add_argument("--gateway-only", action="store_true", default=None,
                        help="start no local workers (workers.count 0): workers come from workers.urls or "
                        "the shared registry")


def config_from_cli(args) -> AppConfig:
    """Load the config named by ``add_cli_arguments`` flags; a bad one exits 2 with the reason."""
    import sys

    try:
        return load_config(args.config, {
            "gateway.port": args.port, "gateway.tls.mode": args.tls,
            "backend.options.llm_url": getattr(args, "llm_url", None),
            "backend.options.llm_model": getattr(args, "llm_model", None),
            "cluster.redis_url": getattr(args, "redis", None),
            "workers.count": 0 if getattr(args, "gateway_only", None) else args.workers,
        })
    except ConfigError as exc:
        print(f"omniduplex: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> AppConfig:
    """Read ``path`` (if it exists), apply dotted ``overrides`` (CLI), validate."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if p.exists():
            try:
                tree = json.loads(p.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{p}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
            if not isinstance(tree, dict):
                raise ConfigError(f"{p}: the top level must be a JSON object")
        elif str(path) != "config.json":
            raise ConfigError(f"config file {p} does not exist")
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_path(tree, key, value)
    try:
        return AppConfig.model_validate(tree)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
            lines.append(f"{loc}: {err['msg']}{got}")
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None
