"""`stratagem a2a` and `stratagem mcp` refuse what would let strangers in, and wrong options, in
one line before anything listens (the servers themselves: tests/test_a2a_server.py and
tests/test_mcp_server.py)."""

from __future__ import annotations

import socket

import pytest
from support.cli import acli, one_line_error

from stratagem.common.errors import ConfigError
from stratagem.protocols.access import Tokens, refuse_open


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.unit
def test_no_server_listens_beyond_loopback_without_tokens():
    for host in ("0.0.0.0", "10.1.2.3", "::", "example.com"):
        with pytest.raises(ConfigError, match=f"would listen on {host} without authentication"):
            refuse_open(host, authenticated=False, server="x")
        refuse_open(host, authenticated=True, server="x")  # tokens: allowed
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.9"):
        refuse_open(host, authenticated=False, server="x")


@pytest.mark.unit
def test_a_token_names_its_person_until_it_is_removed(tmp_path):
    from stratagem.console.users import Users

    path = tmp_path / "users.yaml"
    tokens = Tokens(path)
    assert tokens.person(None) is None and tokens.person("") is None and tokens.person("stg_nothing") is None
    users = Users.load(path)
    token = users.new_token("laptop", "dana")
    users.save()
    assert tokens.person(token) == "dana" and tokens.person(token + "x") is None
    users = Users.load(path)
    users.remove("dana")
    users.save()
    assert tokens.person(token) is None  # read again at each check: removed, refused at once


@pytest.mark.system
async def test_mcp_over_http_beyond_loopback_without_tokens_is_refused_in_one_line(cli_env, tmp_path):
    env, _ = cli_env
    done = await acli("mcp", "--http", "--host", "0.0.0.0", "--port", "8499", "--by", "dana", env=env, timeout=30)
    one_line_error(done, "stratagem mcp --http would listen on 0.0.0.0 without authentication")
    assert not _listening(8499)
    done = await acli("mcp", "--processes", str(tmp_path / "nowhere"), env=env, timeout=30)
    one_line_error(done, "is not a folder")
    done = await acli("a2a", "--processes", str(tmp_path / "nowhere"), env=env, timeout=30)
    one_line_error(done, "is not a folder")
