"""The trainer's developer benchmarks, on this app's environment, networks and settings
(`nnx_ppo_benchmarks.settings`, `nnx_ppo_benchmarks.children.ours`); each run as
``python -m nnx_ppo_benchmarks.trainer.<name>`` (its docstring has the commands).

- :mod:`.profile_iteration`: where an iteration of ``train_ppo`` spends its time, piece
  by piece (rollout, environment alone, network alone, GAE, the update phase, whole
  iterations), optionally with a ``jax.profiler`` trace;
- :mod:`.ab`: two variants of the trainer, whole iterations interleaved (advantages in
  the rollout or per minibatch; the loss replay as a time scan or as the trainer's
  sequence replay);
- :mod:`.sweep`: ``train_many`` of K runs against the same K runs one after another.
"""
