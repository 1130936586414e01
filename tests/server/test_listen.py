"""The listening socket is bound before the model loads: a bad port, a port in use or a host
that does not resolve is one ``hinge: error:`` line and exit 2, and no weights are touched."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from hinge import cli
from hinge.server import listen
from hinge.server.listen import ListenError, bind_socket


@pytest.fixture
def busy_port():
    """A port some other process-like owner is listening on."""
    with socket.socket() as owner:
        owner.bind(("127.0.0.1", 0))
        owner.listen()
        yield owner.getsockname()[1]


def run_serve(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HINGE_DEBUG"}
    return subprocess.run([sys.executable, "-m", "hinge.cli", "serve", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_bind_socket_listens_on_the_port_it_was_given_or_a_free_one_for_0():
    sock = bind_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the kernel accepted the connection: the socket listens
    finally:
        sock.close()


@pytest.mark.parametrize("port", [-1, 65536, 99999])
def test_a_port_outside_0_65535_is_refused_naming_it(port):
    with pytest.raises(ListenError, match=f"port {port} is outside 0-65535"):
        bind_socket("127.0.0.1", port)


def test_a_port_in_use_is_refused_naming_host_port_and_the_next_step(busy_port):
    with pytest.raises(ListenError) as err:
        bind_socket("127.0.0.1", busy_port)
    assert str(err.value) == (f"port {busy_port} on 127.0.0.1 is in use; pick another with "
                              "--port or stop the process using it")


def test_a_host_that_does_not_resolve_is_refused_naming_it(monkeypatch):
    def no_such_host(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(listen.socket, "getaddrinfo", no_such_host)
    with pytest.raises(ListenError, match="cannot resolve host 'nowhere.invalid'.*--host"):
        bind_socket("nowhere.invalid", 30000)


def test_a_busy_port_fails_before_the_engine_is_constructed(busy_port, monkeypatch, capsys):
    built = []

    class RecordingEngine:
        def __init__(self, *args, **kwargs):
            built.append(args)
            raise AssertionError("the engine must not be built when the port is busy")

    monkeypatch.setattr("hinge.engine.engine.Engine", RecordingEngine)
    monkeypatch.delenv("HINGE_DEBUG", raising=False)
    code = cli.main(["serve", "--port", str(busy_port)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and built == []
    assert err == [f"hinge: error: port {busy_port} on 127.0.0.1 is in use; pick another with "
                   "--port or stop the process using it"]


def test_port_out_of_range_is_one_error_line_and_exit_2():
    proc = run_serve("--port", "99999")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "hinge: error: port 99999 is outside 0-65535; pick a port such as 30000 with --port"]
    assert proc.stdout == ""


def test_port_in_use_is_one_error_line_and_exit_2_without_loading_the_model(busy_port):
    proc = run_serve("--port", str(busy_port))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hinge: error: ")
    assert f"port {busy_port} on 127.0.0.1 is in use" in lines[0]
    assert "Loading" not in proc.stderr + proc.stdout  # the weight loader's progress bar
