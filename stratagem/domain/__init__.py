"""The pure domain: what a plan is and which plans are valid, a run's state and ledger, the
decisions a run takes and their rules, which steps are ready, and what usage costs.

Plain Python and pydantic, with no Temporal in it (`lint-imports` holds that): the workflow
applies these rules, and they are tested without a server. Rules over a run's state sit above
the vocabulary they use (a second contract in pyproject.toml)."""
