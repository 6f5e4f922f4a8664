"""ember's tooling, apart from the product: `ember bench` (bench.py, the
model zoo in zoo.py and vision.py), `ember demo` (demo.py), the OpInfo sweep
(`python -m ember.tools.check ops`) and the real-model table
(models_report.py).  The compiler itself never imports this package."""
