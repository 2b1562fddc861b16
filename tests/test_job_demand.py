"""``gate.map`` tells the backend limits its job's length (issue 31, round 11: "the job's
length"): its items not yet pulled, while the source is sized; unknown otherwise."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from gptgate.job_demand import JobDemand


def test_a_sized_map_counts_its_unpulled_items_until_it_ends() -> None:
    jobs = JobDemand()
    assert jobs.unsent_calls() is None  # no map: gate.chat traffic has no length
    job = jobs.start([{}] * 5)
    other = jobs.start(range(3))
    assert jobs.unsent_calls() == 8
    job.pulled()
    job.pulled()
    assert jobs.unsent_calls() == 6
    job.close()  # ended (or failed) with items left: they are no longer coming
    assert jobs.unsent_calls() == 3
    for _ in range(4):
        other.pulled()  # never below the items it had
    assert jobs.unsent_calls() == 0
    other.close()
    assert jobs.unsent_calls() is None


def test_a_source_of_unknown_length_makes_the_demand_unknown() -> None:
    def items() -> Iterator[dict[str, object]]:
        yield {}

    jobs = JobDemand()
    sized = jobs.start([{}] * 4)
    unsized = jobs.start(items())
    assert jobs.unsent_calls() is None
    unsized.close()
    assert jobs.unsent_calls() == 4
    sized.close()
    assert jobs.unsent_calls() is None


def test_a_cancelled_map_closes_its_job() -> None:
    jobs = JobDemand()

    async def main() -> None:
        with anyio.move_on_after(0.01):
            async with jobs.start([{}] * 10):
                await anyio.sleep(1)
        assert jobs.unsent_calls() is None
        with pytest.raises(RuntimeError):
            async with jobs.start([{}] * 10):
                raise RuntimeError("the job failed")
        assert jobs.unsent_calls() is None

    anyio.run(main)
