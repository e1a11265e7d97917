"""Every script in scripts/ runs at its smallest settings, so a broken script fails CI.

Each runs in-process through its main(argv), on the tiny random-weight model or the
embedded one (installed in CI, loaded in well under a second) with a few tokens; a
test checks only that the script finishes and prints its result line, never how fast.
What CI lacks has a stand-in here, said at its test: llama.cpp (a fake `llama_cpp`
module), a GPU (gpu_check runs on the CPU), the app's own start in a fresh process
(first_start's child is answered by a fake subprocess.run). sanitize.sh is run by
.ci/run itself.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
SHORT = ["--question-begin", "14", "--question-end", "15", "--max-new-tokens", "4"]  # one built-in question
COVERED = {  # every script, and the test that runs it (a new script without one fails the last test)
    "accept_compare.py", "api_load.py", "api_profile.py", "api_soak.py", "batch_cost.py", "bit_exact_check.py",
    "busy_machine.py",
    "context_count_cost.py", "draft_replay.py", "dtype_e2e.py", "first_start.py", "gpu_check.py", "grammar_engines.py",
    "kernel_floor.py",
    "linear_cost.py", "llama_cpp_anchor.py", "loop_load.py", "llama_cpp_step_cost.py", "logits_rule_speed.py", "pass_aftermath.py",
    "prob_replay.py", "quant_builds.py", "reply_memory.py", "sanitize.sh", "screenshots.py", "sized_gguf.py", "step_overhead.py",
    "structured_targets.py", "tui_speed.py", "verify_cost.py",
}
ELSEWHERE = {"tree_oracle.py": "tests/core/test_tree_oracle.py"}  # runs there on the tiny model, with its checks


def _main(name: str) -> Callable[..., Any]:
    return importlib.import_module(f"scripts.{name.removesuffix('.py')}").main


def run(name: str, *argv: str) -> None:
    """The script's main(argv); a SystemExit is a failure unless its code is 0 (a script that exits on success)."""
    try:
        code = _main(name)(list(argv))
    except SystemExit as exc:
        code = exc.code
    assert not code, f"{name} {' '.join(argv)} exited {code}"


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A folder holding the tiny random-weight model and its tokenizer, for scripts' --model."""
    from racer_core.testing import tiny_model, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.fixture(autouse=True)
def keep_process_state() -> Iterator[None]:
    """Scripts set torch's thread count and environment variables (screenshots.py its data folders) for
    their run, as the process they own; the test process keeps its own."""
    threads, environ = torch.get_num_threads(), dict(os.environ)
    yield
    torch.set_num_threads(threads)
    os.environ.clear()
    os.environ.update(environ)


def test_every_script_has_a_smoke_test() -> None:
    assert {p.name for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh")} - {"__init__.py"} == COVERED | set(ELSEWHERE)
    for name, test in ELSEWHERE.items():
        assert f"{name.removesuffix('.py')}.main(" in (ROOT / test).read_text(), f"{test} does not run {name}"


def test_every_python_script_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in sorted(n for n in COVERED | set(ELSEWHERE) if n.endswith(".py")):
        with pytest.raises(SystemExit) as exc:
            _main(name)(["--help"])
        assert exc.value.code == 0, name
        assert "usage:" in capsys.readouterr().out, name


def test_linear_cost_dense_formats_on_random_weights(capsys: pytest.CaptureFixture[str]) -> None:
    # compiled (torch.compile) is left to --help: it adds seconds of inductor and sets inductor's freezing
    # for the whole test process.
    run("linear_cost.py", "--formats", "flinear,fp32-1t", "--layers", "1", "--sizes", "1,2", "--rounds", "1",
        "--split-head")
    out = capsys.readouterr().out
    assert "random weights, 1 layers" in out and "lm_head share" in out and "against flinear" in out


def test_linear_cost_every_other_format_on_the_embedded_weights(capsys: pytest.CaptureFixture[str]) -> None:
    run("linear_cost.py", "--formats", "q4q8,q4,q8q8,fp16,onednn,mkl,int8,int8w", "--layers", "1", "--sizes", "1",
        "--rounds", "1", "--clock", "cpu")
    out = capsys.readouterr().out
    assert "embedded weights" in out and "against q4q8" in out


def test_linear_cost_on_random_blocks_of_a_type_both_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    run("linear_cost.py", "--formats", "q4q8file,q4q8-1t,q4,fp32", "--qtype", "Q4_K", "--shapes", "16x256,8x512",
        "--sizes", "1,2", "--rounds", "1", "--clock", "cpu")
    out = capsys.readouterr().out
    assert "random Q4_K blocks 16x256,8x512" in out and "against q4q8file" in out
    with pytest.raises(SystemExit):
        _main("linear_cost.py")(["--qtype", "Q6_K", "--shapes", "16x200"])
    assert "a positive multiple of 256" in capsys.readouterr().err


def test_quant_builds_times_two_builds_and_checks_their_bits(capsys: pytest.CaptureFixture[str]) -> None:
    from racer_core.models.formats.quant import _quant

    build = _quant.__file__  # the installed build twice: the same bits, two loads under their own names
    run("quant_builds.py", build, build, "--layers", "1", "--sizes", "1,3", "--rounds", "1", "--threads", "1")
    out = capsys.readouterr().out
    assert "every build gives the same bits at every size" in out
    assert "fastest against the first build: T=1:" in out
    with pytest.raises(SystemExit, match="no such build"):
        _main("quant_builds.py")([build, "/nonexistent/_quant.so"])


def test_linear_cost_refuses_an_unknown_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _main("linear_cost.py")(["--formats", "fp64"])
    assert "unknown format fp64" in capsys.readouterr().err


def test_step_overhead_all_three_measures(capsys: pytest.CaptureFixture[str]) -> None:
    run("step_overhead.py", "share", "--tiny", *SHORT)
    run("step_overhead.py", "bookkeeping", "--layers", "2", "--steps", "3", "--rounds", "1")
    run("step_overhead.py", "recording", "--tiny", "--max-new-tokens", "8")
    out = capsys.readouterr().out
    assert "outside the forward passes" in out and "us per sequence and step" in out and "% of a step" in out


def test_verify_cost(capsys: pytest.CaptureFixture[str]) -> None:
    run("verify_cost.py", "--variants", "lean,lean-sdpa", "--dtype", "auto", "--sizes", "1", "--rounds", "1",
        "--context", "4")
    assert "fastest / median of 1 interleaved rounds" in capsys.readouterr().out


TINY_SIZE = ["--hidden", "256", "--layers", "2", "--ffn", "512", "--heads", "4", "--kv-heads", "2"]


def test_sized_gguf_then_the_cost_scripts_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A tiny random Llama with the embedded model's tokenizer, then verify_cost's steps and prefill (two chunks)
    # and kernel_floor on it through --model.
    path = str(tmp_path / "sized.gguf")
    run("sized_gguf.py", path, *TINY_SIZE, "--mix", "q4_k_m")
    out = capsys.readouterr().out
    assert "its text is noise" in out and "Q4_K" in out and "Q6_K" in out
    run("verify_cost.py", "--model", path, "--variants", "lean-q4-file,lean-q4", "--sizes", "1", "--rounds", "1",
        "--context", "4")
    out = capsys.readouterr().out
    assert "sized;" in out and "fastest / median of 1 interleaved rounds" in out
    run("verify_cost.py", "--model", path, "--variants", "lean-q4", "--prefill", "260", "--rounds", "1")
    assert "prefill of 260 tokens in chunks of 256" in capsys.readouterr().out
    run("kernel_floor.py", "--model", path, "--threads", "1", "--sizes", "1,2", "--context", "8", "--rounds", "1")
    out = capsys.readouterr().out
    assert "sized;" in out and "step/floor" in out
    assert "int8 kernel (avx" in out  # the rate is the kernel's on the ISA the step runs
    from racer_core.models.formats.quant import _quant

    # a Q4_K_M layer's q|k|v of two types: three calls, as the fused layer makes them
    run("quant_builds.py", _quant.__file__, "--model", path, "--sizes", "1,2", "--rounds", "1", "--threads", "1")
    assert "every build gives the same bits at every size" in capsys.readouterr().out
    run("pass_aftermath.py", "--model", path, "--between", "2,sleep,spin,stream", "--context", "8", "--rounds", "1")
    out = capsys.readouterr().out
    assert "sized, 8 cached" in out and all(f"{name} " in out for name in ("none", "2 rows", "sleep", "spin", "stream"))
    with pytest.raises(SystemExit, match="not a row count"):
        _main("pass_aftermath.py")(["--model", path, "--between", "nap", "--rounds", "1"])
    from racer_core.models.checkpoint.gguf_dequantized import cache_folder

    assert not cache_folder(Path(path)).exists()  # blocks throughout: no float32 copy of the file was made


def test_model_options_refuse_a_missing_file_and_sized_gguf_a_bad_shape(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.gguf")
    for name in ("verify_cost.py", "kernel_floor.py"):
        with pytest.raises(SystemExit, match="model path does not exist"):
            _main(name)(["--model", missing, "--variants", "lean-q4"] if name == "verify_cost.py" else ["--model", missing])
    with pytest.raises(SystemExit, match="must split into --heads"):
        _main("sized_gguf.py")([str(tmp_path / "bad.gguf"), *TINY_SIZE[:-2], "--kv-heads", "3"])
    assert not (tmp_path / "bad.gguf").exists()


def test_context_count_cost(capsys: pytest.CaptureFixture[str]) -> None:
    run("context_count_cost.py", "--repeats", "1")
    assert "typed  10000 words" in capsys.readouterr().out


def test_logits_rule_speed(tiny_checkpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    run("logits_rule_speed.py", *SHORT, "--compare", "pair_rows", "--model", tiny_checkpoint)
    assert "racer no-pair" in capsys.readouterr().out


def test_grammar_engines(tiny_checkpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    """On the tiny tokenizer; an engine that is not installed is skipped by the script itself."""
    pytest.importorskip("llguidance")
    run("grammar_engines.py", "--model", tiny_checkpoint, "--rounds", "1", "--replies", "8")
    out = capsys.readouterr().out
    assert "llguidance tool_call" in out and "FAILS" not in out and "racer_core.structured" in out
    assert "tool_call   racer/ar" in out


def test_reply_memory_and_bit_exact_check(tiny_checkpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    run("reply_memory.py", "--tokens", "4")
    run("bit_exact_check.py", "--model", tiny_checkpoint, "--context", "8")
    out = capsys.readouterr().out
    assert "after a 4-token racer reply" in out and "bit for bit" in out


def test_draft_replay_record_and_replay_then_prob_replay(tiny_checkpoint: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # record reads its top-k from transformers' model, which the embedded GGUF is dequantized into first (slow):
    # the tiny checkpoint instead.
    traces = tmp_path / "traces.json"
    run("draft_replay.py", "record", "--begin", "14", "--end", "15", "--max-new-tokens", "8", "--out", str(traces),
        "--model", tiny_checkpoint)
    run("draft_replay.py", "replay", str(traces), "--budgets", "4,0")
    run("prob_replay.py", str(traces), "--cost", "1:30,8:33,64:80", "--variants", "rank,oracle")
    out = capsys.readouterr().out
    assert "oracle" in out


def test_dtype_e2e(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run("dtype_e2e.py", *SHORT, "--setups", "auto:auto", "--answer-dir", str(tmp_path))
    assert "tokens/s against auto-auto" in capsys.readouterr().out


def test_structured_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run("structured_targets.py", "--question-end", "1", "--max-new-tokens", "4", "--answer-dir", str(tmp_path))
    out = capsys.readouterr().out
    assert "constrained replies" in out and "speedup: racer" in out and "validity: ar" in out


def test_structured_targets_refuses_in_one_line_without_llguidance(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from racer_core.common import grammar_engine as library

    monkeypatch.setattr(library, "available", lambda: False)
    assert _main("structured_targets.py")(["--question-end", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "[structured]" in err


def test_busy_machine(capsys: pytest.CaptureFixture[str]) -> None:
    run("busy_machine.py", "--methods", "ar", "--tokens", "2", "--repeats", "1", "--busy", "1")
    assert "busy/quiet" in capsys.readouterr().out


def test_accept_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def answers(method: str, accepts: list[int]) -> None:
        record = {"question_id": 1, "category": "writing",
                  "choices": [{"token_ids": [[5, 6, 7, 8, 9]], "accept_lengths": [accepts], "decoding_steps": [len(accepts)]}]}
        (tmp_path / f"{method}.jsonl").write_text(json.dumps(record) + "\n")

    answers("racer", [3, 1])  # tokens 6, 7 drafted
    answers("ar", [1, 1, 1, 1])
    run("accept_compare.py", str(tmp_path), "racer", "ar")
    assert "writing" in capsys.readouterr().out


def test_gpu_check_on_the_cpu(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # No GPU in CI: the script runs on the CPU (its own smoke mode), and its random model of SmolLM2's shape
    # (135M parameters, seconds to make) is a tiny one with SmolLM2's vocabulary, which its prompts draw from.
    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model

    def random_engine(device: str, dtype: str, forward: str = "auto") -> RacerEngine:
        return RacerEngine(tiny_model("llama", 0, vocab_size=49152), None, "tiny", eos_ids=frozenset(), forward=forward)

    monkeypatch.setattr(importlib.import_module("scripts.gpu_check"), "random_engine", random_engine)
    run("gpu_check.py", "--device", "cpu", "--random-model", "--dtype", "float32", "--sizes", "1,2",
        "--context", "4", "--max-new-tokens", "4")
    assert "time outside forward passes" in capsys.readouterr().out


@contextlib.contextmanager
def api_server() -> Iterator[str]:
    """`racer-tui api`'s service on the tiny model, on a free loopback port; its base URL."""
    pytest.importorskip("openai")
    from engine_helpers import make_markov

    from racer_core.budget.cost_curve import CostCurve
    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model, tiny_tokenizer
    from racer_tui.api.server import ServerSettings
    from racer_tui.api.service import ApiService

    engine = RacerEngine(make_markov(tiny_model("qwen3", 0)), tiny_tokenizer(), "tiny-qwen3")
    engine._curve = CostCurve([1, 64], [1.0, 1.5])  # scripted
    service = ApiService(engine, ServerSettings(), "127.0.0.1", 0, 8, None, None)
    service.start()
    try:
        yield service.url
    finally:
        service.stop()


def test_api_load_and_api_soak_against_a_tiny_server(capsys: pytest.CaptureFixture[str]) -> None:
    # Their own servers (`racer-tui api` in a process of its own) are left out: --url takes this one.
    with api_server() as url:
        run("api_load.py", "--url", url, "--clients", "1", "--requests", "1", "--max-tokens", "4")
        run("api_load.py", "--url", url, "--clients", "2", "--requests", "1", "--each", "2", "--max-tokens", "2")
        run("api_soak.py", "--url", url, "--requests", "4", "--clients", "2", "--max-tokens", "4")
    out = capsys.readouterr().out
    assert "racer/ar given" in out and '"passed": true' in out
    assert "2 clients x 1 rounds of 2 back to back" in out
    assert out.split("2 clients x")[1].split("failed")[1].split()[:2] == ["0", "0"]  # 4 requests a method, none failed


def test_api_loads_own_servers_keep_their_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its two servers take turns: each would otherwise count the other's last round as another process's load.
    api_load = importlib.import_module("scripts.api_load")
    envs: list[dict[str, str]] = []

    class Server:
        def __init__(self) -> None:
            self.stdout = iter(["racer-tui api: serving tiny on http://127.0.0.1:1/v1 as model 'tiny'\n"])

    def popen(words: list[str], **options: Any) -> Server:
        envs.append(options["env"])
        return Server()

    monkeypatch.setattr(api_load.subprocess, "Popen", popen)
    monkeypatch.delenv("RACER_FOLLOW_FREE_CORES", raising=False)
    args = api_load.argparse.Namespace(clients=[1], device="cpu", dtype="auto", max_batch=None, model=None)
    assert api_load.start_server(args, "sequential")[1] == "http://127.0.0.1:1/v1"
    api_load.launch_api([], None)  # another caller (api_soak.py): the count follows the machine, as a user's does
    assert envs[0]["RACER_FOLLOW_FREE_CORES"] == "0" and "RACER_FOLLOW_FREE_CORES" not in envs[1]


def test_api_profile_splits_a_loaded_servers_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    # The embedded model served in this process, api_load.py's clients in a process of their own.
    pytest.importorskip("openai")
    from racer_core.engine.loop import EngineLoop

    passes = EngineLoop._pass
    run("api_profile.py", "--clients", "1", "--requests", "1", "--max-tokens", "4", "--cprofile", "--top", "3")
    out = capsys.readouterr().out
    assert "% of the cores" in out and "the server's own" in out and "engine loop: CPU by function" in out
    assert EngineLoop._pass is passes  # its timers are taken off again


class FakeLlama:
    """llama_cpp.Llama as the llama.cpp scripts use it, answering without a model."""

    def __init__(self, model_path: str, **options: object) -> None:
        self.n_tokens = 0

    def eval(self, ids: list[int]) -> None:
        self.n_tokens += len(ids)

    def reset(self) -> None:
        self.n_tokens = 0

    def generate(self, prompt: list[int], **options: object) -> Iterator[int]:
        while True:
            yield 42


def test_llama_cpp_scripts_with_a_stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    # llama-cpp-python is no dependency (built from source for a CPU class): a fake module stands in for it.
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    threads = str(torch.get_num_threads())
    run("llama_cpp_step_cost.py", "--sizes", "1,2", "--context", "4", "--rounds", "1", "--threads", threads)
    (tmp_path / "other.gguf").write_bytes(b"GGUF")  # the fake reads nothing
    run("llama_cpp_step_cost.py", "--model", str(tmp_path / "other.gguf"), "--prefill", "8", "--rounds", "1",
        "--threads", threads, "--clock", "cpu")
    run("llama_cpp_anchor.py", *SHORT, "--setups", "q4", "--methods", "ar", "--threads", threads)
    out = capsys.readouterr().out
    assert "fastest / median ms" in out and "vs llama.cpp" in out
    assert "other.gguf" in out and "prefill of 8 tokens into a cleared cache" in out and "cpu ms" in out
    with pytest.raises(SystemExit, match="no such GGUF file"):
        _main("llama_cpp_step_cost.py")(["--model", str(tmp_path / "missing.gguf")])


def test_llama_cpp_scripts_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails
    for name in ("llama_cpp_step_cost.py", "llama_cpp_anchor.py"):
        with pytest.raises(SystemExit, match="llama-cpp-python is not installed"):
            _main(name)([])


def test_first_start_with_a_stand_in_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # A real start is a fresh Python with Textual and torch (7-20 s on 2 cores): the child is answered here,
    # with the environment it was given checked: the installed model's folder, not the temporary data folder.
    monkeypatch.delenv("RACER_TUI_MODELS_DIR", raising=False)
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "data"))
    envs: list[dict[str, str]] = []

    def child(argv: list[str], env: dict[str, str], **options: object) -> subprocess.CompletedProcess[str]:
        envs.append(env)
        marks = {"ui imports": 1.0, "ready": 2.0, "cpu": 1.5}
        return subprocess.CompletedProcess(argv, 0, json.dumps(marks) + "\n", "")

    monkeypatch.setattr(subprocess, "run", child)
    run("first_start.py", "--later", "1")
    assert "later starts, ready: min 2.0 s" in capsys.readouterr().out
    assert [e["RACER_TUI_MODELS_DIR"] for e in envs] == [str(tmp_path / "data" / "models")] * 2
    assert all(e["RACER_TUI_DATA_DIR"] != str(tmp_path / "data") for e in envs)


def test_first_start_asks_its_child_for_cpu_marks(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []

    def child(argv: list[str], **options: object) -> subprocess.CompletedProcess[str]:
        asked.append(argv[-1])
        return subprocess.CompletedProcess(argv, 0, json.dumps({"ui imports": 0.35, "ready": 2.8, "cpu": 2.8}), "")

    monkeypatch.setattr(subprocess, "run", child)
    run("first_start.py", "--later", "1", "--cpu-marks")
    assert asked == ["cpu", "cpu"] and "ui imports 0.35" in capsys.readouterr().out
    run("first_start.py", "--later", "0")
    assert asked[-1] == "wall"

def test_first_start_says_when_the_app_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", lambda argv, **options: subprocess.CompletedProcess(
        argv, 0, json.dumps({"ui imports": 1.0, "failed": "no model installed"}), ""))
    with pytest.raises(SystemExit, match="the app did not start: no model installed"):
        _main("first_start.py")(["--later", "0"])


def test_tui_speed_and_screenshots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run("tui_speed.py", "--rounds", "1", "--max-new-tokens", "4")
    run("screenshots.py", "--out", str(tmp_path), "--only", "01-loading", "--max-new-tokens", "4")
    out = capsys.readouterr().out
    assert "vs alone" in out and "1 screenshots written" in out


def test_sanitize_sh_is_run_by_ci() -> None:
    # It builds the automaton with sanitizers (minutes): .ci/run runs it after the tests; here its syntax.
    assert "bash scripts/sanitize.sh" in (ROOT / ".ci" / "run").read_text()
    subprocess.run(["bash", "-n", str(SCRIPTS / "sanitize.sh")], check=True)


def test_kernel_floor_prints_each_step_beside_its_floor(capsys: pytest.CaptureFixture[str]) -> None:
    run("kernel_floor.py", "--threads", "1", "--sizes", "1,2", "--context", "8", "--rounds", "1")
    out = capsys.readouterr().out
    assert "GB/s" in out and "GMAC/s" in out and "step/floor" in out
    assert "the dot instruction alone" in out and "step/mix floor" in out


def test_loop_load_compares_methods_on_the_engine_loop_and_times_its_passes(
        capsys: pytest.CaptureFixture[str]) -> None:
    run("loop_load.py", "--clients", "2", "--rounds", "2", "--max-tokens", "4", "--prompts", "repeat", "--each", "2")
    out = capsys.readouterr().out
    assert "/ar" in out and "outside the passes" in out and "racer passes (sequences x extra rows" in out
    assert "while every client sends" in out
    with pytest.raises(SystemExit, match="--clients"):
        _main("loop_load.py")(["--clients", "0"])
    with pytest.raises(SystemExit, match="method"):
        _main("loop_load.py")(["--methods", "nope", "--rounds", "1", "--max-tokens", "1"])
    with pytest.raises(SystemExit, match="leave no prompt"):
        _main("loop_load.py")(["--question-begin", "50", "--rounds", "1"])


def test_batch_cost_prints_batches_beside_trees_the_ceiling_and_a_tree_in_a_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    run("batch_cost.py", "--threads", "1", "--sizes", "2,3", "--context", "8", "--rounds", "1")
    out = capsys.readouterr().out
    assert "batch/tree" in out and out.rstrip().splitlines()[-1].startswith("3 ")
    run("batch_cost.py", "--threads", "1", "--ceiling", "2", "--rounds", "1")
    assert "ceiling" in capsys.readouterr().out
    run("batch_cost.py", "--threads", "1", "--mixed", "3", "--sizes", "1,2", "--context", "8", "--rounds", "1")
    out = capsys.readouterr().out
    assert "curve's added ms" in out and out.rstrip().splitlines()[-1].startswith("2 ")
    with pytest.raises(SystemExit, match="--sizes"):
        _main("batch_cost.py")(["--sizes", "0"])
