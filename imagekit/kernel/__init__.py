"""The kernel: records, labels, references, the vocabulary, and the engine and run-store ports."""
