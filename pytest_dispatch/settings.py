"""The settings of every layer: their defaults and the one parser every surface uses.

Flags, ini values, marker arguments and the command line all go through
``parse``, so they accept the same syntax ("5%" or 0.05, "60s" or 60) and
reject the same values with the same one-line message.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_dispatch.errors import UsageError

DEFAULTS: dict[str, Any] = {
    "alpha": 0.01,  # total false-alarm level of one comparison (A/B: over all its looks)
    "threshold": 0.02,  # smallest relative change called a change (a ratio, never µs)
}
PAIR_ORDERS = ("abba", "random")  # the two rounds of an A/B pair (here, not in paired: options must not load numpy)


# Counted mode: the largest relative change of host instructions per call still called
# unchanged.  A/A counts of separate processes differ by <= 0.15% on Dawn's Null backend and
# ~0.3% on lavapipe beside a busy core (docs/RESULTS.md §11); +1% must be caught in one run.
INSTRUCTION_TOLERANCE = 0.005
MIN_ROUNDS = 5  # rounds a measurement takes at the least under a time cap (--dispatch-max-time)

# An A/B job: pairs of rounds per measurement in each session (a fresh pair of worker
# processes), the first look after `sessions` sessions and then every `look_every` more, up
# to `max_sessions`, alpha shared over the looks (every 2 sessions, not 4: simulated 4-test A/A
# jobs end after a median 7 sessions, not 9, for nearly the same power; docs/ab.md); `max_time`
# caps one measurement's pairs in one session.
# `min_time`: past `pairs`, a measurement's pairs in a session go on until they took this long.
# A session's log-ratio spread mostly comes from its own pairs where pairs are cheap and workers
# start slowly (the H200: 0.071 with 10 pairs of ~14 ms, 0.034 with 50, a pair of workers taking
# ~5 s to start; lavapipe 0.031 with 10 and 0.022 with this default; docs/RESULTS.md §10), so a
# session is worth more pairs than 10.
# A side's turn is `settle` rounds (dropped: the GPU has just switched from the other
# process) and then `block` rounds whose median is the turn's value.
# `cpu`: both workers of a session share the same CPUs, the least busy at its start
# ("idle": two on a GPU, one on a CPU adapter; coordinator.cpus_per_session), given ones
# ("3,4"), or wherever the OS puts them ("any"). On the H200, two workers left to the
# scheduler differed by 15-20% for their whole life; on two CPUs, by 3% (docs/RESULTS.md, section 4).
# `test_timeout`: a worker that sends nothing for this long in a test is hung.
AB_DEFAULTS: dict[str, Any] = {"pairs": 10, "sessions": 4, "look_every": 2, "max_sessions": 12, "min_time": 0.5,
                               "max_time": 20.0, "order": "abba", "block": 5, "settle": 1, "cpu": "idle",
                               "test_timeout": 900.0}
CPU_CHOICES = ("idle", "any")  # or CPU numbers, "3,4"



def _number(name: str, value: Any) -> float:
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a number (e.g. 0.05 or 5%)") from None
    if not math.isfinite(number):
        raise UsageError(f"{name}={value!r} must be finite")
    return number


def fraction(name: str, value: Any) -> float:
    """A relative change: '5%' or 0.05; > 0 and < 1."""
    number = _number(name, value)
    if not 0 < number < 1:
        raise UsageError(f"{name}={value!r} must be between 0 and 1 (0.02 or 2%)")
    return number


def alpha(name: str, value: Any) -> float:
    number = _number(name, value)
    if not 0 < number < 0.5:
        raise UsageError(f"{name}={value!r} must be between 0 and 0.5 (e.g. 0.01)")
    return number


def seconds(name: str, value: Any, zero: bool = False) -> float:
    """'60', '60s', '500ms', '2m' or 60.0; > 0 (>= 0 with ``zero``)."""
    text = str(value).strip().lower()
    scale = 1.0
    for suffix, factor in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    try:
        number = float(text) * scale
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a duration (e.g. 60, 60s, 500ms or 2m)") from None
    if not (math.isfinite(number) and (number > 0 or zero and number == 0)):
        raise UsageError(f"{name}={value!r} must be a {'duration >= 0' if zero else 'positive duration'}")
    return number


def count(name: str, value: Any, minimum: int = 1) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a whole number") from None
    if number < minimum:
        raise UsageError(f"{name}={value!r} must be at least {minimum}")
    return number


def cpu(name: str, value: Any) -> str | tuple[int, ...]:
    """Where an A/B job's workers run: 'idle', 'any' or CPU numbers ('3' or '3,4')."""
    text = str(value).strip().lower()
    if text in CPU_CHOICES:
        return text
    try:
        return tuple(sorted({count(name, part, minimum=0) for part in text.split(",")}))
    except UsageError:
        raise UsageError(f"{name}={value!r}: use idle, any or CPU numbers (3 or 3,4)") from None


def nonempty(name: str, value: Any) -> str:
    """A name or a path: never empty (an unset $VARIABLE in a CI line gives an empty one)."""
    if not str(value).strip():
        raise UsageError(f"an empty {name}; give one, or leave the option out (an unset $VARIABLE is empty)")
    return str(value)


def flag_type(parse, name: str):
    """``parse`` as an argparse type: the one-line message, as argparse reports a bad value."""
    import argparse

    def convert(text: str) -> Any:
        try:
            return parse(name, text)
        except UsageError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return convert


PARSERS = {"alpha": alpha, "threshold": fraction}

TIMING_MARKER = "dispatch_timing"
TIMING_MARKER_HELP = (
    f"{TIMING_MARKER}(max_time=None, min_rounds=None, disable=False): this test's overrides of "
    "--dispatch-max-time, --dispatch-min-rounds and --dispatch-disable-timing."
)


def parse_timing_marker(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``dispatch_timing`` marker's overrides, as DispatchMeter's keyword arguments."""
    known = {"max_time", "min_rounds", "disable"}
    if args or set(kwargs) - known:
        unknown = ", ".join(sorted(set(kwargs) - known)) or "positional arguments"
        raise UsageError(f"takes max_time, min_rounds and disable as keywords, not {unknown}")
    overrides: dict[str, Any] = {}
    if kwargs.get("max_time") is not None:
        overrides["max_time"] = seconds("max_time", kwargs["max_time"])
    if kwargs.get("min_rounds") is not None:
        overrides["min_rounds"] = count("min_rounds", kwargs["min_rounds"])
    if kwargs.get("disable") is not None:
        if not isinstance(kwargs["disable"], bool):
            raise UsageError(f"disable={kwargs['disable']!r} must be True or False")
        overrides["timing"] = not kwargs["disable"]
    return overrides


def parse(name: str, value: Any) -> Any:
    """One gate setting (alpha, threshold) from any surface."""
    if name not in PARSERS:
        raise UsageError(f"unknown setting {name!r}; known: {', '.join(PARSERS)}")
    return PARSERS[name](name, value)
