"""Sandboxes: where model-written code runs. The seam is in ``base``; the ``local`` backend in ``local``."""
