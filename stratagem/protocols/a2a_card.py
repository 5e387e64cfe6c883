"""The A2A agent card of `stratagem a2a`: the process library as skills.

Each process is a skill: its id is the process's name, its description the one the operator
wrote in the process file. A2A's skills have no field for an input schema, so the inputs of every
process, as one JSON Schema object each (stratagem.domain.process.inputs_schema), travel in a
capabilities extension, INPUTS_EXTENSION, keyed by process name. Nothing a run wrote (a plan, a
goal rendered from inputs, model output) is ever in the card: it is public, and run text is
untrusted. A goal sent as text is a skill only where the server has a planner.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct

from stratagem.domain.process import ProcessSpec, inputs_schema
from stratagem.io.process_library import ProcessLibrary

INPUTS_EXTENSION = "urn:stratagem:a2a:process-inputs:v1"
GOAL_SKILL = "@goal"  # not a process name (those are lower-case letters, digits, '-', '_' and '.')
BEARER = "bearer"
JSON = "application/json"


def struct(value: dict[str, Any]) -> Struct:
    out = Struct()
    ParseDict(value, out)
    return out


def _version() -> str:
    try:
        return version("stratagem")
    except PackageNotFoundError:
        return "0"


def process_skill(spec: ProcessSpec) -> AgentSkill:
    return AgentSkill(
        id=spec.name,
        name=spec.label,
        description=spec.description or f"The process {spec.label}.",
        tags=["process"],
        input_modes=[JSON],
        output_modes=[JSON],
    )


def goal_skill() -> AgentSkill:
    return AgentSkill(
        id=GOAL_SKILL,
        name="A goal, as text",
        description="Send what to achieve as a text part: a planner writes the plan, and a person approves it "
        "before anything runs.",
        tags=["goal"],
        input_modes=["text/plain"],
        output_modes=[JSON],
    )


def inputs_extension(specs: list[ProcessSpec]) -> AgentExtension:
    """Each process's version, digest and inputs schema, by name (the message's data part names
    the process and gives inputs that check against it)."""
    processes = {
        spec.name: {"version": spec.version, "digest": spec.digest, "inputs": inputs_schema(spec)} for spec in specs
    }
    return AgentExtension(
        uri=INPUTS_EXTENSION,
        description='The inputs of each process skill, as JSON Schema: send {"process": NAME, "inputs": {...}} '
        "as a data part.",
        required=False,
        params=struct({"processes": processes}),
    )


def agent_card(library: ProcessLibrary, *, public_url: str, planner: bool) -> AgentCard:
    """The card for `library` (its latest version of each process), answering at `public_url`."""
    specs = library.latest()
    skills = [process_skill(spec) for spec in specs]
    if planner:
        skills.append(goal_skill())
    return AgentCard(
        name="Stratagem",
        description="Runs this library's processes as durable runs: the plan and any gated step wait for a "
        "person's approval (input-required), and the result comes back as an artifact.",
        version=_version(),
        supported_interfaces=[
            AgentInterface(url=public_url.rstrip("/") + "/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extensions=[inputs_extension(specs)]),
        security_schemes={BEARER: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))},
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList()})],
        default_input_modes=[JSON, "text/plain"] if planner else [JSON],
        default_output_modes=[JSON],
        skills=skills,
    )
