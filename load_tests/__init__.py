"""Benchmarks: offline engine throughput and online latency/throughput of OpenAI endpoints.

Modules run as CLIs: `python -m load_tests.offline`, `python -m load_tests.online`,
`python -m load_tests.compare`, `python -m load_tests.llama_server`. Results (JSON + PNG) land
in `load_tests/results/` (git-ignored).
"""
