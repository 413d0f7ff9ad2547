"""Request bodies for the OpenAI REST routes: size limits, parsing, and 4xx errors that name
the offending parameter.

Limits are enforced twice: at once from ``Content-Length`` (nothing is read), and while
reading, for chunked bodies or a lying header. Big bodies are parsed in a thread so a 20 MB
JSON with base64 audio never stalls the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from core.json_limits import NestingTooDeep, check_nesting, loads
from gateway.rest.models import ApiError

M = TypeVar("M", bound=BaseModel)
THREAD_PARSE_BYTES = 256 * 1024
_UNION_LABELS = {"str", "int", "float", "bool", "list", "dict", "none"}
_TAGS = {"system", "developer", "user", "assistant", "tool", "text", "image_url", "input_audio"}


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n // 1024} KiB"


def too_large(limit: int, size: int | None = None) -> ApiError:
    got = f" ({size} bytes)" if size is not None else ""
    return ApiError(413, f"request body too large{got}: the limit for this endpoint is {_mib(limit)}",
                    "request_too_large")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or 413 as soon as it is known to exceed ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "invalid Content-Length header", "invalid_request_error")
        if int(declared) > limit:
            raise too_large(limit, int(declared))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def param_of(loc: tuple[Any, ...]) -> str | None:
    """Pydantic's error location -> OpenAI's ``param`` (``messages[0].content[1].image_url``)."""
    out = ""
    prev_index = False
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            prev_index = True
            continue
        text = str(part)
        if (prev_index and text in _TAGS) or text in _UNION_LABELS or "[" in text or "-" in text:
            prev_index = False
            continue
        out += f".{text}" if out else text
        prev_index = False
    return out or None


def validation_error(exc: ValidationError) -> ApiError:
    # A union field reports one error per branch; the deepest one names the real culprit.
    err = max(exc.errors(include_url=False), key=lambda e: len(e["loc"]))
    if err["type"] == "json_invalid":
        return ApiError(400, "We could not parse the JSON body of your request: " + err["msg"], "invalid_json")
    param = param_of(tuple(err["loc"]))
    if err["type"] == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", "missing_required_parameter", param)
    where = f" for '{param}'" if param else ""
    return ApiError(400, f"Invalid value{where}: {err['msg']}", "invalid_value", param)


def _validate_json(model: type[M], body: bytes) -> M:
    try:
        check_nesting(body)
    except NestingTooDeep as exc:
        raise ApiError(400, f"We could not parse the JSON body of your request: {exc}.", "invalid_json") from None
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def json_object(body: bytes, *, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """A body that must be a JSON object, its nesting checked before the parser (which recurses
    once per level) sees it; 400 ``invalid_json`` otherwise. An empty body is ``empty`` when
    given (a route whose fields are all optional), else refused."""
    if not body.strip():
        if empty is not None:
            return dict(empty)
        raise ApiError(400, "the request body is empty; send a JSON object", "invalid_json")
    try:
        data = loads(body)
    except ValueError as exc:  # NestingTooDeep and NotText are two
        raise ApiError(400, f"We could not parse the JSON body of your request: {exc}.", "invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The body must be a JSON object.", "invalid_json")
    return data


async def parse_json(model: type[M], body: bytes) -> M:
    if not body.strip():
        raise ApiError(400, "the request body is empty; send a JSON object", "invalid_json")
    if len(body) > THREAD_PARSE_BYTES:
        return await asyncio.to_thread(_validate_json, model, body)
    return _validate_json(model, body)


def _parse_multipart(content_type: str, body: bytes, max_file: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    from python_multipart import parse_form
    from python_multipart.exceptions import FormParserError

    fields: dict[str, Any] = {}
    files: dict[str, bytes] = {}

    def on_field(field) -> None:
        name = (field.field_name or b"").decode("utf-8", "replace")
        value = (field.value or b"").decode("utf-8", "replace")
        if name.endswith("[]"):
            fields.setdefault(name, []).append(value)
        else:
            fields[name] = value

    def on_file(file) -> None:
        name = (file.field_name or b"").decode("utf-8", "replace")
        file.file_object.seek(0)
        data = file.file_object.read()
        if len(data) > max_file:
            raise ApiError(413, f"the uploaded file is larger than {_mib(max_file)}", "file_too_large", name)
        files[name] = data

    try:
        parse_form({"Content-Type": content_type.encode("latin-1")}, io.BytesIO(body), on_field, on_file)
    except ApiError:
        raise
    except (FormParserError, ValueError, UnicodeError) as exc:
        raise ApiError(400, f"malformed multipart/form-data body: {exc}", "invalid_multipart") from None
    return fields, files


async def parse_multipart(request: Request, body: bytes, max_file: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise ApiError(400, "the body must be multipart/form-data (with a boundary)", "invalid_content_type")
    return await asyncio.to_thread(_parse_multipart, content_type, body, max_file)
