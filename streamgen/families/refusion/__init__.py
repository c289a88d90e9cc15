"""The ReFusion family: slot diffusion on a causal model with an autoregressive verifier (``decoder``), its
settings and slot geometry without torch (``settings``) and its round engine (``slots``)."""
