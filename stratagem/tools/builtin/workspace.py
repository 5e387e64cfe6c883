"""Paths in the run's workspace, the only folder the file tools touch: a path is resolved once,
and anything that leads outside (an absolute path, '..', a symlink, a hard link) is refused."""

import contextlib
import os
import tempfile
from pathlib import Path, PurePosixPath

from stratagem.common.errors import ToolError
from stratagem.common.paths import stratagem_home
from stratagem.tools.definition import ToolContext

MAX_NAME_BYTES = 255  # what Linux and macOS file systems allow in one name
RESERVED_DIR = ".stratagem"


def workspace_root(ctx: ToolContext) -> Path:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    return ctx.workspace.resolve()


def is_absolute(path: str) -> bool:
    native = Path(path)
    return native.is_absolute() or bool(native.drive) or path.startswith(("/", "\\"))


def workspace_path(ctx: ToolContext, path: str, *, writing: bool = False) -> Path:
    """Resolve a workspace-relative path, refusing anything that ends up outside the workspace."""
    if not path or "\x00" in path:
        raise ToolError("file path must be a non-empty path relative to the workspace", retryable=False)
    if is_absolute(path):
        raise ToolError(f"path '{path}' is absolute; give a path relative to the workspace", retryable=False)
    if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in PurePosixPath(path.replace("\\", "/")).parts):
        raise ToolError(f"path '{path[:80]}...' has a name longer than {MAX_NAME_BYTES} bytes", retryable=False)
    root = workspace_root(ctx)
    # resolve() follows symlinks, so a link that points outside is caught as well as '..'.
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"path '{path}' is outside the workspace", retryable=False)
    # A hard link cannot be told from the file it shares: if one was planted here, reading or
    # writing through it would reach a file outside the workspace.
    with contextlib.suppress(OSError):
        if target.is_file() and target.stat().st_nlink > 1:
            raise ToolError(
                f"path '{path}' is a file with other hard links, which may lead outside the workspace", retryable=False
            )
    if target == root:
        raise ToolError(f"path '{path}' is the workspace folder itself; name a file in it", retryable=False)
    if _home_secret(target):
        # A workspace that holds the worker's home (STRATAGEM_WORKSPACE=~ , say) must not let a step
        # read a private key, or plant one the worker would then trust for its name.
        raise ToolError(f"path '{path}' is one of the worker's keys or console secrets", retryable=False)
    if writing and target.relative_to(root).parts[0] == RESERVED_DIR:
        raise ToolError(f"path '{path}' is inside '{RESERVED_DIR}', which Stratagem reserves", retryable=False)
    return target


def _home_secret(target: Path) -> bool:
    """Whether `target` is in the home's keys folder or is its console secret or users file."""
    home = stratagem_home().resolve()
    if target.is_relative_to(home / "keys"):
        return True
    return target in (home / "console-secret", home / "console-users.yaml")


def relative(ctx: ToolContext, target: Path) -> str:
    return target.relative_to(workspace_root(ctx)).as_posix()


def atomic_write(target: Path, data: bytes) -> None:
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.chmod(temp_name, 0o644)  # mkstemp makes it 0600
        os.replace(temp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
