"""server/infra/logfile.py: the log file copies stderr line by line, rotates, stays 0600."""

from __future__ import annotations

import io
import logging
import os
import stat
import sys

from omp_a2a_bridge.server.infra import logfile
from omp_a2a_bridge.server.infra.logfile import LogFile, StderrCopy, copying_stderr, tail_lines


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_copy_writes_whole_lines_to_the_file_and_everything_to_the_stream(tmp_path):
    path = tmp_path / "log" / "bridge.log"
    log = LogFile(str(path))
    shown = io.StringIO()
    copy = StderrCopy(shown, log)
    copy.write("first ")
    copy.write("line\nsecond line\nunfinished")
    copy.flush()
    assert shown.getvalue() == "first line\nsecond line\nunfinished"
    assert [x.split(" ", 2)[2] for x in path.read_text().splitlines()] == [
        "first line",
        "second line",
    ]
    copy.finish()  # what is left at the end is kept too
    log.close()
    assert path.read_text().splitlines()[-1].endswith(" unfinished")
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700


def test_it_rotates_at_max_bytes_keeping_private_generations(tmp_path):
    path = tmp_path / "bridge.log"
    log = LogFile(str(path), max_bytes=4096, keep=2)
    for i in range(400):
        log.line(f"line {i:04} " + "x" * 60)
    log.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["bridge.log", "bridge.log.1", "bridge.log.2"]
    for name in names:
        assert _mode(tmp_path / name) == 0o600
        assert os.path.getsize(tmp_path / name) <= 4096
    assert tail_lines(str(path), 3)[-1].endswith("line 0399 " + "x" * 60)


def test_rotation_settings_from_the_config_apply_to_an_open_file(tmp_path):
    log = LogFile(str(tmp_path / "bridge.log"))
    log.set_rotation(8192, 4)
    assert (log.handler.maxBytes, log.handler.backupCount) == (8192, 4)
    log.close()


def test_the_tail_spans_generations_oldest_first(tmp_path):
    path = tmp_path / "bridge.log"
    (tmp_path / "bridge.log.2").write_text("a\nb\n")
    (tmp_path / "bridge.log.1").write_text("c\nd\n")
    path.write_text("e\n")
    assert tail_lines(str(path), 4) == ["b", "c", "d", "e"]
    assert tail_lines(str(path), 10) == ["a", "b", "c", "d", "e"]
    assert tail_lines(str(tmp_path / "none.log"), 5) == []


def test_copying_stderr_restores_everything_and_copies_the_handlers_lines(tmp_path):
    path = str(tmp_path / "bridge.log")
    before = sys.stderr
    handler = logging.StreamHandler(io.StringIO())
    stream = handler.stream
    with copying_stderr(path, [handler]) as opened:
        assert opened == path and logfile.current() is not None
        print("printed on stderr", file=sys.stderr)
        handler.handle(logging.makeLogRecord({"msg": "a log line"}))
    assert sys.stderr is before and handler.stream is stream and logfile.current() is None
    text = (tmp_path / "bridge.log").read_text(encoding="utf-8")
    assert "printed on stderr" in text and "a log line" in text


def test_a_log_file_that_cannot_be_opened_leaves_the_process_running(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with copying_stderr(str(blocker / "bridge.log"), []) as opened:
        assert opened is None
    assert "no log file" in capsys.readouterr().err


def test_a_file_that_cannot_be_written_stops_once_and_never_feeds_itself(tmp_path, capfd):
    path = tmp_path / "bridge.log"
    log = LogFile(str(path))
    copy = StderrCopy(io.StringIO(), log)
    log.handler.stream.close()  # every write now fails
    for _ in range(5):
        copy.write("a line\n")
    log.close()
    err = capfd.readouterr().err
    assert err.count("stopped (cannot write it)") == 1 and "Traceback" not in err
