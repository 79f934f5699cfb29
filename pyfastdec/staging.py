"""Write a directory so that nothing half-written is ever at its final path: the content
goes into a temporary directory beside it (same filesystem, so the final rename is
atomic), which replaces the target only when everything was written, and is removed
when anything fails (the converters' "nothing half-written left in OUT_DIR")."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_dir(out: Path) -> Iterator[Path]:
    """Yields the temporary directory to fill; on success it replaces `out` (an existing
    `out` is removed first: callers check --force before), on failure it is deleted."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; the published directory is read by others too
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
