"""Benchmarks of hlo-compile: ``python -m bench`` (``__main__.py``) runs the GPU suite
(``gpu_suite.py``) and the CPU suite (``cpu_suite.py``) over the modules of ``catalog.py``
(``modules/*.hlo``); ``parse.py``, ``interpreter.py``, ``gelu.py`` and ``emitters.py`` are the
single-purpose scripts the suites reuse, and still run on their own."""
