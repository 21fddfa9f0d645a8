"""The command the campaign runs under ``baton elect``: while it runs, it writes to the fenced
resource every ``interval`` seconds with the epoch ``baton elect`` gave it, and records each
attempt and its answer in the history.

``python -m baton.chaos.job RESOURCE HISTORY_DIR [INTERVAL]``
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from baton.chaos.history import History
from baton.chaos.resource import FencedResource


def main(argv: list[str]) -> int:
    resource = FencedResource(Path(argv[0]))
    lease, holder = os.environ["BATON_LEASE"], os.environ["BATON_HOLDER"]
    epoch = int(os.environ["BATON_EPOCH"])
    history = History(Path(argv[1]), f"job-{lease}-{holder}")
    interval = float(argv[2]) if len(argv) > 2 else 0.1
    halt = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: halt.set())
    history.record("job-start", lease=lease, epoch=epoch, writer=holder)
    while not halt.is_set():
        seq = resource.append(lease, epoch, holder)
        history.record("fenced", lease=lease, epoch=epoch, writer=holder, seq=seq)
        halt.wait(interval)
    history.record("job-stop", lease=lease, epoch=epoch, writer=holder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
