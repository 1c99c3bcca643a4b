import pytest

from creditline.envs import make_env
from creditline.envs.maze import MazeEnv, layout_for_task


def walk(env: MazeEnv, target):
    """Actions that move from the current position to `target` (x first, then y)."""
    moves = []
    x, y = env._pos
    moves += ["right" if target[0] > x else "left"] * abs(target[0] - x)
    moves += ["down" if target[1] > y else "up"] * abs(target[1] - y)
    return moves


def test_maze_layout_is_a_function_of_the_task():
    assert layout_for_task(7, 5) == layout_for_task(7, 5)
    assert len({layout_for_task(t, 5) for t in range(50)}) > 40
    layout = layout_for_task(3, 5)
    assert len({layout.start, layout.key, layout.door}) == 3


def test_maze_anchor_is_history_free():
    env = MazeEnv()
    first = env.reset(11, seed=0)
    again = MazeEnv().reset(11, seed=99)
    assert first == again  # the seed does not change the layout
    assert first.text.startswith("go key ") and first.text.endswith(" last none")
    assert first.anchor.startswith("pos ") and first.anchor.endswith("have no")
    absolute = MazeEnv(view="absolute").reset(11, seed=0)
    assert absolute.text == absolute.anchor + " last none" and absolute.anchor == first.anchor
    env = MazeEnv()
    env.reset(11, seed=0)
    moved = env.step("jump")
    assert moved.observation.text.endswith("last invalid") and moved.observation.anchor == first.anchor


def test_invalid_action_costs_penalty_and_does_not_move():
    env = MazeEnv(invalid_penalty=0.1)
    start = env.reset(5, seed=0)
    result = env.step("jump")
    assert result.reward == pytest.approx(-0.1)
    assert not result.valid_action
    assert result.observation.anchor == start.anchor  # same state; only the "last invalid" hint changes
    assert not result.done and not result.truncated


def test_wall_bump_is_valid_and_free():
    env = MazeEnv(size=5)
    env.reset(5, seed=0)
    env._pos = (0, 0)
    result = env.step("left")
    assert result.valid_action and result.reward == 0.0
    assert env._pos == (0, 0)


def test_key_then_door_solves_with_reward_one():
    env = MazeEnv(size=5, max_steps=50)
    env.reset(2, seed=0)
    layout = env._layout
    for action in walk(env, layout.key):
        result = env.step(action)
    assert env._has_key
    assert "have yes" in result.observation.anchor and result.observation.text.startswith("go door")
    for action in walk(env, layout.door):
        result = env.step(action)
    assert result.done and result.success and result.reward == pytest.approx(1.0)


def test_door_without_key_does_not_solve():
    env = MazeEnv(size=5, max_steps=50)
    env.reset(2, seed=0)
    door, key = env._layout.door, env._layout.key
    for action, (dx, dy) in [("right", (-1, 0)), ("left", (1, 0)), ("down", (0, -1)), ("up", (0, 1))]:  # noqa: B007 (used after the loop)
        neighbour = (door[0] + dx, door[1] + dy)
        if 0 <= neighbour[0] < 5 and 0 <= neighbour[1] < 5 and neighbour != key:
            break
    env._pos, env._has_key = neighbour, False
    result = env.step(action)
    assert env._pos == door
    assert not result.success and not result.done and result.reward == 0.0


def test_step_limit_truncates():
    env = MazeEnv(max_steps=3)
    env.reset(1, seed=0)
    results = [env.step("nonsense") for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]


def test_arithmetic_checks_the_answer():
    env = make_env("arithmetic", max_operand=9)
    obs = env.reset(4, seed=0)
    a, b = [int(t) for t in obs.text.replace("=", "").split("+")]
    right = " ".join(str(a + b))
    assert env.step(right).reward == 1.0
    env.reset(4, seed=0)
    wrong = env.step(" ".join(str(a + b + 1)))
    assert wrong.reward == 0.0 and wrong.valid_action and wrong.done
    env.reset(4, seed=0)
    assert not env.step("up").valid_action


def test_unknown_environment_and_parameter_fail_clearly():
    with pytest.raises(ValueError, match="environment 'nope' is neither a registered environment"):
        make_env("nope")
    with pytest.raises(ValueError, match="bad parameters for environment 'maze'"):
        make_env("maze", colour="red")


def test_progress_shaping_is_potential_based_and_telescopes():
    env = MazeEnv(size=5, max_steps=50, progress_reward=0.1)
    env.reset(2, seed=0)
    layout = env._layout
    start_distance = env._remaining_distance()
    toward = walk(env, layout.key)[0]
    first = env.step(toward)
    assert first.reward == pytest.approx(0.1)  # one step closer
    back = {"up": "down", "down": "up", "left": "right", "right": "left"}[toward]
    assert env.step(back).reward == pytest.approx(-0.1)  # and back again: a loop earns nothing
    total = 0.0
    for action in walk(env, layout.key):
        total += env.step(action).reward
    for action in walk(env, layout.door):
        result = env.step(action)
        total += result.reward
    assert result.success
    # shaping telescopes: c · (distance at start − 0), plus the success reward
    assert total == pytest.approx(0.1 * start_distance + 1.0)


def test_relative_view_points_at_the_current_target():
    env = MazeEnv(size=5, max_steps=50)
    env.reset(2, seed=0)
    env._pos, env._has_key = (1, 3), False
    env._layout = type(env._layout)(start=(1, 3), key=(4, 1), door=(0, 0))
    assert env._observe().text == "go key right 3 up 2 last none"
    env._has_key = True
    assert env._observe().text.startswith("go door left 1 up 3")
