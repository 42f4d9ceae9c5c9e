"""The command line: ``a2a-bridge`` and its verbs. Thin: each verb calls :mod:`server.api` or
reads files.
"""
