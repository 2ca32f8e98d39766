"""The papers' experiments as commands: `python -m model.experiments TABLE --scale S --work DIR`.

Each table (`tables.py`) is a list of the project's own commands (`plan.py`,
run by `model.recipes.runner`), at the scale the hardware allows
(`scales.py`), ending in DIR/TABLE.md (`report.py`) beside the papers' figures.
"""
