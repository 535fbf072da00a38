"""Shared fixtures for the Python tests that drive a running OpenAI-compatible server.

The server is started by `scripts/test-python.sh` (or by hand); the tests read its base URL from
`GGRS_SERVER_URL` (for example `http://127.0.0.1:8080`) and skip when it is unset. Set
`GGRS_SERVER_KIND=llama-server` when pointing them at llama.cpp's server: the tests marked
`ggrs_only` then skip (they check behaviour that llama-server does not share).
"""

import json
import os
import urllib.request

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "ggrs_only: checks behaviour specific to `ggrs serve`")


def pytest_collection_modifyitems(config, items):
    if server_kind() == "ggrs":
        return
    skip = pytest.mark.skip(reason=f"ggrs-only check; GGRS_SERVER_KIND={server_kind()}")
    for item in items:
        if "ggrs_only" in item.keywords:
            item.add_marker(skip)


def server_kind():
    """`ggrs` (the default) or whatever GGRS_SERVER_KIND names, e.g. `llama-server`."""
    return os.environ.get("GGRS_SERVER_KIND", "ggrs")


@pytest.fixture(scope="session")
def base_url():
    """The server's base URL without a trailing slash, e.g. http://127.0.0.1:8080."""
    url = os.environ.get("GGRS_SERVER_URL")
    if not url:
        pytest.skip("GGRS_SERVER_URL is not set (scripts/test-python.sh starts a server and sets it)")
    return url.rstrip("/")


@pytest.fixture(scope="session")
def api_key():
    """The API key the server expects, if any (GGRS_API_KEY)."""
    return os.environ.get("GGRS_API_KEY") or None


def get_json(url, api_key=None):
    """GET a JSON document; returns (status, parsed body or None)."""
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as err:
        return err.code, None


@pytest.fixture(scope="session")
def slot_ctx(base_url, api_key):
    """Context size of one slot, from GET /props (llama-server's `default_generation_settings.n_ctx`)."""
    status, props = get_json(f"{base_url}/props", api_key)
    assert status == 200, f"GET /props answered {status}"
    settings = props.get("default_generation_settings") or {}
    n_ctx = settings.get("n_ctx") or props.get("n_ctx")
    assert isinstance(n_ctx, int) and n_ctx > 0, f"no slot context size in /props: {props}"
    return n_ctx
