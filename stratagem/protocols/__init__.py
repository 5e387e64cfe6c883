"""Stratagem as a peer of other agents and assistants: an A2A server (`stratagem a2a`,
stratagem.protocols.a2a_server) and an MCP server (`stratagem mcp`, stratagem.protocols.mcp_server)
over runs and the decisions people make in them. What both share is here: how a run reads as a
task (runs_view), how a decision arrives as data (decisions), and who may connect (access).
docs/protocols.md is the user's guide."""

MAX_LINE = 500


def one_line(text: object) -> str:
    """An error or a message as one line another agent can show: whitespace folded, at most
    MAX_LINE characters."""
    folded = " ".join(str(text).split())
    return folded if len(folded) <= MAX_LINE else folded[: MAX_LINE - 1] + "…"
