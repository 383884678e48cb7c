"""The option table of every surface (pytest flags and ini names, A/B jobs): each option once, with its default."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable

import pytest

from pytest_dispatch import settings
from pytest_dispatch.measurement.gpu import BACKENDS, IMPLEMENTATIONS


@dataclasses.dataclass(frozen=True)
class Option:
    name: str  # ini name; the flag is --name with dashes
    help: str
    default: Any = None
    type: str = "string"  # "string", "bool", "int", "float", "path", "name" (a path or name: never empty), ...
    choices: tuple[str, ...] | None = None
    const: Any = None  # value of the bare flag, for options whose value is optional
    # Scopes beyond pytest's own flag and ini name:
    coordinator: bool = False  # an A/B coordinator's: not passed on to the job's workers
    isolated: bool = False  # passed on to a --dispatch-isolate child
    command_flag: str | None = None  # the same setting's flag of `pytest-dispatch ab` (and compare)
    ini_only: bool = False  # no pytest flag: an ini name (and its command flag)
    setting: str | None = None  # the field of the A/B job's settings (ab.coordinator.Settings) it sets

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def bare(self) -> bool:
        """Given without a separate value: a switch, or an optional value only after '='."""
        return self.type == "bool" or self.const is not None


GPU_OPTIONS = (
    Option("gpu_impl", "WebGPU implementation: wgpu (wgpu-native) or dawn (wgpudawn).", "wgpu",
           choices=tuple(IMPLEMENTATIONS), isolated=True),
    Option("gpu_backend", "Graphics backend of the adapter.", "auto", choices=BACKENDS, isolated=True),
    Option("gpu_adapter", "Use the adapter whose name, vendor or driver contains this substring.", "", isolated=True),
    Option("gpu_required", "Error, instead of skip, when no adapter is found.", False, type="bool", isolated=True),
    Option("gpu_browser", "Chromium, Chrome or Firefox executable (a name on PATH or a path) for the gpu_page "
           "fixture (default: chromium, chromium-browser or google-chrome on PATH).", "", isolated=True),
    Option("gpu_no_spread", "With pytest-xdist on a host with several identical GPUs: every worker uses "
           "the first one (taking turns), instead of each worker its own.", False, type="bool", isolated=True),
)

MEASURE_OPTIONS = (
    Option("dispatch_max_time", "Most seconds of timed rounds per measurement (20, 20s, 1m); rounds stop at the "
           "cap once --dispatch-min-rounds are taken (default: no cap).", None, type="seconds"),
    Option("dispatch_disable_timing", "Counts only: measure() takes no timed rounds and assert_speedup asserts "
           "nothing; counts, budgets and the count gate still run, timing shows 'off' (for CPU runners).", False,
           type="bool"),
    Option("dispatch_instructions", "Counted mode: run the session again under Valgrind's callgrind and count each "
           "measurement's host instructions per call (this thread's, deterministic) instead of timing it; "
           "without valgrind, one line says so and the session runs timed.", False, type="bool"),
    Option("dispatch_instructions_cycles", "Counted mode: simulate the caches too (callgrind --cache-sim=yes, about "
           "2x slower) and report estimated cycles per call (L1 hits + 5 x last-level hits + 35 x RAM accesses; "
           "reported, not gated).", False, type="bool"),
    Option("dispatch_min_rounds", "Rounds a measurement takes at the least under --dispatch-max-time.",
           settings.MIN_ROUNDS,
           type="rounds"),
)

REPORT_OPTIONS = (
    Option("dispatch_report", "Print the dispatch report (one row per measured test) at the end.", False, type="bool",
           coordinator=True),
    Option("dispatch_json", "Write the results to this JSON file (pytest-benchmark's schema).", None, type="path",
           coordinator=True),
    Option("dispatch_plot", "Write SVG charts to this folder (needs matplotlib: the 'plot' extra).", None,
           type="path", coordinator=True),
    Option("dispatch_isolate", "Run each GPU test in a child process, so a native abort (a wgpu-native "
           "panic) fails that test alone.", False, type="bool", coordinator=True),
    Option("dispatch_timestamps", "Add GPU timestamp queries (one pair per pass) to measurements, "
           "where the adapter has timestamp-query.", False, type="bool", isolated=True),
)

GATE_OPTIONS = (
    Option("dispatch_storage", "Folder of saved results (one sub-folder per GPU fingerprint).", ".dispatch",
           type="path"),
    Option("dispatch_save", "Save this run's results under NAME (default 'run') for later comparison.",
           None, type="name", const="run", coordinator=True),
    Option("dispatch_compare", "Compare with the newest saved run named NAME of this GPU "
           "('latest': any name); regressions fail their tests.", None, type="name", const="latest", coordinator=True),
    Option("dispatch_accept", "Make this run the baseline on purpose: saved under the --dispatch-compare "
           "name (or 'accepted'), and regressions do not fail.", False, type="bool", coordinator=True),
    Option("dispatch_alpha", "False-alarm level of one A/B timing comparison (over all its looks; "
           "Benjamini-Hochberg across the job).", settings.DEFAULTS["alpha"], type="alpha",
           coordinator=True, command_flag="--alpha", ini_only=True, setting="alpha"),
    Option("dispatch_instructions_tolerance", "Counted mode: the largest relative change of host instructions "
           "per call still called unchanged (0.005 or 0.5%%).", settings.INSTRUCTION_TOLERANCE, type="fraction",
           coordinator=True, command_flag="--instructions-tolerance"),
    Option("dispatch_threshold", "Smallest relative change of time an A/B job calls a change: a ratio (0.02 "
           "or 2%%), never µs.", settings.DEFAULTS["threshold"], type="fraction",
           coordinator=True, command_flag="--threshold", ini_only=True, setting="threshold"),
)

AB_OPTIONS = (
    Option("dispatch_ab", "A/B job: run these tests in two worker processes, this tree (head) and REF (a git "
           "ref, checked out for the job, or a folder), pairing every measurement's rounds; fails on a "
           "regression (as 'pytest-dispatch ab --base REF', whose flags or these ini names set the job).", None,
           coordinator=True),
    Option("dispatch_aa", "A/A check of this runner: an A/B job of this tree against itself; any regression "
           "it reports is a false alarm.", False, type="bool", coordinator=True),
    # The job's fine-tuning: flags of `pytest-dispatch ab` and ini names, not pytest flags.
    Option("dispatch_ab_head", "Head folder of the A/B job (default: the current folder).", None, type="path",
           coordinator=True, ini_only=True),
    Option("dispatch_ab_pairs", "Pairs of rounds per measurement in each session of an A/B job.",
           settings.AB_DEFAULTS["pairs"], type="pairs", coordinator=True, command_flag="--pairs", ini_only=True,
           setting="pairs"),
    Option("dispatch_ab_sessions", "Sessions (fresh base and head workers) of an A/B job before its first look.",
           settings.AB_DEFAULTS["sessions"], type="sessions", coordinator=True, command_flag="--sessions",
           ini_only=True, setting="sessions"),
    Option("dispatch_ab_look_every", "Sessions of an A/B job between two looks after the first (each look takes "
           "an equal share of alpha).", settings.AB_DEFAULTS["look_every"], type="look_every",
           coordinator=True, command_flag="--look-every", ini_only=True, setting="look_every"),
    Option("dispatch_ab_max_sessions", "Most sessions of an A/B job.", settings.AB_DEFAULTS["max_sessions"],
           type="sessions", coordinator=True, command_flag="--max-sessions", ini_only=True, setting="max_sessions"),
    Option("dispatch_ab_min_time", "A measurement's pairs in one session go on past the pairs asked for until they "
           "took this long (0.5, 500ms; 0: exactly the pairs asked for).", settings.AB_DEFAULTS["min_time"],
           type="seconds_or_zero", coordinator=True, command_flag="--min-time", ini_only=True, setting="min_time"),
    Option("dispatch_ab_max_time", "Most seconds of one measurement's pairs in one session (20, 20s, 1m).",
           settings.AB_DEFAULTS["max_time"], type="seconds", coordinator=True, command_flag="--max-time",
           ini_only=True, setting="max_time"),
    Option("dispatch_ab_order", "Order of the two rounds of a pair: abba (AB, BA, ...) or random.",
           settings.AB_DEFAULTS["order"], choices=settings.PAIR_ORDERS, coordinator=True, command_flag="--order",
           ini_only=True, setting="order"),
    Option("dispatch_ab_cpu", "CPUs both workers of an A/B session run on: idle (the two least busy allowed CPUs "
           "at the session's start, or the one quiet CPU), CPU numbers (3 or 3,4), or any (not pinned).",
           settings.AB_DEFAULTS["cpu"], type="cpu", coordinator=True, command_flag="--cpu", ini_only=True,
           setting="cpu"),
    Option("dispatch_ab_no_prestart", "Start an A/B session's workers only once the last session's have quit "
           "(by default, where at least three sessions' worth of CPUs are idle, the next pair starts while a "
           "session measures).", False, type="bool", coordinator=True, command_flag="--no-prestart",
           ini_only=True, setting="no_prestart"),
    Option("dispatch_ab_test_timeout", "A worker silent this long in a test is hung: killed, restarted, the test "
           "failed.", settings.AB_DEFAULTS["test_timeout"], type="seconds", coordinator=True,
           command_flag="--test-timeout", ini_only=True, setting="test_timeout"),
    Option("dispatch_ab_seed", "Seed of the job's random choices (the order of pairs, the CPUs' turns, the "
           "workers' hash seeds); default: a new one each job.", None, type="int", coordinator=True,
           command_flag="--seed", ini_only=True, setting="seed"),
)

ALL_OPTIONS = GPU_OPTIONS + MEASURE_OPTIONS + REPORT_OPTIONS + GATE_OPTIONS + AB_OPTIONS


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("dispatch", "WebGPU dispatch counting and timing (pytest-dispatch)")
    for option in ALL_OPTIONS:
        parser.addini(
            option.name,
            f"{option.help} (default: {option.default!r})",
            type="bool" if option.type == "bool" else "string",
            default=option.default if option.type == "bool" else None,
        )
        if option.ini_only:
            continue
        kwargs: dict[str, Any] = {"dest": option.name, "default": None, "help": option.help}
        if option.type == "bool":
            kwargs["action"] = "store_true"
        elif option.const is not None:
            kwargs.update(nargs="?", const=option.const, type=converter(option.type), metavar="NAME")
        else:
            kwargs["choices"] = option.choices
            kwargs["type"] = converter(option.type)
        group.addoption(option.flag, **kwargs)


# The settings' parsers by option type, with the name their messages use on pytest's command line.
_PARSERS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "fraction": ("threshold", settings.fraction), "alpha": ("alpha", settings.alpha),
    "seconds": ("seconds", settings.seconds),
    "seconds_or_zero": ("seconds", lambda n, v: settings.seconds(n, v, zero=True)),
    "pairs": ("pairs", lambda n, v: settings.count(n, v, 6)),
    "sessions": ("sessions", lambda n, v: settings.count(n, v, 2)),
    "look_every": ("sessions", lambda n, v: settings.count(n, v, 1)),
    "rounds": ("rounds", lambda n, v: settings.count(n, v, 1)), "cpu": ("cpu", settings.cpu),
    "path": ("path", settings.nonempty), "name": ("name", settings.nonempty),
}


def converter(kind: str, name: str | None = None) -> Callable[[str], Any]:
    """The argparse type of an option type; ``name``: how its messages name the setting."""
    if kind in _PARSERS:
        default_name, parse = _PARSERS[kind]
        return settings.flag_type(parse, name or default_name)
    return {"int": int, "float": float}.get(kind, str)


def get(config: pytest.Config, name: str) -> Any:
    """The option's value: command line, else ini, else default; ini strings are validated too."""
    option = _BY_NAME[name]
    value = None if option.ini_only else config.getoption(name)
    if value is not None and value is not False:
        return value
    ini_value = config.getini(name)
    if option.type == "bool":
        return bool(ini_value)
    if ini_value in (None, ""):
        return option.default
    try:
        converted = converter(option.type)(str(ini_value).strip())
    except (ValueError, argparse.ArgumentTypeError) as error:
        raise pytest.UsageError(f"ini option {name} = {ini_value!r}: {error}") from None
    if option.choices and converted not in option.choices:
        raise pytest.UsageError(f"ini option {name} = {converted!r}: choose one of {', '.join(option.choices)}")
    return converted


_BY_NAME = {option.name: option for option in ALL_OPTIONS}
COORDINATOR_OPTIONS = tuple(option for option in ALL_OPTIONS if option.coordinator)
ISOLATED_OPTIONS = tuple(option for option in ALL_OPTIONS if option.isolated)
JOB_OPTIONS = tuple(option for option in ALL_OPTIONS if option.setting)  # an A/B job's settings


def add_command_argument(parser: argparse.ArgumentParser, name: str, **overrides: Any) -> None:
    """Option ``name`` as a flag of a ``pytest-dispatch`` command (its ``command_flag``):
    the same parser, default, choices and help as the pytest flag."""
    option = _BY_NAME[name]
    flag = option.command_flag
    kwargs: dict[str, Any] = {"type": converter(option.type, flag.lstrip("-")), "default": option.default,
                              "help": f"{option.help}" + ("" if option.default is None else " (default %(default)s)")}
    if option.type == "bool":
        kwargs = {"action": "store_true", "help": option.help}
    if option.setting:
        kwargs["dest"] = option.setting
    if option.choices:
        kwargs["choices"] = option.choices
    parser.add_argument(flag, **{**kwargs, **overrides})


Resolved = dataclasses.make_dataclass(
    "Resolved", [(option.name, Any) for option in ALL_OPTIONS], frozen=True,
    namespace={"__doc__": "Every option's value for one session, by its ini name (frozen)."})
_RESOLVED_KEY = pytest.StashKey[Resolved]()


def of(config: pytest.Config) -> Resolved:
    """The session's options, resolved once (command line, else ini, else default); a bad
    ini value is a usage error the first time."""
    if _RESOLVED_KEY not in config.stash:
        config.stash[_RESOLVED_KEY] = Resolved(**{option.name: get(config, option.name) for option in ALL_OPTIONS})
    return config.stash[_RESOLVED_KEY]
