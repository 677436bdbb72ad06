"""The pixel T-Maze: its images, its optimum and its memoryless value by hand, and the
conv families' networks on it."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_benchmarks.published.pixel_tmaze import PixelTMaze
from nnx_ppo_benchmarks.published.run import build_network, make_envs
from nnx_ppo_benchmarks.published.tasks import BENCHMARKS, CONV_FAMILIES

NORTH, SOUTH, EAST, WEST = 0, 1, 2, 3
MAZE, AGENT, CUE = 0, 1, 2


@pytest.fixture
def play(play_tmaze: Any) -> Any:
    """``play(goal_south, actions)``: the pixel T-Maze played (see ``play_tmaze``)."""
    return functools.partial(play_tmaze, PixelTMaze())


def test_the_images_show_the_maze_the_agent_and_the_cue_only_at_the_start(play):
    north, _, _ = play(0, [EAST] * 6)
    south, _, _ = play(1, [WEST, EAST, *[EAST] * 6])
    assert north[0].shape == (3, 7, 3) and north[0].dtype == np.float32
    maze = np.zeros((3, 7))
    maze[1, :] = maze[0, 6] = maze[2, 6] = 1
    for image in (*north, *south):
        np.testing.assert_array_equal(image[..., MAZE], maze)
        assert image[..., AGENT].sum() == 1 and image[..., AGENT][1].sum() == 1
    # The agent's column is its cell; a west step at the wall keeps it at the start.
    assert [int(np.argmax(im[1, :, AGENT])) for im in north] == [0, 1, 2, 3, 4, 5, 6]
    # The cue lights the goal's arm on the start cell, whichever the side, and only there.
    assert north[0][0, 6, CUE] == 1 and north[0][..., CUE].sum() == 1
    assert south[0][2, 6, CUE] == 1 and south[0][..., CUE].sum() == 1
    assert south[1][2, 6, CUE] == 1  # still on the start cell after the west step
    assert all(im[..., CUE].sum() == 0 for im in (*north[1:], *south[2:]))


def test_optimum_4_and_memoryless_coin_flip_1_95(play):
    walk = [EAST] * 6
    assert play(0, [*walk, NORTH])[1:] == (4.0, True)
    assert play(1, [*walk, SOUTH])[1:] == (4.0, True)
    # At the junction the image is the same for both goals, so a memoryless policy turns
    # the same way for both: one right, one wrong, 1.95 on average.
    at_junction = [play(g, walk)[0][-1] for g in (0, 1)]
    np.testing.assert_array_equal(at_junction[0], at_junction[1])
    memoryless = [play(g, [*walk, NORTH])[1] for g in (0, 1)]
    assert memoryless == pytest.approx([4.0, -0.1])
    assert np.mean(memoryless) == pytest.approx(1.95)


def test_the_conv_families_act_on_the_flattened_images():
    bench = BENCHMARKS["pixel_tmaze"]
    assert bench.families == CONV_FAMILIES
    env, _ = make_envs(bench)
    # The benchmark's corridor of 2 cells: a 3x4 image of 3 channels, flattened.
    assert bench.image == (3, 4, 3)
    assert env.observation_size == 3 * 4 * 3 and env.action_size == 4
    state = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 3))
    for family in CONV_FAMILIES:
        net = build_network(bench, family, env.observation_size, env.action_size, nnx.Rngs(0))
        out = net(net.initialize_state(3), state.obs).output
        assert out.actions.shape == (3,) and out.value_estimates.shape == (3,)
    with pytest.raises(ValueError, match="family='lstm' is not one of pixel_tmaze's"):
        build_network(bench, "lstm", env.observation_size, 4, nnx.Rngs(0))
