"""The probe command on the local adapter (lavapipe in CI)."""

import json
import os

import pytest

from pytest_dispatch import cli


def test_probe_measures_every_method_and_writes_json(gpu_info, tmp_path, capsys):
    out = tmp_path / "probe.json"
    code = cli.main(["probe", "--impl", "wgpu", "--backend", gpu_info.backend.lower(), "--n", "100,200",
                     "--dtype", "f32", "--rounds", "7", "--json", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    assert "single-op" in captured.out and "submit-per-dispatch host µs/dispatch" in captured.out
    progress = [line for line in captured.err.splitlines() if line.startswith("pytest-dispatch probe: [")]
    assert [line.split("]")[0][-3:] for line in progress] == ["1/2", "2/2"]  # one line per finished step
    assert "f32 N=100: submit per dispatch" in progress[0] and "f32 N=200: submit per dispatch" in progress[1]
    rows = json.loads(out.read_text())["probe"]
    assert [row["n"] for row in rows] == [100, 200]
    row = rows[-1]
    assert set(row["us_per_dispatch"]) == {"single-op", "submit-per-dispatch", "pass-per-dispatch", "single-pass"}
    assert row["inflation"] > 0 and all(us > 0 for us in row["us_per_dispatch"].values())
    assert row["breakdown_us"]["submit"] > 0 and row["gpu"]["fingerprint"] == gpu_info.fingerprint


def test_probe_rejects_bad_arguments(capsys):
    assert cli.main(["probe", "--n", "ten"]) == 2
    assert cli.main(["probe", "--dtype", "f64"]) == 2
    assert "pytest-dispatch probe: " in capsys.readouterr().err


def test_every_probe_line_names_the_adapter_and_backend():
    from pytest_dispatch.cli import probe
    from pytest_dispatch.measurement.gpu import GpuInfo

    rows = []
    for backend in ("Vulkan", "OpenGL"):
        info = GpuInfo("wgpu-native", "0.32.0", backend, "llvmpipe (LLVM 15.0.6, 256 bits)", "mesa", 0, 0, "Mesa", "CPU")
        rows.append(probe.ProbeRow(info, "f32", 100, dict.fromkeys(probe.METHODS, 10.0), 200.0, {"submit": 1.0}))
    lines = [line for line in probe.render(rows) if line.startswith(("llvmpipe", "submit-per-dispatch host"))]
    assert len(lines) == 4
    assert [("256 bits) (Vulkan)" in line, "256 bits) (OpenGL)" in line) for line in lines] == [(True, False), (False, True)] * 2


def test_an_implementation_with_no_adapter_exits_2_and_native_warnings_stay_out_of_the_output(monkeypatch, capfd):
    """Dawn writes its C++ warnings straight to the process's stderr while it looks for adapters:
    they are held back (``-v`` prints them), and --impl dawn with no adapter is exit 2."""
    from pytest_dispatch.cli import probe
    from pytest_dispatch.judgement.status import ExitCode

    class NoAdapters:
        def enumerate_adapters_sync(self):
            os.write(2, b"Warning: Vulkan shaderUniform*ArrayDynamicIndexing required.\n")
            return []

    monkeypatch.setattr(probe.gpu, "gpu_entry", lambda implementation: NoAdapters())
    assert cli.main(["probe", "--impl", "dawn"]) == ExitCode.BAD_INPUT
    err = capfd.readouterr().err
    assert "Warning: Vulkan" not in err and "no adapter found for dawn" in err
    assert "1 line(s) of native library output hidden (-v shows them)" in err
    assert cli.main(["probe", "--impl", "dawn", "-v"]) == ExitCode.BAD_INPUT
    assert "native library: Warning: Vulkan shaderUniform*ArrayDynamicIndexing required." in capfd.readouterr().err


def test_the_version_and_plain_help(capsys):
    from pytest_dispatch import _meta, options

    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0 and capsys.readouterr().out.strip() == f"pytest-dispatch {_meta.__version__}"
    parser = cli.build_parser()
    texts = [parser.format_help()] + [command.format_help() for command in
                                      parser._subparsers._group_actions[0].choices.values()]
    texts += [option.help for option in options.ALL_OPTIONS]
    assert not [text for text in texts if "`" in text]  # reST markup reads as noise in a terminal
