"""Files in and out: safetensors, Hugging Face model directories, training checkpoints, GGUF imports,
tokenizers, and the atomic writes and file checks they share. Loaders reject what the reference
implementation rejects and stay inside their directory."""
