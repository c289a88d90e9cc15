"""Model families, one folder each (in the manner of torchtune's ``models/<family>/``).

A family's folder holds what is its own: the decoder and its ``FAMILY`` plug-in (``decoder.py``), its model
code, settings and sampler where it has them. What every family shares stays below, in
:mod:`streamgen.decoding` (the Decoder protocol, the plug-in shape, meter, acceptance, stops, numerics) and
:mod:`streamgen.models` (weights, checkpoints, hub cache, RoPE, tokenizers, scripted models).

- ``autoregressive/``: KV-cached greedy decode, one-forward verify (the others carry one for the text side);
- ``refusion/``: slot diffusion with a causal verifier (decoder, settings, the round engine ``slots``);
- ``bidirectional/``: LLaDA / Dream (decoder, sampler, settings, the in-project ``model``);
- ``diffusion_gemma/``: transformers' block diffusion (decoder, the denoising ``canvas``).

Above the folders: :mod:`~streamgen.families.registry` (the families listed explicitly, ``load_decoder``),
:mod:`~streamgen.families.cell_checks` (their cell checks without torch) and
:mod:`~streamgen.families.checkpoints` (a checkpoint against its family's model). A family folder never
imports these (tests/test_import_direction.py).
"""
