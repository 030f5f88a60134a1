"""OpenAI-compatible backend: vLLM on a GPU workstation, llama.cpp's server, Ollama.

The action schema goes out as structured output: `json_schema` (OpenAI standard, vLLM); a server that
rejects it (llama-cpp-python's server wants `json_object` with a `schema`) is retried once with that form,
which is then remembered. Non-loopback URLs are refused unless remote hosts are allowed explicitly. An
answer is read through `_Answer` (what rcagent uses of it): any other shape is a one-line BackendError.
"""
from __future__ import annotations

import ipaddress
import socket
import time
from urllib.parse import urlparse

import httpx
import pydantic
import tenacity

from rcagent.errors import BadInput, BackendError
from rcagent.serving import Completion, register_backend


RETRY_ON = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


class _Message(pydantic.BaseModel):
    content: pydantic.StrictStr | None = None


class _Choice(pydantic.BaseModel):
    message: _Message


class _Answer(pydantic.BaseModel):
    """What rcagent reads of a chat completion: each choice's text; the token counts only when they are counts."""
    choices: list[_Choice]
    usage: object = None

    def tokens(self, key: str) -> int:
        value = self.usage.get(key) if isinstance(self.usage, dict) else None
        return value if type(value) is int and 0 <= value < 2**31 else 0


class _Transient(Exception):
    """A failure worth retrying: the server is unreachable for now, overloaded or failing."""


def is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:  # a name: every address it resolves to must be loopback
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


class OpenAIBackend:
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str = "none", allow_remote: bool = False,
                 timeout: float = 600.0, seed: int = 0, retries: int = 4, backoff: float = 1.0):
        if urlparse(base_url).scheme not in ("http", "https"):
            raise BadInput(f"--base-url must be an http(s) URL, got '{base_url}'")
        if not allow_remote and not is_loopback(base_url):
            raise BadInput(f"refusing to send telemetry to non-loopback host in {base_url}; "
                           "pass --allow-remote (or allow_remote = true) if this server is yours")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.seed = seed
        self.retries, self.backoff = retries, backoff
        self.format = "json_schema"
        self.client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {api_key}"},
                                   trust_env=False)  # never route through a proxy from the environment

    def _response_format(self, schema: dict) -> dict:
        if self.format == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "action", "schema": schema, "strict": True}}
        return {"type": "json_object", "schema": schema}

    def complete(self, messages, *, schema=None, n=1, temperature=0.0, max_tokens=1024):
        """n completions: asked for in one request (vLLM samples them from one prefill); a server that
        returns fewer choices (llama.cpp's) is asked again for the rest, and its prompt cache serves the prefix."""
        out: list[Completion] = []
        while len(out) < n:
            want = n - len(out)
            body = {"model": self.model, "messages": messages, "temperature": temperature,
                    "max_tokens": max_tokens, "seed": self.seed + len(out)}
            if want > 1:
                body["n"] = want
            start = time.perf_counter()
            resp = self._post(body, schema)
            try:
                answer = _Answer.model_validate_json(resp.content)
            except pydantic.ValidationError:
                raise BackendError(f"{self.base_url}: unexpected answer {resp.text[:200]!r}") from None
            texts = [choice.message.content or "" for choice in answer.choices][:want]
            if not texts:
                raise BackendError(f"{self.base_url}: no choices in {resp.text[:200]!r}")
            ms = (time.perf_counter() - start) * 1000
            # one prefill for all choices: its tokens are counted on the first, completion tokens shared evenly
            for i, text in enumerate(texts):
                out.append(Completion(text, answer.tokens("prompt_tokens") if i == 0 else 0,
                                      answer.tokens("completion_tokens") // len(texts), ms / len(texts)))
        return out

    def _send(self, body: dict) -> httpx.Response:
        """One POST, retried with exponential backoff on what passes (connection refused or reset, 429,
        5xx): a server restarting or a GPU queue full must not fail a job of a long batch."""
        try:
            for attempt in tenacity.Retrying(
                    stop=tenacity.stop_after_attempt(self.retries + 1),
                    wait=tenacity.wait_exponential(multiplier=self.backoff, max=30 * self.backoff),
                    retry=tenacity.retry_if_exception_type(_Transient), reraise=True):
                with attempt:
                    try:
                        resp = self.client.post(f"{self.base_url}/chat/completions", json=body)
                    except RETRY_ON as exc:   # not a read timeout: a request that ran out of time is not retried
                        raise _Transient(f"cannot reach {self.base_url}: {exc}") from None
                    # a server that refuses the structured-output form answers 400/422, or 500 with a
                    # validation error naming response_format (llama-cpp-python): not transient
                    refused = "response_format" in resp.text
                    if resp.status_code == 429 or (resp.status_code >= 500 and not refused):
                        raise _Transient(f"{self.base_url}: HTTP {resp.status_code}: {resp.text[:200]}")
                    return resp
        except _Transient as exc:
            raise BackendError(f"{exc} (after {self.retries + 1} attempts)") from None
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach {self.base_url}: {exc}") from None
        raise AssertionError("unreachable")

    def _post(self, body: dict, schema: dict | None) -> httpx.Response:
        for attempt in range(2):
            if schema:
                body["response_format"] = self._response_format(schema)
            resp = self._send(body)
            rejected = resp.status_code in (400, 422) or "response_format" in resp.text
            if resp.status_code >= 400 and rejected and schema and self.format == "json_schema" and attempt == 0:
                self.format = "json_object"  # llama-cpp-python's server form
                continue
            if resp.status_code >= 400:
                raise BackendError(f"{self.base_url}: HTTP {resp.status_code}: {resp.text[:200]}")
            return resp
        raise BackendError(f"{self.base_url}: the server rejected both structured-output forms")


@register_backend("openai")
def _factory(settings, **_):
    return OpenAIBackend(settings.base_url, settings.model, settings.api_key, settings.allow_remote,
                         settings.request_timeout, settings.seed)
