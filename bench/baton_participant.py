"""``python -m baton.testing.participant`` unchanged, plus readiness lines for the benchmark.

``python -m bench.baton_participant STORE_URL NAME ID LOG_PATH [TTL]`` runs
:func:`baton.testing.participant.main` as is. The test participant prints only ``leader`` and
``lost`` lines, so a benchmark cannot tell when a freshly started one is campaigning; this wrapper
wraps :meth:`Election.start` to also print ``campaigning`` once the election has started, and
``sees-leader ID EPOCH`` on every :class:`~baton.lease.election.NewLeader` event (proof that it has
read the lease from the store and follows it).
"""

from __future__ import annotations

from baton.lease.election import Election, ElectionEvent, NewLeader
from baton.testing import participant

_original_start = Election.start


def _report(event: ElectionEvent) -> None:
    if isinstance(event, NewLeader) and event.leader is not None:
        print(f"sees-leader {event.leader} {event.epoch}", flush=True)


async def _start_and_report(self: Election) -> None:
    self.on_event(_report)
    await _original_start(self)
    print("campaigning", flush=True)


def main() -> None:
    setattr(Election, "start", _start_and_report)  # noqa: B010 - a deliberate patch
    participant.main()


if __name__ == "__main__":
    main()
