"""A page and every realm it makes, each given the recorder before its first script.

The page's target is auto-attached to its frames and workers, paused at their start
(``Target.setAutoAttach`` with ``waitForDebuggerOnStart``), recursively; shared and service
workers of the page's browser context come the same way from the browser.  A paused worker gets
the recorder by ``Runtime.evaluate`` and is resumed; a frame gets it as a script run in every
new document (``Page.addScriptToEvaluateOnNewDocument``).  Nobody's source is rewritten.

Counts are read from each realm, in that realm, when asked: a realm that cannot answer in time
is named, never read from an old total; a worker that ended is taken at its last totals, which
it tells before every message it posts (so before the page can know it finished).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from pytest_dispatch.errors import PageError
from pytest_dispatch.measurement.page import escaped
from pytest_dispatch.plugin.cdp import Chromium

BLOCKED_GRACE = 2.0  # seconds past a function's time-out before its page counts as blocked (Linux: /proc)


def first_line(error: BaseException) -> str:
    """An error's first line, control characters escaped."""
    return escaped((str(error).strip().splitlines() or [type(error).__name__])[0])


WORKERS = {"worker": "worker", "shared_worker": "shared worker", "service_worker": "service worker"}
TELL = "__dispatchTell"  # the binding through which a worker tells its totals


class Realm:
    """One JS realm with the recorder: the page, a frame, or a worker."""

    def __init__(self, session: str, context: int | None, kind: str, url: str, frame: str = "") -> None:
        self.session, self.context, self.kind, self.url, self.frame = session, context, kind, url, frame
        self.told: dict[str, Any] | None = None  # a worker's last totals, told by itself
        # A worker is asked nothing before it has the recorder: until then it has run no script.
        self.ready = context is not None
        self.gone = False

    def name(self) -> str:
        return f"{self.kind} {self.url}" if self.url else self.kind


class PageRealms:
    """The realms of one page (a browser context of its own): ``navigate`` it, then ask them."""

    def __init__(self, browser: Chromium, recorder: str) -> None:
        self.browser, self.recorder = browser, recorder
        self._lock = threading.Lock()
        self.realms: dict[tuple[str, int | None], Realm] = {}
        self.targets: set[str] = set()
        self._given: set[str] = set()  # worker sessions given the recorder
        self.frame_urls: dict[str, str] = {}
        self.thrown: list[dict[str, Any]] = []  # exceptionDetails of errors no realm caught
        self.not_found: list[str] = []  # URLs any realm asked for and got no file (404)
        self.crashed: str | None = None
        self.loaded = threading.Event()
        self.context_id = browser.call("Target.createBrowserContext", {"disposeOnDetach": True})["browserContextId"]
        self.target_id = browser.call("Target.createTarget", {"url": "about:blank",
                                                              "browserContextId": self.context_id})["targetId"]
        self.session = browser.call("Target.attachToTarget", {"targetId": self.target_id,
                                                              "flatten": True})["sessionId"]
        self.targets.add(self.target_id)
        self.browser.handlers[self.session] = self._handler(self.session, "page")
        for method, params in (("Runtime.addBinding", {"name": TELL}), ("Page.enable", None),
                               ("Page.addScriptToEvaluateOnNewDocument", {"source": recorder}),
                               ("Runtime.enable", None), ("Network.enable", None),
                               ("Target.setAutoAttach", _AUTO_ATTACH)):
            self.browser.call(method, params, self.session)

    # Events, on the reader thread.

    def adopt(self, parent: str, event: dict[str, Any]) -> None:
        """A target attached paused: the recorder first, its own children next, then it runs."""
        info, session = event["targetInfo"], event["sessionId"]
        kind = info.get("type", "")
        post = self.browser.post
        with self._lock:
            known = info["targetId"] in self.targets
            self.targets.add(info["targetId"])
        if known or (kind not in WORKERS and kind != "iframe"):
            post("Runtime.runIfWaitingForDebugger", session=session)
            post("Target.detachFromTarget", {"sessionId": session}, session=parent)
            return
        self.browser.handlers[session] = self._handler(session, kind)
        post("Runtime.addBinding", {"name": TELL}, session=session)
        if kind == "iframe":  # its later documents get the recorder as the page's do
            post("Page.enable", session=session)
            post("Page.addScriptToEvaluateOnNewDocument", {"source": self.recorder}, session=session)
        else:
            with self._lock:
                self.realms[(session, None)] = Realm(session, None, WORKERS[kind], info.get("url", ""))
        post("Runtime.enable", session=session)
        post("Network.enable", session=session)
        if kind != "iframe":
            # A worker's global scope may not exist yet while it is paused (a module worker's does
            # not): it runs to the instant before its first script, where it gets the recorder.
            post("Debugger.enable", session=session)
            post("Debugger.setInstrumentationBreakpoint", {"instrumentation": "beforeScriptExecution"},
                 session=session)
        post("Target.setAutoAttach", _AUTO_ATTACH, session=session)
        post("Runtime.runIfWaitingForDebugger", session=session)

    def _handler(self, session: str, kind: str):
        def on_event(method: str, params: dict[str, Any]) -> None:
            if method == "Target.attachedToTarget":
                self.adopt(session, params)
            elif method == "Target.detachedFromTarget":
                self.browser.handlers.pop(params.get("sessionId", ""), None)
                self._gone(params.get("sessionId", ""), "all")
            elif method == "Runtime.executionContextCreated" and kind in ("page", "iframe"):
                context = params["context"]
                aux = context.get("auxData") or {}
                if aux.get("isDefault"):
                    frame = aux.get("frameId", "")
                    where = "page" if frame == self.target_id else "frame"
                    url = self.frame_urls.get(frame, context.get("origin", ""))
                    with self._lock:
                        self.realms[(session, context["id"])] = Realm(session, context["id"], where, url, frame)
            elif method == "Runtime.executionContextDestroyed":
                self._gone(session, params.get("executionContextId"))
            elif method == "Runtime.executionContextsCleared" and kind in ("page", "iframe"):
                self._gone(session, "all")
            elif method == "Debugger.paused" and kind in WORKERS and session not in self._given:
                self._given.add(session)
                realm = self.realms.get((session, None))

                def given(result: Any, error: Exception | None) -> None:
                    if realm is not None:
                        realm.ready = True

                self.browser.post("Runtime.evaluate", {"expression": self.recorder}, session, given)
                self.browser.post("Debugger.disable", session=session)
                self.browser.post("Debugger.resume", session=session)
            elif method == "Runtime.bindingCalled" and params.get("name") == TELL:
                realm = self.realms.get((session, None)) or self.realms.get((session, params.get("executionContextId")))
                if realm is not None:
                    realm.told = json.loads(params["payload"])
            elif method == "Runtime.exceptionThrown" and kind in ("page", "iframe"):
                self.thrown.append(params.get("exceptionDetails", {}))
            elif method == "Page.frameNavigated":
                frame = params["frame"]
                self.frame_urls[frame["id"]] = frame.get("url", "")
                with self._lock:
                    for realm in self.realms.values():
                        if realm.frame == frame["id"]:
                            realm.url = self.frame_urls[frame["id"]]
            elif method == "Network.responseReceived" and params.get("response", {}).get("status") == 404:
                if params["response"].get("url") not in self.not_found:
                    self.not_found.append(params["response"].get("url"))
            elif method == "Page.loadEventFired" and session == self.session:
                self.loaded.set()
            elif method == "Inspector.targetCrashed":
                self.crashed = "its renderer crashed"
        return on_event

    def _gone(self, session: str, context: Any) -> None:
        """Realms ended (a context, or all of a target's): each keeps the totals it last told."""
        with self._lock:
            for key, realm in list(self.realms.items()):
                if key[0] == session and (context == "all" or key[1] == context) and not realm.gone:
                    if realm.told is None:
                        del self.realms[key]
                    else:
                        realm.gone = True

    # Questions, from the test's thread.

    def navigate(self, url: str, timeout: float) -> str | None:
        """Go to ``url`` and wait for its load event; why not, or None."""
        self.loaded.clear()
        result = self.browser.call("Page.navigate", {"url": url}, self.session, timeout)
        if result.get("errorText"):
            return result["errorText"]
        if not self.loaded.wait(timeout):
            return f"its load event did not come in {timeout:g} s"
        return None

    def evaluate(self, expression: str, timeout: float, realm: Realm | None = None) -> dict[str, Any]:
        """``expression`` awaited in ``realm`` (the page's own by default): Runtime.evaluate's result."""
        params: dict[str, Any] = {"expression": expression, "awaitPromise": True, "returnByValue": True}
        session = self.session
        if realm is not None:
            session = realm.session
            if realm.context is not None:
                params["contextId"] = realm.context
        return self.browser.call("Runtime.evaluate", params, session, timeout)

    def each(self, expression: str, timeout: float) -> list[tuple[Realm, Any]]:
        """``expression`` in every live realm at once: (realm, value) pairs; a realm that does not
        answer in ``timeout`` is a TimeoutError naming it, one that fails a PageError (one that went away
        meanwhile is left out)."""
        with self._lock:
            live = [realm for realm in self.realms.values() if not realm.gone and realm.ready]
        answers: dict[int, Any] = {}
        done = threading.Event()
        left = [len(live)]
        if not live:
            return []

        def answered(index: int):
            def then(result: Any, error: Exception | None) -> None:
                answers[index] = error if error is not None else result
                left[0] -= 1
                if left[0] == 0:
                    done.set()
            return then

        for index, realm in enumerate(live):
            params: dict[str, Any] = {"expression": expression, "awaitPromise": True, "returnByValue": True}
            if realm.context is not None:
                params["contextId"] = realm.context
            self.browser.post("Runtime.evaluate", params, realm.session, answered(index))
        deadline = time.monotonic() + timeout
        while not done.wait(0.05) and time.monotonic() < deadline:
            # a realm that ends while asked never answers: stop waiting for it
            if all(index in answers or realm.gone or (realm.session, realm.context) not in self.realms
                   for index, realm in enumerate(live)):
                break
        found = []
        for index, realm in enumerate(live):
            answer = answers.get(index)
            if answer is None:
                if realm.gone or (realm.session, realm.context) not in self.realms:
                    continue
                raise TimeoutError(f"the {realm.name()} did not answer in {timeout:g} s")
            if isinstance(answer, PageError) and self.browser.gone:
                raise answer
            if isinstance(answer, PageError):
                if realm.gone or (realm.session, realm.context) not in self.realms:
                    continue  # it went away while asked
                raise PageError(f"the {realm.name()} could not be asked: {answer}")
            if "exceptionDetails" in answer:
                raise PageError(f"the {realm.name()}: {_exception_text(answer['exceptionDetails'])}")
            found.append((realm, answer.get("result", {}).get("value")))
        return found

    def totals(self, timeout: float) -> list[tuple[Realm, dict[str, Any]]]:
        """Every realm's totals: live ones asked now, ended workers as they last told."""
        found = []
        for realm, value in self.each("globalThis.__dispatch ? globalThis.__dispatch.own() : "
                                      "{missing: String(globalThis.location && location.href)}", timeout):
            if "missing" in value:
                raise PageError(f"the {realm.kind} {value['missing']} was not reached by the recorder before its "
                                 "first script (a frame of another origin, say), so its WebGPU calls cannot be "
                                 "counted; count a page whose realms use WebGPU from the page's own origin")
            found.append((realm, value))
        with self._lock:
            found += [(realm, realm.told) for realm in self.realms.values() if realm.gone and realm.told]
        return found

    def close(self) -> None:
        try:
            self.browser.call("Target.disposeBrowserContext", {"browserContextId": self.context_id}, timeout=10)
        except (PageError, TimeoutError):
            pass
        for session in [key[0] for key in self.realms] + [self.session]:
            self.browser.handlers.pop(session, None)


# Shared and service workers are the browser's targets, not the page's: the browser auto-attaches them.
_BROWSER_WORKERS = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True,
                    "filter": [{"type": "shared_worker"}, {"type": "service_worker"}, {"exclude": True}]}


def follow_browser_workers(browser: Chromium, pages: dict[str, PageRealms]) -> None:
    """Shared and service workers, each paused at its start, to the page of its browser context
    (``pages``: context id -> PageRealms); any other let go."""

    def on_event(method: str, params: dict[str, Any]) -> None:
        if method != "Target.attachedToTarget":
            return
        info = params["targetInfo"]
        page = pages.get(info.get("browserContextId", ""))
        if info.get("type") not in ("shared_worker", "service_worker"):
            browser.post("Runtime.runIfWaitingForDebugger", session=params["sessionId"])
        elif page is not None:
            page.adopt("", params)
        else:
            browser.post("Runtime.runIfWaitingForDebugger", session=params["sessionId"])
            browser.post("Target.detachFromTarget", {"sessionId": params["sessionId"]})

    browser.handlers[""] = on_event
    browser.call("Target.setAutoAttach", _BROWSER_WORKERS)


class Driver:
    """A page's realms as the measurement layer asks them (``measurement.page.PageDriver``); every
    question bounded: a page that does not answer 2 s past the time-out has its renderers ended
    (a page blocked for good) and the question is a time-out."""

    def __init__(self, page: Any, where: str) -> None:
        self.page, self.where = page, where

    def _bounded(self, ask, timeout: float):
        try:
            return ask(timeout + BLOCKED_GRACE)
        except TimeoutError as error:  # a call had no answer, or a realm (named) did not answer
            _end_renderers(self.page.browser)
            return {"timeout": True, "why": str(error)}
        except PageError as error:
            if not getattr(error, "protocol", False):
                raise  # a realm's own failure, named
            if self.page.crashed:
                error = self.page.crashed
            return {"error": {"name": "Error", "message": f"the page failed: {first_line(error)}", "stack": ""}}

    def call(self, method: str, args: list[Any], timeout: float) -> Any:
        expression = f"globalThis.__dispatch && globalThis.__dispatch.{method}(...{json.dumps(args)})"
        outcome = self._bounded(lambda limit: self.page.evaluate(expression, limit), timeout)
        if "result" in outcome:
            return outcome["result"].get("value")
        if "exceptionDetails" in outcome:
            details = outcome["exceptionDetails"]
            exception = details.get("exception") or {}
            text = str(exception.get("description") or details.get("text") or "")
            return {"error": {"name": "Error", "message": text.splitlines()[0] if text else "", "stack": ""}}
        return outcome

    def totals(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        found = self._bounded(self.page.totals, timeout)
        if isinstance(found, dict):
            raise as_error(found, f"the realms of {self.where}", timeout, named=True)
        return found

    def sync(self, timeout: float) -> None:
        found = self._bounded(lambda limit: self.page.each(
            "globalThis.__dispatch ? globalThis.__dispatch.sync().then(() => true) : true", limit), timeout)
        if isinstance(found, dict):
            raise as_error(found, f"a sync of {self.where}", timeout, named=True)

    def realm_name(self, realm: Any) -> str:
        return escaped(realm.name())

    def awaited(self, realm: Any) -> bool:
        # the recorder's sync() walks the page's frames in its process, not workers or other processes' frames
        return realm.kind in ("page", "frame") and realm.session == getattr(self.page, "session", realm.session)


def as_error(outcome: dict[str, Any], what: str, timeout: float, named: bool = False) -> PageError:
    """A failed question's outcome as a PageError; ``named``: a time-out names the realm that did not answer."""
    if outcome.get("timeout"):
        return PageError(outcome["why"] if named and outcome.get("why") else f"{what} did not answer in {timeout:g} s")
    return PageError(f"{what} could not be read: {outcome['error']['message']}")


def _end_renderers(browser: Any) -> None:
    """End the renderer processes of the page's browser (a page blocked for good): the page
    crashes, what waited on it returns, the session's browser goes on."""
    root = getattr(getattr(browser, "process", None), "pid", None) or os.getpid()
    for pid in descendants(root):
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # gone already, or not ours to end


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    if not Path("/proc").is_dir():
        return []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


_AUTO_ATTACH = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True}


def _exception_text(details: dict[str, Any]) -> str:
    exception = details.get("exception") or {}
    return str(exception.get("description") or details.get("text") or "an exception").splitlines()[0]

