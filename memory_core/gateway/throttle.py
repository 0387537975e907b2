"""Failed-authentication throttling per remote address, for the gateway's ``connect`` handshake.

The first ``free`` wrong secrets from an address are answered at once; each further one waits
``base_delay_s`` doubled per failure (capped at ``max_delay_s``) before its error is sent and the
connection closed; after ``lockout_after`` failures the address is locked out for ``lockout_s``
seconds: its new connections are closed at once, without checking any secret. A successful
connect, or ``forget_after_s`` without a failure, clears the address's record.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

AUTH_RATE_LIMITED = "AUTH_RATE_LIMITED"


@dataclass
class _Record:
    failures: int = 0
    last_failure: float = 0.0
    locked_until: float = 0.0


class AuthThrottle:
    """Per-address failure counts: :meth:`failed` gives the delay before answering, :meth:`locked`
    the seconds left of a lockout. At most ``max_addresses`` records are kept (oldest dropped)."""

    def __init__(
        self,
        *,
        free: int = 3,
        base_delay_s: float = 0.5,
        max_delay_s: float = 8.0,
        lockout_after: int = 10,
        lockout_s: float = 60.0,
        forget_after_s: float = 600.0,
        max_addresses: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = free
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.lockout_after = lockout_after
        self.lockout_s = lockout_s
        self.forget_after_s = forget_after_s
        self.max_addresses = max_addresses
        self.clock = clock
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def _record(self, address: str) -> _Record | None:
        record = self._records.get(address)
        now = self.clock()
        if record is not None and now - record.last_failure > self.forget_after_s and now >= record.locked_until:
            del self._records[address]
            return None
        return record

    def locked(self, address: str) -> float:
        """Seconds left of ``address``'s lockout (0 when it may try a secret)."""
        record = self._record(address)
        return max(0.0, record.locked_until - self.clock()) if record is not None else 0.0

    def delay_for(self, failures: int) -> float:
        """The wait before answering the ``failures``-th failure in a row."""
        if failures <= self.free:
            return 0.0
        return min(self.max_delay_s, self.base_delay_s * 2 ** (failures - self.free - 1))

    def failed(self, address: str) -> float:
        """Record a wrong secret from ``address``; the delay before its error is sent."""
        record = self._record(address) or _Record()
        record.failures += 1
        record.last_failure = self.clock()
        if record.failures >= self.lockout_after:
            record.locked_until = record.last_failure + self.lockout_s
        self._records[address] = record
        self._records.move_to_end(address)
        while len(self._records) > self.max_addresses:
            self._records.popitem(last=False)
        return self.delay_for(record.failures)

    def succeeded(self, address: str) -> None:
        """A correct secret from ``address`` clears its failures."""
        self._records.pop(address, None)
