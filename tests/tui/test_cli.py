"""The `racer-tui` command: subcommands, the original's spellings, the chat's
options, serving and its guard, --version."""

from __future__ import annotations

import pytest

from racer_tui.cli import build_parser, legacy_words, main
from racer_tui.cli.chat import app_args, overrides
from racer_tui.cli.serve import build_serve_command, is_loopback


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The real server, built but never listening: what it would serve, and where."""
    seen: dict = {}

    def serve(self) -> None:
        seen.update(command=self.command, host=self.host, port=self.port, url=self.public_url, served=True)

    monkeypatch.setattr("textual_serve.server.Server.serve", serve)  # PageServer's too
    return seen


def test_no_command_is_the_chat_and_serve_takes_the_chat_options() -> None:
    args = build_parser().parse_args([])
    assert (args.command, args.model_path, args.device, args.dtype) == (None, None, None, None)
    assert overrides(args) == {}
    args = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--port", "9001", "--model", "/m.gguf"])
    assert (args.command, args.host, args.port, args.allow_remote) == ("serve", "0.0.0.0", 9001, False)
    assert app_args(args) == ["--model", "/m.gguf"]


def test_the_chat_takes_the_original_chats_sampling_options() -> None:
    words = ["--model-path", "/m", "--temperature", "0.7", "--top-p", "0.8", "--method", "pld",
             "--system-prompt", "Be brief.", "--max-new-tokens", "64"]
    args = build_parser().parse_args(words)
    assert args.model_path == "/m"
    assert overrides(args) == {
        "method": "pld", "temperature": 0.7, "top_p": 0.8, "max_new_tokens": 64, "system_prompt": "Be brief.",
    }
    # the served app processes get the same choices back
    again = build_parser().parse_args(app_args(args))
    assert overrides(again) == overrides(args) and again.model_path == "/m"
    assert overrides(build_parser().parse_args(["--top-p", "0"])) == {"top_p": 1.0}  # the original's "no filter"


def test_load_options_reach_load_engine_and_served_processes() -> None:
    from racer_tui.cli.options import load_arguments

    assert load_arguments(build_parser().parse_args([])) == {}
    args = build_parser().parse_args(["--forward", "stock", "--load-in-4bit", "--trust-remote-code"])
    assert load_arguments(args) == {"forward": "stock", "quantize": "4bit", "trust_remote_code": True}
    assert app_args(args) == ["--trust-remote-code", "--load-in-4bit", "--forward", "stock"]
    assert load_arguments(build_parser().parse_args(app_args(args))) == load_arguments(args)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--forward", "fast"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--load-in-8bit", "--load-in-4bit"])


def test_the_draft_head_reaches_load_engine_and_served_processes_and_eagle3_needs_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from racer_tui.cli.options import load_arguments

    args = build_parser().parse_args(["--eagle-model-path", "/heads/h", "--method", "eagle3", "--top-k", "4"])
    assert load_arguments(args) == {"draft_model": "/heads/h"}
    assert "--draft-model" in app_args(args) and overrides(args)["top_k"] == 4

    def no_app(self) -> None:
        raise AssertionError("the app started")

    monkeypatch.setattr("racer_tui.app.RacerApp.run", no_app)
    assert main(["--method", "eagle3"]) == 2
    err = capsys.readouterr().err
    assert "eagle3 needs a draft head" in err and err.count("\n") == 1


def test_every_generation_option_of_the_chat_goes_to_the_served_processes() -> None:
    words = ["--model", "/m", "--device", "auto", "--dtype", "float32", "--max-num-draft", "auto", "--ngram", "4",
             "--max-nodes", "500", "--max-breadth", "3", "--enable-thinking", "--system-prompt", ""]
    args = build_parser().parse_args(words)
    assert overrides(args) == {"max_num_draft": "auto", "ngram": 4, "max_nodes": 500, "max_breadth": 3,
                               "enable_thinking": True, "system_prompt": ""}
    again = build_parser().parse_args(app_args(args))
    given = {k: v for k, v in vars(args).items() if k != "parser"}
    assert {k: v for k, v in vars(again).items() if k != "parser"} == given  # --device auto too: it beats a saved one


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["--temperature", "nan"], "temperature"),
        (["--temperature", "7"], "temperature"),
        (["--top-p", "1.5"], "top_p"),
        (["--method", "magic"], "method"),
        (["--max-new-tokens", "0"], "max_new_tokens"),
    ],
)
def test_the_chat_refuses_bad_values_with_the_engines_words(words, says, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(words)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_chat_overrides_hold_for_this_run_only(tmp_path) -> None:
    from racer_tui.app import RacerApp
    from racer_tui.settings import SettingsStore

    config = tmp_path / "config"
    app = RacerApp(data_dir=tmp_path / "data", config_dir=config, overrides={"temperature": 0.7, "method": "pld"})
    assert (app.settings.generation.temperature, app.settings.generation.method) == (0.7, "pld")
    app.update_settings(markdown=True)  # saving something else does not save the run's choices
    app.history.close()
    saved = SettingsStore(config / "settings.json").load()
    assert saved.markdown is True
    assert (saved.generation.temperature, saved.generation.method) == (0.0, "racer")


@pytest.mark.parametrize("command", ["bench", "speed", "score", "serve"])
def test_each_command_has_its_own_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: racer-tui {command}")
    wanted = {"bench": "--max-num-draft", "speed": "--base", "score": "--questions", "serve": "--allow-remote"}
    assert wanted[command] in out


def test_top_level_help_lists_the_commands_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(f"    {name} " in out for name in ("bench", "speed", "score", "serve"))
    assert "--temperature" in out and "--bench SUITE" in out
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("racer-tui ")


def test_the_originals_spellings_reach_the_subcommands() -> None:
    assert legacy_words(["--bench", "builtin", "--resume"]) == ["bench", "--bench", "builtin", "--resume"]
    assert legacy_words(["--bench-name=gsm8k"]) == ["bench", "--bench-name=gsm8k"]
    assert legacy_words(["--serve", "--port", "9"]) == ["serve", "--port", "9"]
    assert legacy_words(["speed", "--bench", "x"]) == ["speed", "--bench", "x"]  # a subcommand word wins
    assert legacy_words(["--model", "m"]) == ["--model", "m"]


def test_serve_command_reruns_the_app_without_serve() -> None:
    cmd = build_serve_command(["--model", "/path with space/m.gguf"], python="/venv/bin/python")
    assert cmd == "/venv/bin/python -m racer_tui.cli --model '/path with space/m.gguf'"
    assert "serve" not in cmd


@pytest.mark.parametrize("spelling", [["serve"], ["--serve"]])
def test_serve_on_loopback_builds_server(spelling: list[str], fake_server: dict) -> None:
    assert main([*spelling, "--port", "8123", "--dtype", "float32"]) == 0
    assert fake_server["host"] == "127.0.0.1" and fake_server["port"] == 8123 and fake_server["served"]
    assert fake_server["command"].endswith("-m racer_tui.cli --dtype float32")


def test_serve_on_ipv6_prints_an_address_a_browser_opens(
    fake_server: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    for host in ("::1", "[::1]"):
        assert main(["serve", "--host", host, "--port", "8767"]) == 0
        assert fake_server["host"] == "::1"  # bound without brackets
        assert fake_server["url"] == "http://[::1]:8767"  # the page's own links too
        assert "serving on http://[::1]:8767 " in capsys.readouterr().out
    assert main(["serve", "--port", "8767"]) == 0
    assert fake_server["url"] == "http://127.0.0.1:8767"


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.4", "example.org"))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "my-box.local"])
def test_serve_on_the_network_needs_allow_remote(host: str, fake_server: dict, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--serve", "--host", host])
    assert exc.value.code == 2 and "served" not in fake_server
    err = capsys.readouterr().err
    assert "--allow-remote" in err and "chat history" in err and "model path" in err and "benchmarks" in err


def test_allow_remote_serves_with_a_warning(fake_server: dict, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--allow-remote"]) == 0
    assert fake_server["host"] == "0.0.0.0" and fake_server["served"]
    err = capsys.readouterr().err
    assert err.startswith("racer-tui: warning: serving on 0.0.0.0")
    assert "chat history" in err and "model path" in err and "benchmarks" in err
    assert "--allow-remote" not in fake_server["command"]  # the app processes get only the chat options


def test_serve_options_without_serve_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--host", "0.0.0.0"])
    assert exc.value.code == 2
    assert "--host" in capsys.readouterr().err


def test_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--port", "70000"])
    assert exc.value.code == 2
    assert "--port must be between 1 and 65535" in capsys.readouterr().err


def test_command_line_parsing_lives_in_racer_tui() -> None:
    """racer_core imports argparse only in `python -m` entry points (a module run as a script)."""
    import ast
    from pathlib import Path

    import racer_core

    parsing = []
    for path in Path(racer_core.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imports |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        if "argparse" in imports:
            main_guard = any(isinstance(node, ast.Compare) and ast.unparse(node) == "__name__ == '__main__'"
                             for node in ast.walk(tree))
            parsing.append((path.name, main_guard))
    assert ("bench.py", True) in parsing  # the automaton's microbenchmark: the walk sees real modules
    assert [name for name, entry_point in parsing if not entry_point] == []


def test_python_dash_m_racer_tui_is_the_command() -> None:
    """`python -m racer_tui` runs the same command line as `racer-tui` (it used to say
    "No module named racer_tui.__main__")."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "racer_tui", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: racer-tui")
