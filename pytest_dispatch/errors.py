"""The package's exception types: one for each way a caller reacts to what went wrong.

A type exists because something catches it by type or because a user reads its name. The message is
one line a user can act on (what, where, what to do); no type carries internals to show.
"""


class UsageError(ValueError):
    """What the user wrote is wrong: an option, a marker's or a budget's argument, a meter used twice under
    one name, a file read from disk that fails validation, a command's input. Nothing is measured; the
    plugin makes it a usage error (exit 4) before any test runs, or that test errors; commands exit 2."""


class Unavailable(RuntimeError):
    """What a test or command needs is not on this machine: an adapter, compute, a browser, a runtime,
    valgrind. Tests skip with the reason (fail under --gpu-required); commands name it."""


class MeasurementFailed(AssertionError):
    """A measurement fails its test: counts that differ between calls, a speedup not shown, a GPU error
    raised by the measured code, an instruction window that could not be counted. An AssertionError, so
    pytest shows a failure, in one line."""


class PageError(Exception):
    """A page, one of its realms or a script failed to answer: it threw, never settled, could not be
    reached, or its browser or runtime ended. The test fails in one line naming the realm."""


class StorageError(Exception):
    """A saved run cannot be read or written (unreadable, too large, not a regular file's place)."""


class JobError(Exception):
    """An A/B job is refused before it measures (its sides, its tree, its settings): one line, exit 2."""


class DispatchWarning(UserWarning):
    """What a suite may filter: a corrupt saved run skipped, a run dated in the future, a source that
    counted mode cannot count."""
