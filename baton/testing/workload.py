"""A generated row-change workload on an ``accounts`` table, for cascade tests and the demo."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

ACCOUNTS = """CREATE TABLE IF NOT EXISTS accounts (
    id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, name TEXT, updated_at REAL
)"""


def create_accounts(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(ACCOUNTS)


def run_workload(path: Path, transactions: int, seed: int = 1, max_rows: int = 20) -> int:
    """Random inserts (70%), updates (20%) and deletes (10%) in transactions of 1..max_rows
    changes, including rows inserted and deleted in one transaction; the number of changes."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    changes = 0
    try:
        live: list[int] = [r[0] for r in conn.execute("SELECT id FROM accounts")]
        next_id = max(live, default=0) + 1
        for _ in range(transactions):
            conn.execute("BEGIN IMMEDIATE")
            for _ in range(rng.randint(1, max_rows)):
                roll = rng.random()
                if roll < 0.7 or not live:
                    conn.execute(
                        "INSERT INTO accounts (id, balance, name, updated_at) VALUES (?, ?, ?, ?)",
                        (next_id, rng.randint(0, 10**6), f"n{next_id}", time.time()),
                    )
                    live.append(next_id)
                    if rng.random() < 0.05:  # inserted and deleted in the same transaction
                        conn.execute("DELETE FROM accounts WHERE id = ?", (next_id,))
                        live.pop()
                        changes += 1
                    next_id += 1
                elif roll < 0.9:
                    key = rng.choice(live)
                    conn.execute(
                        "UPDATE accounts SET balance = ?, updated_at = ? WHERE id = ?",
                        (rng.randint(0, 10**6), time.time(), key),
                    )
                else:
                    key = live.pop(rng.randrange(len(live)))
                    conn.execute("DELETE FROM accounts WHERE id = ?", (key,))
                changes += 1
            conn.execute("COMMIT")
    finally:
        conn.close()
    return changes
