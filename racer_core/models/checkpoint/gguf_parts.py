"""The cache folder of a GGUF read in its own blocks: no dequantized copy.

Where the 4-bit kernel reads a GGUF's linears straight from the file
(gguf_blocks.py), the cache folder needs only what the file's blocks do not
give: the config, the tokenizer, and the tensors the kernel does not read
(the norms, biases, tensors of a block type it lacks). It is made from the
file's own fields and tensors where gguf_fields.py reads them, without
transformers; otherwise by transformers' own code, as the full copy would
be, keeping the first layer's q, k and v as well, so that the reader can
check the blocks' row order against transformers' (reader._checked). The
float32 copy of the whole model (gguf_dequantized.py) is made only when
something asks for it: `--dtype float32`, the transformers model of the
`hf` and `pld` methods, or a model this folder cannot serve.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from racer_core.common.errors import first_line
from racer_core.common.events import Progress
from racer_core.models.checkpoint.gguf_dequantized import (
    SOURCE,
    cache_folder,
    gguf_read_once,
    set_aside_if_damaged,
    write_folder,
)
from racer_core.models.checkpoint.gguf_table import tensor_table

log = logging.getLogger(__name__)
SUFFIX = "-blocks"
ROPE_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def blocks_folder(gguf: Path) -> Path:
    """The folder beside the dequantized one (gguf_dequantized.cache_folder), named by the same content key."""
    full = cache_folder(gguf)
    return full.with_name(full.name + SUFFIX)


def is_blocks_folder(folder: Path) -> bool:
    return folder.name.endswith(SUFFIX)


def cached_parts(gguf: Path, progress: Progress | None = None) -> Path | None:
    """The blocks folder of `gguf` if it is there whole (a damaged one is moved aside: None)."""
    folder = blocks_folder(gguf)
    set_aside_if_damaged(folder, progress, f"The cached parts of {gguf.name} were", "reading them again...")
    return folder if folder.exists() else None


def record_tensor_table(folder: Path, reader: Any) -> None:
    """Add the parse's tensor table to a parts folder made without one (by an
    earlier version), so that its later loads do not parse the file again; a
    cache that cannot be written keeps parsing, said in one log line."""
    import json
    import os

    source = folder / SOURCE
    try:
        about = json.loads(source.read_text())
        staging = source.with_name(f"{SOURCE}.{os.getpid()}")
        staging.write_text(json.dumps({**about, "tensor_table": tensor_table(reader)}))
        os.replace(staging, source)
    except (OSError, ValueError) as error:
        log.info("%s: cannot keep the tensor table (%s); the file is parsed at each load", folder.name, error)


def ensure_blocks_checkpoint(gguf: Path, reader: Any, progress: Progress | None = None) -> Path | None:
    """The blocks folder of `gguf`, made now if missing or damaged; None where
    it cannot be made (a family whose linears llama.cpp names otherwise, a
    file transformers' reader does not take this way): the dequantized copy
    serves then, as before, with one log line saying why. `reader` is the
    file parsed (checkpoint/gguf_file.py), shared with transformers' reading."""
    folder = blocks_folder(gguf)
    if cached_parts(gguf, progress) is not None:
        return folder
    if progress:
        progress(f"Reading {gguf.name}'s config, tokenizer and norms (first load only)...", None)
    try:
        made = write_parts_from_fields(gguf, folder, reader) or write_blocks_checkpoint(gguf, folder, reader)
    except Exception as error:  # transformers' GGUF reader raises many kinds; the full copy says it plainly
        log.warning("4-bit weights: cannot cache %s's parts without dequantizing it (%s); dequantizing it whole",
                    gguf.name, first_line(error))
        return None
    return folder if made else None


def write_parts_from_fields(gguf: Path, target: Path, reader: Any) -> bool:
    """Write the blocks folder of `gguf` at `target` from the file's own fields
    and tensors, without transformers (config and tokenizer by gguf_fields.py,
    the tensors the kernel does not read dequantized by gguf's numpy code, q
    and k rows put back in the checkpoint's order); False (nothing written)
    where gguf_fields declines the file or a tensor has no place here: then
    transformers makes it (write_blocks_checkpoint)."""
    import json

    import gguf as gguf_py
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from racer_core.models.checkpoint.files import CheckpointConfig
    from racer_core.models.checkpoint.gguf_blocks import all_names, family_fits, field_value, read_blocks, row_order
    from racer_core.models.checkpoint.gguf_fields import (
        config_from_fields,
        generation_config_from,
        tokenizer_from_fields,
    )
    from racer_core.models.families import family_of

    config = config_from_fields(reader)
    built = tokenizer_from_fields(reader) if config is not None else None
    family = family_of(CheckpointConfig(config)) if built is not None else None
    if config is None or built is None or family is None or not family_fits(family):
        return False
    layers, heads, kv_heads = config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]
    arch = field_value(reader, "general.architecture")
    in_blocks = set(read_blocks(reader.tensors, arch, family, layers, heads, kv_heads).weights)
    names = all_names(family, layers)
    kept: dict[str, Any] = {}
    for tensor in reader.tensors:
        name = names.get(tensor.name)
        if tensor.name in ROPE_TENSORS:
            continue  # rope factors: in the config's rope_parameters (gguf_fields.rope_scaling_from_fields)
        if name is None:
            log.info("%s: tensor %s has no place in the parts folder; reading it through transformers",
                     gguf.name, tensor.name)
            return False
        if name not in in_blocks:
            values = gguf_py.dequantize(tensor.data, tensor.tensor_type)  # F32 ones: views of the read-only map
            kept[name] = torch.from_numpy(np.array(row_order(values, tensor.name, arch, heads, kv_heads),
                                                   dtype=np.float32))
    tokenizer, tokenizer_config = built
    template = tokenizer_config.pop("chat_template", None)

    def fill(staging: Path) -> None:
        save_file(kept, str(staging / "model.safetensors"), metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        (staging / "generation_config.json").write_text(json.dumps(generation_config_from(config), indent=2))
        tokenizer.save(str(staging / "tokenizer.json"))
        (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
        if template is not None:
            (staging / "chat_template.jinja").write_text(template, encoding="utf-8")

    write_folder(gguf, target, fill, blocks=sorted(in_blocks), made_by="gguf fields", tensor_table=tensor_table(reader))
    return True


def write_blocks_checkpoint(gguf: Path, target: Path, reader: Any) -> bool:
    """Write the blocks folder of `gguf` at `target`; False (nothing written)
    where the file's family does not map onto llama.cpp's names."""
    import gguf as gguf_py
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from racer_core.models.checkpoint.files import CheckpointConfig
    from racer_core.models.checkpoint.gguf_blocks import family_fits, field_value, read_blocks
    from racer_core.models.families import family_of

    with gguf_read_once(reader):
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if hasattr(config, "quantization_config"):  # as the full copy's config: no quantizer named
            del config.quantization_config
        family = family_of(CheckpointConfig(config.to_dict()))
        if family is None or not family_fits(family):
            log.info("4-bit weights: %s's family names its linears otherwise; dequantizing it whole", gguf.name)
            return False
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        arch = field_value(reader, "general.architecture")
        in_blocks = set(read_blocks(reader.tensors, arch, family, int(config.num_hidden_layers), heads, kv_heads).weights)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # What transformers' own load does with each tensor (modeling_gguf_pytorch_utils.load_gguf_checkpoint),
        # for the tensors left out of the blocks only.
        parsed = gguf_utils.load_gguf_checkpoint(str(gguf), return_tensors=False)  # parsed once (gguf_read_once)
        architecture = parsed["config"].get("model_type")
        processor = gguf_utils.TENSOR_PROCESSORS.get(architecture, gguf_utils.TensorProcessor)(config=parsed["config"])
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
        mapping = gguf_utils.get_gguf_hf_weights_map(skeleton, processor)
        checked = {f"{family.layers}.0.{part}.weight" for part in family.qkv}
        kept: dict[str, Any] = {}
        for tensor in reader.tensors:
            name = mapping.get(tensor.name)
            if name is None or (name in in_blocks and name not in checked):
                continue
            values = gguf_py.dequantize(tensor.data, tensor.tensor_type)
            result = processor.process(weights=values, name=tensor.name, tensor_key_mapping=mapping,
                                       parsed_parameters=parsed)
            if result.name in mapping:
                kept[mapping[result.name]] = torch.from_numpy(np.array(result.weights, dtype=np.float32))

    # The config and generation config the full copy's save_pretrained writes (eos ids, the class, float32).
    config.architectures = [type(skeleton).__name__]
    config.dtype = torch.float32

    def fill(staging: Path) -> None:
        save_file(kept, str(staging / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(staging)
        skeleton.generation_config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    write_folder(gguf, target, fill, blocks=sorted(in_blocks - checked), tensor_table=tensor_table(reader))
    return True
