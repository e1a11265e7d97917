"""A conversation as a JSON file: what `!!save` writes and `!!load` reads.

The file is the original RACER chat's format, a list of {"role", "content"}
messages (system first, if any), so either tool reads the other's files; the
common object form {"messages": [...]} (an OpenAI-style request or export;
its other keys are not read) loads too. A message's content may also be the
original's list of parts, whose text parts are kept. A message with attached images is written as the original writes
one: a list of parts, {"type": "image", "image": "file://PATH"} for each image
(before the text, where the model sees them) and {"type": "text", "text": ...};
their content hashes go in an extra key, "racer_image_sha256". Replies carry
two extra keys the original ignores: "racer_runs" (the text by drafting
source, for the colours) and "racer_stats" (the chart).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from racer_core.common.errors import InputError, json_error_text
from racer_core.common.events import Source
from racer_core.engine.chat_image import file_sha256
from racer_tui.history import StoredImage, StoredMessage, valid_stats

ROLES = ("system", "user", "assistant")
FILE_URL = "file://"


@dataclass
class ChatFile:
    system_prompt: str
    messages: list[StoredMessage]


def json_path(name: str) -> Path:
    """Where `!!save NAME` writes: as the original, a name without an extension gets ".json"."""
    path = Path(name).expanduser()
    return path if path.suffix else path.with_name(path.name + ".json")


def find(name: str) -> Path:
    """What `!!load NAME` reads: NAME itself, else NAME.json (the original's rule)."""
    path = Path(name).expanduser()
    if path.exists() or path.suffix:
        return path
    return json_path(name)


def to_json(chat: ChatFile) -> list[dict]:
    out: list[dict] = []
    if chat.system_prompt:
        out.append({"role": "system", "content": chat.system_prompt})
    for message in chat.messages:
        item: dict = {"role": message.role, "content": message.content}
        if message.images:
            item["content"] = [{"type": "image", "image": FILE_URL + i.path} for i in message.images]
            item["content"].append({"type": "text", "text": message.content})
            item["racer_image_sha256"] = [i.sha256 for i in message.images]
        if message.runs:
            item["racer_runs"] = [[int(source), text] for source, text in message.runs]
        if message.stats:
            item["racer_stats"] = message.stats
        out.append(item)
    return out


def save(chat: ChatFile, path: Path) -> None:
    """Write atomically: a failed write leaves an earlier file whole. The
    folder must exist (a mistyped one is not made)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(to_json(chat), ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # the original's multimodal form: keep the text parts
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        if all(isinstance(p, str) or p is None for p in parts):
            return "".join(p for p in parts if p)
    raise InputError(f"{where}: the content is neither text nor a list of text parts")


def _image_paths(content: object) -> list[str]:
    """The local files of the image parts, in order (a URL part is not kept)."""
    if not isinstance(content, list):
        return []
    paths = [p.get("image") for p in content if isinstance(p, dict) and p.get("type") == "image"]
    return [p.removeprefix(FILE_URL) for p in paths if isinstance(p, str) and p.startswith(FILE_URL)]


def _images(item: dict) -> list[StoredImage]:
    """The attached images with their hashes as saved; a file from the original
    has none, so the file's hash now (empty when it is gone: shown as missing)."""
    paths = _image_paths(item["content"])
    hashes = item.get("racer_image_sha256")
    if isinstance(hashes, list) and len(hashes) == len(paths) and all(isinstance(h, str) for h in hashes):
        return [StoredImage(p, h) for p, h in zip(paths, hashes, strict=True)]
    out = []
    for path in paths:
        try:
            out.append(StoredImage(path, file_sha256(path)))
        except OSError:
            out.append(StoredImage(path, ""))
    return out


def _runs(value: object, content: str) -> list[tuple[Source, str]]:
    """The colour runs, if they are well formed and add up to the content;
    else the whole text as the model's (a reply from another tool)."""
    plain = [(Source.MODEL, content)]
    try:
        runs = [(Source(int(s)), str(t)) for s, t in value]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return plain
    return runs if runs and "".join(t for _, t in runs) == content else plain


def from_json(data: object, name: str = "the file") -> ChatFile:
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list):
        raise InputError(f'{name} is not a conversation: expected a JSON list of messages, '
                         'or an object with a "messages" list')
    system = ""
    messages: list[StoredMessage] = []
    for i, item in enumerate(data, 1):
        where = f"{name}, message {i}"
        if not isinstance(item, dict) or item.get("role") not in ROLES or "content" not in item:
            raise InputError(f"{where}: expected {{\"role\": system|user|assistant, \"content\": ...}}")
        content = _text(item["content"], where)
        if item["role"] == "system":
            if messages:
                raise InputError(f"{where}: a system message must come first")
            system = content
            continue
        stats = item.get("racer_stats")
        messages.append(StoredMessage(
            item["role"], content,
            _runs(item.get("racer_runs"), content) if item["role"] == "assistant" else [],
            stats if item["role"] == "assistant" and stats and valid_stats(stats) else {},
            _images(item) if item["role"] == "user" else [],
        ))
    if not messages:
        raise InputError(f"{name} holds no user or assistant message")
    return ChatFile(system, messages)


def load(path: Path) -> ChatFile:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON ({json_error_text(exc)})") from None
    return from_json(data, str(path))
