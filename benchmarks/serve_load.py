"""`symcalc serve` under load: ``python benchmarks/serve_load.py`` (about 3 minutes; ``--quick``
about 1).

Starts ``symcalc serve`` on 127.0.0.1 (an unused port, loopback only), and measures:

(a) 20 clients at once for 30 s, each asking solves and, every 12th request, a plan: every
    answer must equal what ``symcalc solve|plan ... --json`` prints for the same question (a
    plan's own run time, "seconds", aside);
(b) the workers' memory (RSS) over at least 2,000 requests: growth from after the warm-up to the
    end (target under 50 %);
(c) 400 slow clients (each sends its headers a byte at a time, and connects again when cut off)
    while a normal client asks: it must get every answer, the slowest within 2 s;
(d) 1,100 slow clients against a server whose file-descriptor limit is 1,024 (soft and hard):
    the server stays up, its log stays short, the normal client gets every answer.

Prints the figures and a PASS/FAIL line for each; exits 1 if any fails. Every loop is bounded
and the servers are stopped at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import selectors
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent   # the checkout whose symcalc is run (--root)
HOST = "127.0.0.1"
WARM = 36          # requests before the first RSS figure: every question asked at least once

SOLVES = [
    'solve mfu n_params=7e9 "tokens_per_second=150000 token/s" n_gpus=64 --option zero_stage=1 --hardware h100',
    "solve total_memory_per_gpu --model llama3-8b dp=8 n_gpus=8 micro_batch_size=2 --stack torchtitan "
    "--option recompute=selective --to GiB",
    "solve n_gpus --model llama3-70b --hardware h100 n_tokens=15e12 train_time=90day mfu=40%",
    'solve n_gpus n_params=30e9 "n_tokens=600e9 token" train_time=30day mfu=45% "peak_flops=989 TFLOP/s"',
    'solve n_gpus "total_cost=2e6 USD" "gpu_hour_price=2 USD/hour" "train_time=60 day"',
    "solve step_time --model llama3-70b --hardware h100 tp=8 pp=1 cp=1 dp=256 n_gpus=2048 micro_batch_size=1 "
    "global_batch_size=2048 'seq_len=8192 token' --option attention_kernel=flash --option zero_stage=1",
    'solve mfu --model llama3-70b --hardware h100 n_gpus=2048 "step_time=8.359 s" global_batch_size=2048 '
    "'seq_len=8192 token'",
]
PLANS = [
    "plan --model llama3-8b --hardware h100 --gpus 64 --top 3 --global-batch-size 512 --option zero_stage=1",
    "plan --model llama3-70b --hardware h100 --gpus 1024 --top 5 --tokens 15e12 --global-batch-size 1024",
]


def as_request(command: str) -> tuple[str, dict]:
    """The API's (path, body) for a command line: NAME=VALUE -> values, --option -> options, the
    other options by their names (dashes as underscores; counts as numbers)."""
    args = shlex.split(command)
    kind, rest = args[0], args[1:]
    body: dict = {"values": {}, "options": {}}
    if kind == "solve":
        body["target"], rest = rest[0], rest[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg.startswith("--"):
            key, value = arg[2:].replace("-", "_"), rest[i + 1]
            i += 2
            if key == "option":
                body["options"].__setitem__(*value.split("=", 1))
            else:
                body[key] = int(value) if key in ("gpus", "top", "global_batch_size") else value
        else:
            name, value = arg.split("=", 1)
            body["values"][name] = value
            i += 1
    return f"/api/{kind}", {k: v for k, v in body.items() if v != {}}


def comparable(kind_path: str, text: str):
    """What must match the command line's: a solve's text byte for byte, a plan's JSON but its run time."""
    if kind_path.endswith("plan"):
        data = json.loads(text)
        data.pop("seconds", None)
        return data
    return text.rstrip("\n")


def expected_answers(commands: list[str]) -> dict[str, object]:
    """Each command's ``--json`` output, run as the command line (in parallel, 2 at a time)."""
    procs: dict[str, subprocess.Popen] = {}
    out: dict[str, object] = {}
    for command in commands:
        while len(procs) >= 2:
            _collect(procs, out)
        procs[command] = subprocess.Popen([sys.executable, "-m", "symcalc", *shlex.split(command), "--json"],
                                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while procs:
        _collect(procs, out)
    return out


def _collect(procs: dict, out: dict) -> None:
    command, proc = next(iter(procs.items()))
    text, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"the command line failed on {command!r}: {err.strip() or text.strip()}")
    out[command] = comparable(as_request(command)[0], text)
    del procs[command]


class Server:
    """``symcalc serve`` in a new process on an unused loopback port; its log to a file."""

    def __init__(self, workers: int, fd_limit: int | None = None) -> None:
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile(prefix="serve-load-", suffix=".log", delete=False)

        def limit_fds():
            if fd_limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))
        self.proc = subprocess.Popen([sys.executable, "-m", "symcalc", "serve", "--host", HOST, "--port",
                                      str(self.port), "--workers", str(workers)], cwd=ROOT, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=limit_fds)
        deadline = time.monotonic() + 180
        while True:
            try:
                if request(self.port, "GET", "/api/presets")[0] == 200 and len(self.worker_pids()) == workers:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"symcalc serve did not start: {self.log_text()}")
            time.sleep(0.2)

    def worker_pids(self) -> list[int]:
        pids = []
        for child in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split():
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
                pids.append(int(child))
        return pids

    def worker_rss(self) -> int:
        """The workers' resident memory, bytes (summed)."""
        return sum(rss(pid) for pid in self.worker_pids())

    def log_bytes(self) -> int:
        return os.path.getsize(self.log.name)

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log.name)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def request(port: int, method: str, path: str, body: dict | None = None, timeout: float = 300) -> tuple[int, str]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


class Tally:
    """Requests, wrong answers and failures, counted across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked = self.wrong = self.failed = 0
        self.slowest = 0.0
        self.examples: list[str] = []

    def add(self, ok: bool, failed: bool, seconds: float, what: str) -> None:
        with self.lock:
            self.asked += 1
            self.wrong += not ok and not failed
            self.failed += failed
            self.slowest = max(self.slowest, seconds)
            if (not ok or failed) and len(self.examples) < 3:
                self.examples.append(what[:300])


def mixed_client(port: int, expected: dict, until: float, tally: Tally, start: int, most: int | None = None) -> None:
    """Ask until ``until`` (or ``most`` requests): solves, and a plan every 12th request."""
    n = start
    while time.monotonic() < until and (most is None or tally.asked < most):
        n += 1
        command = PLANS[n // 12 % len(PLANS)] if n % 12 == 0 else SOLVES[n % len(SOLVES)]
        path, body = as_request(command)
        t0 = time.monotonic()
        try:
            status, text = request(port, "POST", path, body)
        except OSError as e:
            tally.add(False, True, time.monotonic() - t0, f"{command}: {e}")
            continue
        ok = status == 200 and comparable(path, text) == expected[command]
        tally.add(ok, status != 200, time.monotonic() - t0, f"{command}: {status} {text}")


def run_clients(port: int, expected: dict, clients: int, seconds: float, most: int | None = None) -> Tally:
    tally = Tally()
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=mixed_client, args=(port, expected, until, tally, i * 5, most))
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally


class SlowClients:
    """``count`` connections that send a request's headers one byte at a time and never finish
    them; a connection the server closes is opened again. One thread, a selector."""

    HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.stop = threading.Event()
        self.cut_off = self.refused_connects = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowClients:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)

    def _open(self, sel: selectors.BaseSelector) -> None:
        try:
            s = socket.create_connection((HOST, self.port), timeout=10)
        except OSError:
            self.refused_connects += 1
            return
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, data=[0])

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for _ in range(self.count):
            self._open(sel)
        while not self.stop.is_set():
            for key in list(sel.get_map().values()):
                sent = key.data
                byte = self.HEAD[sent[0]:sent[0] + 1] or b"a"
                try:
                    key.fileobj.send(byte)
                    sent[0] += 1
                except OSError:
                    pass
            for key, _ in sel.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    self.cut_off += 1
                    if not self.stop.is_set():
                        self._open(sel)
        for key in list(sel.get_map().values()):
            key.fileobj.close()


def normal_client(port: int, seconds: float, expected: dict) -> Tally:
    """One client asking in turn for the page and a solve, for ``seconds``."""
    tally = Tally()
    until = time.monotonic() + seconds
    command = SOLVES[0]
    path, body = as_request(command)
    while time.monotonic() < until:
        for method, where, payload in (("GET", "/", None), ("POST", path, body)):
            t0 = time.monotonic()
            try:
                status, text = request(port, method, where, payload, timeout=10)   # 5x the target: a failure anyway
            except OSError as e:
                tally.add(False, True, time.monotonic() - t0, f"{where}: {e}")
                continue
            ok = status == 200 and (payload is None or comparable(path, text) == expected[command])
            tally.add(ok, status != 200, time.monotonic() - t0, f"{where}: {status} {text}")
        time.sleep(0.2)
    return tally


def verdict(name: str, ok: bool, figures: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {figures}")
    return ok


def mixed_load(server: Server, expected: dict, seconds: float, total: int) -> list[bool]:
    """(a) and (b): the mixed load, then more until ``total`` requests, the workers' RSS around it."""
    warm = run_clients(server.port, expected, 2, 120, most=WARM)
    pids, before = server.worker_pids(), server.worker_rss()
    t0 = time.monotonic()
    a = run_clients(server.port, expected, 20, seconds)
    took = time.monotonic() - t0
    print(f"(a) 20 clients, {took:.0f} s: {a.asked} requests ({a.asked / took:.1f}/s), {a.wrong} answers unlike "
          f"the command line's, {a.failed} failed, slowest {a.slowest:.2f} s")
    more = run_clients(server.port, expected, 4, 1800, most=max(0, total - a.asked)) if a.asked < total else Tally()
    after, asked = server.worker_rss(), a.asked + more.asked
    growth = 100 * (after - before) / before
    same = sorted(server.worker_pids()) == sorted(pids)
    print(f"(b) workers' RSS {before / 2**20:.0f} MB after {warm.asked} warm-up requests -> {after / 2**20:.0f} MB "
          f"after {asked} more ({growth:+.0f} %); the same worker processes throughout: {same}; "
          f"server process {rss(server.proc.pid) / 2**20:.0f} MB")
    for example in (a.examples + more.examples)[:3]:
        print("    e.g.", example)
    return [verdict("(a) every answer equals the command line's", a.asked > 0 and a.wrong == a.failed == more.wrong
                    == more.failed == warm.wrong == warm.failed == 0, f"{a.asked} requests, {a.wrong} wrong, "
                    f"{a.failed} failed"),
            verdict("(b) RSS growth under 50 % over at least 2,000 requests", asked >= total and same and growth < 50,
                    f"{growth:+.0f} % over {asked} requests")]


def slow_flood(server: Server, expected: dict, count: int, seconds: float, label: str) -> bool:
    """(c) and (d): ``count`` slow clients while a normal client asks."""
    log0 = server.log_bytes()
    with SlowClients(server.port, count) as slow:
        time.sleep(min(2.0, seconds / 4))       # let the slow clients connect first
        normal = normal_client(server.port, seconds, expected)
    alive = server.proc.poll() is None
    logged = server.log_bytes() - log0
    print(f"{label} {count} slow clients ({slow.cut_off} cut off, {slow.refused_connects} connects refused): the "
          f"normal client got {normal.asked - normal.failed - normal.wrong}/{normal.asked} answers, slowest "
          f"{normal.slowest:.2f} s; server up: {alive}; log grew {logged} bytes")
    for example in normal.examples:
        print("    e.g.", example)
    return verdict(f"{label} a normal client gets every answer within 2 s", alive and normal.asked > 0 and
                   normal.failed == normal.wrong == 0 and normal.slowest <= 2.0 and logged < 10_000,
                   f"{normal.asked} answers, slowest {normal.slowest:.2f} s, log +{logged} bytes")


def main(argv: list[str] | None = None) -> int:
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs: 8 s of load, 10 s of slow clients")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=2000, help="requests for the RSS figure (at least)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (e.g. an older one, to compare)")
    args = ap.parse_args(argv)
    ROOT = args.root.resolve()
    load_s, slow_s = (8.0, 10.0) if args.quick else (30.0, 20.0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))   # 1,100 sockets of our own
    t0 = time.monotonic()
    expected = expected_answers(SOLVES + PLANS)
    print(f"the command line's answers to {len(expected)} questions: {time.monotonic() - t0:.0f} s")
    results: list[bool] = []
    server = Server(args.workers)
    try:
        results += mixed_load(server, expected, load_s, args.requests)
        results.append(slow_flood(server, expected, 400, slow_s, "(c)"))
    finally:
        server.stop()
    scarce = Server(args.workers, fd_limit=1024)
    try:
        results.append(slow_flood(scarce, expected, 1100, slow_s, "(d) fd limit 1,024:"))
    finally:
        scarce.stop()
    print(f"{sum(results)}/{len(results)} PASS in {time.monotonic() - t0:.0f} s")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
