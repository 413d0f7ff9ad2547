"""Child processes for the launcher, the benchmarks and the tests: one way to start and stop them.

- :func:`free_port` / :func:`free_ports`: loopback ports nobody listens on, never the same twice.
- :func:`spawn` / :func:`spawn_module`: a child (``python -m module ...``) with the repository on
  ``PYTHONPATH``, its output in a log file, in a process group of its own (a terminal's Ctrl-C
  reaches only the parent; :func:`signal_group` reaches the child's own children too).
- :func:`stop` / :func:`stop_all`: SIGTERM to the child's group, SIGKILL after a grace period.

Children die with their parent, even a parent killed with ``kill -9``: before ``exec`` the child
asks Linux for ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (:func:`die_with_parent`). Linux sends that
signal when the *thread* that forked the child ends, not the process, so :func:`spawn` forks on the
main thread, and from any other thread hands the fork to one long-lived spawner thread (which ends
with the process). Code that forks itself with :func:`die_with_parent` as ``preexec_fn`` (the
supervisor's asyncio loop) must do so from a thread that lives as long as its children should.
The signal reaches the child only, not what the child started in turn; those go with the child's
process group when the parent stops it (:func:`stop`), and on ``kill -9`` only if they use
:func:`die_with_parent` themselves. Elsewhere than Linux nothing is asked, and children may outlive
a killed parent as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PR_SET_PDEATHSIG = 1

# Ports this process has handed out. A probe socket is closed before the caller binds the port, and the
# kernel may give the same port to the next probe, so a gateway port picked right after a worker block
# could land inside it (CI met "gateway.port 51601 collides with worker ports 51601-51601").
_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def _probe_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port() -> int:
    """A free port not handed out before by this process."""
    with _ports_lock:
        for _ in range(1000):
            port = _probe_port()
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("no free port left that was not handed out before")


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports, none handed out before by this process."""
    with _ports_lock:
        for _ in range(100):
            base = _probe_port()
            block = range(base, base + n)
            if base + n >= 65000 or any(p in _handed_out for p in block):
                continue
            if all(port_is_free(p) for p in block):
                _handed_out.update(block)
                return base
    raise RuntimeError("no free port block")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` can be bound now (nothing listens there)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server already listens on ``host:port`` (binding as a server would, with
    SO_REUSEADDR: connections of a stopped server still in TIME_WAIT do not count).
    ``0.0.0.0``/``::``/empty probe every address; a host name is resolved."""
    host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # the server's own start will say why
    for family, kind, proto, _, addr in infos[:1]:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as exc:
                return exc.errno == errno.EADDRINUSE
    return False


# ---------------------------------------------------------------- dying with the parent


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()  # loaded here, in the parent: a forked child should not go looking for libraries


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process (precisely: the thread
    forking it) ends; None where Linux's ``prctl`` is not available.

    The parent may already be gone between ``fork`` and ``prctl``: the child then checks that its
    parent is still this process and kills itself if not (it was reparented to init)."""
    if _prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _fork_thread() -> ThreadPoolExecutor:
    """One thread that lives as long as the process: forks for callers on other (short-lived) threads."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(1, thread_name_prefix="launcher-spawn")
        return _spawner


# ---------------------------------------------------------------- starting


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child: the repository importable (ahead of what
    ``PYTHONPATH`` already held: packages installed with ``pip --target`` stay importable), no model
    downloads (tests and benchmarks use the local model cache), output not buffered; then ``extra``."""
    path = os.pathsep.join([str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                         if p and p != str(ROOT)]])
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": path,
            "PYTHONUNBUFFERED": "1", **(extra or {})}


def spawn(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | str = ROOT,
    stdout: int | None = None,
    own_group: bool = True,
    text: bool = False,
) -> subprocess.Popen:
    """Start ``argv``: output appended to ``log`` (stdout and stderr), or to ``stdout`` (e.g.
    ``subprocess.PIPE``), else inherited; environment :func:`child_env` plus ``env``; in a process
    group (session) of its own unless ``own_group`` is false; killed when this process dies."""
    out = open(log, "ab") if log is not None else stdout  # noqa: SIM115 - the child holds it, we close ours
    kwargs = dict(cwd=cwd, env=child_env(env), stdin=subprocess.DEVNULL, stdout=out,
                  stderr=subprocess.STDOUT if out is not None else None, start_new_session=own_group,
                  preexec_fn=die_with_parent(), text=text)
    try:
        if threading.current_thread() is threading.main_thread():
            proc = subprocess.Popen(list(argv), **kwargs)
        else:
            proc = _fork_thread().submit(subprocess.Popen, list(argv), **kwargs).result()
        proc.own_group = own_group  # what stop() signals: the child's group, or the child alone
        return proc
    finally:
        if log is not None:
            out.close()


def python_module(module: str, *args: str, prefix: Sequence[str] = ()) -> list[str]:
    """``[*prefix, python, -m, module, *args]`` with this interpreter."""
    return [*prefix, sys.executable, "-m", module, *args]


def spawn_module(module: str, *args: str, prefix: Sequence[str] = (), **kwargs) -> subprocess.Popen:
    """:func:`spawn` of ``python -m module *args`` (``prefix``: a command to run it under, such as
    ``ip netns exec NS``)."""
    return spawn(python_module(module, *args, prefix=prefix), **kwargs)


# ---------------------------------------------------------------- stopping


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid`` (a child started in its own group), so its own
    children get it too; gone already is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(proc: subprocess.Popen, sig: int) -> None:
    if getattr(proc, "own_group", False):
        signal_group(proc.pid, sig)
    elif proc.poll() is None:
        proc.send_signal(sig)


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int | None:
    """SIGTERM to the child's group, SIGKILL to the group after ``grace`` seconds; its exit code."""
    return stop_all([proc], grace)[0]


def stop_all(procs: Iterable[subprocess.Popen], grace: float = 10.0) -> list[int | None]:
    """:func:`stop` for several children at once: all get SIGTERM first, then one shared grace
    period, then SIGKILL for the ones still there (and for what they left in their groups)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        _signal(proc, signal.SIGKILL)  # the child if stubborn, and anything it left behind
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
    return [proc.returncode for proc in procs]


def kill(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGKILL the child alone (a crash, as ``kill -9`` would be) and reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout)
