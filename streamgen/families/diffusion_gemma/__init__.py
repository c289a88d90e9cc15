"""The DiffusionGemma family (transformers' block diffusion): the metered decoder (``decoder``) and one
canvas's denoising loop and verify rows (``canvas``)."""
