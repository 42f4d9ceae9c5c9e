"""What the core stands on: config, tokens, the audit log, child environments, file helpers and
logging.
"""
