"""Models Fleet ships: a scripted OpenAI-compatible model (replies a caller scripts) and a real local model.

Both serve ``fleet doctor --smoke`` as well as the tests, so they live here rather than in
``fleet_rlm.testing`` (which only tests and benchmarks import).
"""
