"""Static checks of the deployment files: docker-compose.yml, the Dockerfile, .dockerignore and
the configs in deploy/. Nothing here needs Docker: the files are parsed and cross-checked against
each other and against the code (the worker command is parsed by the real CLI parser).

Compose interpolation, Dockerfile instructions and .dockerignore patterns are parsed by small
helpers below that follow the documented rules closely enough for these files."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from stratagem.cli import parser, processes
from stratagem.common import config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

# Long-running services that cannot carry a healthcheck, and why.
NO_HEALTHCHECK = {"otel-collector": "the image is FROM scratch: no shell or client inside to probe with"}

WORKER_ENV = {
    "TEMPORAL_ADDRESS": "temporal:7233",
    "STRATAGEM_WORKSPACE": "/data/workspace",
    "STRATAGEM_STORE": "/data/store",
    "OTEL_SERVICE_NAME": "stratagem-worker",
    "OTEL_METRICS_EXPORTER": "prometheus",
    "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0",
    "OTEL_EXPORTER_PROMETHEUS_PORT": "9464",
}
# Taken from the host's environment, optional: they must default to empty.
WORKER_PASS_THROUGH = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "STRATAGEM_ENCRYPTION_KEY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


# ---------------------------------------------------------------------------- compose helpers

_INTERPOLATION = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?", re.DOTALL)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution: $$ escapes, ${VAR}, ${VAR:-default}, ${VAR-default},
    ${VAR:?error}, ${VAR?error}, ${VAR:+alternative}, and bare $VAR."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        if match["named"]:
            return env.get(match["named"], "")
        parts = _BRACED.fullmatch(match["braced"])
        assert parts, f"malformed interpolation ${{{match['braced']}}}"
        value, op, arg = env.get(parts["name"]), parts["op"], parts["arg"] or ""
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            raise ValueError(f"{parts['name']} is required: {arg}")
        if op == ":-":
            return value or arg
        if op == "-":
            return arg if value is None else value
        if op == ":+":
            return arg if value else ""
        return value or ""

    return _INTERPOLATION.sub(replace, text)


def interpolations(node: Any) -> Iterator[tuple[str, str | None]]:
    """(name, operator) of every substitution in the compose data's strings (comments excluded)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from interpolations(key)
            yield from interpolations(value)
    elif isinstance(node, list):
        for item in node:
            yield from interpolations(item)
    elif isinstance(node, str):
        for match in _INTERPOLATION.finditer(node):
            if match["named"]:
                yield match["named"], None
            elif match["braced"] is not None:
                parts = _BRACED.fullmatch(match["braced"])
                assert parts, f"malformed interpolation ${{{match['braced']}}}"
                yield parts["name"], parts["op"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def header() -> str:
    """The comment block at the top of the compose file: its documentation."""
    lines = []
    for line in COMPOSE_FILE.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    declared = service.get("depends_on") or {}
    if isinstance(declared, list):
        return {name: "service_started" for name in declared}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in declared.items()}


def one_shot(services: dict[str, dict[str, Any]]) -> set[str]:
    """Services something waits on to complete: jobs, not long-running services."""
    return {
        target
        for service in services.values()
        for target, condition in depends_on(service).items()
        if condition == "service_completed_successfully"
    }


def published_ports(service: dict[str, Any]) -> set[int]:
    ports = set()
    for port in service.get("ports", []):
        if isinstance(port, dict):
            if port.get("published") is not None:
                ports.add(int(port["published"]))
            continue
        parts = str(port).split("/")[0].rsplit(":", 2)
        if len(parts) >= 2:  # a lone container port is published on a random host port
            ports.add(int(parts[-2]))
    return ports


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def command_argv(service: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    command = service["command"]
    if isinstance(command, list):
        return [interpolate(part, env) for part in command]
    return shlex.split(interpolate(command, env))


def script(service: dict[str, Any]) -> str:
    """The shell script of a job run as `sh -c SCRIPT` (with any single-letter options)."""
    argv = [interpolate(part, {}) for part in service.get("entrypoint", [])] + command_argv(service, {})
    assert argv[0] == "sh" and re.fullmatch(r"-[a-z]*c", argv[1]), f"expected `sh -c SCRIPT`, got {argv[:2]}"
    return argv[2]


# ---------------------------------------------------------------------------- compose: images, health, order


def test_every_service_has_a_pinned_image_or_a_build(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if "build" in service:
            assert (ROOT / service["build"].get("dockerfile", "Dockerfile")).is_file(), name
            continue
        image = service.get("image", "")
        assert "$" not in image, f"{name}: the image tag must be pinned in the file, not taken from a variable"
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest" and re.match(r"v?\d+(\.\d+)+", tag), (
            f"{name}: image {image!r} is not pinned to a version"
        )


def test_long_running_services_have_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    jobs = one_shot(services)
    for name, service in services.items():
        if name in jobs:
            assert service.get("restart", "no") == "no", f"{name} is a one-shot job: it must not restart"
            continue
        assert service.get("restart") in ("unless-stopped", "always"), f"{name} must restart"
        if name in NO_HEALTHCHECK:
            assert "healthcheck" not in service, f"{name} has a healthcheck now: drop it from NO_HEALTHCHECK"
            continue
        check = service.get("healthcheck")
        assert check and not check.get("disable") and check.get("test"), f"{name} has no healthcheck"


def test_healthcheck_probes_are_valid(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        test = (service.get("healthcheck") or {}).get("test")
        if not test:
            continue
        assert test[0] in ("CMD", "CMD-SHELL"), name
        if test[1:3] == ["python", "-c"]:
            compile(test[3], f"{name} healthcheck", "exec")


def test_startup_order(services: dict[str, dict[str, Any]]) -> None:
    expected = [
        ("temporal-schema", "postgres", "service_healthy"),
        ("temporal", "temporal-schema", "service_completed_successfully"),
        ("temporal-namespace", "temporal", "service_healthy"),
        ("worker", "temporal-namespace", "service_completed_successfully"),
        ("temporal-ui", "temporal", "service_healthy"),
        ("otel-collector", "jaeger", "service_healthy"),
    ]
    for service, target, condition in expected:
        assert depends_on(services[service]).get(target) == condition, f"{service} must wait for {target} ({condition})"
    for name, service in services.items():
        for target, condition in depends_on(service).items():
            assert target in services, f"{name} depends on unknown service {target}"
            if condition == "service_healthy":
                assert "healthcheck" in services[target], (
                    f"{name} waits for {target} to be healthy, which has no healthcheck"
                )
            # A service every `up` starts cannot wait for one that only a profile starts.
            assert not services[target].get("profiles") or service.get("profiles"), f"{name} needs profiled {target}"


def test_published_ports(services: dict[str, dict[str, Any]]) -> None:
    assert 7233 in published_ports(services["temporal"])  # `stratagem run` from the host
    assert 8080 in published_ports(services["temporal-ui"])
    assert 16686 in published_ports(services["jaeger"])
    assert services["jaeger"]["profiles"] == ["observability"]
    assert services["otel-collector"]["profiles"] == ["observability"]
    assert not set(services["postgres"].get("ports", [])), "PostgreSQL is reached only inside the network"


def test_worker_can_be_scaled(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports"), "a published port would clash under --scale worker=N"
    port = environment(worker)["OTEL_EXPORTER_PROMETHEUS_PORT"]
    assert port in [str(p) for p in worker["expose"]]
    assert f"127.0.0.1:{port}/metrics" in worker["healthcheck"]["test"][-1]


def test_worker_is_built_from_the_shared_anchor(compose: dict[str, Any]) -> None:
    # Role-specific workers added later reuse x-worker; the all-roles worker must be exactly it.
    assert compose["services"]["worker"] == compose["x-worker"]
    assert compose["x-worker"]["environment"] == compose["x-worker-env"]


# ---------------------------------------------------------------------------- compose: the worker


def test_worker_environment(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["worker"])
    for name, value in WORKER_ENV.items():
        assert env.get(name) == value, name
    for name in WORKER_PASS_THROUGH:
        assert env.get(name) == f"${{{name}:-}}", f"{name} must pass through from the host, empty by default"
    defaults = {name: interpolate(value, {}) for name, value in env.items()}
    assert defaults["TEMPORAL_NAMESPACE"] == config.DEFAULT_NAMESPACE
    assert defaults["TEMPORAL_TASK_QUEUE"] == config.DEFAULT_TASK_QUEUE
    assert defaults["OTEL_EXPORTER_OTLP_ENDPOINT"] == "", "nothing is exported unless asked"
    volumes = {str(v).split(":")[1]: str(v).split(":")[0] for v in services["worker"]["volumes"]}
    assert volumes[env["STRATAGEM_STORE"]] == "store", "the output store is one volume shared by all workers"
    assert volumes[env["STRATAGEM_WORKSPACE"]] == "workspace"


@pytest.mark.parametrize("extra", ["", "--tools /app/examples/vendor_onboarding/tools.py --tools my_company.tools"])
def test_worker_command_is_a_real_cli_command(services: dict[str, dict[str, Any]], extra: str) -> None:
    argv = command_argv(services["worker"], {"STRATAGEM_WORKER_ARGS": extra} if extra else {})
    assert argv[:2] == ["stratagem", "worker"]
    args = parser().parse_args(argv[1:])  # exits (SystemExit) on arguments the CLI does not take
    assert args.handler is processes.cmd_worker
    assert args.tools == shlex.split(extra)[1::2]


def test_the_console_service_signs_people_in_and_is_published_on_loopback(services: dict[str, dict[str, Any]]) -> None:
    from stratagem.cli import console_cmd

    console = services["console"]
    args = parser().parse_args(command_argv(console, {})[1:])
    assert args.handler is console_cmd.cmd_console
    # Not --auth local: inside a container that would make everyone who reaches the port the same user.
    assert (args.auth, args.host, args.port) == ("users", "0.0.0.0", 8400)
    assert args.users.startswith("/data/console/") and "console:/data/console" in console["volumes"]
    assert console["ports"] == ["127.0.0.1:8400:8400"]


def test_example_tool_paths_exist_in_the_image() -> None:
    # The compose file suggests /app/examples/...: the Dockerfile copies examples/ to /app/examples.
    copies = [rest for keyword, rest in dockerfile_instructions() if keyword == "COPY"]
    assert "examples/ examples/" in copies and workdir_at("COPY", "examples/ examples/") == "/app"
    mentioned = set(re.findall(r"/app/(examples/[\w/.-]+\.py)", COMPOSE_FILE.read_text()))
    assert mentioned
    for path in mentioned:
        assert (ROOT / path).is_file(), path


# ---------------------------------------------------------------------------- compose: variables and files


def test_interpolations_are_defaulted_and_documented(compose: dict[str, Any]) -> None:
    documented = header()
    for name, op in interpolations(compose):
        assert op is not None, f"${name} has no default: use ${{{name}:-...}}, or ${{{name}:?...}} if it is required"
        assert op in (":-", "-", ":?", "?"), f"${{{name}{op}...}}: unexpected operator"
        assert re.search(rf"\b{name}\b", documented), f"{name} is not documented in the compose file's header"


def test_observability_is_documented(services: dict[str, dict[str, Any]]) -> None:
    text = header()
    assert "docker compose up -d --build" in text
    assert "TEMPORAL_ADDRESS=localhost:7233" in text
    command = "OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318 docker compose --profile observability up -d"
    assert command in text
    assert "observability" in services["otel-collector"]["profiles"]


def bind_mounts(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, Path, str]]:
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            if source.startswith((".", "/")):
                yield name, (ROOT / source).resolve(), target


def test_mounted_files_exist_and_parse(services: dict[str, dict[str, Any]]) -> None:
    mounts = list(bind_mounts(services))
    assert {path.name for _, path, _ in mounts} >= {"otel-collector.yaml", "temporal-dynamicconfig.yaml"}
    for name, path, _ in mounts:
        assert path.is_relative_to(ROOT) and path.exists(), f"{name} mounts {path}, which is not in the repo"
        if path.suffix in (".yaml", ".yml"):
            assert isinstance(yaml.safe_load(path.read_text()), dict), path


def test_temporal_reads_the_mounted_dynamic_config(services: dict[str, dict[str, Any]]) -> None:
    targets = {target for name, _, target in bind_mounts(services) if name == "temporal"}
    assert environment(services["temporal"])["DYNAMIC_CONFIG_FILE_PATH"] in targets
    dynamic = yaml.safe_load((ROOT / "deploy" / "temporal-dynamicconfig.yaml").read_text())
    for key, values in dynamic.items():
        assert isinstance(values, list) and all("value" in v for v in values), key


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    used = {
        str(volume).split(":")[0]
        for service in services.values()
        for volume in service.get("volumes", [])
        if not str(volume).startswith((".", "/"))
    }
    assert used == set(compose.get("volumes") or {}), "every named volume is declared, and every declared one used"
    assert {"postgres-data", "workspace", "store"} <= used


# ---------------------------------------------------------------------------- compose: the jobs


def test_schema_job_sets_up_both_databases(services: dict[str, dict[str, Any]]) -> None:
    text = script(services["temporal-schema"])
    for database, schema in (("temporal", "temporal"), ("temporal_visibility", "visibility")):
        assert f"--db {database} create" in text
        assert re.search(rf"--db {database} update-schema -d \S*{schema}/versioned", text)


def test_namespace_job_is_idempotent(services: dict[str, dict[str, Any]]) -> None:
    job = services["temporal-namespace"]
    assert interpolate(environment(job)["TEMPORAL_NAMESPACE"], {}) == "default"
    assert environment(job)["TEMPORAL_NAMESPACE"] == environment(services["worker"])["TEMPORAL_NAMESPACE"]
    lines = [line.strip() for line in script(job).splitlines()]
    create_ns = next(i for i, line in enumerate(lines) if "namespace create" in line)
    assert "namespace describe" in lines[create_ns - 1] and lines[create_ns].startswith("||"), "create only if missing"
    create_sa = next(i for i, line in enumerate(lines) if "search-attribute create" in line)
    assert re.search(r"--name StratagemStatus --type Keyword\b", lines[create_sa])
    assert "search-attribute list" in lines[create_sa - 1] and "StratagemStatus" in lines[create_sa - 1], "check first"


# ---------------------------------------------------------------------------- the collector


def test_collector_pipelines_use_defined_components(services: dict[str, dict[str, Any]]) -> None:
    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())
    service = collector["service"]
    assert set(service.get("extensions", [])) <= set(collector.get("extensions") or {})
    assert service["pipelines"]["traces"]
    for name, pipeline in service["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in (collector.get(kind) or {}), (
                    f"pipeline {name} uses undefined {kind[:-1]} {component}"
                )
    exporters = service["pipelines"]["traces"]["exporters"]
    assert "debug" in exporters
    jaeger = [name for name in exporters if name.split("/")[0] in ("otlp", "otlp_grpc", "otlp_http", "otlphttp")]
    assert jaeger, "traces go to Jaeger over OTLP"
    host = re.sub(r"^\w+://", "", collector["exporters"][jaeger[0]]["endpoint"]).split(":")[0]
    assert host in services, f"the collector exports to {host}, which is not a compose service"


def test_collector_listens_where_compose_and_the_workers_say(services: dict[str, dict[str, Any]]) -> None:
    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert published_ports(services["otel-collector"]) == {4317, 4318}
    mounted = {target for name, _, target in bind_mounts(services) if name == "otel-collector"}
    assert command_argv(services["otel-collector"], {}) == [f"--config={next(iter(mounted))}"]


def test_compose_file_matches_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    # The compose-spec JSON schema ships in the check-jsonschema package (a test dependency).
    spec = importlib.util.find_spec("check_jsonschema")
    assert spec is not None and spec.submodule_search_locations, "pip install -e '.[test]' installs check-jsonschema"
    import jsonschema

    schema_file = Path(spec.submodule_search_locations[0]) / "builtin_schemas" / "vendor" / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(compose)


# ---------------------------------------------------------------------------- Dockerfile and .dockerignore


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].strip() + " "
            continue
        keyword, _, rest = (pending + stripped).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continuation line"
    return instructions


def workdir_at(keyword: str, arguments: str) -> str:
    """The WORKDIR in force at the given instruction."""
    workdir = "/"
    for key, rest in dockerfile_instructions():
        if (key, rest) == (keyword, arguments):
            return workdir
        if key == "WORKDIR":
            workdir = rest
    raise AssertionError(f"no {keyword} {arguments}")


def exec_form(arguments: str) -> list[str]:
    return json.loads(arguments) if arguments.startswith("[") else ["/bin/sh", "-c", arguments]


def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.removeprefix("!").strip().strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        patterns.append((negate, re.compile(regex.replace(r"\?", "[^/]"))))
    return patterns


def ignored(path: str) -> bool:
    """Docker's rule: the last pattern matching the path, or one of its parent folders, decides."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negate, pattern in dockerignore():
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


DOCKERFILE_KEYWORDS = {
    "FROM",
    "RUN",
    "CMD",
    "LABEL",
    "EXPOSE",
    "ENV",
    "ADD",
    "COPY",
    "ENTRYPOINT",
    "VOLUME",
    "USER",
    "WORKDIR",
    "ARG",
    "ONBUILD",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "SHELL",
}


def test_dockerfile_instructions_are_known() -> None:
    # A lost continuation backslash shows up here as an "instruction" made of the next line.
    for keyword, rest in dockerfile_instructions():
        assert keyword in DOCKERFILE_KEYWORDS, f"unknown Dockerfile instruction: {keyword} {rest}"


def test_base_image_is_pinned() -> None:
    bases = [rest.split()[0] for keyword, rest in dockerfile_instructions() if keyword == "FROM"]
    assert bases and all(
        re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base) for base in bases
    ), bases


def test_image_runs_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_user = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "USER")
    assert last_user < max(i for i, (keyword, _) in enumerate(instructions) if keyword == "CMD")


def test_copy_sources_exist_and_reach_the_build_context() -> None:
    for keyword, rest in dockerfile_instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        argv = exec_form(rest) if rest.startswith("[") else shlex.split(rest)
        if any(arg.startswith("--from") for arg in argv):
            continue  # from another stage, not from the repo
        for source in [arg for arg in argv if not arg.startswith("--")][:-1]:
            path = ROOT / source
            assert path.exists(), f"{keyword} {source}: not in the repo"
            files = [p for p in path.rglob("*.py") if "__pycache__" not in p.parts] if path.is_dir() else [path]
            for file in files:
                assert not ignored(file.relative_to(ROOT).as_posix()), f"{file} is excluded by .dockerignore"


def test_workflows_and_activities_install_under_stratagem() -> None:
    # The repository keeps them at its top level; the links make them stratagem's subpackages.
    for name in ("workflows", "activities"):
        link = ROOT / "stratagem" / name
        assert link.is_symlink() and link.resolve() == ROOT / name, f"stratagem/{name} must link to ../{name}"
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["include"] == ["stratagem*"]
    assert "py-modules" not in setuptools  # worker.py runs from a checkout; an install runs `stratagem worker`


def test_image_contains_what_pyproject_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {
        source.rstrip("/")
        for keyword, rest in dockerfile_instructions()
        if keyword == "COPY"
        for source in shlex.split(rest)[:-1]
    }
    needed = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    # A linked subpackage (stratagem/workflows -> ../workflows) needs its target in the image too.
    needed |= {p.resolve().relative_to(ROOT).as_posix() for p in (ROOT / "stratagem").iterdir() if p.is_symlink()}
    needed |= {"pyproject.toml", project["project"]["readme"]}
    assert needed <= copied, f"not copied into the image: {sorted(needed - copied)}"
    assert "RUN pip install ." in [f"{keyword} {rest}" for keyword, rest in dockerfile_instructions()]


def test_image_command_is_stratagem_worker() -> None:
    instructions = dockerfile_instructions()
    entrypoint = [exec_form(rest) for keyword, rest in instructions if keyword == "ENTRYPOINT"]
    cmd = [exec_form(rest) for keyword, rest in instructions if keyword == "CMD"]
    argv = (entrypoint[-1] if entrypoint else []) + (cmd[-1] if cmd else [])
    assert argv[:2] == ["stratagem", "worker"]
    assert parser().parse_args(argv[1:]).handler is processes.cmd_worker
    # docker-compose.yml replaces CMD: with an ENTRYPOINT, its command would be appended to it.
    assert not entrypoint


def test_image_settings() -> None:
    instructions = dockerfile_instructions()
    env: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(rest))
    assert env["STRATAGEM_HOME"] == "/data"
    # The image works alone the way docker-compose.yml runs it.
    for name in ("STRATAGEM_WORKSPACE", "STRATAGEM_STORE"):
        assert env[name] == WORKER_ENV[name], name
    assert [rest for keyword, rest in instructions if keyword == "WORKDIR"][-1] == "/data"
    assert ("STOPSIGNAL", "SIGINT") in instructions
    healthcheck = next(rest for keyword, rest in instructions if keyword == "HEALTHCHECK")
    probe = exec_form(healthcheck.split(" CMD ", 1)[1])
    assert probe[:2] == ["python", "-c"]
    compile(probe[2], "Dockerfile HEALTHCHECK", "exec")


def test_dockerignore_keeps_local_state_out() -> None:
    for path in (
        ".venv",
        ".git",
        ".pytest_cache",
        "tests",
        "workspace",
        "bench",
        "stratagem/__pycache__",
        "stratagem.egg-info",
    ):
        assert ignored(path), f"{path} reaches the build context"
    for path in ("README.md", "pyproject.toml", "stratagem/cli/__init__.py", "examples/vendor_onboarding/tools.py"):
        assert not ignored(path), f"{path} is needed by the build"


def test_the_roles_profile_runs_each_role_once(services: dict[str, dict[str, Any]]) -> None:
    import argparse

    from stratagem.domain.roles import ALL_ROLES
    from stratagem.worker_options import add_worker_arguments, roles_from

    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    served = []
    for name, service in services.items():
        if name.startswith("worker-"):
            assert service.get("profiles") == ["roles"], name
            env = environment(service)
            # Each is the shared worker with one variable more: the role it serves.
            assert {k: v for k, v in env.items() if k != "STRATAGEM_WORKER_ROLES"} == {
                k: v for k, v in environment(services["worker"]).items() if k != "STRATAGEM_WORKER_ROLES"
            }
            served += roles_from(parser.parse_args([]), env)
    assert sorted(served) == sorted(ALL_ROLES)
