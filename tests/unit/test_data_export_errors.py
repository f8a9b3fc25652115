"""``rollgym export``'s failures are one line and exit status 2, never a traceback: a
server that refuses the token, an ``--out`` that is a file, a data dir with no buffer."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from rollgym.cli import main
from rollgym.contract.wire import ErrorBody


class Refusing(http.server.BaseHTTPRequestHandler):
    """A server that refuses every admin call, as the real one does a wrong token."""

    def do_GET(self) -> None:
        body = ErrorBody(error="forbidden", message="the bearer token is not the admin token")
        data = body.model_dump_json().encode()
        self.send_response(403)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_wrong_token_is_one_line(capsys, refusing_server, tmp_path) -> None:
    argv = ["export", "--server", refusing_server, "--token", "wrong", "--out", str(tmp_path)]
    err = one_line_exit_2(capsys, argv)
    assert "answered 403: the bearer token is not the admin token" in err


def test_an_out_that_is_a_file_is_one_line(capsys, tmp_path) -> None:
    (tmp_path / "out").write_text("not a folder")
    argv = ["export", "--data-dir", str(tmp_path), "--out", str(tmp_path / "out")]
    assert f"--out {tmp_path / 'out'} is a file" in one_line_exit_2(capsys, argv)


def test_no_buffer_and_no_token_are_one_line(capsys, tmp_path, monkeypatch) -> None:
    argv = ["export", "--data-dir", str(tmp_path), "--out", str(tmp_path / "out")]
    assert "no buffer at" in one_line_exit_2(capsys, argv)
    monkeypatch.delenv("ROLLGYM_ADMIN_TOKEN", raising=False)
    argv = ["export", "--server", "http://127.0.0.1:9", "--out", str(tmp_path / "out")]
    assert "needs the admin token" in one_line_exit_2(capsys, argv)
