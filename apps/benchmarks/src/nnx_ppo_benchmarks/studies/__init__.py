"""The studies behind the suite's write-ups (``results/suite/*/README.md``): one module
per question, each run as ``python -m nnx_ppo_benchmarks.studies.<name>`` (its
docstring has the command that wrote its results).

- :mod:`.ablations`: brax PPO's choices, one at a time, on ours (K seeds per arm in one
  ``train_many``), and the stateful families' K-seed programs;
- :mod:`.limits`: how far an iteration is from the machine's limit: the environment
  alone, the rollout, the update and the iteration timed side by side against a
  roofline of their compiled programs (and brax PPO's iteration, ``--brax``);
- :mod:`.kl_trace`: per-iteration training metrics of one run (how far each update
  moves the policy);
- :mod:`.policy_shift`: where one update moves a policy: KL at each step of the
  rollout, its part through the carry, the update of each module;
- :mod:`.step_costs`: where an iteration's time goes per network family (rollout,
  replay, its gradient, the whole iteration), side by side;
- :mod:`.eval_paths`: ours' ``evaluate`` against brax's evaluator on one trained policy;
- :mod:`.wrapper_paths`: ours' training wrappers against brax's on the same actions;
- :mod:`.reset_modes`: the quickstart's ``--reset fresh`` against ``--reset cached``.
"""
