"""A modular controller for brax's ant: one PopulationGraph population per body part."""

__all__: list[str] = []
