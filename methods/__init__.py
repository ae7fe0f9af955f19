"""The source papers' own methods, plus template.py for a new submission."""
