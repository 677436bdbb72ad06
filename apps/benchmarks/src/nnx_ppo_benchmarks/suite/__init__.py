"""The continuous-control suite and the GPU benchmark (ours vs brax PPO 0.14.2).

- :mod:`.tasks`: the tasks and their settings (Playground's per-task brax-PPO settings);
- :mod:`.variants`: partially observed variants (``CartpoleBalance/masked``: velocities
  removed; ``.../masked-history4``: the last 4 observations stacked);
- :mod:`.run`: the plan and its child processes (the side-by-side benchmark's children);
- :mod:`.report`: the tables (return with a 95% interval, steps/s, ratios ours/brax);
- :mod:`.cli`: ``nnx-ppo-suite`` / ``nnx-ppo-bench --suite control``;
- :mod:`.gpu`: ``nnx-ppo-bench --suite gpu``, the GPU benchmark (``--tiny`` on CPU).
"""
