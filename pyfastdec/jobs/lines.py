"""Input and output as whole lines. Input is read as bytes and decoded line by line, so an
invalid UTF-8 line is reported by number; a file is checked whole before anything is
decoded. Output is written as whole UTF-8 lines, flushed block by block."""
from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional

from pyfastdec.jobs.errors import EXIT_BAD_INPUT, CliError
from pyfastdec.jobs.interrupts import sigint_deferred


# ----------------------------------------------------------------------------- input
@dataclass
class Line:
    number: int  # 1-based
    text: str


def decode_line(raw: bytes, number: int) -> str:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CliError(f"line {number}: invalid UTF-8 at byte {err.start + 1} of the line", EXIT_BAD_INPUT) from None
    return text[1:] if number == 1 and text.startswith("\ufeff") else text  # a byte-order mark is no text


def numbered_lines(data: bytes) -> list[Line]:
    """A whole input's lines, numbered from 1 and checked (decode_line)."""
    raws = data.split(b"\n")
    if raws and raws[-1] == b"":
        raws.pop()  # the newline ending the last line starts no new line
    return [Line(n, decode_line(raw, n)) for n, raw in enumerate(raws, 1)]


def same_file(stream: BinaryIO, path: str) -> bool:
    """Whether `stream` reads the regular file at `path`."""
    try:
        read, named = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's BytesIO), no such file
        return False
    return stat.S_ISREG(read.st_mode) and (read.st_dev, read.st_ino) == (named.st_dev, named.st_ino)


class InputLines:
    """The input as numbered lines. A file is read and checked whole (so it is known to be
    valid, and its length is known, before anything is translated); stdin is read as it
    comes, block by block, or line by line."""

    def __init__(self, path: Optional[str], output: Optional[str] = None):
        self.lines: Optional[list[Line]] = None
        self.stream: Optional[BinaryIO] = None
        self.is_output = False  # the input is the output file (-i f -o f, < f -o f): see LineWriter in_place
        if path is None or path == "-":
            self.stream = sys.stdin.buffer
            if output is not None and output != "-" and same_file(self.stream, output):
                # `< f -o f`: read as it comes, f would be read on past its first lines into the output
                # written over them; read whole first, as -i f -o f is
                self.lines, self.stream, self.is_output = numbered_lines(self.stream.read()), None, True
            return
        try:
            with open(path, "rb") as stream:
                data = stream.read()
                self.is_output = output is not None and output != "-" and same_file(stream, output)
        except OSError as err:
            raise CliError(f"cannot read input {path}: {err.strerror or err}") from None
        try:
            self.lines = numbered_lines(data)
        except CliError as err:  # which file, as for a shard of a --ray directory (resumable_job.py)
            raise CliError(f"{path}: {err}", err.code) from None

    @property
    def total(self) -> Optional[int]:
        return None if self.lines is None else len(self.lines)

    def interactive(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def all(self) -> list[Line]:
        return [line for block in self.blocks(1 << 30) for line in block]

    def blocks(self, size: int) -> Iterator[list[Line]]:
        if self.lines is not None:
            for start in range(0, len(self.lines), size):
                yield self.lines[start:start + size]
            return
        block: list[Line] = []
        number = 0
        while True:
            raw = self.stream.readline()
            if not raw:
                break
            number += 1
            try:
                block.append(Line(number, decode_line(raw, number)))
            except CliError:
                if block:  # the lines before the bad one are translated and written first
                    yield block
                raise
            if len(block) >= size:
                yield block
                block = []
        if block:
            yield block


# ----------------------------------------------------------------------------- output
def write_failed(name: str, err: OSError, stdout: bool) -> CliError:
    """The one-line error for output that cannot be written (a full disk, an I/O error).
    Callers let BrokenPipeError pass: a closed pipe is no error, main exits quietly."""
    if stdout:
        stdout_to_devnull()  # what is still buffered must not fail again at exit
    return CliError(f"cannot write output {name}: {err.strerror or err}")


class LineWriter:
    """Writes whole lines as UTF-8 bytes and flushes after each block. An output file is
    opened when the job has its model and checked options (run_translate), and an existing
    file keeps its content until the first lines are ready (or the job ends without any):
    a job that fails or is interrupted before that (a worker's model that does not load, an
    error or Ctrl-C in the first block) leaves it as it was, and removes a file it created.
    in_place (the output file is the input, jobs.lines.same_file): written to a new file
    beside it (a unique .NAME.*.fastdec-tmp next to the file a symlink names) and renamed
    over it when the job is done, with its owner and permissions, so a job that stops part
    way keeps the input whole."""

    def __init__(self, path: Optional[str], in_place: bool = False):
        self.path = path
        self.failed = False
        self.started = True  # an owned file: whether its old content has been replaced yet
        self.replacing = None  # in place: the input file that the finished output replaces
        if path is None or path == "-":
            self.stream = sys.stdout.buffer
            self.owned, self.name = False, "stdout"
        else:
            self.file = path
            try:
                if in_place:  # a new name of our own beside the file (through a symlink: the file it names)
                    target = os.path.realpath(path)
                    fd, self.file = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".fastdec-tmp",
                                                     dir=os.path.dirname(target))
                    existed, self.stream = False, os.fdopen(fd, "ab")
                else:
                    existed = os.path.exists(path)  # a symlink to no file: the file open creates is ours
                    self.stream = open(path, "ab")  # "wb" would empty it now
            except OSError as err:
                raise CliError(f"cannot write output {path}: {err.strerror or err}"
                               + (" (written beside it, then renamed over it)" if in_place else "")) from None
            self.owned, self.name = True, path
            self.started, self.created = False, not existed  # in place: existed is False, the temporary is ours
            self.replacing = target if in_place else None

    def _start(self) -> None:
        """Replace the old content: the first lines are ready, or the job is done."""
        if not self.started:
            self.started = True
            if stat.S_ISREG(os.fstat(self.stream.fileno()).st_mode):  # not a FIFO or /dev/null
                self.stream.truncate(0)

    def write(self, lines: list[str]) -> None:
        data = "".join(lines).encode("utf-8")
        with sigint_deferred():
            try:
                self._start()
                self.stream.write(data)
                self.stream.flush()
            except BrokenPipeError:
                raise
            except OSError as err:
                self.failed = True
                raise write_failed(self.name, err, not self.owned) from None

    def finish(self) -> None:
        """The job is done: the output is what was written, nothing if no line was."""
        if self.owned:
            try:
                self._start()
                if self.replacing is not None:
                    self.stream.flush()
                    os.fsync(self.stream.fileno())  # the input's only copy goes with the rename
                    self.stream.close()
                    was = os.stat(self.replacing)
                    try:
                        os.chown(self.file, was.st_uid, was.st_gid)  # its owner, as writing it in place kept
                    except PermissionError:
                        pass
                    shutil.copymode(self.replacing, self.file)  # the input's permissions, not the umask's
                    os.replace(self.file, self.replacing)
                    self.replacing = None
            except OSError as err:
                self.failed = True
                raise write_failed(self.name, err, False) from None

    def close(self) -> None:
        if not self.owned:
            return
        try:
            self.stream.close()
        except BrokenPipeError:
            raise
        except OSError as err:
            if not self.failed:  # else the failed write was reported, and close retried its bytes
                raise write_failed(self.name, err, False) from None
        # Ended before any output (leave no empty file behind), or in place and unfinished (the input stays).
        if (not self.started and self.created) or self.replacing is not None:
            try:
                os.unlink(os.path.realpath(self.file))  # through a symlink: the file it created, not the link
            except OSError:
                pass


def print_out(text: str) -> None:
    """A report line of info or bench on stdout."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise
    except OSError as err:
        raise write_failed("stdout", err, True) from None


def stdout_to_devnull() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush
    does not fail again (the recipe of Python's signal module documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
