"""Where in Hermes' own code something happened, in one line (for the log lines that
say where a blocking call came from: hermes/state/loopguard.py, gateway/loopwatch.py)."""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from types import FrameType

OURS = ("/hermes/", "/gateway/", "/adapters/")


def where(
    stack: traceback.StackSummary | FrameType | None = None,
    *,
    count: int = 3,
    skip: tuple[str, ...] = (),
) -> str:
    """The innermost `count` frames of our code (not those whose file holds any of
    `skip`), innermost first, as `folder/file.py:line in function < ...`. `stack`: a
    frame (another thread's), a summary, or None for the caller's own stack."""
    if stack is None:
        summary = traceback.extract_stack()[:-1]
    elif isinstance(stack, FrameType):
        summary = traceback.extract_stack(stack)
    else:
        summary = stack
    return _shown(
        (
            f
            for f in reversed(summary)
            if any(part in f.filename for part in OURS)
            and not any(part in f.filename for part in skip)
        ),
        count,
    )


def ours(skip: tuple[str, ...] = ()) -> list[traceback.FrameSummary]:
    """The caller's frames in our code (not in files holding any of `skip`), innermost
    first."""
    return [
        f
        for f in reversed(traceback.extract_stack()[:-1])
        if any(part in f.filename for part in OURS) and not any(part in f.filename for part in skip)
    ]


def shown(frames: Iterable[traceback.FrameSummary], count: int = 3) -> str:
    """Frames as `folder/file.py:line in function < ...` (at most `count`)."""
    return _shown(frames, count)


def _shown(frames: Iterable[traceback.FrameSummary], count: int) -> str:
    parts = []
    for frame in frames:
        folder, _, name = frame.filename.rpartition("/")
        parts.append(f"{folder.rpartition('/')[2]}/{name}:{frame.lineno} in {frame.name}")
        if len(parts) == count:
            break
    return " < ".join(parts) or "outside Hermes' code"


__all__ = ["OURS", "ours", "shown", "where"]
