"""The scripted agent session behind ``sakur4 demo`` and ``bench/eviction.py``."""
