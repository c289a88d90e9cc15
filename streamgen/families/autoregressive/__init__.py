"""The autoregressive family: KV-cached greedy decode and one-forward verify (``decoder``); the diffusion
families carry one of its decoders for their text side."""
