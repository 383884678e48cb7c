"""docs/api.md is generated from the docstrings; it must match them, and nothing public goes undescribed."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_generator():
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_api_md_is_what_the_docstrings_say():
    generator = load_generator()
    assert (ROOT / "docs" / "api.md").read_text(encoding="utf-8") == generator.render(), \
        "docs/api.md is stale: run python scripts/api_reference.py"


def test_the_reference_lists_every_field_of_a_measurement_and_every_fixture():
    import dataclasses

    from pytest_dispatch import Measurement

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for field in dataclasses.fields(Measurement):
        assert f"| `{field.name}`: " in text
    for name in ("median_us_per_call", "wall_us_per_dispatch", "by_kernel"):
        assert f"`{name}`" in text
    for fixture in ("gpu_adapter", "gpu_device", "gpu_info", "dispatch_meter"):
        assert f"### `{fixture}` (" in text


def test_a_public_member_without_a_description_is_refused(tmp_path, monkeypatch):
    (tmp_path / "half_documented.py").write_text(
        "import dataclasses\n\n@dataclasses.dataclass\nclass Thing:\n    \"\"\"A thing.\"\"\"\n\n"
        "    size: int  # bytes\n    colour: str\n\n    @property\n    def area(self) -> int:\n"
        "        return self.size\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import half_documented

    generator = load_generator()
    generator._missing.clear()
    lines = generator._class_section("Thing", "half_documented", half_documented.Thing)
    assert "| `size`: int | bytes |" in lines
    assert generator._missing == ["Thing.colour is a field without a comment on its line",
                                  "Thing.area has no docstring"]
    sys.modules.pop("half_documented", None)


def test_check_mode_exits_1_on_a_stale_file(tmp_path, monkeypatch, capsys):
    generator = load_generator()
    monkeypatch.setattr(generator, "OUTPUT", tmp_path / "docs" / "api.md")
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "api.md").write_text("# old\n")
    assert generator.main(["--check"]) == 1
    assert "docs/api.md is stale" in capsys.readouterr().err
    assert generator.main([]) == 0 and generator.main(["--check"]) == 0
