"""Typed errors for bad client input.

Each carries a stable ``code`` so the realtime layer can turn it into an ``error`` event
without string matching, and the conversation that raised it stays usable.
"""

from __future__ import annotations


class OmniDuplexError(Exception):
    """Base class; ``code`` is what clients see in ``error.code``."""

    code = "server_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidInputError(OmniDuplexError):
    code = "invalid_request_error"


class InvalidAudioError(InvalidInputError):
    code = "invalid_audio"


class InvalidImageError(InvalidInputError):
    code = "invalid_image"


class InvalidTextError(InvalidInputError):
    code = "invalid_text"


class ContextLengthError(InvalidInputError):
    """A reply's mandatory part (system prompt and last message) does not fit the model's context."""

    code = "context_length_exceeded"


class ItemNotFoundError(InvalidInputError):
    code = "item_not_found"


class DuplicateItemError(InvalidInputError):
    code = "item_already_exists"


class ResponseActiveError(OmniDuplexError):
    code = "conversation_already_has_active_response"


class NoActiveResponseError(OmniDuplexError):
    code = "response_cancel_not_active"


class ModelLoadError(OmniDuplexError):
    code = "model_load_failed"


class BackendNotLoadedError(OmniDuplexError):
    code = "model_not_loaded"
