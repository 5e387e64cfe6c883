"""Connection configuration through Temporal's environment configuration: API keys, TLS and
profiles. The mTLS test puts a TLS-terminating proxy that demands a client certificate in front
of the dev server, and connects through it with nothing but a profile file."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from support.cli import acli

from stratagem.common.config import Settings
from stratagem.common.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "tmprl-key-d41d8cd98f00b204e9800998ecf8427e"


def settings_from(monkeypatch, **env: str) -> Settings:
    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


@pytest.mark.unit
def test_an_api_key_turns_tls_on_and_never_shows(monkeypatch):
    settings = settings_from(
        monkeypatch, TEMPORAL_ADDRESS="ns.acct.tmprl.cloud:7233", TEMPORAL_NAMESPACE="ns.acct", TEMPORAL_API_KEY=API_KEY
    )
    assert (settings.address, settings.namespace, settings.api_key) == ("ns.acct.tmprl.cloud:7233", "ns.acct", API_KEY)
    assert settings.connect_options()["tls"] is True and settings.connect_options()["api_key"] == API_KEY
    assert settings.secured and API_KEY not in repr(settings)


@pytest.mark.unit
def test_a_profile_file_and_the_environment_over_it(monkeypatch, tmp_path):
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.default]\naddress = "localhost:7233"\n\n'
        f'[profile.prod]\naddress = "prod.example:7233"\nnamespace = "finance"\napi_key = "{API_KEY}"\n'
        '[profile.prod.grpc_meta]\nx-team = "ops"\n'
    )
    prod = settings_from(monkeypatch, TEMPORAL_CONFIG_FILE=str(config), TEMPORAL_PROFILE="prod")
    assert (prod.address, prod.namespace, prod.api_key, dict(prod.rpc_metadata)) == (
        "prod.example:7233",
        "finance",
        API_KEY,
        {"x-team": "ops"},
    )
    overridden = settings_from(
        monkeypatch, TEMPORAL_CONFIG_FILE=str(config), TEMPORAL_PROFILE="prod", TEMPORAL_NAMESPACE="audit"
    )
    assert overridden.namespace == "audit" and overridden.address == "prod.example:7233"
    default = settings_from(monkeypatch, TEMPORAL_CONFIG_FILE=str(config))
    assert default.address == "localhost:7233" and not default.secured
    with pytest.raises(ConfigError, match="Temporal connection configuration: .*staging"):
        settings_from(monkeypatch, TEMPORAL_CONFIG_FILE=str(config), TEMPORAL_PROFILE="staging")


@pytest.mark.unit
def test_a_missing_certificate_is_one_line(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match=f"Temporal connection: cannot read {tmp_path}/client.pem: no such file"):
        settings_from(
            monkeypatch,
            TEMPORAL_ADDRESS="mtls.example:7233",
            TEMPORAL_TLS_CLIENT_CERT_PATH=str(tmp_path / "client.pem"),
            TEMPORAL_TLS_CLIENT_KEY_PATH=str(tmp_path / "client.key"),
        )


# --- mTLS, for real -------------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(name: str, key, issuer_name: str, issuer_key, *, ca: bool = False, san: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("temporal.test"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def write_pki(folder: Path) -> dict[str, Path]:
    ca_key = _key()
    ca = _cert("test CA", ca_key, "test CA", ca_key, ca=True)
    files: dict[str, Path] = {}

    def save(name: str, cert: x509.Certificate, key) -> None:
        files[f"{name}.pem"] = folder / f"{name}.pem"
        files[f"{name}.pem"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if key is not None:
            files[f"{name}.key"] = folder / f"{name}.key"
            files[f"{name}.key"].write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )

    save("ca", ca, None)
    server_key, client_key = _key(), _key()
    save("server", _cert("temporal.test", server_key, "test CA", ca_key, san=True), server_key)
    save("client", _cert("stratagem worker", client_key, "test CA", ca_key), client_key)
    return files


class MutualTlsProxy:
    """TLS in front of the dev server: HTTP/2 only, and a client certificate signed by the CA required."""

    def __init__(self, upstream: str, pki: dict[str, Path]):
        self.upstream = upstream.rsplit(":", 1)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki["ca.pem"]))
        self.context.load_cert_chain(pki["server.pem"], pki["server.key"])
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.set_alpn_protocols(["h2"])
        self.handshakes = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        up_reader, up_writer = await asyncio.open_connection(self.upstream[0], int(self.upstream[1]))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def stop(self) -> None:
        self.server.close()


@pytest.mark.system
async def test_mutual_tls_through_a_profile_file(dev_env, tmp_path):
    pki = write_pki(tmp_path)
    proxy = MutualTlsProxy(dev_env.client.service_client.config.target_host, pki)
    address = await proxy.start()
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.secure]\naddress = "{address}"\nnamespace = "default"\n'
        f'[profile.secure.tls]\nserver_name = "temporal.test"\nserver_ca_cert_path = "{pki["ca.pem"]}"\n'
        f'client_cert_path = "{pki["client.pem"]}"\nclient_key_path = "{pki["client.key"]}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.update(TEMPORAL_CONFIG_FILE=str(config), TEMPORAL_PROFILE="secure", STRATAGEM_HOME=str(tmp_path / "home"))
    try:
        listed = await acli("list", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        assert proxy.handshakes >= 1  # the connection really went through the mTLS proxy

        # Without the client certificate the proxy refuses the handshake: one line, exit 2.
        config.write_text(
            config.read_text().replace(
                f'client_cert_path = "{pki["client.pem"]}"\nclient_key_path = "{pki["client.key"]}"\n', ""
            )
        )
        refused = await acli("list", env=env)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.startswith("error: ") and len(refused.stderr.strip().splitlines()) == 1
    finally:
        await proxy.stop()


@pytest.mark.system
def test_the_api_key_reaches_no_log(dev_env, tmp_path):
    """A worker given an API key (sent as a bearer token; this dev server ignores it) connects,
    and neither its output nor a failing command's error shows the key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.update(
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        TEMPORAL_API_KEY=API_KEY,
        TEMPORAL_TLS="false",
        TEMPORAL_TASK_QUEUE="apikey-q",
        STRATAGEM_WORKSPACE=str(tmp_path / "ws"),
        STRATAGEM_HOME=str(tmp_path / "home"),
    )
    worker = subprocess.Popen(
        [sys.executable, "worker.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        status = subprocess.run(
            [sys.executable, "-m", "stratagem.cli", "status", "no-such-run"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 2 and "no run with id 'no-such-run'" in status.stderr
        assert API_KEY not in status.stdout + status.stderr
        bad = subprocess.run(
            [sys.executable, "-m", "stratagem.cli", "list"],
            cwd=ROOT,
            env={**env, "TEMPORAL_ADDRESS": "127.0.0.1:1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and API_KEY not in bad.stdout + bad.stderr
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    assert "roles workflow, planner, executor, tools" in output and API_KEY not in output
