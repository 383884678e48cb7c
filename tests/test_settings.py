"""The one parser of the gate's and the meter's settings (pytest_dispatch.settings)."""

import pytest

from pytest_dispatch import settings
from pytest_dispatch.errors import UsageError


@pytest.mark.parametrize(("parse", "text", "value"), [
    (settings.fraction, "5%", 0.05), (settings.fraction, "0.02", 0.02), (settings.alpha, "0.01", 0.01),
    (settings.seconds, "60", 60.0), (settings.seconds, "60s", 60.0), (settings.seconds, "500ms", 0.5),
    (settings.seconds, "2m", 120.0), (settings.seconds, 1.5, 1.5),
    (settings.cpu, "3", (3,)), (settings.cpu, "4, 3", (3, 4)), (settings.cpu, "Idle", "idle"), (settings.cpu, "any", "any"),
])
def test_accepted_forms(parse, text, value):
    assert parse("x", text) == pytest.approx(value)


@pytest.mark.parametrize(("parse", "text", "message"), [
    (settings.fraction, "5", "between 0 and 1"), (settings.fraction, "-1%", "between 0 and 1"),
    (settings.fraction, "five", "not a number"), (settings.alpha, "2", "between 0 and 0.5"),
    (settings.alpha, "nan", "finite"), (settings.seconds, "0", "positive duration"),
    (settings.seconds, "soon", "not a duration"), (settings.cpu, "-1", "idle, any or CPU numbers"),
    (settings.cpu, "fast", "idle, any or CPU numbers"), (settings.cpu, "3,x", "idle, any or CPU numbers"),
])
def test_rejected_values_are_one_line_naming_the_setting(parse, text, message):
    with pytest.raises(UsageError, match=message) as error:
        parse("x", text)
    assert str(error.value).startswith("x=") and "\n" not in str(error.value)


def test_parse_knows_the_gate_settings_only():
    assert settings.parse("threshold", "3%") == pytest.approx(0.03)
    with pytest.raises(UsageError, match="unknown setting 'floor_us'"):
        settings.parse("floor_us", 0.5)


def test_the_ab_command_and_the_pytest_flags_share_the_option_table(capsys):
    from pytest_dispatch import cli, options
    from pytest_dispatch.ab import command, coordinator

    args = cli.build_parser().parse_args(["ab", "--base", "main", "--max-time", "2m", "--pairs", "8", "--cpu", "3,4"])
    assert (args.max_time, args.pairs, args.cpu, args.sessions) == (120.0, 8, (3, 4), settings.AB_DEFAULTS["sessions"])
    assert args.min_time == settings.AB_DEFAULTS["min_time"] > 0
    assert cli.build_parser().parse_args(["ab", "--base", "main", "--min-time", "0"]).min_time == 0.0
    assert cli.build_parser().parse_args(["ab", "--base", "main", "--min-time", "250ms"]).min_time == 0.25
    assert not args.no_prestart and cli.build_parser().parse_args(["ab", "--base", "main", "--no-prestart"]).no_prestart
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["ab", "--base", "main", "--pairs", "3"])
    assert "pairs='3' must be at least 6" in capsys.readouterr().err
    assert args.look_every == settings.AB_DEFAULTS["look_every"]
    every = cli.build_parser().parse_args(["ab", "--base", "main", "--look-every", "3"]).look_every
    assert coordinator.Settings(look_every=every).design().look_points == (4, 7, 10, 12)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["ab", "--base", "main", "--look-every", "0"])
    assert "look-every='0' must be at least 1" in capsys.readouterr().err
    every_ab_setting = [option.flag for option in options.COORDINATOR_OPTIONS if option.command_flag]
    kept = command.worker_args(["tests", *(f"{flag}=1" for flag in every_ab_setting), "--dispatch-ab-cpu", "3"])
    assert kept == ["tests"]


def test_options_are_resolved_once_into_a_frozen_object(pytester):
    pytester.makeini("[pytest]\ndispatch_ab_pairs = 8\n")
    pytester.makepyfile(
        """
        import dataclasses, pytest
        from pytest_dispatch import options

        def test_values(request):
            values = options.of(request.config)
            assert values is options.of(request.config) and values.dispatch_ab_pairs == 8
            with pytest.raises(dataclasses.FrozenInstanceError):
                values.dispatch_ab_pairs = 9
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.makeini("[pytest]\ndispatch_ab_pairs = 3\n")
    result = pytester.runpytest()  # a bad value stops the session at its start, used or not
    assert result.ret == 4 and "ini option dispatch_ab_pairs = '3'" in result.stderr.str()


def test_an_ab_job_without_the_ab_plugin_is_a_usage_error_not_a_plain_run(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:dispatch_ab", "--dispatch-ab=main")
    assert result.ret == 4 and "the A/B plugin (pytest_dispatch.ab.plugin) is not loaded" in result.stderr.str()
    result.stdout.no_fnmatch_line("*1 passed*")
