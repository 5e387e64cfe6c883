"""What `run` and `stratagem server` start in a STRATAGEM_HOME: the embedded Temporal server
(embedded.py), persisted to SQLite in `$STRATAGEM_HOME/temporal.db` so runs survive a restart,
and the background worker that serves its runs (background_worker.py).

addresses.py reads Temporal addresses, home.py prepares the home and writes its state files,
processes.py tells whether a recorded pid is still the process that was started, marks.py names
a server's home where its clients can read it, and worker_log.py reads why a worker ended.
"""

from stratagem.server.addresses import LOCAL_HOSTS, MAX_PORT, is_listening, is_local, split_address
from stratagem.server.background_worker import (
    WORKER_ENV,
    BackgroundWorker,
    code_fingerprint,
    worker_settings_fingerprint,
    worker_settings_given,
)
from stratagem.server.embedded import EmbeddedServer, owns_server
from stratagem.server.home import prepare_home
from stratagem.server.marks import HOME_KEY, mark_home, marked_home
from stratagem.server.worker_log import WorkerExit

__all__ = [
    "HOME_KEY",
    "LOCAL_HOSTS",
    "MAX_PORT",
    "WORKER_ENV",
    "BackgroundWorker",
    "EmbeddedServer",
    "WorkerExit",
    "code_fingerprint",
    "is_listening",
    "is_local",
    "mark_home",
    "marked_home",
    "owns_server",
    "prepare_home",
    "split_address",
    "worker_settings_fingerprint",
    "worker_settings_given",
]
