"""Planner evals: how well a planner model (or a prompt version) plans a set of goals.

`stratagem eval` (stratagem.cli.evals) is the entry point. An eval set (`cases`) is a YAML or
JSONL file of goals, each with optional inputs, a reference plan and checks; `runner` plans
each goal through Stratagem's own planning loop (stratagem.io.planner) against a tool
catalogue, `scoring` scores the plans (valid or not, node and edge F1 against the reference,
the checks), `report` prints and writes the figures, and `from_runs` makes a set from the
recorded runs of a namespace, their approved plans as the references. docs/evals.md is the guide.
"""
