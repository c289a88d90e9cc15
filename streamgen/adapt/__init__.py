"""Adaptation to incomplete requests (paper §7): LoRA self-distillation on request prefixes.

``config`` (the recipe schema), ``leakage`` (evaluation splits refused), ``sources`` (training
requests), ``teacher`` (the plain model's answers, cached), ``pairs`` (prefix → answer),
``train`` + ``checkpoint`` (LoRA training, resumable), ``merge`` (merged folder + model YAML),
``pipeline`` (the stages over one recipe). No Ray, no Slurm: ``workflows/adapt.py`` runs the stages
here or through ``jobs/cluster/adapt_job.py``. See docs/adaptation.md.
"""
