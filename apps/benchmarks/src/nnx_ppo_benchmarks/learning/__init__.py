"""Learning-quality suite: how well each network family learns partially observable
tasks, for this workspace's ``train_ppo`` and for nnx-ppo 0.3.0.

``nnx-ppo-learning`` (see :mod:`.cli`) trains every (task, family, implementation) cell
for several seeds with the same hyperparameters and step budget, evaluates each run
periodically, and writes ``results.json``, ``results.md`` (median and 95% bootstrap
interval of the final return and of the area under the learning curve) and one
learning-curve PNG per task (median and 95% bootstrap band over seeds).

Modules: :mod:`.tasks` (what is learned), :mod:`.families` (which networks),
:mod:`.report` (tables and plots), the two child processes :mod:`.child_ours` and
:mod:`.child_nnx_ppo_030`, and :mod:`.cli`; the bootstrap statistics are shared with the
other tools (:mod:`nnx_ppo_benchmarks.common`).
"""
