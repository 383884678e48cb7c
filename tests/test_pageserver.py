"""The page server serves the session's browser only: its secret in every path, its own Host,
nothing outside the mounted folders, and no traceback from its threads."""

import http.client
import os
import urllib.parse

import pytest

from pytest_dispatch.plugin.pageserver import PageServer


@pytest.fixture
def served(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "page.html").write_text("<p>private</p>")
    (tmp_path / "outside.txt").write_text("outside")
    (private / "out").symlink_to(tmp_path / "outside.txt")
    server = PageServer()
    try:
        yield server, server.mount(private)
    finally:
        server.close()


def get(server, path, host=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host or server.host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def path_of(url):
    return urllib.parse.urlsplit(url).path


def test_the_session_browser_reads_a_mounted_page(served):
    server, url = served
    assert get(server, path_of(url) + "page.html") == (200, b"<p>private</p>")
    assert get(server, path_of(server.blank))[0] == 200


def test_a_path_without_the_session_secret_is_not_served(served):
    server, url = served
    name = path_of(url).rstrip("/").rsplit("/", 1)[1]
    assert get(server, f"/{name}/page.html")[0] == 404
    assert get(server, "/__dispatch__/blank.html")[0] == 404
    wrong = path_of(url).replace(server.secret, "x" * len(server.secret))
    assert get(server, wrong + "page.html")[0] == 404


def test_another_host_is_refused(served):
    server, url = served
    assert get(server, path_of(url) + "page.html", host=f"rebound.example:{server.server_address[1]}")[0] == 421


@pytest.mark.parametrize("tail", ["../outside.txt", "%2e%2e/outside.txt", "out", "page.html%00", "%00", "%ff"])
def test_nothing_outside_the_folders_and_no_traceback(served, capfd, tail):
    server, url = served
    status, body = get(server, path_of(url) + tail)
    assert status == 404 and b"outside" not in body
    assert capfd.readouterr().err == ""
