"""Developer scripts (train and evaluate the tiny model, make the sample data); a package so tests and
benchmarks can import the training dialogues as ``scripts.dialogues``. Not installed."""
