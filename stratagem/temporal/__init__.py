"""Stratagem's Temporal wiring: the plugin that puts the data converter, the workflow runner,
the decision checks and tracing on every client, worker and replayer, and the interceptors it
installs."""
