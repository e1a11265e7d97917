"""Math scoring: boxed extraction, answer agreement, accuracy and pass@k/mean@k."""

from __future__ import annotations

import json

import pytest

from racer_core.bench.answers import AnswerRecord, AnswerWriter, Choice
from racer_core.bench.score import answers_agree, extract_boxed, is_correct, score_answers
from racer_tui.cli import main


def test_extract_last_boxed_with_nested_braces():
    assert extract_boxed("first \\boxed{1} then \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed {42}") == "42"
    assert extract_boxed("no answer here") is None
    assert extract_boxed("cut off \\boxed{\\frac{1}{2") is None


@pytest.mark.parametrize(
    ("pred", "ref", "same"),
    [
        ("$1,000", "1000", True),
        ("18.0", "18", True),
        ("\\text{5 apples}", "5apples", True),
        ("70 000", "70000", True),
        ("7.", "7", True),
        ("\\frac{1}{2}", "0.5", True),  # symbolic, through math-verify
        ("\\dfrac{3}{4}", "0.75", True),
        ("x^2+1", "1+x^2", True),
        ("17", "18", False),
        ("\\frac{1}{3}", "0.5", False),
    ],
)
def test_answers_agree(pred, ref, same):
    assert answers_agree(pred, ref) is same


def _record(qid, replies, reference=None):
    choices = tuple(Choice(i, (text,), (5,), (0.1,), (2, 2)) for i, text in enumerate(replies))
    return AnswerRecord(qid, "reasoning", "m", "racer", choices, reference=reference)


def test_accuracy_matches_a_hand_worked_example():
    # q1 right, q2 right only symbolically, q3 right after removing $ and commas, q4 has no box
    records = {
        "1": _record(1, ["16 - 3 - 4 = 9 eggs, 9 * 2 = \\boxed{18}"]),
        "2": _record(2, ["half: \\boxed{0.5}"]),
        "3": _record(3, ["\\boxed{$1,000}"]),
        "4": _record(4, ["the answer is 7"]),
        "9": _record(9, ["\\boxed{3}"]),  # no reference: not scored
    }
    refs = {"1": ("18",), "2": ("\\frac{1}{2}",), "3": ("1000",), "4": ("7",)}
    score = score_answers(records, refs)
    assert (score.questions, score.correct, score.k, score.boxed_missing) == (4, 3, 1, 1)
    assert score.summary() == "accuracy 3/4 = 75.00% (no boxed answer in 1 reply)"


def test_three_choices_give_pass_mean_and_std():
    records = {
        "1": _record(1, ["\\boxed{18}", "\\boxed{17}", "\\boxed{18}"]),
        "2": _record(2, ["\\boxed{1}", "\\boxed{2}", "no box"]),
    }
    score = score_answers(records, {"1": ("18",), "2": ("5",)})
    # per-choice accuracies 1/2, 0, 1/2: mean 1/3, population std sqrt(1/18)
    assert score.k == 3 and score.correct == 1
    assert score.pass_at_k == pytest.approx(0.5)
    assert score.mean_at_k == pytest.approx(1 / 3)
    assert score.std_at_k == pytest.approx((1 / 18) ** 0.5)
    assert score.boxed_missing == 1
    assert score.summary() == "pass@3 1/2 = 50.00%, mean@3 33.33% ± 23.57% (no boxed answer in 1 reply)"


def test_unanswered_question_counts_wrong():
    score = score_answers({"1": _record(1, ["\\boxed{2}"])}, {"1": ("2",), "2": ("3",)})
    assert (score.questions, score.correct, score.unanswered) == (2, 1, 1)


def test_any_listed_reference_counts():
    assert is_correct("\\boxed{B}", ("A", "B")) is True
    assert is_correct("nothing boxed", ("A",)) is None


def test_score_command_reads_references_from_answers_or_questions(tmp_path, capsys):
    answers = tmp_path / "racer.jsonl"
    with AnswerWriter(answers, append=False) as w:
        w.write(_record(1, ["\\boxed{18}", "\\boxed{17}", "\\boxed{18}"], reference=("18",)))
        w.write(_record(2, ["\\boxed{1}", "\\boxed{2}", "no box"], reference=("5",)))
    assert main(["score", str(answers)]) == 0
    assert capsys.readouterr().out.strip() == "pass@3 1/2 = 50.00%, mean@3 33.33% ± 23.57% (no boxed answer in 1 reply)"

    questions = tmp_path / "question.jsonl"
    rows = [{"question_id": 1, "category": "reasoning", "turns": ["q"], "reference": "17"}]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_json = tmp_path / "score.json"
    assert main(["score", str(answers), "--questions", str(questions), "--json", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())[str(answers)]
    assert doc["questions"] == 1 and doc["correct"] == 1 and doc["mean_at_k"] == pytest.approx(1 / 3, abs=1e-6)


def test_score_command_bad_input_is_one_line(tmp_path, capsys):
    missing = tmp_path / "none.jsonl"
    assert main(["score", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read answer file" in err
    plain = tmp_path / "plain.jsonl"
    with AnswerWriter(plain, append=False) as w:
        w.write(_record(1, ["\\boxed{1}"]))
    assert main(["score", str(plain)]) == 1
    assert "no references" in capsys.readouterr().err
    assert main(["score", str(plain), "--bench-name", "gsm8k", "--data-root", str(tmp_path / "nope")]) == 1
    assert "no data folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["score", str(plain), "--bench-name", "gsm9k"])
    assert exc.value.code == 2


def test_results_tables_show_accuracy_beside_speed_when_answers_carry_references():
    """Headless and on the dashboard (the same table): a speed-up that changed answers shows."""
    from rich.console import Console

    from racer_core.bench.report import bench_tables
    from racer_core.bench.results import BenchResult
    from racer_tui.widgets.bench_tables import speedup_table

    result = BenchResult(methods=["ar", "racer"])
    for method, replies in (("ar", ["\\boxed{18}", "\\boxed{0.5}"]), ("racer", ["\\boxed{18}", "\\boxed{7}"])):
        for qid, text in enumerate(replies, 1):
            rec = _record(qid, [text], reference=["18"] if qid == 1 else ["\\frac{1}{2}"])
            result.add(method, AnswerRecord(rec.question_id, rec.category, "m", method, rec.choices, reference=rec.reference))

    def text(table) -> str:
        console = Console(width=200, record=True)
        console.print(table)
        return console.export_text()

    shown = text(bench_tables(result)[-1])
    assert "accuracy" in shown
    rows = {line.split("│")[1].strip(): line for line in shown.splitlines() if line.startswith("│")}
    assert rows["ar"].rstrip(" │").endswith("100.0%") and rows["racer"].rstrip(" │").endswith("50.0%")
    assert "accuracy" in text(speedup_table(result))
    assert all("accuracy" not in text(t) for t in bench_tables(result)[:-1])  # per category: speed only
    plain = BenchResult(methods=["ar"])
    plain.add("ar", _record(1, ["\\boxed{1}"]))
    assert "accuracy" not in text(bench_tables(plain)[-1])


def test_score_needs_only_question_id_and_turns(tmp_path, capsys):
    """The original's scorer reads `question_id` and `choices[].turns`; a line with nothing else scores."""
    path = tmp_path / "bare.jsonl"
    rows = [{"question_id": 1, "choices": [{"turns": ["so \\boxed{5}"]}]},
            {"question_id": 2, "choices": [{"turns": ["\\boxed{7}"]}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question_id": i, "category": "math", "turns": ["q"], "reference": r}) + "\n"
                                 for i, r in ((1, "5"), (2, "6"))))
    assert main(["score", str(path), "--questions", str(questions)]) == 0, capsys.readouterr().err
    assert "accuracy 1/2 = 50.00%" in capsys.readouterr().out
