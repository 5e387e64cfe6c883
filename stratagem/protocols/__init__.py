"""Stratagem as a peer of other agents and assistants: an A2A server (`stratagem a2a`,
stratagem.protocols.a2a_server) and an MCP server (`stratagem mcp`, stratagem.protocols.mcp_server)
over runs and the decisions people make in them. What both share is here: how a run reads as a
task (runs_view), how a decision arrives as data (decisions), and who may connect (access).
docs/protocols.md is the user's guide."""
