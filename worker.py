"""Run a Stratagem worker: `python worker.py [--tools MODULE]...`.

Connection settings come from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and TEMPORAL_TASK_QUEUE;
tool steps write inside STRATAGEM_WORKSPACE.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from stratagem.config import Settings
from stratagem.errors import StratagemError
from stratagem.worker import run_worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a Stratagem worker.")
    parser.add_argument("--tools", action="append", default=[], metavar="MODULE", help="tool module (dotted name or .py file); repeatable")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env()
    print(f"stratagem worker: {settings.address} namespace={settings.namespace} task_queue={settings.task_queue}", flush=True)
    try:
        asyncio.run(run_worker(settings, args.tools))
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
