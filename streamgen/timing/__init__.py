"""The timing model (torch-free): when segments arrive (timeline, granularity), which prefix is drafted next and
what the user waits (policies), and what a step costs in wall seconds (costmodel). Shared by the live run and analysis.

Modules:

    timeline.py     typing model (rate, sentence pauses, pasted code) → segment arrival times
    granularity.py  word and fixed-character segmenters with the same guarantees; make_segmenter
    policies.py     drafting policies (every, latest, every_k, cap): schedule rule, post-hoc evaluate
    costmodel.py    step cost ≈ a · forwards + b · tokens fed, least-squares fit
    typists.py      a typist population (desktop, mobile presets): per-user speed, keystroke intervals, pauses, seeded
    keylog.py       keystroke-log replay: a JSONL log of timestamped text states → segment arrival times
    corrections.py  typos corrected after a delay: the text states sent per step (not prefixes), correction keystrokes, seeded
"""
