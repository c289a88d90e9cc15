"""The bidirectional family (LLaDA / Dream masked diffusion): the decoder (``decoder``), the official
samplers' knobs (``sampler``), settings and geometry without torch (``settings``) and the in-project
model with its checkpoint loading (``model``)."""
