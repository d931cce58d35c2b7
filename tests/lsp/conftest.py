"""Fixtures for the language-server tests: a temporary repo and started editor clients."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from lsp_support import make_repo, start


@pytest.fixture()
def repo(tmp_path):
    return make_repo(tmp_path)


@pytest.fixture()
async def launch():
    """launch(env, cwd, init_options=None, configuration=None) -> (editor, initialize result);
    every server started is shut down (then stopped) after the test."""
    started = []

    async def go(*args, **kwargs):
        editor, result = await start(*args, **kwargs)
        started.append(editor.client)
        return editor, result

    yield go
    for client in started:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 120)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.stop(), 120)
