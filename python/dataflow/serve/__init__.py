"""`dataflow serve`: the OpenAI HTTP API over continuous batching (needs the `serve` extra: aiohttp)."""
