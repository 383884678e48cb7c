"""Firefox (Debian's ``firefox-esr``) with WebGPU on, as the engines table's second browser.

Playwright drives Firefox over WebDriver BiDi (``channel="moz-firefox"``, the system's Firefox,
no download); which Playwright versions can drive which Firefox is narrow, so the range is
checked here and a mismatch is one line saying what to install. WebGPU is on through two prefs
in the profile's ``user.js`` (Playwright writes ``firefox_user_prefs`` there). Every sync in
Firefox waits for a completion poll (about 100 ms), so its per-dispatch cost is the slope
between two N, and single-op timing means nothing there.
"""

from __future__ import annotations

import importlib.metadata
import shutil
from typing import Any


FIREFOXES = ("firefox-esr", "firefox")
PREFS = {"dom.webgpu.enabled": True, "gfx.webgpu.ignore-blocklist": True}
# Playwright's BiDi Firefox with Firefox ESR 153: 1.58 to 1.64 work; 1.65 sends a command
# (emulation.setMediaFeaturesOverride) that this Firefox does not know, at the first context.
PLAYWRIGHT = ((1, 58), (1, 65))  # from, up to (excluded)
INSTALL = "pip install 'pytest-dispatch[firefox]'"


def find_firefox() -> str | None:
    return next((path for path in map(shutil.which, FIREFOXES) if path), None)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def unavailable_reason() -> str | None:
    """Why Firefox cannot run pages here (no Playwright, one outside the range, no Firefox), or None."""
    why = playwright_reason()
    if why:
        return why
    if find_firefox() is None:
        return f"firefox: none found (tried {', '.join(FIREFOXES)}); apt-get install firefox-esr"
    return None


def playwright_reason() -> str | None:
    """Why Playwright cannot drive Firefox here (not installed, or outside the range that works), or None."""
    try:
        version = importlib.metadata.version("playwright")
    except importlib.metadata.PackageNotFoundError:
        return f"firefox: Playwright is not installed; {INSTALL}"
    low, high = PLAYWRIGHT
    if not low <= _version(version) < high:
        return (f"firefox: Playwright {version} cannot drive Firefox ESR over BiDi (it works from "
                f"{'.'.join(map(str, low))} to before {'.'.join(map(str, high))}); {INSTALL}")
    return None


def launch_firefox(playwright: Any, executable: str) -> Any:
    """Headless Firefox with WebGPU on (its prefs in the profile's user.js)."""
    return playwright.firefox.launch(channel="moz-firefox", executable_path=executable, headless=True,
                                     firefox_user_prefs=dict(PREFS))

