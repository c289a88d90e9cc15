"""The model side every family shares: weights from every source (weights, checkpoint_io, gemma3_text), checkpoint
files and facts (checkpoint_files, checkpoints, checkpoint_tokens, hub_cache), RoPE precision (rope), and the
designed test models (scripted, scripted_tie, tokenizers). It imports no decoder and no family: the families
(streamgen.families) sit above it."""
