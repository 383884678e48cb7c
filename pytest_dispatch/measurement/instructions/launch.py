"""Counted mode's launch: the session re-executed under callgrind, in a fixed environment.

``relaunch`` runs the pytest session again under ``valgrind --tool=callgrind`` with
collection off, in an environment fixed so that two sessions can be compared
(``fixed_environment``); ``build_helper`` compiles the small C helper whose client
requests open and close the counting windows (``windows.Counter``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pytest_dispatch.errors import Unavailable

COUNTED_ENV = "PYTEST_DISPATCH_COUNTED"  # in the relaunched session: the folder callgrind dumps into
VALGRIND_VERSION_ENV = "PYTEST_DISPATCH_VALGRIND"  # in the relaunched session: `valgrind --version`
PAD_ENV = "PYTEST_DISPATCH_PAD"  # pads the environment to a fixed size (see fixed_environment)
KEEP_DUMPS_ENV = "PYTEST_DISPATCH_KEEP_DUMPS"  # a folder: each window's dump is moved there, not deleted
# in a relaunched session whose tests run in pytest-xdist's workers: the command (a JSON list)
# that starts each worker's Python under callgrind; the controller itself runs natively
WORKER_LAUNCHER_ENV = "PYTEST_DISPATCH_WORKER_LAUNCHER"
HELPER_SOURCE = Path(__file__).parent.parent / "callgrind_helper.c"
# Arguments and environment of the relaunched session padded to this many bytes: their size
# moves the initial stack, and with it the instructions of code that does not change.
ENVIRONMENT_BYTES = 32768
# Variables that change what the interpreter does, set or removed the same way for every session.
# glibc's malloc: fixed thresholds, no per-thread caches and no fast bins.  What an allocation
# does inside is charged a fixed price anyway (ALLOCATION_PRICE), but *where* it lands is not:
# with the caches, which chunk the calling thread gets depends on what the driver's threads
# freed and when, and hash tables keyed by addresses (the driver's, the interpreter's) then
# probe differently: without these settings two lavapipe sessions of the same tests read
# every test 0.6-0.9% apart; with them, 0.03% (docs/RESULTS.md@cb24f50 section 11).
FIXED_VARIABLES = {
    "PYTHONHASHSEED": "0",
    "PYTHONMALLOC": "pymalloc",
    # the first session after a change would compile and write .pyc files that later ones read:
    # another history before the windows (0.2-0.7% on Dawn's Null backend)
    "PYTHONDONTWRITEBYTECODE": "1",
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=1073741824:"
                      "glibc.malloc.top_pad=268435456:glibc.malloc.mxfast=0:glibc.malloc.tcache_count=0",
}
REMOVED_VARIABLES = ("PYTHONPERFSUPPORT", "PYTHON_PERF_JIT_SUPPORT", "PYTHONTRACEMALLOC", "PYTHONDEVMODE",
                     "PYTHONPROFILEIMPORTTIME", "PYTHONASYNCIODEBUG", "PYTHONMALLOCSTATS", "PYTHONBREAKPOINT")
# Each thread's counts in a dump of its own: only the thread that opened a window collects, but
# callgrind counts every thread's calls, and wgpu-py's poll thread runs Python while the calling
# thread waits, so a merged dump's call counts (which the allocators' price needs) are not the
# window's own.
# Children too (--trace-children): a child pytest (--dispatch-isolate's) is the process that
# measures.  Not the helpers a session runs to describe the machine, which count nothing and start
# slowly under callgrind (seconds a session): git, and pytest-benchmark's machine info (platform's
# `file` and `uname`, py-cpuinfo's `python -m cpuinfo`, `lscpu`, `sysctl`, `dmesg`).
UNTRACED_CHILDREN = ("*/git", "*/file", "*/uname", "*/lscpu", "*/sysctl", "*/dmesg")
UNTRACED_CHILD_ARGUMENTS = ("cpuinfo",)  # an argument of the command line: `python -m cpuinfo`
CALLGRIND_FLAGS = ("--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--separate-threads=yes",
                   "--trace-children=yes", f"--trace-children-skip={','.join(UNTRACED_CHILDREN)}",
                   f"--trace-children-skip-by-arg={','.join(UNTRACED_CHILD_ARGUMENTS)}", "-q")

# --dispatch-instructions-cycles: callgrind simulates the caches too (about 2x slower) and the
# windows' events give estimated cycles (estimated_cycles); reported, not gated: which accesses
# miss depends on addresses, so they repeat less well than instructions.
CACHE_SIM_FLAGS = ("--cache-sim=yes",)

COUNTED_IN_SESSION = "the session's process"
COUNTED_IN_WORKERS = "pytest-xdist workers"



def valgrind_executable() -> str:
    """valgrind's path; Unavailable where it cannot run."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64", "arm64"):
        raise Unavailable(f"counting needs Valgrind on Linux (x86-64 or arm64), not {sys.platform} "
                          f"{platform.machine()}")
    path = shutil.which("valgrind")
    if path is None:
        raise Unavailable("valgrind is not on PATH (Debian/Ubuntu: apt-get install valgrind)")
    return path


def valgrind_version(valgrind: str) -> str:
    """'valgrind-3.19.0'."""
    done = subprocess.run([valgrind, "--version"], capture_output=True, text=True)
    return done.stdout.strip() or "valgrind-?"


def _cache_folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "pytest-dispatch"


def build_helper(valgrind: str | None = None) -> Path:
    """The client-request helper, compiled once per source and Valgrind into the user's cache
    folder (``cc -shared`` against ``valgrind/callgrind.h``); Unavailable without
    a C compiler or the header."""
    valgrind = valgrind or valgrind_executable()
    source = HELPER_SOURCE.read_bytes()
    version = os.environ.get(VALGRIND_VERSION_ENV) or valgrind_version(valgrind)
    digest = hashlib.sha256(source + version.encode() + platform.machine().encode()).hexdigest()[:12]
    target = _cache_folder() / f"callgrind-helper-{digest}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise Unavailable("no C compiler to build the callgrind helper (Debian/Ubuntu: apt-get install gcc)")
    include = Path(valgrind).resolve().parent.parent / "include"  # a valgrind installed under a prefix
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=".callgrind-helper-", suffix=".so", dir=target.parent)
    os.close(handle)
    try:
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", temp, str(HELPER_SOURCE)],
                              capture_output=True, text=True)
        failure = done.stderr if done.returncode != 0 else None
    except OSError as error:
        failure = f"{compiler}: {error.strerror}"
    if failure is not None:
        Path(temp).unlink(missing_ok=True)
        first = (failure.strip().splitlines() or ["?"])[0]
        raise Unavailable(f"cannot build the callgrind helper ({first}): it needs valgrind/callgrind.h "
                          "(Debian/Ubuntu: apt-get install valgrind)")
    os.replace(temp, target)
    return target


def fixed_environment(environ: Mapping[str, str], args: Sequence[str], dump_folder: str,
                      valgrind_release: str, worker_launcher: Sequence[str] | None = None) -> dict[str, str]:
    """The relaunched session's environment: the user's, with the interpreter's switches fixed
    and padded so that arguments plus environment take ``ENVIRONMENT_BYTES`` (another checkout
    path or an unrelated variable then moves no count); with ``worker_launcher`` where only
    pytest-xdist's workers run under callgrind (relaunch)."""
    ours = (PAD_ENV, WORKER_LAUNCHER_ENV)
    env = {key: value for key, value in environ.items() if key not in REMOVED_VARIABLES and key not in ours}
    env.update(FIXED_VARIABLES)
    env[COUNTED_ENV] = dump_folder
    env[VALGRIND_VERSION_ENV] = valgrind_release
    if worker_launcher is not None:
        env[WORKER_LAUNCHER_ENV] = json.dumps(list(worker_launcher))
    used = sum(len(key) + len(value) + 2 for key, value in env.items()) + sum(len(arg) + 1 for arg in args)
    target = ENVIRONMENT_BYTES
    while target < used + len(PAD_ENV) + 64:
        target += 4096
    env[PAD_ENV] = "x" * (target - used - len(PAD_ENV) - 2)
    return env


def relaunch(pytest_args: Sequence[str], *, cwd: str | os.PathLike, cache_sim: bool = False,
             in_workers: bool = False, announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> int:
    """Run this pytest session again under callgrind (simulating the caches with ``cache_sim``);
    its exit status.  ``in_workers`` (the tests run in pytest-xdist's workers): only the
    workers run under callgrind (worker_python), the controller, which counts nothing,
    natively: under callgrind its start-up and collection held up every worker's start.

    Unavailable (before anything ran) where Valgrind or the helper cannot be had."""
    valgrind = valgrind_executable()
    release = valgrind_version(valgrind)
    os.environ[VALGRIND_VERSION_ENV] = release
    build_helper(valgrind)
    with tempfile.TemporaryDirectory(prefix="pytest-dispatch-callgrind-") as dumps:
        launcher = [valgrind, *CALLGRIND_FLAGS, *(CACHE_SIM_FLAGS if cache_sim else ()),
                    f"--callgrind-out-file={dumps}/callgrind.%p"]
        session = [sys.executable, "-m", "pytest", *pytest_args]
        if in_workers:  # the workers' own arguments are the same in every session: the environment alone is padded
            command = session
            env = fixed_environment(os.environ, [], dumps, release, worker_launcher=launcher)
        else:
            command = [*launcher, *session]
            env = fixed_environment(os.environ, command, dumps, release)
        where = "pytest-xdist's workers run" if in_workers else "the session runs"
        announce(f"dispatch: counting host instructions under callgrind ({release}); {where} 10-50x slower")
        return run_to_the_end(command, env, cwd, announce)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_to_the_end(command: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike,
                   announce: Callable[[str], None]) -> int:
    """Run the counted session in a process group of its own and wait for it; its exit status.

    Stopped (SIGTERM from ``timeout``, ``docker stop`` or a CI cancel, SIGINT from Ctrl-C, SIGHUP;
    to this process or its group), the whole group is killed at once: no valgrind, session or
    worker outlives the job or saves a run after the stop.  The session ended by a signal
    (its valgrind killed) ends the rest of the group too.  Either way one line says so, and the
    exit status is 128 + the signal's number."""
    process: subprocess.Popen | None = None
    stopped: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        stopped.append(signum)
        if process is not None:
            _kill_group(process.pid)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS} if in_main_thread else {}
    try:
        process = subprocess.Popen(command, env=dict(env), cwd=cwd, start_new_session=True)
        if stopped:
            _kill_group(process.pid)
        code = process.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if stopped:
        announce(f"dispatch: counted run stopped by {signal.Signals(stopped[0]).name}: its processes ended at "
                 "once, nothing saved after the stop, callgrind's dumps removed")
        return 128 + stopped[0]
    if code < 0:
        _kill_group(process.pid)  # its workers, where only valgrind or the session was killed
        announce(f"dispatch: the counted session was killed by {signal.Signals(-code).name} (valgrind or a "
                 "process it ran); its other processes ended, nothing saved after it, callgrind's dumps removed")
        return 128 - code
    return code


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # every process of it has ended already


def worker_python(python: str | None) -> str | None:
    """In a counted session whose tests run in pytest-xdist's workers: the command line that
    starts a worker's Python (``python``, else this interpreter) under callgrind; else None."""
    launcher = os.environ.get(WORKER_LAUNCHER_ENV)
    if not launcher:
        return None
    return shlex.join([*json.loads(launcher), *(shlex.split(python) if python else [sys.executable])])


def counted_in_here() -> str:
    """Where this session's counts are made: its own process, or pytest-xdist's workers
    (started under callgrind by the controller, relaunch)."""
    return COUNTED_IN_WORKERS if os.environ.get(WORKER_LAUNCHER_ENV) else COUNTED_IN_SESSION
