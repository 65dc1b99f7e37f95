"""The in-process agent that ``sofa-top launch`` injects into the workload's Python.

Everything in this package is pure standard library at import time and imports nothing from
sofa-top outside ``sofa_top.agent``: it runs inside the user's interpreter, which may be another
virtualenv where neither sofa-top nor its dependencies are installed.
"""
