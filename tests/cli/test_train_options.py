"""`gpuwatch train`'s pure pieces, as tables: the --restart policy and the exit status a shell would report."""

from __future__ import annotations

import pytest

from gpuwatch.cli.train.run import exit_status
from gpuwatch.train.argv import RestartPolicy, parse_restart


@pytest.mark.parametrize("text, policy, allowed_after", [
    ("no", RestartPolicy(), []),
    ("on-failure", RestartPolicy(on_failure=True), list(range(200))),  # unbounded
    ("on-failure:1", RestartPolicy(on_failure=True, max_restarts=1), [0]),
    ("on-failure:3", RestartPolicy(on_failure=True, max_restarts=3), [0, 1, 2]),
])
def test_restart_policies_round_trip_and_bound_the_restarts(text: str, policy: RestartPolicy,
                                                             allowed_after: list[int]) -> None:
    assert parse_restart(text) == policy and str(policy) == text  # as Attach.restart carries it
    assert [n for n in range(200) if policy.allows(n)] == allowed_after


@pytest.mark.parametrize("text", ["", "yes", "always", "on-failure:", "on-failure:0", "on-failure:-1",
                                  "on-failure:x", "on_failure", "No"])
def test_other_restart_spellings_are_refused_saying_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="give no, on-failure or on-failure:N"):
        parse_restart(text)


@pytest.mark.parametrize("returncode, status", [(0, 0), (3, 3), (255, 255), (-2, 130), (-9, 137), (-15, 143)])
def test_the_exit_status_is_the_commands_128_plus_n_for_a_signal(returncode: int, status: int) -> None:
    assert exit_status(returncode) == status
