"""The runner, on the scripted engine: order, fresh/warm automata, resume, stop."""

from __future__ import annotations

import itertools

import pytest
from fake_engine import FakeEngine

from racer_core.bench import runner
from racer_core.bench.answers import answer_path, read_answers
from racer_core.bench.runner import WARMUP_PROMPT, BenchProgress, check_repeats, load_results, run_benchmark
from racer_core.bench.suites import Question
from racer_core.common.errors import InputError
from racer_core.common.events import EngineInfo, GenerationConfig, StepEvent

QUESTIONS = [
    Question(1, "qa", ("What is a fox?",)),
    Question(2, "multi_turn", ("Write a poem.", "Make it shorter.")),
    Question("c3", "code", ("def add(a, b):",)),
]
GREEDY = GenerationConfig(max_new_tokens=64)


def test_methods_interleave_per_question_after_one_warmup_each():
    engine = FakeEngine()
    run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY)
    assert engine.calls == [
        ("ar", WARMUP_PROMPT),
        ("racer", WARMUP_PROMPT),
        ("ar", "What is a fox?"),
        ("racer", "What is a fox?"),
        ("ar", "Write a poem."),
        ("ar", "Make it shorter."),
        ("racer", "Write a poem."),
        ("racer", "Make it shorter."),
        ("ar", "def add(a, b):"),
        ("racer", "def add(a, b):"),
    ]


def test_fresh_conversation_per_question_by_default():
    engine = FakeEngine()
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY)
    assert all(c.warm_from is None for c in engine.conversations)
    # warm-up conversations (2) plus one per question and method
    assert len(engine.conversations) == 2 + 2 * len(QUESTIONS)
    assert result.warm is False


def test_warm_keeps_each_methods_automaton_across_questions():
    engine = FakeEngine()
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY, warm=True)
    convs = engine.conversations[2:]  # after the warm-ups
    per_method = {"ar": convs[0::2], "racer": convs[1::2]}
    for chain in per_method.values():
        assert chain[0].warm_from is None  # not seeded by the warm-up
        for prev, conv in zip(chain, chain[1:], strict=False):
            assert conv.warm_from is prev
    assert result.warm is True


def test_multi_turn_answers_turn_by_turn_in_one_conversation():
    engine = FakeEngine()
    result = run_benchmark(engine, QUESTIONS, ["racer"], GREEDY)
    rec = result.records["racer"]["2"]
    assert len(rec.turns) == 2 and len(rec.new_tokens) == 2 and len(rec.wall_time) == 2
    conv = engine.conversations[1 + 1]  # warm-up, question 1, then question 2
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "user", "assistant"]
    # each turn's first event is the prefill (one token): timed, not a step
    assert rec.tokens - sum(rec.accept_lengths) == 2 * 1
    assert sum(rec.choices[0].decoding_steps) == len(rec.accept_lengths)
    assert [len(t) for t in rec.token_ids] == list(rec.new_tokens)


def test_totals_mat_and_equality_with_ar():
    engine = FakeEngine(diverge=frozenset({"logits"}))
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer", "logits", "pld"], GREEDY)
    totals = result.method_totals()
    assert totals["ar"].stats.mat == 1.0
    racer = result.records["racer"].values()
    # verification steps only: the prefill token of each turn is in tokens, not in MAT
    assert totals["racer"].stats.mat == pytest.approx(sum(sum(r.accept_lengths) for r in racer) / totals["racer"].stats.steps)
    assert totals["racer"].stats.mat < totals["racer"].stats.tokens / totals["racer"].stats.steps
    assert totals["racer"].stats.mat > 1.0
    assert totals["pld"].stats.mat is None  # one event per reply: MAT means nothing
    assert totals["ar"].versus.identical is None  # the ar row has nothing to compare with
    assert totals["racer"].versus.identical is True and totals["pld"].versus.identical is True
    assert totals["logits"].versus.identical is False
    assert totals["logits"].versus.identical_questions == 0 and totals["logits"].versus.compared_questions == 3


def test_sampling_reports_no_equality_and_no_ar_means_no_speedup():
    engine = FakeEngine()
    sampled = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GenerationConfig(temperature=0.7))
    assert sampled.greedy is False
    assert sampled.method_totals()["racer"].versus.identical is None
    no_ar = run_benchmark(engine, QUESTIONS, ["racer"], GREEDY)
    assert no_ar.method_totals()["racer"].versus.speedup is None
    summary = no_ar.to_summary()
    assert summary["methods"]["racer"]["speedup_vs_ar"] is None
    assert summary["methods"]["racer"]["identical_to_ar"] is None


def test_wall_time_excludes_progress_callbacks(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(runner, "_clock", lambda: clock[0])

    def step(method: str) -> None:
        clock[0] += 1.0  # each engine step costs one second

    def slow_display(p: BenchProgress) -> None:
        clock[0] += 100.0  # a slow front end must not count

    engine = FakeEngine(step_hook=step)
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY, on_progress=slow_display)
    for method in ("ar", "racer"):
        for rec in result.records[method].values():
            # one second per event: the verification steps plus each turn's prefill
            assert rec.seconds == pytest.approx(len(rec.accept_lengths) + len(rec.turns))
    # racer takes fewer events for the same tokens: the speedup is the ratio of event counts here
    totals = result.method_totals()
    events = {m: sum(len(r.accept_lengths) + len(r.turns) for r in result.records[m].values()) for m in ("ar", "racer")}
    assert totals["racer"].versus.speedup == pytest.approx(events["ar"] / events["racer"])


def test_progress_reports_start_steps_and_end():
    seen: list[BenchProgress] = []
    engine = FakeEngine()
    run_benchmark(engine, QUESTIONS[:1], ["ar"], GREEDY, on_progress=seen.append)
    assert seen[0].event is None and not seen[0].question_done
    assert seen[-1].question_done and seen[-1].record is not None
    steps = [p for p in seen if p.event is not None]
    assert steps[-1].event.finished
    assert sum(p.event.accept_length for p in steps) == seen[-1].record.tokens
    assert {(p.question_index, p.question_count, p.question_id, p.category) for p in seen} == {(0, 1, 1, "qa")}


def test_answer_files_and_load_results_agree(tmp_path):
    engine = FakeEngine()
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY, answer_dir=tmp_path)
    for m in ("ar", "racer"):
        assert [r.question_id for r in read_answers(answer_path(tmp_path, m))] == [1, 2, "c3"]
    loaded = load_results(tmp_path)
    assert loaded.greedy is True and loaded.model == "fake-model" and loaded.device == "cpu"
    assert loaded.warm is False
    for m in ("ar", "racer"):
        a, b = result.method_totals()[m], loaded.method_totals()[m]
        assert (a.stats.tokens, a.stats.steps, a.stats.mat, a.versus.identical) == (b.stats.tokens, b.stats.steps, b.stats.mat, b.versus.identical)
        assert a.stats.seconds == pytest.approx(b.stats.seconds)
    assert loaded.categories() == ["qa", "multi_turn", "code"]


def test_resume_skips_answered_questions_per_method(tmp_path):
    run_benchmark(FakeEngine(), QUESTIONS[:2], ["ar", "racer"], GREEDY, answer_dir=tmp_path)
    engine = FakeEngine()
    seen: list[BenchProgress] = []
    result = run_benchmark(
        engine,
        QUESTIONS,
        ["ar", "racer", "logits"],
        GREEDY,
        answer_dir=tmp_path,
        resume=True,
        on_progress=seen.append,
        warmup=False,
    )
    asked = [(m, text) for m, text in engine.calls]
    assert ("ar", "What is a fox?") not in asked and ("racer", "def add(a, b):") in asked
    assert ("logits", "What is a fox?") in asked  # logits had no file yet
    assert result.completed and all(len(result.records[m]) == 3 for m in result.methods)
    assert len(read_answers(answer_path(tmp_path, "ar"))) == 3
    skipped = [p for p in seen if p.method == "ar" and p.question_index < 2]
    assert all(p.question_done and p.record is not None for p in skipped)


def test_resume_refuses_answers_made_with_other_settings(tmp_path):
    run_benchmark(FakeEngine(), QUESTIONS[:1], ["ar"], GREEDY, answer_dir=tmp_path)
    before = answer_path(tmp_path, "ar").read_bytes()
    other = GenerationConfig(max_new_tokens=32)
    with pytest.raises(InputError, match="max_new_tokens 64, now 32"):
        run_benchmark(FakeEngine(), QUESTIONS, ["ar"], other, answer_dir=tmp_path, resume=True)
    assert answer_path(tmp_path, "ar").read_bytes() == before
    renamed = FakeEngine(info=EngineInfo("other-model", "cpu", "float32"))
    with pytest.raises(InputError, match="model 'fake-model'"):
        run_benchmark(renamed, QUESTIONS, ["ar"], GREEDY, answer_dir=tmp_path, resume=True)


def test_should_stop_drops_the_question_in_flight(tmp_path):
    engine = FakeEngine()

    # calls: q1 ar, q1 racer, q2 ar (two turns), then q2 racer's first turn: stop there
    def stop() -> bool:
        return len(engine.calls) == 5

    result = run_benchmark(
        engine,
        QUESTIONS,
        ["ar", "racer"],
        GREEDY,
        answer_dir=tmp_path,
        should_stop=stop,
        warmup=False,
    )
    assert not result.completed
    # q1 by both, q2 by ar; racer's q2 was cut in flight and is not kept
    assert [r.question_id for r in read_answers(answer_path(tmp_path, "ar"))] == [1, 2]
    assert [r.question_id for r in read_answers(answer_path(tmp_path, "racer"))] == [1]
    assert list(result.records["racer"]) == ["1"]


def test_unknown_method_and_engine_without_final_event():
    with pytest.raises(InputError, match="unknown method"):
        run_benchmark(FakeEngine(), QUESTIONS, ["nope"], GREEDY)

    class Unfinished(FakeEngine):
        def new_conversation(self, system_prompt=None, warm_from=None, learn=False):
            conv = super().new_conversation(system_prompt, warm_from, learn)

            def send(user_text, config, should_stop=None, images=(), prefill=""):
                yield StepEvent(1, (), 1, 1, 0.0, 0.0, 0.0, finished=False)

            conv.send = send
            return conv

    # an engine fault on a question is that question's failure: recorded, and the run goes on
    result = run_benchmark(Unfinished(), QUESTIONS, ["ar"], GREEDY, warmup=False)
    assert result.completed and not result.records["ar"]
    assert result.failed("ar") == len(QUESTIONS)
    assert all("without a final event" in r.error for r in result.failures["ar"].values())


def test_repeats_interleave_tries_and_keep_the_median_one(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(runner, "_clock", lambda: clock[0])
    # seconds per step of each send: question 1's three tries, then 1.0 for question 2
    cost = {m: itertools.chain(c, itertools.repeat(1.0)) for m, c in (("ar", [3.0, 1.0, 2.0]), ("racer", [1.0, 5.0, 2.0]))}
    per_call = {}

    def step(method: str) -> None:
        clock[0] += per_call[method]

    engine = FakeEngine(step_hook=step)
    real_send = engine.new_conversation

    def new_conversation(system_prompt=None, warm_from=None, learn=False):
        conv = real_send(system_prompt, warm_from, learn)
        send = conv.send

        def timed_send(text, config, should_stop=None, images=(), prefill=""):
            per_call[config.method] = next(cost[config.method])  # seconds per step of this try
            yield from send(text, config, should_stop, images, prefill)

        conv.send = timed_send
        return conv

    engine.new_conversation = new_conversation
    result = run_benchmark(engine, QUESTIONS[:2], ["ar", "racer"], GREEDY, repeats=3, warmup=False)
    q1 = [("ar", "What is a fox?"), ("racer", "What is a fox?")]
    assert engine.calls[:6] == q1 * 3  # each round asks every method once
    # question 1: ar's tries cost 3, 1, 2 per step -> the 2 one is kept; racer's 1, 5, 2 -> 2
    events = {m: len(result.records[m]["1"].accept_lengths) + 1 for m in ("ar", "racer")}
    assert result.records["ar"]["1"].seconds == pytest.approx(2.0 * events["ar"])
    assert result.records["racer"]["1"].seconds == pytest.approx(2.0 * events["racer"])
    speeds = result.repeat_speeds["racer"]["1"]
    assert len(speeds) == 3 and max(speeds) / min(speeds) == pytest.approx(5.0)
    assert result.repeats == 3 and len(result.records["ar"]) == 2
    # the speedup of question 1 moved from 3x to 0.2x between tries: a warning says so
    key, noise = result.repeat_noise("racer")
    assert key == "1" and noise == pytest.approx(15.0)
    assert any("changed 15.00x between tries" in w for w in result.warnings())
    versus = result.totals("racer").versus
    # both questions ran at the same per-step cost in their kept tries: one speedup, no spread
    assert versus.low == pytest.approx(versus.speedup) and versus.high == pytest.approx(versus.speedup)


def test_repeats_are_part_of_the_settings_and_must_be_positive(tmp_path):
    run_benchmark(FakeEngine(), QUESTIONS[:1], ["ar"], GREEDY, answer_dir=tmp_path, repeats=2, warmup=False)
    assert read_answers(answer_path(tmp_path, "ar"))[0].config["repeats"] == 2
    assert load_results(tmp_path).repeats == 2  # an opened run's warnings know it was repeated
    with pytest.raises(InputError, match="repeats 2, now None"):
        run_benchmark(FakeEngine(), QUESTIONS, ["ar"], GREEDY, answer_dir=tmp_path, resume=True)
    with pytest.raises(InputError, match="repeats must be at least 1"):
        run_benchmark(FakeEngine(), QUESTIONS, ["ar"], GREEDY, repeats=0)


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "at least 1, not 0"), ("-2", "at least 1, not -2"), ("", "whole number, at least 1, not ''"),
     ("two", "whole number, at least 1, not 'two'"), ("1.5", "not '1.5'")],
)
def test_the_repeats_rule_reads_text_for_the_command_line_and_the_dashboard(text, message):
    assert check_repeats(" 3 ") == 3 and check_repeats(1) == 1
    with pytest.raises(InputError, match=message):
        check_repeats(text)


def test_progress_says_which_try_is_running():
    seen: list[BenchProgress] = []
    run_benchmark(FakeEngine(), QUESTIONS[:2], ["ar"], GREEDY, repeats=3, warmup=False, on_progress=seen.append)
    starts = [(p.question_index, p.repeat, p.repeats) for p in seen if p.event is None and not p.question_done]
    # question 2 has two turns in one conversation: one start per try
    assert starts == [(0, 0, 3), (0, 1, 3), (0, 2, 3), (1, 0, 3), (1, 1, 3), (1, 2, 3)]
    ends = [(p.question_index, p.repeat) for p in seen if p.question_done]
    assert ends == [(0, 2), (1, 2)]  # one end per question, after its last try


def test_warm_repeats_go_on_from_the_previous_questions_kept_try():
    engine = FakeEngine()
    run_benchmark(engine, QUESTIONS[:2], ["racer"], GREEDY, warm=True, repeats=2, warmup=False)
    first_tries, second_tries = engine.conversations[:2], engine.conversations[2:]
    assert all(c.warm_from is None for c in first_tries)  # every try of question 1 starts cold
    assert all(c.warm_from is second_tries[0].warm_from for c in second_tries)
    assert second_tries[0].warm_from in first_tries


def test_a_failed_turn_keeps_the_choices_before_it_and_ends_that_question_only():
    """Question 2 fails in its second turn for racer: the record keeps the finished
    choice, stops trying that question (no more repeats), and a warm racer goes on
    from its last good conversation; ar and the other questions are untouched."""
    engine = FakeEngine()

    def boom(method: str) -> None:
        # the first try's second choice, in its second turn
        if method == "racer" and engine.calls[-1] == ("racer", "Make it shorter.") and \
                engine.calls.count(("racer", "Make it shorter.")) == 2:
            raise MemoryError("out of memory")

    engine.step_hook = boom
    progress: list[BenchProgress] = []
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY, warm=True, warmup=False, repeats=2,
                           num_choices=2, on_progress=progress.append)
    assert result.completed and set(result.records["ar"]) == {"1", "2", "c3"}
    assert set(result.records["racer"]) == {"1", "c3"} and set(result.failures["racer"]) == {"2"}
    failed = result.failures["racer"]["2"]
    assert failed.error == "MemoryError: out of memory"
    assert len(failed.choices) == 1 and len(failed.choices[0].turns) == 2  # choice 0 finished, choice 1 did not
    racer_q2 = [c for c in engine.calls if c[0] == "racer" and c[1] == "Write a poem."]
    assert len(racer_q2) == 2  # the failed try's two choices; no second try
    done = [p for p in progress if p.question_done and p.method == "racer"]
    assert [p.record.error is not None for p in done] == [False, True, False]
    c3 = [conv for conv in engine.conversations if conv.messages and conv.messages[0]["content"] == "def add(a, b):"]
    assert all(conv.warm_from is not None and conv.warm_from.messages[-1]["role"] == "assistant" for conv in c3)
    assert result.failed("racer") == 1 and result.failed("racer", "multi_turn") == 1 and result.failed("ar") == 0
    assert "racer" not in result.repeat_speeds or "2" not in result.repeat_speeds["racer"]
