"""Adaptation to incomplete requests (paper §7): LoRA self-distillation on request prefixes.

``config`` (the recipe schema), ``leakage`` (evaluation splits refused), ``sources`` (training
requests), ``teacher`` (the plain model's answers, cached), ``pairs`` (prefix → answer),
``train`` + ``checkpoint`` (LoRA training, resumable), ``merge`` (merged folder + model YAML),
``pipeline`` (the stages over one recipe). No Ray, no Slurm: ``workflows/adapt.py`` runs the stages
here or through ``jobs/cluster/adapt_job.py``. See docs/adaptation.md.

Modules:

    config.py      the adaptation recipe's schema (configs/adapt/), paper §7 defaults, validate-all
    leakage.py     refuses training rows from evaluation splits: by shape (MBPP outside 601–974, HumanEval, …) and by content (every configured benchmark)
    sources.py     training requests: a benchmark-rendered split or a JSONL / hub corpus
    teacher.py     the plain model's greedy answers (and held drafts), cached as resumable Parquet
    pairs.py       prefix → answer pairs cut by the segmenter (prefix-to-answer, draft-refinement)
    train.py       LoRA training: answer-token loss, accumulation, seeded order, progress events
    checkpoint.py  atomic LoRA + optimizer checkpoints; latest; resume
    merge.py       merge_and_unload → model folder + generated configs/models/<name>.yaml
    curve.py       held-out requests; teacher-forced draft agreement per checkpoint; curve.jsonl (resumes exactly)
    estimate.py    the --dry-run time estimate: exact counts × the recipe's estimate.* rates
    pipeline.py    the stages over one recipe: pairs → train → merge (files under output.dir)
"""
