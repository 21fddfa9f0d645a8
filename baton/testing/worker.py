"""A leader's stand-in workload: append ``(BATON_EPOCH, BATON_HOLDER)`` to a :class:`FencedLog`
every few milliseconds until stopped. Used as the COMMAND of ``baton elect`` in tests and the
demo: ``python -m baton.testing.worker LOG_PATH [INTERVAL]``."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from baton.testing.fenced import FencedLog


def main() -> int:
    log = FencedLog(sys.argv[1])
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
    epoch = int(os.environ["BATON_EPOCH"])
    holder = os.environ["BATON_HOLDER"]
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    # Lets a test check that this process is gone before another leader starts.
    Path(f"{sys.argv[1]}.{epoch}.pid").write_text(str(os.getpid()))
    while not stop:
        log.append(epoch, holder)
        time.sleep(interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
