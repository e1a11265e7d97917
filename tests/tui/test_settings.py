"""settings.json: typed and range-checked by GenerationConfig's rules; a bad
field or a damaged file never stops the app and is never silently lost."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from app_pilot import StartApp
from fake_engine import FakeEngine, ready_chat

from racer_core.bench.answers import read_answers
from racer_core.common.config import DEFAULTS, ConfigError, GenerationConfig
from racer_tui import cli
from racer_tui.settings import Settings, SettingsStore


def test_round_trip_keeps_a_flat_file(tmp_path: Path) -> None:
    store = SettingsStore(tmp_path / "cfg" / "settings.json")
    assert store.load() == Settings() and store.notices == []
    s = Settings().replace(
        method="logits",
        temperature=0.7,
        top_p=0.9,
        max_num_draft=12,
        max_nodes=500,
        enable_thinking=True,
        model_path="/m",
        markdown=True,
    )
    store.save(s)
    assert store.load() == s and store.notices == []
    saved = json.loads(store.path.read_text())
    assert saved["max_num_draft"] == 12 and saved["model_path"] == "/m" and "generation" not in saved


def test_replace_checks_generation_fields() -> None:
    s = Settings().replace(method="retrieval", ngram=4, max_breadth=3, system_prompt="hi")
    assert (s.generation.method, s.generation.ngram, s.generation.max_breadth, s.system_prompt) == (
        "retrieval",
        4,
        3,
        "hi",
    )
    with pytest.raises(ConfigError, match="^max_num_draft must be"):
        s.replace(max_num_draft=0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("temperature", "hot"),
        ("temperature", -3),
        ("temperature", math.nan),
        ("max_new_tokens", None),
        ("max_new_tokens", 0),
        ("max_num_draft", True),
        ("max_num_draft", 5000),
        ("top_p", [1]),
        ("method", "nope"),
        ("enable_thinking", "yes please"),
        ("model_path", 7),
        ("markdown", "yes"),
        ("system_prompt", None),
    ],
)
def test_a_bad_field_falls_back_to_its_default_and_keeps_the_rest(tmp_path: Path, name, value) -> None:
    path = tmp_path / "settings.json"
    keep = {"method": "ar", "max_nodes": 321, "system_prompt": "be brief", "device": "cpu"}
    keep.pop(name, None)
    original = json.dumps({**keep, name: value, "from_a_newer_version": 1})
    path.write_text(original)
    store = SettingsStore(path)
    settings = store.load()
    data = settings.to_json()
    assert data[name] == Settings().to_json()[name]
    assert all(data[k] == v for k, v in keep.items())
    assert len(store.notices) == 1 and store.notices[0].startswith(f"Settings: {name} must be ")
    assert path.read_text() == original  # the file is left as it was until a save


@pytest.mark.parametrize("text", ["{not json", "", "[1, 2]", "\udcff"])
def test_a_damaged_file_is_moved_aside_with_a_timestamp(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    store = SettingsStore(path)
    assert store.load() == Settings()
    assert not path.exists()
    (aside,) = tmp_path.glob("settings.json.damaged-*")
    assert aside.read_bytes() == text.encode("utf-8", "surrogateescape")
    assert len(store.notices) == 1 and aside.name in store.notices[0]
    path.write_text("{oops")  # a second one in the same second keeps both
    SettingsStore(path).load()
    assert len(list(tmp_path.glob("settings.json.damaged-*"))) == 2


async def test_the_app_starts_on_a_damaged_file_and_says_what_it_repaired(start_app: StartApp, tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.json").write_text(json.dumps({"temperature": "hot", "max_nodes": 77}))
    pilot = await start_app()
    app = pilot.app
    await ready_chat(pilot)
    assert app.settings.generation.max_nodes == 77
    assert app.settings.generation.temperature == DEFAULTS.temperature
    messages = [n.message for n in app._notifications]
    assert any(m.startswith("Settings: temperature must be ") for m in messages)


# The same value, the same verdict and the same words: the config, the command line, the settings file.
VALUES = [
    ("temperature", "nan"),
    ("temperature", "7"),
    ("temperature", "0.5"),
    ("temperature", "-1"),
    ("top_p", "0"),
    ("top_p", "0.9"),
    ("max_new_tokens", "0"),
    ("max_new_tokens", "12"),
    ("max_num_draft", "4097"),
    ("max_num_draft", "auto"),
    ("max_num_draft", "16"),
    ("max_breadth", "0"),
    ("max_breadth", "-1"),
    ("ngram", "3"),
]


@pytest.mark.parametrize(("name", "text"), VALUES)
def test_one_verdict_at_every_entry_point(tmp_path: Path, capsys, name: str, text: str) -> None:
    try:
        expected: object = GenerationConfig.parse_field(name, text)
        refused = None
    except ConfigError as exc:
        refused = str(exc)

    # the command line: refused before any model loads, exit status 2, the same sentence
    suite = tmp_path / "q.jsonl"
    suite.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["Hi?"]}) + "\n")
    loads: list[dict] = []

    def loader(**kwargs):
        loads.append(kwargs)
        return FakeEngine()

    flag = "--" + name.replace("_", "-")
    argv = ["--bench", str(suite), "--methods", "ar", flag, text, "--answer-dir", str(tmp_path / "a")]
    if refused:
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv, engine_loader=loader)
        assert exit_.value.code == 2 and loads == []
        assert refused in capsys.readouterr().err
    else:
        assert cli.main(argv, engine_loader=loader) == 0
        (answer,) = read_answers(tmp_path / "a" / "ar.jsonl")
        assert answer.config[name] == expected

    # the settings file, holding the value as JSON would
    path = tmp_path / "settings.json"
    as_json = json.loads(text) if text not in ("auto", "nan") else (math.nan if text == "nan" else text)
    path.write_text(json.dumps({name: as_json}))
    store = SettingsStore(path)
    loaded = getattr(store.load().generation, name)
    if refused:
        assert loaded == getattr(DEFAULTS, name) and refused in store.notices[0]
    else:
        assert loaded == expected and store.notices == []


def test_bench_with_nan_exits_2_before_importing_the_engine(tmp_path: Path) -> None:
    import subprocess
    import sys

    suite = tmp_path / "q.jsonl"
    suite.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["Hi?"]}) + "\n")
    code = (
        "import sys\nfrom racer_tui.cli import main\n"
        f"try:\n    main(['--bench', {str(suite)!r}, '--temperature', 'nan'])\n"
        "except SystemExit as exc:\n    print(exc.code, 'torch' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    assert "temperature must be a number from 0 to 5 (0 is greedy), not nan" in proc.stderr
