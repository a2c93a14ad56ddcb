"""What reaches a terminal: every command's text printed safely, escaped here once.

Names and other free text (job names, reasons, comments, accounts, users, partitions, anything a
client wrote) are stored as sent; what prints them is the CLI, and a terminal obeys what it is sent:
an ESC sequence recolours, moves the cursor, retitles the window or hides text; a NUL or a carriage
return overwrites; a bidi override (U+202E) shows ``txt.exe`` for ``exe.txt``. So no control
character of data reaches the terminal: each is written as a visible escape, ``\\x1b`` below U+0080
and ``\\u202e`` from there (the form JSON reads back as the same character, so a ``--json`` line
stays valid JSON with the same meaning).

Once, not per command: ``printable_output()`` (entered by ``HorizonCLI.main`` and the Slurm-named
programs, ``slurm_shims.run_command``) puts ``PrintableText`` in front of ``sys.stdout`` and
``sys.stderr``, so whatever a command prints through them (``click.echo``, ``print``, ``say``) is escaped;
rich draws its tables on the streams behind them (``rich_proxied_file``) and escapes the cells
itself (``services/front/cli/options.py``'s console, through ``printable``), keeping its own styles.

Bytes are not text: what a command writes to ``sys.stdout.buffer`` passes as it is. That is how
``horizon logs`` prints a job's output (the job's own data, as ``cat`` would: a job that colours its
output is shown coloured) and ``srun`` its tasks'.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["printable", "PrintableText", "printable_output", "say"]

# C0 controls but tab and newline, DEL and C1, lone surrogates (which a UTF-8 stream cannot even
# encode), the line and paragraph separators, and the bidi formatting characters (ALM, LRM, RLM,
# LRE..RLO, LRI..PDI): what a terminal would act on, or reorder the line by, instead of showing.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x7F else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character made visible (module doc); tab and newline kept.
    ``printable("a\\x1b[31mb\\u202ec")`` is ``a\\x1b[31mb\\u202ec`` written out, 19 characters."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


class PrintableText:
    """A text stream that writes ``printable(text)`` to the stream behind it; bytes (``.buffer``),
    ``fileno``, ``isatty`` and the rest are that stream's."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    @property
    def rich_proxied_file(self) -> TextIO:
        """Where rich writes: its styles are its own, its cells escaped by the console."""
        return self.raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click asks with b"" whether this is a binary stream: it is not
            raise TypeError(f"write() takes text, not {type(text).__name__}")
        self.raw.write(printable(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def say(text: str = "", *, err: bool = False) -> None:
    """One line to ``sys.stdout`` (``sys.stderr`` with ``err``), flushed: how the front rooms without click
    (``services/front/host/``) tell the operator what runs and where; escaped as every command's text is,
    by the streams ``printable_output`` puts in front."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(text + "\n")
    stream.flush()


@contextmanager
def printable_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` behind ``PrintableText`` while inside (once: nested is a no-op)."""
    if isinstance(sys.stdout, PrintableText):
        yield
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout = PrintableText(out) if out is not None else out  # type: ignore[assignment]
    sys.stderr = PrintableText(err) if err is not None else err  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
