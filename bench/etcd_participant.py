"""The etcd reference participant: the same job as :mod:`baton.testing.participant`, done with
etcd's election API through its JSON gateway (etcd 3.4).

``python -m bench.etcd_participant ENDPOINT NAME ID LOG_PATH [TTL]``:

1. grant a lease of TTL seconds and keep it alive every TTL/4 in a thread;
2. campaign (``POST /v3/election/campaign`` blocks until this participant leads); the returned
   leader key's creation revision is the fencing epoch (revisions only grow);
3. while the lease is alive by the local clock (last successful keepalive *sent* + TTL), append
   ``(revision, ID)`` to the :class:`~baton.testing.fenced.FencedLog` every 20 ms;
4. if the lease is lost, start over with a new lease.

It prints ``campaigning`` once its key exists in etcd (so it is queued behind the leader),
``leader REV`` when it leads and ``lost REV`` when it stops. Bytes fields of the gateway
(``name``, ``value``, ``key``) are base64-encoded.
"""

from __future__ import annotations

import base64
import sys
import threading
import time
from typing import Any

import httpx

from baton.testing.fenced import FencedLog

#: How often the fenced log is appended to while leading (as baton's test participant).
APPEND_INTERVAL = 0.02


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = client.post(path, json=body)
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    return data


class KeptLease:
    """An etcd lease kept alive by a thread until it is lost or :meth:`stop` is called."""

    def __init__(self, endpoint: str, ttl: int) -> None:
        self._client = httpx.Client(base_url=endpoint, timeout=httpx.Timeout(max(1.0, ttl / 2)))
        sent = time.monotonic()
        grant = post(self._client, "/v3/lease/grant", {"TTL": ttl})
        self.id = int(grant["ID"])
        self._valid_until = sent + int(grant["TTL"])
        self._interval = ttl / 4
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep_alive, daemon=True)
        self._thread.start()

    @property
    def valid(self) -> bool:
        return not self._done.is_set() and time.monotonic() < self._valid_until

    def _keep_alive(self) -> None:
        while not self._done.wait(self._interval):
            sent = time.monotonic()
            try:
                answer = post(self._client, "/v3/lease/keepalive", {"ID": str(self.id)})
            except httpx.HTTPError:
                continue  # retried at the next interval; the local deadline decides
            ttl = int(answer.get("result", {}).get("TTL", 0))
            if ttl <= 0:  # expired or revoked
                self._done.set()
                return
            self._valid_until = sent + ttl

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._client.close()


def campaign_once(endpoint: str, name: str, node_id: str, log: FencedLog, ttl: int) -> None:
    lease = KeptLease(endpoint, ttl)
    key = f"{name}/{lease.id:x}"  # how etcd's concurrency.Election names a candidate's key
    result: list[int] = []
    failure: list[BaseException] = []

    def campaign() -> None:
        with httpx.Client(base_url=endpoint, timeout=httpx.Timeout(None)) as client:
            try:
                body = {"name": b64(name), "value": b64(node_id), "lease": str(lease.id)}
                answer = post(client, "/v3/election/campaign", body)
                result.append(int(answer["leader"]["rev"]))
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                failure.append(exc)

    thread = threading.Thread(target=campaign, daemon=True)
    thread.start()
    with httpx.Client(base_url=endpoint, timeout=5.0) as client:
        while thread.is_alive():
            found = post(client, "/v3/kv/range", {"key": b64(key), "count_only": True})
            if int(found.get("count", 0)) > 0:
                break
            time.sleep(0.005)
    print("campaigning", flush=True)  # queued (or already elected: the thread is done)
    thread.join()
    if not result:
        print(f"campaign failed: {failure[0] if failure else 'no answer'}", flush=True)
        lease.stop()
        time.sleep(ttl / 4)
        return
    epoch = result[0]
    print(f"leader {epoch}", flush=True)
    while lease.valid:
        log.append(epoch, node_id)
        time.sleep(APPEND_INTERVAL)
    print(f"lost {epoch}", flush=True)
    lease.stop()


def main() -> None:
    endpoint, name, node_id, log_path = sys.argv[1:5]
    ttl = round(float(sys.argv[5])) if len(sys.argv) > 5 else 2
    log = FencedLog(log_path)
    while True:
        campaign_once(endpoint, name, node_id, log, ttl)


if __name__ == "__main__":
    main()
