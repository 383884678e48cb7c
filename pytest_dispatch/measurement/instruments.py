"""Instruments: how the meter measures a source, chosen once by mode when the meter is built.

``Timed`` takes the timed rounds, in one of three ways (``Rounds``): itself, interleaved, up to a
time cap; as a round server asks (an A/B job's coordinator); or in turns, as the caller decides
(``assert_speedup``).  ``CountsOnly`` (--dispatch-disable-timing) takes none;
``CountedInstructions`` (--dispatch-instructions, in a session relaunched under callgrind)
takes none and counts the host instructions of each sequential measurement whose source can be
counted (``Capabilities.counts_instructions``).  Every instrument leaves the warm-up and the
counted check rounds to the meter.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Callable, Protocol, Sequence

from pytest_dispatch.measurement import instructions, recorder
from pytest_dispatch.measurement.sources import Source, capabilities_of
from pytest_dispatch.errors import DispatchWarning


class Sampled(Protocol):
    """What an instrument reads and writes of one measured source's rounds (the meter's ``_Sampler``)."""

    name: str
    source: Source
    per_round: int  # calls per round
    calls: dict[str, int]  # calls per call of the source, by kind (recorder.KINDS)
    calls_made: int  # calls of the source so far
    instructions: instructions.InstructionCount | None  # counted mode's count, once taken

    def take_round(self) -> tuple[int, int, int]:
        """One timed round: (wall ns, empty-sync ns, calls)."""


class RoundServer(Protocol):
    """Where the timed rounds of a measurement are decided, when not by the meter itself.

    In an A/B job each worker's meter hands its warmed-up measurement to the
    coordinator, which asks the two workers for rounds in turn (pytest_dispatch.ab)."""

    def serve(self, key: str, calls: dict[str, int], take_round: Callable[[], tuple[int, int, int]]) -> bool:
        """Serve rounds until told to stop; False when this side must measure alone."""


@dataclasses.dataclass(frozen=True)
class Rounds:
    """How one measurement's timed rounds are taken: as ``turns`` decides (``turns(samplers)``);
    else as ``server`` asks, the measurement announced as ``key``; else (or where the server
    declines) ``count`` rounds of each sampler, interleaved, stopping once ``max_time`` seconds
    have passed and ``min_rounds`` are taken."""

    count: int
    min_rounds: int
    max_time: float | None = None
    server: RoundServer | None = None
    key: str = ""
    turns: Callable[[Sequence[Sampled]], None] | None = None

    def take(self, samplers: Sequence[Sampled]) -> None:
        __tracebackhide__ = True
        if self.turns is not None:
            self.turns(samplers)
            return
        first = samplers[0]
        if self.server is not None and self.server.serve(self.key, first.calls, first.take_round):
            return
        deadline = None if self.max_time is None else time.perf_counter() + self.max_time
        for taken in range(1, self.count + 1):
            for sampler in samplers:
                sampler.take_round()
            if deadline is not None and taken >= self.min_rounds and time.perf_counter() > deadline:
                break



class Instrument:
    """How rounds are measured.  ``timed``: whether ``take_rounds`` takes any."""

    timed = False

    def take_rounds(self, samplers: Sequence[Sampled], rounds: Rounds) -> None:
        """Take the timed rounds of ``samplers`` as ``rounds`` says, or none."""

    def finish(self, sequential: Sequence[Sampled], rounds: int) -> None:
        """After the counted check rounds, whatever else this mode measures of the sequential
        measurements; ``rounds``: the timed rounds asked for (or the default)."""


class Timed(Instrument):
    """Timed rounds by the sequential method (the default mode)."""

    timed = True

    def take_rounds(self, samplers: Sequence[Sampled], rounds: Rounds) -> None:
        __tracebackhide__ = True
        rounds.take(samplers)


class CountsOnly(Instrument):
    """Counts only (--dispatch-disable-timing): the warm-up and the check rounds."""


class CountedInstructions(Instrument):
    """Counted mode (--dispatch-instructions): host instructions of the calling thread,
    counted by callgrind over windows of K and 2K calls; nothing is timed."""

    def __init__(self, counter: instructions.Counter) -> None:
        self.counter = counter

    def finish(self, sequential: Sequence[Sampled], rounds: int) -> None:
        for sampler in sequential:
            capabilities = capabilities_of(sampler.source)
            if not capabilities.counts_instructions:
                warnings.warn(DispatchWarning(
                    f"{sampler.name}: host instructions are counted for wgpu-py calls only, not for "
                    f"{type(sampler.source).__name__}; its counts are kept"), stacklevel=2)
                continue
            retire = instructions.retire_all(capabilities.device)
            retire()
            instructions.set_aside_pooled_encoders(capabilities.device)
            sampler.instructions = count_instructions(self.counter, sampler, retire,
                                                      max_calls=rounds * sampler.per_round)


def count_instructions(counter: instructions.Counter, sampler: Sampled, retire: Callable[[], None],
                       max_calls: int | None = None) -> instructions.InstructionCount:
    """Uncounted calls to warm the interpreter up (instructions.warm_calls, the calls made so
    far included), one counted call to size the windows, then windows of K and 2K calls, each
    ending with ``retire()`` (instructions.retire_all).  Where the windows start with a window
    of one call, the probe is that window; else the warm-up goes on, uncounted, as far as the
    windows leave calls for it.  ``max_calls``: the calls the timed rounds would have made
    (rounds x per_round), which the warm-up and the windows do not exceed: a function with
    state (a decode step filling a KV cache) may allow no more."""
    __tracebackhide__ = True
    source = sampler.source
    host_calls = capabilities_of(source).host_calls

    def run(calls: int) -> None:
        host_calls(calls)
        retire()

    dispatches = recorder.total(sampler.calls, "dispatches")
    made = sampler.calls_made
    warm = instructions.warm_calls(dispatches, made, max_calls)
    sizes: list[int] = []
    warm_more = 0
    call_budget_asked = None

    def after_probe(probe: list[int]) -> tuple[int, list[int]]:
        nonlocal warm_more, call_budget_asked
        submits = recorder.total(sampler.calls, "submits")
        k = instructions.window_calls(probe[0], submits, max_calls, warm)
        asked = instructions.window_calls(probe[0], submits)
        if k < asked:
            call_budget_asked = instructions.call_budget_for(asked, dispatches, made)
        sizes.extend(instructions.window_sizes(k, probe[0]))
        if sizes[0] == 1:
            return 0, sizes[1:]
        warm_more = instructions.warm_calls(dispatches, sampler.calls_made + warm + 1,
                                            None if max_calls is None else max_calls - warm,
                                            windows=1 + sum(sizes))
        return warm_more, sizes

    with recorder.quiet():  # the recorder's wrappers are not the code measured
        dumps = counter.count(run, [1], source.sync, warm=warm, more=after_probe)
    sampler.calls_made += warm + 1 + warm_more + sum(sizes) - (sizes[0] == 1)
    if sizes[0] != 1:
        dumps = dumps[1:]
    return instructions.InstructionCount.from_windows(sizes, dumps, counter.tool, call_budget_asked)


def instrument_for(timing: bool, counter: instructions.Counter | None) -> Instrument:
    """The instrument of a mode: counted when a counter is given, else timed or counts only."""
    if counter is not None:
        return CountedInstructions(counter)
    return Timed() if timing else CountsOnly()
