"""The bench shapes on DBOS, with its load generator: a DBOS application
(workflows and steps are Python functions in the client's process, as DBOS
is used) on its system database (SQLite or PostgreSQL, by its URL), started
through its API (`DBOS.start_workflow`, then `get_result`), 64 runs in
flight from 64 threads. Prints one JSON object of figures on stdout, as
drive.mjs does, with the database's durability settings.

    python drive.py '{"database": "sqlite:////var/tmp/x/dbos.sqlite"}'
    python drive.py '{"database": "postgresql://postgres@127.0.0.1:18432/dbos_bench"}'
"""

import json
import sqlite3
import statistics
import sys
import threading
import time

from dbos import DBOS, DBOSConfig

CONFIG = json.loads(sys.argv[1])
WORKFLOWS = CONFIG.get("workflows", 1000)
IN_FLIGHT = CONFIG.get("inFlight", 64)
SEQUENTIAL = CONFIG.get("sequential", [100, 1000])
REPEATS = CONFIG.get("repeats", 3)
WARM_UP = CONFIG.get("warmUp", 256)
DATABASE = CONFIG["database"]

dbos_config: DBOSConfig = {
    "name": "stepstone-bench",
    "system_database_url": DATABASE,
    "log_level": "WARNING",
    # 64 threads wait on results at once; at its default pool of 20
    # connections DBOS warns, and makes callers wait up to 30 s, to increase it.
    "sys_db_pool_size": 2 * IN_FLIGHT,
}
DBOS(config=dbos_config)


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def steps(n: int) -> int:
    total = 0
    for i in range(n):
        total += noop(i)
    return total


def run_one(n: int) -> None:
    handle = DBOS.start_workflow(steps, n)
    if handle.get_result() != n * (n - 1) // 2:
        raise RuntimeError(f"workflow {handle.get_workflow_id()} answered wrongly")


def throughput(n: int, count: int) -> float:
    """`count` runs of `n` steps, IN_FLIGHT at a time: runs a second."""
    lock = threading.Lock()
    left = [count]
    failures: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            try:
                run_one(n)
            except BaseException as e:  # reported below, after the others stop
                failures.append(e)
                return

    threads = [threading.Thread(target=worker) for _ in range(min(IN_FLIGHT, count))]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return count / (time.perf_counter() - began)


def per_step(n: int) -> float:
    """One run of `n` sequential steps, alone: milliseconds a step (median)."""
    samples = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        run_one(n)
        samples.append((time.perf_counter() - began) * 1000 / n)
    return statistics.median(samples)


def settings() -> dict:
    """The durability settings DBOS's system database runs with (DBOS sets
    none of them: the database's defaults)."""
    if DATABASE.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(DATABASE) as db:
            names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
            return {name: db.execute(f"SHOW {name}").fetchone()[0] for name in names}
    with sqlite3.connect(DATABASE.removeprefix("sqlite:///")) as db:
        return {
            "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[db.execute("PRAGMA synchronous").fetchone()[0]],
            "sqlite_version": sqlite3.sqlite_version,
        }


DBOS.launch()
throughput(1, WARM_UP)  # warm-up, as drive.mjs
throughput(3, WARM_UP)
figures = {
    "runs_1_step": throughput(1, WORKFLOWS),
    "runs_3_steps": throughput(3, WORKFLOWS),
}
for n in SEQUENTIAL:
    figures[f"ms_per_step_{n}"] = per_step(n)
figures["settings"] = settings()
DBOS.destroy()
print(json.dumps(figures))
