"""OpenClaw gateway protocol 4: frames, the handshake and error shapes (upstream
`src/gateway/protocol/schema/frames.ts`).

Pure functions and small types, no I/O: the server (``server.py``) drives them. Every error frame
carries a non-empty ``code`` and ``message``; a real client silently drops anything else and hangs.
"""

from __future__ import annotations

import hmac
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from memory_core.errors import redact_paths

PROTOCOL_VERSION = 4
MINIMUM_PROBE_PROTOCOL = 3
MAX_PAYLOAD = 26_214_400  # 25 MiB, the client's and the real server's maxPayload
MAX_BUFFERED_BYTES = 52_428_800
MAX_PREAUTH_PAYLOAD = 65_536  # frames before a successful connect are capped at 64 KiB
TICK_INTERVAL_MS = 30_000

INVALID_REQUEST = "INVALID_REQUEST"
FORBIDDEN = "FORBIDDEN"
UNAVAILABLE = "UNAVAILABLE"

CLOSE_NORMAL = 1000  # the idle timeout
CLOSE_POLICY = 1008
CLOSE_PROTOCOL = 1002
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN_LATER = 1013  # RFC 6455: the connection cap is reached

READ_SCOPE = "operator.read"
WRITE_SCOPE = "operator.write"
ADMIN_SCOPE = "operator.admin"

# The method-scope table: the memory methods are operator.read methods (upstream
# `src/gateway/server-methods/memory-provider.ts`); ``tools.invoke`` (the agent tools memory_search /
# memory_get) is operator.write, as in 2026.9.6.
METHOD_SCOPES: dict[str, str] = {
    "tools.invoke": WRITE_SCOPE,
    "memory.search": READ_SCOPE,
    "memory.get": READ_SCOPE,
    "memory.status": READ_SCOPE,
    "memory.flushPlan": READ_SCOPE,
    "doctor.memory.status": READ_SCOPE,
}
SERVED_METHODS: tuple[str, ...] = tuple(sorted(METHOD_SCOPES))

FIRST_REQUEST_MUST_BE_CONNECT = "invalid handshake: first request must be connect"
CONNECT_ONLY_FIRST = "connect is only valid as the first request"
PREAUTH_TOO_LARGE = "preauth payload too large"


class GatewayError(Exception):
    """An ``ok:false`` response. ``close_code`` set means the connection closes after sending it."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retryable: bool | None = None,
        close_code: int | None = None,
        close_reason: str | None = None,
    ) -> None:
        if not code or not message:
            raise ValueError("gateway errors need a non-empty code and message")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.retryable = retryable
        self.close_code = close_code
        self.close_reason = close_reason if close_reason is not None else message

    def shape(self) -> dict[str, Any]:
        """The ``error`` object of a response frame (``errorShape``); host paths never leave the server."""
        out: dict[str, Any] = {"code": self.code, "message": redact_paths(self.message)}
        if self.details is not None:
            out["details"] = self.details
        if self.retryable is not None:
            out["retryable"] = self.retryable
        return out


def invalid_request(message: str, **kw: Any) -> GatewayError:
    return GatewayError(INVALID_REQUEST, message, **kw)


def unavailable(message: str) -> GatewayError:
    return GatewayError(UNAVAILABLE, message or "memory provider unavailable")


# --------------------------------------------------------------------------- frames


def now_ms() -> int:
    return int(time.time() * 1000)


def challenge_event(nonce: str | None = None, ts: int | None = None) -> dict[str, Any]:
    """The server's first frame; ``ts`` is always sent so device-identity clients can sign it."""
    return {
        "type": "event",
        "event": "connect.challenge",
        "payload": {"nonce": nonce or str(uuid.uuid4()), "capabilities": [], "ts": ts if ts is not None else now_ms()},
    }


def response_ok(req_id: str, payload: Any) -> dict[str, Any]:
    return {"type": "res", "id": req_id, "ok": True, "payload": payload}


def response_error(req_id: str, error: GatewayError) -> dict[str, Any]:
    return {"type": "res", "id": req_id, "ok": False, "error": error.shape()}


# allow_nan=False: JSON.parse in the client rejects NaN/Infinity, so they must never go out. One
# encoder for every frame: ``json.dumps`` with these options would build a new one per call (its
# ``encode`` keeps no state between calls, so sharing it is safe).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode(frame: dict[str, Any]) -> str:
    return _ENCODER.encode(frame)


def truncate_close_reason(reason: str, limit: int = 120) -> str:
    """A close reason must fit in 123 UTF-8 bytes."""
    raw = reason.encode("utf-8")
    if len(raw) <= limit:
        return reason
    return raw[:limit].decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class Request:
    id: str
    method: str
    params: Any


class FrameError(Exception):
    """A frame that is not a valid request; ``req_id`` is set when the frame had a usable id."""

    def __init__(self, message: str, req_id: str | None = None, *, is_json: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.req_id = req_id
        self.is_json = is_json


def _reject_constant(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


# one decoder for every frame (``json.loads`` with a hook builds a new one, and its scanner, per call)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_request(text: str | bytes) -> Request:
    """Parse one text frame as ``{"type":"req","id":string,"method":string,"params"?:any}``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError("frame is not UTF-8 JSON text", is_json=False) from exc
    try:
        if text.startswith("\ufeff"):  # what json.loads says of it (the reused decoder would not)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        frame = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"frame is not valid JSON: {exc}", is_json=False) from exc
    if not isinstance(frame, dict):
        raise FrameError("invalid request frame: at root: must be object")
    raw_id = frame.get("id")
    req_id = raw_id if isinstance(raw_id, str) and raw_id else None
    if frame.get("type") != "req":
        raise FrameError('invalid request frame: at /type: must be equal to constant "req"', req_id)
    if req_id is None:
        raise FrameError("invalid request frame: at /id: must be a non-empty string", None)
    method = frame.get("method")
    if not isinstance(method, str) or not method:
        raise FrameError("invalid request frame: at /method: must be a non-empty string", req_id)
    return Request(id=req_id, method=method, params=frame.get("params"))


# --------------------------------------------------------------------------- connect


@dataclass(frozen=True)
class AuthSettings:
    """How the server authenticates ``connect``: mode token|password|none and the secret."""

    mode: str
    secret: str | None = None


@dataclass
class Session:
    """The authenticated state of one connection after hello-ok."""

    conn_id: str
    role: str
    scopes: tuple[str, ...]
    auth_method: str
    client: dict[str, Any] = field(default_factory=dict)

    def has_scope(self, scope: str) -> bool:
        if ADMIN_SCOPE in self.scopes:
            return True
        if scope == READ_SCOPE and WRITE_SCOPE in self.scopes:
            return True  # operator.write satisfies read
        return scope in self.scopes


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value) and value.is_integer()


def validate_connect_params(params: Any) -> dict[str, Any]:
    """Schema checks of ``connect`` params; failures are ``invalid connect params: ...`` + close 1008."""

    def bad(detail: str) -> GatewayError:
        message = f"invalid connect params: {detail}"
        return invalid_request(message, close_code=CLOSE_POLICY, close_reason=truncate_close_reason(message))

    if not isinstance(params, dict):
        raise bad("at root: must be object")
    for key in ("minProtocol", "maxProtocol"):
        if key not in params:
            raise bad(f"at root: must have required property '{key}'")
        if not _is_int(params[key]) or params[key] < 1:
            raise bad(f"at /{key}: must be integer >= 1")
    client = params.get("client")
    if client is None:
        raise bad("at root: must have required property 'client'")
    if not isinstance(client, dict):
        raise bad("at /client: must be object")
    for key in ("id", "version", "platform", "mode"):
        if key not in client:
            raise bad(f"at /client: must have required property '{key}'")
        if not isinstance(client[key], str) or not client[key]:
            raise bad(f"at /client/{key}: must be a non-empty string")
    if "auth" in params and not isinstance(params["auth"], dict):
        raise bad("at /auth: must be object")
    if "scopes" in params and not (
        isinstance(params["scopes"], list) and all(isinstance(s, str) for s in params["scopes"])
    ):
        raise bad("at /scopes: must be array of strings")
    if "role" in params and not isinstance(params["role"], str):
        raise bad("at /role: must be string")
    return params


def _auth_failure(reason: str, detail_code: str, message: str) -> GatewayError:
    return invalid_request(
        message,
        details={
            "code": detail_code,
            "authReason": reason,
            "canRetryWithDeviceToken": False,
            "recommendedNextStep": "update_auth_credentials",
        },
        close_code=CLOSE_POLICY,
        close_reason=truncate_close_reason(message),
    )


def _matches(given: Any, secret: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode("utf-8"), secret.encode("utf-8"))


def authenticate(params: dict[str, Any], auth: AuthSettings) -> str:
    """Check ``params.auth`` against the configured secret; returns the auth method name."""
    creds = params.get("auth") or {}
    if auth.mode == "none":
        return "none"
    if auth.mode == "password":
        hint = "use this gateway's gateway.auth.password"
        given = creds.get("password")
        if given in (None, ""):
            raise _auth_failure(
                "password_missing", "AUTH_PASSWORD_MISSING", f"unauthorized: gateway password missing ({hint})"
            )
        if not auth.secret or not _matches(given, auth.secret):
            raise _auth_failure(
                "password_mismatch", "AUTH_PASSWORD_MISMATCH", f"unauthorized: gateway password mismatch ({hint})"
            )
        return "password"
    hint = "use this gateway's gateway.auth.token or pair the device"
    given = creds.get("token")
    if given in (None, ""):
        raise _auth_failure("token_missing", "AUTH_TOKEN_MISSING", f"unauthorized: gateway token missing ({hint})")
    if not auth.secret or not _matches(given, auth.secret):
        raise _auth_failure("token_mismatch", "AUTH_TOKEN_MISMATCH", f"unauthorized: gateway token mismatch ({hint})")
    return "token"


def check_protocol(params: dict[str, Any]) -> None:
    lo, hi = int(params["minProtocol"]), int(params["maxProtocol"])
    if not lo <= PROTOCOL_VERSION <= hi:
        raise invalid_request(
            "protocol mismatch",
            details={
                "code": "PROTOCOL_MISMATCH",
                "clientMinProtocol": lo,
                "clientMaxProtocol": hi,
                "expectedProtocol": PROTOCOL_VERSION,
                "minimumProbeProtocol": MINIMUM_PROBE_PROTOCOL,
            },
            close_code=CLOSE_PROTOCOL,
            close_reason="protocol mismatch",
        )


def accept_connect(params: Any, auth: AuthSettings, conn_id: str) -> Session:
    """Run the whole ``connect`` check (schema, protocol, role, credentials) and build the session."""
    checked = validate_connect_params(params)
    check_protocol(checked)
    role = checked.get("role") or "operator"
    if role not in ("operator", "node"):
        raise invalid_request("invalid role", close_code=CLOSE_POLICY, close_reason="invalid role")
    method = authenticate(checked, auth)
    scopes = tuple(dict.fromkeys(checked.get("scopes") or ()))
    return Session(conn_id=conn_id, role=role, scopes=scopes, auth_method=method, client=dict(checked["client"]))


def hello_ok(session: Session, server_version: str) -> dict[str, Any]:
    return {
        "type": "hello-ok",
        "protocol": PROTOCOL_VERSION,
        "server": {"version": server_version, "connId": session.conn_id},
        "features": {"methods": list(SERVED_METHODS), "events": [], "capabilities": []},
        "snapshot": {},
        "auth": {"method": session.auth_method, "role": session.role, "scopes": list(session.scopes)},
        "policy": {
            "maxPayload": MAX_PAYLOAD,
            "maxBufferedBytes": MAX_BUFFERED_BYTES,
            "tickIntervalMs": TICK_INTERVAL_MS,
        },
    }


def check_method_scope(session: Session, method: str) -> None:
    """FORBIDDEN with MISSING_SCOPE details when the connection lacks the method's scope."""
    required = METHOD_SCOPES.get(method)
    if required is None:
        return
    if session.role != "operator":
        raise GatewayError(FORBIDDEN, f"unauthorized role: {session.role}")
    if not session.has_scope(required):
        raise GatewayError(
            FORBIDDEN,
            f"missing scope: {required}",
            details={"code": "MISSING_SCOPE", "missingScope": required, "requiredScopes": [required]},
        )
