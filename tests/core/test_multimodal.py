"""Images into prompts: loading, refusal by text models, placeholders kept
out of the automaton, and a chat that loses nothing on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig
from racer_core.engine.multimodal import load_image
from racer_core.testing import tiny_engine
from racer_core.testing.tiny_vl import tiny_image, tiny_vl_engine


def test_load_image_reads_a_picture_and_hashes_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "pic.png"
    tiny_image().save(path)
    image = load_image(path)
    assert image.pixels.size == (24, 16) and len(image.sha256) == 64
    assert load_image(path).sha256 == image.sha256


def test_bad_image_files_give_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="image not found"):
        load_image(tmp_path / "missing.png")
    text = tmp_path / "notes.png"
    text.write_text("not pixels")
    with pytest.raises(InputError, match="not a readable image") as caught:
        load_image(text)
    assert "\n" not in str(caught.value)


def test_a_text_model_refuses_an_image_and_keeps_the_chat(tmp_path: Path) -> None:
    path = tmp_path / "pic.png"
    tiny_image().save(path)
    conversation = tiny_engine("llama").new_conversation()
    with pytest.raises(InputError, match="reads text only"):
        list(conversation.send("hello", GenerationConfig(max_new_tokens=4), images=[load_image(path)]))
    assert conversation.messages == []


def test_image_placeholders_stay_out_of_the_retrieval_corpus() -> None:
    engine = tiny_vl_engine("qwen2_5_vl")
    conversation = engine.new_conversation()
    from racer_core.engine.multimodal import image_from_pixels

    image = image_from_pixels(tiny_image())
    list(conversation.send("The cat sat on the mat", GenerationConfig(method="racer", max_new_tokens=8), images=[image]))
    prompt = conversation.vision_prompt()
    assert engine.vision is not None
    placeholders = engine.vision.placeholder_ids
    assert placeholders & set(prompt.ids)  # the prompt has them...
    assert not placeholders & set(_seen(conversation))  # ...the automaton never saw them
    assert conversation.images == {0: (image,)}
    assert len(conversation.decoder.images) == 1


def test_a_changed_image_is_not_taken_from_the_cache() -> None:
    """Placeholders of two images are the same tokens; only the hash tells
    them apart, so a different image must be prefilled again."""
    from racer_core.engine.multimodal import image_from_pixels

    engine = tiny_vl_engine("qwen2_5_vl")
    config = GenerationConfig(method="ar", max_new_tokens=12)
    first, second = image_from_pixels(tiny_image(seed=1)), image_from_pixels(tiny_image(seed=2))
    shared = engine.new_conversation()
    list(shared.send("The cat", config, images=[first]))
    shared.messages.clear()
    shared.images.clear()
    reused = [p.token_id for e in shared.send("The cat", config, images=[second]) for p in e.pieces]
    fresh = [p.token_id for e in engine.new_conversation().send("The cat", config, images=[second]) for p in e.pieces]
    assert reused == fresh


def test_inline_image_tags_are_taken_out_of_the_text() -> None:
    from racer_core.engine.multimodal import split_inline_images

    assert split_inline_images("<image>cat.png</image> What is this?") == ("What is this?", ["cat.png"])
    assert split_inline_images("Compare <image> a b.png </image> and <image>c.jpg</image>") == (
        "Compare  and", ["a b.png", "c.jpg"])
    assert split_inline_images("no pictures") == ("no pictures", [])
    with pytest.raises(InputError, match="has no path"):
        split_inline_images("<image> </image> hi")


def test_inline_image_tags_attach_the_picture(tmp_path: Path) -> None:
    path = tmp_path / "pic.png"
    tiny_image(seed=4).save(path)
    engine = tiny_vl_engine("llava")
    config = GenerationConfig(method="ar", max_new_tokens=8)
    tagged = engine.new_conversation()
    inline = [p.token_id for e in tagged.send(f"<image>{path}</image> The cat", config) for p in e.pieces]
    attached = [p.token_id for e in engine.new_conversation().send("The cat", config, images=[load_image(path)])
                for p in e.pieces]
    assert inline == attached
    assert tagged.messages[0]["content"] == "The cat" and tagged.images[0][0].path == str(path)
    text_only = tiny_engine("llama").new_conversation()
    with pytest.raises(InputError, match="reads text only"):
        list(text_only.send(f"<image>{path}</image> hi", config))
    with pytest.raises(InputError, match="image not found"):
        list(text_only.send(f"<image>{tmp_path / 'gone.png'}</image> hi", config))
    assert text_only.messages == []


def _seen(conversation) -> list[int]:  # noqa: ANN001
    """The text racer's automaton was fed (nothing where racer never ran)."""
    racer = conversation.decoder.drafters.get("racer")
    return racer.seen if racer is not None else []
