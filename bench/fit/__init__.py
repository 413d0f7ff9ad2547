"""Fitting tools: they choose the cascade's tuned constants on DEV sets (``python -m bench.fit.answer_fit``,
``bench.fit.turn_fit``, ``bench.fit.tool_fit``); see docs/benchmarks.md."""
