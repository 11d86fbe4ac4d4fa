"""What to do about a child's failure, in the user's terms (pure; a leaf of nkibot.verify).

A reference that hits a sandbox limit, or a `get_inputs()` that does not match `forward()`,
fails with Python's or torch's words ("can't allocate memory", "1073741824 requested and
536870880 written", "forward() takes 2 positional arguments but 4 were given"). These
say which limit or which function it was, and what helps.
"""

from __future__ import annotations

import re

#: RLIMIT_FSIZE per file in every sandboxed child (verify/launch.py's Limits.fsize_mb).
_MEMORY = re.compile(r"(?i)can't allocate memory|cannot allocate memory|MemoryError|"
                     r"std::bad_alloc|out of memory|SIGKILL")
_FILE_SIZE = re.compile(r"(?i)file too large|SIGXFSZ|\[Errno 27\]|"
                        r"\d+ requested and \d+ written")
_FORWARD_ARITY = re.compile(
    r"forward\(\) (?:takes (\d+) positional arguments? but (\d+) (?:were|was) given|"
    r"missing (\d+) required positional argument)")
_INIT_ARITY = re.compile(r"__init__\(\) (?:takes|missing|got)")


def limit_hint(text: str, memory_mb: int | None, fsize_mb: int) -> str | None:
    """Which sandbox limit `text` shows was hit, and what helps; None when none was."""
    if _FILE_SIZE.search(text):
        return (f"the sandbox's file-size limit was hit ({fsize_mb} MiB per file a child "
                "writes): its inputs or outputs are too large to hand over; use smaller "
                "inputs with --shape NAME=DIMSxDTYPE (or a smaller get_inputs())")
    if _MEMORY.search(text):
        limit = f" ({memory_mb} MiB of address space per child)" if memory_mb else ""
        return (f"the sandbox's memory limit was hit{limit}: use smaller inputs with --shape "
                "NAME=DIMSxDTYPE (or a smaller get_inputs()), or a smaller module")
    return None


def arity_hint(text: str) -> str | None:
    """A reference whose inputs do not fit its signature: point at get_inputs() and --shape."""
    if (m := _FORWARD_ARITY.search(text)) is not None:
        if m.group(1):
            takes, given = int(m.group(1)) - 1, int(m.group(2)) - 1
            count = f"get_inputs() gives {given} input(s) but forward() takes {takes}"
        else:
            count = "get_inputs() gives fewer inputs than forward() takes"
        return (f"{count}: make get_inputs() return one tensor per forward() parameter, or "
                "give each input with --shape NAME=DIMSxDTYPE")
    if _INIT_ARITY.search(text):
        return ("get_init_inputs() does not match the module's __init__() parameters: make "
                "it return one value per parameter")
    return None


def explain(text: str, memory_mb: int | None, fsize_mb: int) -> str:
    """`text` with what helps appended, when something does."""
    hint = arity_hint(text) or limit_hint(text, memory_mb, fsize_mb)
    return f"{text} ({hint})" if hint else text
