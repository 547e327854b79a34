"""The pulse and watch of ``train.liveness``, on a fake key-value store and a fake clock (the
two-process SIGKILL test in tests/e2e/test_processes_train.py runs it for real)."""

from __future__ import annotations

import pytest

from arlarena_jax.train.liveness import Liveness


class Store:
    """The coordination client's key-value calls that the watch uses; ``down`` = unreachable."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.down = False

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        if self.down:
            raise RuntimeError("UNAVAILABLE")
        assert allow_overwrite or key not in self.values
        self.values[key] = value

    def key_value_try_get(self, key: str) -> str:
        if self.down or key not in self.values:
            raise RuntimeError("UNAVAILABLE" if self.down else "NOT_FOUND")
        return self.values[key]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def three():
    """Three processes' watches on one store, with a shared clock; process 0's losses recorded."""
    store, clock, said = Store(), Clock(), []
    watches = [
        Liveness(store, p, 3, timeout_s=10.0, on_lost=said.append, clock=clock) for p in range(3)
    ]
    for watch in watches:
        watch.beat()
    for watch in watches:
        watch.silent()  # each watch starts at t = 0, as Liveness.start does
    return store, clock, watches, said


def test_processes_that_keep_beating_are_never_lost(three):
    _, clock, watches, said = three
    for _ in range(20):  # 40 s, a beat every 2 s < 10 s
        clock.now += 2.0
        watches[1].beat()
        watches[2].beat()
        watches[0].check()
    assert said == []


def test_a_silent_process_is_lost_after_the_timeout_and_not_before(three):
    _, clock, watches, said = three
    for _ in range(4):  # process 2 stops beating at t = 0
        clock.now += 2.0
        watches[1].beat()
        watches[0].check()
    clock.now = 9.9
    watches[0].check()
    assert said == []
    clock.now = 10.0
    watches[1].beat()
    watches[0].check()
    assert len(said) == 1
    assert said[0].startswith("process 2 stopped answering (no pulse for 10 s")


def test_a_process_that_finished_is_not_expected_to_beat(three):
    store, clock, watches, said = three
    watches[2].finish()  # never started: finish only says so
    assert store.values["arlarena/finished/2"] == "1"
    clock.now = 60.0
    watches[1].beat()
    watches[0].check()
    assert said == []


def test_an_unreachable_store_counts_as_silence(three):
    store, clock, watches, said = three
    store.down = True  # process 0, the coordinator, is gone (as seen from process 1)
    clock.now = 5.0
    watches[1].check()
    assert said == []
    clock.now = 10.0
    watches[1].check()
    assert said and said[0].startswith("process 0, 2 stopped answering")


def test_a_process_never_seen_is_lost_a_timeout_after_the_watch_began():
    store, clock, said = Store(), Clock(), []
    watch = Liveness(store, 0, 2, timeout_s=4.0, on_lost=said.append, clock=clock)
    watch.beat()
    watch.silent()
    clock.now = 3.9
    watch.check()
    assert said == []
    clock.now = 4.0
    watch.check()
    assert said == [said[0]] and "process 1" in said[0]


def test_the_thread_beats_and_watches_until_finished():
    """Real time, a 1 s timeout (beats every 0.2 s): process 1 never beats, so the watch of
    process 0 reports it within about a second; finishing stops the thread."""
    import threading

    store, lost = Store(), threading.Event()
    watch = Liveness(store, 0, 2, timeout_s=1.0, on_lost=lambda _: lost.set())
    watch.start()
    assert lost.wait(5.0)
    beats = int(store.values["arlarena/pulse/0"])
    assert beats >= 3
    watch.finish()
    assert watch._thread is not None and not watch._thread.is_alive()


def test_the_thread_is_stopped_at_exit_without_saying_finished(monkeypatch):
    """``start`` registers ``stop`` to run at interpreter exit (the daemon thread must not be in
    the store's C++ when Python finalises); stopping says nothing to the others, so after a
    failure they still see this process's pulse stop."""
    import atexit

    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    store = Store()
    watch = Liveness(store, 0, 2, timeout_s=1.0, on_lost=lambda _: None)
    watch.start()
    assert registered == [watch.stop]
    watch.stop()
    assert watch._thread is not None and not watch._thread.is_alive()
    assert "arlarena/finished/0" not in store.values
