"""The request limiter shared by concurrent LLM episodes, and the order the rollout asks for."""

from __future__ import annotations

import asyncio

import pytest

from rescue_env.concurrency import PriorityLimiter, request_priority
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.rollout import EpisodeJob, arun_episodes


def test_at_most_limit_holders_and_all_served():
    async def main():
        limiter = PriorityLimiter(3)
        peak = 0

        async def call():
            nonlocal peak
            async with limiter.slot():
                peak = max(peak, limiter.in_use)
                await asyncio.sleep(0.001)

        await asyncio.gather(*(call() for _ in range(40)))
        return peak, limiter.in_use, limiter.waiting

    assert asyncio.run(main()) == (3, 0, 0)


def test_waiters_go_by_priority_then_arrival():
    async def main():
        limiter = PriorityLimiter(1)
        served: list[str] = []
        await limiter.acquire()  # hold the only slot while the others queue

        async def call(name, prio):
            async with limiter.slot(prio):
                served.append(name)

        tasks = [asyncio.create_task(call(n, p)) for n, p in [("a", 5), ("b", 1), ("c", 5), ("d", 0), ("e", 1)]]
        await asyncio.sleep(0)
        limiter.release()
        await asyncio.gather(*tasks)
        return served

    assert asyncio.run(main()) == ["d", "b", "e", "a", "c"]


def test_priority_comes_from_the_context_variable():
    async def main():
        limiter = PriorityLimiter(1)
        served: list[int] = []
        await limiter.acquire()

        async def call(prio):
            request_priority.set(prio)  # this task's context only
            async with limiter.slot():
                served.append(prio)

        tasks = [asyncio.create_task(call(p)) for p in (3, 2, 1)]
        await asyncio.sleep(0)
        limiter.release()
        await asyncio.gather(*tasks)
        return served, request_priority.get()

    assert asyncio.run(main()) == ([1, 2, 3], 0)


def test_cancelled_waiters_leak_no_slot():
    async def main():
        limiter = PriorityLimiter(1)
        await limiter.acquire()
        waiting = asyncio.create_task(limiter.acquire(0))
        await asyncio.sleep(0)
        waiting.cancel()  # cancelled while queued
        with pytest.raises(asyncio.CancelledError):
            await waiting
        handed = asyncio.create_task(limiter.acquire(0))
        await asyncio.sleep(0)
        limiter.release()  # the slot is handed to `handed`...
        handed.cancel()  # ...which is cancelled before it runs: it must pass the slot on
        with pytest.raises(asyncio.CancelledError):
            await handed
        return limiter.in_use, limiter.waiting

    assert asyncio.run(main()) == (0, 0)


def test_bad_limit():
    with pytest.raises(ValueError, match="at least 1"):
        PriorityLimiter(0)


class _RecordingAgent:
    """Listens every step; records the request priority its step's calls would carry."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def reset(self, *, seed=None):
        pass

    async def aact(self, observation, mask, state):
        self.log.append((self.name, request_priority.get()))
        await asyncio.sleep(0)
        return 0


def test_concurrent_rollout_serves_episodes_behind_first(seed_dialogues):
    # the rollout's order: admission index + steps played × window, so an episode admitted
    # late catches up instead of trailing the run, and episodes finish one after another
    couple = next(d for d in seed_dialogues if d.scenario == "couple")
    log: list[tuple[str, int]] = []
    jobs = [EpisodeJob("couple", f"a{i}", couple.sample_id, i) for i in range(3)]

    def make_env(scenario):
        return GroupSupportEnv(scenario, data_path=[couple], horizon=3, terminate_on_settle=False)

    records = asyncio.run(
        arun_episodes(jobs, make_env=make_env, make_agent=lambda s, name, env: _RecordingAgent(log, name), base_seed=0, max_in_flight=2)
    )
    assert [r.stats["steps"] for r in records] == [3, 3, 3]
    by_episode = {name: [p for n, p in log if n == name] for name in ("a0", "a1", "a2")}
    assert by_episode["a0"] == [0, 2, 4] and by_episode["a1"] == [1, 3, 5]
    assert by_episode["a2"] == [2, 4, 6]  # admitted third, after a0 ended


def test_an_episode_restores_the_callers_priority(seed_dialogues):
    from rescue_env.rollout import arun_episode

    couple = next(d for d in seed_dialogues if d.scenario == "couple")
    env = GroupSupportEnv("couple", data_path=[couple], horizon=2, terminate_on_settle=False)

    async def main():
        request_priority.set(7)
        await arun_episode(env, _RecordingAgent([], "x"), couple.sample_id, 0, 0, priority=lambda t: 100 + t)
        return request_priority.get()

    assert asyncio.run(main()) == 7


def test_set_limit_raises_at_once_and_lowers_as_holders_leave():
    async def main():
        limiter = PriorityLimiter(2)
        await limiter.acquire()
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        assert not waiter.done()
        limiter.set_limit(3)  # a new slot goes to the waiter now
        await asyncio.sleep(0)
        assert waiter.done() and limiter.in_use == 3
        limiter.set_limit(1)  # nobody is interrupted; two releases only pay the debt
        assert limiter.in_use == 3
        limiter.release()
        limiter.release()
        late = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        assert not late.done() and limiter.in_use == 1
        limiter.release()
        await asyncio.sleep(0)
        assert late.done() and limiter.in_use == 1

    asyncio.run(main())
