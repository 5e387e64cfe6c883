"""Run a Stratagem worker: `python worker.py [--tools MODULE]... [--role ROLE]... [--rate-limit ROLE=N]...`.

The same worker as `stratagem worker`, without the embedded setup's conveniences. Connection
settings come from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and TEMPORAL_TASK_QUEUE; tool steps
write inside STRATAGEM_WORKSPACE.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from stratagem.common.config import Settings
from stratagem.common.errors import StratagemError
from stratagem.common.signing import DecisionPolicy
from stratagem.worker import run_worker
from stratagem.worker_options import add_worker_arguments, check_worker_args, child_argv, describe_worker, run_processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a Stratagem worker.")
    add_worker_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env()
    try:
        options = check_worker_args(args)
        if options.processes > 1:
            return run_processes(child_argv(options), options.processes)
        policy = DecisionPolicy.from_env()
        print(
            f"stratagem worker: {settings.address} namespace={settings.namespace} task_queue={settings.task_queue}; "
            f"{describe_worker(options, settings.task_queue)}\n{policy.describe()}",
            flush=True,
        )
        asyncio.run(run_worker(settings, options, policy))
    except KeyboardInterrupt:
        return 130
    except StratagemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # the SDK raises RuntimeError when no server answers
        print(f"error: cannot connect to Temporal at {settings.address}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalization, where the Temporal SDK's native threads can abort the process.
    os._exit(code)
