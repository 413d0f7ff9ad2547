"""Supervisor: one command starts the workers and the gateway, shows model loading, keeps them up.

``python -m launcher [--config F] [--workers N] [--port P] [--tls auto|on|off]
[--llm-url URL [--llm-model M]] [--redis URL|local] [--gateway-only]``

``--gateway-only`` starts no local workers (only the gateway: its workers come from ``workers.urls``
or the shared registry). ``--redis local`` (or ``cluster.redis_url: "local"``) shares the queue
through a private Redis on ``127.0.0.1:<cluster.local_port>``: when nothing answers PING there, the
supervisor runs Debian's ``redis-server`` as its child "redis" (started first, its data in
``<data_dir>/redis``, stopped last); when one already answers (another launcher's on this host),
it is reused.

Why a supervisor: a worker loads its model for a long time and may crash; the operator wants one
process to start, one log to read, progress while models load, automatic restarts, and Ctrl-C
that stops everything without leaving processes behind. Children run in their own process
groups, so a terminal's Ctrl-C reaches only the supervisor, which then stops them in order
(gateway first, so it stops taking sessions, then the workers, then a private redis-server).
Each child also dies with the supervisor when that is killed outright (``kill -9``): see
``launcher/processes.py``. The private redis-server's command and the reuse rules are in
``launcher/redis_server.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import socket
import sys
from typing import TextIO

import httpx

from core.config import AppConfig, add_cli_arguments, config_from_cli
from core.worker_auth import INSTANCE_ENV, auth_headers, load_worker_secret
from launcher.processes import die_with_parent, port_in_use, signal_group
from launcher.redis_server import local_redis, redis_ping

GATEWAY = "gateway"
REDIS = "redis"  # the private redis-server of ``--redis local``: started first, stopped last

def worker_name(index: int) -> str:
    return f"worker {index}"


def child_commands(config: AppConfig, config_path: str, passthrough: list[str]) -> dict[str, list[str]]:
    """The real children: workers first, gateway last (stop order is the reverse)."""
    commands = {
        worker_name(i): [
            sys.executable, "-m", "worker", "--config", config_path, "--index", str(i), *passthrough
        ]
        for i in range(config.workers.count)
    }
    commands[GATEWAY] = [sys.executable, "-m", "gateway", "--config", config_path, *passthrough]
    return commands


_ANY_HOST = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


def _connect_url(host: str, port: int, path: str = "", scheme: str = "http") -> str:
    """A URL to reach a server bound to ``host`` from this machine (0.0.0.0 means any: use loopback)."""
    host = _ANY_HOST.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}{path}"


class Supervisor:
    """Runs ``commands`` (name -> argv), restarting each with backoff, until :meth:`stop`.

    Children named ``worker <i>`` get their ``/health`` watched on ``workers.base_port + i``;
    a child named ``gateway`` gets the final "ready" line. A child named ``redis`` starts first:
    the others start once Redis answers PING on ``cluster.local_port``; it is stopped last.
    Tests pass their own commands and tiny delays.
    """

    def __init__(
        self,
        config: AppConfig,
        commands: dict[str, list[str]] | None = None,
        *,
        config_path: str = "config.json",
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        stable_after_s: float = 60.0,
        poll_interval_s: float = 0.5,
        ready_timeout_s: float = 600.0,
        stop_timeout_s: float = 10.0,
        out: TextIO | None = None,
        err: TextIO | None = None,
        child_env: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.config = config
        self.child_env = child_env or {}  # name -> extra environment (a worker's CUDA_VISIBLE_DEVICES)
        self.commands = commands if commands is not None else child_commands(config, config_path, [])
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.stable_after_s = stable_after_s
        self.poll_interval_s = poll_interval_s
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._out, self._err = out, err
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: dict[str, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []  # the keepers, the starter and the announcer
        self._ready: dict[str, asyncio.Event] = {}
        self._pumps: set[asyncio.Task] = set()
        self._stop_requested = asyncio.Event()
        self._finished = asyncio.Event()
        self._running = False
        self._client: httpx.AsyncClient | None = None
        self._instances: dict[str, str] = {}  # worker name -> the nonce its current start reports on /health
        self._worker_headers: dict[str, str] = {}  # the deployment's worker secret, for /health
        self.exit_code = 0  # 1 when it stopped on an error (another process holds a worker's port)

    @property
    def children(self) -> dict[str, int]:
        """name -> pid of the children started last (for tests and diagnostics)."""
        return {name: proc.pid for name, proc in self._procs.items()}

    # ---------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        """Start every child and keep them running until :meth:`stop` / :meth:`request_stop`."""
        self._running = True
        # trust_env=False: a proxy from the environment must not intercept loopback health checks.
        # verify=False: it only asks our own children whether they are up; the gateway's cert may be
        # self-signed, or name a public host rather than the loopback address probed here.
        self._client = httpx.AsyncClient(timeout=2.0, trust_env=False, verify=False)
        workers = [name for name in self.commands if self._worker_index(name) is not None]
        self._ready = {name: asyncio.Event() for name in workers}
        if workers:  # made here, before any child starts, so the workers and the gateway read one file
            self._worker_headers = auth_headers(load_worker_secret(self.config))
        self._tasks.append(asyncio.create_task(self._start_children()))
        try:
            await self._stop_requested.wait()
        finally:
            await self._shutdown()

    async def _start_children(self) -> None:
        """A private redis-server first, and the rest once it answers PING (the gateway needs it)."""
        if REDIS in self.commands:
            self._tasks.append(asyncio.create_task(self._keep_running(REDIS)))
            await self._wait_for_redis()
        self._tasks += [asyncio.create_task(self._keep_running(name)) for name in self.commands if name != REDIS]
        if GATEWAY in self.commands:
            self._tasks.append(asyncio.create_task(self._announce()))

    async def _wait_for_redis(self) -> None:
        port = self.config.cluster.local_port
        loop = asyncio.get_running_loop()
        warn_at = loop.time() + min(30.0, self.ready_timeout_s)
        while (await asyncio.to_thread(redis_ping, port)) != "+PONG":
            if warn_at is not None and loop.time() >= warn_at:
                warn_at = None
                self._say(f"[supervisor] WARNING: redis does not answer PING on 127.0.0.1:{port} yet; "
                          "the other children wait for it, see its log above", err=True)
            await asyncio.sleep(min(self.poll_interval_s, 0.1))
        self._say(f"[supervisor] redis is ready on 127.0.0.1:{port}")

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop everything; safe to call from a signal handler, more than once."""
        if not self._stop_requested.is_set():
            self._say("[supervisor] stopping")
            self._stop_requested.set()

    async def stop(self) -> None:
        """Stop everything and return once every child is gone."""
        self.request_stop()
        if self._running:
            await self._finished.wait()

    async def _shutdown(self) -> None:
        tasks = [*self._tasks, *self._watchers.values()]  # cancelled, the starter adds no more
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:  # an idle keep-alive TLS connection would stall the gateway's exit
            await self._client.aclose()
        first = [name for name in self._procs if name == GATEWAY]
        rest = [name for name in self._procs if name not in (GATEWAY, REDIS)]
        last = [name for name in self._procs if name == REDIS]  # the gateway may still write to it
        for group in (first, rest, last):
            await asyncio.gather(*(self._terminate(name) for name in group))
        if self._pumps:  # let the last lines through, then drop readers of pipes still held open
            await asyncio.wait(self._pumps, timeout=1.0)
            for task in list(self._pumps):
                task.cancel()
        self._say("[supervisor] stopped")
        self._finished.set()

    async def _terminate(self, name: str) -> None:
        """SIGTERM, wait ``stop_timeout_s``, then SIGKILL the child's process group."""
        proc = self._procs[name]
        if proc.returncode is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self.stop_timeout_s)
            except TimeoutError:
                self._say(f"[supervisor] {name} did not stop in {self.stop_timeout_s:g}s; killing it")
        signal_group(proc.pid, signal.SIGKILL)  # also anything it left behind in its group
        await proc.wait()

    # ---------------------------------------------------------------- children

    async def _keep_running(self, name: str) -> None:
        """Run ``name`` again whenever it exits; delays double up to the cap, reset after a long run."""
        loop = asyncio.get_running_loop()
        failures = 0
        while not self._stop_requested.is_set():
            started = loop.time()
            code = await self._run_once(name)
            if self._stop_requested.is_set():
                return
            if loop.time() - started >= self.stable_after_s:
                failures = 0
            delay = min(self.backoff_max_s, self.backoff_base_s * 2**failures)
            failures += 1
            what = f"exited with code {code}" if code is not None else "could not be started"
            self._say(f"[supervisor] {name} {what}; restarting in {delay:g}s")
            try:
                await asyncio.wait_for(self._stop_requested.wait(), delay)
            except TimeoutError:
                pass

    async def _run_once(self, name: str) -> int | None:
        """Start the child, relay its output, return its exit code (None: it could not start)."""
        instance = {}
        if name in self._ready:  # a worker: this start's nonce, which it reports on /health
            self._instances[name] = instance[INSTANCE_ENV] = secrets.token_hex(8)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.commands[name],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # lines arrive as they are printed
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.child_env.get(name, {}), **instance},
                process_group=0,  # Ctrl-C in the terminal reaches only the supervisor
                preexec_fn=die_with_parent(),  # gone with the supervisor, even after kill -9 (serve()
                # runs this loop on the main thread: see launcher.processes)
                limit=1 << 20,
            )
        except OSError as exc:
            self._say(f"[supervisor] cannot start {name}: {exc}", err=True)
            return None
        self._procs[name] = proc
        self._say(f"[supervisor] started {name} (pid {proc.pid})")
        pumps = [
            asyncio.create_task(self._pump(name, proc.stdout, err=False)),
            asyncio.create_task(self._pump(name, proc.stderr, err=True)),
        ]
        for task in pumps:
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)
        if name in self._ready:
            self._watch(name)
        code = await proc.wait()
        signal_group(proc.pid, signal.SIGKILL)  # leftovers would hold its port and its output pipes
        await asyncio.wait(pumps, timeout=1.0)
        return code

    async def _pump(self, name: str, stream: asyncio.StreamReader, *, err: bool) -> None:
        prefix = f"[{name}] "
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over the 1 MiB limit: skip it rather than stop relaying
                continue
            if not raw:
                return
            self._say(prefix + raw.decode(errors="replace").rstrip("\r\n"), err=err)

    def _say(self, line: str, *, err: bool = False) -> None:
        stream = (self._err or sys.stderr) if err else (self._out or sys.stdout)
        print(line, file=stream, flush=True)

    # ---------------------------------------------------------------- readiness

    @staticmethod
    def _worker_index(name: str) -> int | None:
        head, _, tail = name.partition(" ")
        return int(tail) if head == "worker" and tail.isdigit() else None

    def _watch(self, name: str) -> None:
        """(Re)start following a worker's model loading; a restarted worker loads again."""
        old = self._watchers.get(name)
        if old is not None:
            old.cancel()
        self._watchers[name] = asyncio.create_task(self._watch_worker(name))

    async def _watch_worker(self, name: str) -> None:
        port = self.config.workers.base_port + self._worker_index(name)
        url = _connect_url(self.config.workers.host, port, "/health")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout_s
        last = last_error = None
        while True:
            status, health = await self._get_health(url)
            stranger = self._stranger(name, status, health)
            if stranger:
                self._fail(f"{url} is answered by another process, not the {name} this launcher started "
                           f"({stranger}): another OmniDuplex (or any program) holds port {port}. Stop it, "
                           "or give this one other ports (workers.base_port, gateway.port); exiting")
                return
            if health.get("model_loaded"):
                self._say(f"[{name}] ready")
                self._ready[name].set()
                return
            error = health.get("error")
            if error and error != last_error:  # e.g. a failed model load: say so instead of waiting quietly
                last_error = error
                self._say(f"[{name}] {health.get('state', 'ERROR')}: {error}", err=True)
            progress = health.get("load_progress") or {}
            if isinstance(progress, dict) and progress:
                stage, fraction, detail = (progress.get(k) for k in ("stage", "fraction", "detail"))
                pct = f"{fraction:.0%}" if isinstance(fraction, (int, float)) else None
                if (stage, pct) != last:
                    last = (stage, pct)
                    text = " ".join(str(p) for p in (stage, pct, detail) if p not in (None, ""))
                    self._say(f"[{name}] loading: {text}")
            if deadline is not None and loop.time() >= deadline:
                deadline = None  # warn once, keep watching: a slow first model conversion still ends
                self._say(
                    f"[supervisor] WARNING: {name} is not ready after {self.ready_timeout_s:g}s "
                    f"({url}); still waiting, see its log above",
                    err=True,
                )
            await asyncio.sleep(self.poll_interval_s)

    async def _get_health(self, url: str) -> tuple[int | None, dict]:
        """The HTTP status (None: no answer) and the health JSON ({} when it is not a JSON object)."""
        try:
            response = await self._client.get(url, headers=self._worker_headers)
        except httpx.HTTPError:
            return None, {}
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def _stranger(self, name: str, status: int | None, health: dict) -> str | None:
        """Why what answers on the worker's port is not the worker this start launched; None if it is
        (or nothing answers yet)."""
        if status is None:
            return None
        if status in (401, 403):
            return f"it refused this deployment's worker secret (HTTP {status})"
        if status == 200 and health.get("instance") != self._instances.get(name):
            pid = health.get("pid")
            proc = self._procs.get(name)
            return (f"it reports pid {pid}" if pid is not None else "it does not report this start's nonce") + \
                (f", ours is pid {proc.pid}" if proc is not None else "")
        return None

    def _fail(self, message: str) -> None:
        """Stop everything and make the launcher exit 1 with ``message``."""
        self._say(f"[supervisor] ERROR: {message}", err=True)
        self.exit_code = 1
        self.request_stop()

    async def _announce(self) -> None:
        """Once every worker has loaded and the gateway answers, print where to go.

        No local workers (``--gateway-only``): as soon as the gateway answers."""
        await asyncio.gather(*(event.wait() for event in self._ready.values()))  # none: at once
        gateway = self.config.gateway
        scheme = "https" if gateway.tls_enabled() else "http"
        while True:
            try:
                response = await self._client.get(_connect_url(gateway.host, gateway.port, "/health", scheme))
                if response.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(self.poll_interval_s)
        self._say(f"OmniDuplex is ready: {_connect_url(gateway.host, gateway.port, '/', scheme)}")
        if gateway.host in _ANY_HOST:  # the loopback URL above only works on this machine
            remote = _connect_url(socket.gethostname(), gateway.port, "/", scheme)
            self._say(f"OmniDuplex from other machines: {remote}")
        if not self._ready:
            self._say("[supervisor] gateway only: no local workers; sessions go to workers.urls "
                      "or the workers other hosts registered in the shared queue")


def serve(supervisor: Supervisor) -> int:
    """Run until SIGINT/SIGTERM, then stop the children; 0 = stopped cleanly."""

    async def _main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, supervisor.request_stop)
        await supervisor.run()

    asyncio.run(_main())
    return supervisor.exit_code


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs this machine shows: CUDA_VISIBLE_DEVICES when set (it is the operator's choice),
    else ``nvidia-smi -L``, else torch's count. Empty on a machine without CUDA."""
    import shutil
    import subprocess

    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and not d.strip().startswith("-")]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                                 check=False).stdout
            return [str(i) for i, line in enumerate(x for x in out.splitlines() if x.startswith("GPU "))]
        except (OSError, subprocess.SubprocessError):
            return []
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=60, check=False).stdout.strip()
        return [str(i) for i in range(int(out or 0))]
    except (OSError, ValueError, subprocess.SubprocessError):
        return []


def gpu_plan(config: AppConfig, workers_flag: int | None,
             environ: dict[str, str] | None = None) -> tuple[int | None, dict[str, dict[str, str]]]:
    """``workers.per_gpu`` workers per visible GPU (one by default) for backends that run a local
    model on CUDA.

    Returns the worker count to use (None: keep the configured one) and each worker's extra
    environment: ``CUDA_VISIBLE_DEVICES=<its GPU>``, so inside the worker the model's device is
    simply ``cuda`` / ``auto``; a GPU's workers are next to each other. With ``--workers`` given,
    that count wins and GPUs are shared round-robin. No GPUs, or a CPU backend: nothing changes.
    """
    from core.processors import wants_gpu

    if not wants_gpu(config.backend.name, config.backend.options):
        return None, {}
    gpus = visible_gpus(environ)
    if not gpus:
        return None, {}
    if workers_flag is not None:
        return None, {worker_name(i): {"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} for i in range(workers_flag)}
    per = config.workers.per_gpu
    return len(gpus) * per, {worker_name(i): {"CUDA_VISIBLE_DEVICES": gpus[i // per]} for i in range(len(gpus) * per)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher", description=__doc__.splitlines()[0])
    add_cli_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_cli(args)
        # --gateway-only: no local workers, so none to place on GPUs
        gpu_workers, child_env = gpu_plan(config, args.workers) if config.workers.count else (None, {})
        if gpu_workers is not None:
            args.workers = gpu_workers  # the gateway must expect the same workers: pass it to every child
            config = config_from_cli(args)
            print(f"[supervisor] {gpu_workers // config.workers.per_gpu} GPU(s) visible: "
                  f"{config.workers.per_gpu} {config.backend.name} worker(s) each "
                  f"({', '.join(e['CUDA_VISIBLE_DEVICES'] for e in child_env.values())})", flush=True)
    except SystemExit as exc:
        return int(exc.code or 2)
    from gateway.tls import TlsError, tls_files

    try:  # a bad cert stops here once, not in a gateway restart loop; a self-signed one is made here
        tls_files(config, announce=False)
    except TlsError as exc:
        print(f"omniduplex: {exc}", file=sys.stderr)
        return 2
    taken = ports_taken(config)
    if taken:
        print(f"omniduplex: {taken}", file=sys.stderr)
        return 2
    commands: dict[str, list[str]] = {}
    if config.cluster.redis_url == "local":
        redis = local_redis(config)
        if isinstance(redis, int):
            return redis
        if redis:
            commands[REDIS] = redis
    commands.update(child_commands(config, args.config, cli_passthrough(args)))
    return serve(Supervisor(config, commands, child_env=child_env))


def ports_taken(config: AppConfig) -> str | None:
    """Why this launcher cannot start here: a port of its gateway or of a local worker is taken by
    another process (a second instance would otherwise relay this one's sessions to the stranger)."""
    wanted = [(worker_name(i), config.workers.host, config.workers.base_port + i) for i in range(config.workers.count)]
    wanted.append((GATEWAY, config.gateway.host, config.gateway.port))
    for name, host, port in wanted:
        if port_in_use(port, host):
            return (f"port {port} ({name}, {host}) is already in use by another process (another OmniDuplex "
                    f"on this host?). Stop it, or choose other ports: workers.base_port / gateway.port (--port)")
    return None


def cli_passthrough(args: argparse.Namespace) -> list[str]:
    """The command-line overrides every child gets too, so they all see the same configuration."""
    passthrough = []
    if args.workers is not None:
        passthrough += ["--workers", str(args.workers)]
    if args.port is not None:
        passthrough += ["--port", str(args.port)]
    if args.tls is not None:
        passthrough += ["--tls", args.tls]
    for flag, value in (("--llm-url", args.llm_url), ("--llm-model", args.llm_model), ("--redis", args.redis)):
        if value is not None:
            passthrough += [flag, value]
    if args.gateway_only:
        passthrough.append("--gateway-only")
    return passthrough


if __name__ == "__main__":
    sys.exit(main())
