"""Which tool-call syntax a chat template writes, found by rendering it.

A template that supports tools describes them where `tools` is passed and
renders an assistant turn's `tool_calls` and `tool` turns itself. The one
syntax recognised now is Hermes' (Qwen2.5's and Qwen3's templates):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Lyon"}}
    </tool_call>

one block per call, consecutive calls separated by a newline. A template
found to write it gets tools in its own format (the API's tools.py);
any other keeps the generic JSON form. Torch-free: the API reads the result.
"""

from __future__ import annotations

import json
from typing import Any

HERMES = "hermes"

_PROBE_NAME = "racer_probe_tool"
_PROBE_ARGUMENTS = {"racer_probe_arg": 1}
_PROBE_RESULT = "racer_probe_result"
_PROBE_TOOL = {"type": "function", "function": {
    "name": _PROBE_NAME, "description": "A probe.",
    "parameters": {"type": "object", "properties": {"racer_probe_arg": {"type": "integer"}}}}}


def hermes_call(name: str, arguments: Any) -> str:
    """One call as a Hermes template writes it (arguments: their JSON value)."""
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {json.dumps(arguments, ensure_ascii=False)}}}\n</tool_call>'


def tool_syntax(tokenizer: Any) -> str | None:
    """HERMES where `tokenizer`'s chat template describes a tool given as `tools`,
    renders an assistant turn's call in Hermes' tags and a `tool` turn's result;
    None otherwise (no template, no tools in it, another syntax, or it fails)."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or "tools" not in template:
        return None
    call = {"id": "call_probe", "type": "function", "function": {"name": _PROBE_NAME, "arguments": _PROBE_ARGUMENTS}}
    asked = [{"role": "user", "content": "Hello."}]
    answered = [*asked, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_probe", "name": _PROBE_NAME, "content": _PROBE_RESULT}]
    try:
        described = tokenizer.apply_chat_template(asked, tools=[_PROBE_TOOL], tokenize=False,
                                                  add_generation_prompt=True)
        rendered = tokenizer.apply_chat_template(answered, tools=[_PROBE_TOOL], tokenize=False,
                                                 add_generation_prompt=True)
    except Exception:  # a template that cannot render tools has no tool syntax
        return None
    if (isinstance(described, str) and isinstance(rendered, str) and _PROBE_NAME in described
            and hermes_call(_PROBE_NAME, _PROBE_ARGUMENTS) in rendered and _PROBE_RESULT in rendered):
        return HERMES
    return None
