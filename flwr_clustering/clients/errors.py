"""What a client's error tells the server: the problem and where, never a cell of its data.

A client that cannot answer a message sends an error reply, which the server logs and
writes to ``result.json``. Its reason (:func:`error_reasons`) is

* a :class:`~flwr_clustering.data.schema.SiteDataError`'s public message (the file's
  name, the column, the row, the kind of problem and the fix; no value, no line);
* the message of an exception raised by a ``raise`` statement of this package's own code
  (written to name columns, rows, counts and options, never a cell; a
  :class:`~flwr_clustering.data.schema.SchemaError` among them);
* else only the exception's type and the phase: ``"ValueError while answering round 3
  train (the detail is in the site's log)"``. The messages of NumPy, pandas, Python's
  builtins (``float('John Smith')``) or a user's own client may quote a cell, and an
  exception raised inside a C function is seen in the frame of the code that called it.

The full message (with the cell or the line, and the traceback of a foreign exception)
goes to the site's own log only.

Layer 3 (no Flower import here).
"""

from __future__ import annotations

import linecache
from pathlib import Path

from ..data.schema import SiteDataError

__all__ = ["error_reasons", "raised_by_us"]

#: This package's folder: the code whose ``raise`` statements write vetted messages.
_PACKAGE = Path(__file__).resolve().parents[1]


def raised_by_us(ex: BaseException) -> bool:
    """Whether ``ex`` was raised by a ``raise`` statement of this package's own code.

    The innermost frame of its traceback must be in this package and its line a
    ``raise``: an exception raised by NumPy, pandas or a builtin called from our code
    (``float(cell)``) is seen in our frame too, on a line that is not a ``raise``.
    """
    tb = ex.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    try:
        ours = Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False
    return ours and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise ")


def error_reasons(ex: BaseException, cid: int, phase: str) -> tuple[str, str, bool]:
    """What a client's error sends the server, and what its own log keeps.

    Parameters
    ----------
    ex : BaseException
        The client's exception.
    cid : int
        The client's id (both messages start with ``"client <cid>"``).
    phase : str
        The message being answered (``"round 3 train (fkm-step)"``), for a foreign
        exception's reason.

    Returns
    -------
    public : str
        The reason for the error reply (see the module).
    detail : str
        The full message, for the site's log.
    vetted : bool
        Whether ``public`` is the exception's own (vetted) message; false for a foreign
        exception, whose traceback the site's log should keep.
    """
    prefix = f"client {cid}"

    def named(text: str) -> str:
        return text if text.startswith(prefix) else f"{prefix}: {text}"

    detail = named(str(ex))
    if isinstance(ex, SiteDataError):
        return named(ex.public), detail, True
    if raised_by_us(ex):
        return detail, detail, True
    return (named(f"{type(ex).__name__} while answering {phase} (the detail is in the "
                  "site's log)"), detail, False)
