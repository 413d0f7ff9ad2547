"""Entry points that start the system: ``python -m launcher`` (``./start_all.sh``) runs the
workers and the gateway (``launcher/supervisor.py``)."""
