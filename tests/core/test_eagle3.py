"""eagle3: an EAGLE-3 draft head read from either checkpoint format, the
target's auxiliary hidden states, and the dynamic draft tree verified like
racer's: greedy output equals plain greedy token for token, with drafts accepted."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch
from engine_helpers import PROMPT, run
from safetensors.torch import save_file

from racer_core.common.errors import InputError, ModelLoadError
from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.engine import RacerEngine
from racer_core.models.eagle3_head import head_from_tensors
from racer_core.models.lean_forward import lean_forward_for
from racer_core.testing import tiny_config
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

VOCAB = 64
LAYERS = 8  # the head's default layers are then 2, 4 and 5
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 64, 4, 2, 16, 128


@cache
def target() -> torch.nn.Module:
    """A tiny Llama whose next token depends mostly on the current one (cycles a head can learn)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = tiny_config("llama", VOCAB)
    config.num_hidden_layers, config.initializer_range = LAYERS, 0.2
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("o_proj.weight"):
                param.mul_(0.05)
    return model


def eagle_config(draft_vocab: int, vocab: int = VOCAB) -> dict:
    """config.json of an EAGLE authors' head (LlamaForCausalLMEagle3)."""
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": vocab,
            "draft_vocab_size": draft_vocab, "max_position_embeddings": 2048, "hidden_act": "silu"}


def speculators_config(draft_vocab: int, aux: list[int]) -> dict:
    """config.json of vLLM's speculators format for the same head."""
    layer = {k: v for k, v in eagle_config(draft_vocab).items() if k not in ("architectures", "draft_vocab_size")}
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
            "transformer_layer_config": layer, "draft_vocab_size": draft_vocab, "norm_before_residual": False,
            "target_hidden_size": HIDDEN, "eagle_aux_hidden_state_layer_ids": aux,
            "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                   "verifier": {"name_or_path": "tiny-llama", "architectures": ["LlamaForCausalLM"]}}}


def head_tensors(draft_vocab: int, seed: int = 1, target_hidden: int = HIDDEN) -> dict[str, torch.Tensor]:
    """Random weights under the EAGLE authors' names; the draft vocabulary is every other target id first."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.2

    kv = KV_HEADS * HEAD_DIM
    draft_ids = torch.cat([torch.arange(0, VOCAB, 2), torch.arange(1, VOCAB, 2)])[:draft_vocab].sort().values
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[draft_ids] = True
    return {
        "fc.weight": rand(HIDDEN, 3 * target_hidden), "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": rand(draft_vocab, HIDDEN), "d2t": draft_ids - torch.arange(draft_vocab), "t2d": t2d,
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN), "midlayer.input_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": rand(kv, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": rand(kv, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
        "midlayer.mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
    }


def write_eagle(folder: Path, tensors: dict[str, torch.Tensor], config: dict) -> Path:
    """The EAGLE authors' layout: config.json and pytorch_model.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    torch.save({k: v.detach().clone() for k, v in tensors.items()}, folder / "pytorch_model.bin")
    return folder


def write_speculators(folder: Path, tensors: dict[str, torch.Tensor], config: dict) -> Path:
    """The speculators layout: layers.0. for midlayer., model.safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    renamed = {k.replace("midlayer.", "layers.0."): v.detach().clone().contiguous() for k, v in tensors.items()}
    save_file(renamed, str(folder / "model.safetensors"))
    return folder


def engine(head: Path | None, forward: str = "auto") -> RacerEngine:
    return RacerEngine(target(), None, "tiny-llama", eos_ids=frozenset(), forward=forward,
                       draft_model=None if head is None else str(head))


def aux_states(model: torch.nn.Module, ids: list[int], layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(lean capture, transformers' hidden_states) of the same layers over a causal prefill."""
    lean = lean_forward_for(model)
    assert lean is not None
    tokens = torch.tensor(ids)
    mask = TreeMaskBuilder(torch.float32, torch.device("cpu"), None).causal(0, len(ids))
    with torch.no_grad():  # not inference mode: a test trains a head on these states
        _, captured = lean(tokens, torch.arange(len(ids)), mask, TreeCache(LAYERS), capture=layers)
        out = model(input_ids=tokens[None], output_hidden_states=True)
    return captured, torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)


def test_lean_forward_captures_the_states_transformers_reports() -> None:
    lean, stock = aux_states(target(), PROMPT, (2, 4, 5))
    assert lean.shape == (len(PROMPT), 3 * HIDDEN)
    # The lean forward's batch-invariant attention kernel and transformers' SDPA sum in other orders.
    torch.testing.assert_close(lean, stock, rtol=1e-4, atol=1e-4)


def test_lean_forward_without_capture_returns_logits_alone() -> None:
    lean = lean_forward_for(target())
    mask = TreeMaskBuilder(torch.float32, torch.device("cpu"), None).causal(0, 3)
    with torch.inference_mode():
        out = lean(torch.tensor([1, 2, 3]), torch.arange(3), mask, TreeCache(LAYERS))
    assert isinstance(out, torch.Tensor) and out.shape == (3, VOCAB)


@pytest.mark.parametrize("layout", ["eagle", "speculators"])
def test_both_formats_read_back_to_the_same_head(tmp_path: Path, layout: str) -> None:
    tensors = head_tensors(48)
    if layout == "eagle":
        folder = write_eagle(tmp_path / "head", tensors, eagle_config(48))
    else:
        folder = write_speculators(tmp_path / "head", tensors, speculators_config(48, [1, 3, 6]))
    head = engine(folder).runtime.head
    assert head is not None
    assert head.aux_layers == ((2, 4, 5) if layout == "eagle" else (1, 3, 6))
    assert head.lm_head.shape == (48, HIDDEN)
    expected = tensors["d2t"] + torch.arange(48)
    assert torch.equal(head.draft_to_target, expected)
    torch.testing.assert_close(head.qkv[: HEADS * HEAD_DIM], tensors["midlayer.self_attn.q_proj.weight"])
    assert head.embed.data_ptr() == target().get_input_embeddings().weight.data_ptr()  # the target's, shared


@pytest.mark.parametrize(("forward", "total", "depth", "top_k"),
                         [("lean", 1, 5, 10), ("lean", 4, 2, 2), ("lean", 16, 0, 8), ("lean", 60, 5, 10),
                          ("stock", 24, 3, 4)])
def test_greedy_eagle3_with_a_random_head_equals_ar(tmp_path: Path, forward: str, total: int, depth: int,
                                                    top_k: int) -> None:
    eng = engine(write_eagle(tmp_path / "head", head_tensors(48), eagle_config(48)), forward)
    plain, _, _ = run(eng, PROMPT, method="ar", max_new_tokens=24)
    drafted, _, _ = run(eng, PROMPT, method="eagle3", max_new_tokens=24, total_token=total, depth=depth, top_k=top_k)
    assert drafted == plain


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained_head(tmp_path_factory.mktemp("eagle3"))


def trained_head(tmp_path: Path, steps: int = 100) -> Path:
    """A head trained for a few seconds on the target's own greedy continuation
    of PROMPT (full draft vocabulary): it then predicts the target's next tokens."""
    eng = engine(None)
    text, _, _ = run(eng, PROMPT, method="ar", max_new_tokens=120)
    sequence = PROMPT + text
    aux, _ = aux_states(target(), sequence, (2, 4, 5))
    torch.manual_seed(0)
    tensors = {k: v.clone().requires_grad_(k not in ("d2t", "t2d")) for k, v in head_tensors(VOCAB).items()}
    data = eagle_config(VOCAB)
    embed = target().get_input_embeddings().weight.detach()
    optimizer = torch.optim.Adam([v for v in tensors.values() if v.requires_grad], lr=3e-3)
    n = len(sequence) - 2
    ids, goal = torch.tensor(sequence[1:-1]), torch.tensor(sequence[2:])
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for _ in range(steps):
        head = head_from_tensors("trained", data, tensors, target().config, embed)
        out, _, _ = head.forward(aux[:n], ids, torch.arange(n), None, mask)
        loss = torch.nn.functional.nll_loss(head.log_probs(out), goal)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return write_eagle(tmp_path / "trained", tensors, data)


@pytest.mark.parametrize("forward", ["lean", "stock"])
def test_a_trained_head_has_drafts_accepted_and_stays_exact(trained: Path, forward: str) -> None:
    eng = engine(trained, forward)
    plain, _, plain_steps = run(eng, PROMPT, method="ar", max_new_tokens=40)
    drafted, accepted, steps = run(eng, PROMPT, method="eagle3", max_new_tokens=40)
    assert drafted == plain
    assert accepted[Source.HEAD] > 0
    assert steps < plain_steps


def test_sampled_eagle3_replies_follow_the_seed(trained: Path) -> None:
    """Sampling runs through racer's rule (one sample per visited node), whose
    exactness tests/core/test_sampling.py holds. The trained head knows one
    greedy continuation only, so once a sample leaves it its drafts are chance
    hits: acceptance is proved by the greedy test above, not here."""
    eng = engine(trained)
    config = GenerationConfig(method="eagle3", temperature=0.7, max_new_tokens=30, seed=5)
    first = list(eng.decoder().generate(PROMPT, config))
    again = list(eng.decoder().generate(PROMPT, config))
    assert [s.tokens for s in first] == [s.tokens for s in again]
    assert sum(len(s.tokens) for s in first) == 30


def test_a_conversation_switching_methods_stays_exact(trained: Path) -> None:
    """eagle3, then racer (no auxiliary states kept), then eagle3 again on the same cache."""
    eng = engine(trained)
    decoder, prompt = eng.decoder(), list(PROMPT)
    for method in ("eagle3", "racer", "eagle3"):
        config = GenerationConfig(method=method, max_new_tokens=20)
        reply = [t for step in decoder.generate(prompt, config) for t in step.tokens]
        plain, _, _ = run(eng, prompt, method="ar", max_new_tokens=20)
        assert reply == plain, method
        prompt = prompt + reply + [7, 11]


def test_eagle3_without_a_head_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="needs a draft head") as error:
        run(engine(None), PROMPT, method="eagle3", max_new_tokens=4)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("what", "message"), [("vocab", "vocabulary of 100"), ("hidden", "width 32")])
def test_a_head_for_another_target_is_refused_in_one_line(tmp_path: Path, what: str, message: str) -> None:
    if what == "vocab":
        folder = write_eagle(tmp_path / "head", head_tensors(48), eagle_config(48, vocab=100))
    else:
        folder = write_eagle(tmp_path / "head", head_tensors(48, target_hidden=32), eagle_config(48))
    with pytest.raises(ModelLoadError, match=message) as error:
        engine(folder)
    assert "\n" not in str(error.value)


def test_a_folder_without_a_head_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist") as error:
        engine(tmp_path / "missing")
    assert "\n" not in str(error.value)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="cannot read the EAGLE-3 head|no weights") as error:
        engine(tmp_path / "empty")
    assert "\n" not in str(error.value)


def test_the_step_inspector_names_the_head_and_its_tree() -> None:
    from racer_core.common.step_record import StepRecord

    record = StepRecord.build([5, 6, 7], [-1, 0, 0], [0, 1, 1], [0, Source.HEAD, Source.HEAD], [0, 0, 0],
                              [-1, -1, -1], [0, 1], 9, 3, 3, "head")
    assert [node.source for node in record.nodes[1:]] == ["draft head", "draft head"]
    assert "EAGLE-3" in record.why


def test_the_states_are_asked_for_only_while_eagle3_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = engine(write_eagle(tmp_path / "head", head_tensors(48), eagle_config(48)), "stock")
    model = eng.runtime.model
    asked: list[bool] = []
    forward = model.forward

    def spy(*args, **kwargs):
        asked.append(bool(kwargs.get("output_hidden_states")))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    run(eng, PROMPT, method="racer", max_new_tokens=6)
    assert asked and not any(asked)
    asked.clear()
    run(eng, PROMPT, method="eagle3", max_new_tokens=6)
    assert asked and all(asked)
