"""The plan: from what fits on a card to which micro-batch and accumulation to run, per memory lever (build.py)."""
