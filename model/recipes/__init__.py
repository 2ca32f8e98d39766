"""Recipes: the project's own command lines, in order, that rebuild a shipped artefact.

python -m model.recipes.defaults --dry-run     # the default models of assets/models/
"""
