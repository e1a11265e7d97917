"""Hub ids resolve through a Hugging Face cache built locally; nothing here
reaches the network (a download is played by a stand-in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from racer_core.common.errors import ModelLoadError
from racer_core.engine.engine import load_engine
from racer_core.models import loader
from racer_core.testing import tiny_model, tiny_tokenizer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _snapshot(cache: Path, repo_id: str) -> Path:
    """The cache layout huggingface_hub writes: refs/main names the snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    folder = repo / "snapshots" / COMMIT
    tiny_model("qwen3").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return folder


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_cached_hub_id_loads_offline(hub_cache: Path) -> None:
    folder = _snapshot(hub_cache, "tiny-org/tiny-qwen3")
    source = loader.resolve("tiny-org/tiny-qwen3")
    assert source.folder == folder and source.hub_id == "tiny-org/tiny-qwen3"
    engine = load_engine("tiny-org/tiny-qwen3", device="cpu", dtype="float32")
    assert engine.info.model == "tiny-org/tiny-qwen3"


def test_a_missing_hub_id_offline_says_how_to_fetch_it(hub_cache: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such folder, and not in the Hugging Face cache.*hf download nobody/nothing") as caught:
        loader.resolve("nobody/nothing")
    assert "\n" not in str(caught.value)


def test_online_a_missing_hub_id_is_downloaded_with_progress(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []

    def stand_in(repo_id, *, cache_dir=None, local_files_only=False, tqdm_class=None, **kwargs):
        calls.append(local_files_only)
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        bar = tqdm_class(total=2_000_000, unit="B")
        bar.update(2_000_000)
        bar.close()
        return str(_snapshot(Path(cache_dir), repo_id))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", stand_in)
    source = loader.resolve("tiny-org/fresh")
    assert source.folder is None  # checking a name never downloads
    seen: list[tuple[str, float | None]] = []
    engine = load_engine("tiny-org/fresh", device="cpu", dtype="float32", progress=lambda m, f: seen.append((m, f)))
    assert engine.info.model == "tiny-org/fresh"
    assert ("Downloading tiny-org/fresh: 2 of 2 MB", 1.0) in seen
    assert calls == [True, True, False]


def test_a_failed_download_is_one_line_with_the_fetch_command(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def no_network(repo_id, *, local_files_only=False, **kwargs):
        raise LocalEntryNotFoundError("not cached") if local_files_only else OSError("network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    with pytest.raises(ModelLoadError, match="cannot download org/model: network is unreachable; fetch it first"):
        load_engine("org/model", device="cpu")
