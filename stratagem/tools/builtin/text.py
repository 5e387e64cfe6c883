"""The `render_template` tool: a text template filled with values."""

import json
from string import Template
from typing import Any

from stratagem.common.errors import ToolError
from stratagem.tools.definition import tool


@tool(side_effects=False)
def render_template(template: str, values: dict[str, Any]) -> str:
    """Fill a text template and return the result.

    Placeholders are written `$name` or `${name}`; write `$$` for a literal dollar sign. Every
    placeholder needs a value in `values`. Strings and numbers are inserted as they are; other
    values (true/false, null, lists, objects) are inserted as JSON.
    """
    rendered = {key: value if _inserted_as_is(value) else json.dumps(value) for key, value in values.items()}
    try:
        return Template(template).substitute(rendered)
    except KeyError as exc:
        given = ", ".join(sorted(values)) or "none"
        raise ToolError(
            f"render_template: no value for placeholder '{exc.args[0]}' (values given: {given})", retryable=False
        ) from None
    except ValueError as exc:
        raise ToolError(
            f"render_template: invalid template: {exc}; write '$$' for a literal '$'", retryable=False
        ) from None


def _inserted_as_is(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)
