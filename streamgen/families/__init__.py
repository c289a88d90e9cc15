"""Model families, one folder each (in the manner of torchtune's ``models/<family>/``).

A family's folder holds what is its own: its face (``__init__.py``, the family's ``DESCRIPTOR``: no torch), the
decoder and its ``FAMILY`` plug-in (``decoder.py``; ``plugin.py`` where the loader is long), its forward rule (``forward_rule.py``), and its model code,
settings and sampler where it has them; ``family.yaml``, data, says what the configuration must know of it. What every family shares stays below, in
:mod:`streamgen.decoding` (the Decoder protocol, the plug-in shape, meter, acceptance, stops, numerics) and
:mod:`streamgen.models` (weights, checkpoints, hub cache, RoPE, tokenizers, scripted models).

- ``autoregressive/``: KV-cached greedy decode, one-forward verify (the others carry one for the text side);
- ``refusion/``: slot diffusion with a causal verifier (decoder, settings, the round engine ``slots``);
- ``bidirectional/``: LLaDA / Dream (decoder, sampler, settings, the in-project ``model``);
- ``diffusion_gemma/``: transformers' block diffusion (decoder, the denoising ``canvas``).

Above the folders: :mod:`~streamgen.families.registry` (the families' descriptors listed explicitly; their
plug-ins, forward rules and cell checks; ``load_decoder``) and :mod:`~streamgen.families.checkpoint_match` (a
checkpoint against its family's model). Adding a family: a folder (face, ``family.yaml``, decoder, forward
rule) and one entry in the registry. A family folder never
imports these (tests/repo/test_import_direction.py).
"""
