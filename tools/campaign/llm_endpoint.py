"""The model behind the llm policies: its endpoint settings checked, one chat call with counted
retries, and the call log. Any server that speaks OpenAI's chat-completions protocol works: vLLM,
llama.cpp's server, Ollama (`http://localhost:11434/v1`), hosted APIs.

Contract:
    endpoint_problems(settings, environ) one line per problem of a `policy:` block's endpoint
                                         settings; [] when a call can be made
    Endpoint.from_policy(settings)       the endpoint those settings name
    Chat(endpoint, log_path, policy)     one conversation partner; `ask(messages, ...)` returns a
                                         `Call` holding the reply, or raises Rejected with the
                                         reason the loop records when no reply came
    Chat.record(call, verdict, ...)      appends the call's line to the log once the policy has
                                         judged the reply

Settings (`policy:` keys, typed and with their defaults in campaign/policy_settings.py): `base_url`
(unset: OPENAI_BASE_URL, then the SDK's own default, as the OpenAI SDK does), `model` (required),
`api_key_env` (the name of the environment variable holding the key), `request_timeout` (seconds one
request may take), `request_retries`, `temperature` (unset: the server's default).

The key. It is read from the environment when the first call is made and handed to the SDK only:
campaign.yaml holds the variable's name, never its value; the call log, the errors raised and the
ledger rows made from them never hold it (any text that would is masked as `***`).

Retries. A 408, 409, 429 or 5xx answer, a refused connection and a timeout are retried up to
`request_retries` times, waiting what the server's Retry-After asks (at most 60 s), else 1, 2, 4 ...
seconds (at most 30) with a little jitter, so that several loops sharing one server do not retry in
step. Any other answer (401 bad key, 404 unknown model, 400) is said at once. The SDK's own retries
are off, so each retry is counted in the log.

The call log, `<campaign folder>/llm_calls.jsonl`: one JSON object per chat call, its retries
included, appended once the policy has judged the reply (a call that got no reply: at once).
    start              when the call began: ISO 8601 with milliseconds and the UTC offset
    latency_s          seconds from start to the reply (or the last failure), retries and waits included
    policy             llm | llm_diff | hybrid
    mode               parameters | diff: what was asked for
    asked              how many proposals the call asked for (parallel slots free: K)
    correction         true when the call carries the reason a proposal was rejected back to the model
    model              the model asked
    outcome            ok | timeout | rate_limited | server_error | connection_error | http_error
    status             the last HTTP status; null when no response came
    retries            retries made within the call
    prompt_tokens      as the server reported them; null when it did not
    completion_tokens  the same
    verdict            accepted (at least one proposal handed to the loop) | rejected | none (the
                       model has nothing more to propose) | null (no reply)
    proposals          the slugs accepted from this reply
    reason             why the reply was rejected, or why no reply came; null otherwise
A trace draws each line as one span from `start` lasting `latency_s`, named by `mode`.

Limits: one call at a time (the loop asks when a slot is free); no streaming, so `request_timeout`
bounds the time to the whole reply, which for a local model writing K proposals can be minutes.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from autoresearch_skills.atomicfile import append_text
from autoresearch_skills.campaign.hypothesis import Rejected
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.clock import now

BASE_URL_ENV = "OPENAI_BASE_URL"
RETRY_STATUSES = (408, 409, 429)  # and every 5xx: what the SDK itself retries
MAX_RETRY_AFTER = 60.0  # seconds: a server asking for longer is asked again sooner
MAX_BACKOFF = 30.0
LOG_NAME = "llm_calls.jsonl"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def endpoint_problems(settings: PolicySettings, environ: Mapping[str, str] | None = None) -> list[str]:
    """Why no call could be made with these `policy:` settings, one sentence each; [] when fine."""
    environ = os.environ if environ is None else environ
    problems = []
    if not settings.model or not settings.model.strip():
        problems.append(
            "`policy.model` is required for the llm policies: the model name the endpoint serves "
            "(e.g. Qwen/Qwen2.5-Coder-32B-Instruct on vLLM, qwen2.5-coder:32b on Ollama)"
        )
    base_url = settings.base_url
    if base_url is not None:
        if not _is_url(base_url):
            problems.append(
                f"`policy.base_url` must be an http(s) URL such as http://localhost:8000/v1 (got {base_url!r})"
            )
    elif environ.get(BASE_URL_ENV) and not _is_url(environ[BASE_URL_ENV]):
        problems.append(f"{BASE_URL_ENV} must be an http(s) URL such as http://localhost:8000/v1")
    name = settings.api_key_env
    if not ENV_NAME.fullmatch(name):
        # a key pasted here would be copied into the campaign folder: refuse anything but a name
        problems.append(
            "`policy.api_key_env` must name an environment variable (e.g. OPENAI_API_KEY), not hold the key"
        )
    elif not environ.get(name):
        problems.append(
            f"the environment variable {name} (`policy.api_key_env`) is not set: export the endpoint's key "
            "in it before the campaign starts (any value for a server without authentication, e.g. vLLM "
            "or Ollama)"
        )
    try:
        import importlib.util

        missing_sdk = importlib.util.find_spec("openai") is None
    except ValueError:
        missing_sdk = True
    if missing_sdk:
        problems.append(
            "the llm policies need the OpenAI Python SDK: pip install 'autoresearch-skills[llm]' (or openai>=1.30)"
        )
    return problems


def _is_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    parsed = urlparse(value.strip())
    return parsed.scheme in ("http", "https") and bool(parsed.netloc)


@dataclass(frozen=True)
class Endpoint:
    model: str
    base_url: str | None  # None: OPENAI_BASE_URL, then the SDK's default
    api_key_env: str
    request_timeout: float
    request_retries: int
    temperature: float | None

    @classmethod
    def from_policy(cls, settings: PolicySettings) -> Endpoint:
        return cls(
            model=str(settings.model),  # required: endpoint_problems refuses settings without one
            base_url=settings.base_url,
            api_key_env=settings.api_key_env,
            request_timeout=float(settings.request_timeout),
            request_retries=settings.request_retries,
            temperature=settings.temperature,
        )


@dataclass
class Call:
    """One chat call: what the log line says about it, and the reply."""

    start: str
    policy: str
    mode: str
    asked: int
    correction: bool
    model: str
    latency_s: float = 0.0
    outcome: str = "ok"
    status: int | None = None
    retries: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    verdict: str | None = None
    proposals: list[str] = field(default_factory=list)
    reason: str | None = None
    text: str = ""  # the reply; not logged (it can be long: the trace needs the timing)

    def line(self) -> str:
        data = asdict(self)
        del data["text"]
        return json.dumps(data) + "\n"


class Chat:
    """Chat calls to one endpoint, each logged as one line of `log_path`."""

    def __init__(self, endpoint: Endpoint, log_path: Path, policy: str):
        self.endpoint = endpoint
        self.log_path = log_path
        self.policy = policy
        self._client: Any = None  # an openai.OpenAI once made (an optional extra)
        self._key = ""

    def client(self) -> Any:
        if self._client is None:
            import openai  # an optional extra: only the llm policies need it

            self._key = os.environ.get(self.endpoint.api_key_env, "")
            if not self._key:
                raise Rejected(
                    f"the environment variable {self.endpoint.api_key_env} (`policy.api_key_env`) is not set"
                )
            self._client = openai.OpenAI(
                api_key=self._key,
                base_url=self.endpoint.base_url or os.environ.get(BASE_URL_ENV) or None,
                timeout=self.endpoint.request_timeout,
                max_retries=0,  # ours, so that each one is counted
            )
        return self._client

    def ask(self, messages: list[dict], *, mode: str, asked: int, correction: bool) -> Call:
        """The model's reply to `messages`; Rejected (logged) when none came after the retries."""
        import openai

        call = Call(
            now().isoformat(timespec="milliseconds"),
            self.policy,
            mode,
            asked,
            correction,
            self.endpoint.model,
        )
        began = time.monotonic()
        options = {} if self.endpoint.temperature is None else {"temperature": self.endpoint.temperature}
        while True:
            wait = None
            try:
                response = self.client().chat.completions.create(
                    model=self.endpoint.model, messages=messages, **options
                )
            except openai.APITimeoutError:
                call.outcome, call.status, retry = "timeout", None, True
                said = f"did not answer within {self.endpoint.request_timeout:g} s (`request_timeout`)"
            except openai.APIConnectionError as err:
                call.outcome, call.status, retry = "connection_error", None, True
                said = f"could not be reached ({_cause(err)})"
            except openai.APIStatusError as err:
                call.status = err.status_code
                retry = err.status_code in RETRY_STATUSES or err.status_code >= 500
                call.outcome = (
                    "rate_limited"
                    if err.status_code == 429
                    else "server_error"
                    if err.status_code >= 500
                    else "http_error"
                )
                said = f"answered {err.status_code}: {_short(err.message)}"
                wait = _retry_after(err.response.headers)
            else:
                call.outcome, call.status = "ok", 200
                call.text = _reply_text(response)
                usage = getattr(response, "usage", None)
                call.prompt_tokens = getattr(usage, "prompt_tokens", None)
                call.completion_tokens = getattr(usage, "completion_tokens", None)
                call.latency_s = round(time.monotonic() - began, 3)
                return call
            if not retry or call.retries >= self.endpoint.request_retries:
                call.latency_s = round(time.monotonic() - began, 3)
                tries = f" ({call.retries + 1} tries)" if call.retries else ""
                call.reason = self.mask(f"the model endpoint {said}{tries}")
                self.record(call, None)
                raise Rejected(call.reason)
            call.retries += 1
            time.sleep(_backoff(call.retries, wait))

    def record(
        self, call: Call, verdict: str | None, reason: str | None = None, proposals: Iterable[str] = ()
    ) -> None:
        call.verdict = verdict
        if reason is not None:
            call.reason = self.mask(reason)
        call.proposals = list(proposals)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        append_text(self.log_path, self.mask(call.line()))

    def mask(self, text: str) -> str:
        """`text` without the key: a server may echo what it was sent in an error."""
        return text.replace(self._key, "***") if self._key else text


def _reply_text(response: object) -> str:
    choices = getattr(response, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    return (getattr(message, "content", None) or "").strip()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait (Retry-After in seconds, or retry-after-ms), if any."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers.get(name, "")) * scale)
        except ValueError:
            continue  # absent, or an HTTP date: back off by our own schedule
    return None


def _backoff(retry: int, asked: float | None) -> float:
    if asked is not None:
        return min(asked, MAX_RETRY_AFTER)
    return min(MAX_BACKOFF, 2.0 ** (retry - 1)) * random.uniform(0.8, 1.0)


def _cause(err: Exception) -> str:
    cause = err.__cause__ or err.__context__
    return _short(str(cause or err))


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
