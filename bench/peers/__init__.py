"""peers: the same agent jobs on Stratagem and on the agent frameworks that run on Temporal.
(The measure itself is being written; see bench/peers/jobs.py for the jobs.)"""
