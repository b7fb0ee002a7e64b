"""Errors raised by API clients: structured (status code, message, attempts), never bare strings."""

from __future__ import annotations


class ProtocolError(Exception):
    """A request to an LLM endpoint failed.

    ``code`` is the HTTP status (None for transport failures), ``message`` the server's or
    transport's explanation, ``attempts`` how many times the request was sent, ``retryable``
    whether the failure class is one that retries address (rate limits, 5xx, timeouts, connection
    errors; when it is raised, the retry budget is already spent), ``retry_after_s`` the pause the
    server asked for.
    """

    retryable = False
    hint = ""

    def __init__(
        self,
        message: str,
        code: int | None = None,
        *,
        attempts: int = 1,
        url: str | None = None,
        retry_after_s: float | None = None,
    ):
        self.message = message
        self.retry_after_s = retry_after_s
        self.code = code
        self.attempts = attempts
        self.url = url
        super().__init__(message)

    def __str__(self) -> str:
        where = f" from {self.url}" if self.url else ""
        status = f"HTTP {self.code}{where}: " if self.code is not None else (f"{where[1:]}: " if where else "")
        tries = f" (after {self.attempts} attempts)" if self.attempts > 1 else ""
        hint = f" [{self.hint}]" if self.hint else ""
        return f"{status}{self.message}{tries}{hint}"


class RateLimitedError(ProtocolError):
    retryable = True
    hint = "lower concurrency or raise retry_attempts"


class ServerError(ProtocolError):
    retryable = True


class ProtocolTimeoutError(ProtocolError):
    retryable = True
    hint = "raise the timeout: client_kwargs={'timeout': seconds}"


class ProtocolConnectionError(ProtocolError):
    retryable = True
    hint = "is the server up and base_url right?"


class AuthenticationFailedError(ProtocolError):
    hint = "set OPENAI_API_KEY or pass api_key="


class BadRequestError(ProtocolError):
    """4xx other than 401/403/429: the request itself is wrong (unknown model, bad field...)."""


class MalformedResponseError(ProtocolError):
    """The server answered 2xx with something that is not a chat completion."""


def error_for_status(code: int) -> type[ProtocolError]:
    if code == 429:
        return RateLimitedError
    if code in (401, 403):
        return AuthenticationFailedError
    if code in (408,):
        return ProtocolTimeoutError
    if code >= 500:
        return ServerError
    return BadRequestError
