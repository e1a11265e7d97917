"""Model access: finding a model, reading and checking its checkpoint, its
tokenizer and processor, and the verification forward (docs/design.md,
"Module map"). The engine calls `racer_core.models.loader.load`.

Importing this package imports nothing else: the app names the embedded
model (`racer_core.models.embedded`) without torch."""
