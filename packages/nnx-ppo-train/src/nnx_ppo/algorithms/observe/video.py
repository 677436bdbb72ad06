"""Videos of the policy during training (`VideoConfig`): one deterministic episode,
rendered with the environment's own ``render`` and written as MP4 with ``mediapy``.

**What a video needs.** ``mediapy`` (``pip install 'nnx-ppo-train[video]'``) and an
``ffmpeg`` binary on ``PATH`` to write MP4; for brax and MuJoCo Playground environments,
an OpenGL context for MuJoCo's renderer. MuJoCo picks its OpenGL backend from
``MUJOCO_GL`` once, when it is imported: ``glfw`` (the default) needs a display,
``egl`` a GPU driver (a headless GPU machine), ``osmesa`` the OSMesa library (software
rendering, any machine). On a machine without a display, call `choose_mujoco_gl` first
thing in the script, before brax or Playground is imported: it tries ``egl`` then
``osmesa`` in a subprocess and sets ``MUJOCO_GL`` to the first that renders. Either way
`check_video_env` (which the trainers call before compiling) renders one frame and
checks the encoder, so a missing piece is an error before training, not after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from nnx_ppo.algorithms.config import VideoConfig
from nnx_ppo.algorithms.core.rollout import network_step, ppo_output, reset_envs

__all__ = ["check_video_env", "choose_mujoco_gl", "make_video_recorder"]


def _write_video(path: str, frames: Any, fps: float) -> None:
    import mediapy

    mediapy.write_video(path, frames, fps=fps)


def _writer_problem() -> str | None:
    """Why MP4 files cannot be written here (``mediapy`` or ``ffmpeg`` missing), or
    ``None``."""
    try:
        import mediapy  # noqa: F401
    except ImportError:
        return (
            "writing MP4 needs mediapy: pip install 'nnx-ppo-train[video]' (it also "
            "needs an ffmpeg binary on PATH)"
        )
    if shutil.which("ffmpeg") is None:
        return (
            "mediapy writes MP4 with an ffmpeg binary, and none is on PATH: install one "
            "(apt-get install ffmpeg, or conda install ffmpeg)"
        )
    return None


_MUJOCO_RENDER_FAILURE: list[str] = []
"""The message of this process's first failure to render with MuJoCo, if any. MuJoCo's
OpenGL context is the process's: after a failed attempt to create it, the next attempt
aborts the whole process, so later checks raise the same error without rendering."""


_GL_PROBE = "import mujoco; c = mujoco.GLContext(8, 8); c.make_current(); c.free()"


def choose_mujoco_gl(candidates: tuple[str, ...] = ("egl", "osmesa")) -> str | None:
    """Pick MuJoCo's OpenGL backend for headless rendering, before MuJoCo is imported.

    With ``MUJOCO_GL`` already set, or a display (``DISPLAY`` / ``WAYLAND_DISPLAY``),
    nothing changes. Otherwise each candidate is tried in a fresh Python process (a
    failed OpenGL context can abort the process that tries it), and ``MUJOCO_GL`` (and
    ``PYOPENGL_PLATFORM``) are set to the first that creates one.

    Args:
        candidates: The backends to try, in order.

    Returns:
        The backend MuJoCo will use (``MUJOCO_GL``), ``"glfw"`` with a display, or
        ``None`` when none works here (`check_video_env` then says what to install).

    Raises:
        RuntimeError: If MuJoCo was imported already with ``MUJOCO_GL`` unset and no
            display: its backend is fixed; call this before importing brax or
            Playground.
    """
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return "glfw"
    if "mujoco" in sys.modules:
        raise RuntimeError(
            "choose_mujoco_gl() must run before mujoco is imported (brax and MuJoCo "
            "Playground import it): MuJoCo fixes its OpenGL backend at import. Call it "
            "first thing in the script, or set MUJOCO_GL=egl / osmesa in the environment."
        )
    for backend in candidates:
        env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
        try:
            probe = subprocess.run(
                [sys.executable, "-c", _GL_PROBE], env=env, capture_output=True, timeout=120
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            os.environ["MUJOCO_GL"] = os.environ["PYOPENGL_PLATFORM"] = backend
            return backend
    return None


def _render_error(env_name: str, cause: str) -> ValueError:
    return ValueError(
        f"VideoConfig(enabled=True): {env_name} cannot render a frame on this machine "
        f"({cause}). MuJoCo renders with OpenGL: set MUJOCO_GL=egl on a headless GPU "
        "machine or MUJOCO_GL=osmesa for software rendering (libosmesa), call "
        "nnx_ppo.algorithms.observe.video.choose_mujoco_gl() before importing brax or Playground, "
        "or run with a display; or disable the video."
    )


def _renders_with_mujoco(env: Any) -> bool:
    """Whether ``env`` is a brax or MuJoCo Playground environment (they render with
    MuJoCo's OpenGL renderer)."""
    module = type(getattr(env, "unwrapped", env)).__module__.split(".")[0]
    return module in ("brax", "mujoco_playground")


def _uses_pipeline_state(env: Any) -> bool:
    """Whether ``env.render`` takes brax pipeline states rather than env states."""
    return type(getattr(env, "unwrapped", env)).__module__.startswith("brax")


def check_video_env(
    env: Any, *, env_name: str = "eval_env", video: VideoConfig | None = None
) -> None:
    """Check that ``env`` can render videos and that they can be written, before
    anything is compiled.

    With ``video``, one frame of a reset state is rendered at the video's size and
    camera, so a machine without an OpenGL renderer (MuJoCo needs ``MUJOCO_GL=egl`` on
    a headless GPU machine, ``osmesa`` for software rendering, or a display) fails here
    rather than after training.

    Raises:
        ValueError: If ``env`` has no ``render`` method, cannot render a frame here, or
            MP4 files cannot be written (``mediapy`` or ``ffmpeg`` missing); names
            ``env_name`` and the fix.
    """
    if not callable(getattr(env, "render", None)):
        raise ValueError(
            "VideoConfig(enabled=True) needs an environment with render(trajectory, "
            f"height=, width=, camera=) (brax and MuJoCo Playground have one); "
            f"{env_name} is a {type(env).__name__}, which has none. Pass an eval_env "
            "that renders, or disable the video."
        )
    if video is None:
        return
    problem = _writer_problem()
    if problem is not None:
        raise ValueError(f"VideoConfig(enabled=True): {problem}; or disable the video.")
    mujoco = _renders_with_mujoco(env)
    if mujoco and _MUJOCO_RENDER_FAILURE:
        cause = f"{_MUJOCO_RENDER_FAILURE[0]}, at this process's first attempt, not retried"
        raise _render_error(env_name, cause)
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    frame = state.pipeline_state if _uses_pipeline_state(env) else state
    try:
        env.render([frame], height=video.height, width=video.width, camera=video.camera)
    except Exception as error:  # MuJoCo raises its own FatalError without a renderer
        cause = f"{type(error).__name__}: {error}"
        if mujoco and type(error).__module__.split(".")[0] == "mujoco":
            _MUJOCO_RENDER_FAILURE.append(cause)
        raise _render_error(env_name, cause) from error


def make_video_recorder(
    env: Any, graphdef: nnx.GraphDef, video: VideoConfig
) -> Callable[[nnx.State, nnx.State, jax.Array, int], str]:
    """Build ``record(params, network_state, key, step, directory=None) -> path``: one
    episode of ``video.episode_length`` steps of the network (``graphdef``, eval mode
    for the mean action) from a fresh reset, rendered with ``env.render`` and written to
    ``<directory>/video_<step>.mp4`` (``directory`` defaults to ``video.directory``).

    Args:
        env: The unbatched environment (with ``render``; see `check_video_env`).
        graphdef: The network's ``GraphDef``.
        video: The `VideoConfig`.

    Returns:
        The recorder; the trajectory is jitted once.
    """
    check_video_env(env)
    fps = video.fps or (1.0 / float(env.dt) if hasattr(env, "dt") else 30.0)
    pipeline = _uses_pipeline_state(env)

    @jax.jit
    def trajectory(params, network_state, key):
        model = nnx.merge(graphdef, params, network_state)
        carry = model.initialize_state(1)
        env_state = reset_envs(env, key, 1)

        def video_step(loop, _):
            net_state, env_s, net_carry = loop
            net_state, out = network_step(graphdef, params, net_state, net_carry, env_s.obs)
            next_env = jax.vmap(env.step)(env_s, ppo_output(out).actions)
            return (net_state, next_env, out.next_state), next_env

        _, states = jax.lax.scan(
            video_step, (network_state, env_state, carry), None, length=video.episode_length
        )
        return states

    def record(params, network_state, key, step: int, directory: str | None = None) -> str:
        states = jax.device_get(trajectory(params, network_state, key))
        frames_in = []
        for t in range(video.episode_length):
            s = jax.tree.map(lambda x, t=t: x[t, 0], states)
            frames_in.append(s.pipeline_state if pipeline else s)
        frames = env.render(frames_in, height=video.height, width=video.width, camera=video.camera)
        folder = video.directory if directory is None else directory
        assert folder is not None
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"video_{step}.mp4")
        _write_video(path, frames, fps)
        return path

    return record
