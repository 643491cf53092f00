"""The seeds `dmpo.utils.seeds` derives for the agent's parts keep their recorded values: exact resume
and recorded runs depend on them. The expected numbers were computed once with numpy's
`SeedSequence` directly (and `PRNGKey(s) == [0, s]` for a seed below 2**32), not with these functions."""

from __future__ import annotations

import numpy as np

from dmpo.agent.acting import env_keys
from dmpo.utils.seeds import agent_seeds, lockstep_env_seeds, reward_probe_seed


def test_agent_seeds_are_the_three_words_of_the_seed_sequence():
    # SeedSequence(42).generate_state(3) and SeedSequence(0).generate_state(3)
    assert agent_seeds(42) == (3444837047, 2669555309, 2046530742)
    assert agent_seeds(0) == (2968811710, 3677149159, 745650761)
    assert agent_seeds(42).actor == 2046530742  # the order: table, learner, actor


def test_lockstep_seeds_and_the_actor_keys_derived_from_them():
    # SeedSequence([7, 1]) and SeedSequence([7, 2]); environment 0 keeps the seed itself.
    assert lockstep_env_seeds(7, 3) == [7, 369571992, 1009178997]
    np.testing.assert_array_equal(env_keys(7, 3), [[0, 7], [0, 369571992], [0, 1009178997]])


def test_reward_probe_seed_is_the_seed_plus_its_offset():
    assert reward_probe_seed(42) == 7_920_035
    assert reward_probe_seed(0) == 7_919_993
