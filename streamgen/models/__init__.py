"""Model loading: the family registry (registry), weights from every source (weights, checkpoint_io, gemma3_text),
checkpoint pre-flight (checkpoints), RoPE precision (rope), and the designed test models (scripted, scripted_tie, tokenizers)."""
