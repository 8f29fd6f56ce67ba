#!/usr/bin/env python3
"""`make demo-cluster`: three Stepstone hosts on one S3 bucket, one killed.

Starts SeaweedFS (`weed mini`) as the S3 server on loopback, three
`stepstone serve` processes sharing its bucket (each with a data directory of
its own, as on three machines), uploads the batch example, and starts a load
of batch runs spread over the hosts, each approved through a host that did
not take it. Mid-load, host 3 is killed with SIGKILL; hosts 1 and 2 take its
runs over. Every run must then complete with the output a run on a single
untroubled host gives.

Usage: demo-cluster.py STEPSTONE WEED GUESTS_DIR WORK_DIR
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

RUNS = 60
TOKEN = "sst_demo_cluster"
BUCKET = "stepstone"
ACCESS_KEY, SECRET_KEY = "stepstone-demo", "stepstone-demo-secret"
WEED_PORTS = {"master": 21300, "volume": 21301, "filer": 21302, "s3": 21303, "admin": 21304}
BATCH = {"batch": "nightly", "items": ["eu", "us", "ap"], "pause_ms": 500}


def say(line):
    print(f"== {line}", flush=True)


def request(url, method="GET", body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=90) as reply:
            return json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        sys.exit(f"demo-cluster: {method} {url} answered {error.code}: {error.read().decode()}")


def start_weed(weed, work):
    data = os.path.join(work, "seaweedfs")
    os.makedirs(os.path.join(data, "logs"))
    args = [weed, f"-logdir={data}/logs", "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false", f"-bucket={BUCKET}", "-s3.autoCreateBucket=false"]
    args += [f"-{name}.port={port}" for name, port in WEED_PORTS.items()]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    weed = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in weed.stdout:
        if "All enabled components are running" in line:
            return weed
    sys.exit(f"demo-cluster: SeaweedFS did not start (ports {sorted(WEED_PORTS.values())} taken?); see {data}/logs")


def start_host(stepstone, work, n):
    data = os.path.join(work, f"host-{n}")
    os.makedirs(data)
    config = os.path.join(data, "stepstone.toml")
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    with open(config, "w") as file:
        file.write(f'[[tenants]]\nid = "demo"\ntoken_sha256 = ["{digest}"]\n')
    env = dict(os.environ, STEPSTONE_DATA=data, STEPSTONE_STORE=f"s3://{BUCKET}/demo-cluster",
               AWS_ENDPOINT=f"http://127.0.0.1:{WEED_PORTS['s3']}", AWS_ALLOW_HTTP="true",
               AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               RUST_LOG="stepstone=info")
    log = open(os.path.join(data, "serve.log"), "w")
    host = subprocess.Popen([stepstone, "serve", "--listen", "127.0.0.1:0", "--config", config,
                             "--lease-ttl", "4s"], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    url = host.stdout.readline().strip().removeprefix("listening on ")
    if not url.startswith("http://"):
        sys.exit(f"demo-cluster: host {n} did not start; see {data}/serve.log")
    return host, url, os.path.join(data, "serve.log")


def main(stepstone, weed, guests, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    say("SeaweedFS as the S3 server, on loopback")
    weed = start_weed(weed, work)
    hosts = [start_host(stepstone, work, n) for n in (1, 2, 3)]
    urls = [url for _, url, _ in hosts]
    try:
        say(f"three hosts on s3://{BUCKET}/demo-cluster: {', '.join(urls)}")
        with open(os.path.join(guests, "batch.wasm"), "rb") as file:
            request(f"{urls[0]}/v1/components?name=batch", "POST", raw=file.read())
        request(f"{urls[0]}/v1/runs", "POST", {"component": "batch", "workflow": "process-batch",
                                                "input": BATCH, "run_id": "reference"})
        request(f"{urls[0]}/v1/runs/reference/signals/approve", "POST", {"by": "ops"})
        reference = request(f"{urls[0]}/v1/runs/reference/wait?timeout=60s")
        say(f"a run on one untroubled host gives: {json.dumps(reference['output'])}")

        say(f"{RUNS} batch runs spread over the hosts, each approved through another host")
        live = [0, 1, 2]
        started = time.monotonic()
        for i in range(RUNS):
            owner, other = live[i % len(live)], live[(i + 1) % len(live)]
            request(f"{urls[owner]}/v1/runs", "POST", {"component": "batch", "workflow": "process-batch",
                                                        "input": BATCH, "run_id": f"load-{i}"})
            request(f"{urls[other]}/v1/runs/load-{i}/signals/approve", "POST", {"by": "ops"})
            if i == RUNS // 2:
                hosts[2][0].send_signal(signal.SIGKILL)
                hosts[2][0].wait()
                live = [0, 1]
                say(f"host 3 killed (SIGKILL) with runs in flight; hosts 1 and 2 take them over")
        finished = 0
        for i in range(RUNS):
            status = request(f"{urls[i % 2]}/v1/runs/load-{i}/wait?timeout=60s")
            if status["state"] != "completed" or status["output"] != reference["output"]:
                sys.exit(f"demo-cluster: run load-{i} ended {json.dumps(status)}")
            finished += 1
        taken = sum(open(log).read().count("claimed the run") for _, _, log in hosts[:2])
        say(f"all {finished} runs completed with the reference output in {time.monotonic() - started:.1f} s; "
            f"hosts 1 and 2 took {taken} runs over from host 3")
    finally:
        for host, _, _ in hosts:
            if host.poll() is None:
                host.send_signal(signal.SIGTERM)
                host.wait()
        weed.send_signal(signal.SIGTERM)
        weed.wait()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
