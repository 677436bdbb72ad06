"""The nnx-ppo quickstart: train a policy on a brax or Playground env in one command."""

__all__: list[str] = []
