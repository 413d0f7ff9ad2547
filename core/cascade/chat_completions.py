"""A client for an OpenAI-compatible ``/chat/completions`` server (vLLM, Ollama, llama.cpp's
server, LM Studio, ``transformers serve``, a remote omni engine).

Shared by the two backends that talk to one: ``remote_omni`` (the whole model is remote) and the
cascade with ``llm_url`` (only the LLM stage is). It waits for the server at start, streams one
reply's chunks, turns streamed ``delta.tool_calls`` into the reply's function calls, races the
stream against the reply's cancel flag (dropping the stream aborts the request on every server
we know), and remembers whether the server last answered, so ``/health`` can say why replies
fail while it is away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from core.conversation import Item, ReplyJob, ReplyStats

log = logging.getLogger(__name__)

RECHECK_S = 2.0  # while the server is failing, how often it is asked again (for /health)


class ChatServerError(RuntimeError):
    """The server is unreachable, too slow, or answered with an error (HTTP status or chunk)."""


def check_base_url(value: str, example: str = "http://gpu-host:8000/v1") -> str:
    url = httpx.URL(value)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"must be an http(s) URL such as {example}")
    return value.rstrip("/")


class ChatServer:
    """One server: its address, credentials and timeouts, and how it last answered."""

    def __init__(self, base_url: str, model: str | None, *, api_key: str | None = None,
                 headers: dict[str, str] | None = None, connect_timeout_s: float = 10.0,
                 read_timeout_s: float = 120.0, label: str = "server") -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.label = label
        self.headers = dict(headers or {})
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self.read_timeout_s = read_timeout_s
        self.error: str | None = None  # why the last request failed; None once one succeeds
        self.error_since: float | None = None
        self._lock = threading.Lock()
        self._rechecking = False

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self.timeout, headers=self.headers, trust_env=False)

    # ------------------------------------------------------------------ health

    def health(self) -> dict[str, Any]:
        """For the worker's ``/health``: where the server is and, while it fails, why."""
        return {"url": self.base_url, "model": self.model, "ok": self.error is None, "error": self.error,
                "failing_for_s": None if self.error_since is None else round(time.time() - self.error_since, 1)}

    def record_ok(self) -> None:
        if self.error is not None:
            log.info("%s at %s answers again", self.label, self.base_url)
        self.error, self.error_since = None, None

    def record_failure(self, reason: str) -> None:
        """Remember why, and ask the server again every few seconds until it answers, so
        ``/health`` clears without waiting for the next reply."""
        if self.error is None:
            self.error_since = time.time()
            log.warning("%s at %s failed: %s", self.label, self.base_url, reason)
        self.error = reason
        with self._lock:
            if self._rechecking:
                return
            self._rechecking = True
        threading.Thread(target=self._recheck, name="chat-server-recheck", daemon=True).start()

    def _recheck(self) -> None:
        try:
            while self.error is not None:
                time.sleep(RECHECK_S)
                status, reason, _ = self.probe()
                if status is not None and status < 500:
                    self.record_ok()
                else:
                    self.error = reason or f"HTTP {status}"
        finally:
            with self._lock:
                self._rechecking = False

    # ------------------------------------------------------------------ start-up

    def probe(self) -> tuple[int | None, str, list[str]]:
        """``GET /models`` once: (HTTP status or None, what went wrong, the model ids listed)."""
        try:
            with httpx.Client(timeout=self.timeout, headers=self.headers, trust_env=False) as client:
                r = client.get(f"{self.base_url}/models")
        except httpx.HTTPError as exc:
            return None, describe_failure(exc, self), []
        if r.status_code != 200:
            return r.status_code, f"HTTP {r.status_code} from {self.base_url}/models: {error_text(r.content)}", []
        try:
            ids = [m.get("id") for m in (r.json().get("data") or []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            ids = []
        return 200, "", [i for i in ids if isinstance(i, str)]

    def wait_until_up(self, wait_s: float, progress: Callable[[str], None] | None = None) -> None:
        """Block until the server answers ``GET /models`` (it may still be loading weights).
        503 means loading (llama.cpp); another answer means it is up without a model list.
        Without a model name, the first model it lists is used."""
        deadline = time.monotonic() + wait_s
        while True:
            status, detail, ids = self.probe()
            if status is not None and status != 503:
                if status != 200:
                    log.warning("%s: %s; taking the server as up", self.label, detail)
                self.record_ok()
                self._choose_model(ids)
                return
            if time.monotonic() >= deadline:
                raise ChatServerError(f"the {self.label} at {self.base_url} did not answer in {wait_s:g} s "
                                      f"(last: {detail})")
            if progress:
                progress(f"waiting for {self.base_url}/models ({detail})")
            time.sleep(1.0)

    def _choose_model(self, ids: list[str]) -> None:
        if self.model is None:
            if not ids:
                raise ChatServerError(f"the {self.label} at {self.base_url} lists no models: name one in the options")
            self.model = ids[0]
            log.info("%s at %s: using model %r (first of %s)", self.label, self.base_url, ids[0], ids)
        elif ids and self.model not in ids:
            log.warning("%s at %s lists %s, not %r; requests name %r anyway",
                        self.label, self.base_url, ids, self.model, self.model)

    # ------------------------------------------------------------------ streaming

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """POST ``body`` (``stream: true``) and yield each parsed chunk; a failure of any kind
        is a ``ChatServerError`` that says what happened in words a user can act on."""
        try:
            async with self.client() as client, client.stream("POST", self.url, json=body) as r:
                if r.status_code != 200:
                    reason = (f"the {self.label} at {self.base_url} answered HTTP {r.status_code}: "
                              f"{error_text(await r.aread())}")
                    if r.status_code >= 500:  # the server's trouble, not the request's: /health says so
                        self.record_failure(reason)
                    raise ChatServerError(reason)
                self.record_ok()
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise ChatServerError(f"the {self.label} sent a chunk that is not JSON: {data[:200]!r}") from None
                    if isinstance(chunk, dict) and ("error" in chunk or chunk.get("object") == "error"):
                        err = chunk.get("error", chunk)
                        raise ChatServerError(f"the {self.label} reported an error: "
                                              f"{err.get('message') if isinstance(err, dict) else err}")
                    if isinstance(chunk, dict):
                        yield chunk
        except httpx.HTTPError as exc:
            reason = describe_failure(exc, self)
            self.record_failure(reason)
            raise ChatServerError(reason) from None


def describe_failure(exc: httpx.HTTPError, server: ChatServer) -> str:
    where = f"the {server.label} at {server.base_url}"
    if isinstance(exc, httpx.ConnectError):
        return f"{where} is unreachable (connection refused or no route)"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"{where} did not accept a connection in time"
    if isinstance(exc, httpx.ReadTimeout):
        return f"{where} sent nothing for {server.read_timeout_s:g} s (too slow or stuck)"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{where} closed the connection mid-reply"
    return f"{where} failed: {type(exc).__name__}: {exc}" if str(exc) else f"{where} failed: {type(exc).__name__}"


def error_text(body: bytes) -> str:
    try:
        data = json.loads(body)
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    except (ValueError, AttributeError):
        return body[:300].decode(errors="replace")


# --------------------------------------------------------------------------- request parts


def tool_fields(job: ReplyJob) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` of a request, from the session's function tools."""
    if not job.tools:
        return {}
    choice = job.tool_choice if job.tool_choice in ("auto", "required") else {
        "type": "function", "function": {"name": job.tool_choice}}
    return {"tools": [{"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": t.parameters}} for t in job.tools],
        "tool_choice": choice}


def call_message(item: Item) -> dict[str, Any] | None:
    """A function call or its result as the chat message OpenAI's format has for it."""
    if item.type == "function_call":
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": item.call_id, "type": "function",
            "function": {"name": item.name, "arguments": item.arguments or "{}"}}]}
    if item.type == "function_call_output":
        return {"role": "tool", "tool_call_id": item.call_id, "content": item.output or ""}
    return None


def append_message(messages: list[dict[str, Any]], message: dict[str, Any]) -> None:
    """Parallel calls share one assistant turn; consecutive user parts share one user turn."""
    if message.get("tool_calls") and messages and messages[-1].get("tool_calls"):
        messages[-1]["tool_calls"].extend(message["tool_calls"])
    elif (message["role"] == "user" and messages and messages[-1]["role"] == "user"
          and isinstance(message["content"], list) and isinstance(messages[-1]["content"], list)):
        messages[-1]["content"].extend(message["content"])
    elif (message["role"] == "user" and messages and messages[-1]["role"] == "user"
          and isinstance(message["content"], str) and isinstance(messages[-1]["content"], str)):
        messages[-1]["content"] += "\n" + message["content"]
    else:
        messages.append(message)


def usage_into(chunk: dict[str, Any], stats: ReplyStats) -> None:
    usage = chunk.get("usage") or {}
    if usage.get("completion_tokens"):
        stats.output_tokens = int(usage["completion_tokens"])
    if usage.get("prompt_tokens"):
        stats.prompt_tokens = int(usage["prompt_tokens"])


class ToolCallStream:
    """Streamed ``delta.tool_calls`` of one reply -> ``job.begin_call`` / ``call_arguments`` /
    ``end_call``. The server's ``index`` tells calls apart; the name comes in a call's first
    piece (arguments seen before it wait), the arguments in pieces; calls end with the stream."""

    def __init__(self, job: ReplyJob) -> None:
        self.job = job
        self.open: dict[int, dict[str, Any]] = {}  # server index -> {"name", "args", "index", "sent"}

    def feed(self, delta: dict[str, Any]) -> None:
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    self.delta(call)

    def delta(self, call: dict[str, Any]) -> None:
        key = call.get("index", 0) if isinstance(call.get("index"), int) else len(self.open)
        entry = self.open.setdefault(key, {"name": "", "args": "", "index": None, "sent": False})
        fn = call.get("function") or {}
        if fn.get("name") and entry["index"] is None:
            entry["name"] = fn["name"]
            entry["index"] = self.job.begin_call(fn["name"])
        args = fn.get("arguments")
        if isinstance(args, dict):  # some servers send the arguments whole, as an object
            args = json.dumps(args)
        if isinstance(args, str) and args:
            if entry["index"] is None:
                entry["args"] += args
            else:
                self.job.call_arguments(entry["index"], entry["args"] + args)
                entry["args"], entry["sent"] = "", True

    def end(self) -> None:
        for key in sorted(self.open):
            entry = self.open[key]
            if entry["index"] is None:
                log.warning("the server streamed a tool call with no name (%.200r); dropped", entry["args"])
                continue
            if entry["args"] or not entry["sent"]:
                self.job.call_arguments(entry["index"], entry["args"] or "{}")
            self.job.end_call(entry["index"])
        self.open.clear()


# --------------------------------------------------------------------------- cancel


async def until_cancelled(job: ReplyJob, work: Awaitable[ReplyStats]) -> ReplyStats:
    """Run ``work`` until it ends or the reply is cancelled; a cancel drops the stream at once
    (the request's connection closes, which servers take as an abort)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_event(job.cancel))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return ReplyStats(stop_reason="cancelled")
    return task.result()


async def _wait_event(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.02)
