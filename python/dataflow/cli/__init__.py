"""The `dataflow` command (main.main, the installed entry point; `python -m dataflow.cli` runs it too)
and what only the command uses: the training run (train), the corpus, progress lines, loss and plan
plots, the MPI launcher, quantize and import-gguf."""
