"""The A/B job: two worker processes, the same tests, paired rounds, one outcome."""

from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_dispatch.ab import verdicts, worker
from pytest_dispatch.ab.placement import Placement
from pytest_dispatch.ab.channel import Channel
from pytest_dispatch.ab.trees import source_roots
from pytest_dispatch import options
from pytest_dispatch.errors import JobError
from pytest_dispatch.settings import AB_DEFAULTS, DEFAULTS
from pytest_dispatch.judgement import paired, sessions
from pytest_dispatch.judgement.gate import compare_counts
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.judgement.stats import format_seconds
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.gpu import ensure_runtime_dir
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.meter import SEQUENTIAL, Measurement
from pytest_dispatch.presentation.text import count_and_first

SIDE_ENV = "PYTEST_DISPATCH_AB_SIDE"  # set in workers: the pytest twin must not start a job there
BASE, HEAD = 0, 1
SIDE_NAMES = ("base", "head")
_LOG_TAIL_LINES = 6
_LOG_LINE_CHARS = 200  # a pytest error can print a whole plugin registry on one line


# A worker's start (Python, wgpu, pytest's collection, the adapter) is not a test: on a loaded
# 2-core machine it took more than 10 s, so a short --test-timeout killed healthy workers.
START_TIMEOUT = 120.0


@dataclasses.dataclass(frozen=True)
class Settings:
    """How an A/B job decides; every value is validated by pytest_dispatch.settings."""

    threshold: float = DEFAULTS["threshold"]
    alpha: float = DEFAULTS["alpha"]
    pairs: int = AB_DEFAULTS["pairs"]  # per measurement and session
    sessions: int = AB_DEFAULTS["sessions"]  # before the first look
    look_every: int = AB_DEFAULTS["look_every"]  # sessions between the later looks
    max_sessions: int = AB_DEFAULTS["max_sessions"]
    min_time: float = AB_DEFAULTS["min_time"]  # of pairs, per measurement and session, past `pairs`
    max_time: float = AB_DEFAULTS["max_time"]  # of pairs, per measurement and session
    order: str = AB_DEFAULTS["order"]
    block: int = AB_DEFAULTS["block"]  # rounds a side takes per turn (their median is the value)
    settle: int = AB_DEFAULTS["settle"]  # rounds dropped at the start of a turn
    cpu: str | tuple[int, ...] = AB_DEFAULTS["cpu"]  # where both workers of a session run
    test_timeout: float = AB_DEFAULTS["test_timeout"]  # a test silent this long is hung
    round_timeout: float = 120.0
    seed: int | None = None
    time_count_regressions: bool = False  # keep timing a measurement whose counts regressed
    # Start each session's workers only once the last session's have quit; by default the next
    # session's start while this session measures, on other idle CPUs, where there are
    # placement.PRESTART_SESSIONS_OF_CPUS sessions' worth of them (not on a 2-core machine).
    no_prestart: bool = False

    @classmethod
    def of(cls, value_of: Callable[[options.Option], Any]) -> "Settings":
        """The settings from the option table (its options with a ``setting``), each option's value
        as one front end read it: the pytest twin by ini name, the command by flag."""
        return cls(**{option.setting: value_of(option) for option in options.JOB_OPTIONS})

    def as_dict(self) -> dict:
        """The job's ``settings`` in its JSON (docs/schema.md), where the pairs' times are ``min_seconds``
        and ``max_seconds``, and ``prestart`` says whether the next session's workers could start early."""
        data = dataclasses.asdict(self)
        data["min_seconds"] = data.pop("min_time")
        data["max_seconds"] = data.pop("max_time")
        data["prestart"] = not data.pop("no_prestart")
        return data

    @property
    def start_timeout(self) -> float:
        """How long a worker may be silent while it starts, or restarts after a hang or crash."""
        return max(self.test_timeout, START_TIMEOUT)

    def design(self) -> paired.SessionDesign:
        return paired.SessionDesign(pairs=self.pairs, first=self.sessions, step=self.look_every,
                                    max_sessions=self.max_sessions, min_time=self.min_time, max_time=self.max_time,
                                    alpha=self.alpha, order=self.order)

    def decisions(self) -> sessions.Sessions:
        """A new job's decisions over its sessions."""
        return sessions.Sessions(self.design(), self.threshold, self.time_count_regressions)



_PROCESSES = itertools.count(1)


class _SideLost(Exception):
    def __init__(self, side: int, why: str) -> None:
        super().__init__(why)
        self.side, self.why = side, why
        self.also: tuple[_SideLost, ...] = ()  # the other side, found hung at the same moment


class _Side:
    """One worker process and its channel; its messages go to the job's queue."""

    def __init__(self, index: int, tree: Path, pytest_args: list[str], events: queue.Queue, logs: Path,
                 log_name: str = "") -> None:
        self.index, self.name = index, SIDE_NAMES[index]
        self.tree, self.pytest_args, self.events = tree, pytest_args, events
        self.log_path = logs / f"{log_name or self.name}.log"
        self.log_shown = False  # a message named the log: it is kept after the job
        self.process: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.generation = 0  # which process of the job this side's messages come from
        self._quit_sent = 0  # the generation told to quit
        self.placement: dict[str, str] = {}  # environment that places the worker (CPU, hash seed)

    def start(self) -> None:
        """Start the worker; it and its message pump run on the CPUs the calling thread may use."""
        worker_reads, coordinator_writes = os.pipe()
        coordinator_reads, worker_writes = os.pipe()
        roots, pytest_args = source_roots(self.tree), ["-p", "no:cacheprovider", *self.pytest_args]
        log = open(self.log_path, "a")
        try:
            self.process = subprocess.Popen(
                worker.boot_command(sys.executable, self.name, worker_reads, worker_writes, roots, pytest_args),
                cwd=self.tree, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(worker_reads, worker_writes), env=self._environment())
        except BaseException:
            for descriptor in (coordinator_reads, coordinator_writes):
                os.close(descriptor)
            raise
        finally:
            log.close()
            os.close(worker_reads)
            os.close(worker_writes)
        self.channel = Channel(coordinator_reads, coordinator_writes)
        # Unique in the job: a lost worker is restarted, and the next session's pair may start
        # before this session's ends.
        self.generation = next(_PROCESSES)
        threading.Thread(target=self._pump, args=(self.channel, self.generation), daemon=True).start()

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", **self.placement, SIDE_ENV: self.name}

    def _pump(self, channel: Channel, generation: int) -> None:
        while True:
            try:
                message = channel.receive()
            except (EOFError, ValueError, OSError):  # the other end exited, or sent no message
                self.events.put((self.index, generation, None))
                return
            self.events.put((self.index, generation, message))

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.channel.send(message)
        except EOFError:
            raise _SideLost(self.index, self.death()) from None

    def death(self) -> str:
        """How the process ended, with the end of its output."""
        try:
            code = self.process.wait(timeout=30) if self.process else None
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        return f"the {self.name} worker {how}{self.log_tail()}"

    def log_tail(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        shown = [line if len(line) <= _LOG_LINE_CHARS else line[:_LOG_LINE_CHARS] + "..."
                 for line in lines[-_LOG_TAIL_LINES:]]
        self.log_shown = bool(lines)
        return f"; last output: {' | '.join(shown)} (all of it: {self.log_path})" if lines else ""

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.channel:
            self.channel.close()

    def request_quit(self) -> None:
        """Tell the worker to end its session (once), without waiting for it."""
        if self.process and self.process.poll() is None and self._quit_sent != self.generation:
            self._quit_sent = self.generation
            try:
                self.channel.send({"cmd": "quit"})
            except EOFError:
                pass

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.request_quit()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class Job:
    """Runs the same tests on base and head, pairing every measurement's rounds."""

    def __init__(self, base_tree: Path, head_tree: Path, pytest_args: list[str], settings: Settings,
                 descriptions: tuple[str, str], progress: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.progress = progress
        self.events: queue.Queue = queue.Queue()
        self._logs = Path(tempfile.mkdtemp(prefix="pytest-dispatch-ab-"))
        self.sides = (_Side(BASE, base_tree, pytest_args, self.events, self._logs),
                      _Side(HEAD, head_tree, pytest_args, self.events, self._logs))
        self.outcome = verdicts.Outcome(descriptions[0], descriptions[1], "", settings.as_dict())
        self.rng = random.Random(settings.seed)
        self.decisions = settings.decisions()
        self.session = 0
        self.notes: dict[str, str] = {}
        self.lost: set[str] = set()  # tests a worker hung or crashed in: failed once, never run again
        self.results: tuple[dict[str, TestResult], dict[str, TestResult]] = ({}, {})
        self.placement = Placement(settings.cpu, self.rng)
        self._spares: tuple[_Side, _Side] | None = None  # the next session's workers, started early
        self._spare_cpus: tuple[int, ...] = ()
        self._spare_inbox: list[tuple[int, dict | None]] = []  # what they said before their session

    # -- messages

    def _next(self, timeout: float, suspects: Sequence[int] = (BASE, HEAD)) -> tuple[int, dict | None]:
        """The next message (side, message); None as message: that side is gone.

        When nothing comes within ``timeout``, ``suspects`` (the sides that owe a message)
        are taken to hang: they are killed and _SideLost raised (the others in its ``also``)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                index, generation, message = self.events.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                # every suspect has been silent this long: all are hung, and all are killed now (one
                # at a time, a test that hangs on both sides would cost two time-outs)
                lost = []
                for victim in (self.sides[index] for index in suspects):
                    victim.kill()
                    lost.append(_SideLost(victim.index, f"the {victim.name} worker sent nothing for {timeout:g} s "
                                                        f"(hung); it was killed{victim.log_tail()}"))
                lost[0].also = tuple(lost[1:])
                raise lost[0] from None
            if generation != self.sides[index].generation:
                if self._spares and generation == self._spares[index].generation:
                    self._spare_inbox.append((index, message))
                continue  # else from a worker already replaced
            return index, message

    def _expect(self, index: int, timeout: float) -> dict:
        side, message = self._next(timeout, suspects=(index,))
        if message is None:
            raise _SideLost(side, self.sides[side].death())
        if side != index:
            raise _SideLost(side, f"the {SIDE_NAMES[side]} worker spoke out of turn: {message.get('event')}")
        return message

    # -- the job

    def run(self) -> verdicts.Outcome:
        """Sessions of fresh worker pairs until every measurement is decided or the cap."""
        start = time.monotonic()
        ensure_runtime_dir()  # the workers' too: one that is killed leaves none of its own behind
        design = self.settings.design()
        try:
            collected = self._start_both()
            self._check_adapters(collected)
            if self.placement.adapter_named(collected[HEAD]["adapter"].get("is_cpu", False)):
                _stop(self.sides)
                collected = self._start_both()
            plan = self._plan(collected)
            while plan:
                self.session += 1
                self.progress(f"session {self.session} (fresh base and head workers{self.placement.where()})")
                if self.session < design.max_sessions:
                    self._prestart()
                for position, (nodeid, running) in enumerate(plan):
                    following = [next((n for n, r in plan[position + 1:] if side in r), None)
                                 for side in (BASE, HEAD)]
                    self._run_test(nodeid, running, following, f"[{position + 1}/{len(plan)}]")
                self._look(final=self.session >= design.max_sessions)
                open_tests = {MeasurementKey.parse(key).nodeid for key in self.decisions.open}
                plan = [(nodeid, running) for nodeid, running in plan
                        if len(running) == 2 and nodeid in open_tests and nodeid not in self.lost]
                if plan:
                    self._next_pair()
        except KeyboardInterrupt:  # stopped: no polite quit, the workers may be in a test for minutes
            for side in (*self.sides, *(self._spares or ())):
                side.kill()
            raise
        finally:
            _stop(self.sides)
            for side in self._spares or ():
                side.kill()  # it has run nothing: no need to wait for the end of its start-up
            self.placement.restore()
            if not any(side.log_shown for side in (*self.sides, *(self._spares or ()))):
                shutil.rmtree(self._logs, ignore_errors=True)
        self._judge()
        self.outcome.seconds = time.monotonic() - start
        return self.outcome

    def _look(self, final: bool) -> None:
        """The job's decisions at the end of a session; a line for each measurement decided at a look."""
        for key, verdict in self.decisions.look(final, self._counts_regressed()):
            self.progress(f"    {MeasurementKey.parse(key).name}: x{verdict.ratio:.3f} ({verdict.interval_text} over "
                          f"{verdict.sessions} sessions): {verdict.status}")

    def _counts_regressed(self) -> set[str]:
        """The open measurements whose counts regressed (both sides measured them)."""
        regressed = set()
        for key in self.decisions.open:
            nodeid, name = MeasurementKey.parse(key).nodeid, MeasurementKey.parse(key).name
            sides = [next((m for m in results[nodeid].measurements if m.name == name), None)
                     if nodeid in results else None for results in self.results]
            if None not in sides and any(v.status == Status.REGRESSED for v in compare_counts(*sides)):
                regressed.add(key)
        return regressed

    def _prestart(self) -> None:
        """Start the next session's pair now, on idle CPUs other than this session's, so that its
        start-up (Python, pytest's collection, the adapter: most of a session's seconds) overlaps
        this session's rounds instead of following them."""
        if not self.placement.prestarts(not self.settings.no_prestart):
            return
        chosen = self.placement.spare(self.session + 1)
        if not chosen:
            return
        environment = self.placement.environment(chosen)
        # two log names in turn: this session's pair still writes to the other one
        spares = tuple(_Side(side.index, side.tree, side.pytest_args, self.events, self._logs,
                             f"{side.name}-2" if self.session % 2 else side.name) for side in self.sides)
        self._spares, self._spare_cpus, self._spare_inbox = spares, chosen, []
        self.placement.run_on(chosen)  # the new workers and their message pumps start there
        try:
            for side in spares:
                side.placement = environment
                side.start()
        finally:
            self.placement.run_on(self.placement.session_cpus)

    def _next_pair(self) -> None:
        """This session's workers stopped; the next session's started, or taken over when they
        were started early."""
        _stop(self.sides)
        if self._spares is None:
            self._start_both()
            return
        self.sides, self._spares = self._spares, None
        self.placement.take(self._spare_cpus)
        for index, message in self._spare_inbox:  # their "collected", at least, came early
            self.events.put((index, self.sides[index].generation, message))
        self._spare_inbox = []
        self._collected()

    def _start_both(self) -> list[dict]:
        environment = self.placement.session(self.session)
        for side in self.sides:
            side.placement = environment
            side.start()
        return self._collected()

    def _collected(self) -> list[dict]:
        """Both workers' "collected" messages, once they have started."""
        collected: list[dict | None] = [None, None]
        while None in collected:
            try:
                index, message = self._next(self.settings.start_timeout)
            except _SideLost as lost:
                raise JobError(f"{lost.why} while collecting") from None
            if message is None:
                raise JobError(f"{self.sides[index].death()} (it could not start or collect; run the same "
                               f"pytest command in {self.sides[index].tree} to see why)")
            if message.get("event") == "collected":
                collected[index] = message
        return collected

    def _check_adapters(self, collected: list[dict]) -> None:
        adapters = [message["adapter"] for message in collected]
        for index, adapter in enumerate(adapters):
            if adapter is None:
                raise JobError(f"the {SIDE_NAMES[index]} side found no GPU adapter: {collected[index]['no_adapter']}")
        if adapters[0]["fingerprint"] != adapters[1]["fingerprint"]:
            raise JobError(f"the sides picked different adapters ({adapters[0]['description']} vs "
                           f"{adapters[1]['description']}): refused; pin one with --gpu-adapter")
        self.outcome.adapter = adapters[1]["description"]

    def _plan(self, collected: list[dict]) -> list[tuple[str, tuple[int, ...]]]:
        """(test, sides that run it): the tests both sides have, in the head's order, then
        those of one side only, run there alone (their measurements are new or removed)."""
        base_ids, head_ids = (message["nodeids"] for message in collected)
        for index, message in enumerate(collected):
            for error in message["errors"]:
                self.outcome.collect_failed = True
                self._problem(f"{SIDE_NAMES[index]}: could not collect {error}")
            for path in message.get("missing", []):
                self.outcome.notices.append(f"{SIDE_NAMES[index]}: {path} is not in this tree: its tests run on "
                                            f"the {SIDE_NAMES[1 - index]} alone")
        common = set(base_ids) & set(head_ids)
        if not common:  # a first pull request adding tests: they run on the head alone, as new
            if base_ids:
                self.outcome.notices.append(f"base: {count_and_first(list(base_ids))} test(s) the head does not "
                                            "have: not run")
            return [(nodeid, (HEAD,)) for nodeid in head_ids]
        plan = [(nodeid, (BASE, HEAD)) for nodeid in head_ids if nodeid in common]
        plan += [(nodeid, (HEAD,)) for nodeid in head_ids if nodeid not in common]
        plan += [(nodeid, (BASE,)) for nodeid in base_ids if nodeid not in common]
        return plan

    def _run_test(self, nodeid: str, running: tuple[int, ...], following: list[str | None], position: str) -> None:
        alone = "" if len(running) == 2 else f" ({SIDE_NAMES[running[0]]} only)"
        self.progress(f"{position} {nodeid}{alone}")
        done: dict[int, dict] = {index: {} for index in (BASE, HEAD) if index not in running}
        pending: dict[int, dict] = {}
        for index in running:
            try:
                self.sides[index].send({"cmd": "run", "nodeid": nodeid, "next": following[index]})
            except _SideLost as lost:
                done[lost.side] = self._lost(nodeid, lost, pending, following)
        while len(done) < 2:
            try:
                owing = [i for i in running if i not in done]
                idle = [i for i in owing if i not in pending]  # a side waiting for its pair is not hung
                index, message = self._next(self.settings.test_timeout, suspects=idle or owing)
                if message is None:
                    raise _SideLost(index, self.sides[index].death())
                event = message.get("event")
                if event == "measure":
                    pending[index] = message
                    self._pair_if_ready(pending, done)
                elif event == "test_done":
                    done[index] = message
                    self._solo_orphans(pending, done)
            except _SideLost as lost:
                for side_lost in (lost, *lost.also):
                    done[side_lost.side] = self._lost(nodeid, side_lost, pending, following)
                self._solo_orphans(pending, done)
        for index, message in done.items():
            if index in running:
                self._record_test(index, nodeid, message)

    def _lost(self, nodeid: str, lost: _SideLost, pending: dict[int, dict], following: list[str | None]) -> dict:
        """A side crashed or hung: its test failed; restart it for its next test in this session,
        if it has one (a restart is a worker's whole start-up)."""
        side = self.sides[lost.side]
        side.kill()
        pending.pop(lost.side, None)
        self._problem(f"{side.name}: {nodeid}: {lost.why}")
        if nodeid not in self.lost:
            self.lost.add(nodeid)
            self.progress(f"    {nodeid}: failed (the {side.name} worker was lost in it); not run in later sessions")
        for key in [k for k in self.notes if MeasurementKey.parse(k).nodeid == nodeid]:
            self.notes[key] = self.notes[key] or f"the {side.name} worker was lost"
        crashed = {"event": "test_done", "nodeid": nodeid, "outcome": "crashed", "message": lost.why, "result": None}
        if following[side.index] is None:  # the next session starts a fresh pair anyway
            side.generation = 0  # what its message pump still says is no longer this side's (none is 0)
            return crashed
        others = []  # what the other side says meanwhile is kept for the test's loop
        try:
            side.start()
            while True:  # a restart is a start (with --test-timeout, a loaded machine's restarts failed the job)
                index, message = self._next(self.settings.start_timeout, suspects=(side.index,))
                if index != side.index:
                    others.append((index, self.sides[index].generation, message))
                    continue
                if message is None:
                    raise _SideLost(index, self.sides[index].death())
                if message.get("event") == "collected":
                    break
        except _SideLost as again:
            raise JobError(f"the {side.name} worker could not be restarted: {again.why}") from None
        finally:
            for event in others:
                self.events.put(event)
        return crashed

    def _solo_orphans(self, pending: dict[int, dict], done: dict[int, dict]) -> None:
        """A measurement whose other side finished the test without it is measured alone."""
        for index in list(pending):
            if (1 - index) in done:
                key = pending.pop(index)["key"]
                self.notes.setdefault(key, f"measured by the {SIDE_NAMES[index]} alone")
                self.sides[index].send({"cmd": "solo"})

    def _pair_if_ready(self, pending: dict[int, dict], done: dict[int, dict]) -> None:
        if len(pending) < 2:
            if pending and (1 - next(iter(pending))) in done:
                self._solo_orphans(pending, done)
            return
        base_key, head_key = pending[BASE]["key"], pending[HEAD]["key"]
        if base_key != head_key:
            # Most often the head added a measurement: let it measure alone, then look again.
            pending.pop(HEAD)
            self.notes.setdefault(head_key, "measured by the head alone")
            self.sides[HEAD].send({"cmd": "solo"})
            return
        overrides = pending[HEAD].get("overrides") or {}
        pending.clear()
        try:
            verdict = paired.run_sequential(self._take_block, self.decisions.question_for(overrides),
                                            self.decisions.design_for(overrides).within, rng=self.rng)
        except _SideLost as lost:
            self.notes[head_key] = f"the {SIDE_NAMES[lost.side]} worker was lost during the pairs"
            self.sides[1 - lost.side].send({"cmd": "finish"})
            raise
        self.decisions.add(head_key, verdict, overrides)
        for side in self.sides:
            side.send({"cmd": "finish"})
        self.progress(f"    {MeasurementKey.parse(head_key).name}: x{verdict.ratio:.3f} in this session ({verdict.pairs} pairs, "
                      f"{format_seconds(verdict.seconds)})")

    def _take_block(self, index: int) -> tuple[int, int, int]:
        """One side's turn: ``settle`` rounds dropped, then ``block`` rounds, as one value
        (the medians), so the GPU's switch from the other process is not timed."""
        self.sides[index].send({"cmd": "block", "settle": self.settings.settle, "rounds": self.settings.block})
        message = self._expect(index, self.settings.round_timeout * (self.settings.settle + self.settings.block))
        if message.get("event") != "block":
            raise _SideLost(index, f"the {SIDE_NAMES[index]} test ended during its rounds: "
                                   f"{message.get('message') or message.get('outcome')}")
        return (int(statistics.median(message["wall_ns"])), int(statistics.median(message["sync_ns"])),
                int(message["per_round"]))

    def _record_test(self, index: int, nodeid: str, message: dict) -> None:
        outcome = message.get("outcome")
        if message.get("result") and nodeid not in self.results[index]:
            self.results[index][nodeid] = TestResult.from_dict(message["result"])  # counts: the first session's
        if outcome in ("failed", "error"):
            self._problem(f"{SIDE_NAMES[index]}: {nodeid} {outcome}: {message.get('message', '')}")
        if outcome in ("failed", "error", "crashed") and index == HEAD and nodeid not in self.outcome.head_failed:
            self.outcome.head_failed.append(nodeid)

    def _problem(self, line: str) -> None:
        if line not in self.outcome.problems:
            self.outcome.problems.append(line)

    def _judge(self) -> None:
        self._look(final=True)
        adjusted = self.decisions.family()
        keys: dict[str, tuple[Measurement | None, Measurement | None]] = {}
        for index, results in enumerate(self.results):
            for nodeid, result in results.items():
                for measurement in result.measurements:
                    if measurement.method == SEQUENTIAL:
                        key = str(MeasurementKey(nodeid, measurement.name))
                        entry = list(keys.get(key, (None, None)))
                        entry[index] = measurement
                        keys[key] = tuple(entry)
        for key in list(adjusted) + list(self.notes):
            keys.setdefault(key, (None, None))
        for key, (base, head) in keys.items():
            if base is None and head is None:
                continue
            self.outcome.comparisons.append(verdicts.Comparison(key, base, head, adjusted.get(key),
                                                                self.notes.get(key, ""),
                                                                self.decisions.verdicts.get(key, [])))
        if not self.outcome.compared and not self.outcome.new_only:
            self._problem("nothing compared: no measurement exists on both sides")


def _stop(sides: Sequence[_Side]) -> None:
    """Stop the workers together: each is told to quit before either is waited for."""
    for side in sides:
        side.request_quit()
    for side in sides:
        side.stop()


def run_job(base_tree: Path, head_tree: Path, pytest_args: list[str], settings: Settings,
            descriptions: tuple[str, str], progress: Callable[[str], None] = print) -> verdicts.Outcome:
    """Run the A/B job; raises JobError when it cannot run at all."""
    return Job(base_tree, head_tree, pytest_args, settings, descriptions, progress).run()
