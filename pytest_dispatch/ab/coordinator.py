"""The A/B job: two worker processes, the same tests, paired rounds, one outcome."""

from __future__ import annotations

import dataclasses
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from pytest_dispatch import paired, settings as gate_settings
from pytest_dispatch.ab import verdicts, worker
from pytest_dispatch.ab.channel import Channel, ChannelClosed
from pytest_dispatch.ab.trees import source_roots
from pytest_dispatch.meter import SEQUENTIAL, Measurement, measurement_key
from pytest_dispatch.results import TestResult

SIDE_ENV = "PYTEST_DISPATCH_AB_SIDE"  # set in workers: the pytest twin must not start a job there
BASE, HEAD = 0, 1
SIDE_NAMES = ("base", "head")
_LOG_TAIL_LINES = 6


class JobError(Exception):
    """The job cannot go on (no tests, different adapters, a side that cannot start)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """How an A/B job decides; every value is validated by pytest_dispatch.settings."""

    threshold: float = gate_settings.DEFAULTS["threshold"]
    alpha: float = gate_settings.DEFAULTS["alpha"]
    first_pairs: int = 30
    batch_pairs: int = 30
    max_pairs: int = 300
    max_seconds: float = 60.0
    order: str = "abba"
    test_timeout: float = 900.0  # a test that sends nothing for this long is hung
    round_timeout: float = 120.0
    seed: int | None = None
    cpus: str = "one"  # where both workers run: "one" (the same CPU, picked per job), "all", or "0,3"

    def design(self, overrides: dict[str, float] | None = None) -> paired.Design:
        alpha = (overrides or {}).get("alpha", self.alpha)
        return paired.Design(first=self.first_pairs, batch=self.batch_pairs, max_pairs=self.max_pairs,
                             max_seconds=self.max_seconds, alpha=alpha, order=self.order)

    def question(self, overrides: dict[str, float] | None = None) -> paired.ChangeQuestion:
        return paired.ChangeQuestion((overrides or {}).get("threshold", self.threshold))


def choose_cpus(spec: str, rng: random.Random) -> set[int] | None:
    """The CPUs both workers are pinned to, or None (not pinned).

    Measured on lavapipe (docs/RESULTS.md): two unpinned workers settle on
    different cores and stay there, so one side runs up to 1.3x slower for the
    whole job, which pairing cannot cancel; on one shared CPU that effect is gone."""
    if spec == "all" or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if spec == "one":
        return {rng.choice(allowed)}
    try:
        chosen = {int(cpu) for cpu in spec.split(",")}
    except ValueError:
        raise JobError(f"cpus={spec!r}: give 'one', 'all' or CPU numbers such as 0,3") from None
    if not chosen <= set(allowed):
        raise JobError(f"cpus={spec!r}: this process may run on CPUs {allowed} only")
    return chosen


class _SideLost(Exception):
    def __init__(self, side: int, why: str) -> None:
        super().__init__(why)
        self.side, self.why = side, why


class _Side:
    """One worker process and its channel; its messages go to the job's queue."""

    def __init__(self, index: int, tree: Path, pytest_args: list[str], events: queue.Queue, logs: Path) -> None:
        self.index, self.name = index, SIDE_NAMES[index]
        self.tree, self.pytest_args, self.events = tree, pytest_args, events
        self.log_path = logs / f"{self.name}.log"
        self.process: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.starts = 0
        self.cpus: set[int] | None = None

    def _pin(self) -> None:
        os.sched_setaffinity(0, self.cpus)  # in the child, before exec: its threads inherit it

    def start(self) -> None:
        worker_reads, coordinator_writes = os.pipe()
        coordinator_reads, worker_writes = os.pipe()
        command = worker.boot_command(sys.executable, self.name, worker_reads, worker_writes,
                                      source_roots(self.tree), ["-p", "no:cacheprovider", *self.pytest_args])
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(command, cwd=self.tree, preexec_fn=self._pin if self.cpus else None, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, pass_fds=(worker_reads, worker_writes),
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", SIDE_ENV: self.name})
        log.close()
        os.close(worker_reads)
        os.close(worker_writes)
        self.channel = Channel(coordinator_reads, coordinator_writes)
        self.starts += 1
        generation = self.starts
        threading.Thread(target=self._pump, args=(self.channel, generation), daemon=True).start()

    def _pump(self, channel: Channel, generation: int) -> None:
        while True:
            try:
                message = channel.receive()
            except (ChannelClosed, ValueError, OSError):
                self.events.put((self.index, generation, None))
                return
            self.events.put((self.index, generation, message))

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.channel.send(message)
        except ChannelClosed:
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
        return "; last output: " + " | ".join(lines[-_LOG_TAIL_LINES:]) if lines else ""

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.channel:
            self.channel.close()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            try:
                self.channel.send({"cmd": "quit"})
                self.process.wait(timeout=60)
            except (ChannelClosed, subprocess.TimeoutExpired):
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
        self.outcome = verdicts.Outcome(descriptions[0], descriptions[1], "", dataclasses.asdict(settings))
        self.rng = random.Random(settings.seed)
        self.cpus = choose_cpus(settings.cpus, self.rng)
        for side in self.sides:
            side.cpus = self.cpus
        self.outcome.settings["cpus"] = "all" if self.cpus is None else ",".join(map(str, sorted(self.cpus)))
        self.timing: dict[str, paired.PairedVerdict] = {}
        self.notes: dict[str, str] = {}
        self.results: tuple[dict[str, TestResult], dict[str, TestResult]] = ({}, {})

    # -- messages

    def _next(self, timeout: float, expect_from: int | None = None) -> tuple[int, dict | None]:
        """The next message (side, message); None as message: that side is gone."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                index, generation, message = self.events.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                side = self.sides[expect_from if expect_from is not None else HEAD]
                hung = [s for s in self.sides if s.process and s.process.poll() is None]
                victim = side if expect_from is not None else (hung[0] if hung else side)
                victim.kill()
                raise _SideLost(victim.index, f"the {victim.name} worker sent nothing for {timeout:g} s "
                                              f"(hung); it was killed{victim.log_tail()}") from None
            if generation != self.sides[index].starts:
                continue  # from a worker already replaced
            return index, message

    def _expect(self, index: int, timeout: float) -> dict:
        side, message = self._next(timeout, expect_from=index)
        if message is None:
            raise _SideLost(side, self.sides[side].death())
        if side != index:
            raise _SideLost(side, f"the {SIDE_NAMES[side]} worker spoke out of turn: {message.get('event')}")
        return message

    # -- the job

    def run(self) -> verdicts.Outcome:
        start = time.monotonic()
        try:
            collected = self._start_both()
            self._check_adapters(collected)
            order = self._plan(collected)
            for position, nodeid in enumerate(order):
                following = order[position + 1] if position + 1 < len(order) else None
                self._run_test(nodeid, following, f"[{position + 1}/{len(order)}]")
        finally:
            for side in self.sides:
                side.stop()
        self._judge()
        self.outcome.seconds = time.monotonic() - start
        return self.outcome

    def _start_both(self) -> list[dict]:
        for side in self.sides:
            side.start()
        collected: list[dict | None] = [None, None]
        while None in collected:
            try:
                index, message = self._next(self.settings.test_timeout)
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

    def _plan(self, collected: list[dict]) -> list[str]:
        """The tests both sides have, in the head's order; the rest is reported."""
        base_ids, head_ids = (message["nodeids"] for message in collected)
        for index, message in enumerate(collected):
            self.outcome.problems.extend(f"{SIDE_NAMES[index]}: could not collect {error}"
                                         for error in message["errors"])
        common = set(base_ids) & set(head_ids)
        for nodeid in head_ids:
            if nodeid not in common:
                self.outcome.problems.append(f"head only (not run): {nodeid}")
        for nodeid in base_ids:
            if nodeid not in common:
                self.outcome.problems.append(f"base only (not run): {nodeid}")
        order = [nodeid for nodeid in head_ids if nodeid in common]
        if not order:
            raise JobError("no test is collected on both sides: nothing to compare")
        return order

    def _run_test(self, nodeid: str, following: str | None, position: str) -> None:
        self.progress(f"{position} {nodeid}")
        done: dict[int, dict] = {}
        pending: dict[int, dict] = {}
        for side in self.sides:
            try:
                side.send({"cmd": "run", "nodeid": nodeid, "next": following})
            except _SideLost as lost:
                done[lost.side] = self._lost(nodeid, lost, pending)
        while len(done) < 2:
            try:
                index, message = self._next(self.settings.test_timeout)
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
                done[lost.side] = self._lost(nodeid, lost, pending)
                self._solo_orphans(pending, done)
        for index, message in done.items():
            self._record_test(index, nodeid, message)

    def _lost(self, nodeid: str, lost: _SideLost, pending: dict[int, dict]) -> dict:
        """A side crashed or hung: its test failed; restart it for the next test."""
        side = self.sides[lost.side]
        side.kill()
        pending.pop(lost.side, None)
        self.outcome.problems.append(f"{side.name}: {nodeid}: {lost.why}")
        for key in [k for k in self.notes if k.startswith(nodeid + "::")]:
            self.notes[key] = self.notes[key] or f"the {side.name} worker was lost"
        try:
            side.start()
            while True:
                index, message = self._next(self.settings.test_timeout, expect_from=side.index)
                if message is None:
                    raise _SideLost(index, self.sides[index].death())
                if index == side.index and message.get("event") == "collected":
                    break
        except _SideLost as again:
            raise JobError(f"the {side.name} worker could not be restarted: {again.why}") from None
        return {"event": "test_done", "nodeid": nodeid, "outcome": "crashed", "message": lost.why, "result": None}

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
            verdict = paired.run_sequential(self._take_round, self.settings.question(overrides),
                                            self.settings.design(overrides), rng=self.rng)
        except _SideLost as lost:
            self.notes[head_key] = f"the {SIDE_NAMES[lost.side]} worker was lost during the pairs"
            self.sides[1 - lost.side].send({"cmd": "finish"})
            raise
        self.timing[head_key] = verdict
        for side in self.sides:
            side.send({"cmd": "finish"})
        self.progress(f"    {head_key.rsplit('::', 1)[-1]}: x{verdict.ratio:.3f} ({verdict.interval_text}), "
                      f"{verdict.pairs} pairs in {verdict.seconds:.1f} s: {verdict.status}")

    def _take_round(self, index: int) -> tuple[int, int, int]:
        self.sides[index].send({"cmd": "round"})
        message = self._expect(index, self.settings.round_timeout)
        if message.get("event") != "round":
            raise _SideLost(index, f"the {SIDE_NAMES[index]} test ended during a round: "
                                   f"{message.get('message') or message.get('outcome')}")
        return int(message["wall_ns"]), int(message["sync_ns"]), int(message["per_round"])

    def _record_test(self, index: int, nodeid: str, message: dict) -> None:
        outcome = message.get("outcome")
        if message.get("result"):
            self.results[index][nodeid] = TestResult.from_dict(message["result"])
        if outcome in ("failed", "error"):
            line = f"{SIDE_NAMES[index]}: {nodeid} {outcome}: {message.get('message', '')}"
            self.outcome.problems.append(line)
        if outcome in ("failed", "error", "crashed") and index == HEAD:
            self.outcome.head_failed.append(nodeid)

    def _judge(self) -> None:
        adjusted = paired.adjust_family(self.timing, self.settings.alpha)
        keys: dict[str, tuple[Measurement | None, Measurement | None]] = {}
        for index, results in enumerate(self.results):
            for nodeid, result in results.items():
                for measurement in result.measurements:
                    if measurement.method == SEQUENTIAL:
                        entry = list(keys.get(measurement_key(nodeid, measurement.name), (None, None)))
                        entry[index] = measurement
                        keys[measurement_key(nodeid, measurement.name)] = tuple(entry)
        for key in list(adjusted) + list(self.notes):
            keys.setdefault(key, (None, None))
        for key, (base, head) in keys.items():
            if base is None and head is None:
                continue
            self.outcome.comparisons.append(
                verdicts.Comparison(key, base, head, adjusted.get(key), self.notes.get(key, "")))


def run_job(base_tree: Path, head_tree: Path, pytest_args: list[str], settings: Settings,
            descriptions: tuple[str, str], progress: Callable[[str], None] = print) -> verdicts.Outcome:
    """Run the A/B job; raises JobError when it cannot run at all."""
    return Job(base_tree, head_tree, pytest_args, settings, descriptions, progress).run()
