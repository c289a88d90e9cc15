"""Results identity: the records and their Arrow schemas (records), the result files a reader may trust
(result_files), the cell and its fingerprint (cells), and the code version stamped on rows (version)."""
