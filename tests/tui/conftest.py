"""Fixtures of the app tests: per-test user folders and the async Pilot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from app_pilot import SIZE, StartApp
from fake_engine import FakeEngine, make_app
from textual._context import active_app
from textual.pilot import Pilot


@pytest.fixture(autouse=True)
def _user_dirs(tui_user_dirs: None) -> None:
    """Every app test gets its own data, config and cache folders."""


@pytest.fixture
async def start_app(tmp_path: Path) -> AsyncIterator[StartApp]:
    """Start the app under test and get its Pilot; every app started is shut down after the test.

    Each app runs inside `run_test` in a task of its own: Textual enters and
    leaves that context with context variables, which must happen in one
    asyncio context, and the fixture's teardown runs in another than the test;
    the test's own context gets the app as Textual's active app.
    """
    finished = asyncio.Event()
    running: list[asyncio.Task[None]] = []

    async def start(engine_or_factory: Any = None, *, size: tuple[int, int] = SIZE, **kwargs: Any) -> Pilot:
        engine = FakeEngine() if engine_or_factory is None else engine_or_factory
        app = make_app(tmp_path, engine, **kwargs)
        started: asyncio.Future[Pilot] = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            async with app.run_test(size=size) as pilot:
                started.set_result(pilot)
                await finished.wait()

        task = asyncio.create_task(hold())
        running.append(task)
        await asyncio.wait([task, started], return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            await task  # it failed before the app was up: raise its error here
        # The test calls screen methods directly, as the app's own handlers would.
        active_app.set(app)
        return started.result()

    yield start
    finished.set()
    for task in running:
        await task
