"""Results identity: the records and their Arrow schemas (records), the result files a reader may trust
(result_files), the cell and its fingerprint (cells), and the code version stamped on rows (version).

Modules:

    records.py       frozen PairRecord / StepRecord / RunRecord / ScoreRecord, their Arrow schemas, atomic Parquet I/O
    result_files.py  the result files a reader may trust: an explicit list per table, foreign files skipped with a warning each
    results_dir.py   one run per results directory (an flock, its holder named), the writable check, I/O errors named with their fix
    cells.py         the Cell (identity, settings, fingerprint, one label) carried grid → row; the composed system prompt
    manifest.py      merged/manifest.json: which merged file holds which shard (the one authority; written whole)
    compaction.py    per-shard files merged into one pairs + one steps file per batch, safe to kill at any step
    read_lock.py     readers hold a shared lock; a compaction deletes merged per-shard files only when no reader reads
    version.py       code version stamped on every row (git commit, +dirty)
"""
