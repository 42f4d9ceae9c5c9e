"""Tunnels the app keeps up: ``ssh -N -R`` to each saved machine, supervised (plan.py is the
pure part, supervisor.py runs it, install.py writes a client's config over ssh)."""
